"""Every chapter, re-run by the workbook for four parameter sets, says only what holds for its parameters.

The sets: the article (Qwen3.8-2.4T on GB300, its modeled sweeps), another hybrid (Qwen3-Next-80B-A3B on H200,
modeled sweeps), a dense model with no results and a minimal parameters file (Llama-3.1-70B on H200) and an
attention-only MoE model without an MTP layer and no results (Qwen3-235B-A22B on H200). For each, the workbook
runs every chapter and builds its HTML with ``-W -n`` (every glued number exists and formats), and then:

* the numbers the prose quotes equal what pdtune computes for the same parameters, independently
  (:func:`expected_numbers`: ``pdtune.state``, ``pdtune.capacity``, the roofline);
* no table on a page is empty (a chapter shows a sentence instead);
* a model without an MTP layer gets no MTP row, column value or label anywhere on its pages;
* no sentence of a non-article page quotes a number that only the article has (its tables, its constants,
  the article run's own results) without naming the article;
* the values the file left out are listed, with where they come from, in the summary and on the pages;
* the pages fit the column at 1400 px (the browser check of ``tests/test_browser.py``), for one set;
* no exercise's answer is printed above it, and a chart of more than six curves lets the reader pick one.

HTML is built for the two sets without results (:data:`chapter_runs.HTML_SETS`); the others are checked in
their executed notebooks. Each set's chapters run once per session (:mod:`chapter_runs`): the article's are the
book build's, the others the workbook's.
"""

from __future__ import annotations

import json
import math
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from bs4 import BeautifulSoup

from pdtune.capacity import layout_room, scenario_waterfall, topology_capacity
from pdtune.chapters import state as ch1
from pdtune.chapters.trust import shown_name as ch8_name
from pdtune.cli import main
from pdtune.gpus import load_gpu
from pdtune.model import load_model
from pdtune.paths import REPO_ROOT, article_dir
from pdtune.perfmodel.roofline import prefill_ceiling
from pdtune.scenario import Scenario
from pdtune.state import plan_state
from pdtune.units import GiB, MiB
from chapter_runs import HTML_SETS, ChapterRun, Runs, group
from pdtune.workbook import SUMMARY_MD, book_chapters

pytestmark = [pytest.mark.slow]

PARAMS = REPO_ROOT / "data" / "params"
#: The bundled sets and the two issue 21 wrote from data/params/README.md alone (tests/chapter_runs.py);
#: DeepSeek-V3 on GB200 runs in test_workbook_chapters.py.
SETS = ("article", "qwen3-next-80b-h200", "llama-3.1-70b-h200", "qwen3-235b-h200", "glm-4.7-h200",
        "kimi-k2-fp8-b200")
CHAPTERS = [c.name for c in book_chapters(REPO_ROOT)]


def each(*names: str) -> list[Any]:
    """The sets as parameters, each test of a set on the worker that holds its run (:mod:`chapter_runs`)."""
    return [pytest.param(name, marks=pytest.mark.xdist_group(group(name))) for name in names]


# --------------------------------------------------------------------- the prose numbers are the computed ones


def expected_numbers(s: Scenario) -> dict[str, float]:
    """What some glued numbers must be, computed here from the scenario with pdtune's rules directly."""
    spec = s.model_spec()
    unsharded = plan_state(spec, max_model_len=s.isl + s.osl, kv_cache_dtype=s.kv_cache_dtype, vllm="0.11")
    tp4 = plan_state(spec, tp=4, max_model_len=s.isl + s.osl, kv_cache_dtype=s.kv_cache_dtype, vllm="0.11")
    memory = dict(gpu_memory_gib=s.gpu_memory_gib, gpu_memory_utilization=s.gpu_memory_utilization,
                  non_torch_gib=s.non_torch_gib, activation_peak_gib=s.activation_peak_gib,
                  cudagraph_estimate_gib=s.cudagraph_estimate_gib)
    from pdtune import article

    reference = article.reference_topology(s.decode_topologies)
    waterfall = scenario_waterfall(spec, topology=reference, mtp=False, vllm=s.vllm, **memory)
    capacity = topology_capacity(spec, s.decode_topologies, max_model_len=s.isl + s.osl,
                                 kv_cache_dtype=s.kv_cache_dtype, vllm=s.vllm,
                                 num_speculative_tokens=s.num_speculative_tokens, **memory)
    raised = waterfall.with_utilization(waterfall.gpu_memory_utilization + 0.01)
    numbers = {
        "state-mib": unsharded.bytes_per_request / MiB,
        "state-pages": unsharded.blocks_per_request,
        "state-block": unsharded.block_tokens,
        "state-tp-mid-mib": tp4.bytes_per_request / MiB,
        "memory-modeled-kv_cache_gib": waterfall.kv_cache() / GiB,
        "memory-unsharded-mib": unsharded.bytes_per_request / MiB,
        "memory-step-gib": (raised.kv_cache() - waterfall.kv_cache()) / GiB,
        "concurrency-leaders-most-requests": float(capacity["requests_per_gpu"].max()),
        "concurrency-leaders-most-kv": float(capacity["kv_cache_gib"].max()),
    }
    ceiling = prefill_ceiling(spec, load_gpu(s.gpu), s.isl)
    numbers["prefill-ceiling"] = ceiling.ceiling_tps_per_gpu
    return numbers


