"""pdtune.sim.stepcost: the cached, affine step cost equals Engine.step_time on every batch (to rounding), for dense,
hybrid, MoE, DP and PP engines, and sliding-window models (affine once the window's own fields are held apart);
a run of decode steps timed at once equals the steps timed one by one."""

from __future__ import annotations

import random

import pytest

from pdtune.gpus import load_gpu
from pdtune.model import load_model
from pdtune.perfmodel.aggregated import agg_config
from pdtune.perfmodel.defaults import gpu_defaults
from pdtune.perfmodel.engine import Batch, build_engine
from pdtune.sim.stepcost import StepCost
from pdtune.topology import parse_topology

CASES = [("llama-3.1-70b", "TP4", "h200"), ("qwen3-next-80b-a3b", "TP2", "h200"),
         ("deepseek-v3", "TP4DP2+EP", "h200"), ("llama-3.1-70b", "TP2PP2", "h100"), ("gpt-oss-120b", "TP2", "h200")]


@pytest.mark.parametrize(("model", "topology", "gpu"), CASES)
def test_cached_step_cost_equals_the_engine_model(model: str, topology: str, gpu: str) -> None:
    g = load_gpu(gpu)
    engine = build_engine(load_model(model), g, parse_topology(topology), isl=1024, osl=128,
                          config=agg_config(g, None, "0.33"))
    eff = gpu_defaults(gpu).efficiency
    cost = StepCost(engine, eff)
    rng = random.Random(1)
    for _ in range(60):
        seqs = rng.randint(1, 64)
        prefill = rng.choice([0, 0, rng.randint(1, 4000)])
        tokens = seqs + prefill
        kv = rng.randint(0, 100_000)
        pairs = kv + rng.randint(0, 10**6)
        batch = Batch(tokens=tokens, seqs=seqs, prefill_tokens=prefill, attn_pairs=pairs,
                      decode_pairs=rng.randint(0, pairs), kv_tokens_read=kv, logits=seqs,
                      ep_tokens=tokens * engine.topology.dp)
        direct = sum(s.total for s in engine.stage_times(batch, eff))
        assert cost.seconds(batch) == pytest.approx(direct, rel=1e-12)
    assert not cost.exact  # every engine here is affine (sliding windows in six fields)
    assert cost.evaluations < 60 * 0.9 * 4  # cached: fewer stage_terms calls than batches x (base + slopes)
    # The step's terms from the cache are the engine's own (what the simulated fit re-times).
    for _ in range(10):
        seqs = rng.randint(1, 64)
        kv = rng.randint(0, 200_000)
        batch = Batch(tokens=seqs, seqs=seqs, attn_pairs=kv + seqs, decode_pairs=kv + seqs, kv_tokens_read=kv,
                      logits=seqs, ep_tokens=seqs * engine.topology.dp)
        assert cost.terms(batch).seconds(eff) == pytest.approx(sum(s.total for s in engine.stage_times(batch, eff)),
                                                               rel=1e-12)


@pytest.mark.parametrize(("model", "topology", "gpu"), [c for c in CASES if "PP" not in c[1]])
def test_a_decode_run_timed_at_once_equals_its_steps(model: str, topology: str, gpu: str) -> None:
    """The fast path's vectorised timing: k decode steps of n sequences, the j-th reading kv0 + n j cached tokens
    (a sliding-window model crosses its window on the way)."""
    g = load_gpu(gpu)
    engine = build_engine(load_model(model), g, parse_topology(topology), isl=1024, osl=128,
                          config=agg_config(g, None, "0.33"))
    cost = StepCost(engine, gpu_defaults(gpu).efficiency)
    n, kv0, k, ep = 24, 2000.0, 300, 24.0 * engine.topology.dp
    run = cost.decode_run_seconds(n, kv0, k, ep)
    for j in (0, 1, 57, 150, 299):
        kv = kv0 + n * j
        one = sum(cost.stage_seconds(n, n, 0, kv + n, kv + n, kv, n, ep, 1, 0))
        assert run[j] == pytest.approx(one, rel=1e-12)


def test_with_efficiency_shares_the_terms() -> None:
    g = load_gpu("h200")
    engine = build_engine(load_model("llama-3.1-70b"), g, parse_topology("TP4"), isl=1024, osl=128,
                          config=agg_config(g, None, "0.33"))
    eff = gpu_defaults("h200").efficiency
    cost = StepCost(engine, eff)
    batch = Batch(tokens=64, seqs=64, attn_pairs=70_000, decode_pairs=70_000, kv_tokens_read=69_000, logits=64,
                  ep_tokens=64)
    cost.seconds(batch)
    n = cost.evaluations
    other = cost.with_efficiency(gpu_defaults("h100").efficiency)
    assert other.seconds(batch) == pytest.approx(engine.step_time(batch, gpu_defaults("h100").efficiency).total, rel=1e-12)
    assert other.evaluations == 0 and cost.evaluations == n  # no new terms were built
