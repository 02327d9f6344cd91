"""The workbook against the real chapters: what each parameters cell declares, and whole runs for the
bundled parameter sets (the issue's "must show").

Chapters listed in ``_toc.yml`` but not written yet are skipped by name, as are parameter sets whose
benchmark data has not been generated yet.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import shlex
import typing
from pathlib import Path

import pytest
import yaml

from chapter_runs import Runs, group
from conftest import article_scenario
from pdtune.cli import main
from pdtune.paths import REPO_ROOT
from pdtune.scenario import Scenario
from pdtune.workbook import SUMMARY_JSON, book_chapters, load_parameters, read_chapter, read_parameters_cell
from pdtune.workbook.summary import key_numbers

CHAPTERS = book_chapters(REPO_ROOT)
HINTS = typing.get_type_hints(Scenario)
DEFAULTS = article_scenario().to_dict()
PARAMS = REPO_ROOT / "data" / "params"


def _type_name(hint: object) -> str:
    """How a chapter must annotate a Scenario field: tuples of X are written as ``list[X]``, a section of its own
    (the ``plan:`` mapping, :class:`pdtune.scenario.PlanParameters`) as ``dict``, as ``Scenario.to_dict`` passes it."""
    if dataclasses.is_dataclass(hint):
        return "dict"
    if typing.get_origin(hint) is tuple:
        return f"list[{typing.get_args(hint)[0].__name__}]"
    return hint.__name__  # type: ignore[attr-defined]


@pytest.mark.parametrize("chapter", CHAPTERS, ids=[c.name for c in CHAPTERS])
def test_every_chapter_parameter_is_a_typed_workbook_parameter_with_the_articles_default(chapter) -> None:
    if chapter.source is None:
        pytest.skip(f"{chapter.entry} is listed in _toc.yml but has not been written yet")
    cell = read_parameters_cell(read_chapter(chapter.source))
    assert cell is not None and cell.names, f"{chapter.entry}: no cell tagged 'parameters'"
    assert cell.unlisted == (), (
        f"{chapter.entry}: papermill cannot read the line of {', '.join(cell.unlisted)} (it skips a line with a "
        "second '=', even in the comment), so --help-notebook does not list it")
    for name, parameter in cell.listed.items():
        assert name in HINTS, f"{chapter.entry}: {name} is not a Scenario field, so the workbook cannot set it"
        assert parameter.inferred_type_name == _type_name(HINTS[name]), (
            f"{chapter.entry}: {name} is annotated {parameter.inferred_type_name}, "
            f"the workbook passes {_type_name(HINTS[name])}")
        assert ast.literal_eval(parameter.default) == DEFAULTS[name], (
            f"{chapter.entry}: {name} defaults to {parameter.default}, the article's value is {DEFAULTS[name]!r}")


def _runnable(params_file: Path) -> Path:
    missing = [c.entry for c in CHAPTERS if c.source is None]
    if missing:
        pytest.skip(f"chapters not written yet: {', '.join(missing)}")
    scenario = Scenario.from_mapping(yaml.safe_load(params_file.read_text(encoding="utf-8")))
    absent = [p for kind in ("prefill", "decode", "disagg") for p in getattr(scenario, f"{kind}_results")
              if not scenario.resolve(p, base=params_file.parent).exists()]
    if absent:
        pytest.skip(f"{params_file.name}: data not generated yet: {', '.join(absent)}")
    return params_file


@pytest.mark.slow
@pytest.mark.parametrize("name", [pytest.param("deepseek-v3-gb200", marks=pytest.mark.xdist_group(
    group("deepseek-v3-gb200")))])  # the others: test_parameter_sets.py
def test_bundled_parameter_set_runs_every_chapter(name: str, runs: Runs, capsys: pytest.CaptureFixture[str]) -> None:
    """The workbook's run of the set (once per session, ``tests/chapter_runs.py``): every chapter ran, and its
    summary is this model's (``pdtune state``'s numbers), not the article's."""
    params_file = _runnable(PARAMS / f"{name}.yaml")
    run = runs[name]
    capsys.readouterr()  # what the run printed, if this test made it
    out = run.out
    html = run.html is not None
    summary = json.loads((out / SUMMARY_JSON).read_text(encoding="utf-8"))
    assert [c["status"] for c in summary["chapters"]] == ["ok"] * len(CHAPTERS)
    values = load_parameters(params_file).values()
    from exercises import solution_problems

    for c in CHAPTERS:
        notebook = run.notebooks[c.name]
        errors = [o for cell in notebook["cells"] for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        assert errors == [], c.name
        assert solution_problems(out / c.notebook) == [], c.name  # every exercise's solution ran (tests/exercises.py)
        injected = notebook["metadata"]["papermill"]["parameters"]
        assert injected and all(injected[k] == values[k] for k in injected), c.name

    # The per-request state and the KV figures are pdtune state's for this model, and not the article's.
    state = summary["state_per_request"]
    assert main([*shlex.split(state["command"])[1:], "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["bytes_per_request"] == state["bytes"]
    assert state["bytes"] != 759 * 2**20
    rows = [r for r in summary["decode_engines"]["rows"] if r.get("command")]
    assert rows
    for row in rows:
        assert main([*shlex.split(row["command"])[1:], "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["max_concurrency"] == pytest.approx(row["requests_per_engine"])
    article = key_numbers(Scenario(prefill_results=(), decode_results=(), disagg_results=()))
    reference = next(r for r in summary["decode_engines"]["rows"] if r["topology"] == summary["decode_engines"]
                     ["reference_topology"] and not r["mtp"])
    assert article.reference_engine is not None
    assert reference["kv_cache_gib"] != pytest.approx(article.reference_engine["kv_cache_gib"])

    if html:
        index = out / "html" / "index.html"
        assert index.is_file()
        for c in CHAPTERS:
            assert (out / "html" / "notebooks" / f"{c.name}.html").is_file(), c.name
        assert summary["html"]["built"] is True and summary["html"]["warnings"] == 0  # -W -n clean
