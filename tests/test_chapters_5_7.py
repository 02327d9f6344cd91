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
from chapter_runs import Runs, glued_values, group
from conftest import article_scenario
from pdtune.model import load_model
from pdtune.scenario import Scenario
from pdtune.sweep import load_sweep
from pdtune.workbook import load_parameters

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
PARAMS = ROOT / "data" / "params"
#: Every page of chapters 5-7 and the (label)= above its title.
CHAPTERS = {"05_prefill": "prefill", "06_decode": "decode", "06_decode_experts": "decode-experts",
            "07_frontier": "frontier",
            "07_frontier_rate": "frontier-rate-matching", "07_frontier_measured": "frontier-measured"}
#: What the page's equation labels and glued keys start with (a section page glues as its chapter).
PREFIX = {"05_prefill": "prefill", "06_decode": "decode", "06_decode_experts": "decode", "07_frontier": "frontier",
          "07_frontier_rate": "frontier", "07_frontier_measured": "frontier"}
#: Labelled equations each page derives (the section pages use the chapter's).
EQUATIONS = {"05_prefill": 3, "06_decode": 2, "06_decode_experts": 2, "07_frontier": 3, "07_frontier_rate": 0,
             "07_frontier_measured": 0}
#: Labels others link to, which must survive any split of a page.
KEPT_LABELS = {"07_frontier_measured": ("frontier-real-data", "frontier-vllm-measured")}
#: Equations other chapters cite (chapter 9: rate matching and the SLA pick), kept under their names.
KEPT_EQUATIONS = {"05_prefill": ("prefill-capacity", "prefill-ceiling", "prefill-littles-law"),
                  "06_decode": ("decode-roofline", "decode-kv-room"),
                  "06_decode_experts": ("decode-experts-touched", "decode-busiest-rank"),
                  "07_frontier": ("frontier-rate-match", "frontier-envelope", "frontier-sla")}

