"""`pdtune frontier`: the envelope, the SLA pick and the accuracy gate from result files, and bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pdtune.cli import main
from pdtune.frontier import RATE_MATCH_COLUMNS
from pdtune.results import TIDY_COLUMNS

from test_frontier import INFERENCEX_SAMPLE


def write_point(folder: Path, concurrency: int, tpot_ms: float, total_tps: float, **deployment) -> None:
    """One `vllm bench serve --save-result` record, carrying its deployment keys as pdtune reads them."""
    folder.mkdir(parents=True, exist_ok=True)
    record = {"completed": 100, "max_concurrency": concurrency, "isl": 8192, "osl": 1024,
              "total_token_throughput": total_tps, "output_throughput": total_tps * 1024 / 9216,
              "median_ttft_ms": 900.0, "median_tpot_ms": tpot_ms, "mean_tpot_ms": tpot_ms} | deployment
    (folder / f"result_concurrency_{concurrency}.json").write_text(json.dumps(record), encoding="utf-8")


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    """Two disaggregated deployments of the article's shape, 16 and 32 GPUs (GPU counts in sidecars)."""
    small = tmp_path / "tep8"
    large = tmp_path / "tp2dp4x3"
    tep8 = {"mode": "disagg", "prefill_topology": "TEP8", "decode_topology": "TEP8", "n_prefill_workers": 1,
            "n_decode_workers": 1, "mtp_tokens": 3, "accuracy": 0.957}
    tp2 = {"mode": "disagg", "prefill_topology": "TP2DP4+EP", "decode_topology": "TEP8", "n_prefill_workers": 3,
           "n_decode_workers": 1, "mtp_tokens": 0, "accuracy": 0.948}
    # tok/s per user = 1000 / TPOT; tok/s per GPU = total tok/s / GPUs.
    write_point(small, 1, 5.0, 16 * 300.0, **tep8)  # 200 tok/s/user, 300 tok/s/GPU
    write_point(small, 16, 8.0, 16 * 1500.0, **tep8)  # 125, 1500
    write_point(small, 128, 25.0, 16 * 1900.0, **tep8)  # 40, 1900 (beaten by 3x's 64-user point)
    write_point(large, 64, 10.0, 32 * 2000.0, **tp2)  # 100, 2000
    write_point(large, 512, 40.0, 32 * 5000.0, **tp2)  # 25, 5000
    (small / "pdtune-gpus.yaml").write_text("prefill: 8\ndecode: 8\n", encoding="utf-8")
    (large / "pdtune-gpus.yaml").write_text("prefill: 24\ndecode: 8\n", encoding="utf-8")
    return tmp_path


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main(["frontier", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_envelope_with_provenance(sweep, capsys):
    out = run_json(capsys, str(sweep))
    assert out["workload"] == "ISL/OSL 8192/1024" and out["points_loaded"] == 5
    assert [(p["deployment"], p["concurrency"]) for p in out["envelope"]] == [
        ("3xTP2DP4+EP : 1xTEP8", 512), ("3xTP2DP4+EP : 1xTEP8", 64),
        ("1xTEP8 : 1xTEP8+MTP", 16), ("1xTEP8 : 1xTEP8+MTP", 1)]
    assert [p["tps_per_gpu"] for p in out["envelope"]] == pytest.approx([5000.0, 2000.0, 1500.0, 300.0])
    assert [p["tps_per_user"] for p in out["envelope"]] == pytest.approx([25.0, 100.0, 125.0, 200.0])
    assert out["sla"] == [] and out["accuracy_gate"] is None


def test_sla_picks_both_ways(sweep, capsys):
    out = run_json(capsys, str(sweep), "--min-tps-per-user", "90", "--min-tps-per-gpu", "1000")
    by_floor = {s["constraint"]: s for s in out["sla"]}
    assert (by_floor["tps_per_user"]["deployment"], by_floor["tps_per_user"]["concurrency"]) == \
        ("3xTP2DP4+EP : 1xTEP8", 64)
    assert by_floor["tps_per_user"]["tps_per_gpu"] == pytest.approx(2000.0)
    assert (by_floor["tps_per_gpu"]["deployment"], by_floor["tps_per_gpu"]["concurrency"]) == \
        ("1xTEP8 : 1xTEP8+MTP", 16)


def test_accuracy_gate_drops_the_deployment_below_threshold(sweep, capsys):
    # 3xTP2DP4+EP : 1xTEP8 scored 0.948 < 0.95: its points leave, the 128-user TEP8 point returns.
    out = run_json(capsys, str(sweep), "--accuracy-threshold", "0.95", "--min-tps-per-user", "90")
    assert out["accuracy_gate"]["excluded"] == [{"deployment": "3xTP2DP4+EP : 1xTEP8", "accuracy": 0.948, "rows": 2}]
    assert {p["deployment"] for p in out["envelope"]} == {"1xTEP8 : 1xTEP8+MTP"}
    assert [p["concurrency"] for p in out["envelope"]] == [128, 16, 1]
    assert out["sla"][0]["deployment"] == "1xTEP8 : 1xTEP8+MTP" and out["sla"][0]["concurrency"] == 16


def test_table_output(sweep, capsys):
    assert main(["frontier", str(sweep), "--min-tps-per-user", "300"]) == 0
    text = capsys.readouterr().out
    assert "Upper envelope, ISL/OSL 8192/1024: 4 of 5 points, from 2 deployment(s)" in text
    assert "total tok/s per GPU (all GPUs)" in text and "output tok/s per user (1000 / TPOT p50)" in text
    lines = [line.split() for line in text.splitlines() if line.startswith("  3xTP2DP4")]
    assert [line[-3:] for line in lines] == [["512", "5000.0", "25.0"], ["64", "2000.0", "100.0"]]
    assert "SLA >= 300 tok/s per user: no point meets it (the best reaches 200.0 tok/s per user)" in text


def test_inferencex_sample(tmp_path, capsys):
    sample = tmp_path / INFERENCEX_SAMPLE.name
    shutil.copyfile(INFERENCEX_SAMPLE, sample)
    out = run_json(capsys, str(sample), "--min-tps-per-user", "100")
    assert len(out["envelope"]) == 9  # all nine published points are Pareto-optimal
    pick = out["sla"][0]
    assert (pick["concurrency"], round(pick["tps_per_gpu"], 1), round(pick["tps_per_user"], 1)) == \
        (180, 1149.1, 164.4)


def test_percent_accuracy_is_one_line_bad_input(tmp_path, capsys):
    write_point(tmp_path / "a", 8, 10.0, 8000.0, topology="TEP8", accuracy=95.3)
    (tmp_path / "a" / "pdtune-gpus.yaml").write_text("total: 8\n", encoding="utf-8")
    assert main(["frontier", str(tmp_path), "--accuracy-threshold", "0.95"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "accuracy" in err and "a percentage?" in err


def test_two_workloads_are_one_line_bad_input(sweep, capsys):
    write_point(sweep / "other", 8, 10.0, 8000.0, topology="TEP8", isl=1024, osl=1024)
    (sweep / "other" / "pdtune-gpus.yaml").write_text("total: 8\n", encoding="utf-8")
    assert main(["frontier", str(sweep)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "1024/1024" in err and "8192/1024" in err


def test_bad_threshold_flag_exits_2(sweep, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["frontier", str(sweep), "--accuracy-threshold", "95"])
    assert exit_.value.code == 2


def test_rate_matched_frames_carry_the_loaded_schema():
    assert set(TIDY_COLUMNS) <= set(RATE_MATCH_COLUMNS)
    assert list(RATE_MATCH_COLUMNS[: len(TIDY_COLUMNS)]) == list(TIDY_COLUMNS)
