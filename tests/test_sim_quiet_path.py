"""``KVCacheManager.allocate_slots`` returns at once when a request's blocks already hold its slots and nothing
falls out of a window (most decode steps of a sliding-window or recurrent layout). The shortcut must decide
exactly as the full rules do: here the same random calls run twice, once with the shortcut and once with its
limits dropped before every call (the full path), and the pool and every request's blocks agree after each."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdtune.sim.kvcache import FULL, RECURRENT, SLIDING, GroupLayout, KVCacheManager, KVLayout
from pdtune.sim.request import SimRequest, Status

GROUPS = {
    # gpt-oss-120b's shape: a full group beside a sliding one (window 128, 16-token blocks)
    "full+sliding": (GroupLayout(FULL, 16), GroupLayout(SLIDING, 16, sliding_window=128)),
    # a window shorter than a block, with extra retained tokens
    "sliding-short": (GroupLayout(SLIDING, 16, sliding_window=5, extra_retained=3), GroupLayout(FULL, 16)),
    # a recurrent group (one state block per request, plus a speculative one) beside full attention
    "full+recurrent": (GroupLayout(FULL, 32), GroupLayout(RECURRENT, 32, spec_blocks=1)),
}


def _run(groups: tuple[GroupLayout, ...], blocks: int, calls: list[tuple[int, int, int]], forget: bool
         ) -> list[tuple[object, ...]]:
    kv = KVCacheManager(KVLayout(groups, blocks), max_model_len=4096, enable_caching=False)
    reqs = [SimRequest(f"r{i}", prompt, 10_000) for i, prompt in enumerate((40, 300, 7))]
    seen = []
    for who, tokens, in_flight in calls:
        r = reqs[who]
        if r.status is Status.FINISHED:
            continue
        if forget:
            kv.forget_limits()
        r.num_in_flight_tokens = min(in_flight, r.num_computed_tokens)
        ok = kv.allocate_slots(r, tokens)
        if ok:
            r.status = Status.RUNNING
            r.num_computed_tokens += tokens
            r.num_output_tokens = max(0, r.num_computed_tokens - r.num_prompt_tokens)
        elif r.num_computed_tokens:
            kv.free(r)  # as a preemption does: back to the pool, counters reset
            r.num_computed_tokens = r.num_output_tokens = 0
            r.status = Status.PREEMPTED
        seen.append((ok, kv.num_free_blocks, *(kv.blocks_of(q.rid) for q in reqs)))
    return seen


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(sorted(GROUPS)), st.integers(20, 200),
       st.lists(st.tuples(st.integers(0, 2), st.sampled_from([1, 1, 1, 2, 17, 64]), st.integers(0, 2)),
                min_size=1, max_size=250))
def test_the_shortcut_decides_as_the_full_rules(name: str, blocks: int, calls: list[tuple[int, int, int]]) -> None:
    groups = GROUPS[name]
    assert _run(groups, blocks, calls, forget=False) == _run(groups, blocks, calls, forget=True)


def test_a_window_frees_its_blocks_while_decoding() -> None:
    """The shortcut does not skip the frees: decoding 600 tokens one at a time behind a 128-token window holds
    the window's blocks (plus the one being filled), not 600 tokens' worth (vllm/v1/core/single_type_kv_cache_manager.py,
    SlidingWindowManager.get_num_skipped_tokens: computed - window + 1 tokens are skipped)."""
    kv = KVCacheManager(KVLayout(GROUPS["full+sliding"], 400), max_model_len=4096, enable_caching=False)
    r = SimRequest("r", 1, 10_000)
    for _ in range(600):
        assert kv.allocate_slots(r, 1)
        r.num_computed_tokens += 1
    # 600 computed tokens: full group cdiv(600, 16) = 38 blocks; sliding group skips 600 - 1 - 128 + 1 = 472
    # tokens (processed = 599 at the last call, skipped 599 - 128 + 1 = 472 -> 29 whole blocks), holds 38 - 29 = 9
    assert kv.blocks_of("r") == (38, 9)


def test_one_token_steps_meet_every_boundary() -> None:
    """Decoding one token per call lands on every block and window boundary of each layout."""
    for name, groups in GROUPS.items():
        calls = [(i % 3, 1, i % 2) for i in range(900)]
        assert _run(groups, 120, calls, forget=False) == _run(groups, 120, calls, forget=True), name


def test_the_scheduler_s_inlined_allocation_decides_as_allocate_slots(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """``Scheduler.schedule`` skips the ``allocate_slots`` call for a running request whose blocks already hold the
    step's slots (full-attention groups: ``held * block_size >= slot``; other layouts: the quiet limits above).
    Every step through the scheduler (no bulk runs), with the shortcut and with every call sent to
    ``allocate_slots``: a full-attention cache small enough to preempt, and gpt-oss-120b's sliding windows under
    KV pressure; the requests, their preemptions and the blocks used at every step agree."""
    from pdtune.gpus import load_gpu
    from pdtune.model import load_model
    from pdtune.perfmodel.defaults import gpu_defaults
    from pdtune.perfmodel.engine import EngineConfig, build_engine
    from pdtune.sim import SimConfig, closed_loop, simulate
    from pdtune.sim.scheduler import Scheduler
    from pdtune.topology import parse_topology

    h100, h200 = load_gpu("h100"), load_gpu("h200")
    dense = build_engine(load_model("llama-3.1-8b"), h100, parse_topology("TP1"), isl=1024, osl=128,
                         config=EngineConfig(vllm="0.33", max_num_batched_tokens=2048, max_num_seqs=256,
                                             gpu_memory_utilization=0.225, kv_cache_dtype="auto",
                                             overheads_gib=(1.0, 0.5, 0.5)))
    windowed = build_engine(load_model("gpt-oss-120b"), h200, parse_topology("TP1"), isl=3000, osl=300,
                            config=EngineConfig(vllm="0.33", max_num_batched_tokens=8192, max_num_seqs=1024,
                                                gpu_memory_utilization=0.52, kv_cache_dtype="auto",
                                                overheads_gib=(5.6, 0.55, 0.0)))
    cases = [(dense, closed_loop(16, 1000, 400, num_prompts=32), gpu_defaults("h100").efficiency),
             (windowed, closed_loop(96, 3000, 300, num_prompts=192, harness="aiperf", warmups=32),
              gpu_defaults("h200").efficiency)]
    for engine, load, eff in cases:
        runs = []
        for inline in (True, False):
            monkeypatch.setattr(Scheduler, "inline_allocation", inline)
            runs.append(simulate(engine, load, efficiency=eff, config=SimConfig(fast_path=False)))
        assert runs[0].preemptions > 0
        assert [(r.chunks, r.chunk_tokens, r.preemptions) for r in runs[0].records] == \
            [(r.chunks, r.chunk_tokens, r.preemptions) for r in runs[1].records]
        assert runs[0].timelines["engine"].kv_used == runs[1].timelines["engine"].kv_used


def _drive(groups: tuple[GroupLayout, ...], blocks: int, seed: int, caching: bool) -> list[tuple[object, ...]]:
    """vLLM's async engine loop on one scheduler (a batch in flight while the next is scheduled), random
    requests: every step's tokens per request, preemptions and free blocks."""
    import random
    from collections import deque

    from pdtune.sim.scheduler import Scheduler, SchedulerConfig

    sched = Scheduler(SchedulerConfig(max_num_seqs=16, max_num_batched_tokens=256, max_model_len=4096,
                                      enable_prefix_caching=caching), KVLayout(groups, blocks))
    rng = random.Random(seed)
    for i in range(40):
        sched.add_request(SimRequest(f"r{i}", rng.randint(3, 400), rng.randint(1, 300)))
    in_flight: deque = deque()
    seen: list[tuple[object, ...]] = []
    while sched.has_requests() and len(seen) < 20_000:
        plan = sched.schedule()
        in_flight.append(plan)
        seen.append((tuple(plan.num_scheduled_tokens.items()), tuple(plan.preempted), sched.kv.num_free_blocks))
        while len(in_flight) == 2 or (in_flight and not plan.num_scheduled_tokens):
            done = in_flight.popleft()
            sched.update_from_output(done, dict.fromkeys(done.sampling, 1))
    assert not sched.has_unfinished_requests()
    return seen