#: Numbers these chapters may type besides the article's tables and the structural ones of chapters 1-4:
#: milliseconds per second (and the article's decode workload 1/1000), the article's concurrency range
#: (1 to 2560), the year in InferenceX's copyright line that the attribution repeats.
ALLOWED = {"1000", "2560", "2026", "3.1"}  # and the "3.1" of Llama-3.1-70B
#: Inputs the exercises choose, and InferenceX's workload as its file records it.
EXERCISE_INPUTS = {
    "05_prefill": {"32768", "20"},  # 32k-token prompts; a decode side of 20 requests/s
    "06_decode": {"0.95", "32768", "1024"},  # gpu_memory_utilization 0.95; requests of 32768 + 1024 tokens
    "07_frontier": {"100", "32"},  # an SLA of 100 tokens/s per user; decode engines at 32 requests
    "06_decode_experts": {"10"},  # the busiest GPU within 10 % of the mean
    "07_frontier_rate": set(),
    "07_frontier_measured": {"100", "1024"},  # an SLA of 100; InferenceX's ISL/OSL 1024/1024
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


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_equations_are_labelled_with_the_chapter_and_followed_by_takeaways(chapter: str) -> None:
    text = _text(chapter)
    labels = re.findall(r"^\$\$ \(([\w-]+)\)$", text, re.M)
    assert len(labels) >= EQUATIONS[chapter] and all(name.startswith(f"{PREFIX[chapter]}-") for name in labels)
    assert len(re.findall(r"^\$\$$", text, re.M)) == len(labels)  # every display equation carries a label
    assert text.count("```{admonition} Takeaway") >= 1
    # each section with a labelled equation ends with a takeaway before the next section starts
    for section in re.split(r"^## ", text, flags=re.M)[1:]:
        if re.search(r"^\$\$ \(", section, re.M) and not section.startswith("Exercises"):
            assert "```{admonition} Takeaway" in section, section.splitlines()[0]
    for ref in re.findall(r"\{eq\}`([\w-]+)`", text):
        assert any(f"$$ ({ref})" in _text(c) for c in CHAPTERS), ref
    for kept in KEPT_LABELS.get(chapter, ()):
        assert f"({kept})=\n## " in text, kept
    for kept in KEPT_EQUATIONS.get(chapter, ()):
        assert f"$$ ({kept})" in text, kept


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_each_page_opens_with_its_question_and_a_dense_model_first(chapter: str) -> None:
    text = _text(chapter)
    paragraphs = text.split("\n# ", 1)[1].split("\n\n")[1:]
    assert re.fullmatch(r"\*Time: \d+ min reading, \d+ min exercises\.\*", paragraphs[0])  # the course plan's
    first = paragraphs[1]
    assert first.rstrip().endswith("?") or "?" in first.split("\n")[0], first[:120]
    sections = re.findall(r"^## (.+)$", text, re.M)
    if chapter in ("05_prefill", "06_decode", "07_frontier"):
        assert sections[1] == "A dense model first", sections  # right after the parameters
        dense = text.split("## A dense model first", 1)[1].split("\n## ", 1)[0]
        assert "Llama-3.1-70B" in dense


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
        assert name.startswith(PREFIX[chapter] + "-")
        body = text.split(f"```{{solution-start}} {name}\n:class: dropdown\n```", 1)[1].split("```{solution-end}", 1)[0]
        cells = re.findall(r"```\{code-cell\} ipython3\n(.*?)```", body, re.S)
        assert cells and any(re.search(rf"\b{re.escape(n)}[.(]", c) for c in cells for n in _pdtune_names(text)), name


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_parameters_are_scenario_fields_with_the_articles_defaults(chapter: str) -> None:
    hints = typing.get_type_hints(Scenario)
    defaults = article_scenario().to_dict()
    declared = declared_parameters(jupytext.read(NOTEBOOKS / f"{chapter}.md"))
    assert {"model", "isl"} & set(declared) or chapter in ("07_frontier", "07_frontier_measured")
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
             "06_decode_experts": {"decode_topologies"},
             "07_frontier": {"disagg_results", "accuracy_threshold", "min_tps_per_user"},
             "07_frontier_rate": {"prefill_results", "decode_results", "disagg_results", "accuracy_threshold",
                                  "prefill_topologies", "decode_topologies"},
             "07_frontier_measured": {"min_tps_per_user"}}
    assert kinds[chapter] <= set(declared)