@pytest.mark.parametrize("name", each(*SETS))
def test_the_numbers_the_prose_quotes_are_the_computed_ones(runs: Runs, name: str) -> None:
    run = runs[name]
    expected = expected_numbers(run.scenario)
    for key, value in expected.items():
        glued = run.glued[key]
        if isinstance(glued, str):  # glued already formatted for the prose ("22,234")
            glued = float(glued.replace(",", ""))
            assert glued == pytest.approx(value, abs=0.5), (name, key)
        else:
            assert glued == pytest.approx(value, rel=1e-9), (name, key)
    # sentences are computed from the same numbers: the ones quoting the request and the KV room
    assert f"{expected['state-mib']:,.2f} MiB" in run.glued["state-request-sentence"]
    spec = run.scenario.model_spec()  # with the weights the set serves (Kimi-K2's FP8)
    if not run.scenario.decode_results:
        memory = {k: getattr(run.scenario, k) for k in (
            "gpu_memory_gib", "gpu_memory_utilization", "non_torch_gib", "activation_peak_gib",
            "cudagraph_estimate_gib", "kv_cache_dtype", "vllm", "num_speculative_tokens")}
        room = layout_room(spec, run.scenario.decode_topologies, sweep_isl=1, sweep_osl=1000,
                           isl=run.scenario.isl, osl=run.scenario.osl, **memory)
        for r in room.itertuples():
            # vLLM's maximum concurrency to two decimals, as the summary prints it
            assert f"{r.deployment} {r.room_at_workload:,.2f} (" in run.glued["decode-room-workload"]


# ----------------------------------------------------------------------------------------- pages


def _tables(run: ChapterRun) -> list[tuple[str, Any]]:
    return [(c, t) for c in CHAPTERS for t in run.page(c).select("article.bd-article table")]


#: A worked number a cell prints bare (its last expression): more than four digits after the point is float noise,
#: not a value a reader can use ("114.63902770914137" where vLLM itself logs two decimals).
NOISY_FLOAT = re.compile(r"\d\.\d{5,}")


@pytest.mark.parametrize("name", each(*SETS))
def test_no_cell_prints_a_number_with_spurious_digits(runs: Runs, name: str) -> None:
    noisy = []
    for chapter, notebook in runs[name].notebooks.items():
        for cell in notebook.cells:
            for output in cell.get("outputs", []):
                data = output.get("data", {})
                text = output.get("text", "") if output.get("output_type") == "stream" else (
                    "" if "text/html" in data else data.get("text/plain", ""))
                text = "".join(text) if isinstance(text, list) else text
                noisy += [f"{chapter}: {m}" for m in NOISY_FLOAT.findall(text)]
    assert noisy == [], f"{name}: bare numbers with float noise: {noisy}"


#: Headers that are code names on purpose (a vLLM flag, its graph modes); every other header is in words.
CODE_HEADERS = re.compile(r"gpu_memory_utilization|FULL_AND_PIECEWISE|FULL_DECODE_ONLY")


