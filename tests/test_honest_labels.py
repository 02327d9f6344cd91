"""No rendered chapter page calls modeled data measured (issue 15, "Honest evidence").

The check reads the built HTML, section by section (each ``<section>`` whose heading is an ``h2`` or deeper):

* a **modeled section** is one with a chart whose subtitle is the "Modeled —" of
  :func:`pdtune.charts.style.modeled_title`, or whose prose says its data is modeled ("as pdtune models it",
  "modeled by pdtune"), and that neither draws a "Measured —" chart nor names a real source (InferenceX,
  aiconfigurator's silicon runs): a section that sets measurements beside predictions labels each chart;
* in a modeled section, no sentence and no table header says "measured" unless it negates it ("not measured",
  "not a measurement") or names a real source (InferenceX, aiconfigurator's silicon runs, a start-up log, the
  article's own measurement);
* anywhere, no sentence says "the data agrees" / "the data disagrees": the book says what the model predicts or
  what the sweep shows;
* every chart whose subtitle says modeled and that has no "Measured —" line carries no "measured" in its title,
  axis titles, legend titles or the labels its marks are coloured or dashed by.

The planted pages at the bottom prove the checker catches each kind of mislabel.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bs4 import BeautifulSoup, Tag

MODELED = "Modeled —"
MEASURED = "Measured —"
MEASURED_WORD = re.compile(r"\bmeasur(?:ed|ement|ements)\b", re.I)
#: A sentence that says "measured" honestly: it negates it, or it names where real measurements come from.
EXCUSED = re.compile(
    r"not (?:a )?measur|never measured|nor measured|InferenceX|aiconfigurator|silicon|start-up|startup|"
    r"\blog\b|GSM8K|accuracy|the article's (?:own )?measur|article measures|measure (?:yours|your|a few)|"
    r"your own measurements|replace .* with your|measured on its own|measured end to end|real |\brun \d", re.I)
AGREES = re.compile(r"\bthe data (?:agrees|disagrees)\b|\bdata agrees only in part\b", re.I)
MODELED_PROSE = re.compile(r"as pdtune models it|modeled by pdtune|data is modeled\b|sweep is modeled\b", re.I)
#: Prose that names a real measured source: such a section sets measurements beside predictions.
REAL_SOURCE = re.compile(r"InferenceX|aiconfigurator|silicon", re.I)
SPEC = re.compile(r"-spec$")


def _specs(node: Tag) -> list[dict[str, Any]]:
    out = []
    for script in node.find_all("script", attrs={"type": "application/json"}):
        if SPEC.search(script.get("id", "")):
            out.append(json.loads(script.string.replace("<\\/", "</")))
    return out


def _walk(node: Any) -> Iterator[Any]:
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value)


def _subtitles(spec: dict[str, Any]) -> list[str]:
    title = spec.get("title")
    if not isinstance(title, dict):
        return []
    sub = title.get("subtitle", [])
    return [sub] if isinstance(sub, str) else list(sub)


def _labels(spec: dict[str, Any]) -> list[str]:
    """The chart's own words: title, axis and legend titles, and the values of its colour/dash/shape fields."""
    words: list[str] = []
    title = spec.get("title")
    words.append(title.get("text", "") if isinstance(title, dict) else str(title or ""))
    fields = set()
    for node in _walk(spec):
        enc = node.get("encoding") if isinstance(node.get("encoding"), dict) else {}
        for channel in ("x", "y", "color", "strokeDash", "shape"):
            e = enc.get(channel)
            if isinstance(e, dict):
                if isinstance(e.get("title"), str):
                    words.append(e["title"])
                if channel in ("color", "strokeDash", "shape") and isinstance(e.get("field"), str):
                    fields.add(e["field"])
                scale = e.get("scale")
                if isinstance(scale, dict) and isinstance(scale.get("domain"), list):
                    words += [str(v) for v in scale["domain"]]
    for rows in (spec.get("datasets") or {}).values():
        for row in rows:
            words += [str(row[f]) for f in fields if f in row]
    return words


def chart_problems(spec: dict[str, Any], where: str) -> list[str]:
    subs = _subtitles(spec)
    if not any(s.startswith(MODELED) for s in subs) or any(s.startswith(MEASURED) for s in subs):
        return []
    bad = sorted({w for w in _labels(spec) if MEASURED_WORD.search(w) and not EXCUSED.search(w)})
    return [f"{where}: modeled chart labelled {w!r}" for w in bad]


def _sentences(node: Tag) -> list[str]:
    node = copy.copy(node)  # a deep copy (bs4's Tag.__copy__), cheaper than printing and parsing it again
    for junk in node.select("table, pre, .cell_input, .pdtune-chart, script, style, .headerlink, .math, "
                            "mjx-container, section section"):
        junk.decompose()
    text = " ".join(el.get_text(" ", strip=True) for el in node.select("p, li"))
    return [s for s in re.split(r"(?<=[.;:])\s+(?=[A-Z(])", text) if s]


