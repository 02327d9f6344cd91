"""Unit tests of pdtune.frontier: pinned numbers, hand arithmetic, and bad input."""

from __future__ import annotations

from math import gcd
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pdtune.errors import InputError
from pdtune.frontier import (
    RATE_MATCH_COLUMNS,
    accuracy_gate,
    best_per_concurrency,
    deployment_label,
    envelope_at,
    frontier,
    pareto_frontier,
    predicted_vs_measured,
    rate_match,
    sla_pick,
    upper_envelope,
)

# The lead will move this file under data/clusters/; this constant is the only place that names it.
INFERENCEX_SAMPLE = Path("/work/shared/samples/InferenceX_DeepSeek-R1-0528_interactivity_gb200.csv")

# The tidy schema of design.md, plus the two columns every loaded pdtune frame carries as well.
TIDY_SCHEMA = (
    "source path model mode topology prefill_topology decode_topology n_prefill_workers n_decode_workers "
    "gpus_prefill gpus_decode gpus_total mtp_tokens isl osl concurrency total_tps output_tps ttft_ms_p50 "
    "ttft_ms_p99 tpot_ms_p50 tpot_ms_mean tpot_ms_p99 tps_per_gpu tps_per_user accuracy "
    "output_tps_per_decode_gpu modeled"
).split()


def brute_force_frontier(x: np.ndarray, y: np.ndarray) -> set[int]:
    """O(n^2): indices not dominated, and of exactly equal points only the lowest index."""
    keep = set()
    for i in range(len(x)):
        dominated = any(
            x[j] >= x[i] and y[j] >= y[i] and (x[j] > x[i] or y[j] > y[i]) for j in range(len(x))
        )
        earlier_twin = any(x[j] == x[i] and y[j] == y[i] for j in range(i))
        if not dominated and not earlier_twin:
            keep.add(i)
    return keep


def disagg_rows(points: list[tuple], **common) -> pd.DataFrame:
    """Rows of a disaggregated sweep: points are (n_p, prefill, n_d, decode, concurrency, tps_per_user,
    tps_per_gpu, gpus_total)."""
    rows = []
    for n_p, pre, n_d, dec, conc, tpu, tpg, gpus in points:
        rows.append({"source": "test", "path": "sweep.json", "mode": "disagg", "topology": None,
                     "prefill_topology": pre, "decode_topology": dec, "n_prefill_workers": n_p,
                     "n_decode_workers": n_d, "gpus_total": gpus, "mtp_tokens": 0, "isl": 8192, "osl": 1024,
                     "concurrency": conc, "tps_per_user": tpu, "tps_per_gpu": tpg, "modeled": False} | common)
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------------- frontier


def test_pareto_frontier_small_case_with_a_duplicate():
    # (2, 6) dominates (1, 5) and (2, 4); (3, 3) appears twice: the lower index (2) is kept.
    idx = pareto_frontier([1, 2, 3, 3, 2], [5, 4, 3, 3, 6])
    assert idx.tolist() == [4, 2]


def test_pareto_frontier_equal_x_keeps_only_the_highest_y():
    assert pareto_frontier([1, 1, 1], [2, 7, 7]).tolist() == [1]


def test_pareto_frontier_of_nothing_is_empty():
    assert pareto_frontier([], []).size == 0


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_pareto_frontier_rejects_non_finite(bad):
    with pytest.raises(InputError) as err:
        pareto_frontier([1.0, 2.0], [3.0, bad])
    assert err.value.field == "y"


def test_pareto_frontier_rejects_arrays_of_different_length():
    with pytest.raises(InputError):
        pareto_frontier([1.0, 2.0], [3.0])


def test_inferencex_sample_frontier_equals_brute_force():
    df = pd.read_csv(INFERENCEX_SAMPLE, comment="#")  # three `#` licence lines precede the header
    x = df["Median Interactivity (tok/s/user)"].to_numpy()
    y = df["Throughput/GPU (tok/s)"].to_numpy()
    assert len(df) == 9
    idx = pareto_frontier(x, y)
    assert set(idx.tolist()) == brute_force_frontier(x, y)
    # These nine published points are all Pareto-optimal; ordered by interactivity they run from the
    # 16130-user point (17.8 tok/s/user, 14659 tok/s/GPU) to the 4-user point (286 tok/s/user, 61 tok/s/GPU).
    assert df["Concurrency"].to_numpy()[idx].tolist() == [16130, 4301, 2253, 180, 48, 24, 12, 8, 4]
    assert y[idx[0]] == pytest.approx(14659.376537, rel=1e-9)
    # The same points plus dominated copies (each 10 % slower on both axes) keep the same frontier.
    x2, y2 = np.r_[x, x * 0.9], np.r_[y, y * 0.9]
    assert set(pareto_frontier(x2, y2).tolist()) == brute_force_frontier(x2, y2) == set(idx.tolist())


