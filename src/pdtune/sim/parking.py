"""Parked decoders: the scheduler's steps for requests that only decode, counted in bulk (not a vLLM rule).

Off unless ``Scheduler.park`` is set, as ``EngineCore.fast`` sets it. A request that decodes one token per step
changes nothing but its counters until it needs a new block, fills a block whose hash must be recorded, or nears
its last token, and each of those is a known number of steps away. Such a request is *parked* for those steps: the
running loop counts its token and its context (:attr:`StepPlan.bulk`, :attr:`StepPlan.bulk_context`) at its place
in the queue without giving it an entry of its own, and its counters and token times are brought up to date when
it is stepped again (:meth:`ParkedDecoders._unpark`: at its expiry, when the budget runs out before its place, when
it is preempted, or before a bulk decode run). When no budget cut and no failed allocation can happen in a step
(:meth:`ParkedDecoders._active_order`), the running loop visits only the requests that are not parked, and with
prefix caching off a parked request whose blocks run out takes its next one in place and stays parked: with one
full-attention group the step that needs it books it (:meth:`ParkedDecoders.take_booked`, one count per step, the
request's block count caught up when it is unparked), otherwise :meth:`ParkedDecoders._renew` allocates it.
With many clients every step admits someone, so the bulk decode runs of :mod:`pdtune.sim.fastpath` do not apply,
while most running requests are parked in most steps. ``tests/test_sim_run.py`` checks that runs with and without
it give the same results, request by request and step by step.

The state lives on the :class:`~pdtune.sim.scheduler.Scheduler` (this class is its mixin); the running loop of
``Scheduler.schedule`` reads ``park_start`` and :attr:`~pdtune.sim.scheduler.StepPlan.bulk`.
"""

from __future__ import annotations

import math
from typing import Any

from pdtune.sim.kvcache import RECURRENT, KVCacheManager, KVLayout
from pdtune.sim.request import SimRequest, Status

RUNNING = Status.RUNNING


