"""Chapter 8's numbers: the scorecard file, what the chapter module computes from it, and the measured frontier.

The scorecard (data/perfmodel/validation/heldout.csv) is written by ``python -m pdtune.scorecard`` (``make
validation``, which recomputes all of it: minutes of fitting); one fold of one model x GPU is recomputed here and
compared, so a change to pdtune.perfmodel that moves a prediction fails here until the file is regenerated.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pdtune.chapters import frontier as ch7
from pdtune.chapters import trust as ch8
from pdtune.perfmodel.defaults import silicon_file
from pdtune.perfmodel.validation import model_key
from pdtune.results import load_results
from pdtune.scorecard import MODELS, check_fold, load_scorecard, peer_estimates, with_peer


@pytest.fixture(scope="module")
def card() -> ch8.Scorecard:
    return ch8.scorecard()


@pytest.fixture(scope="module")
def silicon() -> pd.DataFrame:
    return load_results(silicon_file())


def test_every_fitted_model_is_scored_and_every_measurement_once(silicon: pd.DataFrame) -> None:
    """No row is dropped and none counts twice: the scorecard has one line per distinct measurement of every model
    whose rows enter a fit of the defaults, on the GPUs the defaults are fitted for (counted from the CSV
    independently), and repeats.csv lists each row folded as a repeat, with the kept row it repeats."""
    from pdtune.perfmodel.defaults import silicon_problems
    from pdtune.scorecard import repeats

    rows = silicon[(silicon["backend"] == "vllm") & (silicon["mode"] == "agg")
                   & silicon["model"].map(model_key).isin(MODELS) & silicon["gpu"].isin(["h100", "h200", "b200",
                                                                                         "b300"])]
    assert set(MODELS) == {m for m, _ in silicon_problems(silicon)}  # every model a fit uses, and only those
    table, folded = load_scorecard(), repeats()
    assert len(rows) == 1307 and len(folded) == 245 and len(table) == 1307 - 245
    assert sorted(table["source_id"]) == sorted(set(rows["source_id"]) - set(folded["source_id"]))
    assert set(folded["repeat_of"]) <= set(table["source_id"])
    assert set(table["model_key"]) == set(MODELS)
    assert len(table[table["model_key"] == "qwen3-235b-a22b-fp8"]) == 51
    unpredicted = table[~table["predicted"]]
    assert unpredicted["reason"].notna().all()  # every row the model cannot predict says why


def test_the_validation_table_is_the_median_of_the_rows(card: ch8.Scorecard) -> None:
    table = ch8.validation_table(card).set_index(["model", "gpu"])
    r = card.rows[card.rows["predicted"]]
    for (model, gpu), frame in [*r.groupby(["model_key", "gpu_name"]), (("all", "all"), r)]:
        errors = (frame["lomo_tpot_ms_p50"] / frame["measured_tpot_ms_p50"] - 1).abs() * 100
        assert table.loc[(model, gpu), "tpot_median_error_pct"] == pytest.approx(float(np.median(errors)))
        assert table.loc[(model, gpu), "tpot_p90_error_pct"] == pytest.approx(float(np.percentile(errors, 90)))
    assert int(table.loc[("all", "all"), "rows"]) == len(card.rows)
    h = ch8.headline(card)
    assert h["lomo-tpot-median"] == pytest.approx(table.loc[("all", "all"), "tpot_median_error_pct"])
    assert h["rows"] == h["predicted"] + h["unpredicted"]


def test_regimes_count_every_row_once(card: ch8.Scorecard) -> None:
    for regime in ch8.REGIMES:
        table = ch8.regime_table(card, regime)
        assert int(table["rows"].sum()) == len(card.rows), regime
        assert ch8.worst_sentence(table, regime).startswith("By ")


def test_calibrated_scores_are_held_out_and_the_rest_counted(card: ch8.Scorecard) -> None:
    r = card.rows
    cal = ch8.calibration_table(card).set_index(["model", "gpu"])
    missing = ch8.uncalibrated_reasons(card)
    assert int(cal.loc[("all", "all"), "calibrated_rows"]) + int(missing["rows"].sum()) == int(r["predicted"].sum())
    # folds hold out whole deployments: every deployment has one fold
    assert (r.groupby(["model_key", "gpu_name", "deployment"])["fold"].nunique() == 1).all()


def test_the_peer_comparison_uses_the_same_rows_and_counts_the_rest(card: ch8.Scorecard) -> None:
    peer = peer_estimates()
    # The cached estimates cover every scored row (qwen3-235b-a22b-fp8's 51 since 2026-12-06: 32 estimated, 19
    # refused by aiconfigurator); a row without an estimate would count as aiconfigurator's "missing".
    mine = set(card.rows["source_id"])
    assert mine <= set(peer["source_id"])
    qwen = card.rows[card.rows["model_key"] == "qwen3-235b-a22b-fp8"]
    assert len(qwen) == 51 and (qwen["aic_status"] == "ok").sum() == 32 and (qwen["aic_status"] == "error").sum() == 19
    dropped = card.rows["source_id"].iloc[0]
    gap = with_peer(card.rows.drop(columns=[c for c in card.rows if c.startswith("aic_")]),
                    peer[peer["source_id"] != dropped])
    assert (gap.loc[gap["source_id"] == dropped, "aic_status"] == "missing").all()
    table = ch8.peer_table(card).set_index(["model", "gpu"])
    both = ch8.both_mask(card)
    assert int(table.loc[("all", "all"), "both_predicted"]) == int(both.sum())
    unpredicted = ch8.unpredicted_table(card)
    by_tool = unpredicted.groupby("tool")["rows"].sum()
    assert int(by_tool.get("pdtune", 0)) == int((~card.rows["predicted"]).sum())
    assert int(by_tool.get(ch8.PEER, 0)) == int((card.rows["aic_status"] != "ok").sum()) > 0
    n = ch8.peer_numbers(card)
    sel = card.rows[both]
    aic = (sel["aic_tpot_ms_p50"] / sel["measured_tpot_ms_p50"] - 1).abs() * 100
    assert n["aic-tpot-median"] == pytest.approx(float(np.median(aic)))


@pytest.mark.parametrize(("model", "gpu", "covered"), [
    ("llama-3.1-70b", "h200", "cover llama-3.1-70b on H200: 60 rows"),
    ("qwen3.8-2.4t", "gb300", "have no vLLM rows of qwen3.8-2.4t"),
    ("qwen3-235b-a22b", "h200", "have no vLLM rows of qwen3-235b-a22b"),
    ("gpt-oss-120b", "gb300", "not on GB300"),
])
def test_your_model_says_whether_the_measurements_cover_it(card: ch8.Scorecard, model: str, gpu: str,
                                                             covered: str) -> None:
    text, table = ch8.your_model(card, model, gpu)
    assert covered in text


@pytest.mark.parametrize(("model", "nearest"), [
    # MLA and MoE like Kimi-K2.5 (the Kimi-K2-like config of issue 21 and DeepSeek-V3 both)
    (str(Path(__file__).parent / "fixtures" / "models" / "kimi-k2-like"), "kimi-k2.5"),
    ("deepseek-v3", "kimi-k2.5"),
    # per-head attention MoE: Qwen3-235B-A22B is the FP8 checkpoint's own architecture, 235 B parameters
    ("qwen3-235b-a22b", "qwen3-235b-a22b-fp8"),
    ("llama-3.1-8b", "qwen3-32b"),  # dense, per-head attention: the nearest size of the dense ones
])
def test_a_model_the_measurements_lack_opens_on_the_nearest_they_hold(card: ch8.Scorecard, model: str,
                                                                    nearest: str) -> None:
    """Issue 21: chapter 8 opens on the nearest model in the data (a Kimi-K2-like set read llama-3.1-70b on
    H200 though Kimi-K2.5 on B200 is in it): same attention, MoE or dense, recurrent state, then size."""
    text, table = ch8.your_model(card, model, "b200")
    assert "have no vLLM rows of" in text and f"The nearest model they hold is {nearest} (" in text
    assert set(table["model"]) == {nearest} and (table["rows"] > 0).all()


def test_sweeps_for_chapters_5_and_6_pair_measured_and_modeled() -> None:
    cases = ch8.sweep_cases()
    # Every row is drawn; the rows the model did not predict (gpt-oss-120b H100's client with --max-concurrency
    # 512, launch_flags.csv) have a measured point and no modeled one.
    assert cases["measured_tpot_ms_p50"].notna().all()
    unmodeled = cases[cases["modeled_tpot_ms_p50"].isna()]
    assert len(unmodeled) == 9 and set(unmodeled["concurrency"]) == {512} and set(unmodeled["model"]) == {"gpt-oss-120b"}
    case, own = ch8.default_case(cases, "llama-3.1-70b", "h200")
    assert own and case.startswith("llama-3.1-70b on H200")
    case, own = ch8.default_case(cases, "qwen3.8-2.4t", "gb300")
    assert not own and "no real vLLM measurements of qwen3.8-2.4t" in ch8.sweep_note(cases, "qwen3.8-2.4t",
                                                                                       "gb300", "TTFT")
    # the models the issue names, each across more than one TP size
    for model in ("llama-3.1-70b", "gpt-oss-120b", "minimax-m2.5", "kimi-k2.5"):
        assert cases[cases["model"] == model]["topology"].nunique() > 1, model


def test_the_measured_frontier_keeps_every_row_and_its_ratios() -> None:
    sf = ch7.silicon_frontier()
    assert len(sf.points) == 17  # every vLLM disaggregated row of the silicon file (its README: 17)
    table = ch7.silicon_frontier_table(sf)
    assert len(table) and (table["tps_per_gpu_ratio"] == table["predicted_tps_per_gpu"]
                           / table["measured_tps_per_gpu"]).all()
    assert "kimi-k2.5 on GB200" in set(table["run_on"])
    # a frontier point is measured: no other measured row of its model, GPU and ISL/OSL dominates it
    pts = sf.points.assign(x=1000 / sf.points["measured_tpot_ms_p50"], y=sf.points["measured_tps_per_gpu"])
    for r in sf.frontier.itertuples():
        same = pts[(pts["model"] == r.model) & (pts["gpu"] == r.gpu) & (pts["isl"] == r.isl) & (pts["osl"] == r.osl)]
        x, y = 1000 / r.measured_tpot_ms_p50, r.measured_tps_per_gpu
        assert not ((same["x"] >= x) & (same["y"] >= y) & ((same["x"] > x) | (same["y"] > y))).any()
    assert "times the measured" in ch7.silicon_frontier_sentence(sf)


def test_the_inferencex_throughput_end_is_reported() -> None:
    real = ch7.inferencex_points()
    end = real.throughput_end
    top = real.check["measured_tps_per_gpu"].max()
    assert end["measured"] == pytest.approx(top)
    assert math.isclose(end["error"], end["predicted"] / end["measured"] - 1, rel_tol=1e-9)
    assert end["concurrency"] == int(real.check.loc[real.check["measured_tps_per_gpu"].idxmax(), "concurrency"])


def test_charts_that_mix_measured_and_modeled_label_both() -> None:
    from test_honest_labels import chart_problems

    from pdtune.charts.trust import frontier_compare_chart, parity_chart, sweep_compare_chart

    cases = ch8.sweep_cases()
    sf = ch7.silicon_frontier()
    charts = [sweep_compare_chart(cases, "tpot_ms_p50", case=cases["case"].iloc[0]),
              parity_chart(ch8.scorecard().lomo),
              frontier_compare_chart(sf.points, sf.frontier, sf.predicted_frontier)]
    for chart in charts:
        spec = chart.to_dict()
        subtitle = spec["title"]["subtitle"]
        assert any(s.startswith("Measured —") for s in subtitle) and any(s.startswith("Modeled —") for s in subtitle)
        assert chart_problems(spec, "chart") == []


#: The fold recomputed by the test suite: Llama-3.1-70B on H100 (45 rows, a dense model on Hopper), fold 0 (15 rows
#: of one deployment in three, calibrated on the other 30). ``make validation`` recomputes every row of every fold,
#: and the leave-one-model-out fits behind them (minutes).
FOLD = ("llama-3.1-70b", "h100", 0)


def test_one_fold_recomputed_is_the_shipped_scorecard() -> None:
    """Drift caught in seconds: every Llama-3.1-70B row on H100 predicted again with the shipped leave-one-model-out
    factors, and fold 0's rows calibrated again on the other folds, equal the shipped scorecard to 1e-4."""
    problems = check_fold(*FOLD)
    assert problems == [], "regenerate with `make validation` (python -m pdtune.scorecard):\n" + "\n".join(problems)
    rows = load_scorecard()
    mine = rows[(rows["model_key"] == FOLD[0]) & (rows["gpu_name"] == FOLD[1])]
    assert len(mine) == 45 and (mine["fold"] == FOLD[2]).sum() == 15 and mine["calibrated_ttft_ms_p50"].notna().all()