def _own(section: Tag) -> Tag:
    """The section without its subsections (each is checked on its own)."""
    own = copy.copy(section)
    for sub in own.find_all("section"):
        sub.decompose()
    return own


def page_problems(soup: BeautifulSoup, name: str) -> list[str]:
    """Every mislabel on one rendered page."""
    article = soup.select_one("article.bd-article") or soup
    # Code the page runs says nothing to the reader, and every section below copies what it holds (the first
    # chart inlines the 800 KB vega bundle): out first. Chart specs are JSON and stay.
    for script in article.find_all(["script", "style"]):
        if script.name == "style" or script.get("type") != "application/json":
            script.decompose()
    problems = []
    for spec in _specs(article):
        problems += chart_problems(spec, name)
    for section in article.find_all("section"):
        own = _own(section)
        heading = own.find(re.compile(r"^h[1-6]$"))
        title = heading.get_text(" ", strip=True).rstrip("#") if heading else "?"
        sentences = _sentences(own)
        for s in sentences:
            if AGREES.search(s):
                problems.append(f"{name} / {title}: {s[:160]!r}")
        if heading is None or heading.name == "h1":
            continue
        specs = _specs(own)
        subs = [s for spec in specs for s in _subtitles(spec)]
        if any(s.startswith(MEASURED) for s in subs) or any(REAL_SOURCE.search(s) for s in sentences):
            continue  # measurements beside predictions: each chart says which is which
        modeled = any(s.startswith(MODELED) for s in subs) or any(MODELED_PROSE.search(s) for s in sentences)
        if not modeled:
            continue
        headers = [th.get_text(" ", strip=True) for th in own.select("table thead th")]
        for s in sentences + headers:
            if MEASURED_WORD.search(s) and not EXCUSED.search(s):
                problems.append(f"{name} / {title}: calls modeled data measured: {s[:160]!r}")
    return problems


def book_problems(root: Path, pages: list[str]) -> list[str]:
    problems = []
    for page in pages:
        soup = BeautifulSoup((root / page).read_text(encoding="utf-8"), "html.parser")
        problems += page_problems(soup, page)
    return problems


# ----------------------------------------------------------------------------------------- the real book


@pytest.mark.slow
@pytest.mark.xdist_group("book")
def test_no_rendered_chapter_calls_modeled_data_measured(built_book: Path) -> None:
    pages = sorted(p.relative_to(built_book).as_posix() for p in (built_book / "notebooks").glob("*.html"))
    assert len(pages) >= 8, pages
    problems = book_problems(built_book, pages)
    assert problems == [], "\n".join(problems)


# --------------------------------------------------------------------------------- the checker itself


def _chart(subtitle: list[str], legend: list[str], chart_id: str = "c") -> str:
    spec = {"title": {"text": "Throughput", "subtitle": subtitle},
            "encoding": {"color": {"field": "kind", "type": "nominal", "title": "line"}},
            "datasets": {"d": [{"kind": k} for k in legend]}}
    return f'<script type="application/json" id="{chart_id}-spec">{json.dumps(spec)}</script>'


def _page(body: str) -> BeautifulSoup:
    return BeautifulSoup(f'<article class="bd-article"><section><h1>Chapter</h1>{body}</section></article>',
                         "html.parser")


MODELED_CHART = _chart(["Modeled — pdtune.perfmodel roofline model; not a measurement"], ["TP4", "TP8"])


@pytest.mark.parametrize(("body", "caught"), [
    # the sentence the issue quotes, over a modeled sweep
    (f"<section><h2>Predicting</h2>{MODELED_CHART}<p>Across 3 configurations, the prediction is within 10 % "
     "of the measured throughput per GPU at 5 of 9 points.</p></section>", 1),
    # "the data agrees" anywhere
    ("<section><h2>Findings</h2><p>The article: TP4 wins. This sweep: TP4; the data agrees (2 of 2).</p>"
     "</section>", 1),
    # a modeled chart whose legend says measured
    (f"<section><h2>Curves</h2>{_chart(['Modeled — pdtune; not a measurement'], ['measured', 'predicted'])}"
     "</section>", 1),
    # a modeled section (by its prose) with a "measured" table header
    ("<section><h2>Sweep</h2><p>This is the article's sweep as pdtune models it.</p><table><thead><tr>"
     "<th>measured tps per gpu</th></tr></thead><tbody><tr><td>1</td></tr></tbody></table></section>", 1),
    # honest: a chart that labels both kinds, and sentences that negate or name the real source
    (f"<section><h2>Real</h2>{_chart(['Measured — silicon runs', 'Modeled — pdtune; not a measurement'], ['measured', 'modeled'])}"
     "<p>The points are measured by aiconfigurator's silicon runs.</p></section>", 0),
    (f"<section><h2>Model</h2>{MODELED_CHART}<p>The data is modeled by pdtune, not measured.</p>"
     "<p>Rate matching is within 10 % of the modeled sweep at 5 of 9 points.</p></section>", 0),
])
def test_the_checker_catches_a_planted_mislabel(body: str, caught: int) -> None:
    problems = page_problems(_page(body), "planted.html")
    assert len(problems) == caught, problems
