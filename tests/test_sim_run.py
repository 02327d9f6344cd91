"""pdtune.sim end to end: conservation, the KV pool's bounds, ordered tails, the fast path's exactness, DP ranks,
speculative decoding, the tidy row."""

from __future__ import annotations

from dataclasses import replace
from functools import cache

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pdtune.gpus import load_gpu
from pdtune.model import load_model
from pdtune.perfmodel.defaults import gpu_defaults
from pdtune.perfmodel.engine import EngineConfig, build_engine
from pdtune.results.schema import TIDY_COLUMNS
from pdtune.sim import SimConfig, closed_loop, open_loop, simulate, simulate_disagg, trace
from pdtune.topology import parse_topology

EFF = gpu_defaults("h100").efficiency


@cache
def small_engine(util: float = 0.9, mnbt: int = 2048):  # type: ignore[no-untyped-def]
    """Llama-3.1-8B on one H100 (2 GiB of start-up overheads): quick to step; gpu_memory_utilization 0.225 leaves
    a KV cache of 431 blocks (about six 1024 + 128-token requests), 0.9 one of 23,000."""
    return build_engine(load_model("llama-3.1-8b"), load_gpu("h100"), parse_topology("TP1"), isl=1024, osl=128,
                        config=EngineConfig(vllm="0.33", max_num_batched_tokens=mnbt, max_num_seqs=256,
                                            gpu_memory_utilization=util, kv_cache_dtype="auto",
                                            overheads_gib=(1.0, 0.5, 0.5)))


def _check_run(result, pool_blocks: int) -> None:  # type: ignore[no-untyped-def]
    for r in result.records:
        assert sum(r.chunk_tokens) == r.osl  # every request finishes with exactly its output length
        assert r.t_send <= r.t_arrive <= r.t_first <= r.t_last
        assert all(a <= b for a, b in zip(r.chunks, r.chunks[1:], strict=False))
    for tl in result.timelines.values():
        assert max(tl.kv_used, default=0) <= pool_blocks - 1  # never more blocks than the pool (one is the null block)
    s = result.stats()
    assert result.stats() == s  # computed once, the same again
    # every request's inter-token gaps, taken in one diff over the run (SimResult.values) as one by one
    assert np.array_equal(result.values("itl"), np.concatenate([r.itls for r in result.records]))
    gaps = any(r.osl > 1 for r in result.records)
    for metric in ("ttft", "tpot", "itl", "e2e"):
        tails = [s[f"{metric}_ms_{q}"] for q in ("p99", "p90", "p50")]
        if metric in ("tpot", "itl") and not gaps:
            # Every measured request had one output token: no inter-token time exists (vllm bench leaves such
            # requests out of TPOT too), so the tails are NaN, not a number.
            assert all(np.isnan(tails))
            continue
        assert tails[0] >= tails[1] >= tails[2] > 0


workloads = st.tuples(st.integers(1, 24), st.integers(16, 1500), st.integers(2, 60), st.sampled_from([0.0, 0.5]),
                      st.booleans(), st.sampled_from([0.9, 0.225]))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads)
def test_conservation_pool_bounds_tails_and_the_fast_path(w) -> None:  # type: ignore[no-untyped-def]
    """Hypothesis over closed loops (concurrency, ISL, OSL, range ratio, async scheduling, a roomy or a tiny KV
    cache): every request ends with exactly its output tokens, KV blocks never exceed the pool, p99 >= p90 >= p50,
    and the bulk decode runs (pdtune.sim.fastpath) give the same run, chunk by chunk, as stepping every request."""
    c, isl, osl, ratio, asynchronous, util = w
    engine = small_engine(util)
    workload = closed_loop(c, isl, osl, num_prompts=3 * c, range_ratio=ratio)
    cfg = SimConfig(async_scheduling=asynchronous)
    fast = simulate(engine, workload, efficiency=EFF, config=cfg)
    slow = simulate(engine, workload, efficiency=EFF, config=replace(cfg, fast_path=False))
    blocks = fast.meta["kv_blocks_per_rank"]
    _check_run(fast, blocks)
    assert [(r.chunks, r.chunk_tokens, r.preemptions) for r in fast.records] == \
        [(r.chunks, r.chunk_tokens, r.preemptions) for r in slow.records]
    assert fast.timeline_frame().equals(slow.timeline_frame())


