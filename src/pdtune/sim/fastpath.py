"""An exact shortcut for runs of pure decode steps, so a closed loop of thousands of steps stays fast.

Most steps of a benchmark only decode: every running request gets one token, nobody is admitted (the waiting
queue is empty, or its head does not fit and cannot fit sooner, since decoding only takes blocks), nobody
finishes or is preempted. Stepping such a run request by request through :class:`~pdtune.sim.scheduler.Scheduler`
costs tens of microseconds per request and step; :func:`decode_run` applies ``k`` of them at once with
the same outcome: each request's counters advance by ``k``, its token times are the steps' end times, the
blocks it takes are counted per step from where each request's next block starts (no block is taken out of
order: a run frees nothing), and each step is timed and recorded like any other. The run stops before
anything that would need the scheduler's full rules: a request two steps from its last token, a step whose
blocks do not fit, an event from outside the engine (a request's arrival: routing reads the engine's counts),
speculative decoding, sliding-window groups (they free blocks), pipeline parallelism. ``tests/test_sim_run.py``
checks that runs with and without it produce the same results, request by request.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pdtune.sim.kvcache import FULL, SLIDING
from pdtune.sim.request import SimRequest, Status
from pdtune.sim.scheduler import Scheduler, StepPlan


@dataclass
class InFlight:
    """A step the engine has scheduled and not yet finished (async scheduling keeps one in flight)."""

    plans: list[StepPlan]
    start: float
    end: float
    executed: bool

#: Runs shorter than this are left to the scheduler (setting one up costs a few requests' steps).
MIN_RUN = 4


def _steady(sched: Scheduler, asynchronous: bool) -> bool:
    cfg = sched.config
    if cfg.num_spec_tokens or sched.kv_holding_waiting:
        return False
    ph = 1 if asynchronous else 0
    for r in sched.running:
        if (r.is_prefill_chunk or r.num_output_placeholders != ph or r.spec_tokens or r.num_stale_output_tokens
                or r.num_in_flight_tokens != ph or r.status is not Status.RUNNING):
            return False
    if sched.waiting:
        if len(sched.running) >= cfg.max_num_seqs or len(sched.running) >= cfg.max_num_batched_tokens:
            return True  # the waiting loop stops before it looks at a request
        head = sched.waiting[0]
        if head.num_stale_output_tokens or head.status not in (Status.WAITING, Status.PREEMPTED):
            return False
        if head.num_computed_tokens:
            return False
        # Its whole prompt must not fit now; decoding only takes blocks, so it will not fit during the run.
        kv = sched.kv
        full = min(head.num_tokens, cfg.max_model_len)
        need = kv.blocks_to_allocate(head, full, cap=True)
        watermark = kv.watermark_blocks if sched.running else 0
        if need + watermark <= kv.pool.num_free:
            return False
    return True


def _block_needs(sched: Scheduler, k: int) -> np.ndarray:
    """Blocks the running requests take at each of the next ``k`` schedules (one token each)."""
    kv = sched.kv
    needs = np.zeros(k, dtype=np.int64)
    lookahead = sched.config.num_lookahead_tokens
    for gi, g in enumerate(kv.groups):
        if g.kind != FULL:
            continue  # recurrent groups hold their blocks for the whole request
        per = kv.req[gi]
        b = g.block_size
        starts = []
        for r in sched.running:
            rb = per.get(r.rid)
            held = rb.n if rb is not None else 0
            # The schedule at step j asks for cdiv(computed + j + 1 + lookahead, b) blocks: the first new
            # one at j = held * b - computed - lookahead, then one every b steps.
            first = held * b - r.num_computed_tokens - lookahead
            if first < 0:
                return None  # type: ignore[return-value]  # short of blocks already: not a steady decoder
            starts.append(first)
        s = np.asarray(starts, dtype=np.int64)
        s = s[s < k]
        if s.size == 0:
            continue
        reps = (k - 1 - s) // b + 1
        idx = np.repeat(s, reps) + b * (np.arange(reps.sum()) - np.repeat(np.cumsum(reps) - reps, reps))
        needs += np.bincount(idx, minlength=k)[:k]
    return needs


def decode_run(core, now: float, horizon: float) -> float | None:  # type: ignore[no-untyped-def]
    """Apply a run of pure decode steps to ``core`` (an :class:`~pdtune.sim.engine.EngineCore` about to
    schedule at ``now``), every update before ``horizon``; return the time the loop stands at afterwards, or
    None when no run applies (the scheduler takes the step)."""
    asynchronous = core.asynchronous
    if core.cost.stages != 1 or core.depth > 2:
        return None
    ranks: list[Scheduler] = core.ranks
    if any(g.kind == SLIDING for g in ranks[0].kv.groups):
        return None
    if asynchronous:
        if len(core.queue) != 1:
            return None
        prev = core.queue[0]
        if not prev.executed:
            return None
        for sched, plan in zip(ranks, prev.plans, strict=True):
            scheduled = plan.num_scheduled_tokens
            if plan.prefill or plan.spec_tokens or len(plan.sampling) != len(sched.running) or len(
                    scheduled) != len(sched.running):
                return None
            if any(scheduled.get(r.rid) != 1 for r in sched.running):
                return None
    elif core.queue:
        return None
    if not all(_steady(s, asynchronous) for s in ranks):
        return None
    if not any(s.running for s in ranks):
        return None
    # Steps until the first request nears its end (or max_model_len).
    k = 1 << 30
    for s in ranks:
        max_len = s.config.max_model_len
        for r in s.running:
            k = min(k, r.max_tokens - r.num_output_tokens - 3, max_len - r.num_tokens - 3)
    if k < MIN_RUN:
        return None
    k = min(k, 4096)
    # Blocks: each rank's cumulative needs must fit its free blocks.
    needs = []
    for s in ranks:
        need = _block_needs(s, k)
        if need is None:
            return None
        cum = np.cumsum(need)
        fits = int(np.searchsorted(cum, s.kv.pool.num_free, side="right"))
        k = min(k, fits)
        needs.append(need)
    if k < MIN_RUN:
        return None
    # Time the steps; stop before the first update at or after the horizon.
    cost = core.cost
    n_per = [len(s.running) for s in ranks]
    kv0 = [float(sum(r.num_computed_tokens for r in s.running)) for s in ranks]
    dp = core.dp_ep
    ep = sum(n if n else 1 for n in n_per) if dp > 1 else n_per[0]
    writes = 1 + core.k
    ends: list[float] = []
    secs: list[float] = []
    t = max(now, core.stage_free[0])
    first_update = core.queue[0].end if asynchronous else None
    for j in range(k):
        best = 0.0
        for n, c0 in zip(n_per, kv0, strict=True):
            if n == 0:
                if len(n_per) == 1:
                    continue
                d = sum(cost.stage_seconds(1, 1, 0, 0.0, 0.0, 0.0, 1, ep, writes, 0))
            else:
                kv = c0 + n * j
                d = sum(cost.stage_seconds(n, n, 0, kv + n, kv + n, kv, n, ep, writes, 0))
            best = max(best, d)
        update = (first_update if j == 0 else ends[j - 1]) if asynchronous else t + best
        if update >= horizon:
            break
        before = t
        t = t + best
        ends.append(t)
        secs.append(t - before)  # as the engine records it (end - start)
    m = len(ends)
    if m < MIN_RUN:
        return None
    _apply(core, ranks, m, ends, secs, needs, asynchronous)
    if asynchronous:
        return ends[m - 2] if m >= 2 else core.queue[0].end
    return ends[-1]


def _apply(core, ranks: list[Scheduler], m: int, ends: list[float], secs: list[float],  # type: ignore[no-untyped-def]
           needs: list[np.ndarray], asynchronous: bool) -> None:
    """Advance every counter as ``m`` scheduled (and, async, ``m`` updated) decode steps would."""

    # Async: the batch in flight is updated at the first step's schedule point, then each new batch at the
    # next one; the last scheduled batch stays in flight. Update times: the in-flight end, then ends[:-1].
    if asynchronous:
        prev = core.queue.pop()
        update_times = [prev.end] + ends[:-1]
    else:
        update_times = ends
    if core.record:
        # One timeline row per step, the lockstep group's sums (as EngineCore._record writes them).
        tl = core.timeline
        running = sum(len(s.running) for s in ranks)
        waiting = sum(len(s.waiting) + len(s.kv_holding_waiting) for s in ranks)
        used = sum(s.kv.pool.used for s in ranks)
        cum = np.cumsum(sum(n[:m] for n in needs)) + used
        tl.t.extend(ends)
        tl.running.extend([running] * m)
        tl.waiting.extend([waiting] * m)
        tl.kv_used.extend(cum.tolist())
        tl.tokens.extend([running] * m)
        tl.prefill_tokens.extend([0] * m)
        tl.seconds.extend(secs)
    plans = []
    ones = [1] * m
    for si, sched in enumerate(ranks):
        kv = sched.kv
        sched.finished_req_ids = []
        kv.pool.take(int(needs[si][:m].sum()))
        lookahead = sched.config.num_lookahead_tokens
        full = [(gi, g.block_size) for gi, g in enumerate(kv.groups) if g.kind == FULL]
        for r in sched.running:
            r.num_computed_tokens += m
            r.num_output_tokens += m
            if r.t_first < 0:
                r.t_first = update_times[0]
            r.token_times.extend(update_times)
            r.token_counts.extend(ones)
            for gi, b in full:
                rb = kv.req[gi][r.rid]
                rb.n = max(rb.n, -(-(r.num_computed_tokens + lookahead) // b))
            # What the last step's cache_blocks calls hashed (hashing only ever grows).
            kv.cache_blocks(r, r.num_tokens - 1)
            if asynchronous:
                kv.cache_blocks(r, r.num_computed_tokens - r.num_in_flight_tokens)
        if asynchronous:
            plan = StepPlan({r.rid: 1 for r in sched.running},
                            context={r.rid: r.num_computed_tokens - 1 for r in sched.running})
            plan.sampling = [r.rid for r in sched.running]
            plans.append(plan)
    core.steps += m
    if asynchronous:
        core.queue.appendleft(InFlight(plans, ends[-2] if m >= 2 else prev.end, ends[-1], True))
    core.stage_free[0] = ends[-1]


__all__ = ["MIN_RUN", "SimRequest", "decode_run"]
