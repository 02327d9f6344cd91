"""The exercises of an executed chapter, read from the notebook papermill wrote: which code cells belong to which
exercise's solution, and whether each ran to the end without an error.

A solution is the cells between a markdown cell holding ``{solution-start} LABEL`` and the one holding
``{solution-end}`` (sphinx-exercise's gated directives, as ``notebooks/README.md`` asks). Papermill stops at the
first error and leaves every later cell unexecuted, so a solution that raised, or one after a cell that raised,
shows here as a cell with an error output or with no execution count. ``tests/test_parameter_sets.py`` and
``tests/test_workbook_chapters.py`` run every chapter of the workbook for the bundled parameter sets and for
GLM-4.7-like and Kimi-K2-like models, and check every solution of every chapter with :func:`solution_problems`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_START = re.compile(r"```\{solution-start\}\s+(\S+)")
_END = re.compile(r"```\{solution-end\}")


@dataclass
class Solution:
    label: str
    cells: list[dict[str, Any]] = field(default_factory=list)


def solutions(notebook: dict[str, Any]) -> list[Solution]:
    """Every solution of a notebook (as JSON), with its code cells in order."""
    found: list[Solution] = []
    current: Solution | None = None
    for cell in notebook["cells"]:
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if cell["cell_type"] == "markdown":
            for line in source.splitlines():
                start, end = _START.search(line), _END.search(line)
                if start:
                    current = Solution(start.group(1))
                    found.append(current)
                elif end:
                    current = None
        elif cell["cell_type"] == "code" and current is not None:
            current.cells.append(cell)
    return found


def solution_problems(path: Path) -> list[str]:
    """What went wrong in the solutions of the executed notebook at ``path`` (empty: every one ran clean)."""
    notebook = json.loads(Path(path).read_text(encoding="utf-8"))
    found = []
    for solution in solutions(notebook):
        for i, cell in enumerate(solution.cells, start=1):
            errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
            if errors:
                found.append(f"{path.name} {solution.label} cell {i}: {errors[0].get('ename')}: "
                             f"{errors[0].get('evalue', '')[:200]}")
            elif cell.get("execution_count") is None:
                found.append(f"{path.name} {solution.label} cell {i}: never ran (an earlier cell failed)")
    return found


def exercise_labels(source: str) -> list[str]:
    """The labels of the solutions a chapter's MyST source holds."""
    return _START.findall(source)