def test_preemption_under_a_tiny_cache_still_conserves_tokens() -> None:
    engine = small_engine(0.225)
    result = simulate(engine, closed_loop(16, 1000, 400, num_prompts=32), efficiency=EFF)
    assert result.preemptions > 0
    _check_run(result, result.meta["kv_blocks_per_rank"])


def test_mtp_drafts_keep_1_plus_k_times_a_tokens_per_step_on_average() -> None:
    """DeepSeek-V3 with one MTP draft token per step, acceptance 0.5 (SpecDecode: Binomial(K, A) accepted): a
    request's chunks hold 1 or 2 tokens, 1.5 on average, and each still ends with exactly its output length."""
    spec = load_model("deepseek-v3")
    gpu = load_gpu("h200")
    engine = build_engine(spec, gpu, parse_topology("TP8"), isl=512, osl=200, mtp_tokens=1,
                          config=EngineConfig(vllm="0.33", max_num_batched_tokens=8192, max_num_seqs=256))
    result = simulate(engine, closed_loop(8, 512, 200, num_prompts=16), efficiency=gpu_defaults("h200").efficiency,
                      config=SimConfig(acceptance=0.5))
    tokens = np.concatenate([np.asarray(r.chunk_tokens[1:]) for r in result.records])
    assert set(tokens) <= {1, 2}
    assert 1.45 < tokens.mean() < 1.55
    _check_run(result, result.meta["kv_blocks_per_rank"])


def test_moe_dp_ranks_step_in_lockstep_behind_the_load_balancer() -> None:
    """Mixtral on TP1DP4+EP: one lockstep engine of four ranks; vLLM's DP load balancer spreads 8 clients two
    per rank (equal scores go round robin)."""
    spec = load_model("mixtral-8x7b")
    gpu = load_gpu("h200")
    engine = build_engine(spec, gpu, parse_topology("TP1DP4+EP"), isl=256, osl=32,
                          config=EngineConfig(vllm="0.33", max_num_batched_tokens=4096, max_num_seqs=256))
    result = simulate(engine, closed_loop(8, 256, 32, num_prompts=8), efficiency=gpu_defaults("h200").efficiency)
    assert result.meta["dp_lockstep"] and list(result.timelines) == ["engine"]
    ranks = [r.engine for r in result.records]
    assert sorted(np.bincount(ranks, minlength=4)) == [2, 2, 2, 2]
    _check_run(result, result.meta["kv_blocks_per_rank"])


def test_dense_dp_ranks_are_independent_engines() -> None:
    engine = build_engine(load_model("llama-3.1-8b"), load_gpu("h100"), parse_topology("TP1DP2"), isl=512, osl=32,
                          config=EngineConfig(vllm="0.33", max_num_batched_tokens=2048, max_num_seqs=256))
    result = simulate(engine, closed_loop(6, 512, 32, num_prompts=12), efficiency=EFF)
    assert sorted(result.timelines) == ["rank0", "rank1"] and not result.meta["dp_lockstep"]
    assert {r.engine for r in result.records} == {0, 1}
    assert result.gpus == 2


def test_open_loop_and_trace_workloads_send_at_their_times() -> None:
    engine = small_engine()
    result = simulate(engine, open_loop(4.0, 300, 20, num_prompts=20), efficiency=EFF)
    sends = [r.t_send - result.records[0].t_send for r in result.records]
    assert max(sends) == pytest.approx(20 / 4.0 - (result.records[0].t_send - result.records[0].t_send), rel=0.3)
    rows = [(0.0, 100, 5), (0.5, 200, 10), (0.5, 50, 3), (2.0, 400, 8)]
    result = simulate(engine, trace(rows), efficiency=EFF)
    assert [round(r.t_send, 6) for r in result.records] == [0.0, 0.5, 0.5, 2.0]
    assert [r.osl for r in result.records] == [5, 10, 3, 8]


def test_the_tidy_row_is_labelled_modeled_and_has_the_schema() -> None:
    result = simulate(small_engine(), closed_loop(4, 512, 64, num_prompts=8), efficiency=EFF)
    row = result.to_row()
    assert row["modeled"] is True and row["source"] == "pdtune-sim"
    assert set(row) == set(TIDY_COLUMNS)
    frame = result.to_frame()
    assert list(frame.columns)[: len(TIDY_COLUMNS)] == list(TIDY_COLUMNS) and bool(frame.modeled.iloc[0])
    assert row["tps_per_user"] == pytest.approx(1000 / row["tpot_ms_p50"])
    assert row["tps_per_gpu"] == pytest.approx(row["total_tps"] / row["gpus_total"])


