"""Open every built page in headless Chromium (Debian's, driven by Playwright) and check what a reader sees,
with the rules of :mod:`pdtune.site.pagecheck`: no request leaves localhost, every chart drew an svg or canvas,
every formula was typeset by MathJax, no script failed, no dead widget, nothing is wider than the text column
at 1400 px (no table, no code block, measured in the DOM), commands stay commands (no en dash where ``--``
was, no literal backtick in text, no ``>=`` read as a blockquote), and every page keeps to the length rule
(at most 2,500 words of prose and 6,300 px, 7 screens). Screenshots of every page at that width go to
``_build/screenshots/``. The negative tests break a copy of the mini-book on purpose and require the check to
notice, so a check that cannot fail would fail here.

Run the same checks on your own pages after ``make book``:
``.venv/bin/python -m pdtune.site.pagecheck _build/html notebooks/05_prefill.html``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import ROOT, toc_chapters
from pdtune.site import pagecheck
from pdtune.site.pagecheck import PageReport, length_problems, problems

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("book")]

SCREENSHOTS = ROOT / "_build" / "screenshots"


def check_pages(root: Path, screenshots: Path | None = None, only: list[str] | None = None) -> list[PageReport]:
    """:func:`pdtune.site.pagecheck.check_pages`, failing the test (not erroring) without Chromium."""
    try:
        return pagecheck.check_pages(root, screenshots, only)
    except pagecheck.ChromiumMissing as exc:
        pytest.fail(str(exc), pytrace=False)


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


def test_check_catches_a_command_broken_for_pasting(mini_book: Path, tmp_path: Path) -> None:
    broken = ("<p>Run pdtune state qwen3.8-2.4t \u2013max-model-len 9216, so `pdtune.perfmodel` predicted it.</p>"
              "<p><code>pdtune plan m \u2013\u2013max-gpus 8</code></p><blockquote><p>= 20 tokens/s per user</p>"
              "</blockquote></article>")
    root = _broken_copy(mini_book, tmp_path, "math.html", "</article>", broken)
    found = problems(check_pages(root, only=["math.html"]))
    assert sum("a dash where a command's -- was" in p for p in found) == 2, found
    assert any("a literal backtick in text" in p and "pdtune.perfmodel" in p for p in found), found
    assert any("a blockquote opening on" in p for p in found), found


def test_prose_keeps_its_double_hyphens_and_a_leading_greater_or_equal(mini_reports: dict[str, PageReport],
                                                                       mini_book: Path) -> None:
    """The real _config.yml turns no "--" into a dash (smartquotes), and ">=" stays text."""
    from bs4 import BeautifulSoup

    text = BeautifulSoup((mini_book / "math.html").read_text(encoding="utf-8"), "html.parser").get_text()
    assert "pdtune state qwen3.8-2.4t --max-model-len 9216" in text
    assert "\u2013" not in text and ">= 20 tokens/s per user" in text
    assert mini_reports["math.html"].problems() == []


def test_length_rule_counts_prose_and_height(mini_reports: dict[str, PageReport], mini_book: Path,
                                             tmp_path: Path) -> None:
    math = mini_reports["math.html"]
    assert 20 < math.words < 200 and 0 < math.height < pagecheck.MAX_HEIGHT_PX
    assert math.length_problems() == []
    filler = "<p>" + " ".join(["word"] * 3000) + "</p>" + '<div style="height: 7000px"></div></article>'
    root = _broken_copy(mini_book, tmp_path, "math.html", "</article>", filler)
    report = check_pages(root, only=["math.html"])[0]
    assert report.words > 3000 and report.height > 7000
    found = report.length_problems()
    assert any("words of prose, more than 2,500" in p for p in found), found
    assert any("screens), more than 6,300 px (7 screens)" in p for p in found), found
    assert length_problems([report], exempt=["math.html"]) == []


# --- the real book ------------------------------------------------------------------------------------


def test_every_page_of_the_book_renders_offline(book_reports: list[PageReport]) -> None:
    reports = book_reports
    assert problems(reports) == []
    pages = {r.page for r in reports}
    for entry, _ in toc_chapters():
        assert f"{entry.removesuffix('.md')}.html" in pages


#: Pages still over the length rule, each with who is shortening it. A page listed here must still be over
#: (else take it off the list); every other page must keep within 2,500 words and 6,300 px.
LENGTH_PENDING: dict[str, str] = {}


@pytest.fixture(scope="module")
def book_reports(built_book: Path) -> list[PageReport]:
    return check_pages(built_book, screenshots=SCREENSHOTS)


def test_every_page_of_the_book_keeps_to_the_length_rule(book_reports: list[PageReport]) -> None:
    found = length_problems(book_reports, exempt=list(LENGTH_PENDING))
    assert found == [], "\n".join(found)
    still_over = {r.page for r in book_reports if r.length_problems()}
    shortened = sorted(set(LENGTH_PENDING) - still_over)
    assert shortened == [], f"within the length rule now, take them off LENGTH_PENDING: {shortened}"
