"""`pdtune validate --latency-model simulated` (issue 23, item 2): every row run as its benchmark in pdtune.sim.

A handful of real rows, each a few dozen simulated requests: the held-out InferenceX MiniMax-M2.5 runs at ISL 1,024
(three files, concurrency 4, 8, 16) from the command line, and aiconfigurator's silicon rows through
``validate_rows`` with two rows the model cannot predict added. What must hold on every row: the tails are ordered
(p99 >= p90 >= p50, TTFT and TPOT), the row names its latency model, and no row is dropped.
"""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from pdtune.cli import main
from pdtune.gpus import load_gpu
from pdtune.model import load_model
from pdtune.paths import clusters_dir
from pdtune.perfmodel.defaults import gpu_defaults
from pdtune.perfmodel.validation import TAILS, validate_rows
from pdtune.results import load_results

_HELD_OUT = clusters_dir() / "inferencex-h200-isl-sweep" / "minimax-m2.5" / "results"
FILES = [str(_HELD_OUT / f"minimax_m25_vllm_tep8_isl1024_osl128_conc{c}.json") for c in (4, 8, 16)]
SILICON = clusters_dir() / "aiconfigurator-silicon" / "silicon_sample.csv"


def _ordered(point: dict) -> None:
    for metric in ("ttft", "tpot"):
        p50, p90, p99 = (point[f"predicted_{metric}_ms_p{p}"] for p in (50, 90, 99))
        assert 0 < p50 <= p90 <= p99, (metric, p50, p90, p99)