def test_a_step_cost_reused_with_other_factors_re_times_without_rebuilding_terms() -> None:
    """simulate(cost=...): the StepCost's cached terms survive; with_efficiency re-times with other factors (what a
    calibration loop re-evaluating trial factor sets needs). The same factors give the same run."""
    engine = small_engine()
    workload = closed_loop(8, 700, 60, num_prompts=24)
    first = simulate(engine, workload, efficiency=EFF)
    evaluated = first.cost.evaluations
    again = simulate(engine, workload, efficiency=EFF, cost=first.cost)
    assert again.cost.evaluations == evaluated  # no new terms for the same batches
    assert [r.chunks for r in again.records] == [r.chunks for r in first.records]
    slower = simulate(engine, workload, efficiency=replace(EFF, step_overhead_s=EFF.step_overhead_s + 0.005),
                      cost=first.cost)
    assert slower.stats()["tpot_ms_p50"] > first.stats()["tpot_ms_p50"] + 4


def test_the_fast_path_is_exact_with_several_engines() -> None:
    """Dense DP ranks are independent engines and a disaggregated deployment has two pools: a decode run never
    passes the earliest time another engine could finish a request (Clock.horizon), so the run is the same with
    and without bulk decode runs."""

    dp = build_engine(load_model("llama-3.1-8b"), load_gpu("h100"), parse_topology("TP1DP4"), isl=600, osl=80,
                      config=EngineConfig(vllm="0.33", max_num_batched_tokens=2048, max_num_seqs=256))
    w = closed_loop(24, 600, 80, num_prompts=72, range_ratio=0.3)
    runs = [simulate(dp, w, efficiency=EFF, config=SimConfig(fast_path=f)) for f in (True, False)]
    assert [r.chunks for r in runs[0].records] == [r.chunks for r in runs[1].records]
    one = small_engine()
    runs = [simulate_disagg(one, one, 1, 2, w, efficiency=EFF, config=SimConfig(fast_path=f)) for f in (True, False)]
    assert [r.chunks for r in runs[0].records] == [r.chunks for r in runs[1].records]


def test_a_sweep_shares_one_step_cost_cache() -> None:
    from pdtune.sim import simulate_sweep

    results = simulate_sweep(small_engine(), [2, 8], 512, 32, efficiency=EFF, num_prompts=16)
    assert [r.to_row()["concurrency"] for r in results] == [2, 8]
    assert results[0].cost._terms is results[1].cost._terms  # the second point reused the first's terms
    assert results[1].to_row()["tpot_ms_p50"] >= results[0].to_row()["tpot_ms_p50"]


@pytest.mark.parametrize("caching", [None, False])
def test_the_fast_path_is_exact_with_sliding_windows_under_kv_pressure(caching: bool | None) -> None:
    """gpt-oss-120b's sliding-window groups free the blocks that leave a request's 128-token window as it decodes:
    the fast path replays those frees and the new blocks in the scheduler's order (pdtune.sim.fastpath._window_plan),
    here on one H200 whose KV cache (gpu_memory_utilization 0.52: about 10,600 blocks) holds 52 of 96 clients'
    3000 + 300-token requests, so the waiting queue's head is admitted as frees make room and running requests
    are preempted; prefix caching on (freed blocks to the back of the free queue) and off (to its front)."""
    gpu = load_gpu("h200")
    engine = build_engine(load_model("gpt-oss-120b"), gpu, parse_topology("TP1"), isl=3000, osl=300,
                          config=EngineConfig(vllm="0.33", max_num_batched_tokens=8192, max_num_seqs=1024,
                                              gpu_memory_utilization=0.52, kv_cache_dtype="auto",
                                              overheads_gib=(5.6, 0.55, 0.0)))
    load = closed_loop(96, 3000, 300, num_prompts=192, harness="aiperf", warmups=32)
    fast, slow = (simulate(engine, load, efficiency=gpu_defaults("h200").efficiency,
                           config=SimConfig(fast_path=f, enable_prefix_caching=caching)) for f in (True, False))
    assert slow.preemptions > 0 and max(slow.timelines["engine"].waiting) > 0
    assert [(r.chunks, r.chunk_tokens, r.preemptions) for r in fast.records] == \
        [(r.chunks, r.chunk_tokens, r.preemptions) for r in slow.records]
    assert fast.timelines["engine"].kv_used == slow.timelines["engine"].kv_used
    # and the batch that timed every step (what the simulated fit's linear form groups) is the same
    assert np.array_equal(fast.timelines["engine"].batch_array(), slow.timelines["engine"].batch_array())


