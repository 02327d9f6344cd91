"""Files: output that appears whole or not at all, values ready for JSON, and input read with one-line errors.

Output goes through here the way input goes through :mod:`pdtune.guarded`. A file (``-o``) is written to a
temporary file in the folder it will live in and renamed over the target, so a reader never sees half of
it; a folder (``--out``) is built in a hidden staging folder beside it. Every failure (the path below a
regular file, a folder where a file is expected, a folder pdtune may not write, ``/proc``, a full disk)
is an :class:`~pdtune.errors.InputError` naming the path and the flag, and leaves nothing behind: not the
temporary file, not the folders created on the way. A symbolic link is written *through* (its target is
replaced, the link stays); a FIFO, a device or a socket is refused.

A folder is written by one run at a time (:class:`FolderSwap` locks it) and swapped in by renames of whole
folders. A run killed outright (SIGKILL) cannot remove its staging folder, so the next run into the same place
removes it, first putting back a previous output an interrupted swap had moved aside (:func:`_clear_stale`, the
one rule for stale folders).

Standard output is written the same way, with the same errors: :func:`guarded_stdout` stands between every
command and ``sys.stdout`` (``pdtune.cli.main`` puts it there), so a full disk (``> /dev/full``), a closed
stdout (``>&-``), a reader gone (``| head``, EPIPE) is one line naming stdout and what is behind it, exit 2,
never a traceback and never a silent exit 0 having written nothing. Files inside an output being built go
through :func:`write_text`. Every write failure is worded by :func:`write_failure`; text is UTF-8, a name
read from a non-UTF-8 path written back as the bytes it had (``surrogateescape``, as Python's stdout does).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import io
import math
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from pdtune.errors import InputError
from pdtune.guarded import describe_mode, read_csv_table, read_mapping
from pdtune.signals import signals_deferred

__all__ = [
    "FolderSwap", "atomic_write_text", "beside", "guarded_stdout", "output_file", "output_folder", "plain",
    "read_csv_table", "read_mapping", "write_failure", "write_text",
]

#: How text reaches a file or stdout: UTF-8, and a file name that was not UTF-8 (decoded by Python with
#: ``surrogateescape``) written back as its own bytes rather than failing the whole output.
ENCODING, ERRORS = "utf-8", "surrogateescape"


def write_failure(destination: str | os.PathLike[str], field: str, exc: OSError) -> InputError:
    """The one line for an output that could not be written: where, the flag, what the system said (and its
    errno name: ``No space left on device (ENOSPC)``)."""
    name = errno.errorcode.get(exc.errno or -1)
    reason = exc.strerror or str(exc) or type(exc).__name__
    return InputError(destination, field, f"cannot write there: {reason}" + (f" ({name})" if name else ""))


def write_text(path: str | os.PathLike[str], text: str, field: str = "--out") -> None:
    """Write ``text`` to ``path``, a file inside an output being built (a staging folder that is renamed into
    place whole): every failure (a full disk, a name too long) is one line naming the file and the flag."""
    try:
        with open(path, "w", encoding=ENCODING, errors=ERRORS) as fh:
            fh.write(text)
    except OSError as exc:
        raise write_failure(path, field, exc) from None


def plain(value: Any) -> Any:
    """A JSON-ready scalar: numpy to Python, NaN to ``None`` (JSON has no NaN)."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


# ------------------------------------------------------------------------------------------ output files


def output_file(path: str | os.PathLike[str], field: str = "-o") -> Path:
    """The regular file an output path will replace: symbolic links followed, anything else refused."""
    given = Path(path)
    if str(given) in ("", "."):
        raise InputError(path, field, "give a file name")
    info = _stat_output(given, field)  # follows every link: /dev/stdout is the pipe or terminal behind it
    if info is not None:
        kind = describe_mode(info.st_mode)
        if kind is not None:
            raise InputError(given, field, f"is {kind}: give the name of a file to write")
    return Path(os.path.realpath(given))  # a dangling link: the file it names is created


