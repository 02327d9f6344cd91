"""Chapters 5-7 (prefill isolation, decode isolation, the disaggregated frontier): their shape, their
numbers, and their runs for every bundled parameter set.

Fast checks read the MyST sources: the label and title, three "what you'll learn" bullets, a typed
parameters cell of Scenario names with Scenario's defaults, equations labelled with the chapter's label,
a takeaway after the derivations, at least two exercises with folded solutions that call pdtune, "where
this goes next", every glued key glued in code, unique chart ids, and no computed number typed into the
prose (the scanner of ``tests/test_prose_numbers.py``).

Slow checks read each chapter's run for the article's parameters (the book build's) and for the files in
``data/params/`` that ``tests/test_parameter_sets.py`` does not check (the workbook's; a scenario without prefill
or decode sweeps must say so and still run), each executed once per session (``tests/chapter_runs.py``), and
drive the built book in Chromium: the SLA slider moves the pick, the legend isolates a configuration.
"""

from __future__ import annotations

import ast
import re
import typing
from pathlib import Path
from typing import Any

import jupytext
import nbformat
import pytest

import test_prose_numbers as prose
from chapter_runs import Runs, group
from conftest import article_scenario
from pdtune.scenario import Scenario
from pdtune.workbook import load_parameters

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
PARAMS = ROOT / "data" / "params"
CHAPTERS = {"05_prefill": "prefill", "06_decode": "decode", "07_frontier": "frontier"}

#: Numbers these chapters may type besides the article's tables and the structural ones of chapters 1-4:
#: milliseconds per second (and the article's decode workload 1/1000), the article's concurrency range
#: (1 to 2560), the year in InferenceX's copyright line that the attribution repeats.
ALLOWED = {"1000", "2560", "2026"}
#: Inputs the exercises choose.
EXERCISE_INPUTS = {
    "05_prefill": {"32768"},  # 32k-token prompts
    "06_decode": {"0.7", "64", "0.95"},  # acceptance 0.7 at 64 requests; gpu_memory_utilization 0.95
    "07_frontier": {"100"},  # an SLA of 100 tokens/s per user
}


def declared_parameters(notebook: nbformat.NotebookNode) -> dict[str, Any]:
    """The parameters cell as papermill reads it: name -> Parameter (type, default, help)."""
    from papermill.translators import PythonTranslator

    cell = next(c for c in notebook.cells if "parameters" in c.get("metadata", {}).get("tags", []))
    return {p.name: p for p in PythonTranslator.inspect(cell)}


def _text(chapter: str) -> str:
    return (NOTEBOOKS / f"{chapter}.md").read_text(encoding="utf-8")


def _code(chapter: str) -> str:
    notebook = jupytext.read(NOTEBOOKS / f"{chapter}.md")
    return "\n".join(c.source for c in notebook.cells if c.cell_type == "code")


# ------------------------------------------------------------------------------------------ shape


@pytest.mark.parametrize(("chapter", "label"), CHAPTERS.items())
def test_label_title_and_what_youll_learn(chapter: str, label: str) -> None:
    text = _text(chapter)
    assert re.search(rf"^\({label}\)=\n# \S", text, re.M), "label line right above the title"
    learn = text.split("**What you'll learn**", 1)[1].split("\n## ", 1)[0]
    assert len(re.findall(r"^- ", learn, re.M)) == 3
    assert "## Where this goes next" in text


@pytest.mark.parametrize(("chapter", "label"), CHAPTERS.items())
def test_equations_are_labelled_with_the_chapter_and_followed_by_takeaways(chapter: str, label: str) -> None:
    text = _text(chapter)
    labels = re.findall(r"^\$\$ \(([\w-]+)\)$", text, re.M)
    assert len(labels) >= 3 and all(name.startswith(f"{label}-") for name in labels), labels
    assert len(re.findall(r"^\$\$$", text, re.M)) == len(labels)  # every display equation carries a label
    takeaways = text.count("```{admonition} Takeaway")
    assert takeaways >= 3
    # each section with a labelled equation ends with a takeaway before the next section starts
    for section in re.split(r"^## ", text, flags=re.M)[1:]:
        if re.search(r"^\$\$ \(", section, re.M) and not section.startswith("Exercises"):
            assert "```{admonition} Takeaway" in section, section.splitlines()[0]
    for ref in re.findall(r"\{eq\}`([\w-]+)`", text):
        assert any(ref in _text(c) for c in CHAPTERS), ref