def test_frontier_keeps_columns_and_index_and_names_the_bad_file():
    df = disagg_rows([(1, "TEP8", 1, "TEP8", 4, 100.0, 500.0, 16), (1, "TEP8", 1, "TEP8", 64, 20.0, 3000.0, 16),
                      (1, "TEP8", 1, "TEP8", 32, 19.0, 2000.0, 16)], path="run.csv")
    df.index = [10, 11, 12]
    front = frontier(df)
    assert front.index.tolist() == [11, 10]
    assert list(front.columns) == list(df.columns)
    df.loc[12, "tps_per_gpu"] = np.nan
    with pytest.raises(InputError) as err:
        frontier(df)
    assert (err.value.source, err.value.field) == ("run.csv", "tps_per_gpu")
    assert "concurrency 32" in err.value.message


def test_frontier_tie_between_deployments_keeps_fewer_gpus_whatever_the_order():
    df = disagg_rows([(2, "TEP8", 2, "TEP8", 8, 50.0, 700.0, 32), (1, "TEP8", 1, "TEP8", 4, 50.0, 700.0, 16)])
    for order in ([0, 1], [1, 0]):
        assert frontier(df.iloc[order])["gpus_total"].tolist() == [16]


# ------------------------------------------------------------------------------------------------ labels


def test_deployment_labels():
    df = pd.DataFrame([
        {"mode": "disagg", "prefill_topology": "TP2DP4+EP", "decode_topology": "TEP8",
         "n_prefill_workers": 3, "n_decode_workers": 1, "mtp_tokens": 0},
        {"mode": "disagg", "prefill_topology": "TP4DP2+EP", "decode_topology": "TP4DP4+EP",
         "n_prefill_workers": 1.0, "n_decode_workers": 1.0, "mtp_tokens": 3},
        {"mode": "decode", "topology": "TEP8", "mtp_tokens": 3},
        {"mode": "prefill", "topology": "TP16+EP", "mtp_tokens": np.nan},
        {"mode": "disagg", "prefill_topology": None, "decode_topology": None, "gpus_prefill": 8,
         "gpus_decode": 16, "n_prefill_workers": 2, "n_decode_workers": 1},
        {"mode": "disagg", "prefill_topology": None, "decode_topology": None, "gpus_prefill": 12,
         "gpus_decode": 32, "n_prefill_workers": None, "n_decode_workers": 1},
        {"mode": None, "topology": None, "prefill_topology": "TEP8", "decode_topology": "TEP8"},
    ])
    assert deployment_label(df).tolist() == [
        "3xTP2DP4+EP : 1xTEP8",
        "1xTP4DP2+EP : 1xTP4DP4+EP+MTP",
        "TEP8+MTP",
        "TP16+EP",
        "2x4 prefill GPUs : 1x16 decode GPUs",
        "12 prefill GPUs : 1x32 decode GPUs",
        "TEP8 : TEP8",
    ]


def test_deployment_label_without_topology_or_gpus_is_bad_input():
    with pytest.raises(InputError) as err:
        deployment_label(pd.DataFrame([{"mode": "agg", "topology": None, "gpus_total": 0, "path": "x.json"}]))
    assert (err.value.source, err.value.field) == ("x.json", "topology")


# -------------------------------------------------------------------------------------- envelope, steps


def two_crossing_deployments() -> pd.DataFrame:
    # A is better at high interactivity, B at high throughput; A's 64-user point is dominated by B's 16.
    return disagg_rows([
        (1, "TEP8", 1, "TEP8", 1, 180.0, 300.0, 16),
        (1, "TEP8", 1, "TEP8", 8, 120.0, 1500.0, 16),
        (1, "TEP8", 1, "TEP8", 64, 40.0, 1800.0, 16),
        (3, "TP2DP4+EP", 1, "TP4DP4+EP", 16, 100.0, 2000.0, 40),
        (3, "TP2DP4+EP", 1, "TP4DP4+EP", 256, 30.0, 5000.0, 40),
    ])