def _stat_output(given: Path, field: str) -> os.stat_result | None:
    """``os.stat`` of an output path (None when absent); a path pdtune cannot even look at is bad input."""
    try:
        return os.stat(given)
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        raise InputError(given, field, "a part of the path is a file, not a folder") from None
    except OSError as exc:
        raise write_failure(given, field, exc) from None


def atomic_write_text(path: str | os.PathLike[str], text: str, field: str = "-o") -> Path:
    """Write ``text`` to ``path`` through a temporary file in the same folder, then rename it into place.

    Returns the file written (the link's target when ``path`` is a symbolic link). The file gets the mode
    the old one had, else what ``open`` would give (0666 less the umask), not ``mkstemp``'s private 0600.
    """
    target = output_file(path, field)
    created = _make_folders(target.parent, Path(path), field)
    tmp: str | None = None
    try:
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        except OSError as exc:
            raise write_failure(path, field, exc) from None
        try:
            with os.fdopen(fd, "w", encoding=ENCODING, errors=ERRORS) as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(tmp, _mode_for(target))
            os.replace(tmp, target)
            tmp = None
        except OSError as exc:
            raise write_failure(path, field, exc) from None
    except BaseException:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        _remove_folders(created)
        raise
    return target


def _mode_for(target: Path) -> int:
    try:
        return os.stat(target).st_mode & 0o7777
    except OSError:
        return 0o666 & ~_umask()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _make_folders(folder: Path, given: Path, field: str) -> list[Path]:
    """Create ``folder`` and its missing parents; return those created (deepest last) for a clean-up."""
    missing: list[Path] = []
    current = folder
    while not current.exists():
        if current.is_symlink():
            raise InputError(given, field, f"{current} is a broken symbolic link")
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    if not current.is_dir():
        raise InputError(given, field, f"{current} is a file, not a folder")
    created: list[Path] = []
    try:
        for d in reversed(missing):
            d.mkdir()
            created.append(d)
    except OSError as exc:
        _remove_folders(created)
        raise InputError(given, field, f"cannot create {d}: {exc.strerror or exc}") from None
    return created


def _remove_folders(created: list[Path]) -> None:
    for d in reversed(created):
        with contextlib.suppress(OSError):
            d.rmdir()


# ------------------------------------------------------------------------------------------ stdout

STDOUT = "stdout"


def stdout_target(fd: int = 1) -> str:
    """What stdout is, for an error message: ``stdout (/dev/full)``, ``stdout (pipe:[123])``, ``stdout
    (closed)``."""
    try:
        os.fstat(fd)
    except OSError:
        return f"{STDOUT} (closed)"
    try:
        return f"{STDOUT} ({os.readlink(f'/proc/self/fd/{fd}')})"
    except OSError:
        return STDOUT


