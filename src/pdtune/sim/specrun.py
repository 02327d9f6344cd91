"""Runs of speculative decode steps applied at once: :mod:`pdtune.sim.fastpath`'s shortcut for MTP/EAGLE engines.

With drafts, a steady decoder is scheduled ``1 + K`` tokens every step and keeps ``1 + a`` of them, ``a`` the
accepted drafts, drawn as Binomial(K, A) per request and update (:class:`~pdtune.sim.engine.SpecDecode`) in the
order the engine updates them: rank by rank, each rank's requests in running order. Those draws are the only
thing that differs from step to step, and numpy draws an array of them in the same order and with the same
results as one call per request, so a run of ``m`` steps can be computed at once:

* every request's context at the ``j``-th schedule is its context at the first plus ``1 + a`` for each update
  before it (sync: the updates of the run's earlier steps; async: those of the steps before the one in flight,
  whose rejected drafts are rolled back only when it is updated);
* each step is timed from its sums (:meth:`~pdtune.sim.stepcost.StepCost.run_seconds`), integers held in
  floats, so the times are those of the engine to the bit;
* the blocks each request takes at each schedule follow from its contexts, and must fit the free ones.

The run stops before anything that needs the scheduler's full rules: an update that would bring a request within
two steps of its last token or ``max_model_len``, a step whose blocks do not fit, an event from outside the engine
(the clock's horizon), and it applies only to engines whose layouts are full attention without prefix caching
(nothing but counts changes in the block pool) and whose draft generator no other engine shares. Afterwards the
generator stands where the run's draws left it. ``tests/test_sim_run.py`` checks runs with and without it equal.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from pdtune.sim.fastpath import InFlight, busiest_rank, record_steps, run_times, step_ends, waiting_head
from pdtune.sim.request import Status
from pdtune.sim.scheduler import Scheduler, StepPlan

#: Steps a run covers at most (the draws and block counts are arrays of steps x requests).
MAX_RUN = 1024
#: Runs shorter than this are left to the scheduler.
MIN_SPEC_RUN = 4


def _steady(sched: Scheduler, k: int, asynchronous: bool, in_flight: StepPlan | None) -> bool:
    """Whether every running request of the rank decodes ``1 + k`` tokens a step (``k`` drafts) and nothing else
    can happen in the rank but that (the waiting queue's head blocked, as :func:`pdtune.sim.fastpath.waiting_head`
    decides)."""
    cfg = sched.config
    kv = sched.kv
    if (not kv._full_only or kv.enable_caching or sched.kv_holding_waiting or cfg.draft_slots
            or cfg.max_num_scheduled_tokens is not None and cfg.max_num_scheduled_tokens != cfg.max_num_batched_tokens):
        return False
    q = 1 + k
    ph = q if asynchronous else 0
    running = sched.running
    if len(running) * q > cfg.max_num_batched_tokens:
        return False  # the budget could cut someone
    for r in running:
        if (r.status is not Status.RUNNING or r.is_prefill_chunk or r.spec_tokens != k or r.num_stale_output_tokens
                or r.num_output_placeholders != ph or r.num_in_flight_tokens != ph or r.park_start >= 0
                or r.num_computed_tokens != r.num_prompt_tokens + r.num_output_tokens - 1 + ph):
            return False
    if in_flight is not None:
        scheduled = in_flight.num_scheduled_tokens
        spec = in_flight.spec_tokens
        if (in_flight.prefill or in_flight.pad_spec or in_flight.skip_drafts or in_flight.bulk
                or len(scheduled) != len(running) or len(in_flight.sampling) != len(running)):
            return False
        for r, rid in zip(running, in_flight.sampling, strict=True):
            if r.rid != rid or scheduled.get(rid) != q or spec.get(rid) != k:
                return False
    return waiting_head(sched)[0]


def spec_run(core, now: float, horizon_of: Callable[[], float]) -> float | None:  # type: ignore[no-untyped-def]
    """Apply a run of speculative decode steps to ``core`` (about to schedule at ``now``), every update before
    ``horizon_of()`` (asked for once the cheaper checks pass, as in :func:`~pdtune.sim.fastpath.decode_run`);
    return the time the loop stands at afterwards, or None when no run applies."""
    spec = core.spec
    k = core.k
    asynchronous = core.asynchronous
    if spec is None or spec.cores != 1 or core.cost.stages != 1 or core.depth > 2:
        return None
    if asynchronous:
        if len(core.queue) != 1 or not core.queue[0].executed:
            return None
        flights = core.queue[0].plans
    elif core.queue:
        return None
    else:
        flights = [None] * len(core.ranks)
    ranks: list[Scheduler] = core.ranks
    if not any(s.running for s in ranks):
        return None
    for sched, plan in zip(ranks, flights, strict=True):
        if not _steady(sched, k, asynchronous, plan):
            return None
    q = 1 + k
    running = [r for s in ranks for r in s.running]
    n_all = len(running)
    # Updates the run may hold at most: each keeps at least one token, and the last must leave two steps' worth
    # (and the async rule that skips a request whose step in flight ends it) untouched; the draws cut it below.
    room = min(min(r.max_tokens - r.num_output_tokens for r in running),
               min(s.config.max_model_len - r.num_prompt_tokens - r.num_output_tokens - q
                   for s in ranks for r in s.running))
    steps = min(MAX_RUN, room - 2 * q - 2)
    n_per = [len(s.running) for s in ranks]
    bounds = np.cumsum([0, *n_per])
    ep = sum(n * q if n else 1 for n in n_per) if core.dp_ep > 1 else n_per[0] * q
    t0 = max(now, core.stage_free[0])
    half = q * (q + 1) / 2  # keys the q new tokens of one request attend to among themselves
    horizon = horizon_of()
    if horizon < float("inf"):
        # No step is shorter than the first (a step's time grows with its context): a bound on the steps before
        # the horizon, so that a run the horizon cuts short does not draw a thousand steps.
        ctx0 = float(sum(r.num_computed_tokens for r in ranks[0].running))
        n0 = len(ranks[0].running)
        first = core.cost.run_seconds(n0 * q, n0, n0 * q, ep, q, k, np.array([q * ctx0 + n0 * half]),
                                      np.array([ctx0]))[0] if n0 else 0.0
        if first > 0:
            steps = min(steps, int((horizon - t0) / first) + 3)
    if steps < MIN_SPEC_RUN:
        return None
    rng = spec.rng
    saved = rng.bit_generator.state
    if spec.acceptance <= 0:
        accepted = np.zeros((steps, n_all), dtype=np.int64)
    elif spec.acceptance >= 1:
        accepted = np.full((steps, n_all), k, dtype=np.int64)
    else:
        accepted = rng.binomial(k, spec.acceptance, size=(steps, n_all))
    kept = 1 + accepted  # tokens each update keeps
    out = np.cumsum(kept, axis=0) + np.array([r.num_output_tokens for r in running])  # outputs after each update
    limit = np.array([min(r.max_tokens, s.config.max_model_len - r.num_prompt_tokens - q)
                      for s in ranks for r in s.running])
    ok = (out + 2 * q + 2 < limit).all(axis=1)
    m = steps if ok.all() else int(np.argmin(ok))
    if m < MIN_SPEC_RUN:
        rng.bit_generator.state = saved
        return None
    # Contexts at each schedule: the first plus the tokens every earlier update kept (the j-th schedule follows
    # the update of step j - 1, sync, or of step j - 2 whose drafts were counted in full when it was scheduled).
    c0 = np.array([r.num_computed_tokens for r in running], dtype=np.int64)
    ctx = np.empty((m, n_all), dtype=np.int64)
    ctx[0] = c0
    if m > 1:
        ctx[1:] = c0 + np.cumsum(kept[:m - 1], axis=0)
    # Each step's time: the busiest rank's batch, as EngineCore does.
    cost = core.cost
    writes = q
    sums: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # per busy rank: each step's pairs and cached tokens

    def seconds_of(i: int, n: int) -> np.ndarray:
        kv = ctx[:, bounds[i]:bounds[i + 1]].sum(axis=1).astype(float)
        pairs = q * kv + n * half
        sums[i] = (pairs, kv)
        return cost.run_seconds(n * q, n, n * q, ep, writes, k, pairs, kv)

    best, who = busiest_rank(cost, n_per, ep, writes, m, seconds_of)
    t0, ends_all, updates = step_ends(core, now, best, asynchronous)
    m = min(m, int(np.searchsorted(updates, horizon, side="left")))
    # Blocks: each request asks at the j-th schedule for cdiv(context + q + lookahead, block) of each group.
    needs = []
    for si, sched in enumerate(ranks):
        kv_mgr = sched.kv
        lookahead = sched.config.num_lookahead_tokens
        need = np.zeros(m, dtype=np.int64)
        cols = slice(bounds[si], bounds[si + 1])
        for per, block in kv_mgr._full_groups:
            held = np.array([per[r.rid].n if r.rid in per else 0 for r in sched.running], dtype=np.int64)
            want = np.maximum(-(-(ctx[:m, cols] + q + lookahead) // block), held)
            need += np.diff(want, axis=0, prepend=held[None, :]).sum(axis=1)
        fits = int(np.searchsorted(np.cumsum(need), kv_mgr.pool.num_free, side="right"))
        m = min(m, fits)
        needs.append(need)
    rng.bit_generator.state = saved
    if m < MIN_SPEC_RUN:
        return None
    # The generator moves on by exactly the run's draws (the same numbers, drawn again).
    if 0 < spec.acceptance < 1:
        again = rng.binomial(k, spec.acceptance, size=(m, n_all))
        assert (again == accepted[:m]).all()
    ends, secs = run_times(t0, ends_all, m)
    update_times = [core.queue[0].end, *ends[:-1]] if asynchronous else ends
    if asynchronous:
        core.queue.pop()
    if core.record:
        record_steps(core, ranks, m, ends, secs, needs, q)
        rows = []
        for j in range(m):
            i = int(who[j])
            n = n_per[i]
            if n == 0:
                rows.append((1, 1, 0, 0.0, 0.0, 0.0, 1, ep, writes, 0))
            else:
                pairs, kv = sums[i]
                rows.append((n * q, n, 0, float(pairs[j]), float(pairs[j]), float(kv[j]), n * q, ep, writes, k))
        core.timeline.add_batches(np.asarray(rows, dtype=float))
    total = kept[:m].sum(axis=0)
    last = ctx[m - 1]
    plans = []
    for si, sched in enumerate(ranks):
        kv_mgr = sched.kv
        kv_mgr.pool.take(int(needs[si][:m].sum()))
        kv_mgr.forget_limits()
        sched.finished_req_ids = []
        lookahead = sched.config.num_lookahead_tokens
        for col, r in enumerate(sched.running, start=int(bounds[si])):
            got = int(total[col])
            r.num_computed_tokens += got
            r.num_output_tokens += got
            if r.t_first < 0:
                r.t_first = update_times[0]
            r.token_times.extend(update_times)
            r.token_counts.extend(kept[:m, col].tolist())
            slot = int(last[col]) + q + lookahead
            for per, block in kv_mgr._full_groups:
                rb = per[r.rid]
                rb.n = max(rb.n, -(-slot // block))
        sched.n_sched += m
        if asynchronous:
            plan = StepPlan({r.rid: q for r in sched.running}, {r.rid: k for r in sched.running},
                            context={r.rid: int(last[col])
                                     for col, r in enumerate(sched.running, start=int(bounds[si]))},
                            index=sched.n_sched - 1)
            plan.sampling = [r.rid for r in sched.running]
            plans.append(plan)
    core.steps += m
    if asynchronous:
        core.queue.appendleft(InFlight(plans, ends[-2] if m >= 2 else update_times[0], ends[-1], True))
    core.stage_free[0] = ends[-1]
    return ends[m - 2] if asynchronous and m >= 2 else (update_times[0] if asynchronous else ends[-1])


__all__ = ["MAX_RUN", "MIN_SPEC_RUN", "spec_run"]
