"""What the chapters of one run compute alike, computed once: a folder the run names, kept for the run's length.

The three pages of chapter 9 each search the same plan (:func:`pdtune.workbook.planning.timed_plan`, two to five
seconds), in kernels of their own, and ``pdtune workbook`` searches it once more for its summary. A run of the
book's execute step (:mod:`pdtune.site.bookexec`) or of ``pdtune workbook`` opens :func:`for_run`: a temporary
folder named by :data:`ENV` in the environment its workers and kernels inherit, removed when the run ends.
:func:`remembered` keeps a value there under a key spelled from everything the value depends on; a page that
asks for a value another page is still computing waits for it (a lock per key) rather than compute it again.
Outside a run (a reader's own kernel, a test, the command line) nothing is kept and every call computes.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import pickle
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

#: The environment variable naming the run's folder.
ENV = "PDTUNE_RUN_CACHE"

T = TypeVar("T")


@contextlib.contextmanager
def for_run(under: Path | None = None) -> Iterator[None]:
    """Inside the ``with``, processes started from this one (workers, their kernels) share a new folder, made
    in ``under`` (the workbook's staging folder, which a killed run's successor removes) or the temporary
    folder; an enclosing run's folder is kept instead."""
    if os.environ.get(ENV):
        yield
        return
    folder = tempfile.mkdtemp(prefix=".pdtune-run-", dir=under)
    os.environ[ENV] = folder
    try:
        yield
    finally:
        os.environ.pop(ENV, None)
        shutil.rmtree(folder, ignore_errors=True)


def remembered(key: object, compute: Callable[[], T]) -> T:
    """``compute()``, or the value an earlier call of this run kept under ``key`` (whose ``repr`` must spell
    every input of the value: plain values, frozen dataclasses of them)."""
    folder = os.environ.get(ENV)
    if not folder or not Path(folder).is_dir():
        return compute()
    name = hashlib.sha256(repr(key).encode("utf-8")).hexdigest()[:40]
    path = Path(folder) / f"{name}.pickle"
    with open(Path(folder) / f"{name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if this process dies
        if path.is_file():
            with path.open("rb") as fh:
                return pickle.load(fh)
        value = compute()
        staged = path.with_suffix(f".{os.getpid()}.tmp")
        with staged.open("wb") as fh:
            pickle.dump(value, fh, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(staged, path)  # whole or absent
        return value


__all__ = ["ENV", "for_run", "remembered"]
