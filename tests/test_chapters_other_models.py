"""Chapters 1-4 re-run for other models and GPUs, as the workbook runs them (papermill, kernel ``python3``).

Each chapter must execute without error for a Mamba2 hybrid (chapters 1-4 alone, with papermill) and for every
bundled parameter set but the article's (the workbook's runs: a GatedDeltaNet hybrid on H200, an MLA model with
no recurrent state at all, a dense model, an attention-only MoE), each run once per session
(``tests/chapter_runs.py``); and the bytes per request it prints for that model must be what ``pdtune state``
prints for the same settings.

The prose quotes computed numbers through MyST-NB's ``{glue:text}`key:format` `` role. The workbook builds
its HTML from these executed notebooks with ``-W``, so every key the prose names must be glued by the run,
with a value the format accepts, for every model (and for the article's defaults, which the book builds).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jupytext
import nbformat
import pytest
from myst_nb.core.variables import format_plain_text

from chapter_runs import Runs, group
from conftest import article_scenario
from pdtune import article
from pdtune.model import bundled_models
from pdtune.scenario import Scenario
from pdtune.topology import parse_topology

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
#: Every page of chapters 1-4 (section pages included), as the toc lists them.
CHAPTERS = tuple(p.stem for p in sorted(NOTEBOOKS.glob("0[1-4]_*.md")))
PDTUNE = Path(sys.executable).parent / "pdtune"

#: The runs whose chapters 1-4 are checked (each executed once per session, ``tests/chapter_runs.py``): a Mamba2
#: hybrid no parameter set covers, and every bundled parameter set but the article's (whose own numbers the book
#: build and ``tests/test_parameter_sets.py`` check): a GatedDeltaNet hybrid on H200, an MLA model with no
#: recurrent state at all, a dense model, an attention-only MoE.
RUNS = ("nemotron-nano", "qwen3-next-80b-h200", "deepseek-v3-gb200", "llama-3.1-70b-h200", "qwen3-235b-h200")


def _printed(notebook: nbformat.NotebookNode) -> str:
    """Everything the chapter printed or displayed as text."""
    parts = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream":
                parts.append(output["text"])
            elif "data" in output:
                parts.append(output["data"].get("text/plain", ""))
                parts.append(output["data"].get("text/html", ""))
    return "\n".join(parts)


#: ``{glue:text}`key` `` or ``{glue:text}`key:format` `` in a chapter's markdown.
GLUE_TEXT = re.compile(r"\{glue:text\}`([^`:]+)(?::([^`]*))?`")


def _glued(notebook: nbformat.NotebookNode) -> dict[str, str]:
    """key -> text/plain of every value the executed notebook glued (as MyST-NB reads them back)."""
    found = {}
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            meta = output.get("metadata", {}).get("scrapbook")
            if meta:
                prefix = meta.get("mime_prefix", "")
                found[meta["name"]] = output["data"].get(prefix + "text/plain", "")
    return found


def glue_problems(markdown: str, notebook: nbformat.NotebookNode) -> list[str]:
    """Roles whose key the run did not glue, or whose value the format spec cannot format."""
    glued = _glued(notebook)
    problems = []
    for key, spec in GLUE_TEXT.findall(markdown):
        if key not in glued:
            problems.append(f"{key}: not glued")
            continue
        try:
            format_plain_text(glued[key], spec or "s")
        except Exception as exc:  # what MyST-NB turns into a build warning
            problems.append(f"{key}:{spec}: {glued[key]!r} does not format ({exc})")
    return problems


def _pdtune_state(model: str, *args: str) -> dict[str, Any]:
    done = subprocess.run([str(PDTUNE), "state", model, "--no-prefix-caching", "--json", *args],
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


#: The pages that print one request of the model of the parameters cell, and the ``pdtune state`` flags of it.
def _state_flags(s: Scenario, chapter: str) -> tuple[str, ...] | None:
    if chapter in ("01_state_hybrid", "03_graphs_estimate"):
        return ("--vllm", "0.11")  # the unsharded request under the article's arithmetic
    if chapter == "04_concurrency_layouts":
        # one rank of the reference layout under the serving vLLM, without MTP (the page's plan_state call)
        tp = parse_topology(article.reference_topology(s.decode_topologies)).tp
        return ("--tp", str(tp), "--vllm", s.vllm)
    return None


def _expected_lines(s: Scenario, chapter: str) -> list[str]:
    """The bytes-per-request lines the chapter prints for the run's model, from the CLI."""
    flags = _state_flags(s, chapter)
    if flags is None:
        return []
    common = ["--isl", str(s.isl), "--osl", str(s.osl), "--kv-cache-dtype", s.kv_cache_dtype]
    state = _pdtune_state(s.model, *common, *flags)
    pages, page, total = state["blocks_per_request"], state["block_bytes"], state["bytes_per_request"]
    return [f"{pages:,} pages x {page:,} B = {total:,} B"]


