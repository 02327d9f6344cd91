"""pdtune.sim.disagg: a prefill pool, the KV transfer of pdtune.transfer, the decode pool's own queue (modeled)."""

from __future__ import annotations

from dataclasses import replace
from functools import cache

import pytest

from pdtune.gpus import load_gpu
from pdtune.model import load_model
from pdtune.perfmodel.defaults import gpu_defaults
from pdtune.perfmodel.engine import EngineConfig, build_engine
from pdtune.sim import closed_loop
from pdtune.sim.disagg import simulate_disagg
from pdtune.topology import parse_topology
from pdtune.transfer import load_link

EFF = gpu_defaults("h200").efficiency


@cache
def engines():  # type: ignore[no-untyped-def]
    spec, gpu = load_model("llama-3.1-70b"), load_gpu("h200")
    cfg = EngineConfig(vllm="0.33", max_num_batched_tokens=8192, max_num_seqs=256, kv_cache_dtype="auto",
                       gpu_memory_utilization=0.9)
    return (build_engine(spec, gpu, parse_topology("TP4"), isl=4096, osl=256, config=cfg),
            build_engine(spec, gpu, parse_topology("TP2"), isl=4096, osl=256, config=cfg))


def test_every_request_goes_through_both_pools_and_pays_its_transfer() -> None:
    prefill, decode = engines()
    result = simulate_disagg(prefill, decode, 2, 1, closed_loop(12, 4096, 64, num_prompts=36), efficiency=EFF)
    assert result.gpus == 2 * 4 + 1 * 2
    row = result.to_row()
    assert row["mode"] == "disagg" and row["n_prefill_workers"] == 2 and row["gpus_prefill"] == 8
    assert row["modeled"] is True
    transfer = result.meta["kv_transfer_ms"][4096] / 1000
    for r in result.records:
        assert sum(r.chunk_tokens) == r.osl
        assert r.kv_transfer_s == pytest.approx(transfer)
        assert r.ttft > transfer  # the first token comes after the prefill, the hand-off and the transfer
    # Prefill engines held each prompt's blocks until its transfer ended, then freed them all.
    prefill_names = [n for n in result.timelines if n.startswith("prefill")]
    assert len(prefill_names) == 2


def test_a_slower_link_adds_its_transfer_time_to_ttft() -> None:
    """One client, so nothing queues: TTFT grows by the difference of the two transfers (pdtune.transfer's rule:
    bytes per decode rank over the link at the efficiency's ``link`` share, plus the link's latency)."""
    prefill, decode = engines()
    w = closed_loop(1, 4096, 32, num_prompts=3)
    eff = replace(EFF, request_overhead_s=0.0)
    nvlink = simulate_disagg(prefill, decode, 1, 1, w, efficiency=eff)
    nic = simulate_disagg(prefill, decode, 1, 1, w, efficiency=eff, link=load_link("h200", "scale_out"))
    d_transfer = (nic.meta["kv_transfer_ms"][4096] - nvlink.meta["kv_transfer_ms"][4096]) / 1000
    assert d_transfer > 0.005
    d_ttft = nic.stats()["ttft_ms_p50"] / 1000 - nvlink.stats()["ttft_ms_p50"] / 1000
    # The decode engine sees the finished load at its next step (async scheduling: up to a step or two later).
    assert d_transfer - 1e-9 <= d_ttft < d_transfer + 0.05  # equal up to rounding when nothing waits