def test_upper_envelope_is_a_labelled_staircase():
    env = upper_envelope(two_crossing_deployments())
    assert list(env.columns[:4]) == ["deployment", "concurrency", "tps_per_user", "tps_per_gpu"]
    assert env[["deployment", "concurrency"]].values.tolist() == [
        ["3xTP2DP4+EP : 1xTP4DP4+EP", 256],
        ["3xTP2DP4+EP : 1xTP4DP4+EP", 16],
        ["1xTEP8 : 1xTEP8", 8],
        ["1xTEP8 : 1xTEP8", 1],
    ]
    # Between 100 and 120 tok/s/user only A's 8-user point (1500) is reachable: a step, not a blend of
    # B's 2000 and A's 1500. Beyond the last point nothing is reachable.
    assert envelope_at(env, [30.0, 31.0, 100.0, 110.0, 180.0, 181.0]).tolist() == [
        5000.0, 2000.0, 2000.0, 1500.0, 300.0]+ [pytest.approx(np.nan, nan_ok=True)]


def test_upper_envelope_refuses_two_workloads():
    df = two_crossing_deployments()
    df.loc[4, ["isl", "osl"]] = [1024, 1024]
    df.loc[4, "path"] = "other.json"
    with pytest.raises(InputError) as err:
        upper_envelope(df)
    assert err.value.source == "other.json"
    assert "8192/1024" in err.value.message and "1024/1024" in err.value.message


def test_best_per_concurrency_prefill_isolation():
    rows = [("TP4DP2+EP", 8, 1, 900.0), ("TP2DP4+EP", 8, 1, 800.0), ("TP4DP2+EP", 8, 64, 3000.0),
            ("TP2DP4+EP", 8, 64, 3500.0), ("TP16+EP", 16, 64, 3500.0)]
    df = pd.DataFrame([{"mode": "prefill", "topology": t, "gpus_total": g, "concurrency": c, "tps_per_gpu": v,
                        "isl": 8192, "osl": 2} for t, g, c, v in rows])
    best = best_per_concurrency(df)
    # TP4DP2+EP wins at 1; at 64 TP2DP4+EP and TP16+EP tie at 3500 and the 8-GPU one is reported.
    assert best[["concurrency", "deployment", "tps_per_gpu"]].values.tolist() == [
        [1, "TP4DP2+EP", 900.0], [64, "TP2DP4+EP", 3500.0]]


# ----------------------------------------------------------------------------------------- rate matching


def isolated(role: str, topology: str, gpus: int, points: list[tuple[int, float]], **extra) -> pd.DataFrame:
    latency = "ttft_ms_p50" if role == "prefill" else "tpot_ms_p50"
    return pd.DataFrame([{"source": f"{role}-sweep", "path": f"{role}.json", "mode": role, "topology": topology,
                          "gpus_total": gpus, "concurrency": c, latency: ms, "mtp_tokens": 0, **extra}
                         for c, ms in points])


def hand_sweeps() -> tuple[pd.DataFrame, pd.DataFrame]:
    prefill = isolated("prefill", "TP2DP4+EP", 8, [(8, 1000.0), (4, 800.0)], isl=999)
    decode = isolated("decode", "TEP8", 8, [(100, 20.0)], isl=1)
    return prefill, decode