def _pdtune_names(text: str) -> set[str]:
    """The names a chapter imports from pdtune (``from pdtune.chapters import prefill as ch5`` gives ch5)."""
    names = set()
    for imported in re.findall(r"^from pdtune[\w.]* import (.+)$", text, re.M):
        names.update(part.split(" as ")[-1].strip() for part in imported.split(","))
    return names


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_exercises_have_folded_solutions_that_call_pdtune(chapter: str) -> None:
    text = _text(chapter)
    exercises = re.findall(r"```\{exercise-start\}\n:label: ([\w-]+)", text)
    assert len(exercises) >= 2
    for name in exercises:
        assert name.startswith(CHAPTERS[chapter] + "-")
        body = text.split(f"```{{solution-start}} {name}\n:class: dropdown\n```", 1)[1].split("```{solution-end}", 1)[0]
        cells = re.findall(r"```\{code-cell\} ipython3\n(.*?)```", body, re.S)
        assert cells and any(re.search(rf"\b{re.escape(n)}[.(]", c) for c in cells for n in _pdtune_names(text)), name


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_parameters_are_scenario_fields_with_the_articles_defaults(chapter: str) -> None:
    hints = typing.get_type_hints(Scenario)
    defaults = article_scenario().to_dict()
    declared = declared_parameters(jupytext.read(NOTEBOOKS / f"{chapter}.md"))
    assert {"model", "isl"} & set(declared) or chapter == "07_frontier"
    for name, p in declared.items():
        assert name in hints, name
        wanted = "list[str]" if typing.get_origin(hints[name]) is tuple else hints[name].__name__
        assert p.inferred_type_name == wanted, (name, p.inferred_type_name)
        assert ast.literal_eval(p.default) == defaults[name], name
        assert p.help.strip(), name
    cell = next(c for c in jupytext.read(NOTEBOOKS / f"{chapter}.md").cells
                if "parameters" in c.get("metadata", {}).get("tags", []))
    lines = [line for line in cell.source.splitlines() if line.strip()]
    assert len(lines) == len(declared), "papermill cannot read a line (an '=' in a comment?)"
    kinds = {"05_prefill": {"prefill_results", "prefill_topologies", "gpus"},
             "06_decode": {"decode_results", "decode_topologies", "num_speculative_tokens"},
             "07_frontier": {"prefill_results", "decode_results", "disagg_results", "accuracy_threshold",
                             "min_tps_per_user", "prefill_topologies", "decode_topologies"}}
    assert kinds[chapter] <= set(declared)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_glued_key_is_glued_and_chart_ids_are_unique(chapter: str) -> None:
    text, code = _text(chapter), _code(chapter)
    used = set(re.findall(r"\{glue:text\}`([\w-]+)", text))
    glued = set(re.findall(r'glue\("([\w-]+)"', code))
    assert used and used <= glued, used - glued
    assert all(k.startswith(CHAPTERS[chapter] + "-") for k in glued)
    ids = re.findall(r'show\([^\n"]*?"([\w-]+)"', code)  # the first string of every show(...) call
    assert ids and len(ids) == len(set(ids))
    # a chapter shows charts only through pdtune's builders, and never computes in the notebook
    assert "import numpy" not in code and "groupby(" not in code and ".apply(" not in code


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_prose_types_no_computed_number(chapter: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(prose.EXERCISE_INPUTS, chapter, EXERCISE_INPUTS[chapter] | ALLOWED)
    problems = prose.offending_numbers(chapter, _text(chapter))
    assert not problems, "numbers typed into the prose (glue them):\n" + "\n".join(problems)


def test_the_real_data_section_is_labelled_and_attributed() -> None:
    text = _text("07_frontier")
    section = text.split("(frontier-real-data)=\n", 1)[1].split("\n## Exercises", 1)[0]
    assert section.startswith("## Real data")
    assert "{cite}`semianalysis_inferencex`" in section and "Apache License 2.0" in section
    assert "SemiAnalysis" in section and "inferencex_check" in section


# ------------------------------------------------------------------------------------------ runs


def _outputs(notebook: nbformat.NotebookNode) -> tuple[str, dict[str, str], list[str]]:
    """(printed and displayed text, glued values by key, errors)."""
    parts, glued, errors = [], {}, []
    for cell in notebook.cells:
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                parts.append(out["text"])
            elif out.get("output_type") == "error":
                errors.append(f"{out['ename']}: {out['evalue']}")
            elif "data" in out:
                for mime, value in out["data"].items():
                    if mime.startswith("application/papermill.record/"):
                        glued[mime] = str(value)
                    if mime.startswith("application/papermill.record/") or mime in ("text/plain", "text/html"):
                        parts.append(str(value))
    return "\n".join(parts), glued, errors


def _parameter_sets() -> list[Any]:
    """The article's defaults (the book's run), and the bundled sets that ``tests/test_parameter_sets.py`` does not
    check (it checks every chapter of four of them)."""
    from test_parameter_sets import SETS

    names = ["defaults"] + sorted(p.stem for p in PARAMS.glob("*.yaml") if p.stem not in SETS)
    return [pytest.param(n, marks=pytest.mark.xdist_group(group("article" if n == "defaults" else n))) for n in names]


@pytest.mark.slow
@pytest.mark.parametrize("chapter", CHAPTERS)
@pytest.mark.parametrize("params", _parameter_sets())
def test_chapter_runs_for_every_parameter_set(chapter: str, params: str, runs: Runs) -> None:
    """The chapter's run for the set (executed once per session, :mod:`chapter_runs`) has no error, took under a
    minute, and says what holds for its data."""
    declared = declared_parameters(jupytext.read(NOTEBOOKS / f"{chapter}.md"))
    scenario_values = {} if params == "defaults" else load_parameters(PARAMS / f"{params}.yaml").values()
    values = {k: v for k, v in scenario_values.items() if k in declared}
    run = runs["article" if params == "defaults" else params]
    notebook, seconds = run.notebooks[chapter], run.seconds[chapter]
    text, _, errors = _outputs(notebook)
    assert errors == []
    assert seconds < 60, f"{chapter} took {seconds:.1f} s"
    scenario = Scenario.from_mapping({k: v for k, v in values.items()})
    kind = {"05_prefill": "prefill", "06_decode": "decode"}.get(chapter)
    if kind and not getattr(scenario, f"{kind}_results"):
        assert f"no {kind}-only sweep (`{kind}_results` is empty)" in text
    if chapter == "07_frontier":
        assert "inferencex" in text
        if not scenario.prefill_results or not scenario.decode_results:
            assert "rate matching has nothing to combine" in text
    if params == "defaults":
        for line in ARTICLE_RUN[chapter]:
            assert line in text, line


#: What the article's parameters print: each finding of the article beside the winners computed from the
#: (modeled) sweeps, the reason for the high-concurrency winner, and the SLA pick at 50 tokens/s per user.
ARTICLE_RUN = {
    "05_prefill": [
        "The article: TP4DP2+EP is best at low concurrency. The model predicts TP8+EP at 1; TP4DP2+EP at 2; "
        "the prediction agrees only in part with the article",
        "The article: TP2DP4+EP takes over as concurrency rises. The model predicts TP2DP4+EP at 4–2,560; "
        "the prediction agrees with the article",
        "tuned on the article's two headline numbers and its findings",
    ],
    "06_decode": [
        "TEP8 with MTP is best at low concurrency. The model predicts TEP8+MTP at 1, 2; the prediction agrees",
        "TEP8 (without MTP) is best at 512 and 1024. The model predicts TEP8 at 512, 1,024; the prediction agrees",
        "TP4DP4+EP is best at high concurrency. The model predicts TP4DP4+EP at 2,048, 2,560; the prediction agrees",
        "At concurrency 2,560 the best is TP4DP4+EP",
        "the prediction agrees with the article",
    ],
    "07_frontier": [
        "The gate at 95% excludes none of the 7 deployments",
        "1xTP2DP4+EP : 1xTP4DP4+EP at concurrency 32",
        "9 of the 9 measured points are on the frontier",
    ],
}


# ------------------------------------------------------------------------------------------ the browser


@pytest.mark.slow
@pytest.mark.xdist_group("book")
def test_the_slider_and_the_legend_work_in_the_built_page(built_book: Path) -> None:
    from playwright.sync_api import sync_playwright

    from test_browser import CHROMIUM, LAUNCH_ARGS, RENDER_TIMEOUT_MS, _CHARTS_DRAWN, serve

    def label(page) -> str:
        return page.eval_on_selector("#pdtune-frontier-sla", """e => [...e.querySelectorAll('text')]
            .map(t => t.textContent).filter(s => s.includes('tok/s/user')).join('|')""")

    with serve(built_book) as base, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(base + "notebooks/07_frontier.html", wait_until="load")
            page.wait_for_function(_CHARTS_DRAWN, timeout=RENDER_TIMEOUT_MS)
            assert "→ 1xTP2DP4+EP : 1xTP4DP4+EP, concurrency 32" in label(page)
            slider = page.locator("#pdtune-frontier-sla input[type=range]")
            slider.evaluate("s => { s.value = 100; s.dispatchEvent(new Event('input', {bubbles: true})); }")
            page.wait_for_function("""() => [...document.querySelectorAll('#pdtune-frontier-sla text')]
                .some(t => t.textContent.startsWith('≥ 100 tok/s/user'))""", timeout=RENDER_TIMEOUT_MS)
            assert "→ 1xTEP8 : 1xTEP8+MTP, concurrency 4" in label(page)

            curves = page.locator("#pdtune-frontier-curves")
            curves.scroll_into_view_if_needed()
            curves.locator(".role-legend-label text").nth(1).click()
            page.wait_for_timeout(300)
            opacity = page.eval_on_selector("#pdtune-frontier-curves", """e => [...e.querySelectorAll(
                'g.mark-line path')].map(p => p.getAttribute('opacity') || '1')""")
            faded = [o for o in opacity if float(o) < 0.5]
            assert faded and len(faded) < len(opacity), opacity
        finally:
            browser.close()