@pytest.mark.parametrize("name", sorted(GROUPS))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_inlined_allocation_frees_and_takes_at_the_same_steps(name: str, seed: int, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The same check on the layouts above driven directly, windows not aligned with blocks included (a window of
    5 tokens plus 3 retained frees its blocks at steps a full group takes none): every step agrees."""
    from pdtune.sim.scheduler import Scheduler

    caching = GROUPS[name][1].kind != RECURRENT
    runs = []
    for inline in (True, False):
        monkeypatch.setattr(Scheduler, "inline_allocation", inline)
        runs.append(_drive(GROUPS[name], 160, seed, caching))
    assert runs[0] == runs[1]


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["full+sliding", "sliding-short"]), st.integers(0, 3),
       st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2), st.booleans()), min_size=1, max_size=400))
def test_a_parked_renewal_allocates_as_allocate_slots(name: str, lookahead: int,
                                                      calls: list[tuple[int, int, bool]]) -> None:
    """``KVCacheManager.grow_running`` (a parked decoder's renewal, ``ParkedDecoders._renew``) is ``allocate_slots``
    of one token with the checks that cannot fail there left out (vllm/v1/core/kv_cache_manager.py,
    ``KVCacheManager.allocate_slots``: ``remove_skipped_blocks`` on the processed tokens, then the new blocks of the
    slot). The same one-token steps, with ``in_flight`` tokens not yet processed and, now and then, the quiet
    limits dropped: the pool, every request's blocks and the quiet limits agree after each call."""
    groups = GROUPS[name]
    kvs = [KVCacheManager(KVLayout(groups, 10_000), max_model_len=4096, enable_caching=False) for _ in range(2)]
    reqs = [[SimRequest(f"r{i}", prompt, 10_000) for i, prompt in enumerate((40, 300, 7))] for _ in range(2)]
    for kv, rs in zip(kvs, reqs, strict=True):
        for r in rs:  # the prompts, as admission allocates them
            assert kv.allocate_slots(r, r.num_prompt_tokens, num_lookahead_tokens=lookahead)
            r.num_computed_tokens = r.num_prompt_tokens
            r.status = Status.RUNNING
    for who, in_flight, forget in calls:
        for way, (kv, rs) in enumerate(zip(kvs, reqs, strict=True)):
            if forget:
                kv.forget_limits()
            r = rs[who]
            r.num_in_flight_tokens = min(in_flight, r.num_computed_tokens)
            if way == 0:
                assert kv.allocate_slots(r, 1, num_lookahead_tokens=lookahead)
            else:
                kv.grow_running(r.rid, r.num_computed_tokens, r.num_in_flight_tokens, lookahead)
            r.num_computed_tokens += 1
        assert kvs[0].num_free_blocks == kvs[1].num_free_blocks
        assert [kvs[0].blocks_of(r.rid) for r in reqs[0]] == [kvs[1].blocks_of(r.rid) for r in reqs[1]]
        assert kvs[0]._quiet == kvs[1]._quiet
