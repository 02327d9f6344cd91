"""Bad input never gives a traceback or a partial file: one line naming the file and the field, exit status 2."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pdtune.cli import main

HERE = Path(__file__).parent
BAD = HERE / "fixtures" / "results" / "bad"
GOOD = HERE / "fixtures" / "results"
LOGS = HERE / "fixtures" / "logs"
QWEN3_32B = str(LOGS / "models" / "qwen3-32b")

# (arguments after "pdtune", the file the message must name, the field it must blame)
RESULTS_CASES = [
    (["results", str(BAD / "truncated.json"), "--gpus", "8"], "truncated.json", "json"),
    (["results", str(BAD / "nan-median-tpot.json"), "--gpus", "8"], "nan-median-tpot.json", "median_tpot_ms"),
    (["results", str(BAD / "missing-median-tpot.json"), "--gpus", "8"], "missing-median-tpot.json", "median_tpot_ms"),
    (["results", str(BAD / "missing-throughput.json"), "--gpus", "8"], "missing-throughput.json", "output_throughput"),
    (["results", str(BAD / "request-rate-run.json"), "--gpus", "8"], "request-rate-run.json", "max_concurrency"),
    (["results", str(BAD / "no-completed-requests.json"), "--gpus", "8"], "no-completed-requests.json", "completed"),
    (["results", str(BAD / "negative-throughput.json"), "--gpus", "8"], "negative-throughput.json", "output_throughput"),
    (["results", str(BAD / "infinite-ttft.json"), "--gpus", "8"], "infinite-ttft.json", "median_ttft_ms"),
    (["results", str(BAD / "modeled-not-bool.json"), "--gpus", "8"], "modeled-not-bool.json", "modeled"),
    (["results", str(BAD / "garbage.json")], "garbage.json", "file"),
    (["results", str(BAD / "empty.json")], "empty.json", "file"),
    (["results", str(BAD / "not-results.json")], "not-results.json", "format"),
    (["results", str(BAD / "aiperf-no-concurrency"), "--gpus", "8"], "profile_export_aiperf.json", "concurrency"),
    (["results", str(BAD / "aiperf-bad-unit-concurrency16"), "--gpus", "8"], "profile_export_aiperf.json",
     "inter_token_latency.unit"),
    (["results", str(BAD / "aiperf-missing-itl-concurrency16"), "--gpus", "8"], "profile_export_aiperf.json",
     "inter_token_latency.p50"),
    (["results", str(BAD / "srt-zero-gpus")], "results_concurrency_64_gpus_0.json", "gpus"),
    (["results", str(BAD / "srt-ctx-gen-mismatch")], "results_concurrency_64_gpus_24_ctx_8_gen_8.json", "gpus"),
    (["results", str(BAD / "srt-mixed-workload")], "results_concurrency_64_gpus_24_ctx_8_gen_16.json", "isl"),
    (["results", str(BAD / "srt-concurrency-mismatch")], "results_concurrency_128_gpus_8.json", "max_concurrency"),
    (["results", str(BAD / "srt-mode-mismatch")], "results_concurrency_64_gpus_8.json", "mode"),
    (["results", str(BAD / "srt-job-metadata" / "5550002.json")], "5550002.json", "job_id"),
    (["results", str(BAD / "inferencex-missing-decode-gpus.csv")], "inferencex-missing-decode-gpus.csv",
     "Num Decode GPUs"),
    (["results", str(BAD / "inferencex-tp-mismatch.csv")], "inferencex-tp-mismatch.csv", "TP"),
    (["results", str(BAD / "inferencex-missing-column.csv")], "inferencex-missing-column.csv", "Concurrency"),
    (["results", str(BAD / "rollup-missing-column")], "benchmark-rollup.csv", "Median TPOT"),
    (["results", str(BAD / "sglang-broken-line.jsonl"), "--gpus", "8"], "sglang-broken-line.jsonl", "line 2"),
    (["results", str(BAD / "bad-sidecar")], "pdtune-gpus.yaml", "gpus"),
    # seconds-keyed vllm bench JSON: a latency key that names no unit; ms and s spellings that disagree
    (["results", str(BAD / "seconds-no-unit.json"), "--gpus", "4"], "seconds-no-unit.json", "ttft"),
    (["results", str(BAD / "seconds-and-ms-disagree.json"), "--gpus", "4"], "seconds-and-ms-disagree.json",
     "median_ttft"),
    # no GPU counts anywhere: a per-GPU figure would be a guess
    (["results", str(GOOD / "vllm_bench" / "qwen3-32b-c64-no-percentiles.json")], "qwen3-32b-c64-no-percentiles.json",
     "gpus"),
    # a sidecar and the flag disagree
    (["results", str(GOOD / "sglang"), "--gpus", "8"], "pdtune-gpus.yaml", "gpus"),
    # two workloads where one is expected
    (["results", str(GOOD / "vllm_bench"), "--gpus", "8", "--single-workload"], ".json", "isl/osl"),
    (["results", str(GOOD / "no-such-folder")], "no-such-folder", "path"),
]

LOG_CASES = [
    (["log", str(LOGS / "bad" / "no-kv-line.log")], "no-kv-line.log", "KV cache size"),
    (["log", str(LOGS / "bad" / "garbage.log")], "garbage.log", "file"),
    (["log", str(LOGS / "bad" / "empty.log")], "empty.log", "log"),
    (["log", str(LOGS / "bad" / "nginx-access.log")], "nginx-access.log", "log"),
    (["log", str(LOGS / "missing.log")], "missing.log", "file"),
    (["log", str(LOGS / "v0.26_tp2_qwen3-32b.log"), "--model", "no-such-model"], "no-such-model", "model"),
    (["log", str(LOGS / "v0.26_tp2_qwen3-32b.log"), "--model", QWEN3_32B, "--vllm", "0.5"], "--vllm", "vllm"),
]


def one_error_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 2, captured.out + captured.err
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert "Traceback" not in captured.err
    return lines[0]


def test_corpus_is_large_enough() -> None:
    assert len(RESULTS_CASES) + len(LOG_CASES) >= 20
    assert len(list(BAD.iterdir())) >= 20


@pytest.mark.parametrize(("argv", "names", "field"), RESULTS_CASES + LOG_CASES,
                         ids=[f"{c[0][0]}-{Path(c[0][1]).name}-{i}" for i, c in enumerate(RESULTS_CASES + LOG_CASES)])
def test_bad_input_gives_one_line(capsys: pytest.CaptureFixture[str], argv: list[str], names: str, field: str) -> None:
    line = one_error_line(capsys, argv)
    assert line.startswith(f"pdtune {argv[0]}: error: ")
    assert names in line
    assert f": {field}: " in line


def test_empty_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = one_error_line(capsys, ["results", str(tmp_path)])
    assert str(tmp_path) in line and ": results: no benchmark results found" in line


@pytest.mark.parametrize("value", ["0", "prefill=0,decode=0", "prefill=8", "two"])
def test_bad_gpus_flag(capsys: pytest.CaptureFixture[str], value: str) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["results", str(GOOD / "srt_slurm" / "agg"), "--gpus", value])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--gpus" in err[0]


def test_no_partial_output_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "mixed"
    shutil.copytree(GOOD / "srt_slurm" / "agg", folder / "agg")
    shutil.copy(BAD / "nan-median-tpot.json", folder / "broken.json")
    out = tmp_path / "table.csv"
    one_error_line(capsys, ["results", str(folder), "--gpus", "8", "--csv", "-o", str(out)])
    assert not out.exists() and list(tmp_path.iterdir()) == [folder]


def test_installed_entry_point(tmp_path: Path) -> None:
    exe = Path(sys.executable).parent / "pdtune"
    done = subprocess.run([str(exe), "results", str(BAD / "nan-median-tpot.json"), "--gpus", "8"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "nan-median-tpot.json: median_tpot_ms: is NaN" in done.stderr
