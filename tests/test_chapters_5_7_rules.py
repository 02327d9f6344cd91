"""The rules chapters 5-7 show as their own short functions equal pdtune's, over many inputs (hypothesis).

A page writes each core rule in a few lines of plain Python (``notebooks/README.md``, "A chapter is a
lesson"): throughput per GPU by Little's law, the busy share of a layout, the best deployment at each
concurrency, the prefill rate, the experts a decode step touches, the KV room, rate matching, the upper
envelope and the SLA pick. Each function is read back from the page's MyST source and run alone, with only
its cell's imports, so what is tested is exactly what the reader reads; the package side goes through the
public path the chapters use (``pdtune.frontier``, ``pdtune.chapters.prefill``, ``plan_state``,
``pdtune.perfmodel``). The two must agree exactly: where the package computes a ratio ``k x : k y`` from its
reduced form, the inputs are coprime ratios, which is the case the page shows.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable
from functools import cache
from typing import Any

import pandas as pd
import pagecode
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdtune.chapters import prefill as ch5
from pdtune.frontier import best_per_concurrency, rate_match, sla_pick, upper_envelope
from pdtune.model import load_model
from pdtune.perfmodel import roofline
from pdtune.perfmodel.expert_load import busiest_rank, touched
from pdtune.perfmodel.sweeps import Prediction
from pdtune.state import plan_state
from pdtune.sweep import Sweep, label

#: Every function chapters 5-7 define, by page. A new one must be added here with its test.
PAGE_FUNCTIONS = {
    "05_prefill": {"prefill_rate", "tokens_per_s_per_gpu", "busy_share", "best_per_concurrency"},
    "06_decode": {"kv_room"},
    "06_decode_experts": {"experts_touched", "busiest_rank"},
    "07_frontier": {"rate_match", "upper_envelope", "sla_pick"},
    "07_frontier_rate": {"clients", "decode_tpot_at"},
    "07_frontier_measured": set(),
}


@cache
def page_functions(page: str) -> dict[str, Callable[..., Any]]:
    """Every top-level function of ``notebooks/<page>.md`` (:func:`pagecode.page_functions`), read once."""
    return pagecode.page_functions(page)


@pytest.mark.parametrize("page", PAGE_FUNCTIONS)
def test_every_function_of_the_pages_is_listed(page: str) -> None:
    assert set(page_functions(page)) == PAGE_FUNCTIONS[page]


def test_page_rules_use_only_the_standard_library() -> None:
    for page in PAGE_FUNCTIONS:
        for source in pagecode.code_cells(page):
            if "\ndef " in "\n" + source:
                for node in ast.parse(source).body:
                    if isinstance(node, (ast.Import, ast.ImportFrom)):
                        module = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
                        assert module in {"math"}, (page, module)


positive = st.floats(min_value=1e-3, max_value=1e6, allow_nan=False, allow_infinity=False)
counts = st.integers(min_value=1, max_value=4096)


# ------------------------------------------------------------------------------------------ chapter 5


def _one_row_sweep(kind: str, rows: list[dict[str, Any]]) -> Sweep:
    df = pd.DataFrame([{"source": "test", "path": f"t/{i}.json", "mode": kind, "mtp_tokens": 0, "isl": 1,
                        "osl": 2, "tps_per_user": 1.0, "modeled": False, **r} for i, r in enumerate(rows)])
    return Sweep(kind, ("t",), label(df))


@settings(max_examples=80, deadline=None)
@given(prompts=counts, ttft_ms=positive)
def test_prefill_rate_is_the_prefill_capacity(prompts: int, ttft_ms: float) -> None:
    shown = page_functions("05_prefill")["prefill_rate"]
    sweep = _one_row_sweep("prefill", [{"topology": "TP8", "gpus_total": 8, "concurrency": prompts,
                                        "ttft_ms_p50": ttft_ms, "tps_per_gpu": 1.0}])
    assert shown(prompts, ttft_ms) == ch5.prefill_capacity(sweep)["requests_per_s"].iloc[0]


@settings(max_examples=80, deadline=None)
@given(concurrency=counts, isl=counts, osl=counts, request_s=positive, gpus=st.integers(1, 1024))
def test_littles_law_is_the_performance_models(concurrency: int, isl: int, osl: int, request_s: float,
                                               gpus: int) -> None:
    shown = page_functions("05_prefill")["tokens_per_s_per_gpu"]
    prediction = Prediction(
        mode="prefill", model="m", gpu="g", topology="TP1", prefill_topology=None, decode_topology=None,
        n_prefill_workers=None, n_decode_workers=None, gpus_prefill=gpus, gpus_decode=0, mtp_tokens=0,
        acceptance=None, isl=isl, osl=osl, concurrency=concurrency, running=concurrency,
        request_rate=concurrency / request_s, ttft_ms=1.0, tpot_ms=1.0, roofline_tps=1.0, kv_capacity=1,
        kv_limited=False)
    assert shown(concurrency, isl, osl, request_s, gpus) == prediction.tps_per_gpu


@settings(max_examples=80, deadline=None)
@given(concurrency=st.integers(1, 64), tp=st.sampled_from([1, 2, 4, 8]), dp=st.integers(1, 16),
       pp=st.integers(1, 8))
def test_busy_share_is_the_chapters(concurrency: int, tp: int, dp: int, pp: int) -> None:
    shown = page_functions("05_prefill")["busy_share"]
    name = f"TP{tp}DP{dp}PP{pp}"
    frame = ch5.busy_share(Sweep("prefill", (), pd.DataFrame()), (concurrency,), topologies=[name])
    assert shown(concurrency, dp, pp) == frame[f"busy_at_{concurrency}"].iloc[0]


_labels = st.sampled_from(["TP8+EP", "TP4DP2+EP", "TP2DP4+EP", "DP16+EP", "TP1PP6+EP"])
_gpus = {"TP8+EP": 8, "TP4DP2+EP": 8, "TP2DP4+EP": 8, "DP16+EP": 16, "TP1PP6+EP": 6}
_points = st.lists(st.tuples(_labels, st.sampled_from([1, 2, 4, 64]),
                             st.sampled_from([100.0, 250.5, 250.5, 1000.0, 3000.25])), min_size=1, max_size=25)


@settings(max_examples=80, deadline=None)
@given(points=_points)
def test_best_per_concurrency_is_the_packages(points: list[tuple[str, int, float]]) -> None:
    shown = page_functions("05_prefill")["best_per_concurrency"]
    rows = [(dep, _gpus[dep], c, y) for dep, c, y in points]
    df = pd.DataFrame(rows, columns=["deployment", "gpus_total", "concurrency", "tps_per_gpu"])
    package = best_per_concurrency(df)
    assert shown(rows) == dict(zip(package["concurrency"], package["deployment"]))


# ------------------------------------------------------------------------------------------ chapter 6


@settings(max_examples=80, deadline=None)
@given(experts=st.integers(1, 1024), top_k=st.integers(1, 16), tokens=st.integers(0, 100_000))
def test_experts_touched_is_the_rooflines(experts: int, top_k: int, tokens: int) -> None:
    shown = page_functions("06_decode_experts")["experts_touched"]
    top_k = min(top_k, experts)
    if top_k == experts:  # every token reads every expert: log1p(-1) is -inf in both, guard the page's case
        return
    # pdtune.perfmodel.roofline.experts_touched(spec, [B]) reads E and k from the spec and calls this
    assert shown(experts, top_k, tokens) == touched(experts, top_k, tokens)


@settings(max_examples=60, deadline=None)
@given(per_rank=st.integers(1, 64), ranks=st.sampled_from([1, 2, 4, 8, 16]), top_k=st.integers(1, 16),
       tokens=st.integers(0, 10_000))
def test_busiest_rank_is_the_step_costs(per_rank: int, ranks: int, top_k: int, tokens: int) -> None:
    shown = page_functions("06_decode_experts")["busiest_rank"]
    experts = per_rank * ranks
    top_k = min(top_k, experts - 1)
    if top_k < 1:
        return
    # Engine._experts_work charges busiest_rank(E, k, EP tokens, EP) experts' bytes per GPU
    # (the page sums the binomial terms with math.comb, the package asks scipy's CDF: equal to rounding)
    assert shown(experts, top_k, tokens, ranks) == pytest.approx(busiest_rank(experts, top_k, tokens, ranks),
                                                                 rel=1e-9, abs=1e-9)


_models = ("llama-3.1-70b", "qwen3-next-80b-a3b", "deepseek-v3", "qwen3-235b-a22b", "gpt-oss-120b")


@cache
def _plan(model: str, tp: int, tokens: int) -> Any:
    return plan_state(load_model(model), tp=tp, max_model_len=tokens, kv_cache_dtype="fp8", vllm="0.33")


@settings(max_examples=80, deadline=None)
@given(model=st.sampled_from(_models), tp=st.sampled_from([1, 2, 4, 8]),
       tokens=st.sampled_from([1001, 4096, 9216, 33792]), kv_gib=st.floats(0, 200), dp=st.integers(1, 16))
def test_kv_room_is_vllms_max_concurrency_times_dp(model: str, tp: int, tokens: int, kv_gib: float,
                                                   dp: int) -> None:
    shown = page_functions("06_decode")["kv_room"]
    plan = _plan(model, tp, tokens)
    kv = int(kv_gib * 2**30)
    # pdtune.capacity.topology_capacity: requests_per_deployment = cap.max_concurrency * layout.dp
    assert shown(kv, plan.pool_block_bytes, plan.pool_blocks_per_request, dp) == \
        plan.capacity(kv).max_concurrency * dp


# ------------------------------------------------------------------------------------------ chapter 7

_coprime = st.tuples(st.integers(1, 8), st.integers(1, 8)).filter(lambda xy: math.gcd(*xy) == 1)


@settings(max_examples=80, deadline=None)
@given(prompts=counts, ttft=positive, requests=counts, tpot=positive, xy=_coprime,
       gpus_p=st.integers(1, 64), gpus_d=st.integers(1, 64), isl=counts, osl=st.integers(2, 4096))
def test_rate_match_is_the_packages(prompts: int, ttft: float, requests: int, tpot: float,
                                    xy: tuple[int, int], gpus_p: int, gpus_d: int, isl: int, osl: int) -> None:
    shown = page_functions("07_frontier")["rate_match"]
    x, y = xy
    common = {"source": "t", "path": "t", "model": "m", "mtp_tokens": 0, "isl": isl, "osl": osl}
    p = pd.DataFrame([{**common, "mode": "prefill", "topology": "TP2", "gpus_total": gpus_p,
                       "concurrency": prompts, "ttft_ms_p50": ttft}])
    d = pd.DataFrame([{**common, "mode": "decode", "topology": "TP4", "gpus_total": gpus_d,
                       "concurrency": requests, "tpot_ms_p50": tpot}])
    rows = rate_match(p, d, osl, max(x, y), isl=isl)
    row = rows[(rows["n_prefill_workers"] == x) & (rows["n_decode_workers"] == y)].iloc[0]
    # the chapter's P and D (prefill_rate of chapter 5, D of frontier-rate-match), as rate_match derives them
    prefill, decode = prompts * 1000.0 / ttft, requests * 1000.0 / (tpot * (osl - 1))
    rate, per_gpu = shown(prefill, decode, x, y, gpus_p, gpus_d, isl, osl)
    assert (rate * float(isl + osl), per_gpu) == (row["total_tps"], row["tps_per_gpu"])


@settings(max_examples=80, deadline=None)
@given(ttft=positive, sweep=st.lists(st.tuples(counts, positive), min_size=1, max_size=5,
                                     unique_by=lambda p: p[0]),
       xy=_coprime, osl=st.integers(2, 4096), at=st.data())
def test_clients_and_decode_tpot_at_are_the_packages(ttft: float, sweep: list[tuple[int, float]],
                                                     xy: tuple[int, int], osl: int, at: st.DataObject) -> None:
    """07_frontier_rate's clients and decode_tpot_at give rate_match's concurrency for every x : y and decode
    point, prefill-bound or not (pdtune.frontier.xpyd._match_pair, paced_tpot), to the last bit."""
    shown = page_functions("07_frontier_rate")
    x, y = xy
    common = {"source": "t", "path": "t", "model": "m", "mtp_tokens": 0, "isl": 100, "osl": osl}
    p = pd.DataFrame([{**common, "mode": "prefill", "topology": "TP2", "gpus_total": 2, "concurrency": 1,
                       "ttft_ms_p50": ttft}])
    d = pd.DataFrame([{**common, "mode": "decode", "topology": "TP4", "gpus_total": 4, "concurrency": c,
                       "tpot_ms_p50": t} for c, t in sweep])
    rows = rate_match(p, d, osl, max(x, y), isl=100)
    j = at.draw(st.integers(0, len(sweep) - 1))
    row = rows[(rows["n_prefill_workers"] == x) & (rows["n_decode_workers"] == y)
               & (rows["decode_concurrency"] == sweep[j][0])].iloc[0]
    points = sorted(sweep)
    prefill, decode = 1 * 1000.0 / ttft, sweep[j][0] * 1000.0 / (sweep[j][1] * (osl - 1))
    rate = min(x * prefill, y * decode)
    tpot = sweep[j][1]
    if x * prefill < y * decode:  # prefill-bound: the decode side at the rate it is fed
        tpot = min(shown["decode_tpot_at"](rate / y, points, osl), tpot)
    assert shown["clients"](rate, ttft, tpot, osl) == row["concurrency"]


_axis = st.sampled_from([1.0, 2.5, 2.5, 10.0, 33.3, 100.0, 180.0])


@settings(max_examples=80, deadline=None)
@given(points=st.lists(st.tuples(_axis, _axis), min_size=1, max_size=30), floor=_axis)
def test_upper_envelope_and_sla_pick_are_the_packages(points: list[tuple[float, float]], floor: float) -> None:
    shown = page_functions("07_frontier")
    df = pd.DataFrame([{"deployment": f"d{i}", "concurrency": i + 1, "tps_per_user": u, "tps_per_gpu": g,
                        "gpus_total": 8} for i, (u, g) in enumerate(points)])
    env = upper_envelope(df)
    assert shown["upper_envelope"](points) == list(zip(env["tps_per_user"], env["tps_per_gpu"]))
    pick = sla_pick(df, min_tps_per_user=floor)
    mine = shown["sla_pick"](shown["upper_envelope"](points), floor)
    assert mine == ((pick.tps_per_user, pick.tps_per_gpu) if pick.met else None)


def test_the_busiest_table_prints_its_expected_counts_with_decimals() -> None:
    # Expected experts (0.31 per GPU at one token) are not whole counts: a column the page's styler would
    # take for a count (a name ending in "experts") printed them as 0 and 2.
    from pdtune.chapters import decode as ch6
    from pdtune.chapters.display import _is_count

    table = ch6.busiest_table(load_model("qwen3.8-2.4t"), 32, touched, busiest_rank)
    assert not any(_is_count(c, table[c]) for c in ("experts_mean", "experts_busiest", "extra_percent"))
    assert table["experts_mean"].iloc[0] == pytest.approx(512 * (1 - (1 - 10 / 512)) / 32)
