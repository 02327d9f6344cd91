"""Running the workbook: every chapter executed with papermill, in a pool, into a folder that appears whole.

Each chapter runs in a worker process (papermill changes the working folder), ``jobs`` at a time, with a
progress bar per chapter drawn from the workers' cell events. A worker keeps its kernel from one chapter to the
next (its start and the imports every chapter makes cost more than most chapters' cells; a chapter that timed
out or lost its kernel gets a new one), and each chapter starts as in a new kernel (:mod:`pdtune.site.kernels`):
the executed notebooks are the ones fresh kernels write, to the memory addresses pandas prints. A failing
chapter does not stop the others: it is reported with the cell (and its line in the chapter's source) where it
failed, and its executed notebook, error included, is kept. Everything is written into a staging folder beside the output folder and
swapped into place at the end (:class:`pdtune.io.FolderSwap`), so the output folder appears whole or not at all,
and a second run into the same folder meanwhile is refused.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import queue as queue_module
import signal
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pdtune.errors import InputError
from pdtune.guarded import read_yaml
from pdtune.io import FolderSwap
from pdtune.signals import die_with_parent
from pdtune.paths import REPO_ROOT
from pdtune.site.bookbuild import TOC_NAME
from pdtune.site import kernels, runcache
from pdtune.site.bookexec import kernel_env
from pdtune.site.render import NO_WIDGETS_ENV, STATIC_BUILD_ENV
from pdtune.workbook.minibook import HtmlBuild, build_html
from pdtune.workbook.chapter import (
    CHAPTER_DIR,
    Chapter,
    ChapterResult,
    ParametersCell,
    book_chapters,
    chapter_parameters,
    declaration_notes,
    read_chapter,
    read_parameters_cell,
)
from pdtune.workbook.parameters import PATH_FIELDS, Parameters
from pdtune.workbook.planning import PLAN_DIR, scenario_plan, write_plan
from pdtune.workbook.summary import SUMMARY_JSON, key_numbers, summary_record, write_summary


#: Seconds one cell may run, as ``_config.yml``'s ``execute.timeout`` allows the book build.
CELL_TIMEOUT = 300


_PROGRESS_ENGINE = "pdtune-progress"


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


def _init_worker(progress: Any, env: dict[str, str], parent_pid: int) -> None:
    global _progress_queue
    # Killed with the parent however it ends (SIGKILL included): no orphan keeps executing chapters. The
    # parent alone answers Ctrl-C (the terminal sends SIGINT to the whole group): it stops the workers itself.
    die_with_parent(parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
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


def _progress_engine() -> str:
    """A papermill engine that reports each finished cell and keeps the notebook of an interrupted run."""
    global _engine_registered
    if _engine_registered:
        return _PROGRESS_ENGINE
    import nbformat
    from papermill.clientwrap import PapermillNotebookClient
    from papermill.engines import NBClientEngine, logger, papermill_engines

    class ProgressEngine(NBClientEngine):
        @classmethod
        def execute_managed_notebook(cls, nb_man: Any, kernel_name: str, log_output: bool = False,
                                     stdout_file: Any = None, stderr_file: Any = None, start_timeout: int = 60,
                                     execution_timeout: int | None = None, **kwargs: Any) -> Any:
            index = kwargs.pop("pdtune_index")
            output = kwargs.pop("pdtune_output")
            kwargs.pop("input_path", None)
            complete = nb_man.cell_complete
            done = 0

            def cell_complete(cell: Any, cell_index: int | None = None, **kw: Any) -> None:
                nonlocal done
                complete(cell, cell_index=cell_index, **kw)
                done += 1
                if _progress_queue is not None:
                    _progress_queue.put((index, done, len(nb_man.nb.cells)))

            nb_man.cell_complete = cell_complete
            # NBClientEngine.execute_managed_notebook's client, on this worker's kernel, started afresh for the
            # chapter (papermill has moved this process into the chapter's folder).
            client = PapermillNotebookClient(
                nb_man, km=kernels.kernel_manager(kernel_name, ipc=os.name == "posix"), timeout=execution_timeout,
                startup_timeout=start_timeout, kernel_name=kernel_name, log=logger, log_output=log_output,
                stdout_file=stdout_file, stderr_file=stderr_file, **kwargs)
            try:
                with kernels.notebook_session(client, os.getcwd()):
                    return client.execute()
            except Exception:
                # papermill records an error raised inside a cell and saves the notebook itself; after a
                # timeout or a dead kernel (the session has given the next chapter a new kernel) keep what
                # ran: the cells not reached stay 'pending'.
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
    # The workers are this process's children, in its process group, and die with it (see _init_worker).
    pool = ProcessPoolExecutor(max_workers=max(1, min(workers, len(jobs))), mp_context=context,
                               initializer=_init_worker, initargs=(events, kernel_env(), os.getpid()))
    try:
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
    except BaseException:
        # Interrupted (Ctrl-C, SIGTERM) or failed: stop the chapters now rather than wait for them to finish
        # (what leaving the executor's ``with`` would do); their kernels follow their workers within a second.
        _kill_workers(pool)
        raise
    else:
        pool.shutdown(wait=True)
    finally:
        bars.close()
        events.close()
        events.cancel_join_thread()  # a killed reader must not keep this process waiting on the queue
    return outcomes


def _kill_workers(pool: ProcessPoolExecutor, timeout: float = 5.0) -> None:
    """SIGKILL every worker of ``pool`` and reap them (a chapter interrupted half-way has nothing to save)."""
    workers = list((getattr(pool, "_processes", None) or {}).values())  # pid -> Process; no public API in 3.11
    manager = getattr(pool, "_executor_manager_thread", None)  # shutdown(wait=False) forgets it
    for process in workers:
        with contextlib.suppress(Exception):
            process.kill()
    pool.shutdown(wait=False, cancel_futures=True)
    deadline = time.monotonic() + timeout
    for process in workers:
        with contextlib.suppress(Exception):
            process.join(max(0.0, deadline - time.monotonic()))
    # The pool's manager thread closes its wake-up pipe when it sees the workers gone; if it is still doing so
    # at interpreter exit, Python 3.11's exit hook writes to the closing pipe and prints "Bad file descriptor"
    # (fixed by a lock in 3.12). Waiting for the thread here leaves the hook nothing to wake.
    if manager is not None:
        manager.join(max(0.0, deadline - time.monotonic()))


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
    # Locked from the first check to the swap: a second run into the same --out is refused, never raced.
    with FolderSwap(out) as swap:
        _check_out(out, force, params, book_root)
        # runcache: the chapters and the summary search the plan once between them. Its folder is in the
        # staging folder, so what a killed run leaves goes with the staging folder the next run removes.
        with runcache.for_run(swap.staging):
            chapters = book_chapters(book_root)
            if not chapters:
                raise InputError(book_root / TOC_NAME, "chapters", f"lists no notebook under {CHAPTER_DIR}/")
            if html:
                if not (book_root / "_config.yml").is_file():
                    raise InputError(book_root / "_config.yml", "--html",
                                     "the book has no _config.yml to build with")
                # one that cannot be read fails now, not at the end
                read_yaml(book_root / "_config.yml", "_config.yml")
            # This loads every result file: one pdtune cannot read fails here, before any chapter runs.
            from pdtune.switches import vllm_environment

            with vllm_environment(params.resolved.environment(str(params.source)), "vllm_env"):
                numbers = key_numbers(params.resolved)
            # The plan's search too: a budget nothing fits stops here, naming the parameters file and
            # plan.max_gpus.
            planned = scenario_plan(params.resolved, params.source)

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
            notes = {number: declaration_notes(cell, values) for number, cell in cells.items()}
            # Every chapter inlines the vega bundle: read from the vendor dir it costs nothing, rebuilt
            # per kernel it would cost seconds each. A no-op when the dir is current.
            from pdtune.site.vendor import VENDOR_DIR, write_vendor

            write_vendor(VENDOR_DIR)

            staging = swap.staging
            prepared = []
            for c in chapters:
                if c.source is None or c.number not in cells:
                    continue
                cell = cells[c.number]
                prepared.append(_Job(
                    index=c.number, source=str(c.source), output=str(staging / c.notebook),
                    parameters=chapter_parameters(cell.names if cell else (), values),
                    cwd=str(c.source.parent),
                    source_label=str(c.source.relative_to(book_root)), cell_timeout=cell_timeout,
                ))
            if log:
                log(f"running {len(prepared)} of {len(chapters)} chapters, {jobs} at a time, into {out}")
            outcomes.update(_run_jobs(prepared, chapters, jobs, progress, log))
            results = tuple(
                _chapter_result(c, outcomes.get(c.number), notes.get(c.number, []), staging, book_root)
                for c in chapters
            )
            summary = summary_record(numbers, params, [r.to_dict() for r in results])
            summary["plan"] = write_plan(staging / PLAN_DIR, planned, recipes=params.resolved.plan.recipes)
            html_build = None
            if html:
                if log:
                    log("building the HTML book")
                html_build = build_html(staging, chapters, results, summary, book_root)
                summary["html"] = html_build.to_dict()
            write_summary(staging, summary)
        swap.commit()
    return WorkbookResult(out=out, chapters=results, summary=summary, html=html_build)


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
