"""The plan's search builds only the rows on each pair's TTFT/throughput staircase (pdtune.plan.staircase) and
counts the rest: its answer must be the one of building every x : y within the budget, as the search did
before (issue 22, cause 1). The reference here is that full enumeration, rebuilt from the package's own dense
rate matching (`pdtune.frontier.rate_match` over every worker count up to the budget) and the same KV-transfer
step; small budgets keep it fast. Not timed: the scale targets are `benchmarks/bench_plan_scale.py`'s."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pdtune.plan.search as search
from pdtune.frontier import rate_match
from pdtune.frontier.ratios import count_pairs, floor_sum, nearest_ratios
from pdtune.paths import clusters_dir
from pdtune.plan import PlanSettings, Sla, plan
from pdtune.plan.evaluate import evaluate_rows


class _DenseSpace:
    """What the staircase's row space answers, from every row."""

    def __init__(self, feasible: pd.DataFrame, counts: dict[str, int], p90: Any) -> None:
        self.rows, self.counts, self.p90 = feasible, counts, p90
        self.stairs = self

    def meeting(self, sla: Sla) -> int:
        rows = evaluate_rows(self.rows, self.p90)  # the TPOT p90 the plan's rows carry
        ok = sla.meets_latency(rows) & (rows["tps_per_user"].to_numpy(dtype=float) >= (sla.min_tps_per_user or 0.0))
        return int(ok.sum())

    def curves(self, labels: set[str]) -> pd.DataFrame:
        return self.rows[self.rows["deployment"].isin(labels)]


