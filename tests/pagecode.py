"""The code a chapter page shows, read back from its MyST source, so a test can hold it to the package's.

A page shows each core rule as a short function of its own (``notebooks/README.md``, "A chapter is a
lesson"): a code cell with a ``def`` of a few lines of plain Python. :func:`page_functions` finds every
top-level ``def`` of a page's code cells and runs it alone, with the cell's imports, in a fresh namespace:
a page rule may use only the standard library, so what the test runs is exactly what the reader reads.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path
from typing import Any

from conftest import ROOT

NOTEBOOKS = ROOT / "notebooks"


def code_cells(page: str) -> list[str]:
    """The code cells of ``notebooks/<page>.md``, in order (jupytext reads the MyST file)."""
    import jupytext

    notebook = jupytext.read(NOTEBOOKS / f"{page}.md")
    return [c.source for c in notebook.cells if c.cell_type == "code"]


def _definitions(source: str) -> tuple[list[ast.stmt], list[ast.FunctionDef]]:
    try:
        tree = ast.parse(source)
    except SyntaxError:  # IPython magics; no page rule lives in such a cell
        return [], []
    imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    return imports, defs


def defined_names(page: str) -> list[str]:
    """Every function a page defines at the top level of a code cell."""
    return [d.name for source in code_cells(page) for d in _definitions(source)[1]]


def page_functions(page: str) -> dict[str, Callable[..., Any]]:
    """Every function ``notebooks/<page>.md`` defines, each built from its own cell's imports and defs only."""
    found: dict[str, Callable[..., Any]] = {}
    for source in code_cells(page):
        imports, defs = _definitions(source)
        if not defs:
            continue
        module = ast.Module(body=[*imports, *defs], type_ignores=[])
        namespace: dict[str, Any] = {"__name__": f"page_{page}"}
        exec(compile(module, f"notebooks/{page}.md", "exec"), namespace)  # noqa: S102 - the page's own code
        found.update({d.name: namespace[d.name] for d in defs})
    return found


def page_source(page: str, name: str) -> str:
    """The source of one page function, as the reader sees it."""
    for source in code_cells(page):
        for d in _definitions(source)[1]:
            if d.name == name:
                return ast.get_source_segment(source, d) or ""
    raise KeyError(f"notebooks/{page}.md defines no function {name}")


def pages() -> list[str]:
    """Every chapter page (``notebooks/*.md`` but the README), by file stem."""
    return sorted(p.stem for p in NOTEBOOKS.glob("*.md") if p.name != "README.md")