def test_the_scorecard_check_sees_a_moved_prediction() -> None:
    """The comparison the slow test makes: equal to itself after the CSV round trip, and not once a
    prediction moves by 1 % or a text cell changes."""
    from pdtune.scorecard import _reread, differences, scorecard_file

    shipped = pd.read_csv(scorecard_file())
    assert differences(_reread(shipped.copy()), shipped) == []
    moved = shipped.copy()
    moved.loc[3, "lomo_tpot_ms_p50"] *= 1.01
    moved.loc[5, "topology"] = "TP16"
    found = differences(moved, shipped)
    assert [p.split(":")[0] for p in found] == ["topology", "lomo_tpot_ms_p50"]
    assert differences(shipped.iloc[:-1], shipped) == [f"{len(shipped) - 1} rows recomputed, {len(shipped)} shipped"]


def test_the_largest_miss_says_what_calibration_removes(card: ch8.Scorecard) -> None:
    """Issue 21: the sentence said the miss "is in the fitted factors, which calibration moves" when calibration
    took Kimi-K2.5 on B200 only from 35 % to 28 %; now it says which, from the two medians of the table."""
    table = ch8.calibration_table(card)
    table = table[table["model"] != "all"].dropna(subset=["uncalibrated_ttft_median_error_pct"])
    r = table.loc[table["uncalibrated_ttft_median_error_pct"].idxmax()]
    text = ch8.largest_miss_sentence(card)
    removed = 1 - r["calibrated_ttft_median_error_pct"] / r["uncalibrated_ttft_median_error_pct"]
    if removed >= 0.5:
        assert "most of the miss is in the fitted factors" in text
    else:
        assert f"{removed * 100:.0f} % of the miss removed" in text and "structure of the model" in text