class _GuardedStream(io.TextIOBase):
    """``sys.stdout`` while a command runs; any failure to write or flush raises :class:`InputError`.

    Over the process's real stdout it writes file descriptor 1 itself, in a loop until every byte is taken:
    Python's buffered stdout, handed a large write to a pipe whose reader leaves, takes the first part, drops
    the rest and reports success (``pdtune results --csv | head`` lost its tail and exited 0). Text is
    buffered here up to :data:`_CHUNK` (each line at once on a terminal). Over any other stream (a test's
    capture) writes pass through.
    """

    def __init__(self, target: Any, name: str, fd: int | None) -> None:
        super().__init__()
        self._target = target
        self._name = name
        self._fd = fd
        self._pending = bytearray()
        self._tty = fd is not None and os.isatty(fd)
        self._encoding = getattr(target, "encoding", None) or ENCODING
        self._errors = getattr(target, "errors", None) or ERRORS
        self.failed = False

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self._encoding

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return self._errors

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        if self._fd is not None:
            return self._tty
        try:
            return bool(self._target is not None and self._target.isatty())
        except (OSError, ValueError):
            return False

    @property
    def buffer(self) -> _GuardedBytes:
        """Bytes written to stdout go through the same buffer, in order with the text."""
        return _GuardedBytes(self)

    def write_bytes(self, data: bytes) -> int:
        if self._fd is None:
            self.flush()
            target = getattr(self._target, "buffer", None)
            if target is None:
                raise self._failure(OSError(errno.EBADF, "stdout takes no bytes"))
            try:
                return int(target.write(data) or 0)
            except OSError as exc:
                raise self._failure(exc) from None
        self._pending += data
        if len(self._pending) >= _CHUNK:
            self.flush()
        return len(data)

    def fileno(self) -> int:
        if self._fd is not None:
            return self._fd
        if self._target is None:
            raise self._failure(OSError(errno.EBADF, "stdout is closed"))
        return int(self._target.fileno())

    def write(self, text: str) -> int:
        if self._fd is not None:
            try:
                data = text.encode(self._encoding, self._errors)
            except UnicodeEncodeError:  # a character the terminal's encoding lacks: shown escaped, not fatal
                data = text.encode(self._encoding, "backslashreplace")
            self._pending += data
            if len(self._pending) >= _CHUNK or (self._tty and b"\n" in data):
                self.flush()
            return len(text)
        if self._target is None:  # Python found fd 1 closed at start-up (``>&-``)
            raise self._failure(OSError(errno.EBADF, "stdout is closed"))
        try:
            return int(self._target.write(text) or 0)
        except OSError as exc:
            raise self._failure(exc) from None
        except ValueError:  # "I/O operation on closed file"
            raise self._failure(OSError(errno.EBADF, "stdout is closed")) from None

    def flush(self) -> None:
        if self._fd is not None:
            done, error = 0, None
            with memoryview(self._pending) as view:
                try:
                    while done < len(view):
                        done += os.write(self._fd, view[done:])
                except OSError as exc:
                    error = exc
            del self._pending[:done]
            if error is not None:
                raise self._failure(error) from None
            return
        if self._target is None:
            return
        try:
            self._target.flush()
        except OSError as exc:
            raise self._failure(exc) from None
        except ValueError:
            raise self._failure(OSError(errno.EBADF, "stdout is closed")) from None

    def _failure(self, exc: OSError) -> InputError:
        self.failed = True
        self._pending.clear()  # what could not be written is not tried again
        return write_failure(self._name, "output", exc)


#: Bytes the guarded stdout gathers before it writes them.
_CHUNK = 1 << 16


class _GuardedBytes:
    """``sys.stdout.buffer`` under the guard."""

    def __init__(self, text: _GuardedStream) -> None:
        self._text = text

    def write(self, data: bytes) -> int:
        return self._text.write_bytes(bytes(data))

    def flush(self) -> None:
        self._text.flush()

    def fileno(self) -> int:
        return self._text.fileno()


@contextlib.contextmanager
def guarded_stdout() -> Iterator[_GuardedStream]:
    """Run a command with its stdout guarded (see :class:`_GuardedStream`), flushed before the command counts
    as done, so an output lost at the last buffer is an error too, not exit 0.

    After a failure the real stdout is pointed at ``/dev/null``: what is left in its buffer then goes nowhere
    at the interpreter's exit, instead of printing a second error. With fd 1 closed at start, ``/dev/null``
    is put there first so that no file the command opens can take fd 1 for its own.
    """
    original = sys.stdout
    closed = original is None
    if closed:
        with contextlib.suppress(OSError):
            os.fstat(1)
            closed = False  # fd 1 is open, only sys.stdout is gone
        if closed:
            _null_onto(1)
    fd = None
    if not closed and original is sys.__stdout__:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            original.flush()  # anything printed before pdtune took over goes first
            fd = original.fileno() if original.fileno() == 1 else None
    guard = _GuardedStream(original, stdout_target() if not closed else f"{STDOUT} (closed)", fd)
    sys.stdout = guard
    try:
        try:
            yield guard
            guard.flush()
        except SystemExit as done:
            if not done.code:  # argparse's --help and --version print, then exit 0: the text must be out
                guard.flush()
            raise
        except Exception:
            if not guard.failed:
                with contextlib.suppress(Exception):
                    guard.flush()  # what the command printed before it failed still goes out
            raise
        # an interrupt (Ctrl-C, SIGTERM) drops what is still buffered: no write that could block the way out
    finally:
        sys.stdout = original
        if guard.failed:
            _silence(original)


