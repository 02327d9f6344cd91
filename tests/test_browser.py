"""Open every built page in headless Chromium (Debian's, driven by Playwright) and check what a reader sees:
no request leaves localhost, every chart drew an svg or canvas, every formula was typeset by MathJax, no
script failed, no dead widget, and nothing is wider than the text column at 1400 px (no table, no code
block, measured in the DOM: a table's box inside the column's, a ``pre``'s content inside its own box).
Screenshots of every page at that width go to ``_build/screenshots/``. The negative tests break a copy of
the mini-book on purpose and require the check to notice, so a check that cannot fail would fail here.
"""

from __future__ import annotations

import functools
import http.server
import os
import re
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from conftest import ROOT, toc_chapters

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("book")]

CHROMIUM = Path(os.environ.get("CHROMIUM", "/usr/bin/chromium"))
LAUNCH_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = ROOT / "_build" / "screenshots"
#: The reader's window: screenshots and the width check use it.
VIEWPORT = {"width": 1400, "height": 900}
# Generous: MathJax and vega start after the load event; a slow CI machine must not fail a correct page.
RENDER_TIMEOUT_MS = 20_000

# Jupyter Book writes the root index.html as a redirect to the root document.
_REDIRECT = re.compile(r'<meta http-equiv="Refresh" content="0; url=([^"]+)"', re.IGNORECASE)
_CHARTS_DRAWN = """() => [...document.querySelectorAll('.pdtune-chart')]
    .every(e => e.querySelector('svg, canvas') || e.classList.contains('pdtune-chart-error'))"""
# MathJax's script is deferred, so by the load event it has run and defined MathJax.startup; without it the
# page has no MathJax at all and waiting longer cannot help.
_MATH_DONE = """() => !(window.MathJax && window.MathJax.startup)
    || [...document.querySelectorAll('.math')].every(e => e.querySelector('mjx-container'))"""
# Tables and code blocks wider than the text column: a table whose box leaves the column's, a code block whose
# content is wider than its box (it would need a scroll bar). Hidden solutions are laid out too, so they count.
_TOO_WIDE = r"""() => {
  const column = document.querySelector('article.bd-article') || document.querySelector('main');
  if (!column) { return []; }
  const edge = column.getBoundingClientRect();
  const found = [];
  for (const el of column.querySelectorAll('table')) {
    const box = el.getBoundingClientRect();
    if (box.width > 0 && (box.right > edge.right + 1 || box.width > edge.width + 1)) {
      found.push(`table ${Math.round(box.width)} px wide in a ${Math.round(edge.width)} px column: ` +
                 (el.innerText || '').slice(0, 60).replace(/\s+/g, ' '));
    }
  }
  for (const el of column.querySelectorAll('pre')) {
    if (el.clientWidth > 0 && el.scrollWidth > el.clientWidth + 1) {
      found.push(`code ${el.scrollWidth} px wide in a ${el.clientWidth} px box: ` +
                 (el.textContent || '').trim().split('\n')[0].slice(0, 60));
    }
  }
  return found;
}"""


@dataclass
class PageReport:
    page: str
    charts: list[str] = field(default_factory=list)
    undrawn: list[str] = field(default_factory=list)
    math: int = 0
    math_untypeset: int = 0
    issues: list[str] = field(default_factory=list)

    def problems(self) -> list[str]:
        found = list(self.issues)
        found += [f"{self.page}: chart #{c} has no svg or canvas" for c in self.undrawn]
        if self.math_untypeset:
            found.append(
                f"{self.page}: {self.math_untypeset} of {self.math} math elements not typeset by MathJax"
            )
        return found


def _is_local(url: str) -> bool:
    parts = urlsplit(url)
    if parts.scheme in {"data", "blob", "about", "file"}:
        return True
    return parts.scheme in {"http", "https", "ws", "wss"} and parts.hostname in {"127.0.0.1", "localhost"}


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - signature from the base class
        pass


