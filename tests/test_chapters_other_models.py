"""Chapters 1-4 re-run for other models and GPUs, as the workbook runs them (papermill, kernel ``python3``).

Each chapter must execute without error for a GatedDeltaNet hybrid on an H200-sized GPU, for an MLA model
with no recurrent state at all, and for a Mamba2 hybrid when its config is bundled; and the bytes per
request it prints for that model must be what ``pdtune state`` prints for the same settings.

The prose quotes computed numbers through MyST-NB's ``{glue:text}`key:format` `` role. The workbook builds
its HTML from these executed notebooks with ``-W``, so every key the prose names must be glued by the run,
with a value the format accepts, for every model (and for the article's defaults, which the book builds).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jupytext
import nbformat
import papermill
import pytest
from myst_nb.core.variables import format_plain_text

from pdtune.model import bundled_models
from pdtune.scenario import Scenario, article_scenario
from pdtune.site.render import STATIC_BUILD_ENV

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
#: Every page of chapters 1-4 (section pages included), as the toc lists them.
CHAPTERS = tuple(p.stem for p in sorted(NOTEBOOKS.glob("0[1-4]_*.md")))
PDTUNE = Path(sys.executable).parent / "pdtune"

# The article's own parameters run in the book build and in tests/test_parameter_sets.py (every chapter, its
# glued numbers against pdtune's); these are the other models.
# (Qwen3-Next on H200 runs as a workbook parameter set in tests/test_parameter_sets.py.)
CASES: dict[str, dict[str, Any]] = {
    "deepseek-v3": {"model": "deepseek-v3"},
    "nemotron-nano": {"model": "nemotron-nano-9b-v2", "gpu_memory_gib": 79.19, "num_speculative_tokens": 0},
}


def _parameters(case: str, chapter: str, notebook: nbformat.NotebookNode) -> dict[str, Any]:
    """The case's values for the parameters this chapter declares (papermill warns about unknown ones)."""
    cell = next(c for c in notebook.cells if "parameters" in c.get("metadata", {}).get("tags", []))
    declared = {line.split(":", 1)[0].strip() for line in cell.source.splitlines() if ":" in line}
    return {k: v for k, v in CASES[case].items() if k in declared}


def _execute(chapter: str, parameters: dict[str, Any], tmp_path: Path) -> nbformat.NotebookNode:
    source = jupytext.read(NOTEBOOKS / f"{chapter}.md")
    # Same environment as a book build: charts reference the bundle, kernels come from this venv.
    os.environ[STATIC_BUILD_ENV] = "1"
    os.environ["JUPYTER_PREFER_ENV_PATH"] = "1"
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    input_path = tmp_path / f"{chapter}.ipynb"
    nbformat.write(source, input_path)
    out = tmp_path / f"{chapter}.out.ipynb"
    papermill.execute_notebook(
        str(input_path), str(out), parameters=parameters, kernel_name="python3", cwd=str(NOTEBOOKS),
        progress_bar=False, log_output=False,
    )
    return nbformat.read(out, as_version=4)


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


#: The pages that print one request of the model of the parameters cell, and the `pdtune state` flags of it.
PRINTS_REQUEST: dict[str, tuple[str, ...]] = {
    "01_state_hybrid": ("--vllm", "0.11"),  # the unsharded request, the article's arithmetic
    "03_graphs_estimate": ("--vllm", "0.11"),
    "04_concurrency_layouts": ("--tp", "4", "--vllm", "0.26.1"),  # one TP4 rank of TP4DP4+EP, no MTP
}


def _expected_lines(case: str, chapter: str) -> list[str]:
    """The bytes-per-request lines the chapter prints for the case's model, from the CLI."""
    c = CASES[case]
    if chapter not in PRINTS_REQUEST:
        return []
    model, isl, osl = c["model"], c.get("isl", 8192), c.get("osl", 1024)
    common = ["--isl", str(isl), "--osl", str(osl), "--kv-cache-dtype", c.get("kv_cache_dtype", "fp8")]
    state = _pdtune_state(model, *common, *PRINTS_REQUEST[chapter])
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
@pytest.mark.xdist_group("notebooks")
@pytest.mark.parametrize("chapter", CHAPTERS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_chapter_runs_for_another_model(case: str, chapter: str, tmp_path: Path) -> None:
    if CASES[case]["model"] not in bundled_models():
        pytest.skip(f"{CASES[case]['model']} is not bundled in data/models")
    source = jupytext.read(NOTEBOOKS / f"{chapter}.md")
    params = _parameters(case, chapter, source)
    if "model" not in _parameter_cell(chapter):
        pytest.skip(f"{chapter} works a fixed dense model on the scenario's GPU (the workbook runs it)")
    assert params.get("model") == CASES[case]["model"]
    executed = _execute(chapter, params, tmp_path)
    text = _printed(executed)
    for line in _expected_lines(case, chapter):
        assert line in text, f"{chapter} for {case} does not print {line!r}"
        # the article's numbers stay on the page, labelled as the article's
        assert "article" in text.lower()
    # every number the prose quotes was glued by this run, and formats
    markdown = (NOTEBOOKS / f"{chapter}.md").read_text(encoding="utf-8")
    problems = glue_problems(markdown, executed)
    assert problems == [], f"{chapter} for {case}:\n" + "\n".join(problems)


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
