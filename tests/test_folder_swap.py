"""The one stage-and-swap helper (:class:`pdtune.io.FolderSwap`) that the workbook, ``dataset generate`` and
``recipe`` write their output folders with: swapped in whole by renames of folders, one run at a time, and the
one rule for what a killed run left (issue 19; issue 22, causes 4 and 11). The bad-input side (a second run
refused in one line, exit 2) is in ``tests/badinputs.py``, causes 2204 and 2211."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pdtune.errors import InputError
from pdtune.io import FolderSwap, beside
from pdtune.signals import Terminated, terminate_raises

PDTUNE = Path(sys.executable).parent / "pdtune"


def hidden(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def tree(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): p.read_text() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_the_new_folder_replaces_the_old_one_whole(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "sub").mkdir(parents=True)
    (out / "sub" / "gone.txt").write_text("old")
    (out / "a.txt").write_text("old")
    with FolderSwap(out) as swap:
        assert swap.staging == tmp_path / ".out.pdtune-new" and (tmp_path / ".out.pdtune-lock").is_file()
        (swap.staging / "a.txt").write_text("new")
        assert tree(out) == {"a.txt": "old", "sub/gone.txt": "old"}  # untouched until the commit
        assert swap.commit() == out.resolve()
    assert tree(out) == {"a.txt": "new"} and hidden(tmp_path) == []


def test_carried_entries_stay_as_they_were(tmp_path: Path) -> None:
    """What the command does not own (a README beside a dataset, earlier recipes) is carried into the new
    folder, as hard links: the same file, not a copy; a name the new folder writes is the new one."""
    out = tmp_path / "out"
    (out / "mine").mkdir(parents=True)
    (out / "mine" / "notes.md").write_text("keep")
    (out / "README.md").write_text("keep")
    (out / "link").symlink_to("README.md")
    (out / "owned.json").write_text("old")
    inode = (out / "README.md").stat().st_ino
    with FolderSwap(out, carry=lambda name: name != "owned.json") as swap:
        (swap.staging / "new.json").write_text("new")
        swap.commit()
    assert tree(out) == {"README.md": "keep", "link": "keep", "mine/notes.md": "keep", "new.json": "new"}
    assert (out / "README.md").stat().st_ino == inode and os.readlink(out / "link") == "README.md"
    assert hidden(tmp_path) == []


def test_the_folder_keeps_its_permissions(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir(mode=0o750)
    out.chmod(0o750)
    with FolderSwap(out) as swap:
        (swap.staging / "x").write_text("x")
        swap.commit()
    assert out.stat().st_mode & 0o777 == 0o750


def test_leaving_without_commit_leaves_the_old_folder_and_nothing_beside(tmp_path: Path) -> None:
    out = tmp_path / "deep" / "er" / "out"
    with pytest.raises(RuntimeError), FolderSwap(out) as swap:
        (swap.staging / "half.txt").write_text("half")
        raise RuntimeError("a failure half-way")
    assert list(tmp_path.iterdir()) == []  # the parents it made are gone too
    out.mkdir(parents=True)
    (out / "a.txt").write_text("old")
    with pytest.raises(RuntimeError), FolderSwap(out) as swap:
        (swap.staging / "a.txt").write_text("new")
        raise RuntimeError("a failure half-way")
    assert tree(out) == {"a.txt": "old"} and hidden(out.parent) == []


def test_a_full_disk_while_staging_is_one_line_naming_out(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with pytest.raises(InputError, match=r"out: --out: cannot write there: No space left on device"):
        with FolderSwap(out) as swap:
            (swap.staging / "a.txt").write_text("a")
            raise OSError(28, "No space left on device")  # what write() raises: no file name
    with pytest.raises(OSError, match="elsewhere"), FolderSwap(out) as swap:  # an input's error stays its own
        assert swap.staging.is_dir()
        raise OSError(2, "elsewhere", str(tmp_path / "input.json"))
    assert list(tmp_path.iterdir()) == []


def test_a_second_run_into_the_same_folder_is_refused(tmp_path: Path) -> None:
    """Issue 22, cause 11: two runs writing the same new --out both succeeded, the later replacing the first."""
    out = tmp_path / "out"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from pdtune.io import FolderSwap\n"
                               "with FolderSwap(sys.argv[1]) as s:\n print(s.staging, flush=True); time.sleep(60)",
                               str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == str(tmp_path / ".out.pdtune-new")
        with pytest.raises(InputError, match=rf"--recipes: another pdtune run is writing it \(pid {holder.pid}\)"):
            with FolderSwap(out, "--recipes"):
                pass
        assert hidden(tmp_path) == [".out.pdtune-lock", ".out.pdtune-new"]  # the live run's, untouched
    finally:
        holder.kill()
        holder.wait()
    with FolderSwap(out) as swap:  # its lock went with it: the next run takes it and clears its staging folder
        assert not swap.staging.exists() or not any(swap.staging.iterdir())
        swap.commit()
    assert hidden(tmp_path) == [] and list(out.iterdir()) == []


def test_a_lock_won_on_a_removed_file_is_taken_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The holder removes the lock file before it lets go; a run that was waiting on that file wins a lock on
    nothing, so it must take the one now at the path (else two runs would both hold "the" lock)."""
    out = tmp_path / "out"
    lock = beside(out.resolve(), "lock")
    real_flock = fcntl.flock
    calls = []

    def flock(fd: int, op: int) -> None:
        calls.append(os.fstat(fd).st_ino)
        if len(calls) == 1:  # the holder ends just now: removes its file, and a third run makes a new one
            lock.unlink()
            lock.write_text("")
        real_flock(fd, op)

    lock.write_text("")
    monkeypatch.setattr(fcntl, "flock", flock)
    with FolderSwap(out):
        assert len(calls) == 2 and calls[0] != calls[1] == lock.stat().st_ino
        assert lock.read_text() == f"{os.getpid()}\n"


