"""Re-run every chapter for another model and cluster, from one parameters file.

A parameters file (``data/params/*.yaml``) is a :class:`~pdtune.scenario.Scenario` written out: the model,
the GPU and its memory, the workload, the topologies, where the benchmark results are. The workbook

1. reads and checks it completely before anything runs: names and types (:meth:`Scenario.from_mapping`),
   every file it names, the model, the GPU, and the key numbers of :mod:`pdtune.summary` (which loads the
   results, so a results file pdtune cannot read fails here too, naming the file);
2. runs each chapter listed in ``_toc.yml`` with papermill (chapters are jupytext MyST files), injecting
   only the parameters the chapter's ``parameters`` cell declares, with paths made absolute because a
   chapter runs with its own folder as the working directory;
3. writes one executed ``.ipynb`` per chapter, ``summary.json`` and ``summary.md``, and with ``html=True``
   a Jupyter Book of the executed notebooks.

Everything is written into a hidden folder beside the output folder and renamed into place at the end, so
the output folder appears whole or not at all. A failing chapter does not stop the others: it is reported
with the cell (and its line in the chapter's source) where it failed, and its executed notebook, error
included, is kept.
"""

from __future__ import annotations

import ast
import json
import multiprocessing
import os
import queue as queue_module
import re
import shutil
import subprocess
import sys
import tempfile
import time
import typing
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from pdtune import __version__, versions
from pdtune.errors import InputError
from pdtune.gpus import GpuSpec, load_gpu
from pdtune.model import load_model, models_dir
from pdtune.paths import REPO_ROOT
from pdtune.results import parse_gpus
from pdtune.scenario import Scenario
from pdtune.site.bookbuild import TOC_NAME, resolve_entry, toc_entries
from pdtune.site.render import NO_WIDGETS_ENV, STATIC_BUILD_ENV
from pdtune.summary import KeyNumbers, default_title, key_numbers, to_markdown
from pdtune.topology import parse_topology
from pdtune.units import GiB

#: Scenario fields that hold paths; a chapter receives them absolute.
PATH_FIELDS: tuple[str, ...] = ("vllm_logs", "prefill_results", "decode_results", "disagg_results")
#: Toc entries in this folder are chapters (notebooks); every other entry is a prose page.
CHAPTER_DIR = "notebooks"
#: Seconds one cell may run, as ``_config.yml``'s ``execute.timeout`` allows the book build.
CELL_TIMEOUT = 300
SUMMARY_JSON = "summary.json"
SUMMARY_MD = "summary.md"
HTML_DIR = "html"
HTML_LOG = "html-build.log"
#: The page the HTML book opens the workbook with (its label, and its file in the book source).
SUMMARY_PAGE = "workbook-summary"
_PROGRESS_ENGINE = "pdtune-progress"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_SPHINX_WARNING = re.compile(r"^(?:.*?: )?WARNING: ", re.MULTILINE)  # Sphinx's "file:line: WARNING: ..."


# ------------------------------------------------------------------------------------- the parameters file


class _StrictLoader(yaml.SafeLoader):
    """YAML that refuses a key given twice: the second would silently win otherwise."""


def _mapping_without_duplicates(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict[Any, int] = {}
    for key_node, _value in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"{key!r} is given twice (lines {seen[key]} and {key_node.start_mark.line + 1})",
                key_node.start_mark)
        seen[key] = key_node.start_mark.line + 1
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates)


@dataclass(frozen=True)
class Parameters:
    """A checked parameters file: the scenario as written, and the same with every path made absolute."""

    source: Path
    scenario: Scenario
    resolved: Scenario

    def values(self) -> dict[str, Any]:
        """What a chapter may receive, by parameter name (lists, not tuples: papermill writes literals)."""
        return self.resolved.to_dict()