def _parameter_cell(chapter: str) -> dict[str, Any]:
    """The chapter's parameters as papermill reads them: name -> (type, default)."""
    from papermill.translators import PythonTranslator

    notebook = jupytext.read(NOTEBOOKS / f"{chapter}.md")
    cell = next(c for c in notebook.cells if "parameters" in c.get("metadata", {}).get("tags", []))
    return {p.name: p for p in PythonTranslator.inspect(cell)}


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_parameters_are_scenario_fields_with_scenario_defaults(chapter: str) -> None:
    """The workbook fills these cells from a Scenario, so names, types and defaults must be Scenario's."""
    import ast
    import typing

    hints = typing.get_type_hints(Scenario)
    defaults = article_scenario().to_dict()
    params = _parameter_cell(chapter)
    assert params, f"{chapter} has no parameters cell"
    for name, p in params.items():
        assert name in hints, f"{chapter}: {name} is not a Scenario field"
        expected = hints[name]
        wanted = "list" if typing.get_origin(expected) is tuple else expected.__name__
        assert p.inferred_type_name.startswith(wanted), f"{chapter}: {name} is {p.inferred_type_name}"
        assert ast.literal_eval(p.default) == defaults[name], f"{chapter}: default of {name}"
        assert p.help, f"{chapter}: {name} has no comment"


@pytest.mark.slow
@pytest.mark.parametrize("chapter", CHAPTERS)
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xdist_group(group(n))) for n in RUNS])
def test_chapter_runs_for_another_model(name: str, chapter: str, runs: Runs) -> None:
    run = runs[name]
    if run.scenario.model not in bundled_models():
        pytest.skip(f"{run.scenario.model} is not bundled in data/models")
    if chapter not in run.notebooks:
        pytest.skip(f"{chapter} works a fixed dense model on the scenario's GPU (the workbook runs it)")
    executed = run.notebooks[chapter]
    text = _printed(executed)
    for line in _expected_lines(run.scenario, chapter):
        assert line in text, f"{chapter} for {name} does not print {line!r}"
        # the article's numbers stay on the page, labelled as the article's
        assert "article" in text.lower()
    # every number the prose quotes was glued by this run, and formats
    markdown = (NOTEBOOKS / f"{chapter}.md").read_text(encoding="utf-8")
    problems = glue_problems(markdown, executed)
    assert problems == [], f"{chapter} for {name}:\n" + "\n".join(problems)


def test_glue_problems_finds_missing_keys_and_bad_formats() -> None:
    """The check above, on a hand-made notebook: what MyST-NB warns about (and -W turns into a failure)."""
    prefix = "application/papermill.record/"

    def glued(name: str, value: object) -> nbformat.NotebookNode:
        return nbformat.v4.new_output("display_data", data={prefix + "text/plain": repr(value)},
                                      metadata={"scrapbook": {"name": name, "mime_prefix": prefix}})

    cell = nbformat.v4.new_code_cell("glue(...)")
    cell.outputs = [glued("state-mib", 759.0), glued("state-model", "qwen3.8-2.4t"),
                    glued("state-nan", float("nan"))]
    notebook = nbformat.v4.new_notebook(cells=[cell])
    fine = "{glue:text}`state-mib:.2f` MiB for {glue:text}`state-model` ({glue:text}`state-nan:.1f`)."
    assert glue_problems(fine, notebook) == []
    broken = "{glue:text}`state-tail-mib:.0f` MiB, {glue:text}`state-model:.1f`."
    assert [p.split(":")[0] for p in glue_problems(broken, notebook)] == ["state-tail-mib", "state-model"]
