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
speculative decoding (:mod:`pdtune.sim.specrun` has runs of its own), pipeline parallelism. A run's steps are
timed before its blocks are planned, so the plan covers only the steps before its horizon. Sliding-window groups
free the blocks that fall out of a request's window as it decodes: for them the run orders every block event as
the scheduler meets them (:func:`_window_plan`, each request's events being arithmetic sequences built as
arrays), and stops before an allocation that would fail or a step in which the waiting queue's head would fit.
``tests/test_sim_run.py`` checks that runs with and without it produce the same results, request by request.
"""

from __future__ import annotations

from collections.abc import Callable
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
#: The shortest run worth unparking the parked decoders for (pdtune.sim.parking): unparking and parking them
#: again costs about two steps of every request, a parked step only its requests not parked. At 4, DeepSeek-V3's
#: 2,779-client plan row unparked 1,234 requests for runs of 13 steps (median), 5.0 s of CPU; at 16, 3.0 s. At 64
#: the plan row gained no more, and 30 MiniMax-M2.5 H100 rows lost what their short runs saved (9.2 -> 14.3 s).
PARKED_MIN_RUN = 16


def _steady_head(sched: Scheduler, asynchronous: bool) -> tuple[bool, int | None]:
    """Whether the rank is a steady decoder, and the blocks (watermark included) the waiting queue's head needs to
    be admitted, None when the waiting loop will not look at it."""
    cfg = sched.config
    if cfg.num_spec_tokens or sched.kv_holding_waiting:
        return False, None
    ph = 1 if asynchronous else 0
    for r in sched.running:
        if r.park_start >= 0:
            continue  # a parked decoder is steady until it is stepped again (pdtune.sim.parking)
        if (r.is_prefill_chunk or r.num_output_placeholders != ph or r.spec_tokens or r.num_stale_output_tokens
                or r.num_in_flight_tokens != ph or r.status is not Status.RUNNING):
            return False, None
    return waiting_head(sched)


def waiting_head(sched: Scheduler) -> tuple[bool, int | None]:
    """Whether the waiting loop admits nobody while the running requests only decode, and the blocks (watermark
    included) the waiting queue's head needs to be admitted, None when the waiting loop will not look at it."""
    cfg = sched.config
    if sched.waiting:
        if len(sched.running) >= cfg.max_num_seqs or len(sched.running) >= cfg.max_num_batched_tokens:
            return True, None  # the waiting loop stops before it looks at a request
        head = sched.waiting[0]
        if head.num_stale_output_tokens or head.status not in (Status.WAITING, Status.PREEMPTED):
            return False, None
        if head.num_computed_tokens:
            return False, None
        # Its whole prompt must not fit now; decoding only takes blocks (sliding windows aside: _window_plan
        # stops the run before the step at which it would fit), so it will not fit during the run.
        kv = sched.kv
        full = min(head.num_tokens, cfg.max_model_len)
        need = kv.blocks_to_allocate(head, full, cap=True)
        watermark = kv.watermark_blocks if sched.running else 0
        if need + watermark <= kv.pool.num_free:
            return False, None
        return True, need + watermark
    return True, None


