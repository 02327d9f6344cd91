"""Execute the book's notebooks in parallel, before Sphinx, so the build stays within its time budget.

Jupyter Book 1 executes notebooks one after another while it reads them; on 2 cores that leaves one core
idle for most of the build. This step runs every notebook in ``_toc.yml`` on a pool of ``--jobs`` workers
(largest file first), each keeping one kernel and starting each notebook as in a new one
(:mod:`pdtune.site.kernels`), stores the results in a jupyter-cache that it wipes first, and writes a copy of
``_config.yml`` whose ``execute`` section reads that cache. Every build still executes every chapter: the
cache is never older than the build that reads it, so the staleness that makes ``_config.yml`` say
``force`` (the cache keys on cell text, not on ``src/``) cannot happen. A notebook that raises fails this
step with its traceback.

    python -m pdtune.site.bookexec [BOOK_ROOT] --cache _build/.jupyter_cache \
        --config-out _build/_config.executed.yml [--jobs N]
    jupyter-book build . --config _build/_config.executed.yml -W -n --keep-going --all
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

import yaml

from pdtune.errors import InputError
from pdtune.io import atomic_write_text
from pdtune.guarded import read_yaml
from pdtune.paths import REPO_ROOT
from pdtune.site import kernels, runcache
from pdtune.site.bookbuild import TOC_NAME, check_toc, resolve_entry, toc_entries
from pdtune.site.render import STATIC_BUILD_ENV

CONFIG_NAME = "_config.yml"
# The same per-cell limit the book's configuration gives a forced execution.
DEFAULT_TIMEOUT_S = 300


@dataclass(frozen=True)
class Execution:
    path: Path
    seconds: float
    error: str | None  # the cell's traceback when the notebook raised


def toc_notebooks(book_root: Path) -> list[Path]:
    """The pages of ``_toc.yml`` that are notebooks: ``.ipynb`` files and jupytext MyST markdown."""
    from myst_nb.core.read import is_myst_markdown_notebook

    notebooks = []
    for entry in toc_entries(Path(book_root) / TOC_NAME):
        path = resolve_entry(Path(book_root), entry)
        if path is None:
            continue
        if path.suffix == ".ipynb" or (
            path.suffix == ".md" and is_myst_markdown_notebook(path.read_text(encoding="utf-8"))
        ):
            notebooks.append(path)
    return notebooks


def _read(path: Path):
    """The notebook exactly as myst-nb reads it, so the cache key matches the one the build looks up."""
    import nbformat
    from myst_nb.core.read import myst_nb_reader_plugin

    return myst_nb_reader_plugin(str(path)) if path.suffix == ".md" else nbformat.read(path, as_version=4)


def kernel_env() -> dict[str, str]:
    """What makes a kernel (or ``jupyter-book``) started from here come from this Python's environment,
    whatever the user's PATH says; ``make book`` sets the same for its own steps."""
    bin_dir = str(Path(sys.executable).parent)
    return {"JUPYTER_PREFER_ENV_PATH": "1", "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}


def _execute(path_text: str, timeout: int):
    """Worker: run one notebook in its own folder (as the book does), on this worker's kernel started afresh
    for it (:mod:`pdtune.site.kernels`); return it executed, its seconds and its traceback (None if it ran)."""
    import traceback

    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError

    path = Path(path_text)
    nb = _read(path)
    started = time.perf_counter()
    error = None
    client = NotebookClient(nb, km=kernels.kernel_manager(ipc=os.name == "posix"), timeout=timeout,
                            allow_errors=False, record_timing=False,  # cell timings would change the cache key
                            resources={"metadata": {"path": str(path.parent)}})
    try:
        with kernels.notebook_session(client, str(path.parent)):
            client.execute()
    except (CellExecutionError, CellTimeoutError):
        error = traceback.format_exc()
    return nb, time.perf_counter() - started, error


def execute_into_cache(
    book_root: Path, cache_dir: Path, *, jobs: int | None = None, timeout: int = DEFAULT_TIMEOUT_S
) -> list[Execution]:
    """Execute every notebook of the book into a fresh jupyter-cache at ``cache_dir``."""
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    shutil.rmtree(cache_dir, ignore_errors=True)
    cache = get_cache(str(cache_dir))
    in_toc_order = toc_notebooks(book_root)
    # Longest first, so the slowest chapter does not start last; file size is the cost we know up front.
    by_size = sorted(in_toc_order, key=lambda p: p.stat().st_size, reverse=True)
    done: list[Execution] = []
    workers = max(1, min(jobs or os.cpu_count() or 1, len(by_size) or 1))
    # runcache: what several chapters compute alike (chapter 9's plan) is computed once
    with runcache.for_run(), ProcessPoolExecutor(max_workers=workers) as pool:
        futures = {pool.submit(_execute, str(p), timeout): p for p in by_size}
        for future in as_completed(futures):
            path = futures[future]
            notebook, seconds, error = future.result()
            if error is None:
                bundle = CacheBundleIn(notebook, str(path), data={"execution_seconds": seconds})
                cache.cache_notebook_bundle(bundle, check_validity=False, overwrite=True)
            done.append(Execution(path, seconds, error))
    return sorted(done, key=lambda e: in_toc_order.index(e.path))


def write_cached_config(book_root: Path, cache_dir: Path, dest: Path) -> Path:
    """A copy of the book's ``_config.yml`` that reads executed notebooks from ``cache_dir``."""
    config = read_yaml(Path(book_root) / CONFIG_NAME, CONFIG_NAME)
    execute = dict(config.get("execute") or {})
    execute.update(execute_notebooks="cache", cache=str(Path(cache_dir).resolve()))
    config["execute"] = execute
    header = f"# Generated by pdtune.site.bookexec from {CONFIG_NAME}; do not edit.\n"
    atomic_write_text(dest, header + yaml.safe_dump(config, sort_keys=False, allow_unicode=True))
    return dest


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pdtune.site.bookexec",
        description="Execute the book's notebooks in parallel into a fresh jupyter-cache.",
    )
    parser.add_argument("book_root", nargs="?", type=Path, default=REPO_ROOT)
    parser.add_argument("--cache", type=Path, required=True, help="jupyter-cache folder (wiped first)")
    parser.add_argument("--config-out", type=Path, required=True, help="where to write the build's config")
    parser.add_argument("--jobs", type=int, default=None, help="kernels at once (default: CPU count)")
    parser.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT_S, help="seconds per cell")
    args = parser.parse_args(argv)
    root = args.book_root.resolve()
    # This step feeds the static book only: charts reference the page's bundle, explorers print a note.
    os.environ.setdefault(STATIC_BUILD_ENV, "1")
    try:
        check_toc(root)
    except InputError as exc:
        print(f"bookexec: error: {exc}", file=sys.stderr)
        return 2
    start = time.perf_counter()
    runs = execute_into_cache(root, args.cache, jobs=args.jobs, timeout=args.timeout)
    for run in runs:
        status = "failed" if run.error else "executed"
        print(f"bookexec: {status} {os.path.relpath(run.path, root)} in {run.seconds:.1f} s", file=sys.stderr)
    failed = [r for r in runs if r.error]
    for run in failed:
        print(f"--- {run.path}\n{run.error}", file=sys.stderr)
    if failed:
        print(f"bookexec: error: {len(failed)} notebook(s) raised; see above", file=sys.stderr)
        return 1
    write_cached_config(root, args.cache, args.config_out)
    print(f"bookexec: {len(runs)} notebooks in {time.perf_counter() - start:.1f} s; config {args.config_out}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