def test_rate_match_hand_computed():
    # Prefill (8 GPUs): P = B_p * 1000 / TTFT = 8 * 1000 / 1000 = 8 req/s at B_p = 8, 4 * 1000 / 800 = 5 req/s
    # at B_p = 4. Decode (8 GPUs), OSL 1001: D = 100 * 1000 / (20 * 1000) = 5 req/s. ISL 999: 2000 tokens/request.
    # 1:1 -> R = min(8, 5) = 5 req/s, decode-bound; the lightest prefill point with P >= 5 is B_p = 4 (TTFT 800).
    #        10000 tok/s over 16 GPUs = 625 tok/s/GPU; concurrency 5 * (800 + 20 * 1000) / 1000 = 104.
    # 5:8 -> R = min(40, 40) = 40, balanced, needs P >= 8: B_p = 8 (TTFT 1000). 80000 tok/s over 40 + 64 = 104
    #        GPUs = 769.23 tok/s/GPU; concurrency 40 * (1000 + 20000) / 1000 = 840; output 40 * 1001 = 40040.
    # 1:8 -> R = min(8, 40) = 8, prefill-bound: 16000 tok/s over 72 GPUs = 222.2; concurrency 8 * 21 = 168.
    # tok/s per user = 1000 / 20 = 50 everywhere.
    prefill, decode = hand_sweeps()
    pred = rate_match(prefill, decode, osl=1001, max_workers=8)
    assert len(pred) == 64
    by = pred.set_index(["n_prefill_workers", "n_decode_workers"])
    one = by.loc[(1, 1)]
    assert (one.tps_per_gpu, one.concurrency, one.ttft_ms_p50, one.prefill_concurrency, one.bottleneck) == \
        (625.0, 104.0, 800.0, 4.0, "decode")
    best = by.loc[(5, 8)]
    assert best.tps_per_gpu == pytest.approx(80000 / 104, rel=1e-15)
    assert (best.concurrency, best.output_tps, best.total_tps, best.gpus_total, best.bottleneck) == \
        (840.0, 40040.0, 80000.0, 104, "balanced")
    assert best.deployment == "5xTP2DP4+EP : 8xTEP8"
    assert (by.loc[(1, 8)].tps_per_gpu, by.loc[(1, 8)].concurrency, by.loc[(1, 8)].bottleneck) == \
        (pytest.approx(16000 / 72), 168.0, "prefill")
    # output tokens per decode GPU at 5:8: 40040 tok/s over 8 x 8 = 64 decode GPUs = 625.625
    assert best.output_tps_per_decode_gpu == 625.625
    assert (pred.tps_per_user == 50.0).all() and pred.modeled.all() and (pred["mode"] == "disagg").all()
    assert pred.source.iloc[0] == "predicted by rate matching: prefill sweep [prefill-sweep] + decode sweep [decode-sweep]"
    # The envelope of all 64 predictions is the one balanced deployment.
    assert upper_envelope(pred).deployment.tolist() == ["5xTP2DP4+EP : 8xTEP8"]


def test_a_prefill_bound_row_runs_as_many_clients_as_its_decode_side_holds_at_its_rate():
    # pdtune.frontier.xpyd._match_pair / paced_tpot. Prefill (one point): P = 1 * 1000 / 10 = 100 req/s a worker.
    # Decode, OSL 11 (10 steps): D = 10 * 1000 / (10 * 10) = 100 req/s at 10 requests (TPOT 10 ms) and
    # 40 * 1000 / (20 * 10) = 200 req/s at 40 (TPOT 20 ms). Between them TPOT = a + b n with b = 10 / 30 = 1/3 ms
    # a request and a = 10 - 10 / 3 = 20/3 ms.
    # 3:2 at the 40-request point: R = min(300, 400) = 300, prefill-bound; each decode worker is fed r = 150 req/s
    #   and holds n = r TPOT (OSL - 1) / 1000 requests: TPOT_r = a / (1 - b r 10 / 1000) = (20/3) / 0.5 = 40/3 ms,
    #   n = 150 * 40/3 * 10 / 1000 = 20 requests, not 40. Concurrency 300 * (10 + 40/3 * 10) / 1000 = 43, where
    #   the point's TPOT would give 300 * (10 + 20 * 10) / 1000 = 63: 20 clients more than the system holds.
    #   The row's TPOT stays the point's, 20 ms (a bound).
    # 1:2 at the 40-request point: R = 100, 50 req/s a decode worker, below the lightest point's capacity:
    #   that point's TPOT, 10 ms; concurrency 100 * (10 + 10 * 10) / 1000 = 11.
    # 3:2 at the 10-request point: R = min(300, 200) = 200, decode-bound: its own TPOT; 200 * 110 / 1000 = 22.
    prefill = isolated("prefill", "TEP8", 8, [(1, 10.0)], isl=100)
    decode = isolated("decode", "TEP8", 8, [(10, 10.0), (40, 20.0)], isl=1)
    by = rate_match(prefill, decode, osl=11, max_workers=3).set_index(
        ["n_prefill_workers", "n_decode_workers", "decode_concurrency"])
    row = by.loc[(3, 2, 40)]
    assert (row.bottleneck, row.tpot_ms_p50, row.total_tps) == ("prefill", 20.0, 300 * 111)
    assert row.paced_tpot_ms == pytest.approx(40 / 3, rel=1e-12)
    assert row.concurrency == pytest.approx(43.0, rel=1e-12)
    assert (by.loc[(1, 2, 40)].paced_tpot_ms, by.loc[(1, 2, 40)].concurrency) == (10.0, pytest.approx(11.0))
    assert (by.loc[(3, 2, 10)].bottleneck, by.loc[(3, 2, 10)].paced_tpot_ms) == ("decode", 10.0)
    assert by.loc[(3, 2, 10)].concurrency == pytest.approx(22.0)


