"""Jupyter kernels forked from a warm process, for the test session only.

A chapter's kernel spent about 1.4 s before its first cell: Python and ipykernel start (0.6 s), then numpy,
pandas, Altair and pdtune are imported (0.75 s; measured here, one kernel on a quiet machine), and the tests
execute well over a hundred chapters. Here one server per pytest-xdist worker imports all of that once and forks
a kernel for each request (a 22-chapter workbook run: 41.7 s before, 28.2 s after); the kernel the notebook runs
in is a fresh process with a fresh namespace, as before, only its imports are already done.

Jupyter starts a kernel from a kernel spec; :func:`install` writes one named ``python3`` (the chapters' kernel)
into a folder put first on ``JUPYTER_PATH``. Its command is this file's launcher, a stdlib-only Python that asks
the server for a kernel, passing its working folder, environment, arguments and standard streams (the file
descriptors themselves, over the Unix socket), then stands in for the kernel: it forwards every signal Jupyter
sends (interrupt, terminate) to the kernel's process group and exits with the kernel's status. If the launcher
is killed or its parent dies, the server kills the kernel, so nothing outlives a run.

Tests that watch real kernel processes (``test_workbook_signals``: their command lines and environments) and
the JupyterLab test start real kernels: :func:`real_kernel_env` drops the folder again.

    python tests/warm_kernel.py serve SOCKET        # the server (started by conftest.py)
    python -I -S tests/warm_kernel.py launch SOCKET -f CONNECTION_FILE   # what the kernel spec runs
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ENV_FOLDER = "PDTUNE_TEST_WARM_KERNELS"  # the kernel-spec folder; its presence on JUPYTER_PATH is the switch
#: What the chapters import; the server imports it once, every kernel inherits it.
PRELOAD = (
    "ipykernel.kernelapp", "ipykernel.ipkernel", "ipykernel.zmqshell", "IPython.core.interactiveshell",
    "numpy", "pandas", "altair", "myst_nb", "pdtune.charts", "pdtune.chapters.display", "pdtune.chapters.state",
    "pdtune.chapters.state_text", "pdtune.chapters.memory", "pdtune.chapters.graphs",
    "pdtune.chapters.concurrency", "pdtune.chapters.prefill", "pdtune.chapters.decode",
    "pdtune.chapters.frontier", "pdtune.chapters.trust", "pdtune.chapters.plan", "pdtune.chapters.scheduler",
    "pdtune.charts.state", "pdtune.charts.memory", "pdtune.charts.graphs", "pdtune.charts.concurrency",
    "pdtune.charts.sweeps", "pdtune.charts.frontier", "pdtune.charts.trust", "pdtune.charts.scheduler",
    "pdtune.model", "pdtune.state", "pdtune.switches", "pdtune.plan", "pdtune.frontier", "pdtune.sim",
    "pdtune.perfmodel.validation",
)
_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


def _read_request(conn: socket.socket) -> tuple[dict, list[int]]:
    """The launcher's request: an 8-byte length, that much JSON, and its three standard streams."""
    data, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
    while len(data) < 8 or len(data) < 8 + int.from_bytes(data[:8], "big"):
        more = conn.recv(1 << 16)
        if not more:
            raise EOFError("the launcher left before its request was whole")
        data += more
    return json.loads(data[8:8 + int.from_bytes(data[:8], "big")]), list(fds)


def _kernel(request: dict, fds: list[int]) -> None:
    """In the forked child: become the kernel the launcher asked for; never returns."""
    code = 1
    try:
        os.setpgid(0, 0)  # a group of its own: the launcher signals the group, as Jupyter does a real kernel's
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = [request["argv0"], *request["argv"]]
        if sys.path and sys.path[0] == str(HERE):  # the server's script folder is not the kernel's
            del sys.path[0]
        from ipykernel.kernelapp import IPKernelApp

        # The class read JPY_PARENT_PID when the server imported it; the launcher's environment holds the real one.
        IPKernelApp.launch_instance(argv=request["argv"],
                                    parent_handle=int(request["env"].get("JPY_PARENT_PID") or 0))
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - the kernel's own failure goes to its stderr, as a real kernel's would
        import traceback

        traceback.print_exc()
    finally:
        import atexit

        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001
                pass
        os._exit(code)