def _silence(stream: Any) -> None:
    """Point the real stdout at /dev/null (the data it still buffers can no longer be written anyway)."""
    fileno = getattr(stream, "fileno", None)
    if stream is None or fileno is None:
        return
    with contextlib.suppress(OSError, ValueError):
        if fileno() == 1:
            _null_onto(1)


def _null_onto(fd: int) -> None:
    with contextlib.suppress(OSError):
        null = os.open(os.devnull, os.O_WRONLY)
        if null != fd:
            os.dup2(null, fd)
            os.close(null)


# ------------------------------------------------------------------------------------------ output folders


def output_folder(target: str | os.PathLike[str], field: str = "--out") -> Path:
    """The folder an output path names, links followed; it must be a folder or absent."""
    given = Path(target)
    info = _stat_output(given, field)
    if info is not None and describe_mode(info.st_mode) != "a folder":
        raise InputError(given, field, "exists and is not a folder")
    if given.is_symlink() and info is None:
        raise InputError(given, field, "is a broken symbolic link")
    return Path(os.path.realpath(given))


def beside(target: Path, kind: str) -> Path:
    """The hidden entry ``.<name>.pdtune-<kind>`` beside ``target`` (``lock``, ``new``, ``old``); a long name is
    cut and told apart by a hash, so the entry's name stays within the 255 bytes a file system allows."""
    name = target.name
    if len(name.encode()) > 160:
        name = name.encode()[:120].decode(errors="ignore") + "~" + hashlib.sha256(target.name.encode()).hexdigest()[:16]
    return target.parent / f".{name}.pdtune-{kind}"


class FolderSwap:
    """An output folder that appears whole or not at all, written by one run at a time.

    ::

        with FolderSwap(out) as swap:   # locks out: a second run into it is refused (InputError)
            ...                         # checks that need the lock (is out a previous output?)
            write into swap.staging     # .<name>.pdtune-new beside out
            swap.commit()               # staging becomes out; the previous out is removed

    The swap renames whole folders, never file by file: ``out`` moves aside to ``.<name>.pdtune-old``, the
    staging folder is renamed to ``out``, the old one is removed, with SIGINT, SIGTERM and SIGHUP held back until
    that is done. Entries of the previous ``out`` for which ``carry(name)`` is true and that the new folder does
    not hold are carried over first (hard links where the file system allows, copies otherwise), so that a
    command owning only some of a folder's entries leaves the others as they were. Leaving the block without
    :meth:`commit` (an error, a signal) removes the staging folder and leaves ``out`` as it was.

    The lock is an ``flock`` on ``.<name>.pdtune-lock`` beside ``out``, held from entering the block to leaving
    it; the file is removed on the way out. A run killed outright (SIGKILL) drops its lock with its life and may
    leave its hidden folders: whoever takes the lock next is the only run writing ``out``, so what it finds there
    is stale, and :meth:`__enter__` clears it by the one rule below (:func:`_clear_stale`).
    """

    def __init__(self, out: str | os.PathLike[str], field: str = "--out", *,
                 carry: Callable[[str], bool] | None = None) -> None:
        self.given = Path(out)
        self.field = field
        self.target = output_folder(out, field)  # a link to a folder is written through
        if self.target.parent == self.target:
            raise InputError(out, field, "is the root folder: give a folder below it")
        self.carry = carry
        self._lock_fd: int | None = None
        self._created: list[Path] = []
        self._staging: Path | None = None
        self.committed = False

    def __enter__(self) -> FolderSwap:
        self._created = _make_folders(self.target.parent, self.given, self.field)
        try:
            self._lock_fd = _take_lock(beside(self.target, "lock"), self.given, self.field)
            _clear_stale(self.target, self.given, self.field)
        except BaseException:
            self._close()
            raise
        return self

    def __exit__(self, _kind: type[BaseException] | None, exc: BaseException | None, _tb: object) -> None:
        staging = self._staging
        self._close()
        # Writing into the staging folder failed (a full disk, a name too long): one line naming --out.
        name = getattr(exc, "filename", None)
        if isinstance(exc, OSError) and staging is not None and (
                name is None or (isinstance(name, str | bytes) and Path(os.fsdecode(name)).is_relative_to(staging))):
            raise write_failure(self.given, self.field, exc) from None

    @property
    def staging(self) -> Path:
        """The folder to build the output in (made on first use, with the permissions ``mkdir`` gives)."""
        if self._lock_fd is None:
            raise RuntimeError("FolderSwap.staging outside its with-block")
        if self._staging is None:
            path = beside(self.target, "new")
            try:
                path.mkdir()
            except OSError as exc:
                raise write_failure(self.given, self.field, exc) from None
            self._staging = path
        return self._staging

    def commit(self) -> Path:
        """Swap the staging folder in as ``out`` (see the class); returns ``out``'s real path."""
        staging, target = self.staging, self.target
        old = beside(target, "old")
        try:
            previous = target.is_dir()
            if previous:
                os.chmod(staging, os.stat(target).st_mode & 0o7777)
                if self.carry is not None:
                    for entry in sorted(os.listdir(target)):
                        if self.carry(entry) and not os.path.lexists(staging / entry):
                            _carry(target / entry, staging / entry)
            with signals_deferred():
                if previous:
                    os.rename(target, old)
                    try:
                        os.rename(staging, target)
                    except BaseException:
                        os.rename(old, target)
                        raise
                else:
                    os.rename(staging, target)
                self.committed = True
                self._staging = None
                shutil.rmtree(old, ignore_errors=True)
        except OSError as exc:
            raise write_failure(self.given, self.field, exc) from None
        return target

    def _close(self) -> None:
        if self._staging is not None:
            shutil.rmtree(self._staging, ignore_errors=True)
            self._staging = None
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                os.unlink(beside(self.target, "lock"))  # while still holding it: see _take_lock
            os.close(self._lock_fd)
            self._lock_fd = None
        if not self.committed:
            _remove_folders(self._created)