class ParkedDecoders:
    """The parking half of :class:`~pdtune.sim.scheduler.Scheduler`."""

    config: Any  # the Scheduler's SchedulerConfig (pdtune.sim.scheduler imports this module, not back)
    kv: KVCacheManager
    running: list[SimRequest]

    def _init_parking(self, layout: KVLayout) -> None:
        self.park = False
        self.parked = 0
        self._no_recurrent = all(g.kind != RECURRENT for g in layout.groups)
        self.park_context = 0  # over parked requests, tokens computed when parked less the plan parked from
        self.n_sched = 0  # plans scheduled (the next plan's index)
        self.n_updated = 0  # one past the last plan updated
        self._expiry: dict[int, list[SimRequest]] = {}
        # One full-attention group without prefix caching: a parked request's new blocks are booked by the plan
        # that needs each (_crossings, plan index -> (request, its park_start)) instead of ending its park.
        self._calendar = (len(self.kv._full_groups) == 1 and self.kv._full_only and not self.kv.enable_caching
                          and self._no_recurrent)
        self._crossings: dict[int, list[tuple[SimRequest, int]]] = {}
        self._pending: dict[int, Any] = {}  # StepPlans scheduled and not yet updated
        self.bulk_times: list[float] = []  # per plan index, when a plan with parked requests was updated (NaN: none)

    def _park(self, request: SimRequest, step: int) -> None:
        """Park ``request``, just scheduled for one decode token in plan ``step``, for the next ``m`` plans: as
        many as keep every rule of the running loop and of ``update_from_output`` a no-op for it but the counters
        (its blocks hold the slots, no full block to hash, its last tokens and ``max_model_len`` at least four
        steps off, as the fast path's runs stop three before). With one full-attention group and no prefix
        caching the blocks do not end it: the plan whose slot needs the next block books it (:meth:`_book`)."""
        if (request.status is not RUNNING or request.is_prefill_chunk or request.spec_tokens
                or request.num_stale_output_tokens):
            return
        kv = self.kv
        cfg = self.config
        c = request.num_computed_tokens  # after this step; the j-th parked step schedules slot c + j (+ lookahead)
        first = -1
        if self._calendar:
            per, block = kv._full_groups[0]
            rb = per.get(request.rid)
            if rb is None:
                return
            first = rb.n * block - c - cfg.num_lookahead_tokens  # the parked step that needs the next block
            m = 1 << 30
        elif kv._full_only:
            cap = None
            for per, block in kv._full_groups:
                rb = per.get(request.rid)
                if rb is None:
                    return
                held = rb.n * block
                cap = held if cap is None or held < cap else cap
            m = cap - c - cfg.num_lookahead_tokens
        else:
            limits = kv._quiet.get(request.rid)
            if limits is None:
                return
            # the j-th parked plan has c + j - 1 tokens computed, at most that many processed (none in flight)
            m = min(limits[0] - c - cfg.num_lookahead_tokens, limits[1] - c)
        if kv.enable_caching:
            if not request.hash_floor:
                return
            # cache_blocks hashes nothing while its tokens (at most c + j) stay below the floor
            limit = request.hash_floor + kv.num_reprefillable_tokens - c - 2
            if limit < m:
                m = limit
        limit = request.num_prompt_tokens + request.max_tokens - c - 4
        if limit < m:
            m = limit
        limit = cfg.max_model_len - c - 4
        if limit < m:
            m = limit
        if m < 2:
            return
        start = request.park_start = step + 1
        request.park_expiry = expiry = step + 1 + m
        if first >= 0 and start + first < expiry:
            self._book(request, start + first)
        self.parked += 1
        self.park_context += c - step - 1
        due = self._expiry.get(expiry)
        if due is None:
            self._expiry[expiry] = [request]
        else:
            due.append(request)

    def _book(self, request: SimRequest, step: int) -> None:
        """A parked request's slot in plan ``step`` needs its next block (one full-attention group, no prefix
        caching): the schedule of that plan takes it (and books the one after, :meth:`take_booked`)."""
        due = self._crossings.get(step)
        if due is None:
            self._crossings[step] = [(request, request.park_start)]
        else:
            due.append((request, request.park_start))

    def take_booked(self, renew: list[SimRequest], step: int) -> None:
        """The blocks of plan ``step``'s booked requests, taken at once (the pool only counts without prefix
        caching, so taking them before the others' changes nothing); each books its next one, a block later,
        if it is still parked then. Their counters catch up when they are unparked."""
        self.kv.pool.take(len(renew))
        block = self.kv._full_groups[0][1]
        nxt = step + block
        for request in renew:
            if nxt < request.park_expiry:
                self._book(request, nxt)

    def _unpark(self, request: SimRequest, step: int) -> None:
        """Bring a parked request's counters to where plans ``park_start .. step - 1`` left them: the tokens
        computed, the outputs of the plans already updated (with their times), and an entry of its own in the
        plans still in flight (so their update treats it as any other request)."""
        start = request.park_start
        request.park_start = -1
        self.parked -= 1
        self.park_context -= request.num_computed_tokens - start
        steps = step - start
        request.num_computed_tokens += steps
        if self._calendar:
            # the blocks its parked steps took from the pool (booked by _crossings): those of its last slot
            per, block = self.kv._full_groups[0]
            slot = request.num_computed_tokens + self.config.num_lookahead_tokens
            if slot > self.config.max_model_len:
                slot = self.config.max_model_len
            rb = per[request.rid]
            held = -(-slot // block)
            if held > rb.n:
                rb.n = held
        done = (self.n_updated if self.n_updated < step else step) - start
        if done > 0:
            request.num_output_tokens += done
            request.token_times.extend(self.bulk_times[start:start + done])
            request.token_counts.extend([1] * done)
        else:
            done = 0
        pending = steps - done
        if pending:
            request.num_in_flight_tokens += pending
            if self.config.async_scheduling:
                request.num_output_placeholders += pending
            rid = request.rid
            for i in range(step - pending, step):
                plan = self._pending[i]
                plan.num_scheduled_tokens[rid] = 1
                plan.sampling.append(rid)

    def _finish_room(self, request: SimRequest, step: int) -> int:
        """Plans a parked request can stay parked for after plan ``step`` for its last tokens and
        ``max_model_len`` (as in :meth:`_park`)."""
        c = request.num_computed_tokens + step - request.park_start + 1
        return min(request.num_prompt_tokens + request.max_tokens - c - 4, self.config.max_model_len - c - 4)

    def _renew(self, request: SimRequest, step: int) -> None:
        """A parked request whose blocks run out with plan ``step`` (or, in a sliding window, whose oldest block
        leaves the window) takes its new block and frees the old one where the running loop would
        (``allocate_slots``; no hash to record: prefix caching is off) and stays parked for the plans its
        blocks hold next. Only when no allocation can fail and no budget cut can happen (:meth:`_active_order`),
        so that doing it before the other requests' allocations changes nothing (without prefix caching the free
        queue holds no hashes: the pool hands out and takes back counts)."""
        kv = self.kv
        cfg = self.config
        c = request.num_computed_tokens + step - request.park_start  # computed before this step
        if not kv._full_only:
            # allocate_slots on the counters the running loop would see; it fits (_active_order counted the blocks)
            in_flight = request.num_in_flight_tokens + max(0, step - max(self.n_updated, request.park_start))
            kv.grow_running(request.rid, c, in_flight, cfg.num_lookahead_tokens)
            slot, processed = kv._quiet[request.rid]
            # the j-th plan after this one has c + j computed, at most that many processed (none in flight)
            m = min(slot - c - 1 - cfg.num_lookahead_tokens, processed - c - 1, self._finish_room(request, step))
            self._rewindow(request, step, m)
            return
        slot = c + 1 + cfg.num_lookahead_tokens
        if slot > cfg.max_model_len:
            slot = cfg.max_model_len
        cap = None
        for per, block in kv._full_groups:
            rb = per[request.rid]
            new = -(-slot // block) - rb.n
            if new > 0:
                kv.pool.take(new)
                rb.n += new
            held = rb.n * block
            cap = held if cap is None or held < cap else cap
        m = cap - c - 1 - cfg.num_lookahead_tokens
        room = self._finish_room(request, step)
        if room < m:
            m = room
        self._rewindow(request, step, m)

    def _rewindow(self, request: SimRequest, step: int, m: int) -> None:
        """A renewed request stays parked for ``m`` plans after plan ``step``."""
        request.park_expiry = expiry = step + 1 + max(m, 0)
        due = self._expiry.get(expiry)
        if due is None:
            self._expiry[expiry] = [request]
        else:
            due.append(request)

    def _active_order(self, token_budget: int, input_budget: int, renew: list[SimRequest],
                      step: int) -> list[SimRequest]:
        """The running requests that are not parked, in order, when the running loop can skip the parked ones
        entirely: no request's tokens can be cut by the budget (all of them fit it) and no allocation can fail (the
        blocks every request could take fit the free ones: nobody is preempted), so each request's outcome
        does not depend on its place. Otherwise ``self.running``, walked one by one. Layouts of full-attention
        and sliding-window groups (a window's frees only add free blocks, so the count is an upper bound there);
        a recurrent group's blocks follow other rules, and its layouts are always walked."""
        active = [r for r in self.running if r.park_start < 0]
        demand = self.parked
        blocks = 0
        kv = self.kv
        cfg = self.config
        lookahead = cfg.num_lookahead_tokens
        max_len = cfg.max_model_len
        if self._calendar:
            blocks = len(renew)  # each booked its next block for this step (one group)
            renew = ()
        for r in renew:  # one token each, counted with the parked; the blocks their next slot needs
            slot = r.num_computed_tokens + step - r.park_start + 1 + lookahead
            if slot > max_len:
                slot = max_len
            for per, block in kv._full_groups:
                need = -(-slot // block) - per[r.rid].n
                if need > 0:
                    blocks += need
        for r in active:
            n = r.num_prompt_tokens + r.num_output_tokens + r.spec_tokens + r.num_output_placeholders - \
                r.num_computed_tokens
            if n <= 0:
                continue
            demand += n
            slot = r.num_computed_tokens + n + lookahead
            if slot > max_len:
                slot = max_len
            for per, block in kv._full_groups:
                rb = per.get(r.rid)
                need = -(-slot // block) - (rb.n if rb is not None else 0)
                if need > 0:
                    blocks += need
        if demand > token_budget or demand > input_budget or blocks > kv.pool.num_free:
            return self.running
        return active

    def bulk_delivered(self, plan: Any, now: float) -> None:
        """The engine updated ``plan``, which had parked requests, at ``now``: their tokens reached the clients
        then (:meth:`_unpark` reads the time by the plan's index)."""
        times = self.bulk_times
        if len(times) < plan.index:
            times.extend([math.nan] * (plan.index - len(times)))
        assert len(times) == plan.index, "plans are updated in the order they were scheduled"
        times.append(now)

    def unpark_all(self) -> None:
        """Step every parked request again (before a bulk decode run, which reads every counter)."""
        if self.parked:
            step = self.n_sched
            for request in self.running:
                if request.park_start >= 0:
                    self._unpark(request, step)
        self._expiry.clear()
        self._crossings.clear()

    def parked_near_end(self, left: int) -> bool:
        """Whether a parked request has fewer than ``left`` output tokens to go. A request is parked at least
        four plans short of its end (:meth:`_park`), so only those due within ``left`` plans can be."""
        step = self.n_sched
        for due in range(step, step + left):
            for r in self._expiry.get(due, ()):
                if r.park_start >= 0 and r.park_expiry == due and r.max_tokens - self.output_tokens(r) < left:
                    return True
        return False

    def output_tokens(self, request: SimRequest) -> int:
        """A request's output tokens so far, a parked one's included."""
        if request.park_start < 0:
            return request.num_output_tokens
        return request.num_output_tokens + max(0, min(self.n_updated, self.n_sched) - request.park_start)