def test_validate_simulated_from_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["validate", *FILES, "--model", "minimax-m2.5", "--gpu", "h200", "--topology", "TEP8",
            "--latency-model", "simulated", "--harness", "inferencex", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["rows_used"] == out["rows_predicted"] == out["rows_scored"] == 3 and not out["unpredicted"]
    assert out["latency_models"] == {"simulated": 3}
    for point in out["points"]:
        assert point["latency_model"] == "simulated" and point["harness"] == "inferencex"
        _ordered(point)
    # A closed loop of C clients with a fixed OSL: more clients, more requests queued behind a prefill.
    ttft = {p["concurrency"]: p["predicted_ttft_ms_p50"] for p in out["points"]}
    assert ttft[4] < ttft[16]
    # The text names the model per row; --harness without the simulation is refused in one line.
    assert main(argv[:-1]) == 0
    text = capsys.readouterr().out
    assert "latency model: simulated (3 rows); simulated harness: inferencex" in text
    assert main(["validate", *FILES, "--model", "minimax-m2.5", "--gpu", "h200", "--topology", "TEP8",
                 "--harness", "inferencex"]) == 2
    assert "--harness" in capsys.readouterr().err


def test_simulated_rows_are_conserved_and_tails_ordered() -> None:
    df = load_results(str(SILICON))
    rows = df[(df["model"].str.contains("Llama-3.1-70B", case=False)) & (df["gpu"] == "h200")
              & (df["mode"] == "agg") & (df["concurrency"] <= 8) & (df["backend"] == "vllm")].head(4)
    assert len(rows) == 4
    # Two rows the model cannot predict: no topology, and one pdtune cannot read.
    bad = rows.head(2).copy()
    bad.index = [10_000_001, 10_000_002]
    bad.loc[10_000_001, "topology"] = None
    bad.loc[10_000_002, "topology"] = "TP8Q9"
    rows = pd.concat([rows, bad])
    spec, gpu, eff = load_model("llama-3.1-70b"), load_gpu("h200"), gpu_defaults("h200").efficiency
    sim = validate_rows(rows, spec, gpu, eff, latency_model="simulated")
    steady = validate_rows(rows, spec, gpu, eff)
    assert len(sim) == len(steady) == len(rows) and list(sim["row"]) == list(rows.index)
    assert sim["predicted"].sum() == steady["predicted"].sum() == 4
    assert set(sim.loc[sim["predicted"], "latency_model"]) == {"simulated"}
    assert set(steady["latency_model"]) == {"steady-state"}
    # the silicon file's assumed harness (InferenceX's grid, run as sa-bench: perfmodel/simulated.SILICON_HARNESS)
    assert set(sim.loc[sim["predicted"], "harness"]) == {"sa-bench"}
    # its TTFT and TPOT are the benchmark's means, so the simulated requests' means are what is compared
    assert set(sim["statistic"]) == {"mean"}
    for point in sim[sim["predicted"]].to_dict("records"):
        for metric in ("ttft", "tpot"):
            assert 0 < point[f"predicted_{metric}_ms_p90"] <= point[f"predicted_{metric}_ms_p99"]
    engine_rows = rows.head(1)
    one = validate_rows(engine_rows, spec, gpu, eff, latency_model="simulated").iloc[0]
    from pdtune.perfmodel.simulated import simulate_point
    from pdtune.perfmodel.validation import EngineCache, cached_engine, row_setup, sim_config
    r = engine_rows.iloc[0]
    setup = row_setup(r, spec)
    engine = cached_engine(EngineCache(), setup, gpu, int(r["isl"]), int(r["osl"]))
    # The server as InferenceX's script launched it (launch_flags.csv): prefix caching off among others.
    assert sim_config(setup) is not None and sim_config(setup).enable_prefix_caching is False
    point, _ = simulate_point(engine, int(r["isl"]), int(r["osl"]), int(r["concurrency"]), eff, harness="sa-bench",
                              config=sim_config(setup))
    assert one["predicted_ttft_ms_p50"] == pytest.approx(point.stats["ttft_ms_mean"])
    assert one["predicted_tpot_ms_p50"] == pytest.approx(point.stats["tpot_ms_mean"])
    # a source that reports medians is compared with the simulated medians, whose tails are ordered
    medians = rows.head(4).assign(source="vllm-bench")
    by_median = validate_rows(medians, spec, gpu, eff, latency_model="simulated")
    assert set(by_median["statistic"]) == {"p50"}
    for point in by_median[by_median["predicted"]].to_dict("records"):
        _ordered(point)
    # The steady-state model has no spread: its tails are its median.
    for point in steady[steady["predicted"]].to_dict("records"):
        assert all(point[f"predicted_{t}"] == point[f"predicted_{t.split('_ms_')[0]}_ms_p50"] for t in TAILS)
    # In worker processes (one per deployment: the unreadable topologies are deployments of their own), the same
    # table in the same order.
    pd.testing.assert_frame_equal(validate_rows(rows, spec, gpu, eff, latency_model="simulated", jobs=2), sim)
    unpredicted = sim[~sim["predicted"]]
    assert list(unpredicted["row"]) == [10_000_001, 10_000_002]
    assert unpredicted["reason"].str.len().gt(0).all()
    assert all(math.isnan(v) for v in unpredicted["predicted_ttft_ms_p50"])


def test_predict_simulated_names_its_latency_model(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["predict", "llama-3.1-8b", "--gpu", "h100", "--topology", "TP1", "--mode", "agg", "--isl", "1024",
            "--osl", "128", "--concurrency", "4,32", "--latency-model", "simulated", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["latency_model"] == "simulated" and out["harness"] == "vllm-bench"
    assert [p["concurrency"] for p in out["predictions"]] == [4, 32]
    for p in out["predictions"]:
        assert p["latency_model"] == "simulated" and p["harness"] == "vllm-bench"
        for metric in ("ttft", "tpot"):
            assert 0 < p[f"{metric}_ms"] <= p[f"{metric}_ms_p90"] <= p[f"{metric}_ms_p99"]
    # A prefill-only sweep has no simulated harness: refused in one line, nothing printed.
    assert main(["predict", "llama-3.1-8b", "--gpu", "h100", "--topology", "TP1", "--mode", "prefill",
                 "--latency-model", "simulated"]) == 2
    captured = capsys.readouterr()
    assert "--latency-model" in captured.err and captured.out == ""