def _held_tpot(rate: float, points: list[tuple[float, float]], osl: int) -> float:
    """The brute force's own TPOT of a decode worker fed ``rate``: the requests it holds solved from
    n = rate (a + b n) (OSL - 1) / 1000 on the bracketing points' line, then TPOT = a + b n."""
    k = (osl - 1) / 1000
    caps = [n * 1000 / (t * (osl - 1)) for n, t in points]
    for (n0, t0), (n1, t1), c0, c1 in zip(points, points[1:], caps, caps[1:]):
        if n1 > n0 and c0 <= rate < c1:
            b = (t1 - t0) / (n1 - n0)
            a = t0 - b * n0
            if rate * b * k >= 1:
                return max(t0, t1)
            held = rate * a * k / (1 - rate * b * k)
            return min(max(a + b * held, min(t0, t1)), max(t0, t1))
    return points[0][1] if rate < caps[0] else points[-1][1]


def test_rate_match_multiples_are_bit_identical_per_gpu_and_the_smaller_wins():
    prefill, decode = hand_sweeps()
    pred = rate_match(prefill, decode, osl=1001, max_workers=16).set_index(["n_prefill_workers", "n_decode_workers"])
    assert pred.loc[(10, 16)].tps_per_gpu == pred.loc[(5, 8)].tps_per_gpu
    assert pred.loc[(10, 16)].concurrency == 2 * pred.loc[(5, 8)].concurrency
    env = upper_envelope(pred.reset_index())
    assert env.deployment.tolist() == ["5xTP2DP4+EP : 8xTEP8"]


def test_rate_match_has_the_tidy_schema_and_labels_match_deployment_label():
    prefill, decode = hand_sweeps()
    decode["mtp_tokens"] = 3
    pred = rate_match(prefill, decode, osl=1001, max_workers=3)
    assert list(pred.columns) == list(RATE_MATCH_COLUMNS)
    assert set(TIDY_SCHEMA) <= set(pred.columns)
    # The stored label is the one deployment_label would give the same row.
    assert pred.deployment.astype(str).tolist() == deployment_label(pred.drop(columns="deployment")).tolist()
    assert pred.deployment.iloc[0] == "1xTP2DP4+EP : 1xTEP8+MTP"
    assert (pred.isl == 999).all() and (pred.osl == 1001).all()


