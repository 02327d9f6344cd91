"""``pdtune simulate``: the timeline summary, --json, the per-request CSV written whole (modeled)."""

from __future__ import annotations

import csv
import json

from pdtune.cli import main
from pdtune.sim.results import REQUEST_COLUMNS

BASE = ["simulate", "llama-3.1-8b", "--gpu", "h100", "--topology", "TP1"]


def test_text_summary_is_labelled_modeled(capsys) -> None:  # type: ignore[no-untyped-def]
    assert main([*BASE, "--concurrency", "4", "--isl", "512", "--osl", "32", "--num-prompts", "8"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("MODELED (step-level simulation")
    for word in ("TTFT ms", "TPOT ms", "ITL ms", "E2E ms", "tok/s per GPU", "running", "waiting", "KV blocks used"):
        assert word in out


def test_json_has_the_stats_the_timeline_and_the_tidy_row(capsys) -> None:  # type: ignore[no-untyped-def]
    assert main([*BASE, "--rate", "5", "--isl", "256", "--osl", "16", "--num-prompts", "20", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["modeled"] is True and data["row"]["modeled"] is True and data["row"]["source"] == "pdtune-sim"
    assert data["ttft_ms_p99"] >= data["ttft_ms_p90"] >= data["ttft_ms_p50"] > 0
    assert data["timeline"]["engine"]["steps"] > 0 and data["requests"] == 20


def test_csv_has_one_row_per_measured_request(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "sub" / "requests.csv"
    assert main([*BASE, "--concurrency", "3", "--isl", "300", "--osl", "10", "--num-prompts", "9",
                 "--csv", str(out)]) == 0
    assert "per-request rows written" in capsys.readouterr().out
    rows = list(csv.DictReader(out.open()))
    assert list(rows[0]) == list(REQUEST_COLUMNS) and len(rows) == 9
    assert all(r["modeled"] == "True" and int(r["osl"]) == 10 for r in rows)
    assert not [p for p in out.parent.iterdir() if p.name != "requests.csv"]  # no temporary file left


def test_a_trace_and_a_disaggregated_topology(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    trace = tmp_path / "trace.csv"
    trace.write_text("arrival_s,isl,osl\n0,200,8\n0.1,400,8\n0.2,100,12\n")
    assert main(["simulate", "llama-3.1-8b", "--gpu", "h100", "--topology", "1xTP1:1xTP1", "--trace", str(trace),
                 "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["mode"] == "disagg" and data["requests"] == 3 and data["gpus_prefill"] == 1
