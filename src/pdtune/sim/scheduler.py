"""vLLM 0.33's V1 scheduler, step by step: ``Scheduler.schedule`` and ``Scheduler.update_from_output``.

``vllm/v1/core/sched/scheduler.py`` has no prefill or decode phase: each request has ``num_computed_tokens``
and ``num_tokens_with_spec`` (prompt + outputs + draft tokens), and each step gives requests tokens so the first
catches up with the second, under a token budget of ``max_num_batched_tokens``. The rules followed here, each
named for the place in vLLM it comes from (the tests in ``tests/test_sim_scheduler.py`` pin each one, and
``tests/test_sim_traces.py`` replays traces recorded from vLLM's own scheduler):

1. **Running requests first** (``schedule``, the RUNNING loop), in the order they were admitted: each gets
   ``num_tokens_with_spec + num_output_placeholders - num_computed_tokens`` tokens (a decode token plus its draft
   tokens, or the next prefill chunk), cut to ``long_prefill_token_threshold`` when more than one request is
   queued or running, to the budget, and to ``max_model_len - num_computed_tokens - 1``. Async scheduling
   skips a request whose last step already reaches ``max_tokens``.
2. **Preemption** (the ``allocate_slots`` retry loop): when a running request's blocks do not fit, the
   *newest* running request (``self.running[-1]``) is preempted, its blocks freed and its computed tokens reset
   to 0 (recomputed later, ``_preempt_request``), and it goes to the *front* of the waiting queue; if the
   request itself is the newest, it is preempted and the loop stops.
3. **Waiting requests** (the WAITING loop), only in a step that preempted nobody, first come first served,
   while the budget lasts and fewer than ``max_num_seqs`` run: prefix-cache hits first
   (``get_computed_blocks``), then the rest of the prompt, chunked to the budget (chunked prefill) and the
   threshold; admitted only if the *whole* prompt's blocks fit (``scheduler_reserve_full_isl``); the first one
   that does not fit stops the loop (no request behind it is admitted). With speculative decoding, a new
   request with one token left is padded to ``1 + K`` tokens unless prefill is running.
4. **Speculative decoding**: the draft tokens proposed after a step are verified in the next; rejected ones roll
   ``num_computed_tokens`` back (``update_from_output``). Multi-module MTP never ends a prefill chunk within its
   lookahead of the prompt's end (``_reserve_prefill_lookahead``).
5. **Async scheduling** (``AsyncScheduler._update_after_schedule``): step ``n + 1`` is scheduled while step
   ``n`` runs, so a decoding request carries placeholders for its in-flight outputs and is scheduled again
   before they are known; a request preempted with output in flight waits until that output is drained.
6. **Finishing** (``update_from_output``, ``check_stop``): a request stops at ``max_tokens`` output tokens (the
   benchmarks' ``ignore_eos``) or ``max_model_len`` tokens; its blocks go back to the pool at once.

**Parked decoders** (not a vLLM rule, the simulator's shortcut, with the fast path): a request that only decodes
is counted in bulk at its place in the running queue for as many steps as nothing but its counters would change
(:mod:`pdtune.sim.parking`).

Not followed (not used by the harnesses pdtune reads): priority scheduling, LoRA, encoder inputs, structured
output, streaming input, pause states, the KV-connector failure paths, the V2 model runner's PP decode
cadence, DP prefill throttling (``prefill_schedule_interval`` 1).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from pdtune.errors import InputError
from pdtune.sim.kvcache import KVCacheManager, KVLayout
from pdtune.sim.parking import ParkedDecoders
from pdtune.sim.request import SimRequest, Status

FINISHED = Status.FINISHED
RUNNING = Status.RUNNING


@dataclass(frozen=True)
class SchedulerConfig:
    """The scheduler's settings (vLLM's ``SchedulerConfig``, ``SpeculativeConfig`` and ``CacheConfig`` parts)."""

    max_num_seqs: int = 1024
    max_num_batched_tokens: int = 8192
    max_model_len: int = 8192
    long_prefill_token_threshold: int = 0
    async_scheduling: bool = True
    enable_prefix_caching: bool = True
    scheduler_reserve_full_isl: bool = True
    watermark: float = 0.0
    num_spec_tokens: int = 0  # K draft tokens per step
    num_lookahead_tokens: int = 0  # KV slots past the scheduled tokens (EAGLE/MTP: K; n-gram: 0)
    num_prefill_lookahead: int = 0  # EAGLE/MTP: 1; multi-module MTP: K
    draft_slots: int = 0  # SpeculativeConfig.max_num_new_slots_for_drafting
    use_v2_model_runner: bool = True  # only decides whether drafts may be skipped (can_skip_drafts)
    hash_lookahead: bool = False  # num_hash_lookahead_tokens = num_prefill_lookahead (EAGLE/MTP + caching)
    max_num_scheduled_tokens: int | None = None  # the token budget; None: max_num_batched_tokens

    def __post_init__(self) -> None:
        for name in ("max_num_seqs", "max_num_batched_tokens", "max_model_len"):
            if getattr(self, name) < 1:
                raise InputError(f"--{name.replace('_', '-')}", name, "must be positive")
        if self.max_num_batched_tokens < self.max_num_seqs:
            # SchedulerConfig.verify_max_model_len refuses it.
            raise InputError("--max-num-batched-tokens", "max_num_batched_tokens",
                             f"({self.max_num_batched_tokens}) must be greater than or equal to max_num_seqs "
                             f"({self.max_num_seqs})")
        if self.long_prefill_token_threshold < 0 or self.long_prefill_token_threshold > self.max_model_len:
            raise InputError("--long-prefill-token-threshold", "long_prefill_token_threshold",
                             f"must be in [0, max_model_len={self.max_model_len}]")

    @property
    def num_hash_lookahead_tokens(self) -> int:
        return self.num_prefill_lookahead if (self.hash_lookahead and self.enable_prefix_caching) else 0

    @property
    def num_reprefillable_tokens(self) -> int:
        return max(0, self.num_prefill_lookahead - 1)


@dataclass
class StepPlan:
    """One ``SchedulerOutput``: tokens per request, draft tokens, who was new, resumed or preempted."""

    num_scheduled_tokens: dict[str, int]
    spec_tokens: dict[str, int] = field(default_factory=dict)  # scheduled draft tokens per request
    pad_spec: set[str] = field(default_factory=set)  # requests padded with placeholder drafts (never accepted)
    new: list[str] = field(default_factory=list)
    resumed: list[str] = field(default_factory=list)
    preempted: list[str] = field(default_factory=list)
    finished_before: list[str] = field(default_factory=list)  # finished_req_ids sent with this step
    skip_drafts: bool = False
    # For the step-cost model: per scheduled request (tokens computed before the step, tokens, in prefill).
    context: dict[str, int] = field(default_factory=dict)
    prefill: set[str] = field(default_factory=set)
    sampling: list[str] = field(default_factory=list)  # requests whose step samples a token
    loads: list[str] = field(default_factory=list)  # P/D decode side: requests whose KV load starts with the step
    index: int = -1  # the scheduler's count of plans before this one (-1: a bulk decode run's)
    bulk: int = 0  # parked requests, one decode token each, not in num_scheduled_tokens
    bulk_context: int = 0  # their tokens computed before the step, summed

    @property
    def total_tokens(self) -> int:
        return sum(self.num_scheduled_tokens.values())


class Scheduler(ParkedDecoders):
    """One engine's scheduler (one DP rank): its queues, its KV cache manager and vLLM's two entry points.

    ``schedule()`` returns a :class:`StepPlan`; ``update_from_output(plan, generated)`` takes how many tokens
    the step produced per request (1 for a decode, ``1 + accepted`` with speculative decoding, 0 for a
    prompt chunk that did not reach the prompt's end) and returns the requests that finished.
    """

    #: The running loop does allocate_slots' arithmetic itself when a request's blocks already hold the step's
    #: slots (most decode steps); False sends every call through KVCacheManager.allocate_slots (a test's reference).
    inline_allocation = True

    def __init__(self, config: SchedulerConfig, layout: KVLayout) -> None:
        self.config = config
        self.kv = KVCacheManager(
            layout,
            max_model_len=config.max_model_len,
            enable_caching=config.enable_prefix_caching,
            num_hash_lookahead_tokens=config.num_hash_lookahead_tokens,
            drop_eagle_block=False,
            num_reprefillable_tokens=config.num_reprefillable_tokens,
            watermark=config.watermark,
        )
        self.requests: dict[str, SimRequest] = {}
        self.waiting: deque[SimRequest] = deque()
        self.kv_holding_waiting: deque[SimRequest] = deque()  # P/D: requests whose KV arrived
        self.running: list[SimRequest] = []
        self.finished_req_ids: list[str] = []
        self.num_preemptions = 0
        self.can_skip_drafts = config.num_lookahead_tokens > 0 and config.use_v2_model_runner
        # KV slots a speculative decode step of one request needs (``_spec_decode_step_blocks``).
        k = config.num_spec_tokens
        tokens = 1 + k + config.num_lookahead_tokens if k else 0
        self.spec_decode_step_blocks = sum(-(-tokens // g.block_size) for g in layout.groups
                                           if g.kind != "recurrent")
        self.inflight_prefills: set[str] = set()
        # P/D prefill side (a KV producer): a finished request keeps its blocks until the decode side has read
        # them (NixlConnector.request_finished asks to delay the free); release() frees them.
        self.hold_finished = False
        self.held: dict[str, SimRequest] = {}
        self._init_parking(layout)

    # ---------------------------------------------------------------------------------- queues

    def add_request(self, request: SimRequest) -> None:
        """``Scheduler.add_request`` (``_enqueue_waiting_request``): to the back of the waiting queue."""
        if request.rid in self.requests:
            raise AssertionError(f"duplicate request id {request.rid}")
        self.requests[request.rid] = request
        if request.num_computed_tokens > 0:
            self.kv_holding_waiting.append(request)
        else:
            self.waiting.append(request)

    def get_request_counts(self) -> tuple[int, int]:
        """(running, waiting): ``get_request_counts``."""
        return len(self.running), len(self.waiting) + len(self.kv_holding_waiting)

    def has_unfinished_requests(self) -> bool:
        return bool(self.running or self.waiting or self.kv_holding_waiting)

    def has_requests(self) -> bool:
        """``has_requests``: unfinished requests, or finished ones not yet reported in a step."""
        return self.has_unfinished_requests() or bool(self.finished_req_ids)

    # ------------------------------------------------------------------------------------ schedule

    def _reserve_prefill_lookahead(self, request: SimRequest, computed: int, n: int) -> int:
        """``_reserve_prefill_lookahead``: never end a chunk within the drafter's lookahead of the prompt end."""
        lookahead = self.config.num_prefill_lookahead
        remaining = request.num_tokens - computed - n
        if 0 < remaining < lookahead:
            n -= lookahead - remaining
        return max(n, 0)

    def _drafts_unused(self, request: SimRequest, computed: int, n: int) -> bool:
        """``_drafts_unused``: the drafts proposed after this step cannot be used (a non-final chunk, or the
        step samples the last token)."""
        if computed + n < request.num_tokens:
            return True
        least = request.num_output_tokens + 1 + (1 if request.num_output_placeholders > 0 else 0)
        return least >= request.max_tokens

    def _preempt(self, request: SimRequest) -> None:
        """``_preempt_request``: free the blocks, recompute from scratch later, to the front of the queue."""
        self.kv.free(request, may_return=True)
        self.inflight_prefills.discard(request.rid)
        request.status = Status.PREEMPTED
        request.num_computed_tokens = 0
        request.spec_tokens = 0
        request.drop_stale_output = request.drop_stale_output and request.num_stale_output_tokens > 0
        request.num_stale_output_tokens = request.num_in_flight_tokens
        request.num_output_placeholders = 0
        request.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(request)

    def schedule(self) -> StepPlan:
        """``Scheduler.schedule``: one step's tokens per request (see the module's rules 1-5)."""
        cfg = self.config
        kv = self.kv
        token_budget = cfg.max_num_scheduled_tokens or cfg.max_num_batched_tokens
        input_budget = cfg.max_num_batched_tokens
        draft_slots = cfg.draft_slots
        max_len = cfg.max_model_len
        scheduled: dict[str, int] = {}
        spec_scheduled: dict[str, int] = {}
        pad_spec: set[str] = set()
        context: dict[str, int] = {}
        prefill: set[str] = set()
        preempted: list[str] = []
        new_ids: list[str] = []
        resumed_ids: list[str] = []
        scheduled_running: list[SimRequest] = []
        drafts_needed = not self.can_skip_drafts
        prefill_scheduled = False

        num_running, num_waiting = self.get_request_counts()
        threshold = cfg.long_prefill_token_threshold if num_running + num_waiting > 1 else 0
        step = self.n_sched
        renew: list[SimRequest] = []
        if self._expiry:  # popped even when nobody is parked now, so no stale list keeps its requests alive
            renewable = self._no_recurrent and not kv.enable_caching and not self._calendar
            for request in self._expiry.pop(step, ()):
                if request.park_expiry == step and request.park_start >= 0:
                    if renewable and self._finish_room(request, step) >= 2:
                        renew.append(request)  # only its blocks ran out: it may take one and stay parked
                    else:
                        self._unpark(request, step)
        if self._crossings:
            # parked requests whose slot this step needs a new block (booked by ParkedDecoders._park)
            for request, start in self._crossings.pop(step, ()):
                if request.park_start == start:
                    renew.append(request)
        bulk = bulk_context = 0

        running = self.running
        prefill_lookahead = cfg.num_prefill_lookahead  # 0 without a drafter: skip the call, a hot loop
        inline = self.inline_allocation
        full_only = kv._full_only
        full_groups = kv._full_groups
        quiet_limits = kv._quiet
        caching = kv.enable_caching
        reprefillable = kv.num_reprefillable_tokens
        lookahead_tokens = cfg.num_lookahead_tokens
        order = running
        if self.parked and self._no_recurrent and inline and not prefill_lookahead and not draft_slots:
            order = self._active_order(token_budget, input_budget, renew, step)
            if order is not running:
                if self._calendar:
                    if renew:
                        self.take_booked(renew, step)
                else:
                    for request in renew:
                        self._renew(request, step)
                # Every request gets its whole step (see _active_order): the parked ones in bulk.
                bulk = self.parked
                bulk_context = self.park_context + bulk * step
                token_budget -= bulk
                input_budget -= bulk
        if renew and order is running:
            for request in renew:
                self._unpark(request, step)
        index = 0
        while index < len(order) and token_budget > 0:
            request = order[index]
            if input_budget <= draft_slots:
                break
            if request.park_start >= 0:
                # A parked decoder: one token, its blocks hold the slot, no hash to record (see _park).
                bulk += 1
                bulk_context += request.num_computed_tokens + step - request.park_start
                token_budget -= 1
                input_budget -= 1 + draft_slots
                index += 1
                continue
            if (request.num_output_placeholders > 0
                    and request.num_computed_tokens + 2 - request.num_output_placeholders
                    >= request.num_prompt_tokens + request.max_tokens):
                index += 1  # async: the step in flight already produces the last token
                continue
            computed = request.num_computed_tokens
            num_tokens = request.num_prompt_tokens + request.num_output_tokens
            n = num_tokens + request.spec_tokens + request.num_output_placeholders - computed
            if 0 < threshold < n:
                n = threshold
            # min(n, token_budget, input_budget - draft_slots, max_len - computed - 1), as comparisons (hot)
            if n > token_budget:
                n = token_budget
            if n > input_budget - draft_slots:
                n = input_budget - draft_slots
            if n > max_len - computed - 1:
                n = max_len - computed - 1
            if prefill_lookahead:
                n = self._reserve_prefill_lookahead(request, computed, n)
            if n <= 0:
                index += 1
                continue
            quiet = False
            if inline and request.status is RUNNING:
                # allocate_slots inlined for the hot case, a step whose slots the request's blocks already hold
                # (nothing taken, nothing out of a window): only the hashes may move.
                slot = computed + n + lookahead_tokens
                if slot > max_len:
                    slot = max_len
                if full_only:
                    for per, block in full_groups:
                        rb = per.get(request.rid)
                        if rb is None or rb.n * block < slot:
                            break
                    else:
                        quiet = True
                else:
                    limits = quiet_limits.get(request.rid)  # KVCacheManager._quiet_limits
                    quiet = (limits is not None and slot <= limits[0]
                             and computed - request.num_in_flight_tokens < limits[1])
                if quiet and caching:
                    upto = computed + n if computed + n < num_tokens else num_tokens
                    if upto - reprefillable >= request.hash_floor or not request.hash_floor:
                        kv.cache_blocks(request, upto)
            if not quiet:
                while True:
                    if kv.allocate_slots(request, n, num_lookahead_tokens=cfg.num_lookahead_tokens):
                        ok = True
                        break
                    victim = running.pop()  # the newest running request
                    if victim.park_start >= 0:
                        self._unpark(victim, step)
                    self._preempt(victim)
                    preempted.append(victim.rid)
                    if victim is request:
                        ok = False
                        break
                if not ok:
                    break
            scheduled_running.append(request)
            prefill_scheduled |= request.is_prefill_chunk
            scheduled[request.rid] = n
            context[request.rid] = request.num_computed_tokens
            if request.num_computed_tokens < num_tokens - 1:  # allocate_slots changes no token count
                prefill.add(request.rid)
            token_budget -= n
            input_budget -= n + draft_slots
            index += 1
            drafts_needed = drafts_needed or not self._drafts_unused(request, request.num_computed_tokens, n)
            if request.spec_tokens:
                spec = n + request.num_computed_tokens - request.num_tokens - request.num_output_placeholders
                if spec > 0:
                    spec_scheduled[request.rid] = min(request.spec_tokens, spec)
                request.spec_tokens = 0

        if self.parked and order is running and index < len(running):
            # The budget ran out before these: not scheduled this step, so stepped again from the next.
            for request in running[index:]:
                if request.park_start >= 0:
                    self._unpark(request, step)

        loads: list[str] = []
        if not preempted:
            skipped: deque[SimRequest] = deque()
            skipped_holding: deque[SimRequest] = deque()
            while token_budget > 0:
                queue = self.kv_holding_waiting or self.waiting
                if not queue or input_budget <= draft_slots:
                    break
                if len(running) >= cfg.max_num_seqs:
                    break
                request = queue[0]
                if request.status is Status.WAITING_FOR_REMOTE_KVS and not request.kv_ready:
                    self._skip(queue, skipped, skipped_holding)  # its KV is still arriving
                    continue
                if request.status is Status.WAITING_FOR_REMOTE_KVS:
                    self._remote_kv_arrived(request)
                if request.num_stale_output_tokens and not request.drop_stale_output:
                    self._skip(queue, skipped, skipped_holding)  # async: its in-flight output is not back yet
                    continue
                external = 0
                load_async = False
                hits = None
                local = 0
                if request.num_computed_tokens == 0:
                    hits, local = kv.get_computed_blocks(request)
                    if request.remote_prefill:
                        # NixlConnector.get_num_new_matched_tokens: the prompt's KV is loaded asynchronously.
                        external = request.num_prompt_tokens - local
                        load_async = external > 0
                    computed = local + external
                else:
                    computed = request.num_computed_tokens
                pad = False
                if load_async:
                    n = 0
                else:
                    room = min(token_budget, input_budget - draft_slots)
                    n = request.num_tokens - computed
                    if (cfg.num_spec_tokens > 0 and n == 1 and not prefill_scheduled
                            and (scheduled_running or computed > 0)):
                        padded = 1 + cfg.num_spec_tokens
                        if computed + padded + 1 <= max_len:
                            if padded > room:
                                break  # vLLM prefers not scheduling to scheduling unpadded
                            n = padded
                            pad = True
                    if 0 < threshold < n:
                        n = threshold
                    n = min(n, room)
                    n = self._reserve_prefill_lookahead(request, computed, n)
                    if n == 0:
                        self._skip(queue, skipped, skipped_holding)
                        continue
                reserved = 0
                if load_async:
                    reserved = self._inflight_prefill_reserved_blocks() + self.spec_decode_step_blocks
                lookahead = 0 if (load_async and cfg.num_lookahead_tokens > 0) else cfg.num_lookahead_tokens
                ok = kv.allocate_slots(
                    request, n, num_new_computed_tokens=local, hits=hits, num_lookahead_tokens=lookahead,
                    num_external_computed_tokens=external, delay_cache_blocks=load_async,
                    full_sequence_must_fit=cfg.scheduler_reserve_full_isl, reserved_blocks=reserved,
                    has_scheduled_reqs=bool(running),
                )
                if not ok:
                    break
                if load_async:
                    request.status = Status.WAITING_FOR_REMOTE_KVS
                    request.num_computed_tokens = computed
                    self.inflight_prefills.add(request.rid)
                    loads.append(request.rid)
                    self._skip(queue, skipped, skipped_holding)
                    continue
                queue.popleft()
                running.append(request)
                if request.status is Status.PREEMPTED:
                    resumed_ids.append(request.rid)
                else:
                    new_ids.append(request.rid)
                scheduled[request.rid] = n
                context[request.rid] = computed
                token_budget -= n
                input_budget -= n + draft_slots
                request.status = Status.RUNNING
                request.num_computed_tokens = computed
                if computed < request.num_tokens - 1:
                    prefill.add(request.rid)
                drafts_needed = drafts_needed or not self._drafts_unused(request, computed, n)
                if pad:
                    spec_scheduled[request.rid] = cfg.num_spec_tokens
                    pad_spec.add(request.rid)
                if computed + n < request.num_tokens:
                    self.inflight_prefills.add(request.rid)
            if skipped_holding:
                self.kv_holding_waiting.extendleft(skipped_holding)
            if skipped:
                self.waiting.extendleft(skipped)

        assert len(running) <= cfg.max_num_seqs
        plan = StepPlan(scheduled, spec_scheduled, pad_spec, new_ids, resumed_ids, preempted,
                        self.finished_req_ids, not drafts_needed, context, prefill, loads=loads, index=step,
                        bulk=bulk, bulk_context=bulk_context)
        self._update_after_schedule(plan)
        self.n_sched = step + 1
        if self.park:
            self._pending[step] = plan
            if not cfg.num_spec_tokens:
                for request in scheduled_running:
                    if scheduled[request.rid] == 1 and request.rid not in prefill:
                        self._park(request, step)
        return plan

    def _skip(self, queue: deque[SimRequest], skipped: deque[SimRequest], holding: deque[SimRequest]) -> None:
        request = queue.popleft()
        (holding if request.num_computed_tokens > 0 or request.status is Status.WAITING_FOR_REMOTE_KVS
         else skipped).appendleft(request)

    def _inflight_prefill_reserved_blocks(self) -> int:
        """``_inflight_prefill_reserved_blocks``: the blocks the prompts still prefilling need to finish
        (``_request_remaining_blocks``: the whole sequence, plus a speculative step's slots)."""
        cfg = self.config
        total = 0
        for rid in self.inflight_prefills:
            request = self.requests.get(rid)
            if request is None:
                continue
            full = min(request.num_tokens, cfg.max_model_len)
            tokens = full + (1 + cfg.num_spec_tokens + cfg.num_lookahead_tokens if cfg.num_spec_tokens else 0)
            total += self.kv.blocks_to_allocate(request, tokens, cap=True)
        return total

    def _remote_kv_arrived(self, request: SimRequest) -> None:
        """``_update_waiting_for_remote_kv``: the prompt's KV is in; the last prompt token is recomputed so
        the first decode step samples from it."""
        self.kv.cache_blocks(request, request.num_computed_tokens)
        if request.num_computed_tokens == request.num_tokens:
            request.num_computed_tokens = request.num_tokens - 1
        request.status = Status.PREEMPTED if request.num_preemptions else Status.WAITING

    def _update_after_schedule(self, plan: StepPlan) -> None:
        """``_update_after_schedule`` (and ``AsyncScheduler``'s): advance ``num_computed_tokens``; with async
        scheduling, a request that will sample gets a placeholder per token it will produce."""
        asynchronous = self.config.async_scheduling
        k = self.config.num_spec_tokens
        requests = self.requests
        sampling = plan.sampling
        inflight = self.inflight_prefills
        spec_tokens = plan.spec_tokens
        for rid, n in plan.num_scheduled_tokens.items():
            request = requests[rid]
            request.num_computed_tokens += n
            request.num_in_flight_tokens += n
            chunk = request.is_prefill_chunk = request.num_computed_tokens < (
                request.num_prompt_tokens + request.num_output_tokens + request.num_output_placeholders)
            if not chunk:
                sampling.append(rid)
                if inflight:
                    inflight.discard(rid)
                if asynchronous:
                    request.num_output_placeholders += 1 + (spec_tokens.get(rid, 0) if spec_tokens else 0)
                    request.spec_tokens = k
        self.finished_req_ids = []

    # --------------------------------------------------------------------------- update_from_output

    def update_from_output(self, plan: StepPlan, generated: dict[str, int]) -> list[SimRequest]:
        """``Scheduler.update_from_output``: take each request's new tokens, roll back rejected drafts, stop
        finished requests and free their blocks. ``generated[rid]``: tokens sampled for the request (absent or
        0 for a prompt chunk that samples nothing). Returns the requests that finished, and every request's
        delivered token count is in ``delivered`` (for the engine loop's clock)."""
        if plan.index >= 0:
            self.n_updated = plan.index + 1
            if self._pending:
                self._pending.pop(plan.index, None)
        finished: list[SimRequest] = []
        stopped_running: set[str] = set()
        stopped_waiting: set[str] = set()
        self.delivered: list[tuple[SimRequest, int]] = []
        delivered = self.delivered
        k = self.config.num_spec_tokens
        max_len = self.config.max_model_len
        cache_blocks = self.kv.cache_blocks
        requests = self.requests
        spec_tokens = plan.spec_tokens
        caching = self.kv.enable_caching
        reprefillable = self.kv.num_reprefillable_tokens
        for rid, n in plan.num_scheduled_tokens.items():
            request = requests.get(rid)
            stale = False
            if request is not None:
                request.num_in_flight_tokens -= n
                if request.num_stale_output_tokens > 0:
                    stale = True
                    request.num_stale_output_tokens -= n
            if request is None or request.status is FINISHED:
                continue
            if stale and request.drop_stale_output:
                continue
            tokens = generated.get(rid, 0)
            drafts = spec_tokens.get(rid, 0) if spec_tokens else 0
            if tokens == 1 and not drafts and not stale:
                # The hot case, one sampled token and no drafts: the loop below, unrolled.
                out = request.num_output_tokens = request.num_output_tokens + 1
                status_before = request.status
                if request.num_output_placeholders > 0:
                    request.num_output_placeholders -= 1
                    placeholders = True
                else:
                    placeholders = False
                delivered.append((request, 1))
                if status_before is RUNNING and (placeholders or k > 0):
                    upto = request.num_computed_tokens - request.num_in_flight_tokens
                    if caching and (upto - reprefillable >= request.hash_floor or not request.hash_floor):
                        cache_blocks(request, upto)  # else KVCacheManager.cache_blocks returns at once
                if request.num_prompt_tokens + out >= max_len or out >= request.max_tokens:
                    request.status = FINISHED
                    self._free_request(request)
                    finished.append(request)
                    (stopped_running if status_before is RUNNING else stopped_waiting).add(rid)
                continue
            if drafts and tokens:
                rejected = drafts - max(tokens - 1, 0)
                if not stale:
                    if request.num_computed_tokens > 0:
                        request.num_computed_tokens -= rejected
                    if request.num_output_placeholders > 0:
                        request.num_output_placeholders -= rejected
            if not tokens:
                continue
            had_placeholders = request.num_output_placeholders > 0
            status_before = request.status
            kept = 0
            stopped = False
            for i in range(1, tokens + 1):
                request.num_output_tokens += 1
                kept = i
                if (request.num_prompt_tokens + request.num_output_tokens >= max_len  # num_tokens, inlined
                        or request.num_output_tokens >= request.max_tokens):
                    stopped = True
                    if not stale:
                        request.num_computed_tokens -= tokens - i
                    break
            if not stale and request.num_output_placeholders > 0:
                request.num_output_placeholders -= tokens
            delivered.append((request, kept))
            if not stale and status_before is Status.RUNNING and (had_placeholders or k > 0):
                cache_blocks(request, request.num_computed_tokens - request.num_in_flight_tokens)
            if stopped:
                request.status = Status.FINISHED
                self._free_request(request)
                finished.append(request)
                if status_before is Status.RUNNING:
                    stopped_running.add(rid)
                else:
                    stopped_waiting.add(rid)
        if stopped_running:
            self.running = [r for r in self.running if r.rid not in stopped_running]
        if stopped_waiting:
            self.waiting = deque(r for r in self.waiting if r.rid not in stopped_waiting)
        return finished

    def _free_request(self, request: SimRequest) -> None:
        """``_free_request``: report the id with the next step and return the blocks (a KV producer keeps them
        until :meth:`release`)."""
        self.inflight_prefills.discard(request.rid)
        self.finished_req_ids.append(request.rid)
        if self.hold_finished:
            self.held[request.rid] = request
        else:
            self.kv.free(request)
        del self.requests[request.rid]

    def release(self, rid: str) -> None:
        """The decode side has read a finished request's KV (``_update_from_kv_xfer_finished``,
        ``finished_sending``): its blocks go back to the pool."""
        request = self.held.pop(rid)
        self.kv.free(request)

    def update_draft_token_ids(self, drafts: dict[str, int]) -> None:
        """``update_draft_token_ids`` (synchronous scheduling): the drafts proposed after a step."""
        for rid, n in drafts.items():
            request = self.requests.get(rid)
            if request is None or request.is_finished():
                continue
            if request.is_prefill_chunk:
                request.spec_tokens = 0
                continue
            request.spec_tokens = n
