"""`pdtune validate`, `pdtune calibrate` and `pdtune predict --mode agg` from the command line, good and bad input."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import yaml

from pdtune.cli import main
from pdtune.paths import clusters_dir

SILICON = clusters_dir() / "aiconfigurator-silicon" / "silicon_sample.csv"
_HELD_OUT = clusters_dir() / "inferencex-h200-isl-sweep" / "minimax-m2.5" / "results"
HELD_OUT_TEP8 = sorted(str(p) for p in _HELD_OUT.glob("minimax_m25_vllm_tep8_*.json"))
HELD_OUT_TEP8_SMALL = sorted(str(p) for isl in (1024, 2048, 4096)
                             for p in _HELD_OUT.glob(f"minimax_m25_vllm_tep8_isl{isl}_osl128_*.json"))


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_validate_marks_the_rows_the_defaults_were_fitted_on(capsys: pytest.CaptureFixture[str]) -> None:
    # The shipped H200 defaults were fitted on every distinct gpt-oss-120b H200 row of the silicon sample: each
    # row says so, none is scored, the in-sample share is printed, and a repeated row counts once.
    out = _json(capsys, ["validate", str(SILICON), "--model", "gpt-oss-120b", "--gpu", "h200", "--json"])
    assert out["rows_used"] == 75 and out["rows_predicted"] == 75 and not out["unpredicted"]
    assert out["rows_repeated"] == 15 and out["rows_fitted_on"] == 60 and out["in_sample_share"] == 1.0
    assert out["points"] == [] and out["rows_scored"] == 0
    assert len(out["fitted_on"]) == 75 and all(r["fitted"] and r["in_sample"] for r in out["fitted_on"])
    assert all(v is None for v in out["median_abs_pct_error"].values())
    assert 0 < out["in_sample_median_abs_pct_error"]["tpot_ms_p50"] < 100
    # every other row is counted with its reason: other models, other GPUs, other backends
    skipped = out["rows_skipped"]
    assert sum(skipped.values()) == 5221 - 75
    assert any("served by trtllm" in k for k in skipped) and any("another GPU" in k for k in skipped)
    assert main(["validate", str(SILICON), "--model", "gpt-oss-120b", "--gpu", "h200"]) == 0
    text = capsys.readouterr().out
    assert "in-sample: 60 of 60 predicted measurements (100 %)" in text and "counted once" in text


def test_validate_reports_how_far_apart_runs_of_one_point_are(capsys: pytest.CaptureFixture[str]) -> None:
    # MiniMax-M2.5 on B200 was measured more than once at many points (pdtune.perfmodel.replicates): every
    # distinct run with another run of its deployment, ISL, OSL and concurrency is counted, a repeat of another
    # row's measurement is not a run, and none is scored here (the B200 defaults were fitted on them all).
    out = _json(capsys, ["validate", str(SILICON), "--model", "minimax-m2.5", "--gpu", "b200", "--json"])
    runs = [r for r in out["fitted_on"] if r["repeat_of"] is None]
    points = Counter((r["deployment"], r["isl"], r["osl"], r["concurrency"]) for r in runs)
    by_level = {r["level"]: r for r in out["replicates"]}
    assert set(by_level) == {"deployment", "deployment and vLLM version", "deployment and launch script"}
    # Every row's server is the one its InferenceX script launched (launch_flags.csv), none on vLLM's defaults;
    # runs launched by one script version agree better again than runs on one vLLM version.
    assert sum(out["servers"].values()) == out["rows_used"] and "vLLM's defaults" not in out["servers"]
    script = by_level["deployment and launch script"]
    assert 0 < script["rows"] <= by_level["deployment and vLLM version"]["rows"]
    assert script["ttft_replicate_p90"] < by_level["deployment and vLLM version"]["ttft_replicate_p90"]
    deployment = by_level["deployment"]
    assert deployment["rows"] == sum(n for n in points.values() if n > 1) > 0
    assert deployment["points"] == sum(1 for n in points.values() if n > 1)
    assert deployment["predicted_rows"] == 0 and deployment["ttft_predicted_median"] is None
    assert 0 < by_level["deployment and vLLM version"]["rows"] <= deployment["rows"]
    # fp8 TP2 at 8,192/1,024 and 64 clients: 3,384 ms on vLLM 0.17.0, 831-915 ms over three runs on 0.19.0; within
    # one version the runs agree far better than across versions.
    assert by_level["deployment and vLLM version"]["ttft_replicate_p90"] < deployment["ttft_replicate_p90"]
    assert main(["validate", str(SILICON), "--model", "minimax-m2.5", "--gpu", "b200"]) == 0
    text = capsys.readouterr().out
    assert f"runs of one point (deployment): {deployment['rows']} rows of {deployment['points']} points" in text
    assert (f"servers as launched: {out['rows_used']} rows by {len(out['servers'])} versions of their launch "
            "scripts") in text and "0 on vLLM's defaults" in text
    assert "none of them is scored" in text


def test_validate_scores_rows_nothing_was_fitted_on(capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(capsys, ["validate", *HELD_OUT_TEP8, "--model", "minimax-m2.5", "--gpu", "h200", "--topology",
                         "TEP8", "--json"])
    assert out["rows_used"] == out["rows_predicted"] == out["rows_scored"] == len(HELD_OUT_TEP8)
    assert out["rows_fitted_on"] == 0 and out["in_sample_share"] == 0.0
    for key in ("median_abs_pct_error", "p90_abs_pct_error"):
        assert set(out[key]) == {"ttft_ms_p50", "tpot_ms_p50", "tps_per_gpu"}
    [group] = out["by_model_gpu_mode"]
    assert (group["model"], group["gpu"], group["mode"], group["points"]) == ("MiniMaxAI/MiniMax-M2.5", "h200", "agg",
                                                                              len(HELD_OUT_TEP8))
    point = out["points"][0]
    assert point["path"].endswith(".json") and not point["fitted"]
    assert point["measured_tpot_ms_p50"] > 0 and point["predicted_tpot_ms_p50"] > 0
    assert point["tpot_ms_p50_error"] == pytest.approx(
        point["predicted_tpot_ms_p50"] / point["measured_tpot_ms_p50"] - 1)


def test_one_deployment_split_by_isl_is_calibrated_and_scored(capsys: pytest.CaptureFixture[str],
                                                               tmp_path: Path) -> None:
    # One deployment (MiniMax-M2.5 TEP8 on 8 H200, three ISLs): held out by deployment nothing is left to score;
    # held out by ISL, the fit never sees one ISL and validate scores exactly those rows.
    args = [*HELD_OUT_TEP8_SMALL, "--model", "minimax-m2.5", "--gpu", "h200", "--topology", "TEP8"]
    cal = tmp_path / "by-deployment.yaml"
    assert main(["calibrate", *args, "--out", str(cal)]) == 0
    assert "nothing held out" in capsys.readouterr().out
    out = _json(capsys, ["validate", *args, "--calibration", str(cal), "--json"])
    assert out["rows_scored"] == 0 and out["rows_fitted_on"] == len(HELD_OUT_TEP8_SMALL)
    cal = tmp_path / "by-isl.yaml"
    assert main(["calibrate", *args, "--holdout-by", "isl", "--out", str(cal)]) == 0
    capsys.readouterr()
    doc = yaml.safe_load(cal.read_text())
    assert doc["holdout_by"] == "isl" and len(doc["held_out"]["groups"]) == 1
    [held] = doc["held_out"]["groups"]
    out = _json(capsys, ["validate", *args, "--calibration", str(cal), "--json"])
    assert out["rows_scored"] == doc["held_out"]["rows"] > 0
    assert {f"isl {p['isl']}" for p in out["points"]} == {held}
    assert out["rows_fitted_on"] == doc["fitted_on"]["rows"] == len(HELD_OUT_TEP8_SMALL) - out["rows_scored"]
    assert all(f"isl {r['isl']}" != held for r in out["fitted_on"])


def test_validate_text_names_rows_and_precision(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["validate", str(SILICON), "--model", "llama-3.1-70b", "--gpu", "h100", "--topology", "TP8"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "15 rows used, 15 predicted" in text and "topology TP4, not TP8" in text
    assert "MODELED" in text and "MEASURED" in text


def test_calibrate_then_predict_and_validate(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cal = tmp_path / "gpt-oss-h200.yaml"
    argv = ["calibrate", str(SILICON), "--model", "gpt-oss-120b", "--gpu", "h200", "--topology", "TP4",
            "--out", str(cal)]
    # one deployment only: nothing to hold out, said so
    assert main(argv) == 0
    assert "nothing held out" in capsys.readouterr().out
    assert main(["calibrate", str(SILICON), "--model", "gpt-oss-120b", "--gpu", "h200", "--out", str(cal)]) == 0
    capsys.readouterr()
    doc = yaml.safe_load(cal.read_text())
    assert doc["model"] == "gpt-oss-120b" and doc["gpu"] == "h200" and doc["held_out"]["deployments"]
    assert set(doc["held_out"]["median_abs_pct_error"]) == {"ttft_ms_p50", "tpot_ms_p50", "tps_per_gpu"}
    out = _json(capsys, ["validate", str(SILICON), "--model", "gpt-oss-120b", "--gpu", "h200", "--calibration",
                         str(cal), "--json"])
    assert out["rows_fitted_on"] == doc["fitted_on"]["rows"]
    assert {p["deployment"] for p in out["points"]} <= set(doc["held_out"]["deployments"])
    pred = _json(capsys, ["predict", "gpt-oss-120b", "--gpu", "h200", "--topology", "TP2", "--mode", "agg",
                          "--calibration", str(cal), "--concurrency", "8", "--json"])
    assert pred["efficiency"] == doc["factors"] and pred["predictions"][0]["mode"] == "agg"


def test_predict_agg_rises_with_concurrency(capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(capsys, ["predict", "llama-3.1-70b", "--gpu", "h100", "--topology", "TP4", "--mode", "agg",
                         "--weights-dtype", "fp8", "--concurrency", "1,16,64", "--json"])
    preds = out["predictions"]
    assert out["weights"] == "fp8" and out["modeled"] is True
    assert [p["ttft_ms"] for p in preds] == sorted(p["ttft_ms"] for p in preds)
    assert [p["tps_per_gpu"] for p in preds] == sorted(p["tps_per_gpu"] for p in preds)


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["validate", str(SILICON), "--model", "gpt-oss-120b", "--gpu", "h200", "--gpus", "8", "--topology", "TP4"],
         "topology"),
        (["validate", str(SILICON), "--model", "gpt-oss-120b", "--gpu", "a800"], "gpu"),
        (["validate", str(SILICON), "--model", "deepseek-v3", "--gpu", "h200"], "model"),
        (["predict", "gpt-oss-120b", "--gpu", "h200", "--topology", "TP2", "--mode", "agg", "--weights-dtype",
          "fp6"], "weights"),
        (["predict", "gpt-oss-120b", "--gpu", "h200", "--topology", "TP2", "--mode", "agg", "--weights", "fp6"],
         "weights"),
        (["memory", "--model", "gpt-oss-120b", "--topology", "TP2", "--gpu", "h200", "--weights", "fp6"], "weights"),
        (["plan", "gpt-oss-120b", "--gpu", "h200", "--max-gpus", "8", "--isl", "1024", "--osl", "1024", "--weights",
          "fp6"], "weights"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], field: str
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f": {field}:" in err, err


def test_a_calibration_of_another_model_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cal = tmp_path / "other.yaml"
    cal.write_text(yaml.safe_dump({"pdtune_calibration": 1, "model": "llama-3.1-70b", "gpu": "h200",
                                   "factors": {"compute": 0.5}}))
    for argv in (["validate", str(SILICON), "--model", "gpt-oss-120b", "--gpu", "h200", "--calibration", str(cal)],
                 ["predict", "gpt-oss-120b", "--gpu", "h200", "--topology", "TP2", "--mode", "agg",
                  "--calibration", str(cal)]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and str(cal) in err and ": model:" in err, err


def test_dataset_generate_takes_a_calibration_of_its_model(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cal = tmp_path / "cal.yaml"
    cal.write_text(yaml.safe_dump({"pdtune_calibration": 1, "model": "llama-3.1-70b", "gpu": "gb300",
                                   "factors": {"compute": 0.4}}))
    assert main(["dataset", "generate", "--calibration", str(cal)]) == 2  # the committed copy stays the article's
    assert ": out:" in capsys.readouterr().err
    assert main(["dataset", "generate", "--calibration", str(cal), "--out", str(tmp_path / "ds")]) == 2
    err = capsys.readouterr().err
    assert str(cal) in err and ": model:" in err and not (tmp_path / "ds").exists()


def test_measured_disaggregated_frontier_with_ratios() -> None:
    # aiconfigurator's vLLM disaggregated Kimi-K2.5 rows on GB200: the measured frontier, each point's prediction
    # beside it as predicted / measured.
    from pdtune.gpus import load_gpu
    from pdtune.model import load_model
    from pdtune.perfmodel.defaults import gpu_defaults
    from pdtune.perfmodel.validation import measured_frontier, select_rows, validate_rows
    from pdtune.results import load_results

    sel = select_rows(load_results(SILICON), "kimi-k2.5", "gb200")
    assert sel.used == 14 and set(sel.rows["mode"]) == {"disagg"}
    points = validate_rows(sel.rows, load_model("kimi-k2.5"), load_gpu("gb200"), gpu_defaults("gb200").efficiency)
    front = measured_frontier(points)
    assert 0 < len(front) <= 14
    for _, group in front.groupby(["isl", "osl"]):
        x, y = group["measured_tps_per_user"].to_numpy(), group["measured_tps_per_gpu"].to_numpy()
        assert all((x[i] < x[i + 1]) and (y[i] > y[i + 1]) for i in range(len(x) - 1))  # none dominates another
    assert front["tps_per_gpu_ratio"].to_numpy() == pytest.approx(
        (front["predicted_tps_per_gpu"] / front["measured_tps_per_gpu"]).to_numpy())


def test_error_table_by_regime() -> None:
    import pandas as pd

    from pdtune.perfmodel.validation import error_table

    points = pd.DataFrame({
        "topology": ["TP1", "TP1", "TP2", "TP2"], "predicted": [True, True, True, False],
        "ttft_ms_p50_error": [0.1, -0.3, 0.2, float("nan")], "tpot_ms_p50_error": [0.0, 0.1, -0.05, float("nan")],
        "tps_per_gpu_error": [0.0, 0.0, 0.0, float("nan")],
    })
    table = error_table(points, ["topology"]).set_index("topology")
    assert table.loc["TP1", "ttft_ms_p50_median"] == pytest.approx(20.0)  # median of 10 % and 30 %
    assert (table.loc["TP2", "rows"], table.loc["TP2", "predicted"]) == (2, 1)
    assert table.loc["TP2", "tpot_ms_p50_median"] == pytest.approx(5.0)
