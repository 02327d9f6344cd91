"""Chapters 5-7's frames (pdtune.chapters.prefill, .decode, .frontier) and the rules they show (pdtune.sweep,
pdtune.capacity, pdtune.perfmodel.roofline, pdtune.frontier), checked against the library they wrap, against
brute force, and on the bundled data (modeled GB300 sweeps, InferenceX's measured GB200 points).

The bundled modeled dataset reproduces the article's findings (its README says where, and
``tests/test_dataset.py`` asserts them on the raw files); here the same findings must come out of the
chapter-level functions, and a scenario without sweeps must give empty frames, never an exception.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdtune.capacity import flattens_at, kv_room, topology_capacity
from pdtune.chapters import decode as ch6, display, frontier as ch7, prefill as ch5
from pdtune.frontier import (
    best_per_concurrency,
    envelope_at,
    envelope_steps,
    frontier_matches_brute_force,
    reverse_sla,
    sla,
    sla_pick,
    upper_envelope,
)
from pdtune.gpus import load_gpu
from pdtune.model import load_model
from pdtune.perfmodel import roofline
from pdtune.perfmodel.inferencex import read_points
from pdtune.scenario import Scenario
from pdtune.sweep import Sweep, label, load_sweep

S = Scenario()
SPEC = load_model(S.model)
GPU = load_gpu(S.gpu)
MEMORY = dict(gpu_memory_gib=S.gpu_memory_gib, gpu_memory_utilization=S.gpu_memory_utilization,
              non_torch_gib=S.non_torch_gib, activation_peak_gib=S.activation_peak_gib,
              cudagraph_estimate_gib=S.cudagraph_estimate_gib, kv_cache_dtype=S.kv_cache_dtype, vllm=S.vllm,
              num_speculative_tokens=S.num_speculative_tokens, isl=S.isl, osl=S.osl)


@pytest.fixture(scope="module")
def prefill() -> Sweep:
    return load_sweep("prefill", S.prefill_results, topologies=S.prefill_topologies)


@pytest.fixture(scope="module")
def decode() -> Sweep:
    return load_sweep("decode", S.decode_results, topologies=S.decode_topologies)


@pytest.fixture(scope="module")
def disagg() -> Sweep:
    return load_sweep("disagg", S.disagg_results, canonical=True)


@pytest.fixture(scope="module")
def room(decode: Sweep) -> pd.DataFrame:
    return kv_room(decode, SPEC, **MEMORY)


def _sweep(rows: list[dict], kind: str = "decode") -> Sweep:
    """A hand-made sweep: one row per (topology, mtp, concurrency, tps_per_gpu)."""
    df = pd.DataFrame([{"source": "test", "path": f"t/{i}.json", "mode": kind, "topology": r["topology"],
                        "mtp_tokens": r.get("mtp", 0), "gpus_total": r.get("gpus", 8), "isl": 1, "osl": 1000,
                        "concurrency": r["c"], "tps_per_gpu": float(r["y"]), "tps_per_user": 1.0,
                        "ttft_ms_p50": 10.0, "modeled": False} for i, r in enumerate(rows)])
    return Sweep(kind, ("t",), label(df))


# ------------------------------------------------------------------------------------------ loading


def test_a_scenario_without_results_gives_empty_frames_and_a_note() -> None:
    empty = load_sweep("prefill", [])
    assert not empty.available and "prefill_results" in empty.note and empty.describe() == empty.note
    best = ch5.best_table(empty)
    assert list(best.columns)[:2] == ["concurrency", "best"] and best.empty
    assert ch5.winner_runs(best).empty
    assert set(ch5.findings(empty, ch5.PREFILL_CLAIMS)["verdict"]) == {"no data"}
    for frame in (ch5.prefill_capacity(empty), ch5.peak_capacity(empty), ch5.busy_share(empty),
                  kv_room(empty, SPEC, **MEMORY),
                  ch5.engines_needed(ch5.peak_capacity(empty), 10.0)):
        assert frame.empty and len(frame.columns) > 2
    assert empty.workload is None and empty.workload_or(8192, 1024) == (8192, 1024)
    assert ch6.high_end(empty, kv_room(empty, SPEC, **MEMORY), best).empty
    gate = ch7.gate_summary(load_sweep("disagg", []), 0.95)
    assert gate.kept.empty and gate.sentence == "without a sweep there is nothing to gate."
    assert ch7.envelope(gate.kept).empty and envelope_steps(ch7.envelope(gate.kept)).empty
    assert reverse_sla(gate.kept).empty
    assert sla(gate.kept, 50.0) is None
    assert "no disaggregated sweep" in ch7.pick_sentence(None)


def test_predict_without_isolated_sweeps_says_why(disagg: Sweep) -> None:
    pred = ch7.predict(load_sweep("prefill", []), load_sweep("decode", []), disagg.frame,
                             osl=S.osl)
    assert not pred.available and pred.infeasible == 0
    assert "no prefill-only sweep and no decode-only sweep" in pred.note
    assert ch7.prediction_sentence(pred) == pred.note
    assert ch7.prediction_ends_sentence(pred) == pred.note
    # the clients section: no sweeps, so the note, never "no point of these sweeps is prefill-bound"
    assert ch7.paced_example(pred, load_sweep("decode", []), S.osl) is None
    assert ch7.paced_sentence(pred, None, 0.0, 0.0, 0.0) == pred.note
    # the KV-room check's sentence says there was nothing to check (it said "Of the 0 rate-matched points, the
    # check removes 0")
    assert ch7.check_sentence(pred).startswith("Without both isolated sweeps there are no rate-matched points")


def test_the_modeled_sweeps_load_labelled(prefill: Sweep, decode: Sweep,
                                          disagg: Sweep) -> None:
    assert prefill.workload == (8192, 2) and decode.workload == (1, 1000) and disagg.workload == (8192, 1024)
    assert len(prefill.deployments) == 9 and len(decode.deployments) == 10 and len(disagg.deployments) == 7
    assert prefill.modeled and "MODELED" in prefill.describe()
    assert set(decode.frame.loc[decode.frame["mtp"], "deployment"]) == {d + "+MTP" for d in S.decode_topologies}
    assert (decode.frame["layout"] == decode.frame["deployment"].str.removesuffix("+MTP")).all()
    # canonical names: the article's prefill TEP8 stays TEP8, and no "TP8+EP" appears
    assert "1xTEP8 : 1xTEP8+MTP" in disagg.deployments


def test_topology_filter_reports_both_differences() -> None:
    sweep = load_sweep("prefill", S.prefill_results, topologies=["TEP8", "TP2DP4+EP", "TP3"])
    # TEP8 is the layout the files call TP8+EP
    assert set(sweep.deployments) == {"TP8+EP", "TP2DP4+EP"}
    assert sweep.listed_not_swept == ("TP3",)
    assert "TP16+EP" in sweep.swept_not_listed and "TP3" in sweep.describe()
    nothing = load_sweep("prefill", S.prefill_results, topologies=["TP3"])
    assert not nothing.available and "None of the listed" in nothing.note


# ------------------------------------------------------------------------------------------ who wins where


def test_best_table_is_best_per_concurrency_with_a_runner_up(prefill: Sweep) -> None:
    best = ch5.best_table(prefill)
    ref = best_per_concurrency(prefill.frame)
    assert list(best["best"]) == list(ref["deployment"])
    assert np.allclose(best["tps_per_gpu"], ref["tps_per_gpu"])
    assert (best["runner_up"] != best["best"]).all() and (best["margin"] >= 0).all()
    for row in best.itertuples():
        at = prefill.frame[prefill.frame["concurrency"] == row.concurrency]
        second = at[at["deployment"] != row.best]["tps_per_gpu"].max()
        assert row.runner_up_tps_per_gpu == pytest.approx(second)
    runs = ch5.winner_runs(best)
    assert runs["points"].sum() == len(best)
    assert all(a != b for a, b in zip(runs["best"], runs["best"][1:], strict=False))


def test_the_articles_findings_on_the_modeled_data(prefill: Sweep, decode: Sweep) -> None:
    pre = ch5.findings(prefill, ch5.PREFILL_CLAIMS).set_index("claimed")
    # the dataset README: TP4DP2+EP wins at 2, TP8+EP at 1; TP2DP4+EP from 4 on
    assert pre.loc["TP4DP2+EP", "verdict"] == "partly" and pre.loc["TP4DP2+EP", "wins"] == "1 of 2"
    assert pre.loc["TP2DP4+EP", "verdict"] == "agrees"
    dec = ch5.findings(decode, ch6.DECODE_CLAIMS)
    assert list(dec["verdict"]) == ["agrees", "agrees", "agrees"]
    text = ch5.findings_text(dec, article_data=True, kind="decode")
    assert text.count("so it agrees (2 of 2 concurrencies)") == 3
    assert "not compared" in ch5.findings_text(dec, article_data=False, kind="decode")


def test_findings_verdicts_on_a_small_sweep() -> None:
    rows = []
    for c in (1, 2, 4, 8):
        rows += [{"topology": "TP8+EP", "c": c, "y": 10 * c},
                 {"topology": "TP2DP4+EP", "c": c, "y": 12 * c if c > 2 else 5}]
    sweep = _sweep(rows, "prefill")
    claims = (ch5.Claim("prefill", "TEP8 low", "TEP8", "low"),  # TEP8 is TP8+EP
              ch5.Claim("prefill", "TP2DP4 rising", "TP2DP4+EP", "rising"),
              ch5.Claim("prefill", "TP2DP4 high", "TP2DP4+EP", "high"),
              ch5.Claim("prefill", "TP8 at 3", "TP8+EP", "at", (3,)),
              ch5.Claim("prefill", "TP4 low", "TP4", "low"),
              ch5.Claim("prefill", "TP2DP4 low", "TP2DP4+EP", "low"))
    found = ch5.findings(sweep, claims)
    assert list(found["verdict"]) == ["agrees", "agrees", "agrees", "not swept", "not swept", "disagrees"]
    mixed = _sweep([{"topology": "TP8+EP", "c": 1, "y": 2}, {"topology": "TP4", "c": 1, "y": 1},
                    {"topology": "TP8+EP", "c": 2, "y": 1}, {"topology": "TP4", "c": 2, "y": 2}], "prefill")
    partly = ch5.findings(mixed, (ch5.Claim("prefill", "x", "TP4", "low"),))
    assert partly["verdict"].iloc[0] == "partly" and partly["wins"].iloc[0] == "1 of 2"
    assert "so it agrees in part (1 of 2 concurrencies)" in ch5.findings_text(partly, article_data=True)


@pytest.mark.parametrize(("values", "grid", "text"), [
    ([1, 2], None, "1, 2"),
    ([4, 8, 16, 512, 1024, 1536], [1, 2, 4, 8, 16, 32, 512, 1024, 1536], "4–16, 512–1,536"),
    ([2048, 2560], [1, 2048, 2560], "2,048, 2,560"),
    ([], None, display.MISSING),
])
def test_concurrencies_are_written_as_runs(values, grid, text) -> None:
    assert display.concurrency_list(values, grid) == text


# ------------------------------------------------------------------------------------------ prefill


def test_busy_share_and_saturation(prefill: Sweep) -> None:
    busy = ch5.busy_share(prefill).set_index("deployment")
    assert busy.loc["TP8+EP", "busy_at_1"] == 1.0
    assert busy.loc["TP2DP4+EP", "busy_at_1"] == 0.25 and busy.loc["TP2DP4+EP", "busy_at_4"] == 1.0
    assert busy.loc["TP1PP6+EP", "busy_at_2"] == pytest.approx(2 / 6)
    # in the modeled data every layout reaches its best at the first concurrency that feeds every slot
    f = prefill.frame
    best_at = f.loc[f.groupby("deployment")["tps_per_gpu"].idxmax()].set_index("deployment")["concurrency"]
    grid = sorted(f["concurrency"].unique())
    for dep, row in busy.iterrows():
        slots = row["dp"] * row["pp"]
        assert best_at[dep] == min(c for c in grid if c >= slots), dep


def test_prefill_capacity_is_concurrency_over_ttft(prefill: Sweep) -> None:
    cap = ch5.prefill_capacity(prefill)
    f = prefill.frame
    assert np.allclose(cap["requests_per_s"], f["concurrency"] * 1000 / f["ttft_ms_p50"])
    peak = ch5.peak_capacity(prefill)
    assert len(peak) == 9 and peak["requests_per_s_per_gpu"].is_monotonic_decreasing
    for row in peak.itertuples():
        assert row.requests_per_s == pytest.approx(cap[cap["deployment"] == row.deployment]["requests_per_s"].max())
    need = ch5.engines_needed(peak, 20.0)
    assert (need["delivered_requests_per_s"] >= 20.0).all()
    assert ((need["engines"] - 1) * need["requests_per_s"] < 20.0).all()


def test_prefill_ceiling_bounds_the_sweep(prefill: Sweep) -> None:
    ceiling = roofline.prefill_ceiling(SPEC, GPU, 8192, prefill)
    assert ceiling.ceiling_tps_per_gpu == pytest.approx(1 / sum(ceiling.seconds_per_token.values()))
    assert 0 < ceiling.share < 1
    assert ceiling.frame()["share"].sum() == pytest.approx(1.0)
    longer = roofline.prefill_ceiling(SPEC, GPU, 32768)
    assert longer.ceiling_tps_per_gpu < ceiling.ceiling_tps_per_gpu and longer.best_tps_per_gpu is None


# ------------------------------------------------------------------------------------------ decode


def test_kv_room_is_chapter_4s_capacity(decode: Sweep, room: pd.DataFrame) -> None:
    cap = topology_capacity(SPEC, ["TEP8"], max_model_len=1 + 1000, **{
        k: v for k, v in MEMORY.items() if k not in ("isl", "osl")})
    tep8 = room.set_index("deployment")
    assert tep8.loc["TEP8", "room"] == pytest.approx(cap[~cap["mtp"]]["requests_per_deployment"].iloc[0])
    assert tep8.loc["TEP8+MTP", "room"] == pytest.approx(cap[cap["mtp"]]["requests_per_deployment"].iloc[0])
    assert (room.loc[room["mtp"], "mib_per_request_rank"].to_numpy()
            > room.loc[~room["mtp"], "mib_per_request_rank"].to_numpy()).all()
    # longer requests, fewer of them
    assert (room["room_at_workload"] < room["room"]).all()


def test_every_curve_goes_flat_where_its_room_runs_out(room: pd.DataFrame) -> None:
    inside = room.dropna(subset=["first_swept_above_room"])
    assert len(inside) >= 5
    assert (inside["flattens_at"] == inside["first_swept_above_room"]).all()
    outside = room[room["first_swept_above_room"].isna()]
    assert outside["flattens_at"].isna().all()


def test_flattens_at() -> None:
    assert flattens_at([1, 2, 4, 8], [1, 2, 3, 3]) == 4
    assert math.isnan(flattens_at([1, 2, 4], [1, 2, 3]))
    assert flattens_at([1, 2, 4], [1, 1.005, 1.0]) == 1


def test_high_end_explains_the_winner(decode: Sweep, room: pd.DataFrame) -> None:
    best = ch5.best_table(decode)
    top = ch6.high_end(decode, room, best)
    assert top["deployment"].iloc[0] == best["best"].iloc[-1] == "TP4DP4+EP"
    assert bool(top["holds_all"].iloc[0])
    assert (top["holds_all"] == (top["room"] >= top["concurrency"])).all()
    assert ch6.high_end_sentence(top) == ("At concurrency 2,560 TP4DP4+EP wins, and its KV cache holds every "
                                          "request.")
    assert ch6.high_end_sentence(top.iloc[:0]).startswith("Without a decode sweep")


def test_mtp_effect_splits_at_the_mtp_room(decode: Sweep, room: pd.DataFrame) -> None:
    effect = ch6.mtp_effect(decode, room).set_index("layout")
    assert len(effect) == 5
    assert effect.loc["TEP8", "room_with_mtp"] == pytest.approx(
        room.set_index("deployment").loc["TEP8+MTP", "room"])
    assert effect.loc["TEP8", "median_gain_below"] > 1 > effect.loc["TEP8", "median_gain_above"]
    said = ch6.mtp_text(SPEC, decode, effect.reset_index(), 3, article_data=True)
    gain = effect["median_gain_below"].median()
    assert said.startswith(f"The model predicts a median gain of {gain:.2f} while the KV cache holds")
    assert "MTP helps a lot" in said
    empty = ch6.mtp_effect(load_sweep("decode", []), room)
    assert ch6.mtp_text(SPEC, load_sweep("decode", []), empty, 3, article_data=False).startswith("What MTP buys")
    assert "has no MTP layer" in ch6.mtp_text(load_model("llama-3.1-70b"), decode, effect, 3, article_data=False)


def test_experts_touched() -> None:
    frame = roofline.experts_touched(SPEC, [1, 8, 64, 512, 100_000]).set_index("tokens")
    k, e = SPEC.moe.experts_per_token, SPEC.moe.num_experts
    assert frame.loc[1, "experts_touched"] == pytest.approx(k)
    assert frame["experts_touched"].is_monotonic_increasing
    assert frame.loc[100_000, "share"] == pytest.approx(1.0)
    assert frame["expert_mib_per_token"].is_monotonic_decreasing
    n = roofline.tokens_to_touch(SPEC, 0.5)
    touched = roofline.experts_touched(SPEC, [n - 1, n])["experts_touched"].to_numpy()
    assert touched[0] < e / 2 <= touched[1]
    assert roofline.tokens_to_touch(load_model("llama-3.1-70b"), 0.5) is None
    assert roofline.experts_touched(load_model("llama-3.1-70b"), [1]).empty


def test_decode_roofline_bounds_and_matches_the_sweep(decode: Sweep) -> None:
    sketch = roofline.decode_roofline(SPEC, GPU, ["TEP8", "TP4DP4+EP"], [1, 16, 256], isl=1, osl=1000,
                                       mtp_tokens=3, acceptance=0.25)
    assert set(sketch["deployment"]) == {"TEP8", "TEP8+MTP", "TP4DP4+EP", "TP4DP4+EP+MTP"}
    assert (sketch["roofline_ms"] < sketch["modeled_ms"]).all()
    assert (sketch["roofline_tps_per_gpu"] > sketch["modeled_tps_per_gpu"]).all()
    swept = decode.frame.set_index(["deployment", "concurrency"])["tps_per_gpu"]
    for row in sketch.itertuples():
        assert row.modeled_tps_per_gpu == pytest.approx(swept[(row.deployment, row.requests)], rel=0.02)



def test_end_layouts(decode: Sweep) -> None:
    best = ch5.best_table(decode)
    assert ch6.end_layouts(best, S.decode_topologies) == ["TEP8", "TP4DP4+EP"]
    assert ch6.end_layouts(best.iloc[:0], S.decode_topologies) == ["TP4DP4+EP"]


# ------------------------------------------------------------------------------------------ frontier


def test_gate_excludes_a_failing_deployment(disagg: Sweep) -> None:
    df = disagg.frame.copy()
    df.loc[df["deployment"] == "1xTEP8 : 1xTEP8+MTP", "accuracy"] = 0.9
    df.loc[df["deployment"] == "1xTP4DP2+EP : 1xTEP8+MTP", "accuracy"] = np.nan
    sweep = Sweep("disagg", disagg.paths, df)
    gate = ch7.gate_summary(sweep, 0.95)
    assert gate.excluded == ("1xTEP8 : 1xTEP8+MTP",)
    assert gate.unmeasured == ("1xTP4DP2+EP : 1xTEP8+MTP",)
    assert "1xTEP8 : 1xTEP8+MTP (90.0%)" in gate.sentence and "kept unchecked" in gate.sentence
    assert "1xTEP8 : 1xTEP8+MTP" not in set(gate.kept["deployment"])
    clean = ch7.gate_summary(disagg, 0.95)
    assert clean.excluded == () and "excludes none of the 7" in clean.sentence


def test_frontier_ends_and_sla(disagg: Sweep) -> None:
    env = ch7.envelope(disagg.frame)
    ends = ch7.frontier_ends(env)
    assert ends.tps_per_gpu == pytest.approx(disagg.frame["tps_per_gpu"].max())
    assert ends.tps_per_user == pytest.approx(disagg.frame["tps_per_user"].max())
    assert ends.article_tps_per_gpu == 5000 and ends.article_tps_per_user == 180
    # the dataset was calibrated to land within 10 % of the article's two ends
    assert abs(ends.tps_per_gpu / 5000 - 1) < 0.10 and abs(ends.tps_per_user / 180 - 1) < 0.10
    for floor in (10.0, 50.0, 100.0, 500.0):
        mine, ref = sla(disagg.frame, floor), sla_pick(disagg.frame, min_tps_per_user=floor)
        assert mine == ref
    reverse = reverse_sla(disagg.frame).set_index("fraction_of_best")
    assert reverse.loc[1.0, "deployment"] == ends.throughput_deployment
    assert (reverse["tps_per_gpu"] >= reverse["min_tps_per_gpu"]).all()
    assert reverse["tps_per_user"].is_monotonic_increasing
    said = ch7.ends_sentence(ends, article_data=True, points=len(env))
    assert said.startswith(f"The envelope has {len(env)} points") and "against the article's 5,000 and 180" in said


@st.composite
def _points(draw):
    n = draw(st.integers(1, 25))
    xs = draw(st.lists(st.integers(1, 60), min_size=n, max_size=n))
    ys = draw(st.lists(st.integers(1, 60), min_size=n, max_size=n))
    return pd.DataFrame({"deployment": [f"d{i % 3}" for i in range(n)], "concurrency": range(1, n + 1),
                         "tps_per_user": [float(x) for x in xs], "tps_per_gpu": [float(y) for y in ys],
                         "mode": "disagg", "gpus_total": 8})


def _level(steps: pd.DataFrame, q: float) -> float:
    """The staircase's height just right of q: the horizontal segment covering (q, q + eps)."""
    pts = steps.sort_values("order")
    for (x0, y0), (x1, y1) in zip(pts[["tps_per_user", "tps_per_gpu"]].to_numpy()[:-1],
                                  pts[["tps_per_user", "tps_per_gpu"]].to_numpy()[1:], strict=True):
        if y0 == y1 and x0 <= q < x1:
            return y0
    return math.nan


