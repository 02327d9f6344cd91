"""``KVCacheManager.allocate_slots`` returns at once when a request's blocks already hold its slots and nothing
falls out of a window (most decode steps of a sliding-window or recurrent layout). The shortcut must decide
exactly as the full rules do: here the same random calls run twice, once with the shortcut and once with its
limits dropped before every call (the full path), and the pool and every request's blocks agree after each."""

from __future__ import annotations

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