def serve(path: str) -> None:
    """Import :data:`PRELOAD`, then fork a kernel per connection until stdin closes (the pytest worker left)."""
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    print("ready", flush=True)  # install() waits for this line: a kernel asked for before it would find no socket
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so that SIGCHLD writes to the wake-up pipe
    children: dict[int, socket.socket] = {}
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "accept")
    selector.register(wake_r, selectors.EVENT_READ, "reap")
    selector.register(sys.stdin, selectors.EVENT_READ, "stdin")

    def kill(pid: int) -> None:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    while True:
        for key, _ in selector.select():
            if key.data == "accept":
                conn, _ = listener.accept()
                try:
                    request, fds = _read_request(conn)
                except (OSError, ValueError, EOFError):
                    conn.close()
                    continue
                pid = os.fork()
                if pid == 0:
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    for other in (listener, conn, *children.values()):
                        other.close()
                    selector.close()
                    os.close(wake_r)
                    os.close(wake_w)
                    _kernel(request, fds)
                for fd in fds:
                    os.close(fd)
                children[pid] = conn
                conn.sendall(f"{pid}\n".encode())
                selector.register(conn, selectors.EVENT_READ, pid)
            elif key.data == "reap":
                os.read(wake_r, 4096)
                while children:
                    pid, status = os.waitpid(-1, os.WNOHANG)
                    if pid == 0:
                        break
                    conn = children.pop(pid, None)
                    if conn is not None:
                        try:
                            selector.unregister(conn)
                        except KeyError:  # its launcher had gone already
                            pass
                        try:
                            conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
                        except OSError:
                            pass
                        conn.close()
            elif key.data == "stdin":
                if not os.read(sys.stdin.fileno(), 4096):
                    for pid in children:
                        kill(pid)
                    return
            else:  # a launcher's socket is readable: it sends nothing more, so it is gone
                if not key.fileobj.recv(1):
                    selector.unregister(key.fileobj)
                    kill(key.data)


def launch(path: str, argv: list[str]) -> int:
    """Stand in for a kernel: request one from the server, forward signals to it, exit with its status."""
    parent = os.getppid()
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(path)
    body = json.dumps({"argv": argv, "argv0": sys.argv[0], "cwd": os.getcwd(), "env": dict(os.environ)}).encode()
    socket.send_fds(conn, [len(body).to_bytes(8, "big") + body], [0, 1, 2])
    buffered = b""

    def line() -> bytes:  # one line from the server, or b"" if it closed; a timeout leaves the buffer whole
        nonlocal buffered
        while b"\n" not in buffered:
            chunk = conn.recv(64)
            if not chunk:
                return b""
            buffered += chunk
        head, _, buffered = buffered.partition(b"\n")
        return head

    pid = int(line())

    def forward(signum: int, _frame: object) -> None:
        try:
            os.killpg(pid, signum)
        except (ProcessLookupError, PermissionError):
            pass

    for signum in _FORWARDED:
        signal.signal(signum, forward)
    conn.settimeout(1.0)  # wake each second to see whether the process that started the kernel is still there
    while True:
        try:
            status = line()
        except TimeoutError:
            if os.getppid() != parent:  # orphaned, as a real kernel's parent poller would notice: stop it
                forward(signal.SIGKILL, None)
                return 1
            continue
        return int(status) if status.strip() else 1


def install(folder: Path, timeout: float = 300.0) -> subprocess.Popen | None:
    """Start a server and, once it listens, write the ``python3`` kernel spec that uses it under ``folder``; the
    caller puts ``folder`` first on ``JUPYTER_PATH`` and closes the server's stdin to stop it.

    The spec is written only after the server has said it listens: its imports take seconds, and a kernel asked
    for before its socket exists would die at once (a book build that starts straight away did, on CI). A server
    that does not come up within ``timeout`` is stopped and None returned, so the session keeps real kernels."""
    folder.mkdir(parents=True, exist_ok=True)
    sock = str(folder / "server.sock")
    server = subprocess.Popen([sys.executable, str(HERE / "warm_kernel.py"), "serve", sock],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)
    ready = selectors.DefaultSelector()
    ready.register(server.stdout, selectors.EVENT_READ)
    line = server.stdout.readline() if ready.select(timeout) else b""
    ready.close()
    if line.strip() != b"ready":
        server.kill()
        server.wait()
        return None
    spec = folder / "kernels" / "python3"
    spec.mkdir(parents=True, exist_ok=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-I", "-S", str(HERE / "warm_kernel.py"), "launch", sock, "-f",
                 "{connection_file}"],
        "display_name": "Python 3 (ipykernel, forked warm for the tests)",
        "language": "python",
        "interrupt_mode": "signal",
    }), encoding="utf-8")
    return server


def real_kernel_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` with the warm kernel spec's folder taken off ``JUPYTER_PATH``: real kernels, started by Jupyter."""
    folder = env.get(ENV_FOLDER)
    if not folder:
        return dict(env)
    kept = [p for p in env.get("JUPYTER_PATH", "").split(os.pathsep) if p and p != folder]
    out = {k: v for k, v in env.items() if k not in (ENV_FOLDER, "JUPYTER_PATH")}
    if kept:
        out["JUPYTER_PATH"] = os.pathsep.join(kept)
    return out


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(sys.argv[2])
    elif sys.argv[1] == "launch":
        raise SystemExit(launch(sys.argv[2], sys.argv[3:]))
    else:
        raise SystemExit(f"usage: {sys.argv[0]} serve SOCKET | launch SOCKET -f CONNECTION_FILE")