@settings(max_examples=60, deadline=None)
@given(_points())
def test_the_staircase_is_envelope_at(df: pd.DataFrame) -> None:
    env = upper_envelope(df)
    steps = envelope_steps(env)
    xy = steps.sort_values("order")[["tps_per_user", "tps_per_gpu"]].to_numpy()
    # never up as x grows, and only horizontal or vertical segments: no line between two deployments
    assert (np.diff(xy[:, 0]) >= 0).all() and (np.diff(xy[:, 1]) <= 0).all()
    assert ((np.diff(xy[:, 0]) == 0) | (np.diff(xy[:, 1]) == 0)).all()
    assert set(map(tuple, env[["tps_per_user", "tps_per_gpu"]].to_numpy())) <= set(map(tuple, xy))
    # one query inside every horizontal segment, at its middle, where no rounding can cross a step edge
    edges = np.unique(np.concatenate([[0.0], env["tps_per_user"].to_numpy(dtype=float)]))
    for q in (edges[:-1] + edges[1:]) / 2:
        assert _level(steps, q) == envelope_at(env, [q])[0]
    # each corner names the deployment that delivers its level
    for corner in steps[steps["kind"] == "corner"].itertuples():
        level = env[env["tps_per_gpu"] == corner.tps_per_gpu]
        assert corner.deployment in set(level["deployment"])
    assert frontier_matches_brute_force(df)


