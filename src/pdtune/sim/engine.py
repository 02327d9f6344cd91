"""One vLLM engine core on the simulated clock: ``EngineCore.step`` and ``step_with_batch_queue``.

``vllm/v1/engine/core.py`` runs a busy loop: take new requests from the input queue, then one engine step.
Without async scheduling a step schedules, runs the model and updates the scheduler with its output
(``EngineCore.step``). With async scheduling (``step_with_batch_queue``, a queue of
``max_concurrent_batches`` = 2 batches; ``pipeline_parallel_size`` with PP) the loop schedules the next batch
while the last one runs: it schedules, and returns at once while the queue has room and there is work;
otherwise it blocks until the oldest batch's output is back and updates the scheduler with it. The GPU runs
the batches in order, back to back. So a request that arrives while batch ``n`` runs is scheduled into batch
``n + 2`` (``n + 1`` without async scheduling), and an output token reaches the client when its batch ends.

:class:`EngineCore` is that loop for one engine: one scheduler, or the DP ranks of a MoE model, which step in
lockstep (the experts' all-to-all joins them every layer: a rank without work runs a dummy batch, and the
step lasts as long as the busiest rank's; :meth:`pdtune.perfmodel.engine.Engine.stage_terms` takes every
rank's tokens in the experts through ``ep_tokens``). Step times come from :class:`~pdtune.sim.stepcost.StepCost`;
a pipeline of ``PP`` stages lets a batch enter stage ``i`` once the previous batch has left it. The CPU work
of scheduling is inside the cost model's ``step_overhead_s`` (fitted on runs with async scheduling on), so the
loop adds no time of its own.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from pdtune.sim.fastpath import InFlight, decode_run
from pdtune.sim.request import SimRequest
from pdtune.sim.scheduler import Scheduler, StepPlan
from pdtune.sim.specrun import spec_run
from pdtune.sim.stepcost import StepCost


#: The fields of the batch that times a step (:meth:`Timeline.batch_array`'s columns): the busiest rank's, as
#: :meth:`pdtune.sim.stepcost.StepCost.stage_seconds` takes them.
BATCH_FIELDS = ("tokens", "seqs", "prefill_tokens", "attn_pairs", "decode_pairs", "kv_tokens_read", "logits",
                "ep_tokens", "state_writes", "draft_passes")


@dataclass
class Timeline:
    """Per step of one engine: when it ended, requests running and waiting, KV blocks used, tokens, and the batch
    that timed it (:data:`BATCH_FIELDS`, kept in segments: rows of single steps, arrays of bulk decode runs)."""

    t: list[float] = field(default_factory=list)
    running: list[int] = field(default_factory=list)
    waiting: list[int] = field(default_factory=list)
    kv_used: list[int] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    prefill_tokens: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    batch_segments: list = field(default_factory=list, repr=False)

    def add_batch(self, fields: tuple) -> None:
        seg = self.batch_segments
        if not seg or not isinstance(seg[-1], list):
            seg.append([])
        seg[-1].append(fields)

    def add_batches(self, array: np.ndarray) -> None:
        self.batch_segments.append(array)

    def batch_array(self) -> np.ndarray:
        """Every step's timing batch, one row per step (:data:`BATCH_FIELDS`), in step order."""
        parts = [np.asarray(s, dtype=float).reshape(-1, len(BATCH_FIELDS)) for s in self.batch_segments]
        return np.concatenate(parts) if parts else np.zeros((0, len(BATCH_FIELDS)))


