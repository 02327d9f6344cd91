"""Signals and process lifetimes: a command interrupted or killed leaves nothing running and nothing half-made.

* :func:`terminate_raises`: while a command runs, SIGTERM raises :class:`Terminated` in the main thread, as
  SIGINT raises ``KeyboardInterrupt``, so every ``finally`` and ``except BaseException`` clean-up runs (staging
  folders removed, worker processes stopped) before the process exits; :func:`pdtune.cli.main` then prints one
  line and exits 128 + the signal number.
* :func:`signals_deferred`: SIGINT, SIGTERM and SIGHUP wait until a short block has run (the renames that swap
  an output folder into place and the removal of what it replaced), then act as they would have.
* :func:`die_with_parent`: a worker process asks the kernel to SIGKILL it the moment its parent dies
  (``prctl(PR_SET_PDEATHSIG)`` on Linux, through ``ctypes``), which works even when the parent itself was
  SIGKILLed and could clean up nothing; elsewhere a daemon thread watches the parent's pid. Jupyter kernels a
  worker starts watch *their* parent the same way (ipykernel's parent poller, ``JPY_PARENT_PID``), so the whole
  tree goes.
* :func:`map_in_workers`: a function over items in spawned worker processes that die with this one, and are
  killed at once when it is interrupted.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from types import FrameType
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

#: ``prctl`` option number (linux/prctl.h).
PR_SET_PDEATHSIG = 1


class Terminated(BaseException):
    """SIGTERM (or SIGHUP) arrived; a ``BaseException`` so that ``except Exception`` does not swallow it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_terminated(signum: int, _frame: FrameType | None) -> None:
    raise Terminated(signum)


@contextlib.contextmanager
def terminate_raises() -> Iterator[None]:
    """SIGTERM and SIGHUP raise :class:`Terminated` inside the block (main thread only; a no-op elsewhere)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, _raise_terminated) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP arriving inside the block are delivered when it ends (to the handlers they
    would have met), so the block is never cut in half; main thread only (a no-op elsewhere)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: list[int] = []
    previous = {}
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        handler = signal.getsignal(s)
        if handler is not signal.SIG_IGN and handler is not None:
            previous[s] = signal.signal(s, lambda signum, _frame: arrived.append(signum))
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        for s in dict.fromkeys(arrived):
            signal.raise_signal(s)


def die_with_parent(parent_pid: int) -> None:
    """Make this process die when ``parent_pid`` (its parent) does, however the parent ends."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0:
                if os.getppid() != parent_pid:  # the parent died before the request was made
                    os._exit(1)
                return
        except (OSError, AttributeError):
            pass
    _watch_parent(parent_pid)


def _watch_parent(parent_pid: int, interval: float = 0.5) -> None:
    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(interval)
        os._exit(1)

    threading.Thread(target=watch, name="pdtune-parent-watch", daemon=True).start()


def _init_worker(parent_pid: int) -> None:
    die_with_parent(parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent answers Ctrl-C and stops its workers itself


def map_in_workers(fn: Callable[[T], R], items: Sequence[T], jobs: int,
                   on_each: Callable[[int, R], None] | None = None) -> list[R]:
    """``[fn(x) for x in items]`` in ``jobs`` spawned worker processes (spawned, not forked: the caller may hold
    threads), in the items' order; ``on_each(i, result)`` is called as each answer arrives, in that order. The
    workers die with this process (:func:`die_with_parent`); when the call is interrupted (Ctrl-C, SIGTERM, an
    error) they are killed before the exception goes on."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    pool = ProcessPoolExecutor(max_workers=max(1, min(jobs, len(items))), mp_context=multiprocessing.get_context("spawn"),
                               initializer=_init_worker, initargs=(os.getpid(),))
    try:
        out = []
        for result in pool.map(fn, items):
            if on_each is not None:
                on_each(len(out), result)
            out.append(result)
    except BaseException:
        for process in list((getattr(pool, "_processes", None) or {}).values()):
            process.kill()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    return out