def test_prediction_against_the_disaggregated_sweep(prefill, decode, disagg, room) -> None:
    pred = ch7.predict(prefill, decode, disagg.frame, osl=S.osl, isl=S.isl, room=room)
    assert pred.available and set(pred.summary["deployment"]) == set(disagg.deployments)
    # rate matching from the model's isolated sweeps lands near the model's disaggregated sweep
    assert pred.summary["median_ratio"].between(0.9, 1.1).all()
    assert pred.envelope["fits_kv"].all()
    assert pred.infeasible > 0
    assert ch7.check_sentence(pred) == (f"Of the {len(pred.rows):,} rate-matched points, the check removes "
                                        f"{pred.infeasible:,}.")
    assert pred.unchecked_envelope["tps_per_gpu"].max() > pred.envelope["tps_per_gpu"].max()
    # TP8+EP decode rows would find TEP8's room: names are canonical in rate matching
    tep8 = pred.rows[pred.rows["decode_topology"].astype(str) == "TEP8"]
    mtp = pd.to_numeric(tep8["mtp_tokens"]) > 0
    assert np.allclose(tep8.loc[mtp, "decode_room"], room.set_index("deployment").loc["TEP8+MTP", "room_at_workload"])
    status = ch7.envelope_with_status(pred.envelope, disagg)
    assert status["in_sweep"].dtype == bool and len(status) == len(pred.envelope)
    assert "within 10 %" in ch7.prediction_sentence(pred)
    assert ch7.prediction_ends_sentence(pred).startswith(
        f"The predicted envelope reaches {pred.envelope['tps_per_gpu'].max():,.0f} total tokens/s per GPU")


