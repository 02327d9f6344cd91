"""The chapters the workbook runs: the book's table of contents read into :class:`Chapter` records, the
``parameters`` cell each declares (:func:`read_parameters_cell`), the values to inject into it
(:func:`chapter_parameters`), and how each run went (:class:`ChapterResult`).

A leaf of the workbook package: the runner, the summary and the mini-book all read these records, and this
module reads none of theirs.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pdtune.paths import REPO_ROOT
from pdtune.site.bookbuild import TOC_NAME, resolve_entry, toc_entries

#: Toc entries in this folder are chapters (notebooks); every other entry is a prose page.
CHAPTER_DIR = "notebooks"


@dataclass(frozen=True)
class Chapter:
    """One notebook listed in the book's table of contents; ``source`` is None while nobody has written it."""

    number: int
    entry: str
    source: Path | None

    @property
    def name(self) -> str:
        """``01_state``: the entry's file name without its suffix, which names the executed notebook."""
        entry = Path(self.entry)
        return entry.stem if entry.suffix in (".md", ".ipynb") else entry.name

    @property
    def notebook(self) -> str:
        return f"{self.name}.ipynb"

    @property
    def folder(self) -> str:
        """The entry's folder inside the book (``notebooks``)."""
        return str(Path(self.entry).parent)


def book_chapters(book_root: Path = REPO_ROOT) -> list[Chapter]:
    """The chapters of the book at ``book_root``, in reading order, from its ``_toc.yml``."""
    book_root = Path(book_root)
    entries = [e for e in toc_entries(book_root / TOC_NAME) if Path(e).parts[:1] == (CHAPTER_DIR,)]
    return [Chapter(i, e, resolve_entry(book_root, e)) for i, e in enumerate(entries, start=1)]


def read_chapter(path: Path) -> Any:
    """A chapter as a notebook (jupytext reads MyST markdown and ``.ipynb`` alike)."""
    import jupytext

    return jupytext.read(path)


@dataclass(frozen=True)
class ParametersCell:
    """A chapter's cell tagged ``parameters``, as Python reads it and as papermill lists it."""

    names: tuple[str, ...]  # every name the cell assigns, in order (Python's own parser)
    listed: dict[str, Any]  # what ``papermill --help-notebook`` lists: name -> type, default, help

    @property
    def unlisted(self) -> tuple[str, ...]:
        """Assigned names papermill cannot read (it skips any line with a second ``=``, even in a comment)."""
        return tuple(n for n in self.names if n not in self.listed)


def read_parameters_cell(nb: Any) -> ParametersCell | None:
    """The first code cell tagged ``parameters`` (None when there is none)."""
    import logging

    from papermill.translators import papermill_translators

    for cell in nb.cells:
        if cell.cell_type == "code" and "parameters" in cell.metadata.get("tags", []):
            kernel = nb.metadata.get("kernelspec", {})
            translator = papermill_translators.find_translator(kernel.get("name", "python3"),
                                                               kernel.get("language", "python"))
            papermill_log = logging.getLogger("papermill")
            level = papermill_log.level
            papermill_log.setLevel(logging.ERROR)  # its "Unable to parse line" becomes a chapter note instead
            try:
                listed = {p.name: p for p in translator.inspect(cell)}
            finally:
                papermill_log.setLevel(level)
            return ParametersCell(_assigned_names(cell.source), listed)
    return None


def _assigned_names(source: str) -> tuple[str, ...]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return ()
    names: list[str] = []
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, ast.AnnAssign) else []
        names += [t.id for t in targets if isinstance(t, ast.Name) and t.id not in names]
    return tuple(names)


@functools.cache
def _first_chapters(book_root: Path) -> dict[str, str]:
    first: dict[str, str] = {}
    for chapter in book_chapters(book_root):
        if chapter.source is None:
            continue
        cell = read_parameters_cell(read_chapter(chapter.source))
        for name in cell.names if cell is not None else ():
            first.setdefault(name, chapter.name)
    return first


def first_chapter_of(name: str, book_root: Path = REPO_ROOT) -> str | None:
    """The first chapter (``02_memory``) whose parameters cell declares ``name``: where a value the parameters
    file left out is listed (:func:`pdtune.chapters.display.defaults_note`); None when no chapter takes it."""
    return _first_chapters(Path(book_root)).get(name.split(".", 1)[0])  # plan.max_gpus: the chapter of plan


def chapter_parameters(names: Iterable[str], values: dict[str, Any]) -> dict[str, Any]:
    """The values to inject: the names the chapter assigns that the scenario knows, nothing else."""
    return {name: values[name] for name in names if name in values}


def declaration_notes(cell: ParametersCell | None, values: dict[str, Any]) -> list[str]:
    if cell is None:
        return ["no cell tagged 'parameters': the chapter ran with its own values"]
    notes = []
    unknown = [n for n in cell.names if n not in values]
    if unknown:
        notes.append(f"kept its own value for {', '.join(unknown)} (not a workbook parameter)")
    if cell.unlisted:
        notes.append(f"papermill cannot read the parameters-cell line of {', '.join(cell.unlisted)} (a "
                     "second '=' on it, perhaps in the comment): set anyway, but --help-notebook omits it")
    untyped = [n for n, p in cell.listed.items() if p.inferred_type_name in (None, "None")]
    if untyped:
        notes.append(f"parameters without a type annotation: {', '.join(untyped)}")
    return notes


@dataclass(frozen=True)
class ChapterResult:
    """How one chapter went. ``status`` is ``ok``, ``failed`` or ``missing``."""

    number: int
    name: str
    entry: str
    status: str
    notebook: str | None = None  # file name inside the output folder
    seconds: float | None = None
    cell: int | None = None  # 1-based position of the failing cell among the chapter's cells
    line: int | None = None  # its first line in the chapter's source file
    section: str | None = None  # the heading above it
    error: str | None = None
    notes: tuple[str, ...] = ()

    @property
    def failed_at(self) -> str:
        """``cell 12 (line 142 of notebooks/03_graphs.md, under "Graph counts")``; empty when unknown."""
        if self.cell is None:
            return "" if self.line is None else f"line {self.line} of {self.entry}"
        where = [f"line {self.line} of {self.entry}"] if self.line else []
        if self.section:
            where.append(f'under "{self.section}"')
        return f"cell {self.cell}" + (f" ({', '.join(where)})" if where else "")

    def describe(self) -> str:
        if self.status == "ok":
            return f"ok in {self.seconds:.1f} s"
        if self.status == "missing":
            return f"missing: {self.entry} is listed in {TOC_NAME} but does not exist"
        return f"FAILED{' at ' + self.failed_at if self.failed_at else ''}: {self.error}"

    def to_dict(self) -> dict[str, Any]:
        out = {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}
        if self.status == "failed":
            out["failed_at"] = self.failed_at
        return out