def test_rate_match_equals_brute_force_over_every_combination():
    rng = np.random.default_rng(7)
    prefill = pd.concat([isolated("prefill", t, g, [(c, rng.uniform(200, 4000)) for c in (1, 2, 4, 8, 16)])
                         for t, g in (("TEP8", 8), ("TP2DP4+EP", 8), ("TP16+EP", 16))], ignore_index=True)
    decode = pd.concat([isolated("decode", t, g, [(c, rng.uniform(5, 60)) for c in (1, 8, 64, 512)])
                        for t, g in (("TEP8", 8), ("TP4DP4+EP", 16))], ignore_index=True)
    osl, isl, bound = 1024, 8192, 6
    pred = rate_match(prefill, decode, osl=osl, max_workers=bound, isl=isl)
    assert len(pred) == 3 * 2 * bound * bound * 4
    got = pred.set_index(["prefill_topology", "decode_topology", "n_prefill_workers", "n_decode_workers",
                          "decode_concurrency"])
    for (pt, pg), pre in prefill.groupby(["topology", "gpus_total"]):
        cap_p = pre.concurrency.to_numpy() * 1000 / pre.ttft_ms_p50.to_numpy()
        for (dt, dg), dec in decode.groupby(["topology", "gpus_total"]):
            points = sorted(zip(dec.concurrency.astype(float), dec.tpot_ms_p50))
            for bd, tpot in zip(dec.concurrency, dec.tpot_ms_p50):
                cap_d = bd * 1000 / (tpot * (osl - 1))
                for x in range(1, bound + 1):
                    for y in range(1, bound + 1):
                        # every prefill point of the deployment, on the reduced ratio (as the library)
                        g = gcd(x, y)
                        rates = np.minimum(x // g * cap_p, y // g * cap_d)
                        best = rates.max()
                        lightest = pre.ttft_ms_p50.to_numpy()[rates == best].min()
                        row = got.loc[(pt, dt, x, y, bd)]
                        assert row.tps_per_gpu == pytest.approx(best * (isl + osl) / (x // g * pg + y // g * dg),
                                                                rel=1e-12)
                        assert row.total_tps == pytest.approx(g * best * (isl + osl), rel=1e-12)
                        assert row.ttft_ms_p50 == lightest
                        assert row.gpus_total == x * pg + y * dg
                        # prefill-bound: the decode side's TPOT at the rate each decode worker is fed
                        paced = tpot
                        if x // g * cap_p.max() < y // g * cap_d:
                            paced = min(tpot, _held_tpot(best / (y // g), points, osl))
                        assert row.concurrency == pytest.approx(g * best * (lightest + paced * (osl - 1)) / 1000,
                                                                rel=1e-9)


@pytest.mark.parametrize("change, field", [
    ({"osl": 1}, "osl"),
    ({"max_workers": 0}, "max_workers"),
    ({"isl": 0}, "isl"),
])
def test_rate_match_rejects_bad_parameters(change, field):
    prefill, decode = hand_sweeps()
    kwargs = {"osl": 1001, "max_workers": 4} | change
    with pytest.raises(InputError) as err:
        rate_match(prefill, decode, **kwargs)
    assert err.value.field == field


def test_rate_match_rejects_bad_sweeps():
    prefill, decode = hand_sweeps()
    bad = prefill.copy()
    bad.loc[1, "ttft_ms_p50"] = 0.0
    with pytest.raises(InputError) as err:
        rate_match(bad, decode, osl=1001)
    assert (err.value.source, err.value.field) == ("prefill.json", "ttft_ms_p50")
    bad = decode.copy()
    bad["topology"] = None
    with pytest.raises(InputError) as err:
        rate_match(prefill, bad, osl=1001)
    assert err.value.field == "topology"
    two_isl = prefill.copy()
    two_isl.loc[1, "isl"] = 1024
    with pytest.raises(InputError) as err:
        rate_match(two_isl, decode, osl=1001)
    assert err.value.field == "isl"
    assert len(rate_match(two_isl, decode, osl=1001, isl=999, max_workers=2)) == 4


def test_predicted_vs_measured_reads_the_predicted_staircase():
    prefill, decode = hand_sweeps()
    pred = rate_match(prefill, decode, osl=1001, max_workers=8)
    measured = disagg_rows([(5, "TP2DP4+EP", 8, "TEP8", 800, 48.0, 700.0, 104),
                            (5, "TP2DP4+EP", 8, "TEP8", 1000, 55.0, 600.0, 104),
                            (3, "TEP8", 1, "TEP8", 64, 40.0, 500.0, 32)], isl=999, osl=1001)
    side = predicted_vs_measured(pred, measured)
    # 48 tok/s/user: the 5:8 prediction reaches 50 tok/s/user at 769.23 tok/s/GPU; 769.23 / 700 = 1.0989.
    # 55 tok/s/user: beyond every prediction. 3xTEP8 : 1xTEP8 was not predicted.
    assert side.predicted_tps_per_gpu.iloc[0] == pytest.approx(80000 / 104)
    assert side.predicted_over_measured.iloc[0] == pytest.approx(80000 / 104 / 700)
    assert np.isnan(side.predicted_tps_per_gpu.iloc[1]) and np.isnan(side.predicted_tps_per_gpu.iloc[2])
    anywhere = predicted_vs_measured(pred, measured, same_deployment=False)
    assert anywhere.predicted_tps_per_gpu.iloc[2] == pytest.approx(80000 / 104)


# ---------------------------------------------------------------------------------------------- SLA pick


def test_sla_pick_both_directions():
    df = two_crossing_deployments()
    pick = sla_pick(df, min_tps_per_user=50)
    # Three points reach 50 tok/s/user; B at 100 tok/s/user gives 2000 tok/s/GPU, more than A's 1500 at 120.
    assert (pick.met, pick.deployment, pick.concurrency, pick.tps_per_gpu, pick.tps_per_user) == \
        (True, "3xTP2DP4+EP : 1xTP4DP4+EP", 16, 2000.0, 100.0)
    assert pick.candidates == 3 and pick.modeled is False
    reverse = sla_pick(df, min_tps_per_gpu=1000)
    assert (reverse.deployment, reverse.tps_per_user, reverse.tps_per_gpu) == ("1xTEP8 : 1xTEP8", 120.0, 1500.0)


def test_sla_pick_nothing_meets_it_is_a_result():
    pick = sla_pick(two_crossing_deployments(), min_tps_per_user=200)
    assert (pick.met, pick.deployment, pick.candidates, pick.best_available) == (False, None, 0, 180.0)
    assert pick.to_dict()["tps_per_gpu"] is None


@pytest.mark.parametrize("kwargs", [{}, {"min_tps_per_user": 1, "min_tps_per_gpu": 1},
                                    {"min_tps_per_user": float("nan")}])
def test_sla_pick_needs_exactly_one_finite_floor(kwargs):
    with pytest.raises(InputError):
        sla_pick(two_crossing_deployments(), **kwargs)


# ---------------------------------------------------------------------------------------- accuracy gate


def test_accuracy_gate_excludes_lists_and_keeps_unmeasured():
    df = two_crossing_deployments()
    extra = disagg_rows([(1, "TP4DP2+EP", 1, "TEP8", 4, 150.0, 900.0, 16)])
    df = pd.concat([df, extra], ignore_index=True)
    # A measured 0.96 and 0.94 on two rows: its lowest, 0.94, fails the 0.95 gate. B passes at 0.955.
    df["accuracy"] = [0.96, 0.94, np.nan, 0.955, np.nan, np.nan]
    gate = accuracy_gate(df, 0.95)
    assert gate.excluded.values.tolist() == [["1xTEP8 : 1xTEP8", 0.94, 3]]
    assert gate.unmeasured == ("1xTP4DP2+EP : 1xTEP8",)
    assert sorted(set(gate.kept.deployment)) == ["1xTP4DP2+EP : 1xTEP8", "3xTP2DP4+EP : 1xTP4DP4+EP"]
    assert len(gate.kept) == 3
    assert gate.to_dict()["excluded"] == [{"deployment": "1xTEP8 : 1xTEP8", "accuracy": 0.94, "rows": 3}]


def test_accuracy_gate_rejects_percentages():
    df = two_crossing_deployments().assign(accuracy=95.3)
    with pytest.raises(InputError) as err:
        accuracy_gate(df, 0.95)
    assert err.value.field == "accuracy"
    with pytest.raises(InputError) as err:
        accuracy_gate(two_crossing_deployments(), 95)
    assert err.value.field == "threshold"


def test_measured_rows_next_to_predicted_ones_get_their_own_labels():
    prefill, decode = hand_sweeps()
    pred = rate_match(prefill, decode, osl=1001, max_workers=2)
    measured = disagg_rows([(1, "TEP8", 1, "TEP8", 8, 60.0, 900.0, 16)], isl=999, osl=1001)
    both = pd.concat([pred, measured], ignore_index=True)
    env = upper_envelope(both)
    # Every prediction is at 50 tok/s/user; the best is 1:2, R = min(8, 10) = 8 req/s, 16000 tok/s over 24
    # GPUs = 666.7 tok/s/GPU. The measured point (60 tok/s/user, 900 tok/s/GPU) dominates them all: the
    # envelope is that one measured, unmodeled point.
    assert env[["deployment", "modeled"]].values.tolist() == [["1xTEP8 : 1xTEP8", False]]


def test_winner_runs_merge_consecutive_wins() -> None:
    from pdtune.frontier import winner_runs

    best = pd.DataFrame({"concurrency": [1, 2, 4, 8, 16], "deployment": ["a", "a", "b", "a", "a"]})
    runs = winner_runs(best)
    assert runs.to_dict("records") == [
        {"deployment": "a", "from_concurrency": 1, "to_concurrency": 2, "points": 2},
        {"deployment": "b", "from_concurrency": 4, "to_concurrency": 4, "points": 1},
        {"deployment": "a", "from_concurrency": 8, "to_concurrency": 16, "points": 2},
    ]
    assert winner_runs(best.iloc[:0]).empty
