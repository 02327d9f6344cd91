"""pdtune.sim.scheduler, rule by rule: each test names the vLLM 0.33 function it follows and derives the numbers
by hand (vllm/v1/core/sched/scheduler.py, vllm/v1/core/kv_cache_manager.py, single_type_kv_cache_manager.py)."""

from __future__ import annotations

from pdtune.sim.kvcache import FULL, RECURRENT, SLIDING, GroupLayout, KVLayout
from pdtune.sim.request import SimRequest, Status
from pdtune.sim.scheduler import Scheduler, SchedulerConfig


def _sched(blocks: int = 200, groups: tuple[GroupLayout, ...] = (GroupLayout(FULL, 16),), **kw) -> Scheduler:
    base = dict(max_num_seqs=16, max_num_batched_tokens=2048, max_model_len=4096, async_scheduling=False)
    base.update(kw)
    return Scheduler(SchedulerConfig(**base), KVLayout(groups, blocks))


def _step(s: Scheduler, accepted: int = 0):  # type: ignore[no-untyped-def]
    """One synchronous EngineCore.step: schedule, then one sampled token (plus accepted drafts) per request whose
    step reaches the end of its known tokens."""
    plan = s.schedule()
    generated = {rid: 1 + (accepted if plan.spec_tokens.get(rid) else 0) for rid in plan.sampling}
    finished = s.update_from_output(plan, generated)
    if s.config.num_spec_tokens and not s.config.async_scheduling:
        s.update_draft_token_ids({rid: s.config.num_spec_tokens for rid in plan.num_scheduled_tokens})
    return plan, finished


def test_chunked_prefill_fills_the_budget_in_arrival_order() -> None:
    """Scheduler.schedule, WAITING loop: each new request gets min(num_tokens - num_computed_tokens, budget left).
    Budget 2048: 1000 + 1000 + 48. Next step, RUNNING loop first: two decode tokens, then the third prompt's rest,
    1000 - 48 = 952 (a chunk that does not reach the prompt's end samples nothing)."""
    s = _sched()
    for i in range(3):
        s.add_request(SimRequest(str(i), 1000, 8))
    plan, _ = _step(s)
    assert plan.num_scheduled_tokens == {"0": 1000, "1": 1000, "2": 48}
    assert sorted(plan.sampling) == ["0", "1"]
    plan, _ = _step(s)
    assert plan.num_scheduled_tokens == {"0": 1, "1": 1, "2": 952}


def test_a_new_request_is_admitted_only_when_its_whole_prompt_fits() -> None:
    """KVCacheManager.allocate_slots with full_sequence_must_fit (SchedulerConfig.scheduler_reserve_full_isl, on by
    default): 200 blocks, one is the null block, so 199 usable; a 1000-token prompt needs cdiv(1000, 16) = 63 blocks.
    Three fit (189); the fourth needs 63 > 10 free and waits, and nobody behind it is admitted (the loop breaks)."""
    s = _sched(max_num_batched_tokens=8192)
    for i in range(6):
        s.add_request(SimRequest(str(i), 1000, 8))
    plan, _ = _step(s)
    assert sorted(plan.num_scheduled_tokens) == ["0", "1", "2"]
    assert s.kv.num_free_blocks == 199 - 3 * 63
    assert [r.rid for r in s.waiting] == ["3", "4", "5"]