@pytest.mark.parametrize("name", each(*HTML_SETS))
def test_no_page_shows_an_empty_table_a_snake_case_header_or_scientific_notation(runs: Runs, name: str) -> None:
    tables = _tables(runs[name])
    empty = [chapter for chapter, table in tables if not [tr for tr in table.select("tbody tr") if tr.find("td")]]
    assert empty == [], f"{name}: empty tables in {empty}"
    snake = {th.get_text(" ", strip=True) for _, table in tables for th in table.select("thead th")
             if "_" in CODE_HEADERS.sub("", th.get_text())}
    assert snake == set(), f"{name}: headers not in words: {sorted(snake)}"
    # a value in scientific notation ("3e-05" for a 30 us overhead) is not one a reader takes in
    sci = {f"{chapter}: {td.get_text(strip=True)}" for chapter, table in tables for td in table.select("td")
           if re.fullmatch(r"-?\d+(\.\d+)?e[-+]?\d+", td.get_text(strip=True))}
    assert sci == set(), f"{name}: cells in scientific notation: {sorted(sci)}"


MTP_MARKS = re.compile(r"\+\s?MTP|MTP \d|with MTP\b")


@pytest.mark.parametrize("name", each(*HTML_SETS))
def test_a_model_without_an_mtp_layer_gets_no_mtp_row(runs: Runs, name: str) -> None:
    run = runs[name]
    assert load_model(run.scenario.model).num_mtp_layers == 0
    assert run.scenario.num_speculative_tokens == 0
    found = []
    for chapter, table in _tables(run):
        headers = [th.get_text(" ", strip=True) for th in table.select("thead th")]
        text = table.get_text(" ")
        if "run" in headers or any("published" in h for h in headers) or re.search(r"article|Qwen3\.8|qwen3\.8",
                                                                                        text):
            continue  # the article's own tables (its runs, its published columns), labelled as the article's
        for tr in table.select("tbody tr"):
            cells = [td.get_text(" ", strip=True) for td in tr.find_all(["th", "td"])]
            row = " | ".join(cells)
            if MTP_MARKS.search(row):
                found.append(f"{chapter}: {row[:120]}")
            for header, cell in zip(headers[-len(cells):], cells):
                if header == "MTP" and cell == "yes":
                    found.append(f"{chapter}: MTP yes in {row[:120]}")
    assert found == []


#: A sentence that names where its numbers come from: the article (its tables, runs, model, GPU) or another
#: named source (InferenceX's measurements).
ARTICLE_NAMED = re.compile(r"article|Qwen3\.8|qwen3\.8|table [123]|\bruns? \d|GB300|InferenceX", re.I)
_NUMBER = re.compile(r"(?<![\w.\-])(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+\.\d+|\d{3,})(?![\w.]*\d)")


def _values(text: str) -> list[tuple[str, Decimal]]:
    out = []
    for m in _NUMBER.finditer(text):
        token = m.group(1)
        out.append((token, Decimal(token.replace(",", ""))))
    return out


def _article_numbers(article: ChapterRun) -> set[Decimal]:
    """Numbers only the article has: its tables and constants, and what the article's own run computes."""
    import pandas as pd

    values: set[Decimal] = set()
    for path in article_dir().glob("*.csv"):
        for cell in pd.read_csv(path, dtype=str, keep_default_na=False).to_numpy().ravel():
            values.update(v for _, v in _values(str(cell)))
    for value in article.glued.values():
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            values.add(Decimal(str(round(value, 2))).normalize())
            values.add(Decimal(str(round(value, 1))).normalize())
            values.add(Decimal(str(round(value))).normalize())
    return {v.normalize() for v in values if abs(v) >= 100 or v != v.to_integral_value()}


def _own_numbers(run: ChapterRun) -> set[Decimal]:
    own: set[Decimal] = set()
    for value in run.glued.values():
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            for digits in (0, 1, 2, 3):
                own.add(Decimal(str(round(value, digits))).normalize())
                if abs(value) <= 1:  # a share the prose prints as a percentage (":.1%")
                    own.add(Decimal(str(round(100 * value, digits))).normalize())
        elif isinstance(value, str):
            own.update(v.normalize() for _, v in _values(value))
    return own


