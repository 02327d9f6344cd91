"""Issue 14 beside the campaign: what must still *work* once bad input is refused, and the fixes that are not one
bad input each (a crash loop's engines, writing through a link, stale staging, a command line without data)."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from pdtune.cli import main
from pdtune.dataset import generate_dataset
from pdtune.io import atomic_write_text
from pdtune.results import load_results
from pdtune.vllm_log import cross_check, parse_log

HERE = Path(__file__).parent
LOGS = HERE / "fixtures" / "logs"
V033_TP2 = LOGS / "v0.33_tp2_qwen3-32b_fp8kv.log"
QWEN3_32B = str(LOGS / "models" / "qwen3-32b")


def crash_loop(path: Path, restarts: int) -> Path:
    """The TP=2 start-up logged ``restarts`` times, each with new pids (a crash-looping server)."""
    lines = V033_TP2.read_text(encoding="utf-8").splitlines(keepends=True)
    pid = re.compile(r"pid=(\d+)")
    with path.open("w", encoding="utf-8") as fh:
        for k in range(restarts):
            fh.writelines(pid.sub(lambda m: f"pid={int(m.group(1)) * 10000 + k}", ln) for ln in lines)
    return path


def test_crash_loop_engines_find_their_own_ranks(tmp_path: Path) -> None:
    """Cause 9: every restart's engine is cross-checked against the ranks that started after it (the index of
    engines is built once, in order); before, no engine of a crash loop found a rank at all."""
    log = parse_log(crash_loop(tmp_path / "loop.log", 300))
    assert len(log.engines) == 300 and len(log.memory_workers) == 600
    checks = cross_check(log, QWEN3_32B)
    assert len(checks) == 300
    for check in checks:
        engine_pid = int(check.engine.split("pid=")[1])
        worker_pid = int(check.worker.split("pid=")[1])
        assert engine_pid % 10000 == worker_pid % 10000, (check.engine, check.worker)  # the same restart
        assert check.tokens_inside


def test_newer_log_is_checked_with_the_newest_line_and_says_so(tmp_path: Path) -> None:
    """Cause 14: a log of vLLM 0.40 is checked with 0.33's rules, with a note; it is not printed as 0.40's."""
    log_path = tmp_path / "v040.log"
    log_path.write_text(V033_TP2.read_text(encoding="utf-8").replace("v0.33.0", "v0.40.0")
                        .replace("version 0.33.0", "version 0.40.0"), encoding="utf-8")
    (check,) = cross_check(parse_log(log_path), QWEN3_32B)
    assert check.settings["vllm"] == "0.33"
    assert any("0.40.0 is newer than 0.33" in note for note in check.notes)


@pytest.mark.parametrize("version", ["0.33", "0.33.0", "v0.26.1", "0.26.1rc1.dev1177+ga9a17e709", "0.11", "0.15"])
def test_versions_pdtune_follows_are_accepted(capsys: pytest.CaptureFixture[str], version: str) -> None:
    assert main(["state", "qwen3-32b", "--isl", "1024", "--osl", "128", "--vllm", version]) == 0
    capsys.readouterr()


def test_debug_log_numbers_are_not_read_from_inside_other_numbers() -> None:
    """``0.21410000044852495 GiB for non-torch memory`` is 0.21 GiB, not 21,410,000,044,852,495 GiB (a number may
    not start inside another, and Python's 17 significant digits fit)."""
    log = parse_log(LOGS / "v0.11_dp2_qwen3-next-debug.log")
    worker = log.worker("EngineCore_DP1")
    assert worker.non_torch is not None and abs(worker.non_torch / 2**30 - 0.2141) < 0.001


def test_every_real_result_fixture_passes_the_record_checks() -> None:
    """The sanity checks refuse impossible records only: every real and modeled result fixture and every bundled
    cluster still loads whole."""
    from pdtune.results import GpuCounts

    results = HERE / "fixtures" / "results"
    for name in ("aiperf", "vllm_bench", "sglang", "srt_slurm", "inferencex"):
        gpus = GpuCounts.aggregated(8) if name == "vllm_bench" else None  # the others record or sidecar theirs
        assert len(load_results(results / name, gpus=gpus)) >= 3, name
    data = Path(__file__).resolve().parents[1] / "data" / "clusters"
    for cluster in sorted(p for p in data.iterdir() if p.is_dir()):
        if any(cluster.rglob("*.json")) or any(cluster.rglob("*.csv")):
            assert len(load_results(cluster)) >= 1, cluster


def test_output_through_a_link_replaces_its_target_not_the_link(tmp_path: Path) -> None:
    """Cause 6: ``-o LINK`` writes the file the link names; the link stays; the file gets ``open``'s mode."""
    target = tmp_path / "real.csv"
    target.write_text("old\n", encoding="utf-8")
    target.chmod(0o640)
    link = tmp_path / "link.csv"
    link.symlink_to(target)
    written = atomic_write_text(link, "new\n")
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert written == target.resolve() and target.read_text(encoding="utf-8") == "new\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640  # the old file's mode, not mkstemp's 0600
    fresh = tmp_path / "fresh.csv"
    atomic_write_text(fresh, "x\n")
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o666 & ~umask
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fresh.csv", "link.csv", "real.csv"]


def test_results_o_through_a_link(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "table.csv"
    target.write_text("", encoding="utf-8")
    link = tmp_path / "out.csv"
    link.symlink_to(target)
    good = HERE / "fixtures" / "results" / "vllm_bench" / "qwen3-32b-c16-percentiles.json"
    assert main(["results", str(good), "--gpus", "8", "--csv", "-o", str(link)]) == 0
    assert link.is_symlink() and target.read_text(encoding="utf-8").startswith("source,")
    capsys.readouterr()


def test_dataset_generate_removes_what_a_killed_run_left(tmp_path: Path) -> None:
    """Cause 12: ``dataset generate`` killed between the two renames of its swap leaves the previous dataset in
    ``.out.pdtune-old`` and the new one in ``.out.pdtune-new``, and no ``out``; the next run puts the previous one
    back (its README too), removes the rest, and regenerates."""
    import shutil

    from pdtune.dataset import DatasetSpec, spec_from_params

    out = tmp_path / "out"
    spec: DatasetSpec = spec_from_params({"concurrencies": [1, 8]}, "test")
    generate_dataset(out, spec)
    (out / "README.md").write_text("mine\n", encoding="utf-8")
    shutil.copytree(out, tmp_path / ".out.pdtune-new")
    out.rename(tmp_path / ".out.pdtune-old")
    (tmp_path / ".out.pdtune-lock").write_text("4242\n", encoding="utf-8")
    generate_dataset(out, spec)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert (out / "README.md").read_text(encoding="utf-8") == "mine\n" and (out / "decode").is_dir()


def test_command_line_needs_no_data(tmp_path: Path) -> None:
    """Cause 11: ``--version`` and every ``--help`` work without ``data/``: no data is read to build the parser."""
    exe = Path(sys.executable).parent / "pdtune"
    env = {**os.environ, "PDTUNE_DATA": str(tmp_path / "no-data")}
    commands = ["--version", "--help"] + [f"{c} --help" for c in ("state", "memory", "graphs", "log", "results",
                                                                  "frontier", "predict", "workbook", "plan", "recipe",
                                                                  "dataset", "validate", "calibrate")]
    for argv in commands:
        done = subprocess.run([str(exe), *argv.split()], capture_output=True, text=True, env=env, timeout=120,
                              check=False)
        assert done.returncode == 0 and "Traceback" not in done.stderr, (argv, done.stderr[-500:])