class SpecDecode:
    """MTP/EAGLE drafting as ``predict`` has it: ``K`` draft tokens per decode step, each accepted with the
    draft acceptance rate ``A``, so a step keeps ``1 + K * A`` tokens on average (accepted drafts are drawn
    per request and step as Binomial(K, A) from a seeded generator). Placeholder drafts that pad a new
    request's step are never accepted (vLLM pads with -1 tokens)."""

    def __init__(self, num_tokens: int, acceptance: float, seed: int = 0) -> None:
        self.k = num_tokens
        self.acceptance = acceptance
        self.rng = np.random.default_rng(seed)
        self.cores = 0  # engine cores drawing from it (pdtune.sim.specrun draws a run's at once only for one)

    def accepted(self, drafts: list[int]) -> list[int]:
        """Accepted drafts of each request of a step, in order, for ``drafts`` proposed each: Binomial(d, A), no
        draw where ``d <= 0`` or ``A`` is 0 or 1. Each stretch of equal draft counts is one array draw, which
        NumPy's generator makes from the same stream as that many single draws (:mod:`pdtune.sim.specrun` relies
        on it too): a single draw costs about 2 us, most of an MTP step's own work per request."""
        a = self.acceptance
        if a <= 0:
            return [0] * len(drafts)
        if a >= 1:
            return [max(d, 0) for d in drafts]
        out = [0] * len(drafts)
        i, n = 0, len(drafts)
        while i < n:
            d = drafts[i]
            j = i + 1
            while j < n and drafts[j] == d:
                j += 1
            if d > 0:
                out[i:j] = [int(self.rng.binomial(d, a))] if j - i == 1 else self.rng.binomial(d, a, j - i).tolist()
            i = j
        return out