def _dense_match(spec, s: PlanSettings, pools, prefill_gpu, decode_gpu, factors, p90):  # type: ignore[no-untyped-def]
    """The search before the staircase: every x : y with x * g_p + y * g_d <= N built as a row."""
    n = s.max_gpus
    prefill, decode = pools["prefill"], pools["decode"]
    ctx = search._Context(spec, s, prefill_gpu, decode_gpu,
                          {(c.role, c.topology, c.mtp_tokens): c for c in prefill.candidates + decode.candidates},
                          min(f.efficiency.link for f in factors.values()), s.extras(), p90)
    transfers: dict[Any, Any] = {}
    keyed: dict[Any, Any] = {}
    counts = {"rate_matched_rows": 0, "rows_over_kv_room_after_block_size": 0, "rows_link_saturated": 0}
    feasible_parts = []
    for gp, pframes in search._by_gpus(prefill).items():
        for gd, dframes in search._by_gpus(decode).items():
            if gp + gd > n:
                continue
            workers = max((n - gd) // gp, (n - gp) // gd)
            matched = rate_match(pd.concat(pframes, ignore_index=True), pd.concat(dframes, ignore_index=True),
                                 s.osl, workers, isl=s.isl)
            matched = matched[matched["gpus_total"].to_numpy() <= n].reset_index(drop=True)
            counts["rate_matched_rows"] += len(matched)
            if not len(matched):
                continue
            out = search._with_transfer(matched, ctx, transfers, keyed)
            over_room = out["decode_concurrency"].to_numpy() > out["decode_room"].to_numpy()
            saturated = out["kv_link_utilization"].to_numpy() > 1.0
            counts["rows_over_kv_room_after_block_size"] += int(over_room.sum())
            counts["rows_link_saturated"] += int((saturated & ~over_room).sum())
            feasible_parts.append(out[search._feasible(out)])
    rows = pd.concat(feasible_parts, ignore_index=True)
    counts["feasible_rows"] = len(rows)
    counts["rows_network_charged"] = int(rows["network_charged"].sum())
    summary = {f"{p} -> {d}{'+MTP' + str(k) if k else ''} over {scope}": t.to_dict()
               for (p, d, k, scope), t in sorted(transfers.items())}
    return rows, _DenseSpace(rows, counts, p90), summary


CASES = {
    "dense model, TTFT and TPOT p90 limits": (
        dict(model="qwen3-32b", gpu="h100", max_gpus=40, isl=1024, osl=128),
        [Sla(30, 150), Sla(80, 100, 12), Sla(None, 60)], {}),
    "two GPU kinds, no SLA": (
        dict(model="qwen3-next-80b-a3b", gpu="b200", decode_gpu="h200", max_gpus=20, isl=8192, osl=1024), [], {}),
    "hybrid MoE over two HGX boards, TTFT limits": (
        dict(model="qwen3-next-80b-a3b", gpu="h200", max_gpus=16, isl=8192, osl=1024),
        [Sla(None, 900), Sla(200, 50)], {}),
    "an SLA nothing meets (the closest row)": (
        dict(model="llama-3.1-70b", gpu="h100", max_gpus=24, isl=2048, osl=256), [Sla(400, 100)], {}),
    # the prefill side read back from the committed dataset; its decode sweeps ran at ISL 1, a context the plan's
    # decode-context check refuses for 8192/1024, so that side is modeled
    "measured prefill sweeps (the committed dataset read back)": (
        dict(model="qwen3.8-2.4t", gpu="gb300", max_gpus=72, isl=8192, osl=1024,
             prefill_topologies=("TP2DP4+EP", "TP4DP2+EP"), decode_topologies=("TEP8", "TP4DP4+EP")),
        [Sla(20, 3000)],
        {"prefill_results": [str(clusters_dir() / "gb300-qwen3.8-modeled" / "prefill")]}),
}


@pytest.mark.parametrize("name", list(CASES))
def test_the_staircase_gives_the_full_enumerations_plan(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    kwargs, slas, given = CASES[name]
    settings_ = PlanSettings(**kwargs)
    fast = plan(settings_, slas, **given)
    with monkeypatch.context() as m:
        m.setattr(search, "_match", _dense_match)
        full = plan(settings_, slas, **given)
    assert fast.to_dict() == full.to_dict()  # the table's rows, the picks, every count, the transfers
    disagg = full.rows["mode"] == "disagg"  # the aggregated rows are all in both; the staircase counts the rest
    assert fast.counts["feasible_rows"] == int(disagg.sum()) > int((fast.rows["mode"] == "disagg").sum())
    # The staircase's rows are rows of the full search, and its undominated ones are all there.
    key = ["deployment", "concurrency", "tps_per_gpu", "ttft_ms_p50"]
    every = set(map(tuple, full.rows[key].to_numpy().tolist()))
    assert set(map(tuple, fast.rows[key].to_numpy().tolist())) <= every


def test_a_ttft_limit_asked_of_the_rows_afterwards_gets_the_full_answer() -> None:
    """Chapter 9's exercise picks again from `Plan.rows` with a new TTFT limit: the staircase holds every row
    such a pick can be, for any limit."""
    from pdtune.chapters.plan import pick_with_ttft

    s = PlanSettings(model="qwen3-32b", gpu="h100", max_gpus=32, isl=1024, osl=128)
    fast = plan(s)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(search, "_match", _dense_match)
        full = plan(s)
    for floor in (20.0, 60.0):
        for limit in np.quantile(full.rows["ttft_ms_p50"], [0.02, 0.2, 0.5]):
            assert pick_with_ttft(fast, floor, float(limit)) == pick_with_ttft(full, floor, float(limit))


# ------------------------------------------------------------------------------------------ the arithmetic


def _lattice(gp: int, gd: int, budget: int) -> list[tuple[int, int]]:
    return [(x, y) for x in range(1, budget + 1) for y in range(1, budget + 1) if gp * x + gd * y <= budget]


ratio = st.fractions(min_value=Fraction(1, 200), max_value=Fraction(60), max_denominator=10**6)


@settings(max_examples=300, deadline=None)
@given(gp=st.integers(1, 8), gd=st.integers(1, 8), budget=st.integers(2, 80), target=ratio,
       side=st.sampled_from([-1, 0, 1]))
def test_nearest_ratios_are_the_best_fits_from_each_side(gp: int, gd: int, budget: int, target: Fraction,
                                                        side: int) -> None:
    lowest = [(x, y) for x, y in _lattice(gp, gd, budget) if math.gcd(x, y) == 1]
    below = [r for r in lowest if (Fraction(r[1], r[0]) < target if side < 0 else Fraction(r[1], r[0]) <= target)]
    above = [r for r in lowest if (Fraction(r[1], r[0]) > target if side > 0 else Fraction(r[1], r[0]) >= target)]
    want = (max(below, key=lambda r: Fraction(r[1], r[0])) if below else None,
            min(above, key=lambda r: Fraction(r[1], r[0])) if above else None)
    assert nearest_ratios(target, gp, gd, budget, side=side) == want


@settings(max_examples=300, deadline=None)
@given(gp=st.integers(1, 8), gd=st.integers(1, 8), budget=st.integers(0, 80),
       lo=st.none() | ratio, width=st.none() | st.fractions(Fraction(0), Fraction(20), max_denominator=1000))
def test_count_pairs_counts_every_pair_in_the_band(gp: int, gd: int, budget: int, lo: Fraction | None,
                                                   width: Fraction | None) -> None:
    hi = None if width is None else (lo or Fraction(0)) + width
    want = sum(1 for x, y in _lattice(gp, gd, budget)
               if (lo is None or Fraction(y, x) >= lo) and (hi is None or Fraction(y, x) <= hi))
    assert count_pairs(gp, gd, budget, lo, hi) == want


@given(n=st.integers(0, 40), m=st.integers(1, 30), a=st.integers(-10**6, 10**6), b=st.integers(-10**6, 10**6))
def test_floor_sum_is_the_sum(n: int, m: int, a: int, b: int) -> None:
    assert floor_sum(n, m, a, b) == sum((a * i + b) // m for i in range(n))


def test_a_budget_of_two_to_the_twenty_is_a_few_dozen_steps() -> None:
    """Hand check at the documented bound: 2 GPUs per worker on both sides, 2^20 GPUs. The largest y / x <= 1/3
    is 1/3 itself (x = 3, y = 1); the smallest > 1/3 has the largest denominator the budget allows on the
    Farey neighbour of 1/3: y / x with 3y - x = 1 and 2x + 2y <= 2^20, i.e. x = 3y - 1, 8y - 2 <= 2^20,
    y = 131072, x = 393215. Pairs with y <= x / 3 and 2x + 2y <= 2^20: for each x, min(floor(x / 3),
    2^19 - x) of them, summed here over the 2^19 values of x against the function's O(log) answer."""
    budget = 2**20
    assert nearest_ratios(Fraction(1, 3), 2, 2, budget) == ((3, 1), (3, 1))
    assert nearest_ratios(Fraction(1, 3), 2, 2, budget, side=1)[1] == (393215, 131072)
    x = np.arange(1, budget // 2, dtype=np.int64)
    want = int(np.minimum(x // 3, budget // 2 - x).sum())
    assert count_pairs(2, 2, budget, None, Fraction(1, 3)) == want
