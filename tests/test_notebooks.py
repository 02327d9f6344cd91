"""Every chapter listed in _toc.yml executes top to bottom, in this venv's kernel (the book build's execution).

A chapter that nobody has written yet is skipped with its name; the parameters-cell convention of
notebooks/README.md (one cell tagged ``parameters``, typed assignments with a comment each) is checked
without executing anything.
"""

from __future__ import annotations

import sys
from pathlib import Path

import jupytext
import nbformat
import papermill
import pytest

from chapter_runs import Runs, group
from conftest import ROOT, toc_chapters

CHAPTERS = toc_chapters()
KERNEL = "python3"


def _source_or_skip(entry: str, source: Path | None) -> Path:
    if source is None:
        pytest.skip(f"{entry} is listed in _toc.yml but has not been written yet")
    return source


def _to_ipynb(source: Path, tmp_path: Path) -> Path:
    """The chapter as an .ipynb in tmp_path (papermill reads notebooks, the repository keeps MyST text)."""
    notebook = jupytext.read(source)
    target = tmp_path / f"{source.stem}.ipynb"
    nbformat.write(notebook, target)
    return target


def _parameter_cells(notebook: nbformat.NotebookNode) -> list[nbformat.NotebookNode]:
    return [c for c in notebook.cells if c.cell_type == "code" and "parameters" in c.metadata.get("tags", [])]


@pytest.mark.parametrize(("entry", "source"), CHAPTERS, ids=[e for e, _ in CHAPTERS])
def test_chapter_runs_in_the_python3_kernel(entry: str, source: Path | None) -> None:
    notebook = jupytext.read(_source_or_skip(entry, source))
    kernel = notebook.metadata.get("kernelspec", {}).get("name")
    assert kernel == KERNEL, f"{entry}: kernelspec name must be {KERNEL}, not {kernel}"


@pytest.mark.parametrize(("entry", "source"), CHAPTERS, ids=[e for e, _ in CHAPTERS])
def test_chapter_has_one_typed_parameters_cell(entry: str, source: Path | None, tmp_path: Path) -> None:
    source = _source_or_skip(entry, source)
    notebook = jupytext.read(source)
    cells = _parameter_cells(notebook)
    assert len(cells) == 1, f"{entry}: expected one code cell tagged 'parameters', found {len(cells)}"
    first_code = next(c for c in notebook.cells if c.cell_type == "code")
    assert first_code is cells[0], f"{entry}: the parameters cell must be the first code cell"
    params = papermill.inspect_notebook(str(_to_ipynb(source, tmp_path)))
    assert params, f"{entry}: papermill finds no parameters"
    for name, info in params.items():
        assert info["inferred_type_name"] != "None", f"{entry}: parameter {name} has no type annotation"
        assert info["help"].strip(), f"{entry}: parameter {name} has no comment saying what it is"


@pytest.mark.slow
@pytest.mark.xdist_group(group("article"))
@pytest.mark.parametrize(("entry", "source"), CHAPTERS, ids=[e for e, _ in CHAPTERS])
def test_chapter_executes(entry: str, source: Path | None, runs: Runs) -> None:
    """Every chapter ran top to bottom in the book's build (its execute step, the article's run of
    ``tests/chapter_runs.py``: this venv's kernel, each in its own folder), and no cell left an error."""
    source = _source_or_skip(entry, source)
    executed = runs["article"].notebooks.get(source.stem)
    assert executed is not None, f"{entry} is not in the book build's cache"
    code = [c for c in executed.cells if c.cell_type == "code"]
    errors = [o for c in code for o in c.get("outputs", []) if o.output_type == "error"]
    assert code and errors == []


def test_the_python3_kernel_is_this_venvs(tmp_path: Path) -> None:
    """papermill's 'python3' must start this interpreter, so chapters import the pdtune under test."""
    notebook = nbformat.v4.new_notebook()
    notebook.metadata["kernelspec"] = {"name": KERNEL, "display_name": "Python 3", "language": "python"}
    probe = "import sys, pdtune\nprint(sys.prefix)\nprint(pdtune.__file__)"
    notebook.cells = [nbformat.v4.new_code_cell(probe)]
    source, executed = tmp_path / "probe.ipynb", tmp_path / "probe.out.ipynb"
    nbformat.write(notebook, source)
    papermill.execute_notebook(str(source), str(executed), kernel_name=KERNEL, progress_bar=False)
    printed = nbformat.read(executed, as_version=4).cells[0].outputs[0]["text"].splitlines()
    import pdtune

    assert printed == [sys.prefix, pdtune.__file__]


#: The widest code line that fits the book's column at 1400 px (a code cell's box is 780 px), and inside a
#: folded solution, whose box is narrower. The browser test measures the pages; this catches it earlier.
CODE_WIDTH, SOLUTION_CODE_WIDTH = 88, 86


@pytest.mark.parametrize("chapter", sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9]*.md")))
def test_code_lines_fit_the_column(chapter: str) -> None:
    """Every code line but the parameters cell's (whose comments wrap on the page) fits the column."""
    too_long, in_solution, fence, parameters, hidden = [], False, False, False, False
    for number, line in enumerate((ROOT / "notebooks" / f"{chapter}.md").read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("```{solution-start}"):
            in_solution = True
        elif line.startswith("```{solution-end}"):
            in_solution = False
        elif line.startswith("```{code-cell}"):
            fence, parameters, hidden = True, False, False
        elif fence and line.startswith("```"):
            fence = False
        elif fence:
            tags = line.strip() if line.strip().startswith(":tags:") else ""
            parameters = parameters or "parameters" in tags
            hidden = hidden or "hide-input" in tags  # folded like a solution, as narrow
            width = SOLUTION_CODE_WIDTH if in_solution or hidden else CODE_WIDTH
            if not parameters and len(line) > width:
                too_long.append(f"line {number} ({len(line)} > {width}): {line.strip()[:70]}")
    assert too_long == [], "\n".join(too_long)