class EngineCore:
    """The busy loop of one engine core (see the module). ``ranks``: one scheduler per DP rank stepping in
    lockstep (one for a dense engine)."""

    def __init__(self, ranks: list[Scheduler], cost: StepCost, *, depth: int, spec: SpecDecode | None = None,
                 lockstep_dp: int = 1, name: str = "engine", record: bool = True) -> None:
        self.ranks = ranks
        self.cost = cost
        self.depth = depth
        self.spec = spec
        self.k = spec.k if spec is not None else 0
        if spec is not None:
            spec.cores += 1
        self.name = name
        self.queue: deque[InFlight] = deque()
        self.inputs: deque[tuple[float, int, SimRequest]] = deque()  # (time, rank, request), time order
        self.pending = [0] * len(ranks)  # requests of each rank in ``inputs`` (the load balancer counts them)
        self.stage_free = [0.0] * cost.stages  # when each pipeline stage is free
        self.blocked = False  # waiting for the oldest batch
        self.asleep = False  # nothing to do until an input arrives
        self.record = record
        self.timeline = Timeline()
        self.steps = 0
        self.on_tokens = None  # callback([(request, count), ...], time): a step's delivered tokens
        self.on_finish = None  # callback(request, time)
        self.on_load = None  # callback(core, rank, request id, time): P/D, a KV load starts
        self.dp_ep = lockstep_dp  # DP ranks whose tokens meet in the experts (the lockstep group)
        self.asynchronous = ranks[0].config.async_scheduling
        self._fast = False
        self.horizon = lambda: math.inf  # the clock's: when something outside may change what the core sees
        self._d_min: float | None = None
        self.last_step_seconds = 0.0  # the last step's length (a hint for pdtune.sim.fastpath)
        self._timing_batch: tuple | None = None

    @property
    def fast(self) -> bool:
        """Bulk decode runs (pdtune.sim.fastpath) and parked decoders (``Scheduler.park``): the same run, faster."""
        return self._fast

    @fast.setter
    def fast(self, on: bool) -> None:
        self._fast = on
        for sched in self.ranks:
            sched.park = on

    # ------------------------------------------------------------------------------------ inputs

    def submit(self, when: float, rank: int, request: SimRequest) -> None:
        """A request reaches this engine's input queue at ``when`` (the loop takes it at its next turn)."""
        self.inputs.append((when, rank, request))
        self.pending[rank] += 1

    def _take_inputs(self, now: float) -> None:
        inputs = self.inputs
        while inputs and inputs[0][0] <= now:
            when, rank, request = inputs.popleft()
            self.pending[rank] -= 1
            request.t_arrive = when
            self.ranks[rank].add_request(request)
        self.asleep = False

    def finish_bound(self, wake_at: float) -> float:
        """The earliest time one of this core's requests can finish, the core next running at ``wake_at``: a
        request needs ``ceil(remaining outputs / (1 + K))`` more updates, each at least one step later, and no step
        is shorter than an empty one (every term of the step cost grows with the batch)."""
        if self._d_min is None:
            self._d_min = sum(self.cost.stage_seconds(0, 0, 0, 0.0, 0.0, 0.0, 0, 0, 1, 0))
        per_update = 1 + self.k
        fewest = math.inf  # the fewest output tokens any request has left (ceil(x / K) grows with x)
        for sched in self.ranks:
            for queue in (sched.running, sched.waiting, sched.kv_holding_waiting):
                if not queue:
                    continue
                first = queue[0]
                if first.max_tokens - first.num_output_tokens <= per_update:
                    return wake_at  # its next update may end it (a parked one's count only lags): no bound below
                if not sched.parked or queue is not sched.running:
                    left = min(r.max_tokens - r.num_output_tokens for r in queue)
                else:
                    out = sched.output_tokens
                    left = min(r.max_tokens - out(r) for r in queue)
                if left < fewest:
                    fewest = left
        for _, _, r in self.inputs:
            if r.max_tokens - r.num_output_tokens < fewest:
                fewest = r.max_tokens - r.num_output_tokens
        if fewest == math.inf:
            return math.inf  # nothing to finish until a request arrives (an event the clock holds)
        least = -(-int(fewest) // per_update)
        return wake_at + max(least - 1, 0) * self._d_min

    def next_input_time(self) -> float:
        return self.inputs[0][0] if self.inputs else math.inf

    def has_requests(self) -> bool:
        return any(r.has_requests() for r in self.ranks)

    def counts(self, rank: int) -> tuple[int, int, float]:
        """(waiting, running, KV usage) of one rank, with requests still in the input queue as waiting."""
        sched = self.ranks[rank]
        running, waiting = sched.get_request_counts()
        waiting += self.pending[rank]
        return waiting, running, sched.kv.usage()

    # ------------------------------------------------------------------------------------- timing

    def _batch_seconds(self, plans: list[StepPlan]) -> tuple[float, ...]:
        """Each pipeline stage's seconds for the lockstep step (the busiest rank's)."""
        per_rank = []
        ep_tokens = 0
        for plan in plans:
            per_rank.append(self._rank_batch(plan))
            ep_tokens += per_rank[-1][0] if per_rank[-1][0] else 1  # an idle rank runs a 1-token dummy batch
        if self.dp_ep <= 1:
            ep_tokens = per_rank[0][0]
        best: tuple[float, ...] | None = None
        writes = 1 + self.k
        self._timing_batch = None
        for tokens, seqs, prefill, pairs, dpairs, kv, logits, drafts in per_rank:
            if tokens == 0:
                if len(plans) == 1:
                    continue
                tokens, seqs, logits = 1, 1, 1  # the dummy batch of an idle DP rank
            secs = self.cost.stage_seconds(tokens, seqs, prefill, pairs, dpairs, kv, logits, ep_tokens, writes,
                                           drafts)
            if best is None or sum(secs) > sum(best):
                best = secs
                self._timing_batch = (tokens, seqs, prefill, pairs, dpairs, kv, logits, ep_tokens, writes, drafts)
        return best if best is not None else (0.0,) * self.cost.stages

    def _rank_batch(self, plan: StepPlan) -> tuple[int, int, int, float, float, float, int, int]:
        tokens = seqs = prefill_tokens = logits = 0
        pairs = dpairs = kv = 0.0
        context = plan.context
        prefill = plan.prefill
        spec = plan.spec_tokens
        for rid, n in plan.num_scheduled_tokens.items():
            c = context[rid]
            p = n * c + n * (n + 1) / 2  # keys each new token attends to
            tokens += n
            seqs += 1
            kv += c
            pairs += p
            if rid in prefill:
                prefill_tokens += n
            else:
                dpairs += p
            logits += 1 + spec.get(rid, 0)
        if plan.bulk:
            # Parked decoders (Scheduler.park), one token each: a pair per key, c + 1 per request.
            b = plan.bulk
            tokens += b
            seqs += b
            kv += plan.bulk_context
            pairs += plan.bulk_context + b
            dpairs += plan.bulk_context + b
            logits += b
        drafts = self.k if (self.k and not plan.skip_drafts and plan.sampling) else 0
        return tokens, seqs, prefill_tokens, pairs, dpairs, kv, logits, drafts

    # ---------------------------------------------------------------------------------------- loop

    def advance(self, now: float) -> float | None:
        """Run the loop at time ``now`` as far as it goes without waiting; return when it must run again
        (a batch's end, or an input's arrival), or None when it sleeps until new input."""
        while True:
            if self.blocked:
                head = self.queue[-1]
                if head.end > now:
                    return head.end
                self.blocked = False
                self._finish(self.queue.pop(), now)
                continue
            self._take_inputs(now)
            if self.fast and len(self.queue) <= 1 and self.has_requests():
                t = (spec_run if self.k else decode_run)(self, now, self.horizon)
                if t is not None:
                    now = t
                    continue
            if self.has_requests() and len(self.queue) < self.depth:
                plans = [r.schedule() for r in self.ranks]
                executed = any(p.num_scheduled_tokens or p.bulk for p in plans)
                end = start = now
                if executed:
                    start = max(now, self.stage_free[0])
                    t = start
                    for i, s in enumerate(self._batch_seconds(plans)):
                        t = max(t, self.stage_free[i]) + s
                        self.stage_free[i] = t
                    end = t
                    self.last_step_seconds = end - start
                    self.steps += 1
                    if self.record:
                        self._record(plans, end, end - start)
                self.queue.appendleft(InFlight(plans, now, end, executed))
                if self.on_load is not None:
                    # P/D: an async KV load starts when the worker runs the step that allocated its blocks.
                    for rank, plan in enumerate(plans):
                        for rid in plan.loads:
                            self.on_load(self, rank, rid, start)
                if not executed and not any(b.executed for b in self.queue):
                    # vLLM would spin here: nothing runs until a request or a KV transfer arrives.
                    while self.queue:
                        self._finish(self.queue.pop(), now)
                    return self._sleep(now)
                if len(self.queue) < self.depth and (executed or self.has_requests()):
                    continue
            elif not self.queue:
                return self._sleep(now)
            self.blocked = True

    def _sleep(self, now: float) -> float | None:
        self.asleep = True
        t = self.next_input_time()
        return t if t < math.inf else None

    def _finish(self, batch: InFlight, now: float) -> None:
        """``update_from_output`` for every rank's part of the batch, at ``now`` (the batch's end)."""
        spec = self.spec
        for sched, plan in zip(self.ranks, batch.plans, strict=True):
            if not plan.num_scheduled_tokens and not plan.finished_before and not plan.bulk:
                sched.update_from_output(plan, {})
                continue
            if spec is None:
                generated = dict.fromkeys(plan.sampling, 1)
            else:
                pad, drafts = plan.pad_spec, plan.spec_tokens
                extra = spec.accepted([0 if rid in pad else drafts.get(rid, 0) for rid in plan.sampling])
                generated = {rid: 1 + e for rid, e in zip(plan.sampling, extra, strict=True)}
            finished = sched.update_from_output(plan, generated)
            if plan.bulk:
                sched.bulk_delivered(plan, now)
            if self.on_tokens is not None:
                self.on_tokens(sched.delivered, now)
            if self.on_finish is not None:
                for request in finished:
                    self.on_finish(request, now)
            if self.k and not self.asynchronous and not plan.skip_drafts and batch.executed:
                sched.update_draft_token_ids({rid: self.k for rid in plan.num_scheduled_tokens})

    def _record(self, plans: list[StepPlan], end: float, seconds: float) -> None:
        tl = self.timeline
        running = waiting = used = tokens = prefill = 0
        for sched, plan in zip(self.ranks, plans, strict=True):
            r, w = sched.get_request_counts()
            running += r
            waiting += w
            used += sched.kv.pool.used
            for rid, n in plan.num_scheduled_tokens.items():
                tokens += n
                if rid in plan.prefill:
                    prefill += n
            tokens += plan.bulk
        tl.t.append(end)
        tl.running.append(running)
        tl.waiting.append(waiting)
        tl.kv_used.append(used)
        tl.tokens.append(tokens)
        tl.prefill_tokens.append(prefill)
        tl.seconds.append(seconds)
        tl.add_batch(self._timing_batch or (0.0,) * len(BATCH_FIELDS))
