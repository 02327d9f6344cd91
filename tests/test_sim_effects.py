"""The scheduler effects issue 23 names, shown by pdtune.sim on a small deployment (modeled): Llama-3.1-8B on one
H100 with a deliberately small KV cache, closed loops of clients (``vllm bench serve --max-concurrency C``)."""

from __future__ import annotations

from dataclasses import replace
from functools import cache

import numpy as np

from pdtune.gpus import load_gpu
from pdtune.model import load_model
from pdtune.perfmodel.defaults import gpu_defaults
from pdtune.perfmodel.engine import EngineConfig, build_engine
from pdtune.sim import SimConfig, closed_loop, simulate
from pdtune.topology import parse_topology

EFF = gpu_defaults("h100").efficiency


@cache
def engine(util: float, mnbt: int):  # type: ignore[no-untyped-def]
    return build_engine(load_model("llama-3.1-8b"), load_gpu("h100"), parse_topology("TP1"), isl=1024, osl=128,
                        config=EngineConfig(vllm="0.33", max_num_batched_tokens=mnbt, max_num_seqs=256,
                                            gpu_memory_utilization=util, kv_cache_dtype="auto",
                                            overheads_gib=(1.0, 0.5, 0.5)))


def test_above_the_kv_limit_tpot_is_flat_and_ttft_grows_linearly() -> None:
    """KV-limited admission: 1038 blocks of 16 tokens hold about 14 requests of 1024 + 128 tokens. Above that,
    more clients only wait in vLLM's waiting queue (a prompt is admitted when its blocks fit): the running batch
    stays at the KV limit, so TPOT stays flat, and each extra client adds its share of queueing to TTFT: linear in
    the concurrency. (Below the limit, TTFT is a few prefill steps.)"""
    e = engine(0.24, 2048)
    concurrencies = [32, 48, 64, 96]
    tpot, ttft, running = [], [], []
    for c in concurrencies:
        r = simulate(e, closed_loop(c, 1024, 128, num_prompts=8 * c), efficiency=EFF)
        s = r.stats()
        tpot.append(s["tpot_ms_p50"])
        ttft.append(s["ttft_ms_p50"])
        running.append(r.summary()["timeline"]["engine"]["running_mean"])
    assert max(running) < 15  # the KV limit, not the clients, sets the batch
    assert (max(tpot) - min(tpot)) / min(tpot) < 0.02  # flat
    slope, intercept = np.polyfit(concurrencies, ttft, 1)
    fit = np.polyval([slope, intercept], concurrencies)
    r2 = 1 - np.sum((np.asarray(ttft) - fit) ** 2) / np.sum((np.asarray(ttft) - np.mean(ttft)) ** 2)
    assert slope > 0 and r2 > 0.98  # linear
    assert ttft[-1] > 5000  # and large: seconds of queueing
    below = simulate(e, closed_loop(8, 1024, 128, num_prompts=64), efficiency=EFF).stats()
    assert below["ttft_ms_p50"] < ttft[0] / 5


def test_cohorts_make_tpot_lower_at_high_than_at_low_concurrency() -> None:
    """Cohorts with a fixed OSL: 512 blocks hold about 7 requests. At 64 clients the waiting queue is never
    empty; requests admitted together in one step (7 x 1024 tokens fit the 8192-token budget) decode in
    lockstep, finish in the same step, and free their blocks for the next cohort, admitted together again: the
    decode phase carries no prefill, so TPOT is the pure decode step while TTFT is seconds of queueing. At 6
    clients nothing queues, and the front end's spread (request overhead 0.1 s with a coefficient of variation
    of 1, the dispersion the steady-state model's arrival_clustering stands for) scatters the closed loop's
    cohorts: each prompt arrives alone and its prefill step stalls the others' decoding. TPOT(64) < TPOT(6)."""
    e = engine(0.227, 8192)
    eff = replace(EFF, request_overhead_s=0.1)
    spread = SimConfig(overhead_cv=1.0)
    low = simulate(e, closed_loop(6, 1024, 128, num_prompts=300), efficiency=eff, config=spread).stats()
    high = simulate(e, closed_loop(64, 1024, 128, num_prompts=384), efficiency=eff, config=spread).stats()
    assert high["tpot_ms_p50"] < low["tpot_ms_p50"]
    assert high["ttft_ms_p50"] > 5000 > 10 * low["ttft_ms_p50"]
    # The mechanism: without the spread, the 6 clients stay one cohort, and their TPOT is the lower one.
    tight = simulate(e, closed_loop(6, 1024, 128, num_prompts=300), efficiency=eff).stats()
    assert tight["tpot_ms_p50"] < low["tpot_ms_p50"]


def test_p99_is_at_least_p90_is_at_least_p50_on_every_row() -> None:
    """Every simulated row's tails are ordered (percentiles of the same per-request values)."""
    e = engine(0.24, 2048)
    for c in (1, 3, 16, 40):
        s = simulate(e, closed_loop(c, 1024, 128, num_prompts=4 * c, range_ratio=0.5), efficiency=EFF).stats()
        for metric in ("ttft", "tpot", "itl", "e2e"):
            assert s[f"{metric}_ms_p99"] >= s[f"{metric}_ms_p90"] >= s[f"{metric}_ms_p50"]