def _sentences(soup: BeautifulSoup) -> list[str]:
    article = soup.select_one("article.bd-article")
    for junk in article.select("table, pre, .cell_input, .pdtune-chart, script, style, .headerlink, "
                               ".pdtune-defaults, .math, .MathJax, mjx-container, "
                               "a[href*='#equation-']"):  # an equation's number, "(5.3)", is not a value
        junk.decompose()
    text = " ".join(el.get_text(" ", strip=True) for el in article.select("p, li"))
    text = re.sub(r"\b(?:Solution to )?Exercise \d+(?:\.\d+)*", " ", text)  # an exercise's number, not a value
    return [s for s in re.split(r"(?<=[.;:])\s+(?=[A-Z(])", text) if s]


@pytest.mark.parametrize("name", each(*HTML_SETS))
def test_no_sentence_names_an_article_only_number_as_the_users(runs: Runs, name: str) -> None:
    article_only = _article_numbers(runs["article"]) - _own_numbers(runs[name])
    found = []
    for chapter in CHAPTERS:
        for sentence in _sentences(runs[name].page(chapter)):
            hits = [token for token, value in _values(sentence) if value.normalize() in article_only]
            if hits and not ARTICLE_NAMED.search(sentence):
                found.append(f"{chapter}: {', '.join(hits)} in {sentence[:160]!r}")
    assert found == [], "\n".join(found)


@pytest.mark.xdist_group(group("llama-3.1-70b-h200"))
def test_the_left_out_values_are_listed_in_the_summary_and_where_first_used(runs: Runs) -> None:
    run = runs["llama-3.1-70b-h200"]
    summary = (run.out / SUMMARY_MD).read_text(encoding="utf-8")
    assert "## Values your parameters file did not give" in summary
    for line in ("`non_torch_gib` = 2.9: the article's GB300 start-up measurement",
                 "`num_speculative_tokens` = 0: llama-3.1-70b has no MTP layer",
                 "`gpu_memory_gib` = 139.81: what torch reports for one h200",
                 "`vllm` = 0.33: pdtune's default"):
        assert line in summary, line
    memory = run.page("02_memory").select_one(".pdtune-defaults").get_text(" ", strip=True)
    assert "non_torch_gib = 2.9" in memory and "carried over" in memory
    # each value is listed once, in the first chapter that takes it
    listed = [li.get_text(" ", strip=True).split(" = ")[0] for c in CHAPTERS
              for li in run.page(c).select(".pdtune-defaults li")]
    assert sorted(listed) == sorted(set(listed)) and "gpu_memory_utilization" not in listed  # the file gives it
    memory = json.loads((runs["qwen3-235b-h200"].out / "02_memory.ipynb").read_text(encoding="utf-8"))
    outputs = json.dumps([c.get("outputs", []) for c in memory["cells"]])
    assert "pdtune-defaults" not in outputs  # its file writes every key out


@pytest.mark.parametrize("name", each("glm-4.7-h200", "kimi-k2-fp8-b200"))
def test_workbook_pages_pass_the_browser_check(runs: Runs, name: str) -> None:
    """The summary, the front page and every chapter of the mini-book: offline, tables within the column,
    commands whole (no dash for --, no backtick, no >= read as a quote), and the length rule."""
    from test_browser import LENGTH_PENDING, check_pages, length_problems, problems

    root = runs[name].html
    pages = ["workbook-summary.html", "book/index.html"] + [f"notebooks/{c}.html" for c in CHAPTERS]
    reports = check_pages(root, only=pages)
    found = problems(reports) + length_problems(reports, exempt=list(LENGTH_PENDING))
    assert found == [], "\n".join(found)


# ------------------------------------------------------------------------------- exercises ask, not repeat


_GLUE_ROLE = re.compile(r"\{glue:text\}`([^`:]+)(?::([^`]*))?`")