def load_parameters(path: str | os.PathLike[str]) -> Parameters:
    """Read a parameters file and check it completely; :class:`InputError` names the file and the key.

    Paths in the file are relative to the file's folder, or else to the repository (so the bundled files
    can name ``data/clusters/...``). A file that names ``gpu`` but not ``gpu_memory_gib`` gets that GPU's
    memory from ``data/gpus/gpus.csv`` rather than the article's GB300 figure.
    """
    source = Path(path)
    if not source.is_file():
        raise InputError(source, "-", "no such parameters file")
    try:
        raw = yaml.load(source.read_text(encoding="utf-8"), Loader=_StrictLoader)  # a SafeLoader subclass
    except UnicodeDecodeError:
        raise InputError(source, "-", "not UTF-8 text") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "-"
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(source, where, f"not valid YAML: {problem}") from None
    if raw is None:
        raise InputError(source, "-", "the file is empty; write at least the model (data/params/README.md)")
    if not isinstance(raw, dict):
        raise InputError(source, "-", f"expected 'key: value' lines at the top, got a {type(raw).__name__}")
    values = dict(raw)
    for key in values:
        if not isinstance(key, str):
            raise InputError(source, str(key), "parameter names are words, not numbers")
    if "gpu" in values and "gpu_memory_gib" not in values and isinstance(values["gpu"], str):
        values["gpu_memory_gib"] = round(_gpu(source, values["gpu"]).memory_total / GiB, 2)
    try:
        scenario = Scenario.from_mapping(values, source=str(source))
    except InputError as exc:
        raise _with_yaml_hint(exc, values) from None
    resolved = _resolve(scenario, source.parent, source)
    check_inputs(resolved, source)
    return Parameters(source=source, scenario=scenario, resolved=resolved)


def _gpu(source: Path, name: str) -> GpuSpec:
    try:
        return load_gpu(name)
    except InputError as exc:
        raise InputError(source, "gpu", exc.message) from None


def _with_yaml_hint(exc: InputError, values: dict[str, Any]) -> InputError:
    """YAML reads ``vllm: 0.26`` as a number; say how to write it as text."""
    value = values.get(exc.field)
    text_field = typing.get_type_hints(Scenario).get(exc.field) is str
    if text_field and exc.message.startswith("must be a string") and isinstance(value, (int, float)) \
            and not isinstance(value, bool):
        return InputError(exc.source, exc.field, f"{exc.message}; quote it in YAML: {exc.field}: \"{value}\"")
    return exc


def _resolve(scenario: Scenario, base: Path, source: Path) -> Scenario:
    """The scenario with result paths, logs and a model given as a path made absolute; each must exist."""
    changes: dict[str, Any] = {}
    for name in PATH_FIELDS:
        paths = []
        for text in getattr(scenario, name):
            path = scenario.resolve(text, base=base)
            if not path.exists():
                absolute = Path(text).expanduser().is_absolute()
                where = "" if absolute else f" (looked in {base} and {REPO_ROOT})"
                raise InputError(source, name, f"no such file or folder: {text}{where}")
            if name == "vllm_logs" and not path.is_file():
                raise InputError(source, name, f"a vLLM log is a file, got a folder: {text}")
            paths.append(str(path.resolve()))
        changes[name] = tuple(paths)
    changes["model"] = _model_reference(scenario, base, source)
    return replace(scenario, **changes)


def _model_reference(scenario: Scenario, base: Path, source: Path) -> str:
    """A bundled model stays a name (chapters print it); anything else becomes an absolute path."""
    model = scenario.model
    local = Path(model).expanduser()
    bundled = (models_dir() / model / "config.json").is_file()
    if bundled and not local.is_absolute() and not (base / local).exists():
        return model
    path = scenario.resolve(model, base=base)
    if not path.exists():
        bundled = ", ".join(sorted(p.parent.name for p in models_dir().glob("*/config.json")))
        raise InputError(source, "model", f"{model!r} is neither a file or folder (relative to {base}) nor a "
                                          f"bundled model ({bundled})")
    return str(path.resolve())