def test_a_swap_killed_between_its_renames_is_put_back(tmp_path: Path) -> None:
    """The one stale rule: under the lock, an old- folder is the previous output when the new one never
    arrived (put back), else leftover (removed); a new- folder is a killed run's staging (removed)."""
    out = tmp_path / "out"
    old, new = tmp_path / ".out.pdtune-old", tmp_path / ".out.pdtune-new"
    old.mkdir()
    (old / "summary.json").write_text("{}")
    new.mkdir()
    (new / "half.txt").write_text("half")
    (tmp_path / ".out.pdtune-lock").write_text("4242\n")  # a SIGKILLed run's: nobody holds it
    with FolderSwap(out) as swap:
        assert tree(out) == {"summary.json": "{}"} and not old.exists() and not new.exists()
        assert swap.staging.is_dir() and list(swap.staging.iterdir()) == []
    assert tree(out) == {"summary.json": "{}"} and hidden(tmp_path) == []
    old.mkdir()
    (old / "left.txt").write_text("the swap was done, its clean-up was not")
    with FolderSwap(out):
        assert not old.exists() and tree(out) == {"summary.json": "{}"}


def test_a_signal_during_the_swap_waits_until_it_is_done(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 22, causes 4 and 11: SIGTERM between the renames (or while the old folder is removed) left a
    half-written folder or an old- folder beside a complete one. It is held back to the end of the swap."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "a.txt").write_text("old")
    real_rename = os.rename

    def rename(src: str | Path, dst: str | Path) -> None:
        real_rename(src, dst)
        os.kill(os.getpid(), signal.SIGTERM)

    with terminate_raises(), pytest.raises(Terminated), FolderSwap(out) as swap:
        (swap.staging / "a.txt").write_text("new")
        monkeypatch.setattr(os, "rename", rename)
        swap.commit()
        monkeypatch.undo()
        pytest.fail("the deferred SIGTERM should have been raised at the end of the swap")
    assert tree(out) == {"a.txt": "new"} and hidden(tmp_path) == []


def test_a_signal_before_the_swap_leaves_the_old_folder(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "a.txt").write_text("old")
    with terminate_raises(), pytest.raises(Terminated), FolderSwap(out) as swap:
        (swap.staging / "a.txt").write_text("new")
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
    assert tree(out) == {"a.txt": "old"} and hidden(tmp_path) == []


@pytest.mark.slow
@pytest.mark.parametrize("command", ["dataset", "recipe"])
def test_sigterm_to_a_writing_command_leaves_the_output_whole_or_absent(command: str, tmp_path: Path) -> None:
    """Issue 22, cause 4 (140 of 1,202 recipes in --out after SIGTERM) and cause 11 (an old- folder beside the
    dataset after SIGTERM), end to end: the real command, signalled at moments spread over its run, leaves
    either the previous folder or the complete new one, and nothing beside it."""
    out = tmp_path / "out"
    if command == "dataset":
        argv = [str(PDTUNE), "dataset", "generate", "--concurrency", "1,2,4,8,16,32,64", "--out", str(out)]
    else:
        plan = tmp_path / "plan.json"
        done = subprocess.run([str(PDTUNE), "plan", "qwen3-32b", "--gpu", "h100", "--max-gpus", "32", "--isl",
                               "1024", "--osl", "128", "--json"], capture_output=True, text=True, check=True)
        plan.write_text(done.stdout)
        rows = [str(r["row"]) for r in json.loads(done.stdout)["rows"]]
        argv = [str(PDTUNE), "recipe", str(plan), "--measurements", "--out", str(out)]
        for row in rows:
            argv += ["--row", row]
    out.mkdir()
    (out / "mine.txt").write_text("kept")
    started = time.monotonic()
    subprocess.run(argv, check=True, capture_output=True)
    whole = tree(out)
    took = time.monotonic() - started
    assert len(whole) > 20 and whole["mine.txt"] == "kept"
    previous = {"mine.txt": "kept"}
    for fraction in (0.6, 0.85, 1.0):
        for path in sorted(out.iterdir()):
            if path.name != "mine.txt":
                subprocess.run(["rm", "-rf", str(path)], check=True)
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        time.sleep(took * fraction)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
        found = tree(out)
        assert found in (previous, whole), f"half-written after SIGTERM at {fraction:.0%} of the run"
        # 143: the command caught it and undid its work. A signal that lands before pdtune has set its handler
        # (the interpreter still starting, on a loaded machine) or once the output is swapped in (as it exits)
        # takes the default action (-15): the previous folder or the whole new one, as asserted above, and
        # nothing beside it, as asserted below.
        assert proc.returncode in (0, 128 + signal.SIGTERM, -signal.SIGTERM), err
        assert hidden(tmp_path) == [], f"left beside the output after SIGTERM at {fraction:.0%} of the run"
