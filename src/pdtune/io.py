"""Files: output that appears whole or not at all, values ready for JSON, and input read with one-line errors.

Output goes through here the way input goes through :mod:`pdtune.guarded`. A file (``-o``) is written to a
temporary file in the folder it will live in and renamed over the target, so a reader never sees half of
it; a folder (``--out``) is built in a hidden staging folder beside it. Every failure (the path below a
regular file, a folder where a file is expected, a folder pdtune may not write, ``/proc``, a full disk)
is an :class:`~pdtune.errors.InputError` naming the path and the flag, and leaves nothing behind: not the
temporary file, not the folders created on the way. A symbolic link is written *through* (its target is
replaced, the link stays); a FIFO, a device or a socket is refused.

Staging folders are locked (``flock`` on the folder itself) while their run lives. A run killed outright
(SIGKILL) cannot remove its own, so the next run into the same place removes every unlocked one it finds
(:func:`remove_stale`), first putting back what an interrupted swap had moved aside.
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pdtune.errors import InputError
from pdtune.guarded import describe_mode, read_csv_table, read_mapping

__all__ = [
    "atomic_write_text", "output_file", "plain", "read_csv_table", "read_mapping", "release", "remove_stale",
    "staging_dir",
]


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
        raise InputError(given, field, f"cannot write there: {exc.strerror or exc}") from None


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
            raise InputError(path, field, f"cannot write there: {exc.strerror or exc}") from None
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(tmp, _mode_for(target))
            os.replace(tmp, target)
            tmp = None
        except OSError as exc:
            raise InputError(path, field, f"cannot write there: {exc.strerror or exc}") from None
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


# ------------------------------------------------------------------------------------------ output folders

#: Open, locked staging folders of this process: path -> file descriptor.
_LOCKS: dict[str, int] = {}
#: A staging folder younger than this is never taken for stale: it may be a run that has not locked it yet.
STALE_AFTER_S = 1.0


def output_folder(target: str | os.PathLike[str], field: str = "--out") -> Path:
    """The folder an output path names, links followed; it must be a folder or absent."""
    given = Path(target)
    info = _stat_output(given, field)
    if info is not None and describe_mode(info.st_mode) != "a folder":
        raise InputError(given, field, "exists and is not a folder")
    if given.is_symlink() and info is None:
        raise InputError(given, field, "is a broken symbolic link")
    return Path(os.path.realpath(given))


def staging_dir(target: Path, field: str = "--out", *, kind: str = "new") -> Path:
    """A fresh hidden folder beside ``target`` (``.<name>.<kind>-XXXX``) to build its files in, then rename into
    place, so that a failure leaves nothing half-written; ``target`` must be a folder or absent.

    The folder is locked until :func:`release`; stale ones of earlier, killed runs are removed first.
    """
    real = output_folder(target, field)
    prefix = f".{real.name}.{kind}-"
    created = _make_folders(real.parent, Path(target), field)
    try:
        path = Path(tempfile.mkdtemp(prefix=prefix, dir=real.parent))
    except OSError as exc:
        _remove_folders(created)
        raise InputError(target, field, f"cannot write there: {exc.strerror or exc}") from None
    lock(path)
    return path


def lock(folder: Path) -> None:
    """Hold an exclusive ``flock`` on ``folder`` for as long as this process lives (or until :func:`release`)."""
    fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    _LOCKS[str(folder)] = fd


def release(folder: Path, *, remove: bool = True) -> None:
    """Unlock a staging folder (and remove it, unless it was renamed into place)."""
    if remove:
        shutil.rmtree(folder, ignore_errors=True)
    fd = _LOCKS.pop(str(folder), None)
    if fd is not None:
        os.close(fd)


def release_renamed(old: Path) -> None:
    """The lock of a staging folder that was renamed into place: only the descriptor is closed."""
    release(old, remove=False)


def remove_stale(parent: Path, prefix: str, restore: Callable[[Path], None] | None = None, *,
                 exclude: str | None = None) -> list[Path]:
    """Remove the folders ``parent/<prefix>*`` (but not ``<exclude>*``) no live process holds locked: those of
    runs killed before they could remove them.

    ``restore`` is called first with each such folder, to put back what an interrupted swap moved into it.
    Returns the folders removed.
    """
    removed: list[Path] = []
    try:
        entries = [p for p in parent.iterdir()
                   if p.name.startswith(prefix) and not (exclude and p.name.startswith(exclude))]
    except OSError:
        return removed
    for path in entries:
        try:
            if not path.is_dir() or path.is_symlink() or time.time() - path.stat().st_mtime < STALE_AFTER_S:
                continue
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)  # a live run's
            continue
        try:
            if restore is not None:
                with contextlib.suppress(OSError):
                    restore(path)
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
        finally:
            os.close(fd)
    return removed