def test_frontier_matches_brute_force_on_the_bundled_data(disagg: Sweep) -> None:
    assert frontier_matches_brute_force(disagg.frame)


# ------------------------------------------------------------------------------------------ InferenceX


def test_inferencex_rows_get_the_decode_layout_their_file_records() -> None:
    real = ch7.inferencex_points()
    f = real.sweep.frame
    assert len(f) == len(read_points()) == 9 and not real.sweep.modeled
    by_c = f.set_index("concurrency")
    assert by_c.loc[180, "deployment"] == "4 prefill GPUs : 1xDP32+EP"  # DP attention, EP 32
    assert by_c.loc[4, "deployment"] == by_c.loc[48, "deployment"] == "4 prefill GPUs : 4xTEP8"
    assert by_c.loc[16130, "decode_topology"] == "DP4+EP" and by_c.loc[16130, "n_decode_workers"] == 5
    assert real.brute_force_ok and len(real.envelope) == 9
    assert np.isfinite(real.check[["tps_per_gpu_error", "tps_per_user_error"]].to_numpy()).all()
    errors = real.median_abs_error
    assert errors["tps_per_gpu"] == pytest.approx(real.check["tps_per_gpu_error"].abs().median())
    gap = ch7.ttft_gap(real.check)
    roomy = real.check[~real.check["kv_limited"]]
    assert gap["points"] == len(roomy) == 8
    assert gap["predicted-max"] < gap["measured-min"]  # the steady state has no queue: far below every one
    assert gap["full-predicted"] > gap["full-measured"]  # the full decode side: the one wait it adds overshoots