def _take_lock(path: Path, given: Path, field: str) -> int:
    """An exclusive ``flock`` on the lock file ``path`` (made if absent), or an InputError naming the run that
    holds it. The holder removes the file before it lets go, so a lock won on a file no longer at ``path`` is
    worth nothing: try again on the one there now."""
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        except OSError as exc:
            raise write_failure(given, field, exc) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
            os.close(fd)
            pid = f" (pid {holder})" if holder.isdigit() else ""
            raise InputError(given, field, f"another pdtune run is writing it{pid}; wait for it to end") from None
        try:
            now = os.stat(path)
        except FileNotFoundError:
            now = None
        held = os.fstat(fd)
        if now is not None and (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino):
            try:
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            except OSError as exc:  # a full disk: the lock file goes, nothing is left behind
                with contextlib.suppress(OSError):
                    os.unlink(path)
                os.close(fd)
                raise write_failure(given, field, exc) from None
            return fd
        os.close(fd)


def _clear_stale(target: Path, given: Path, field: str) -> None:
    """What killed runs left beside ``target``, cleared by whoever holds its lock (no other run writes there).

    * ``.<name>.pdtune-old`` is a previous output moved aside by a swap: put back when the new one never arrived
      (the run was killed between the two renames and did not finish), removed otherwise;
    * ``.<name>.pdtune-new`` is a staging folder: removed.
    """
    old, new = beside(target, "old"), beside(target, "new")
    try:
        if old.is_dir() and not old.is_symlink():
            if not os.path.lexists(target):
                os.rename(old, target)
            else:
                shutil.rmtree(old)
        if os.path.lexists(new):
            if new.is_dir() and not new.is_symlink():
                shutil.rmtree(new)
            else:
                new.unlink()
    except OSError as exc:
        raise InputError(given, field, f"cannot clear what an earlier run left: {exc.strerror or exc}") from None


def _carry(source: Path, dest: Path) -> None:
    """``source`` (an entry of the previous output) into the new one: hard links, else copies; links kept."""
    if source.is_dir() and not source.is_symlink():
        shutil.copytree(source, dest, symlinks=True, copy_function=_link_or_copy)
    else:
        _link_or_copy(str(source), str(dest))


def _link_or_copy(source: str, dest: str) -> None:
    try:
        os.link(source, dest, follow_symlinks=False)
    except OSError:
        shutil.copy2(source, dest, follow_symlinks=False)
