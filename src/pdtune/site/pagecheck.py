"""What a reader sees, page by page, in headless Chromium at 1400 px: the book's page rules in one place.

``python -m pdtune.site.pagecheck HTML_ROOT [PAGE ...]`` opens the pages of a built book (``_build/html``, a
workbook's ``OUT/html``) and prints, per page, its words of prose and its rendered height, then every problem;
exit status 1 when there is one. ``tests/test_browser.py`` runs the same checks on the book, the test
mini-book and a workbook's pages. The rules:

* **offline**: no request leaves the machine, every chart drew an svg or canvas, every formula was typeset by
  MathJax, no script failed, no widget output without a kernel;
* **fits its column**: no table wider than the text column, no code block wider than its box;
* **commands stay commands**: no en or em dash where a command's ``--`` was (a dash that opens a word, or
  any dash inside code), no literal backtick in text (Markdown glued as text), no blockquote
  that begins with ``=`` (a line starting ``>=`` read as a quote);
* **length** (a page a class can read in one sitting): at most :data:`MAX_WORDS` words of prose and at most
  :data:`MAX_HEIGHT_PX` px of rendered height (:data:`MAX_SCREENS` screens of the 900 px window), folded
  solutions folded. Prose is the article's text without code cells, printed output, tables, math and charts.

Chromium is Debian's (``make chromium``), driven by Playwright; nothing is downloaded.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import json
import os
import re
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

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
    # Offline by construction: no name resolves but the loopback's, and whatever is not loopback goes to a
    # proxy on a port nothing listens on (an address written as digits needs no resolving).
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1",
    "--proxy-server=http://127.0.0.1:9",
]
#: The reader's window: screenshots, the width check and the length rule use it.
VIEWPORT = {"width": 1400, "height": 900}
#: The length rule (issue 21): about 2,500 words of prose and 7 screens of the 900 px window.
MAX_WORDS = 2500
MAX_SCREENS = 7
MAX_HEIGHT_PX = MAX_SCREENS * VIEWPORT["height"]
# Generous: MathJax and vega start after the load event; a slow CI machine must not fail a correct page.
RENDER_TIMEOUT_MS = 20_000

# Jupyter Book writes the root index.html as a redirect to the root document.
_REDIRECT = re.compile(r'<meta http-equiv="Refresh" content="0; url=([^"]+)"', re.IGNORECASE)
CHARTS_DRAWN = """() => [...document.querySelectorAll('.pdtune-chart')]
    .every(e => e.querySelector('svg, canvas') || e.classList.contains('pdtune-chart-error'))"""
# MathJax's script is deferred, so by the load event it has run and defined MathJax.startup; without it the
# page has no MathJax at all and waiting longer cannot help.
_MATH_DONE = """() => !(window.MathJax && window.MathJax.startup)
    || [...document.querySelectorAll('.math')].every(e => e.querySelector('mjx-container'))"""
_COLUMN = "document.querySelector('article.bd-article') || document.querySelector('main') || document.body"
# Tables and code blocks wider than the text column: a table whose box leaves the column's, a code block whose
# content is wider than its box (it would need a scroll bar). Hidden solutions are laid out too, so they count.
_TOO_WIDE = r"""() => {
  const column = COLUMN;
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
}""".replace("COLUMN", _COLUMN)
# Commands broken for pasting. Sphinx's smartquotes turns "--" into an en dash and "---" into an em dash in
# text (never in code): a dash that opens a word ("–max-model-len", not "throughput–interactivity") is such a
# command, and no code may hold a dash at all. A backtick outside code is Markdown that reached the page as text (a glued string
# shown with {glue:text}). A blockquote opening on "=" is a line that began with ">=".
_COMMANDS = r"""() => {
  const column = COLUMN;
  const found = [];
  const walker = document.createTreeWalker(column, NodeFilter.SHOW_TEXT);
  const around = (text, i) => text.slice(Math.max(0, i - 30), i + 30).replace(/\s+/g, ' ').trim();
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const parent = node.parentElement;
    if (!parent || parent.closest('script, style, .cell_input, mjx-container, .math')) { continue; }
    const text = node.nodeValue || '';
    const code = parent.closest('code, pre, kbd, samp, .highlight');
    const dash = code ? text.search(/[\u2013\u2014]/)
                      : text.search(/(^|[\s(\[\u201c"'])[\u2013\u2014](?=[A-Za-z-])/);
    if (dash >= 0 && !(code && parent.closest('.cell_output'))) {
      found.push(`a dash where a command's -- was: "${around(text, dash)}"`);
    }
    const tick = code ? -1 : text.indexOf('`');
    if (tick >= 0) {
      found.push(`a literal backtick in text (Markdown shown as text): "${around(text, tick)}"`);
    }
  }
  for (const quote of column.querySelectorAll('blockquote')) {
    const text = (quote.innerText || '').trim();
    if (text.startsWith('=')) {
      found.push(`a blockquote opening on "=" (a line that began with ">="): "${text.slice(0, 60)}"`);
    }
  }
  return found;
}""".replace("COLUMN", _COLUMN)
# Prose: the article's text without code cells, printed output, tables, math, charts and navigation.
# Solutions are folded (their text still counts as words; their height does not, as a reader sees it).
_LENGTH = r"""() => {
  const column = COLUMN;
  const copy = column.cloneNode(true);
  copy.querySelectorAll('.cell_input, pre, table, .math, mjx-container, script, style, .pdtune-chart, ' +
                        '.headerlink, nav, button, .pdtune-defaults').forEach(e => e.remove());
  const words = (copy.textContent || '').split(/\s+/).filter(w => /[A-Za-z0-9]/.test(w)).length;
  const height = Math.max(document.documentElement.scrollHeight, document.body.scrollHeight);
  return {words: words, height: height};
}""".replace("COLUMN", _COLUMN)


class ChromiumMissing(RuntimeError):
    """Debian's chromium is not installed (``make chromium``)."""


@dataclass
class PageReport:
    page: str
    charts: list[str] = field(default_factory=list)
    undrawn: list[str] = field(default_factory=list)
    math: int = 0
    math_untypeset: int = 0
    words: int = 0
    height: int = 0
    issues: list[str] = field(default_factory=list)

    @property
    def screens(self) -> float:
        return self.height / VIEWPORT["height"]

    def problems(self) -> list[str]:
        """Everything wrong with the page but its length."""
        found = list(self.issues)
        found += [f"{self.page}: chart #{c} has no svg or canvas" for c in self.undrawn]
        if self.math_untypeset:
            found.append(
                f"{self.page}: {self.math_untypeset} of {self.math} math elements not typeset by MathJax"
            )
        return found

    def length_problems(self, max_words: int = MAX_WORDS, max_height: int = MAX_HEIGHT_PX) -> list[str]:
        """The length rule: words of prose and rendered height (redirect pages have neither)."""
        found = []
        if self.words > max_words:
            found.append(f"{self.page}: {self.words:,} words of prose, more than {max_words:,}")
        if self.height > max_height:
            found.append(f"{self.page}: {self.height:,} px tall ({self.screens:.1f} screens), more than "
                         f"{max_height:,} px ({max_height / VIEWPORT['height']:.0f} screens)")
        return found


def is_local(url: str) -> bool:
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


class _Tab:
    """One browser tab that opens the pages one after another, its events going to the page being checked.

    A tab per page cost a new renderer process and a cold script cache each time: more than half the check's
    time. Events are watched, not intercepted: routing every request through Playwright turns Chromium's cache
    off. Nothing can leave the machine anyway (LAUNCH_ARGS resolve no host and proxy every non-loopback
    request to a closed port); a request that tries is reported.
    """

    def __init__(self, context: Any) -> None:
        self.page = context.new_page()
        self.report: PageReport | None = None
        self.page.on("request", lambda r: is_local(r.url) or self._note(f"request leaves the machine: {r.url}"))
        self.page.on("response", lambda r: r.status >= 400 and self._note(f"HTTP {r.status} {r.url}"))
        self.page.on("requestfailed",
                     lambda r: is_local(r.url) and self._note(f"request failed: {r.url} ({r.failure})"))
        self.page.on("pageerror", lambda e: self._note(f"script error: {e}"))

    def _note(self, what: str) -> None:
        if self.report is not None:
            self.report.issues.append(f"{self.report.page}: {what}")

    def check(self, base: str, root: Path, path: Path, screenshots: Path | None) -> PageReport:
        rel = path.relative_to(root).as_posix()
        report = PageReport(rel)
        redirect = _REDIRECT.search(path.read_text(encoding="utf-8", errors="replace"))
        if redirect:  # its target is a page of its own; here only check that it exists
            if not (path.parent / redirect.group(1)).is_file():
                report.issues.append(f"{rel}: redirects to missing {redirect.group(1)}")
            return report
        self.report = report
        try:
            self._inspect(base + rel, report, screenshots)
        finally:
            self.report = None
        return report

    def _inspect(self, url: str, report: PageReport, screenshots: Path | None) -> None:
        from playwright.sync_api import TimeoutError as PlaywrightTimeout

        page, rel = self.page, report.page
        page.goto(url, wait_until="load")
        report.charts = page.eval_on_selector_all(".pdtune-chart", "els => els.map(e => e.id)")
        report.math = page.locator(".math").count()
        for condition, present in ((CHARTS_DRAWN, report.charts), (_MATH_DONE, report.math)):
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
        report.issues.extend(f"{rel}: {what}" for what in page.evaluate(_COMMANDS))
        length = page.evaluate(_LENGTH)
        report.words, report.height = int(length["words"]), int(length["height"])
        if screenshots is not None:
            screenshots.mkdir(parents=True, exist_ok=True)
            shot = screenshots / (rel.replace("/", "__").removesuffix(".html") + ".png")
            page.screenshot(path=str(shot), full_page=True)


def check_pages(root: Path, screenshots: Path | None = None, only: Sequence[str] | None = None) -> list[PageReport]:
    """Open every page under ``root`` (or the ``only`` ones, relative to it) and report on each."""
    from playwright.sync_api import sync_playwright

    if not CHROMIUM.is_file():
        raise ChromiumMissing(f"{CHROMIUM} is missing: run `make chromium` (Debian package 'chromium')")
    root = Path(root)
    reports = []
    with serve(root) as base, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_ARGS, headless=True)
        try:
            context = browser.new_context(viewport=VIEWPORT, service_workers="block")
            context.set_default_timeout(RENDER_TIMEOUT_MS)
            tab = _Tab(context)
            for path in html_pages(root) if only is None else [root / p for p in only]:
                reports.append(tab.check(base, root, path, screenshots))
        finally:
            browser.close()
    return reports


def problems(reports: Sequence[PageReport]) -> list[str]:
    return [p for r in reports for p in r.problems()]


def length_problems(reports: Sequence[PageReport], exempt: Sequence[str] = ()) -> list[str]:
    """The length rule for every page but the ``exempt`` ones (paths relative to the HTML root)."""
    return [p for r in reports if r.page not in exempt for p in r.length_problems()]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pdtune.site.pagecheck",
        description="Check built pages in headless Chromium at 1400 px: offline, fits its column, commands "
        f"stay commands, at most {MAX_WORDS:,} words of prose and {MAX_HEIGHT_PX:,} px ({MAX_SCREENS} screens).",
    )
    parser.add_argument("root", type=Path, help="a built book's HTML folder (_build/html, OUT/html)")
    parser.add_argument("pages", nargs="*", help="pages relative to ROOT (default: every page)")
    parser.add_argument("--json", action="store_true", help="one JSON object per page")
    parser.add_argument("--screenshots", type=Path, help="write a full-page screenshot of each page here")
    args = parser.parse_args(argv)
    if not args.root.is_dir():
        print(f"pagecheck: {args.root}: not a folder", file=sys.stderr)
        return 2
    try:
        reports = check_pages(args.root, args.screenshots, only=args.pages or None)
    except ChromiumMissing as exc:
        print(f"pagecheck: {exc}", file=sys.stderr)
        return 2
    found = problems(reports) + length_problems(reports)
    if args.json:
        for r in reports:
            print(json.dumps({**asdict(r), "screens": round(r.screens, 2),
                              "problems": r.problems() + r.length_problems()}))
    else:
        width = max((len(r.page) for r in reports), default=4)
        print(f"{'page':<{width}}  {'words':>6}  {'px':>6}  screens")
        for r in reports:
            if r.height:
                print(f"{r.page:<{width}}  {r.words:>6,}  {r.height:>6,}  {r.screens:5.1f}")
        for line in found:
            print(line)
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