@pytest.mark.parametrize(("asynchronous", "caching", "model", "topology", "util"),
                         [(True, None, "llama-3.1-8b", "TP1", 0.9), (False, False, "llama-3.1-8b", "TP1", 0.9),
                          (True, None, "llama-3.1-8b", "TP1", 0.13), (True, False, "llama-3.1-8b", "TP1", 0.13),
                          (True, None, "mixtral-8x7b", "TP1DP2+EP", 0.9),
                          (True, False, "mixtral-8x7b", "TP1DP2+EP", 0.9),
                          (True, False, "gpt-oss-120b", "TP1", 0.9), (False, False, "gpt-oss-120b", "TP1", 0.9)])
def test_parked_decoders_give_the_same_run(asynchronous: bool, caching: bool | None, model: str, topology: str,
                                           util: float, monkeypatch: pytest.MonkeyPatch) -> None:
    """pdtune.sim.parking: with 48 clients and a spread of output lengths a request finishes and another is admitted
    almost every step, so bulk decode runs seldom apply, and most decode tokens are scheduled for parked requests
    (counted here through StepPlan.bulk). The run is the same, request by request and step by step, as stepping
    every request: sync and async scheduling, prefix caching on and off, a KV cache small enough that requests
    are preempted and find their own hashed blocks again when resumed (0.13 of an H200 leaves 1,246 blocks of
    16 tokens for 48 requests of up to 560 tokens), an MoE model's lockstep DP ranks, and
    gpt-oss-120b's sliding-window groups. With prefix caching off a parked request whose blocks run out takes the
    next one in place and stays parked (booked by the step that needs it with one full-attention group,
    ParkedDecoders.take_booked; ParkedDecoders._renew for sliding windows). Mutations caught: a booking one step
    late, a block count caught up one block short at unparking, a sliding window's park one step longer than the
    processed tokens allow (only sync scheduling, whose steps have no token in flight, meets that limit)."""
    from pdtune.sim.scheduler import Scheduler

    engine = build_engine(load_model(model), load_gpu("h200"), parse_topology(topology), isl=400, osl=160,
                          config=EngineConfig(vllm="0.33", max_num_batched_tokens=2048, max_num_seqs=256,
                                              gpu_memory_utilization=util, overheads_gib=(1.0, 0.5, 0.5)))
    load = closed_loop(48, 400, 160, num_prompts=144, range_ratio=0.5)
    parked: list[int] = []
    schedule = Scheduler.schedule

    def counting(self: Scheduler):  # type: ignore[no-untyped-def]
        plan = schedule(self)
        parked.append(plan.bulk)
        return plan

    monkeypatch.setattr(Scheduler, "schedule", counting)
    eff = gpu_defaults("h200").efficiency
    fast, slow = (simulate(engine, load, efficiency=eff,
                           config=SimConfig(fast_path=f, async_scheduling=asynchronous, enable_prefix_caching=caching))
                  for f in (True, False))
    outputs = sum(r.osl for r in slow.records)
    assert (slow.preemptions > 0) == (util < 0.5)
    assert sum(parked) > outputs / 2  # most decode tokens went through parked requests
    assert [(r.chunks, r.chunk_tokens, r.preemptions) for r in fast.records] == \
        [(r.chunks, r.chunk_tokens, r.preemptions) for r in slow.records]
    assert fast.timeline_frame().equals(slow.timeline_frame())
    for name, tl in fast.timelines.items():
        assert np.array_equal(tl.batch_array(), slow.timelines[name].batch_array())


def test_numpy_draws_an_array_of_binomials_as_one_call_each() -> None:
    """The premise of pdtune.sim.specrun: Generator.binomial over an array gives the numbers, in row-major order,
    and leaves the generator where one call per draw would."""
    for k, a in ((1, 0.7), (3, 0.6), (4, 0.3)):
        one, many = np.random.default_rng(5), np.random.default_rng(5)
        singles = [int(one.binomial(k, a)) for _ in range(600)]
        assert many.binomial(k, a, size=(200, 3)).ravel().tolist() == singles
        assert one.random() == many.random()


@settings(max_examples=80, deadline=None)
@given(drafts=st.lists(st.integers(-1, 4), max_size=40), acceptance=st.sampled_from([0.0, 0.3, 0.7, 1.0]),
       seed=st.integers(0, 3))