def check_inputs(scenario: Scenario, source: Path) -> None:
    """Everything a chapter would trip over, checked once, before any chapter runs."""
    try:
        load_model(scenario.model)
    except InputError as exc:
        raise InputError(source, "model", f"{scenario.model}: {exc.field}: {exc.message}") from None
    _gpu(source, scenario.gpu)
    versions.parse(scenario.vllm, str(source))
    for name in ("prefill_topologies", "decode_topologies"):
        values = getattr(scenario, name)
        if not values:
            raise InputError(source, name, "the list is empty")
        for text in values:
            try:
                parse_topology(text, str(source))
            except InputError as exc:
                raise InputError(source, name, exc.message) from None
    if scenario.gpus.strip():
        try:
            parse_gpus(scenario.gpus, str(source))
        except InputError as exc:
            raise InputError(source, "gpus", exc.message) from None


# ------------------------------------------------------------------------------------- chapters


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


def chapter_parameters(names: Iterable[str], values: dict[str, Any]) -> dict[str, Any]:
    """The values to inject: the names the chapter assigns that the scenario knows, nothing else."""
    return {name: values[name] for name in names if name in values}


# ------------------------------------------------------------------------------------- results


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


@dataclass(frozen=True)
class HtmlBuild:
    """The mini-book: where its index is, and how clean the Sphinx run was (``-W -n``)."""

    built: bool
    warnings: int
    log: str | None  # file name of the build log inside the output folder (kept unless the build was clean)
    message: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"built": self.built, "index": f"{HTML_DIR}/index.html" if self.built else None,
                "warnings": self.warnings, "log": self.log, "message": self.message}


@dataclass(frozen=True)
class WorkbookResult:
    out: Path
    chapters: tuple[ChapterResult, ...]
    summary: dict[str, Any]
    html: HtmlBuild | None = None

    @property
    def ok(self) -> bool:
        return all(c.status == "ok" for c in self.chapters) and (self.html is None or self.html.built)

    @property
    def failures(self) -> list[ChapterResult]:
        return [c for c in self.chapters if c.status != "ok"]


# ------------------------------------------------------------------------------------- running


@dataclass(frozen=True)
class _Job:
    index: int
    source: str
    output: str
    parameters: dict[str, Any]
    cwd: str
    source_label: str  # the chapter's path inside the book, recorded in the notebook's metadata
    cell_timeout: int


#: Set in each worker process by :func:`_init_worker`: where cell-progress events go.
_progress_queue: Any = None
_engine_registered = False


def _init_worker(progress: Any, env: dict[str, str]) -> None:
    global _progress_queue
    _progress_queue = progress
    os.environ.update(env)
    # Kernels inherit this process's stderr and greet it with start-up warnings; what a chapter prints or
    # raises is in its notebook, and a failure is reported from there.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    os.close(devnull)
    # Executed notebooks are read outside the book too: every chart must carry its own vega bundle;
    # nobody will move an explorer's sliders, so it leaves its note rather than a widget without state.
    os.environ.pop(STATIC_BUILD_ENV, None)
    os.environ[NO_WIDGETS_ENV] = "1"