#: What each exercise of chapters 1-4 asks for: the glued answer and how its solution prints it.
EXERCISE_ANSWERS: dict[str, tuple[tuple[str, str], ...]] = {
    "state-ex-length": (("state-ex-length-mib", ",.1f"),),
    "state-ex-dtype": (("state-ex-dtype-mib", ",.0f"),),
    "state-ex-bf16": (("state-ex-bf16-mib", ",.1f"),),
    "state-ex-jamba": (("state-ex-jamba-mib", ",.1f"),),
    "state-ex-tp8": (("state-ex-tp8-mib", ",.2f"),),
    "state-ex-long": (("state-ex-long-mib", ",.0f"),),
    "memory-ex-utilization": (("memory-ex-utilization-gib", ".2f"),),
    "memory-ex-prose": (("memory-ex-prose-1-requests", ".1f"), ("memory-ex-prose-7-requests", ".1f")),
    "memory-ex-tp4dp8": (("memory-ex-tp4dp8-requests", ",.0f"),),
    "memory-ex-run5": (("memory-ex-run5-kv-gib", ".1f"),),
    "graphs-ex-1000": (("graphs-ex-1000-FULL_DECODE_ONLY", "d"), ("graphs-ex-1000-FULL_AND_PIECEWISE", "d")),
    "graphs-ex-nomtp": (("graphs-ex-nomtp-without", "d"), ("graphs-ex-nomtp-with", "d")),
    "graphs-ex-estimate": (("graphs-ex-estimate-short-gib", ".2f"),),
    "graphs-ex-yours": (("graphs-ex-yours-back", ".1f"),),
    "concurrency-ex-dense": (("concurrency-ex-dense-engine", ",.0f"),),
    "concurrency-ex-per-gpu": (("concurrency-ex-per-gpu-4-spare", ".1f"), ("concurrency-ex-per-gpu-6-spare", ".1f")),
    "concurrency-ex-prefix": (("concurrency-ex-prefix-gib", ",.1f"),),
    "concurrency-ex-tokens": (("concurrency-ex-tokens-kv-tokens", ",d"), ("concurrency-ex-tokens-new-kv-tokens", ",d")),
}


def _formatted(run: ChapterRun, key: str, spec: str) -> str:
    from myst_nb.core.variables import format_plain_text

    return format_plain_text(repr(run.glued[key]), spec or "s")


def _page_before(run: ChapterRun, chapter: str, label: str) -> str:
    """Everything the executed chapter shows above the exercise: its prose (glue filled in) and outputs."""
    notebook = run.notebooks[chapter]
    before = []
    for cell in notebook["cells"]:
        text = "".join(cell["source"])
        if f":label: {label}" in text:
            break
        if cell["cell_type"] == "markdown":
            before.append(_GLUE_ROLE.sub(lambda m: _formatted(run, m.group(1), m.group(2) or "")
                                         if m.group(1) in run.glued else "", text))
        for output in cell.get("outputs", []):
            if output.get("metadata", {}).get("scrapbook"):
                continue  # a glued value is shown only where the prose quotes it
            stream = output.get("text", "")
            before.append(stream if isinstance(stream, str) else "".join(stream))
            data = output.get("data", {})
            for mime in ("text/html", "text/plain"):
                value = data.get(mime, "")
                before.append(value if isinstance(value, str) else "".join(value))
    return BeautifulSoup("\n".join(before), "html.parser").get_text(" ")


@pytest.mark.parametrize("name", each("article", "qwen3-next-80b-h200"))
def test_no_exercise_answer_is_printed_before_its_exercise(runs: Runs, name: str) -> None:
    """What an exercise asks for (its glued answer, as the solution prints it) is not on the page above it:
    neither in the prose nor in a printed table or line (exercise 1.1 once asked for the TP8 block that the
    table above it printed)."""
    run = runs[name]
    found, asked = [], set()
    for chapter in [c for c in CHAPTERS if c[:2] in ("01", "02", "03", "04")]:
        source = (REPO_ROOT / "notebooks" / f"{chapter}.md").read_text(encoding="utf-8")
        for label in re.findall(r"```\{exercise-start\}\n:label: ([\w-]+)", source):
            asked.add(label)
            tokens = {token for token, _ in _values(_page_before(run, chapter, label))}
            tokens |= set(re.findall(r"(?<![\w.,])\d+(?![\w.,]*\d)", _page_before(run, chapter, label)))
            for key, spec in EXERCISE_ANSWERS.get(label, ()):
                answer = _formatted(run, key, spec)
                if len(re.sub(r"\D", "", answer)) < 3:
                    continue  # a one- or two-digit answer turns up by chance (e.g. "85 - 1 = 84")
                if answer in tokens:
                    found.append(f"{chapter} {label}: {key} = {answer} is printed above the exercise")
    assert asked == set(EXERCISE_ANSWERS), "every exercise of chapters 1-4 names its answer here"
    assert found == [], "\n".join(found)


# ------------------------------------------------------------------------------ charts of many curves