def test_a_steps_draws_at_once_are_the_draws_one_by_one(drafts: list[int], acceptance: float, seed: int) -> None:
    """SpecDecode.accepted (one array draw per stretch of equal draft counts, as EngineCore._finish takes a step's)
    gives each request what one Binomial(d, A) draw each would, none where d <= 0 or A is 0 or 1, and leaves the
    generator where those single draws would."""
    from pdtune.sim.engine import SpecDecode

    one = np.random.default_rng(seed)

    def single(d: int) -> int:
        if d <= 0 or acceptance <= 0:
            return 0
        return d if acceptance >= 1 else int(one.binomial(d, acceptance))

    many = SpecDecode(4, acceptance, seed)
    assert many.accepted(drafts) == [single(d) for d in drafts]
    assert one.random() == many.rng.random()


@pytest.mark.parametrize(("topology", "mtp", "clients", "asynchronous", "acceptance", "disagg"),
                         [("TP8", 1, 8, True, 0.5, False), ("TP8", 3, 8, False, 0.6, False),
                          ("TP8", 2, 1, True, 0.7, False), ("TP8", 1, 16, True, 1.0, False),
                          ("TP8", 1, 16, False, 0.0, False), ("TP2DP4+EP", 3, 16, True, 0.6, False),
                          ("TP2DP4+EP", 3, 16, False, 0.6, False), ("TP8", 3, 16, True, 0.6, True)])
def test_speculative_decode_runs_give_the_same_run(topology: str, mtp: int, clients: int, asynchronous: bool,
                                                   acceptance: float, disagg: bool,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """pdtune.sim.specrun: DeepSeek-V3 with K = 1-3 MTP drafts, prefix caching off as the plan's recipes run it,
    gives the same run with its bulk speculative runs as stepping every request, request by request (chunk times
    and the tokens each kept) and step by step (timeline and timing batch): sync and async scheduling, acceptance
    0, 1 (no draws) and in between, one client, lockstep DP ranks, and P/D (the decode engine's runs end at each
    KV arrival). Some runs must have applied."""
    import pdtune.sim.engine as engine_module

    applied: list[bool] = []
    real = engine_module.spec_run

    def counting(core, now, horizon):  # type: ignore[no-untyped-def]
        t = real(core, now, horizon)
        applied.append(t is not None)
        return t

    monkeypatch.setattr(engine_module, "spec_run", counting)
    engine = build_engine(load_model("deepseek-v3"), load_gpu("h200"), parse_topology(topology), isl=512, osl=300,
                          mtp_tokens=mtp, config=EngineConfig(vllm="0.33", max_num_batched_tokens=8192,
                                                              max_num_seqs=256))
    load = closed_loop(clients, 512, 300, num_prompts=3 * clients, range_ratio=0.5)
    eff = gpu_defaults("h200").efficiency
    runs = []
    for fast in (True, False):
        config = SimConfig(fast_path=fast, async_scheduling=asynchronous, enable_prefix_caching=False,
                           acceptance=acceptance)
        runs.append(simulate_disagg(engine, engine, 1, 1, load, efficiency=eff, config=config) if disagg
                    else simulate(engine, load, efficiency=eff, config=config))
    fast_run, slow = runs
    assert any(applied)
    _check_run(fast_run, fast_run.meta["kv_blocks_per_rank"])
    assert [(r.chunks, r.chunk_tokens) for r in fast_run.records] == [(r.chunks, r.chunk_tokens) for r in slow.records]
    assert fast_run.timeline_frame().equals(slow.timeline_frame())
    for name, tl in fast_run.timelines.items():
        assert np.array_equal(tl.batch_array(), slow.timelines[name].batch_array())


def test_statistics_without_itl_are_the_same_but_for_the_itl_keys() -> None:
    """SimResult.stats(itl=False), as the plan's simulated rows ask for them: every other statistic as stats()
    gives it, and no ITL key (no NaN standing in for one)."""
    engine = build_engine(load_model("llama-3.1-8b"), load_gpu("h200"), parse_topology("TP1"), isl=400, osl=160,
                          config=EngineConfig(vllm="0.33", max_num_batched_tokens=2048, max_num_seqs=256))
    result = simulate(engine, closed_loop(16, 400, 160, num_prompts=48, range_ratio=0.5),
                      efficiency=gpu_defaults("h200").efficiency)
    full, light = result.stats(), result.stats(itl=False)
    assert {k for k in full if k.startswith("itl_")} and not {k for k in light if k.startswith("itl_")}
    assert light == {k: v for k, v in full.items() if not k.startswith("itl_")}
    assert result.stats() == full  # the cache keeps the two apart