def _kernel_env() -> dict[str, str]:
    """Kernels from this Python's environment, whatever the user's PATH says."""
    bin_dir = str(Path(sys.executable).parent)
    return {"JUPYTER_PREFER_ENV_PATH": "1", "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}


def _progress_engine() -> str:
    """A papermill engine that reports each finished cell and keeps the notebook of an interrupted run."""
    global _engine_registered
    if _engine_registered:
        return _PROGRESS_ENGINE
    import nbformat
    from papermill.engines import NBClientEngine, papermill_engines

    class ProgressEngine(NBClientEngine):
        @classmethod
        def execute_managed_notebook(cls, nb_man: Any, kernel_name: str, **kwargs: Any) -> Any:
            index = kwargs.pop("pdtune_index")
            output = kwargs.pop("pdtune_output")
            complete = nb_man.cell_complete
            done = 0

            def cell_complete(cell: Any, cell_index: int | None = None, **kw: Any) -> None:
                nonlocal done
                complete(cell, cell_index=cell_index, **kw)
                done += 1
                if _progress_queue is not None:
                    _progress_queue.put((index, done, len(nb_man.nb.cells)))

            nb_man.cell_complete = cell_complete
            try:
                return super().execute_managed_notebook(nb_man, kernel_name, **kwargs)
            except Exception:
                # papermill saves the notebook itself only for an error raised inside a cell; after a
                # timeout or a dead kernel keep what ran (the cells not reached stay 'pending').
                nbformat.write(nb_man.nb, output)
                raise

    papermill_engines.register(_PROGRESS_ENGINE, ProgressEngine)
    _engine_registered = True
    return _PROGRESS_ENGINE


def _execute(job: _Job) -> dict[str, Any]:
    """Run one chapter (in a worker process); never raises for a chapter's own error."""
    import papermill
    from papermill.exceptions import PapermillExecutionError

    started = time.monotonic()
    result: dict[str, Any] = {"status": "ok", "notes": []}
    source = Path(job.source)
    output = Path(job.output)
    try:
        nb = read_chapter(source)
        if _progress_queue is not None:
            _progress_queue.put((job.index, 0, len(nb.cells) + (1 if job.parameters else 0)))
        papermill.execute_notebook(
            nb,
            str(output),
            parameters=job.parameters,
            engine_name=_progress_engine(),
            request_save_on_cell_execute=False,
            progress_bar=False,
            cwd=job.cwd,
            execution_timeout=job.cell_timeout,
            pdtune_index=job.index,
            pdtune_output=str(output),
        )
    except PapermillExecutionError as exc:
        result.update(status="failed", error=f"{exc.ename}: {exc.evalue}", **_locate(source, exc.source))
    except Exception as exc:  # a timeout, a dead kernel, an unreadable chapter: still this chapter's failure
        message = f"{type(exc).__name__}: {exc}".strip().splitlines()[0]
        result.update(status="failed", error=message, **_locate(source, _running_cell(output)))
    result["seconds"] = time.monotonic() - started
    if output.is_file():
        _record_source(output, job.source_label)
    return result


def _running_cell(output: Path) -> str:
    """The source of the last code cell that started in a partly executed notebook ('' if none did)."""
    if not output.is_file():
        return ""
    last = ""
    for cell in json.loads(output.read_text(encoding="utf-8")).get("cells", []):
        status = cell.get("metadata", {}).get("papermill", {}).get("status")
        if cell.get("cell_type") == "code" and status not in (None, "pending"):
            text = cell.get("source", "")
            last = text if isinstance(text, str) else "".join(text)
    return last


def _locate(source: Path, cell_source: str) -> dict[str, Any]:
    """Where a cell sits in a chapter: position, first line, the heading above it ({} if not found)."""
    wanted = cell_source.strip()
    if not wanted:
        return {}
    found: dict[str, Any] = {}
    section = None
    for position, cell in enumerate(read_chapter(source).cells, start=1):
        if cell.cell_type == "markdown":
            headings = [ln.lstrip("#").strip() for ln in cell.source.splitlines() if ln.startswith("#")]
            section = headings[-1] if headings else section
        elif cell.source.strip() == wanted:
            found = {"cell": position, "section": section}
            break
    text = source.read_text(encoding="utf-8")
    at = text.find(wanted)
    if at >= 0:
        found["line"] = text.count("\n", 0, at) + 1
    return found


def _record_source(output: Path, source_label: str) -> None:
    """papermill records a notebook given as an object by embedding it; record the chapter's path instead."""
    import nbformat

    nb = nbformat.read(output, as_version=4)
    if not isinstance(nb.metadata.get("papermill", {}).get("input_path"), str):
        nb.metadata.setdefault("papermill", {})["input_path"] = source_label
        nbformat.write(nb, output)


class _Bars:
    """One progress bar per chapter, drawn by the parent process from the workers' cell events."""

    def __init__(self, chapters: Sequence[Chapter], enabled: bool) -> None:
        from tqdm.auto import tqdm

        width = max((len(c.name) for c in chapters), default=0)
        self.bars = {
            c.number: tqdm(total=1, desc=f"{c.number} {c.name:<{width}}", unit="cell", position=i, leave=True,
                           disable=not enabled, file=sys.stderr, dynamic_ncols=True)
            for i, c in enumerate(chapters)
        }

    def update(self, index: int, done: int, total: int) -> None:
        bar = self.bars.get(index)
        if bar is None:
            return
        if bar.total != total:
            bar.total = total
        bar.n = done
        bar.refresh()

    def finish(self, index: int, status: str) -> None:
        bar = self.bars.get(index)
        if bar is not None:
            if status == "ok":
                bar.n = bar.total
            bar.set_postfix_str(status)
            bar.refresh()

    def close(self) -> None:
        for bar in self.bars.values():
            bar.close()


def _run_jobs(jobs: Sequence[_Job], chapters: Sequence[Chapter], workers: int, progress: bool,
              log: Callable[[str], None] | None = None) -> dict[int, dict]:
    """Run the chapters ``workers`` at a time, in separate processes (papermill changes the working folder).

    With ``progress`` each chapter has a bar; without, ``log`` gets a line as each chapter ends.
    """
    if not jobs:
        return {}
    context = multiprocessing.get_context("spawn")  # no fork of a process that may hold threads
    events = context.Queue()
    bars = _Bars([c for c in chapters if c.number in {j.index for j in jobs}], progress)
    outcomes: dict[int, dict[str, Any]] = {}
    try:
        with ProcessPoolExecutor(max_workers=max(1, min(workers, len(jobs))), mp_context=context,
                                 initializer=_init_worker, initargs=(events, _kernel_env())) as pool:
            futures: dict[Future, _Job] = {pool.submit(_execute, job): job for job in jobs}
            pending = set(futures)
            while pending:
                try:
                    index, done, total = events.get(timeout=0.1)
                    bars.update(index, done, total)
                    continue
                except queue_module.Empty:
                    pass
                for future in [f for f in pending if f.done()]:
                    pending.discard(future)
                    job = futures[future]
                    try:
                        outcomes[job.index] = future.result()
                    except Exception as exc:  # the worker process itself died
                        outcomes[job.index] = {"status": "failed", "error": f"{type(exc).__name__}: {exc}",
                                               "notes": []}
                    bars.finish(job.index, outcomes[job.index]["status"])
                    if log and not progress:
                        name = next(c.name for c in chapters if c.number == job.index)
                        log(f"{name} {outcomes[job.index]['status']} ({len(outcomes)} of {len(jobs)} done)")
    finally:
        bars.close()
        events.close()
    return outcomes


def run_workbook(
    params: Parameters,
    out: str | os.PathLike[str],
    *,
    book_root: Path = REPO_ROOT,
    html: bool = False,
    force: bool = False,
    jobs: int = 2,
    cell_timeout: int = CELL_TIMEOUT,
    progress: bool = True,
    log: Callable[[str], None] | None = None,
) -> WorkbookResult:
    """Run every chapter of the book at ``book_root`` for ``params`` into the folder ``out``.

    Raises :class:`InputError` (and creates nothing) for bad parameters, an output folder that exists
    without ``force``, or results pdtune cannot read. Chapter failures are results, not exceptions.
    """
    out = Path(out)
    book_root = Path(book_root).resolve()
    _check_out(out, force, params, book_root)
    chapters = book_chapters(book_root)
    if not chapters:
        raise InputError(book_root / TOC_NAME, "chapters", f"lists no notebook under {CHAPTER_DIR}/")
    if html and not (book_root / "_config.yml").is_file():
        raise InputError(book_root / "_config.yml", "--html", "the book has no _config.yml to build with")
    # This loads every result file: one pdtune cannot read fails here, before any chapter runs.
    numbers = key_numbers(params.resolved)

    values = params.values()
    cells: dict[int, ParametersCell | None] = {}
    outcomes: dict[int, dict[str, Any]] = {}
    for c in chapters:
        if c.source is None:
            continue
        try:
            cells[c.number] = read_parameters_cell(read_chapter(c.source))
        except Exception as exc:  # a chapter jupytext cannot read fails alone, like one that raises
            error = f"cannot read the chapter: {exc}".splitlines()[0]
            outcomes[c.number] = {"status": "failed", "error": error}
    notes = {number: _declaration_notes(cell, values) for number, cell in cells.items()}
    # Every chapter inlines the vega bundle: read from the vendor dir it costs nothing, rebuilt per kernel
    # it would cost seconds each. A no-op when the dir is current.
    from pdtune.site.vendor import VENDOR_DIR, write_vendor

    write_vendor(VENDOR_DIR)

    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".pdtune-workbook-", dir=out.parent))
    try:
        _chmod_like_mkdir(staging)
        prepared = []
        for c in chapters:
            if c.source is None or c.number not in cells:
                continue
            cell = cells[c.number]
            prepared.append(_Job(
                index=c.number, source=str(c.source), output=str(staging / c.notebook),
                parameters=chapter_parameters(cell.names if cell else (), values), cwd=str(c.source.parent),
                source_label=str(c.source.relative_to(book_root)), cell_timeout=cell_timeout,
            ))
        if log:
            log(f"running {len(prepared)} of {len(chapters)} chapters, {jobs} at a time, into {out}")
        outcomes.update(_run_jobs(prepared, chapters, jobs, progress, log))
        results = tuple(
            _chapter_result(c, outcomes.get(c.number), notes.get(c.number, []), staging, book_root)
            for c in chapters
        )
        summary = _summary(numbers, params, results)
        html_build = None
        if html:
            if log:
                log("building the HTML book")
            html_build = build_html(staging, chapters, results, summary, book_root)
            summary["html"] = html_build.to_dict()
        _write_summary(staging, summary, results)
        _swap_into_place(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return WorkbookResult(out=out, chapters=results, summary=summary, html=html_build)


def _chmod_like_mkdir(folder: Path) -> None:
    """mkdtemp makes the folder private; the output folder should get the permissions ``mkdir`` gives."""
    umask = os.umask(0)
    os.umask(umask)
    folder.chmod(0o777 & ~umask)


def _declaration_notes(cell: ParametersCell | None, values: dict[str, Any]) -> list[str]:
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


def _chapter_result(chapter: Chapter, outcome: dict[str, Any] | None, notes: list[str],
                    staging: Path, book_root: Path) -> ChapterResult:
    if chapter.source is None:
        return ChapterResult(chapter.number, chapter.name, chapter.entry, "missing")
    outcome = outcome or {"status": "failed", "error": "did not run"}
    written = (staging / chapter.notebook).is_file()
    return ChapterResult(
        number=chapter.number,
        name=chapter.name,
        entry=str(chapter.source.relative_to(book_root)),
        status=outcome["status"],
        notebook=chapter.notebook if written else None,
        seconds=outcome.get("seconds"),
        cell=outcome.get("cell"),
        line=outcome.get("line"),
        section=outcome.get("section"),
        error=outcome.get("error"),
        notes=tuple(notes) + tuple(outcome.get("notes", [])),
    )


def _summary(numbers: KeyNumbers, params: Parameters, results: Sequence[ChapterResult]) -> dict[str, Any]:
    summary = numbers.to_dict()
    summary["title"] = params.scenario.title or default_title(params.scenario)
    summary["parameters_file"] = str(params.source)
    summary["parameters"] = params.scenario.to_dict()
    summary["generated_by"] = f"pdtune {__version__} workbook"
    summary["chapters"] = [r.to_dict() for r in results]
    summary["status"] = "ok" if all(r.status == "ok" for r in results) else "failed"
    return summary


def _write_summary(folder: Path, summary: dict[str, Any], results: Sequence[ChapterResult]) -> None:
    text = json.dumps(summary, indent=2, ensure_ascii=False) + "\n"
    (folder / SUMMARY_JSON).write_text(text, encoding="utf-8")
    (folder / SUMMARY_MD).write_text(
        to_markdown(summary, [r.to_dict() for r in results], link=lambda c: f"[{c}]({c})"), encoding="utf-8")


def _check_out(out: Path, force: bool, params: Parameters, book_root: Path) -> None:
    """Refuse an existing folder unless ``force``; and even then only one this command wrote."""
    if not out.exists():
        if out.is_symlink():
            raise InputError(out, "--out", "is a broken symbolic link")
        return
    if not force:
        raise InputError(out, "--out", "already exists; pass --force to replace it")
    if not out.is_dir():
        raise InputError(out, "--out", "exists and is not a folder")
    target = out.resolve()
    inputs = [book_root, params.source.resolve(), *(Path(p) for name in PATH_FIELDS
                                                    for p in getattr(params.resolved, name))]
    for path in inputs:
        if path == target or target in path.parents:
            raise InputError(out, "--out", f"holds {path}, an input of this run; choose another folder")
    if any(out.iterdir()) and not (out / SUMMARY_JSON).is_file():
        # --force replaces a previous workbook, never an arbitrary folder
        raise InputError(out, "--out", f"is not a workbook output (no {SUMMARY_JSON}); remove it yourself")


def _swap_into_place(staging: Path, out: Path) -> None:
    if out.exists():
        old = Path(tempfile.mkdtemp(prefix=".pdtune-workbook-old-", dir=out.parent))
        os.replace(out, old / "previous")
        try:
            os.replace(staging, out)
        except OSError:
            os.replace(old / "previous", out)
            raise
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(staging, out)


# ------------------------------------------------------------------------------------- the HTML book


def build_html(folder: Path, chapters: Sequence[Chapter], results: Sequence[ChapterResult],
               summary: dict[str, Any], book_root: Path = REPO_ROOT) -> HtmlBuild:
    """Build the executed notebooks in ``folder`` as a Jupyter Book into ``folder/html``.

    The book is the real one with its chapters swapped for the executed notebooks: the same ``_config.yml``
    (execution off), the same prose pages and table of contents, the same offline assets, plus a summary
    page first. Chapters that are missing are left out of the table of contents.
    """
    from pdtune.site.vendor import VENDOR_DIR, write_vendor

    config = yaml.safe_load((book_root / "_config.yml").read_text(encoding="utf-8")) or {}
    static_paths = [str(p) for p in config.get("sphinx", {}).get("config", {}).get("html_static_path", [])]
    if any(Path(p).resolve() == VENDOR_DIR.resolve() for p in (book_root / s for s in static_paths)):
        write_vendor(VENDOR_DIR)  # the vega bundle and MathJax, if this checkout has not written them yet
    src = folder / ".html-src"
    build = folder / ".html-build"
    try:
        _assemble_book(src, config, static_paths, chapters, results, summary, folder, book_root)
        done = _jupyter_book(src, build)
        index = build / "_build" / "html" / "index.html"
        output = _ANSI.sub("", done.stdout + "\n" + done.stderr)
        warnings = len(_SPHINX_WARNING.findall(output))
        built = index.is_file()
        log_name = None
        if not built or warnings or done.returncode != 0:
            log_name = HTML_LOG
            # plain text, with paths as they are in the book rather than in a folder that is gone
            (folder / HTML_LOG).write_text(output.replace(f"{src}{os.sep}", ""), encoding="utf-8")
        if built:
            os.replace(build / "_build" / "html", folder / HTML_DIR)
        message = "" if built else (done.stderr.strip().splitlines() or ["jupyter-book build failed"])[-1]
        return HtmlBuild(built=built, warnings=warnings, log=log_name, message=message)
    finally:
        shutil.rmtree(src, ignore_errors=True)
        shutil.rmtree(build, ignore_errors=True)


def _assemble_book(src: Path, config: dict[str, Any], static_paths: list[str], chapters: Sequence[Chapter],
                   results: Sequence[ChapterResult], summary: dict[str, Any], folder: Path,
                   book_root: Path) -> None:
    src.mkdir()
    chapter_entries = {c.entry: c for c in chapters}
    by_number = {r.number: r for r in results}
    # Prose pages, with their folders (figures, the bibliography); the static assets are linked, not copied.
    static_abs = {(book_root / s).resolve() for s in static_paths}
    copied: set[Path] = set()
    for entry in toc_entries(book_root / TOC_NAME):
        if entry in chapter_entries:
            continue
        path = resolve_entry(book_root, entry)
        if path is None:
            continue
        top = Path(entry).parts[0]
        if len(Path(entry).parts) > 1 and (book_root / top).is_dir():
            if top not in copied:
                _copy_tree(book_root / top, src / top, static_abs)
                copied.add(top)
        else:
            shutil.copy2(path, src / path.relative_to(book_root))
    for bib in config.get("bibtex_bibfiles", []) or []:
        target = src / bib
        if not target.exists() and (book_root / bib).is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(book_root / bib, target)
    for static in static_paths:
        link = src / static
        if (book_root / static).exists() and not link.exists():
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to((book_root / static).resolve(), target_is_directory=True)
    # The executed chapters, where the toc expects them.
    for chapter in chapters:
        result = by_number[chapter.number]
        if result.notebook:
            target = src / chapter.folder / chapter.notebook
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(folder / result.notebook, target)
    (src / f"{SUMMARY_PAGE}.md").write_text(
        f"({SUMMARY_PAGE})=\n" + to_markdown(
            summary, [r.to_dict() for r in results],
            link=lambda name: f"{{doc}}`{name} </{CHAPTER_DIR}/{Path(name).stem}>`"),
        encoding="utf-8")
    toc = yaml.safe_load((book_root / TOC_NAME).read_text(encoding="utf-8"))
    present = {c.entry: f"{c.folder}/{c.name}" for c in chapters if by_number[c.number].notebook}
    toc = _rewrite_toc(toc, present, set(chapter_entries))
    _insert_summary(toc)
    (src / TOC_NAME).write_text(yaml.safe_dump(toc, sort_keys=False), encoding="utf-8")
    config = json.loads(json.dumps(config))  # a deep copy
    config["title"] = f"{summary['title']} (pdtune workbook)"
    config.setdefault("execute", {})["execute_notebooks"] = "off"
    config["only_build_toc_files"] = True
    (src / "_config.yml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")


def _copy_tree(source: Path, target: Path, skip: set[Path]) -> None:
    def ignore(folder: str, names: list[str]) -> list[str]:
        return [n for n in names if (Path(folder) / n).resolve() in skip or n in ("_build", "__pycache__")]

    shutil.copytree(source, target, ignore=ignore, symlinks=True)


def _rewrite_toc(node: Any, present: dict[str, str], chapters: set[str]) -> Any:
    """The toc with chapter entries pointing at executed notebooks, missing chapters left out."""
    if isinstance(node, list):
        out = []
        for item in node:
            if isinstance(item, dict) and item.get("file") in chapters and item["file"] not in present:
                continue
            out.append(_rewrite_toc(item, present, chapters))
        return out
    if isinstance(node, dict):
        out = {k: _rewrite_toc(v, present, chapters) for k, v in node.items()}
        if isinstance(node.get("file"), str) and node["file"] in present:
            out["file"] = present[node["file"]]
        return out
    return node


def _insert_summary(toc: dict[str, Any]) -> None:
    """The summary page opens the book; the book's own front page becomes its first chapter."""
    front = {"file": toc["root"]}
    toc["root"] = SUMMARY_PAGE
    parts = toc.get("parts")
    if isinstance(parts, list) and parts:
        parts[0].setdefault("chapters", []).insert(0, front)
    else:
        toc.setdefault("chapters", []).insert(0, front)


def _jupyter_book(src: Path, build: Path) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).parent / "jupyter-book"
    command = [str(script)] if script.is_file() else [shutil.which("jupyter-book") or "jupyter-book"]
    command += ["build", str(src), "--path-output", str(build), "-W", "-n", "--keep-going", "--all"]
    env = dict(os.environ, **_kernel_env())
    try:
        return subprocess.run(command, cwd=src, env=env, capture_output=True, text=True, timeout=900)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return subprocess.CompletedProcess(command, 1, "", f"jupyter-book build could not run: {exc}")