def test_the_newest_running_request_is_preempted_and_recomputed() -> None:
    """Scheduler.schedule's allocate_slots loop and _preempt_request: when a running request cannot get a block,
    self.running[-1] is preempted: its blocks freed, num_computed_tokens reset to 0, to the front of the waiting
    queue. 40 blocks (39 usable) of 16 tokens; three 208-token prompts take 13 blocks each = 39: the first decode
    step of request 0 computes token 209 (allocate_slots asks for cdiv(208 + 1, 16) = 14 blocks), so request 2
    (the newest) is preempted."""
    s = _sched(blocks=40, enable_prefix_caching=False)
    for i in range(3):
        s.add_request(SimRequest(str(i), 208, 50))
    plan, _ = _step(s)
    assert s.kv.num_free_blocks == 0
    plan, _ = _step(s)
    assert plan.preempted == ["2"]
    assert [r.rid for r in s.running] == ["0", "1"]
    victim = s.waiting[0]
    assert victim.rid == "2" and victim.status is Status.PREEMPTED
    assert victim.num_computed_tokens == 0 and victim.num_preemptions == 1
    # A step that preempted admits nobody (the WAITING loop runs only when nothing was preempted).
    assert "2" not in plan.num_scheduled_tokens


def test_a_resumed_request_finds_its_own_blocks_in_the_prefix_cache() -> None:
    """KVCacheManager.get_computed_blocks after a preemption: the victim's full blocks keep their hashes in the free
    queue until evicted, so on readmission its longest cached prefix is found again (at most num_tokens - 1 tokens,
    whole blocks). Request 2's 13 hashed blocks go to the back of the free queue tail first (BlockPool.free_blocks);
    requests 0 and 1 each take one block from the front in the same step, evicting blocks 12 and 11. On
    readmission it has 208 + 1 output = 209 tokens; blocks 0-10 (176 tokens) are found, 209 - 176 = 33 recomputed."""
    s = _sched(blocks=40)
    for i in range(3):
        s.add_request(SimRequest(str(i), 208, 3))
    _step(s)
    plan, _ = _step(s)
    assert plan.preempted == ["2"]
    for _ in range(6):
        plan, _ = _step(s)
        if "2" in plan.num_scheduled_tokens:
            break
    assert plan.num_scheduled_tokens["2"] == 209 - 176


def test_max_num_seqs_caps_running_requests() -> None:
    """Scheduler.schedule, WAITING loop: stops once len(self.running) >= max_num_running_reqs."""
    s = _sched(max_num_seqs=3, max_num_batched_tokens=4096)
    for i in range(5):
        s.add_request(SimRequest(str(i), 100, 4))
    plan, _ = _step(s)
    assert len(plan.num_scheduled_tokens) == 3 and len(s.waiting) == 2


def test_long_prefill_token_threshold_caps_each_chunk_unless_alone() -> None:
    """Scheduler.schedule: num_new_tokens = long_prefill_token_threshold when more than one request is running or
    waiting; with a single request the cap is 0 (nobody to starve)."""
    s = _sched(max_num_batched_tokens=1024, long_prefill_token_threshold=256)
    s.add_request(SimRequest("a", 1000, 4))
    s.add_request(SimRequest("b", 1000, 4))
    plan, _ = _step(s)
    assert plan.num_scheduled_tokens == {"a": 256, "b": 256}
    alone = _sched(max_num_batched_tokens=1024, long_prefill_token_threshold=256)
    alone.add_request(SimRequest("a", 1000, 4))
    plan, _ = _step(alone)
    assert plan.num_scheduled_tokens == {"a": 1000}


def test_async_scheduling_schedules_ahead_with_placeholders() -> None:
    """AsyncScheduler._update_after_schedule: a request that samples gets a placeholder per token it will produce,
    so the next schedule() (while the step runs) gives it its next decode token before the output is back. In the
    engine's loop (a queue of two batches) step 1's output comes back before step 3 is scheduled; with
    max_tokens = 2 step 3 skips the request: num_computed_tokens + 2 - placeholders = 101 + 2 - 1 >= 100 + 2."""
    s = _sched(async_scheduling=True)
    s.add_request(SimRequest("a", 100, 2))
    p1 = s.schedule()
    assert p1.num_scheduled_tokens == {"a": 100}
    assert s.requests["a"].num_output_placeholders == 1
    p2 = s.schedule()  # step 1 still in flight
    assert p2.num_scheduled_tokens == {"a": 1}
    s.update_from_output(p1, {"a": 1})
    p3 = s.schedule()
    assert p3.num_scheduled_tokens == {}
    finished = s.update_from_output(p2, {"a": 1})
    assert [r.rid for r in finished] == ["a"]