def _window_plan(sched: Scheduler, k: int, asynchronous: bool, head_need: int | None
                 ) -> tuple[int, list[tuple[int, int, int, int]], np.ndarray] | None:
    """A rank with sliding-window groups: every block event of the next ``k`` schedules, in the scheduler's
    order, and how many of those steps can run as pure decode steps.

    ``KVCacheManager.allocate_slots`` first frees the blocks that fell out of a request's window
    (``remove_skipped_blocks``, on the processed tokens ``computed - in_flight``), then takes the new ones, request
    by request in running order; a request's allocation fails when its groups' new blocks exceed the free ones;
    after the running requests the waiting loop admits its head when its whole prompt fits. Events are (step,
    position in the running queue, 0 free / 1 take, group); returns (steps that run, events, net blocks taken per
    step), or None when a request is not a steady decoder. Every request's events are arithmetic sequences (a
    new block every ``block_size`` tokens, a block out of the window as often), so they are built as arrays."""
    kv = sched.kv
    lookahead = sched.config.num_lookahead_tokens
    ph = 1 if asynchronous else 0
    running = sched.running
    computed = np.fromiter((r.num_computed_tokens for r in running), dtype=np.int64, count=len(running))
    positions = np.arange(len(running), dtype=np.int64)
    steps, places, kinds, groups = [], [], [], []

    def sequence(first: np.ndarray, b: int) -> tuple[np.ndarray, np.ndarray]:
        # Steps first, first + b, ... below k, per request: (steps, positions).
        live = first < k
        f = first[live]
        reps = (k - 1 - f) // b + 1
        offsets = np.arange(int(reps.sum()), dtype=np.int64) - np.repeat(np.cumsum(reps) - reps, reps)
        return np.repeat(f, reps) + b * offsets, np.repeat(positions[live], reps)

    for gi, g in enumerate(kv.groups):
        if g.kind not in (FULL, SLIDING):
            continue  # recurrent groups hold their blocks for the whole request
        per = kv.req[gi]
        b = g.block_size
        blocks = [per.get(r.rid) for r in running]
        held = np.fromiter((rb.n if rb is not None else 0 for rb in blocks), dtype=np.int64, count=len(blocks))
        # The schedule at step j asks for cdiv(computed + j + 1 + lookahead, b) blocks: the first new one at
        # j = held * b - computed - lookahead, then one every b steps.
        first = held * b - computed - lookahead
        if (first < 0).any():
            return None  # short of blocks already: not a steady decoder
        j, p = sequence(first, b)
        steps.append(j)
        places.append(p)
        kinds.append(np.ones(j.size, dtype=np.int64))
        groups.append(np.full(j.size, gi, dtype=np.int64))
        if g.kind == SLIDING:
            assert g.sliding_window is not None
            nulls = np.fromiter((rb.nulls if rb is not None else 0 for rb in blocks), dtype=np.int64,
                                count=len(blocks))
            # Blocks out of the window at step j: max(nulls, max(0, a + j) // b), one more each time a + j
            # crosses a multiple of b past (nulls + 1) * b.
            a = computed - ph - g.sliding_window + 1 - g.extra_retained
            if (np.maximum(a, 0) // b > nulls + 1).any():
                return None  # more than one block out of the window in one step: left to the scheduler
            base = (nulls + 1) * b - a  # the step of the next free; at or below 0: at step 0
            j0, p0 = sequence(np.maximum(base, 0), k)  # the first free of each request (one at most)
            j1, p1 = sequence(base + b, b)  # the later ones
            j = np.concatenate((j0, j1))
            steps.append(j)
            places.append(np.concatenate((p0, p1)))
            kinds.append(np.zeros(j.size, dtype=np.int64))
            groups.append(np.full(j.size, gi, dtype=np.int64))
    if not steps:
        return k, [], np.zeros(k, dtype=np.int64)
    j_all, p_all, t_all, g_all = (np.concatenate(x) for x in (steps, places, kinds, groups))
    order = np.lexsort((g_all, t_all, p_all, j_all))
    j_all, p_all, t_all, g_all = j_all[order], p_all[order], t_all[order], g_all[order]
    delta = 1 - 2 * t_all  # a free gives a block back, a take uses one
    # Free blocks after each event, in the scheduler's order: a request's frees come before its takes, so the
    # first take that drives the count below 0 is the allocation that fails (the scheduler preempts there).
    free = kv.pool.num_free + np.cumsum(delta)
    limit = k
    short = np.flatnonzero((t_all == 1) & (free < 0))
    if short.size:
        limit = int(j_all[short[0]])
    net = np.bincount(j_all, weights=-delta, minlength=k).astype(np.int64)[:k]
    if head_need is not None:
        # Free blocks after each whole step: the waiting queue's head is admitted in the first step that leaves
        # its prompt's blocks free.
        after = kv.pool.num_free - np.cumsum(net)
        fits = np.flatnonzero(after[:limit] >= head_need)
        if fits.size:
            limit = int(fits[0])
    cut = int(np.searchsorted(j_all, limit, side="left"))
    events = list(zip(j_all[:cut].tolist(), p_all[:cut].tolist(), t_all[:cut].tolist(), g_all[:cut].tolist()))
    return limit, events, net


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


def decode_run(core, now: float, horizon_of: Callable[[], float]) -> float | None:  # type: ignore[no-untyped-def]
    """Apply a run of pure decode steps to ``core`` (an :class:`~pdtune.sim.engine.EngineCore` about to
    schedule at ``now``), every update before ``horizon_of()``; return the time the loop stands at afterwards, or
    None when no run applies (the scheduler takes the step). The horizon is asked for only once the cheaper checks
    pass: it walks every other core's requests, and with thousands of clients most steps fail a check."""
    asynchronous = core.asynchronous
    if core.cost.stages != 1 or core.depth > 2:
        return None
    horizon: float | None = None  # asked for at most once
    ranks: list[Scheduler] = core.ranks
    windowed = any(g.kind == SLIDING for g in ranks[0].kv.groups)
    if asynchronous:
        if len(core.queue) != 1 or not core.queue[0].executed:
            return None
    elif core.queue:
        return None
    if any(s.parked for s in ranks):
        # Parked decoders: step them again only when a long run looks possible (every other request steady, the
        # waiting queue's head blocked, nobody near the end, room for PARKED_MIN_RUN steps of the last one's
        # length before the horizon).
        for i, sched in enumerate(ranks):
            if asynchronous:
                plan = core.queue[0].plans[i]
                if plan.prefill or plan.spec_tokens or len(plan.num_scheduled_tokens) + plan.bulk != len(
                        sched.running):
                    return None
            if not _steady_head(sched, asynchronous)[0]:
                return None
            if min((r.max_tokens - r.num_output_tokens for r in sched.running if r.park_start < 0),
                   default=PARKED_MIN_RUN + 3) - 3 < PARKED_MIN_RUN:
                return None
            if sched.parked_near_end(PARKED_MIN_RUN + 3):
                return None
        last = core.queue[0].end if asynchronous else now
        horizon = horizon_of()  # unparking below changes only this core's requests, which the horizon leaves out
        if horizon < last + PARKED_MIN_RUN * core.last_step_seconds:
            return None
        for sched in ranks:
            sched.unpark_all()
    if asynchronous:
        prev = core.queue[0]
        for sched, plan in zip(ranks, prev.plans, strict=True):
            scheduled = plan.num_scheduled_tokens
            if plan.prefill or plan.spec_tokens or len(plan.sampling) != len(sched.running) or len(
                    scheduled) != len(sched.running):
                return None
            if any(scheduled.get(r.rid) != 1 for r in sched.running):
                return None
    heads = [_steady_head(s, asynchronous) for s in ranks]
    if not all(ok for ok, _ in heads):
        return None
    if not any(s.running for s in ranks):
        return None
    # Steps until the first request nears its end (or max_model_len).
    k = 1 << 30
    for s in ranks:
        if s.running:
            left = min(r.max_tokens - r.num_output_tokens for r in s.running)
            longest = max(r.num_prompt_tokens + r.num_output_tokens for r in s.running)
            k = min(k, left - 3, s.config.max_model_len - longest - 3)
    if k < MIN_RUN:
        return None
    k = min(k, 4096)
    # Time the steps first: the run stops before the first update at or after the horizon, so the block plans
    # below need only cover the steps before it (with many clients, a few dozen of the 4,096).
    cost = core.cost
    n_per = [len(s.running) for s in ranks]
    kv0 = [float(sum(r.num_computed_tokens for r in s.running)) for s in ranks]
    dp = core.dp_ep
    ep = sum(n if n else 1 for n in n_per) if dp > 1 else n_per[0]
    writes = 1 + core.k
    # Every step's duration at once (StepCost.decode_run_seconds).
    best, who = busiest_rank(cost, n_per, ep, writes, k,
                             lambda i, n: cost.decode_run_seconds(n, kv0[i], k, ep, writes))
    t0, ends_all, updates = step_ends(core, now, best, asynchronous)
    if horizon is None:
        horizon = horizon_of()
    k = min(k, int(np.searchsorted(updates, horizon, side="left")))
    if k < MIN_RUN:
        return None
    # Blocks: each rank's cumulative needs must fit its free blocks.
    needs = []
    events: list[list[tuple[int, int, int, int]]] | None = [] if windowed else None
    for s, (_, head_need) in zip(ranks, heads, strict=True):
        if windowed:
            plan = _window_plan(s, k, asynchronous, head_need)
            if plan is None:
                return None
            fits, ev, need = plan
            events.append(ev)  # type: ignore[union-attr]
        else:
            need = _block_needs(s, k)
            if need is None:
                return None
            cum = np.cumsum(need)
            fits = int(np.searchsorted(cum, s.kv.pool.num_free, side="right"))
        k = min(k, fits)
        needs.append(need)
    m = k
    if m < MIN_RUN:
        return None
    needs = [n[:m] for n in needs]
    ends, secs = run_times(t0, ends_all, m)
    if core.record:
        # The batch that timed each step: the busiest rank's (an idle rank's one-token dummy batch).
        j = np.arange(m, dtype=float)
        n = np.asarray(n_per, dtype=float)[who[:m]]
        kv = np.asarray(kv0)[who[:m]] + n * j
        idle = n == 0
        n1 = np.where(idle, 1.0, n)
        pairs = np.where(idle, 0.0, kv + n)
        kv = np.where(idle, 0.0, kv)
        core.timeline.add_batches(np.column_stack([n1, n1, np.zeros(m), pairs, pairs, kv, n1, np.full(m, ep),
                                                   np.full(m, writes), np.zeros(m)]))
    _apply(core, ranks, m, ends, secs, needs, asynchronous, events)
    if asynchronous:
        return ends[m - 2] if m >= 2 else core.queue[0].end
    return ends[-1]


def busiest_rank(cost, n_per: list[int], ep: float, writes: int, steps: int,  # type: ignore[no-untyped-def]
                 seconds_of) -> tuple[np.ndarray, np.ndarray]:
    """Each of ``steps`` lockstep steps' seconds, the busiest rank's (``seconds_of(rank, requests)``, an idle
    rank running a one-token dummy batch, as EngineCore._batch_seconds times the step), and which rank that was
    (the first of equals, as the engine)."""
    best = np.zeros(steps)
    who = np.zeros(steps, dtype=int)
    for i, n in enumerate(n_per):
        if n == 0:
            if len(n_per) == 1:
                continue
            d = np.full(steps, sum(cost.stage_seconds(1, 1, 0, 0.0, 0.0, 0.0, 1, ep, writes, 0)))
        else:
            d = seconds_of(i, n)
        if i == 0:
            best = d
        else:
            who = np.where(d > best, i, who)
            best = np.maximum(best, d)
    return best, who


def step_ends(core, now: float, seconds: np.ndarray,  # type: ignore[no-untyped-def]
              asynchronous: bool) -> tuple[float, np.ndarray, np.ndarray]:
    """A run's start, each step's end (sequential sums: the engine's own ``t + d``) and each update's time: async,
    the j-th step's schedule point follows the update of the batch before it (the one in flight for j = 0);
    sync, its own end."""
    t0 = max(now, core.stage_free[0])
    ends_all = np.cumsum(np.concatenate(([t0], seconds)))[1:]
    updates = np.concatenate(([core.queue[0].end], ends_all[:-1])) if asynchronous else ends_all
    return t0, ends_all, updates


def run_times(t0: float, ends_all: np.ndarray, m: int) -> tuple[list[float], list[float]]:
    """The first ``m`` steps' ends and seconds, as the engine records them (end - start)."""
    starts = np.concatenate(([t0], ends_all[:-1]))[:m]
    return ends_all[:m].tolist(), (ends_all[:m] - starts).tolist()


def record_steps(core, ranks: list[Scheduler], m: int, ends: list[float],  # type: ignore[no-untyped-def]
                 secs: list[float], needs: list[np.ndarray], tokens_per_request: int) -> None:
    """One timeline row per step of a run, the lockstep group's sums (as EngineCore._record writes them), before
    the run's blocks are taken: each running request scheduled ``tokens_per_request`` tokens, none prefilling."""
    tl = core.timeline
    running = sum(len(s.running) for s in ranks)
    waiting = sum(len(s.waiting) + len(s.kv_holding_waiting) for s in ranks)
    used = sum(s.kv.pool.used for s in ranks)
    tl.t.extend(ends)
    tl.running.extend([running] * m)
    tl.waiting.extend([waiting] * m)
    tl.kv_used.extend((np.cumsum(sum(n[:m] for n in needs)) + used).tolist())
    tl.tokens.extend([running * tokens_per_request] * m)
    tl.prefill_tokens.extend([0] * m)
    tl.seconds.extend(secs)


def _apply(core, ranks: list[Scheduler], m: int, ends: list[float], secs: list[float],  # type: ignore[no-untyped-def]
           needs: list[np.ndarray], asynchronous: bool,
           events: list[list[tuple[int, int, int, int]]] | None = None) -> None:
    """Advance every counter as ``m`` scheduled (and, async, ``m`` updated) decode steps would."""

    # Async: the batch in flight is updated at the first step's schedule point, then each new batch at the
    # next one; the last scheduled batch stays in flight. Update times: the in-flight end, then ends[:-1].
    if asynchronous:
        prev = core.queue.pop()
        update_times = [prev.end] + ends[:-1]
    else:
        update_times = ends
    if core.record:
        record_steps(core, ranks, m, ends, secs, needs, 1)
    plans = []
    ones = [1] * m
    for si, sched in enumerate(ranks):
        kv = sched.kv
        kv.forget_limits()
        sched._pending.clear()  # the batch in flight was applied here, not updated (nobody is parked)
        sched.finished_req_ids = []
        lookahead = sched.config.num_lookahead_tokens
        if events is None:
            kv.pool.take(int(needs[si][:m].sum()))
        else:
            # Block by block in the scheduler's order: out-of-window blocks back to the pool (hashed ones to the
            # back of the free queue, unhashed to its front, as _free_range puts them), new ones from its front.
            anonymous = kv.enable_caching
            takes = 0  # consecutive new blocks, taken at once (the same blocks from the same queue front)
            for step, pos, kind, gi in events[si]:
                if step >= m:
                    break
                if kind:
                    takes += 1
                else:
                    if takes:
                        kv.pool.take(takes)
                        takes = 0
                    rb = kv.req[gi][sched.running[pos].rid]
                    # Behind the window every block is full and hashed (the hashes run a block or two behind
                    # the newest token) when prefix caching is on; none is without it.
                    if anonymous:
                        kv.pool.give_anonymous(1)
                    else:
                        kv.pool.give_unhashed(1)
                    rb.nulls += 1
            if takes:
                kv.pool.take(takes)
        full = [(gi, g.block_size) for gi, g in enumerate(kv.groups) if g.kind in (FULL, SLIDING)]
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


__all__ = ["MIN_RUN", "SimRequest", "busiest_rank", "decode_run", "record_steps", "run_times", "step_ends",
           "waiting_head"]