def _chart_specs(run: ChapterRun) -> list[tuple[str, dict[str, Any]]]:
    specs = []
    for chapter in CHAPTERS:
        for cell in run.notebooks[chapter]["cells"]:
            for output in cell.get("outputs", []):
                html = "".join(output.get("data", {}).get("text/html", ""))
                for chart_id, body in re.findall(r'<script type="application/json" id="([\w-]+)-spec">(.*?)</script>',
                                                 html, re.S):
                    specs.append((f"{chapter}#{chart_id}", json.loads(body.replace("<\\/", "</"))))
    return specs


from test_honest_labels import _walk  # noqa: E402 - every node of a chart spec, shared with the label check


def _curves(spec: dict[str, Any]) -> int:
    """How many lines a chart draws: for a chart with a line mark, the most distinct values of a colour field."""
    rows = [r for rows in spec.get("datasets", {}).values() for r in rows]
    marks = [n.get("mark") for n in _walk(spec) if "mark" in n]
    if not any((m.get("type") if isinstance(m, dict) else m) == "line" for m in marks):
        return 0
    most = 0
    for node in _walk(spec):
        colour = node.get("color") if isinstance(node.get("color"), dict) else None
        field = colour.get("field") if colour else None
        if field:
            most = max(most, len({r.get(field) for r in rows if field in r}))
    return most


@pytest.mark.parametrize("name", each("article", "qwen3-next-80b-h200"))
def test_a_chart_of_more_than_six_curves_lets_the_reader_pick_one(runs: Runs, name: str) -> None:
    many = [(where, spec) for where, spec in _chart_specs(runs[name]) if _curves(spec) > 6]
    if name == "article":
        assert many, "the article's prefill sweep draws nine curves: the check must see them"
    for where, spec in many:
        picks = [n for n in _walk(spec) if n.get("bind") == "legend" or n.get("select") is not None
                 and n.get("bind") == "legend"]
        faceted = any(k in n for n in _walk(spec) for k in ("facet", "row", "column") if isinstance(n, dict)
                      and k in n and k != "encoding")
        assert picks or faceted, f"{where}: {_curves(spec)} curves, no legend selection or facet"


# ------------------------------------------------------------------------- the summary and the commands


