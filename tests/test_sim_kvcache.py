"""Properties of pdtune.sim's scheduler and KV blocks over random workloads (hypothesis): blocks held plus free
blocks always make the pool, the pool is never overdrawn, every request ends with exactly its output tokens,
and every block comes back. Plus the block pool's free-queue order (vLLM's BlockPool)."""

from __future__ import annotations

from collections import deque

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from pdtune.sim.kvcache import FULL, RECURRENT, SLIDING, BlockPool, GroupLayout, KVLayout
from pdtune.sim.request import SimRequest
from pdtune.sim.scheduler import Scheduler, SchedulerConfig

LAYOUTS = {
    "full": (GroupLayout(FULL, 16),),
    "sliding": (GroupLayout(SLIDING, 16, sliding_window=64, admission_cap=40), GroupLayout(FULL, 16)),
    "hybrid": (GroupLayout(RECURRENT, 4096, spec_blocks=0), GroupLayout(FULL, 32)),
}

requests = st.lists(st.tuples(st.integers(1, 700), st.integers(1, 80), st.integers(0, 30), st.integers(0, 2)),
                    min_size=1, max_size=14)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests, st.sampled_from(sorted(LAYOUTS)), st.integers(80, 400), st.booleans(), st.sampled_from([0, 2]),
       st.sampled_from([256, 1024]), st.booleans())
def test_blocks_are_conserved_and_every_request_finishes(reqs, layout, blocks, asynchronous, k, budget,
                                                         caching) -> None:  # type: ignore[no-untyped-def]
    groups = LAYOUTS[layout]
    # vLLM refuses at start-up a pool that cannot hold one request of max_model_len (kv_cache_planning.py,
    # check_enough_kv_cache_memory): 1,024 tokens are 64 full blocks of 16 plus up to the sliding group's
    # admission cap of 40, and the null block; a smaller pool would leave such a request waiting for ever.
    assume(layout != "sliding" or blocks >= 64 + 40 + 1)
    caching = caching and layout != "hybrid"
    cfg = SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=budget, max_model_len=1024,
                          async_scheduling=asynchronous, enable_prefix_caching=caching, num_spec_tokens=k,
                          num_lookahead_tokens=k, num_prefill_lookahead=1 if k else 0, hash_lookahead=bool(k))
    s = Scheduler(cfg, KVLayout(groups, blocks))
    pending = deque(sorted(((tick, i, p, o, pre) for i, (p, o, tick, pre) in enumerate(reqs)), key=lambda x: x[0]))
    made: dict[str, SimRequest] = {}
    depth = 2 if asynchronous else 1
    queue: deque = deque()
    tick = 0
    for _ in range(20000):
        while pending and pending[0][0] <= tick:
            _, i, p, o, pre = pending.popleft()
            r = SimRequest(f"r{i}", p, o, prefix_id=pre if pre else None, prefix_len=min(p, 128) if pre else 0)
            made[r.rid] = r
            s.add_request(r)
        if s.has_requests() and len(queue) < depth:
            plan = s.schedule()
            s.kv.check()
            assert s.kv.num_free_blocks >= 0
            queue.appendleft(plan)
            if len(queue) < depth and (plan.total_tokens or s.has_requests()):
                tick += 1
                continue
        elif not queue:
            if not pending:
                break
            tick = pending[0][0]
            continue
        plan = queue.pop()
        generated = {rid: 1 + (0 if rid in plan.pad_spec else min(1, plan.spec_tokens.get(rid, 0)))
                     for rid in plan.sampling}
        s.update_from_output(plan, generated)
        s.kv.check()
        if k and not asynchronous and plan.total_tokens:
            s.update_draft_token_ids({rid: k for rid in plan.num_scheduled_tokens})
        tick += 1
    else:
        raise AssertionError("the loop did not finish")
    assert not s.has_unfinished_requests()
    assert all(r.num_output_tokens == r.max_tokens for r in made.values())
    assert s.kv.num_free_blocks == blocks - 1  # every block is back (hashed or not)


def test_the_free_queue_reuses_unhashed_blocks_first_and_evicts_the_oldest_hash() -> None:
    """BlockPool.free_blocks: blocks without a hash go to the front of the free queue, hashed ones to the back;
    get_new_blocks takes from the front, evicting the hashes of the blocks it takes."""
    pool = BlockPool(11)  # 10 usable
    pool.take(10)
    a = pool.insert(("r", "a", 0, 0), 1)
    b = pool.insert(("r", "b", 0, 0), 1)
    pool.release(a)  # hashed: to the back
    pool.release(b)
    pool.give_unhashed(2)  # unhashed: to the front
    assert pool.num_free == 4
    pool.take(2)  # the unhashed ones
    assert pool.lookup(("r", "a", 0, 0)) is a and pool.lookup(("r", "b", 0, 0)) is b
    pool.take(1)  # the oldest hashed block: a's
    assert pool.lookup(("r", "a", 0, 0)) is None and pool.lookup(("r", "b", 0, 0)) is b
    pool.touch(b)  # a hit takes it out of the free queue
    assert pool.num_free == 0 and b.ref == 1