def test_rejected_drafts_roll_back_computed_tokens() -> None:
    """Scheduler.update_from_output with speculative decoding: a step verifies 1 + K tokens; of K = 3 drafts one is
    accepted (2 tokens generated), so num_computed_tokens goes back by the 2 rejected ones."""
    s = _sched(num_spec_tokens=3)
    s.add_request(SimRequest("a", 50, 20))
    _step(s)  # the prompt; then the runner proposes 3 drafts
    assert s.requests["a"].spec_tokens == 3
    plan = s.schedule()
    assert plan.num_scheduled_tokens == {"a": 4} and plan.spec_tokens == {"a": 3}
    before = s.requests["a"].num_computed_tokens  # 51 + 3 scheduled = 54
    s.update_from_output(plan, {"a": 2})
    r = s.requests["a"]
    assert before == 54 and r.num_computed_tokens == 54 - 2 and r.num_output_tokens == 3


def test_sliding_window_frees_blocks_outside_the_window() -> None:
    """SlidingWindowManager.get_num_skipped_tokens = computed - window + 1 and remove_skipped_blocks (called from
    allocate_slots on the processed tokens): window 128, blocks of 16. After a 512-token prompt and one decode
    step, 512 - 128 + 1 = 385 tokens are skipped: 24 whole blocks freed; 33 - 24 = 9 blocks held."""
    groups = (GroupLayout(SLIDING, 16, sliding_window=128, admission_cap=100), GroupLayout(FULL, 16))
    s = _sched(blocks=500, groups=groups, enable_prefix_caching=False)
    s.add_request(SimRequest("a", 512, 10))
    _step(s)
    assert s.kv.blocks_of("a") == (32, 32)
    _step(s)
    assert s.kv.blocks_of("a") == (33 - 24, 33)


def test_a_recurrent_group_holds_one_block_plus_one_per_draft() -> None:
    """MambaManager in mamba_cache_mode "none": block_size = max_model_len, so a request needs
    cdiv(tokens + block_size * num_speculative_blocks, block_size) = 1 + num_speculative_blocks blocks, all its life."""
    groups = (GroupLayout(RECURRENT, 4096, spec_blocks=2), GroupLayout(FULL, 272))
    s = _sched(blocks=100, groups=groups, enable_prefix_caching=False)
    s.add_request(SimRequest("a", 1000, 50))
    _step(s)
    assert s.kv.blocks_of("a") == (3, 4)  # cdiv(1000, 272) = 4
    for _ in range(20):
        _step(s)
    assert s.kv.blocks_of("a")[0] == 3


def test_a_new_decode_request_is_padded_to_the_draft_length() -> None:
    """Scheduler.schedule, WAITING loop: with speculative decoding a new request with one token left (a P/D
    decode request, a resumed one) is padded to 1 + K tokens of placeholder drafts when no prefill runs."""
    s = _sched(num_spec_tokens=2)
    s.add_request(SimRequest("a", 64, 10))
    _step(s)
    s.add_request(SimRequest("b", 1, 10))
    plan = s.schedule()
    assert plan.num_scheduled_tokens["b"] == 3 and "b" in plan.pad_spec and plan.spec_tokens["b"] == 2


def test_requests_finish_at_max_tokens_and_free_their_blocks() -> None:
    """check_stop: max_tokens output tokens (ignore_eos); _free_request returns every block."""
    s = _sched()
    s.add_request(SimRequest("a", 100, 3))
    done = []
    for _ in range(5):
        _, finished = _step(s)
        done += finished
    assert [r.rid for r in done] == ["a"] and done[0].num_output_tokens == 3
    assert s.kv.num_free_blocks == 199 and not s.has_unfinished_requests()
