"""One kernel for the notebooks a process executes one after another, each started as if the kernel were new.

Starting a kernel and importing what every chapter imports (pandas, Altair, pdtune) takes two to three seconds,
more than most chapters' own cells. A process that executes several notebooks (a worker of ``pdtune workbook``
or of the book's execute step, :mod:`pdtune.site.bookexec`) keeps one kernel (:func:`kernel_manager`) and, before
each notebook, runs :data:`RESET` in it silently (:func:`notebook_session`): the working folder the notebook runs in,
a new page for the charts (:func:`pdtune.site.render.new_page`: the first chart inlines the vega bundle again,
ids start afresh), an empty namespace, cells counted from 1. What stays is what a notebook cannot see but
through ``sys.modules``: the imported modules. A kernel that died or was left running a cell (a timeout) is
shut down (:func:`stop`) and the next notebook starts a new one.
"""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing.util
import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

#: Run silently before each notebook; ``{cwd!r}`` is its working folder.
RESET = """\
import os as _os, sys as _sys
_os.chdir({cwd!r})
if "pdtune.site.render" in _sys.modules:
    _sys.modules["pdtune.site.render"].new_page()
get_ipython().run_line_magic("reset", "-f")
get_ipython().execution_count = 1
"""

_manager: Any = None  # this process's AsyncKernelManager
_socket_dir: str | None = None  # its IPC sockets' folder, removed with it
_hooks_pid = 0  # the process that registered the shutdown at exit


def kernel_manager(kernel_name: str = "python3", *, ipc: bool = False) -> Any:
    """This process's kernel manager, new unless its kernel is running (the first client that uses a new one
    starts its kernel).

    ``ipc``: the kernel talks over Unix sockets (ZeroMQ's IPC transport), not TCP. A kernel only ever talks to
    the process that started it, on this machine, so no port needs to be open; over TCP ipykernel (7+) also
    warns, once per kernel, that the traffic is unencrypted. The sockets are named by an absolute path in a
    private temporary folder (jupyter_client's default is a path relative to the working folder, which the
    kernel, started in its notebook's folder, would not find), removed with the kernel."""
    global _manager, _socket_dir
    from jupyter_client.utils import run_sync

    if _manager is not None and not (_manager.has_kernel and run_sync(_manager.is_alive)()):
        stop()  # shut down, died, or never started: a new manager (and sockets) for a new kernel
    if _manager is None:
        # nbclient's own kind of manager: its client polls the kernel's channels without blocking the loop
        # that enforces the cell timeout.
        from jupyter_client.manager import AsyncKernelManager

        _manager = AsyncKernelManager(kernel_name=kernel_name)
        if ipc:
            _socket_dir = tempfile.mkdtemp(prefix="pdtune-kernel-")
            _manager.transport = "ipc"
            _manager.ip = f"{_socket_dir}/kernel"
        if _hooks_pid != os.getpid():
            _stop_at_exit()
    return _manager


def _stop_at_exit() -> None:
    """Once per process (a forked or spawned worker starts with multiprocessing's finalizers cleared): shut
    down whatever kernel the process holds when it ends, at exit, and in a pool's worker, which leaves through
    os._exit past atexit, by multiprocessing's own finalizers."""
    global _hooks_pid
    _hooks_pid = os.getpid()
    atexit.register(stop)
    multiprocessing.util.Finalize(None, stop, exitpriority=10)


def stop() -> None:
    """Shut this process's kernel down now (a no-op without one)."""
    global _manager, _socket_dir
    km, folder, _manager, _socket_dir = _manager, _socket_dir, None, None
    if km is not None and km.has_kernel:
        from jupyter_client.utils import run_sync

        with contextlib.suppress(Exception):
            run_sync(km.shutdown_kernel)(now=True)
    if folder:
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def notebook_session(client: Any, cwd: str) -> Iterator[None]:
    """Execute one notebook with ``client`` (an nbclient ``NotebookClient`` on :func:`kernel_manager`'s kernel)
    inside the ``with``: :data:`RESET` for ``cwd`` runs as soon as the client is connected, before the first
    cell; the client's channels close at the end (the kernel stays). An error raised inside a cell leaves the
    kernel as it was; anything else (a timeout: the cell may still run; a dead kernel; an interruption) shuts it
    down, so the next notebook starts a new one."""
    from nbclient.exceptions import CellExecutionError

    async def reset(**_: Any) -> None:
        await client.async_wait_for_reply(client.kc.execute(RESET.format(cwd=cwd), silent=True, store_history=False))

    client.on_notebook_start = reset
    try:
        yield
    except CellExecutionError:
        raise
    except BaseException:
        stop()
        raise
    finally:
        if getattr(client, "kc", None) is not None:
            client.kc.stop_channels()
            client.kc = None


__all__ = ["RESET", "kernel_manager", "notebook_session", "stop"]