@contextmanager
def serve(root: Path) -> Iterator[str]:
    """Serve ``root`` on 127.0.0.1 (file:// would block MathJax's web fonts as cross-origin)."""
    handler = functools.partial(_QuietHandler, directory=root)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def html_pages(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.html") if not {"_static", "_sources", "_images"} & set(p.parts))


def _check_page(context, base: str, root: Path, path: Path, screenshots: Path | None) -> PageReport:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    rel = path.relative_to(root).as_posix()
    report = PageReport(rel)
    redirect = _REDIRECT.search(path.read_text(encoding="utf-8", errors="replace"))
    if redirect:  # its target is a page of its own; here only check that it exists
        if not (path.parent / redirect.group(1)).is_file():
            report.issues.append(f"{rel}: redirects to missing {redirect.group(1)}")
        return report
    page = context.new_page()

    def route(r) -> None:
        if _is_local(r.request.url):
            r.continue_()
        else:  # blocked, so the check itself never reaches the internet
            report.issues.append(f"{rel}: request leaves the machine: {r.request.url}")
            r.abort()

    page.route("**/*", route)
    page.on("response", lambda r: r.status >= 400 and report.issues.append(f"{rel}: HTTP {r.status} {r.url}"))
    page.on(
        "requestfailed",
        lambda r: _is_local(r.url) and report.issues.append(f"{rel}: request failed: {r.url} ({r.failure})"),
    )
    page.on("pageerror", lambda e: report.issues.append(f"{rel}: script error: {e}"))
    try:
        page.goto(base + rel, wait_until="load")
        report.charts = page.eval_on_selector_all(".pdtune-chart", "els => els.map(e => e.id)")
        report.math = page.locator(".math").count()
        for condition, present in ((_CHARTS_DRAWN, report.charts), (_MATH_DONE, report.math)):
            if present:
                try:
                    page.wait_for_function(condition, timeout=RENDER_TIMEOUT_MS)
                except PlaywrightTimeout:
                    pass  # reported below, element by element
        report.undrawn = page.eval_on_selector_all(
            ".pdtune-chart", "els => els.filter(e => !e.querySelector('svg, canvas')).map(e => e.id)"
        )
        report.math_untypeset = page.eval_on_selector_all(
            ".math", "els => els.filter(e => !e.querySelector('mjx-container')).length"
        )
        if page.locator("mjx-merror").count():
            report.issues.append(f"{rel}: MathJax reported a TeX error")
        if page.locator('script[type="application/vnd.jupyter.widget-view+json"]').count():
            report.issues.append(f"{rel}: a widget output with no kernel behind it")
        report.issues.extend(f"{rel}: {what}" for what in page.evaluate(_TOO_WIDE))
        if screenshots is not None:
            screenshots.mkdir(parents=True, exist_ok=True)
            shot = screenshots / (rel.replace("/", "__").removesuffix(".html") + ".png")
            page.screenshot(path=str(shot), full_page=True)
    finally:
        page.close()
    return report


def check_pages(
    root: Path, screenshots: Path | None = None, only: list[str] | None = None
) -> list[PageReport]:
    """Open every page under ``root`` (or the ``only`` ones) and report what is wrong with each."""
    from playwright.sync_api import sync_playwright

    if not CHROMIUM.is_file():
        pytest.fail(f"{CHROMIUM} is missing: run `make chromium` (Debian package 'chromium')", pytrace=False)
    reports = []
    with serve(root) as base, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_ARGS, headless=True)
        try:
            context = browser.new_context(viewport=VIEWPORT, service_workers="block")
            context.set_default_timeout(RENDER_TIMEOUT_MS)
            for path in html_pages(root) if only is None else [root / p for p in only]:
                reports.append(_check_page(context, base, root, path, screenshots))
        finally:
            browser.close()
    return reports


def problems(reports: list[PageReport]) -> list[str]:
    return [p for r in reports for p in r.problems()]


# --- the mini-book: the check passes on a good build and fails on broken ones -----------------------------


@pytest.fixture(scope="module")
def mini_reports(mini_book: Path) -> dict[str, PageReport]:
    return {r.page: r for r in check_pages(mini_book)}


def test_mini_book_passes_the_check(mini_reports: dict[str, PageReport]) -> None:
    assert problems(list(mini_reports.values())) == []


def test_mini_book_charts_render_with_their_ids(mini_reports: dict[str, PageReport]) -> None:
    charts = mini_reports["charts.html"]
    assert charts.charts[0] == "pdtune-fixture-line"
    assert "pdtune-fixture-slider" in charts.charts
    assert len(charts.charts) == 3 and charts.undrawn == []


def test_mini_book_math_is_typeset(mini_reports: dict[str, PageReport]) -> None:
    math = mini_reports["math.html"]
    assert math.math >= 3  # inline, display and the solution's inline formula
    assert math.math_untypeset == 0


def _broken_copy(mini_book: Path, tmp_path: Path, page: str, old: str, new: str) -> Path:
    root = tmp_path / "html"
    shutil.copytree(mini_book, root)
    target = root / page
    text = target.read_text(encoding="utf-8")
    assert old in text, f"fixture page {page} no longer contains {old!r}"
    target.write_text(text.replace(old, new), encoding="utf-8")
    return root


def test_check_catches_a_broken_bundle_path(mini_book: Path, tmp_path: Path) -> None:
    root = _broken_copy(
        mini_book, tmp_path, "charts.html", "_static/vega/pdtune-vega.js", "_static/vega/missing.js"
    )
    found = problems(check_pages(root, only=["charts.html"]))
    assert "charts.html: chart #pdtune-fixture-line has no svg or canvas" in found
    assert any("HTTP 404" in p and "missing.js" in p for p in found)


def test_check_catches_a_request_to_the_internet(mini_book: Path, tmp_path: Path) -> None:
    cdn = '<script src="https://cdn.example.invalid/lib.js"></script></head>'
    root = _broken_copy(mini_book, tmp_path, "index.html", "</head>", cdn)
    found = problems(check_pages(root, only=["index.html"]))
    assert found == ["index.html: request leaves the machine: https://cdn.example.invalid/lib.js"]


def test_check_catches_a_table_and_code_wider_than_the_column(mini_book: Path, tmp_path: Path) -> None:
    cells = "".join(f"<td>column&nbsp;number&nbsp;{i}&nbsp;of&nbsp;a&nbsp;frame</td>" for i in range(30))
    wide = f'<table><tr>{cells}</tr></table><pre>{"x = 1  # " * 60}</pre></article>'
    root = _broken_copy(mini_book, tmp_path, "math.html", "</article>", wide)
    found = problems(check_pages(root, only=["math.html"]))
    assert any(p.startswith("math.html: table ") and "px column" in p for p in found), found
    assert any(p.startswith("math.html: code ") for p in found), found


def test_check_catches_math_left_untypeset(mini_book: Path, tmp_path: Path) -> None:
    root = _broken_copy(
        mini_book, tmp_path, "math.html", "_static/mathjax/tex-chtml.js", "_static/mathjax/gone.js"
    )
    found = problems(check_pages(root, only=["math.html"]))
    assert any(p.startswith("math.html:") and "not typeset by MathJax" in p for p in found)


# --- the real book ------------------------------------------------------------------------------------


def test_every_page_of_the_book_renders_offline(built_book: Path) -> None:
    reports = check_pages(built_book, screenshots=SCREENSHOTS)
    assert problems(reports) == []
    pages = {r.page for r in reports}
    for entry, _ in toc_chapters():
        assert f"{entry.removesuffix('.md')}.html" in pages
