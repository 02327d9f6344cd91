"""Outputs pdtune cannot write are one line naming where, exit 2 (issue 22, causes 5 and 10): the guarded stdout
every command prints through (pdtune.io.guarded_stdout, put there by pdtune.cli.main), the writer of files
inside an output being built (pdtune.io.write_text) and the wording of every write failure. The corpus
(tests/badinputs.py, causes 2205 and 2210) runs the commands against /dev/full, a closed stdout, a pipe
whose reader left, names too long and a file-size limit; these are the cases it cannot express."""

from __future__ import annotations

import errno
import subprocess
import sys
from pathlib import Path

import pytest

from pdtune.cli import main
from pdtune.errors import InputError
from pdtune.io import write_failure, write_text

PDTUNE = Path(sys.executable).parent / "pdtune"
SILICON = Path(__file__).resolve().parents[1] / "data" / "clusters" / "aiconfigurator-silicon"


def test_a_reader_that_leaves_mid_output_is_an_error_not_a_silent_exit_0() -> None:
    """Python's own buffered stdout, given a 2.9 MB write to a pipe whose reader leaves after 10 bytes, kept the
    first 64 KiB, dropped the rest and reported success: `pdtune results --csv | head -c 10` exited 0."""
    proc = subprocess.Popen([str(PDTUNE), "results", str(SILICON), "--csv"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.read(10) == b"source,pat"
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 2
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("pdtune results: error: stdout (pipe:") and "Broken pipe (EPIPE)" in err


def test_the_whole_output_still_gets_through_a_pipe(tmp_path: Path) -> None:
    direct = subprocess.run([str(PDTUNE), "results", str(SILICON), "--csv", "-o", str(tmp_path / "t.csv")],
                            capture_output=True, check=True)
    piped = subprocess.run([str(PDTUNE), "results", str(SILICON), "--csv"], capture_output=True, check=True)
    assert direct.stdout == b"" and piped.stdout == (tmp_path / "t.csv").read_bytes()
    assert len(piped.stdout) > 1 << 20  # many times the guard's 64 KiB chunk


def test_the_workbook_plan_on_a_full_disk_names_the_file(tmp_path: Path) -> None:
    """planning.write_plan wrote plan.json with Path.write_text: ENOSPC was a traceback. /dev/full behind the
    file's name stands in for the full disk (the write follows the link)."""
    from pdtune.workbook.planning import PLAN_JSON, WorkbookPlan, write_plan

    folder = tmp_path / "plan"
    folder.mkdir()
    (folder / PLAN_JSON).symlink_to("/dev/full")
    result = WorkbookPlan(data={"generator": "pdtune plan", "rows": []}, summary={"picks": []}, pick_rows=())
    with pytest.raises(InputError) as caught:
        write_plan(folder, result, recipes=False)
    assert caught.value.source.endswith("plan/plan.json") and caught.value.field == "--out"
    assert caught.value.message == "cannot write there: No space left on device (ENOSPC)"


def test_a_name_that_was_not_utf8_is_written_back_as_its_bytes(tmp_path: Path) -> None:
    """A results path decoded by Python with surrogateescape (b'\\xff' -> '\\udcff') failed the whole CSV with a
    UnicodeEncodeError; it is written as the byte it was, as Python's stdout writes it."""
    target = tmp_path / "out.csv"
    write_text(target, "path\n/runs/\udcff\udcfe/a.json\n")
    assert target.read_bytes() == b"path\n/runs/\xff\xfe/a.json\n"


def test_every_write_failure_is_worded_once() -> None:
    exc = OSError(errno.ENAMETOOLONG, "File name too long")
    err = write_failure("/x/" + "y" * 5000, "-o", exc)
    assert err.field == "-o" and err.message == "cannot write there: File name too long (ENAMETOOLONG)"
    assert len(str(err)) < 1200  # the 5,000-character path is cut


def test_an_os_error_no_writer_named_is_still_one_line(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    import pdtune.commands.graphs as graphs

    def full(_args: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device", "/scratch/graphs.txt")

    monkeypatch.setattr(graphs, "run", full)
    assert main(["graphs", "--max-num-seqs", "8"]) == 2
    err = capsys.readouterr().err
    assert err == ("pdtune graphs: error: /scratch/graphs.txt: file: cannot write there: No space left on device "
                   "(ENOSPC)\n")


def test_a_command_that_prints_into_a_capture_is_unchanged(capsys: pytest.CaptureFixture[str]) -> None:
    """Tests and the corpus capture stdout in a Python stream: the guard passes writes through to it."""
    assert main(["graphs", "--max-num-seqs", "8"]) == 0
    assert "graphs (4 FULL" in capsys.readouterr().out