def glued_keys(code: str) -> set[str]:
    """Keys a page glues: ``glue("key", ...)``, ``glue_markdown("key", ...)`` and the literal keys of
    ``glue_numbers("prefix", {...})`` (a ``**{f"x-{k}": ...}`` spread glues ``prefix-x-`` keys)."""
    keys: set[str] = set()
    for node in ast.walk(ast.parse(code)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        args = node.args
        if node.func.id in ("glue", "glue_markdown") and args and isinstance(args[0], ast.Constant):
            keys.add(args[0].value)
        elif node.func.id == "glue_numbers" and len(args) == 2 and isinstance(args[0], ast.Constant):
            prefix = args[0].value
            if isinstance(args[1], ast.Dict):
                for key, value in zip(args[1].keys, args[1].values):
                    if isinstance(key, ast.Constant):
                        keys.add(f"{prefix}-{key.value}")
                    elif key is None and isinstance(value, ast.DictComp) and isinstance(value.key, ast.JoinedStr):
                        lead = value.key.values[0]
                        keys.add(f"{prefix}-{lead.value}*" if isinstance(lead, ast.Constant) else f"{prefix}-*")
            else:
                keys.add(f"{prefix}-*")
    return keys


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_glued_key_is_glued_and_chart_ids_are_unique(chapter: str) -> None:
    text, code = _text(chapter), _code(chapter)
    used = set(re.findall(r"\{glue:(?:text|md)\}`([\w-]+)", text))
    glued = glued_keys(code)
    spread = [k[:-1] for k in glued if k.endswith("*")]
    assert used and all(u in glued or any(u.startswith(s) for s in spread) for u in used), \
        used - glued
    assert all(k.startswith(PREFIX[chapter] + "-") for k in glued)
    ids = re.findall(r'show\([^"]*?"([\w-]+)"', code)  # the first string of every show(...) call
    assert len(ids) == len(set(ids))
    # a chapter shows charts only through pdtune's builders, and never computes in the notebook
    assert "import numpy" not in code and "groupby(" not in code and ".apply(" not in code


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_prose_types_no_computed_number(chapter: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(prose.EXERCISE_INPUTS, chapter, EXERCISE_INPUTS[chapter] | ALLOWED)
    text = re.sub(r"^\*Time: .*\*$", "", _text(chapter), flags=re.M)  # the course plan's minutes
    problems = prose.offending_numbers(chapter, text)
    assert not problems, "numbers typed into the prose (glue them):\n" + "\n".join(problems)


def test_the_real_data_section_is_labelled_and_attributed() -> None:
    text = _text("07_frontier_measured")
    section = text.split("(frontier-real-data)=\n", 1)[1].split("\n(frontier-vllm-measured)=", 1)[0]
    assert section.startswith("## InferenceX")
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
        assert f"no {kind}-only sweep (its {kind}_results list is empty)" in text
    if chapter == "07_frontier_rate" and (not scenario.prefill_results or not scenario.decode_results):
        assert "rate matching has nothing to combine" in text
    if params == "defaults":
        for line in ARTICLE_RUN[chapter]:
            assert line in text, line


#: What the article's parameters print: each finding of the article beside the winners computed from the
#: (modeled) sweeps, the reason for the high-concurrency winner, and the SLA pick at 50 tokens/s per user.
ARTICLE_RUN = {
    "05_prefill": [
        "TP4DP2+EP is best at low concurrency: the model has TP8+EP at 1; TP4DP2+EP at 2, so it agrees in part "
        "(1 of 2 concurrencies)",
        "TP2DP4+EP takes over as concurrency rises: the model has TP2DP4+EP at 4–2,560, so it agrees",
        "tuned on the article's headline numbers and findings",
    ],
    "06_decode": [
        "TEP8 with MTP is best at low concurrency: the model has TEP8+MTP at 1, 2, so it agrees",
        "TEP8 (without MTP) is best at 512 and 1024: the model has TEP8 at 512, 1,024, so it agrees",
        "TP4DP4+EP is best at high concurrency: the model has TP4DP4+EP at 2,048, 2,560, so it agrees",
        "At concurrency 2,560 TP4DP4+EP wins, and its KV cache holds every request",
        'as the article says: "MTP helps a lot as long as the KV cache has room"',
    ],
    "07_frontier": [
        "The gate at 95% excludes none of the 7 deployments",
        "1xTP2DP4+EP : 1xTP4DP4+EP at concurrency 32",
        "2xTP2 : 3xTP4",  # the dense example's pick at 50 tokens/s per user
    ],
    "06_decode_experts": ["qwen3.8-2.4t on 32 EP GPUs (16 experts each)"],
    "07_frontier_rate": ["Across 7 configurations, rate matching is within 10 %"],
    "07_frontier_measured": ["2xDP4+EP:1xDP16+EP", "kimi-k2.5 on GB200"],
}


# ------------------------------------------------------------------------------------------ the browser


@pytest.mark.slow
@pytest.mark.xdist_group("book")
def test_the_slider_and_the_legend_work_in_the_built_page(built_book: Path) -> None:
    from playwright.sync_api import sync_playwright

    from pdtune.site.pagecheck import CHARTS_DRAWN, CHROMIUM, LAUNCH_ARGS, RENDER_TIMEOUT_MS, serve

    def label(page) -> str:
        return page.eval_on_selector("#pdtune-frontier-sla", """e => [...e.querySelectorAll('text')]
            .map(t => t.textContent).filter(s => s.includes('tok/s/user')).join('|')""")

    with serve(built_book) as base, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(base + "notebooks/07_frontier.html", wait_until="load")
            page.wait_for_function(CHARTS_DRAWN, timeout=RENDER_TIMEOUT_MS)
            assert "→ 1xTP2DP4+EP : 1xTP4DP4+EP, concurrency 32" in label(page)
            slider = page.locator("#pdtune-frontier-sla input[type=range]")
            slider.evaluate("s => { s.value = 100; s.dispatchEvent(new Event('input', {bubbles: true})); }")
            page.wait_for_function("""() => [...document.querySelectorAll('#pdtune-frontier-sla text')]
                .some(t => t.textContent.startsWith('≥ 100 tok/s/user'))""", timeout=RENDER_TIMEOUT_MS)
            # the pick the package makes at 100 tok/s/user on the same sweep (the gate keeps all 7 deployments)
            from pdtune.frontier import sla
            from pdtune.sweep import load_sweep

            sweep = load_sweep("disagg", [str(ROOT / "data/clusters/gb300-qwen3.8-modeled/disagg")], canonical=True)
            pick = sla(sweep.frame, 100.0)
            assert f"→ {pick.deployment}, concurrency {pick.concurrency:.0f}" in label(page)

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


# ------------------------------------------------------------------------------ takeaways against tables


@pytest.fixture()
def article_pages(runs: Runs) -> dict[str, dict[str, Any]]:
    """The glued values of every page of chapters 5-7 as the book build executed them (the article's
    parameters)."""
    return {chapter: glued_values(runs["article"].notebooks[chapter]) for chapter in CHAPTERS}


@pytest.mark.slow
@pytest.mark.xdist_group(group("article"))
def test_every_takeaway_reads_the_values_of_the_table_it_summarises(article_pages) -> None:
    """Each takeaway's glued numbers are recomputed here from the frame the page shows beside it: the dense
    examples' tables (chapters 5, 6, 7), the busy share, the ceiling, the KV room and InferenceX's check."""
    import pandas as pd

    from pdtune.chapters import decode as ch6, frontier as ch7, prefill as ch5
    from pdtune.frontier import rate_match, sla, upper_envelope
    from pdtune.model import load_model
    from pdtune.sweep import Sweep, load_sweep

    p = article_pages["05_prefill"]
    llama = ch5.dense_example()
    tps = 8192 * 1000 / (llama["ttft_ms_p50"] * llama["gpus"])
    narrow, wide = llama["gpus"].idxmin(), llama["gpus"].idxmax()
    assert (p["prefill-dense-narrow"], p["prefill-dense-wide"]) == (llama.loc[narrow, "topology"],
                                                                    llama.loc[wide, "topology"])
    assert p["prefill-dense-sooner"] == pytest.approx(llama.loc[narrow, "ttft_ms_p50"] / llama.loc[wide, "ttft_ms_p50"])
    assert p["prefill-dense-worse"] == pytest.approx(tps[narrow] / tps[wide]) and p["prefill-dense-worse"] > 1
    assert p["prefill-dense-ceiling"] == pytest.approx(ch5.dense_ceiling().ceiling_tps_per_gpu)
    assert tps.max() < p["prefill-dense-ceiling"]  # the measured rates stay below the ceiling they are set by
    share = ch5.busy_share(Sweep("prefill", (), pd.DataFrame()), topologies=Scenario().prefill_topologies)
    least = share.sort_values("busy_at_1", kind="stable").iloc[0]
    assert p["prefill-busy-sentence"].startswith(
        f"With one request {least['deployment']} keeps only {least['busy_at_1']:.0%} of its GPUs busy")
    assert p["prefill-busy-sentence"].endswith(
        ", ".join(share.loc[share["busy_at_1"] == 1, "deployment"]) + ".")
    best = load_sweep("prefill", Scenario().prefill_results, topologies=Scenario().prefill_topologies)
    best = float(best.frame["tps_per_gpu"].max())
    assert p["prefill-ceiling-share"] == (f"The sweep's best reaches {best:,.0f} tokens/s per GPU, "
                                          f"{best / p['prefill-ceiling']:.0%} of it.")

    d = article_pages["06_decode"]
    dense = ch6.dense_example()
    assert d["decode-dense-more"] == dense["requests"].iloc[-1] / dense["requests"].iloc[0]
    assert d["decode-dense-longer"] == pytest.approx(dense["measured_tpot_ms"].iloc[-1] / dense["measured_tpot_ms"].iloc[0])
    assert d["decode-dense-longer"] < d["decode-dense-more"]  # the takeaway: more tokens than time
    assert (dense["roofline_ms"] < dense["measured_tpot_ms"]).all()  # "stays above the roofline"
    room = dict(zip(*(ch6.room_table(load_sweep("decode", Scenario().decode_results,
                                                topologies=Scenario().decode_topologies),
                                     load_model(Scenario().model), Scenario().decode_topologies,
                                     **_memory())[c] for c in ("deployment", "room_at_workload"))))
    assert d["decode-worked-room"] == room[d["decode-worked-deployment"]]  # by hand = the table's room

    f = article_pages["07_frontier"]
    prefill, decode = ch7.dense_isolated()
    points = rate_match(prefill, decode, 1024, 4, isl=8192)
    env, pick = upper_envelope(points), sla(points, 50.0)
    assert f["frontier-dense-envelope"] == len(env) and f["frontier-dense-pick"] == pick.deployment
    assert f["frontier-dense-by-hand"] == pick.tps_per_gpu  # the page function = the package's pick
    assert f["frontier-dense-cost"] == pytest.approx(1 - pick.tps_per_gpu / env["tps_per_gpu"].max())

    m = article_pages["07_frontier_measured"]
    check = ch7.inferencex_points().check
    roomy = check[~check["kv_limited"]]
    assert m["frontier-real-ttft-predicted-max"] == roomy["predicted_ttft_ms"].max()
    assert m["frontier-real-ttft-measured-min"] == roomy["measured_ttft_ms"].min()
    assert m["frontier-real-ttft-ratio-min"] > 4  # "many times over": every measured TTFT far above the model's
    assert m["frontier-real-error-gpu"] == pytest.approx(check["tps_per_gpu_error"].abs().median())
    top = check.loc[check["measured_tps_per_gpu"].idxmax()]
    assert m["frontier-real-end-error"] == pytest.approx(top["tps_per_gpu_error"])


def _memory() -> dict[str, Any]:
    s = Scenario()
    return {k: getattr(s, k) for k in ("gpu_memory_gib", "gpu_memory_utilization", "non_torch_gib",
                                       "activation_peak_gib", "cudagraph_estimate_gib", "kv_cache_dtype", "vllm",
                                       "num_speculative_tokens", "isl", "osl")}


@pytest.mark.parametrize("params", ["llama-3.1-70b-h200", "qwen3-235b-h200"])
def test_chapter_6_and_the_summary_quote_the_same_room(params: str) -> None:
    """A room of 15.96 requests read "15" in chapter 6 (whole requests, rounded down) and "16.0" in the summary
    (a tenth): both now print vLLM's maximum concurrency to two decimals, from the same accounting."""
    from pdtune.chapters import decode as ch6
    from pdtune.workbook.summary import key_numbers, to_markdown

    scenario = load_parameters(PARAMS / f"{params}.yaml").resolved
    spec = load_model(scenario.model)
    memory = {k: getattr(scenario, k) for k in (
        "gpu_memory_gib", "gpu_memory_utilization", "non_torch_gib", "activation_peak_gib",
        "cudagraph_estimate_gib", "kv_cache_dtype", "vllm", "num_speculative_tokens")}
    room = ch6.room_table(load_sweep("decode", []), spec, scenario.decode_topologies, isl=scenario.isl,
                          osl=scenario.osl, **memory)
    said = ch6.room_sentence(room, [])
    summary = to_markdown(key_numbers(scenario).to_dict())
    rows = {line.split(" | ")[0].lstrip("| "): line for line in summary.splitlines()
            if line.startswith("| ") and line.split(" | ")[1:2] == ["no"]}  # the KV table, rows without MTP
    for r in room.itertuples():
        held = f"{r.room_at_workload:,.2f}"
        assert f"{r.deployment} {held} (" in said
        if not r.mtp:
            assert f"| {held} |" in rows[r.layout], (r.deployment, rows[r.layout])