@pytest.mark.parametrize("name", each(*HTML_SETS))
def test_the_summary_is_what_pdtune_state_prints(runs: Runs, name: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """Every chapter ran, and the summary's per-request state and KV figures are what its ``pdtune state``
    commands print for this model (not the article's)."""
    import shlex

    summary = runs[name].summary
    capsys.readouterr()  # what the run printed, if this test made it
    assert [c["status"] for c in summary["chapters"]] == ["ok"] * len(CHAPTERS)
    assert summary["html"]["built"] is True and summary["html"]["warnings"] == 0  # -W -n clean
    state = summary["state_per_request"]
    assert main([*shlex.split(state["command"])[1:], "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["bytes_per_request"] == state["bytes"] != 759 * 2**20
    rows = [r for r in summary["decode_engines"]["rows"] if r.get("command")]
    assert rows
    for row in rows:
        assert main([*shlex.split(row["command"])[1:], "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["max_concurrency"] == pytest.approx(row["requests_per_engine"])
    assert summary["defaults_used"] == list(runs[name].scenario.defaults_used)


# ------------------------------------------------------------------- measured beside modeled, honestly


#: What chapter 8 and the measured sections of chapters 5 and 6 say of each set's model: only Llama-3.1-70B has
#: real vLLM runs in the bundled measurements (on H200, the set's GPU); the others say that they have none.
MEASURED_COVERAGE: dict[str, str | None] = {
    "article": None,
    "qwen3-next-80b-h200": None,
    "llama-3.1-70b-h200": "llama-3.1-70b on H200",
    "qwen3-235b-h200": None,
    "kimi-k2-fp8-b200": None,
}
#: The nearest model chapter 8 opens on where the measurements lack the set's own (issue 21).
NEAREST = {"kimi-k2-fp8-b200": "kimi-k2.5"}


@pytest.mark.parametrize("name", each(*MEASURED_COVERAGE))
def test_chapter_8_and_the_measured_sections_say_whether_real_runs_cover_the_model(runs: Runs,
                                                                                    name: str) -> None:
    run = runs[name]
    covered = MEASURED_COVERAGE[name]
    model = ch8_name(run.scenario.model)  # the name the chapter prints (a folder's name, never its path)
    yours, prefill, decode = (run.glued[k] for k in ("trust-yours", "prefill-real-note", "decode-real-note"))
    if covered:
        assert yours.startswith(f"The measurements cover {covered}: ")
        assert prefill.startswith("Real vLLM measurements of this model exist: the chart opens on " + covered)
        assert decode.startswith("Real vLLM measurements of this model exist")
    else:
        assert f"have no vLLM rows of {model}" in yours
        if name in NEAREST:
            assert f"The nearest model they hold is {NEAREST[name]} (" in yours
        assert f"There are no real vLLM measurements of {model}" in prefill
        assert f"There are no real vLLM measurements of {model}" in decode
    assert run.glued["trust-rows"] == runs["article"].glued["trust-rows"] > 1000  # the same public rows for every set


@pytest.mark.parametrize("name", each(*HTML_SETS))
def test_no_workbook_page_calls_modeled_data_measured(runs: Runs, name: str) -> None:
    from test_honest_labels import book_problems

    root = runs[name].html
    problems = book_problems(root, [f"notebooks/{c}.html" for c in CHAPTERS])
    assert problems == [], "\n".join(problems)


# ------------------------------------------------------------------------- every exercise, every set


@pytest.mark.parametrize("name", each(*SETS[1:]))
def test_every_exercise_solution_runs(runs: Runs, name: str) -> None:
    """Every solution of every page ran to its end without an error, for every set (tests/exercises.py), and
    the executed pages hold every exercise their sources have."""
    from exercises import exercise_labels, solution_problems, solutions

    found, missing = [], []
    for chapter in CHAPTERS:
        path = runs[name].out / f"{chapter}.ipynb"
        found += solution_problems(path)
        source = (REPO_ROOT / "notebooks" / f"{chapter}.md").read_text(encoding="utf-8")
        ran = {s.label for s in solutions(json.loads(path.read_text(encoding="utf-8")))}
        missing += [f"{chapter}: {label}" for label in exercise_labels(source) if label not in ran]
    assert found == [] and missing == [], "\n".join(found + missing)


_NAN = re.compile(r"\b(?:nan|NaN|inf)\b")


@pytest.mark.parametrize("name", each(*HTML_SETS))
def test_no_sentence_names_a_path_or_nan(runs: Runs, name: str) -> None:
    """Model names, never the paths a parameters file may give; and no number that does not exist."""
    run = runs[name]
    model_path = str(run.scenario.model)
    found = []
    for chapter in CHAPTERS:
        soup = run.page(chapter)
        cells = [td.get_text(" ", strip=True) for td in soup.select("article.bd-article td")]
        for text in _sentences(soup) + cells:
            if _NAN.search(text):
                found.append(f"{chapter}: NaN in {text[:160]!r}")
            if ("/" in model_path and model_path in text) or re.search(r"(?<![\w.])/(?:tmp|home|work)/", text):
                found.append(f"{chapter}: a path in {text[:160]!r}")
    assert found == [], "\n".join(found)


@pytest.mark.parametrize("name", each(*SETS[1:]))
def test_the_chapters_and_the_summary_agree(runs: Runs, name: str) -> None:
    """A number the summary reports is the number the chapter that computes it glues (issue 21 found chapter 6
    and the summary disagree): the state per request under the serving line (chapter 1), the reference decode
    engine's KV cache (chapter 2), and the most KV cache per GPU of the decode layouts (chapter 4)."""
    run = runs[name]
    summary = json.loads((run.out / "summary.json").read_text(encoding="utf-8"))
    assert run.glued["state-serving-mib"] == pytest.approx(summary["state_per_request"]["bytes"] / MiB)
    engines = summary["decode_engines"]
    reference = next((r for r in engines["rows"] if r["topology"] == engines["reference_topology"] and not r["mtp"]),
                     None)
    assert reference is not None
    assert run.glued["memory-modeled-kv_cache_gib"] == pytest.approx(reference["kv_cache_gib"])
    kv = [r["kv_cache_gib"] for r in engines["rows"] if r.get("kv_cache_gib") is not None
          and math.isfinite(r["kv_cache_gib"]) and r.get("requests_per_engine") is not None]
    assert run.glued["concurrency-leaders-most-kv"] == pytest.approx(max(kv))