def test_headers_are_words_without_stray_spaces_and_unique_in_a_table(decode: Sweep, room: pd.DataFrame) -> None:
    """A header made unique with a trailing space ("MTP ahead ") reads as a duplicate on the page."""
    assert [h for h in display.HEADERS.values() if h != h.strip() or "  " in h] == []
    effect = ch6.mtp_effect(decode, room)
    headers = [display.header(c) for c in effect.columns]
    assert len(set(headers)) == len(headers), headers


def test_number() -> None:
    assert display.number(None) == display.MISSING
    assert display.number(math.nan) == display.MISSING
    assert display.number(1234.4) == "1,234"
    assert display.number(0.31, ".0%") == "31%"


def test_room_sentence_prints_what_the_summary_prints(room: pd.DataFrame) -> None:
    """Chapter 6 and the workbook summary quote vLLM's maximum concurrency the same way, two decimals: a room
    of 15.96 was "15" in the chapter (rounded down) and "16.0" in the summary (a tenth)."""
    text = ch6.room_sentence(room, ["TEP8"])
    tep8 = room.set_index("deployment").loc["TEP8"]
    assert f"TEP8 {tep8['room_at_workload']:,.2f} ({tep8['room_at_workload'] / tep8['gpus']:,.2f} per GPU)" in text
    assert "TP4DP4+EP" not in text
    assert "TP4DP4+EP" in ch6.room_sentence(room, [])  # no deployment named: every one


def test_room_change(decode: Sweep, room: pd.DataFrame) -> None:
    more = kv_room(decode, SPEC, **{**MEMORY, "gpu_memory_utilization": 0.95})
    change = ch6.room_change(room, more)
    assert list(change["deployment"]) == list(room["deployment"])
    assert (change["gained"] > 0).all()
    assert np.allclose(change["after"] - change["before"], change["gained"])
    assert ch6.room_change(room.iloc[:0], more).empty
