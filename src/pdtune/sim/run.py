"""A simulated benchmark run: the clients of a :class:`~pdtune.sim.workload.Workload` against one aggregated vLLM
server (its DP ranks behind the DP load balancer), on one event clock.

The clock is a heap of events: a client sends a request; the request reaches the engine after the front end's
``request_overhead_s`` (the efficiency factor the steady-state model adds to TTFT: HTTP, tokenisation,
detokenisation, streaming) and is routed (:mod:`pdtune.sim.router`); an engine core runs its loop until it
waits for a batch (:mod:`pdtune.sim.engine`). A finished request frees its client, which sends the next one at
once (closed loop) or when its send time comes (open loop, trace). Phases run in turn; the last is measured.

A MoE model's DP ranks step in lockstep in one engine core; a dense model's DP ranks are independent engines.
The KV cache of each rank is ``kv_cache_per_gpu // pool_block_bytes`` blocks of the plan of
:func:`pdtune.state.plan_state` for the run's ``max_model_len`` (the longest request unless given), TP,
KV dtype, speculative tokens, ``max_num_batched_tokens`` and async scheduling (which size sliding windows).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from pdtune import versions
from pdtune.errors import InputError
from pdtune.perfmodel.efficiency import DEFAULT_ACCEPTANCE, Efficiency
from pdtune.perfmodel.engine import Engine
from pdtune.sim.engine import EngineCore, SpecDecode
from pdtune.sim.kvcache import KVLayout
from pdtune.sim.request import SimRequest
from pdtune.sim.results import RequestRecord, SimResult
from pdtune.sim.router import DPLoadBalancer
from pdtune.sim.scheduler import Scheduler, SchedulerConfig
from pdtune.sim.stepcost import StepCost
from pdtune.sim.workload import Phase, Workload, closed_loop
from pdtune.state import StatePlan, plan_state

#: vLLM's ``max_num_seqs`` when a prediction leaves it unset (``vllm serve`` on a 70 GiB+ GPU).
DEFAULT_MAX_NUM_SEQS = 1024


@dataclass(frozen=True)
class SimConfig:
    """The vLLM settings a simulation adds to the engine's (``EngineConfig``), and the simulation's own."""

    async_scheduling: bool = True  # vLLM 0.33's default
    enable_prefix_caching: bool | None = None  # None: vLLM's default (on), off for recurrent hybrids (see notes)
    long_prefill_token_threshold: int = 0
    max_model_len: int | None = None  # None: the workload's longest request (plus the chat template)
    scheduler_reserve_full_isl: bool = True
    watermark: float = 0.0
    use_v2_model_runner: bool = True
    acceptance: float = DEFAULT_ACCEPTANCE  # MTP/EAGLE draft acceptance rate
    # Spread of the front end's time per request: its coefficient of variation (0: every request pays exactly
    # request_overhead_s). Measured sweeps show a cohort's prompts reach the scheduler spread over time (the
    # steady-state model's arrival_clustering); a spread breaks cohorts the waiting queue does not re-form.
    overhead_cv: float = 0.0
    seed: int = 0
    record_timeline: bool = True
    max_steps: int = 20_000_000
    fast_path: bool = True  # bulk decode runs (pdtune.sim.fastpath); off: every step through the scheduler


@dataclass
class EngineSetup:
    """Everything built for one engine (one DP group): its plan, its KV layout, its scheduler settings."""

    engine: Engine
    plan: StatePlan
    layout: KVLayout
    scheduler: SchedulerConfig
    depth: int
    lockstep: bool
    spec: int
    notes: list[str] = field(default_factory=list)


def setup_engine(engine: Engine, config: SimConfig, max_model_len: int) -> EngineSetup:
    """The scheduler settings and KV cache layout of ``engine`` (see the module)."""
    ec = engine.config
    spec = engine.mtp_tokens or ec.num_speculative_tokens
    notes: list[str] = []
    hybrid = engine.spec.is_hybrid
    caching = config.enable_prefix_caching
    if caching is None:
        caching = not hybrid
        if hybrid:
            notes.append("prefix caching simulated off for a recurrent hybrid (vLLM's default 'align' mode "
                         "is not simulated)")
    plan = plan_state(
        engine.spec, max_model_len=max_model_len, tp=engine.topology.tp, kv_cache_dtype=ec.kv_cache_dtype,
        num_speculative_tokens=spec, vllm=ec.vllm, prefix_caching=caching and not hybrid,
        max_num_batched_tokens=ec.max_num_batched_tokens, speculative_model=ec.speculative_model,
        decode_context_parallel_size=ec.decode_context_parallel_size, block_size=ec.block_size,
        async_scheduling=config.async_scheduling if versions.at_least(ec.vllm, "0.26") else None,
    )
    per_stage = max(len(s) for s in engine.stages)
    num_blocks = engine.kv_cache_per_gpu * engine.spec.num_layers // (plan.pool_block_bytes * per_stage)
    if num_blocks - 1 < plan.pool_blocks_per_request:
        raise InputError(f"topology {engine.topology.name}", "kv_cache",
                         f"{num_blocks} KV blocks per rank hold no request of max_model_len {max_model_len} "
                         f"({plan.pool_blocks_per_request} blocks); vLLM refuses to start")
    layout = KVLayout.from_plan(plan, num_blocks)
    seqs = ec.max_num_seqs if ec.max_num_seqs is not None else DEFAULT_MAX_NUM_SEQS
    mnbt = ec.max_num_batched_tokens
    seqs = min(seqs, mnbt)
    multi = engine.spec.num_mtp_layers > 1 and spec > 1 and engine.mtp_tokens > 0
    sched = SchedulerConfig(
        max_num_seqs=seqs, max_num_batched_tokens=mnbt, max_model_len=max_model_len,
        long_prefill_token_threshold=config.long_prefill_token_threshold, async_scheduling=config.async_scheduling,
        enable_prefix_caching=caching and not hybrid, scheduler_reserve_full_isl=config.scheduler_reserve_full_isl,
        watermark=config.watermark, num_spec_tokens=spec, num_lookahead_tokens=spec,
        num_prefill_lookahead=(spec if multi else 1) if spec else 0, use_v2_model_runner=config.use_v2_model_runner,
        hash_lookahead=bool(spec),
    )
    pp = engine.topology.pp
    if pp > 1:
        depth = pp + 1 if (config.async_scheduling and config.use_v2_model_runner) else pp
    else:
        depth = 2 if config.async_scheduling else 1
    lockstep = engine.spec.moe is not None and engine.topology.dp > 1
    return EngineSetup(engine, plan, layout, sched, depth, lockstep, spec, notes)


class Clock:
    """The event heaps: ``at(t, fn, *args)`` runs ``fn`` at simulated time ``t`` (ties in submission order);
    ``wake(core, t)`` runs an engine core's loop. :meth:`horizon` is the earliest time anything outside a core
    can change what it sees (the fast path never runs a core past it)."""

    def __init__(self) -> None:
        self.events: list[tuple[float, int, Callable[..., None], tuple]] = []
        self.wakes: list[tuple[float, int, EngineCore, int]] = []
        self.cores: list[EngineCore] = []
        self.seq = 0
        self.now = 0.0

    def at(self, t: float, fn: Callable[..., None], *args: object) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, fn, args))

    def add_core(self, core: EngineCore) -> None:
        core._wake_at = None  # type: ignore[attr-defined]
        core._version = 0  # type: ignore[attr-defined]
        core.horizon = lambda: self.horizon(core)  # type: ignore[attr-defined]
        self.cores.append(core)

    def wake(self, core: EngineCore, t: float) -> None:
        """Run ``core``'s loop at ``t`` (replacing a later wake-up)."""
        pending = core._wake_at  # type: ignore[attr-defined]
        if pending is not None and pending <= t:
            return
        core._version += 1  # type: ignore[attr-defined]
        core._wake_at = t  # type: ignore[attr-defined]
        self.seq += 1
        heapq.heappush(self.wakes, (t, self.seq, core, core._version))  # type: ignore[attr-defined]

    def horizon(self, core: EngineCore) -> float:
        """Events in the heap, and the earliest time another core can create one: only a finished request does
        (its client's next request, or a P/D hand-off), and not before that core's bound
        (:meth:`EngineCore.finish_bound`)."""
        t = self.events[0][0] if self.events else math.inf
        for other in self.cores:
            if other is not core and other._wake_at is not None:  # type: ignore[attr-defined]
                if other._wake_at < t:  # type: ignore[attr-defined]
                    t = min(t, other.finish_bound(other._wake_at))  # type: ignore[attr-defined]
        return t

    def run(self, done: Callable[[], bool]) -> None:
        events, wakes = self.events, self.wakes
        while (events or wakes) and not done():
            if wakes and (not events or wakes[0][:2] < events[0][:2]):
                t, _, core, version = heapq.heappop(wakes)
                if version != core._version:  # type: ignore[attr-defined]
                    continue
                self.now = t
                core._wake_at = None  # type: ignore[attr-defined]
                nxt = core.advance(t)
                if nxt is not None:
                    self.wake(core, nxt)
            else:
                t, _, fn, args = heapq.heappop(events)
                self.now = t
                fn(*args)


class Clients:
    """The harness: phases of requests, each sent when ready and when the cap on requests in flight allows."""

    def __init__(self, clock: Clock, workload: Workload, overhead_s: float,
                 arrive: Callable[[SimRequest, float], None], *, overhead_cv: float = 0.0, seed: int = 0) -> None:
        self.clock = clock
        self.workload = workload
        self.overhead = overhead_s
        self.arrive = arrive
        self.cv = overhead_cv
        self.rng = np.random.default_rng(seed + 7)
        self.phase_index = -1
        self.records: list[SimRequest] = []
        self.warmups = 0
        self.main_start = 0.0
        self.main_end = 0.0
        self.finished_all = False
        self.main_preemptions = 0

    def start(self) -> None:
        self._next_phase(0.0)

    def _next_phase(self, t: float) -> None:
        self.phase_index += 1
        if self.phase_index >= len(self.workload.phases):
            self.finished_all = True
            self.main_end = t
            return
        phase = self.workload.phases[self.phase_index]
        self.phase = phase
        self.queue: deque[SimRequest] = deque()
        self.inflight = 0
        self.done = 0
        measured = self.phase_index == len(self.workload.phases) - 1
        if measured:
            self.main_start = t
        self.requests = []
        for j, spec in enumerate(phase.requests):
            r = SimRequest(f"{self.phase_index}-{j}", spec.isl, spec.osl, index=j, prefix_id=spec.prefix_id,
                           prefix_len=spec.prefix_len)
            r.warmup = not measured
            self.requests.append(r)
        for r, ready in zip(self.requests, phase.ready, strict=True):
            if ready <= 0:
                self.queue.append(r)
            else:
                self.clock.at(t + ready, self._ready, r)
        self._send(t)

    def _ready(self, request: SimRequest) -> None:
        self.queue.append(request)
        self._send(self.clock.now)

    def _send(self, t: float) -> None:
        cap = self.phase.concurrency
        while self.queue and (cap is None or self.inflight < cap):
            r = self.queue.popleft()
            self.inflight += 1
            r.t_send = t
            overhead = self.overhead
            if self.cv > 0 and overhead > 0:
                shape = 1.0 / (self.cv * self.cv)  # a gamma of mean 1 and this coefficient of variation
                r.front_scale = float(self.rng.gamma(shape, 1.0 / shape))
                overhead *= r.front_scale
            self.clock.at(t + overhead, self.arrive, r, t + overhead)

    def finished(self, request: SimRequest, t: float) -> None:
        request.t_last = t
        self.inflight -= 1
        self.done += 1
        if request.warmup:
            self.warmups += 1
        else:
            self.records.append(request)
        if self.done == len(self.phase.requests):
            self._next_phase(t)
        else:
            self._send(t)


def on_tokens(delivered: list[tuple[SimRequest, int]], t: float) -> None:
    """Output tokens reached their clients at ``t``: (request, tokens) for each request of a step."""
    for request, count in delivered:
        if request.t_first < 0:
            request.t_first = t
        request.token_times.append(t)
        request.token_counts.append(count)


def request_records(requests: list[SimRequest], isl_extra: int = 0) -> list[RequestRecord]:
    out = []
    for r in sorted(requests, key=lambda r: r.index):
        out.append(RequestRecord(r.index, r.rank, r.num_prompt_tokens - isl_extra, r.max_tokens, r.t_send,
                                 r.t_arrive, r.t_first, r.t_last, tuple(r.token_times), r.num_preemptions,
                                 r.transfer_s, tuple(r.token_counts), r.front_scale))
    return out


def build_cores(setup: EngineSetup, cost: StepCost, spec: SpecDecode | None, config: SimConfig,
                prefix: str = "") -> tuple[list[EngineCore], list[tuple[int, int]]]:
    """The engine cores of one vLLM server and its DP targets (core, rank): one lockstep core for a MoE model's
    DP ranks, one core per rank for a dense model."""
    dp = setup.engine.topology.dp
    if setup.lockstep:
        cores = [EngineCore([Scheduler(setup.scheduler, setup.layout) for _ in range(dp)], cost, depth=setup.depth,
                            spec=spec, lockstep_dp=dp, name=prefix or "engine", record=config.record_timeline)]
        return cores, [(0, r) for r in range(dp)]
    cores = [EngineCore([Scheduler(setup.scheduler, setup.layout)], cost, depth=setup.depth, spec=spec,
                        name=(f"{prefix}rank{i}" if dp > 1 else (prefix or "engine")), record=config.record_timeline)
             for i in range(dp)]
    return cores, [(i, 0) for i in range(dp)]


def check_workload(workload: Workload, config: SimConfig) -> None:
    if not isinstance(workload, Workload):
        raise InputError("simulate", "workload", "expected a pdtune.sim.workload.Workload")
    if not (0 <= config.acceptance <= 1):
        raise InputError("--acceptance", "acceptance", f"must be in [0, 1], got {config.acceptance}")
    if not (math.isfinite(config.overhead_cv) and config.overhead_cv >= 0):
        raise InputError("--overhead-cv", "overhead_cv", f"must be >= 0, got {config.overhead_cv}")


def simulate(engine: Engine, workload: Workload, *, efficiency: Efficiency, config: SimConfig | None = None,
             cost: StepCost | None = None) -> SimResult:
    """Simulate ``workload`` on one aggregated vLLM server, ``engine`` (from
    :func:`pdtune.perfmodel.engine.build_engine`), step by step; every number is **modeled**.

    ``cost`` is a :class:`StepCost` to reuse (its cached terms survive across calls; pass
    ``cost.with_efficiency(eff)`` to re-time with other factors).
    """
    config = config or SimConfig()
    check_workload(workload, config)
    template = engine.config.template_tokens
    max_len = config.max_model_len or (workload.max_len + template)
    if max_len < workload.max_len + template:
        raise InputError("--max-model-len", "max_model_len",
                         f"{max_len} is shorter than the workload's longest request ({workload.max_len + template} "
                         "tokens); vLLM rejects such requests")
    setup = setup_engine(engine, config, max_len)
    if cost is None or cost.engine is not engine:
        cost = StepCost(engine, efficiency)
    elif cost.eff is not efficiency:
        cost = cost.with_efficiency(efficiency)
    spec = SpecDecode(setup.spec, config.acceptance, config.seed) if setup.spec else None
    clock = Clock()
    cores, targets = build_cores(setup, cost, spec, config)
    balancer = DPLoadBalancer(len(targets), lambda i: cores[targets[i][0]].counts(targets[i][1]))

    def arrive(request: SimRequest, t: float) -> None:
        if template:
            request.num_prompt_tokens += template
            if request.prefix_id is not None:
                request.prefix_len += template
        i = balancer.route()
        request.rank = i
        core, rank = targets[i]
        cores[core].submit(t, rank, request)
        if cores[core].asleep or not cores[core].queue:
            clock.wake(cores[core], t)

    clients = Clients(clock, workload, efficiency.request_overhead_s, arrive, overhead_cv=config.overhead_cv,
                      seed=config.seed)

    def finish(request: SimRequest, t: float) -> None:
        balancer.done(request.rank)
        clients.finished(request, t)

    for core in cores:
        core.on_tokens = on_tokens
        core.on_finish = finish
        core.fast = config.fast_path
        clock.add_core(core)
    clients.start()
    guard = config.max_steps

    def done() -> bool:
        if sum(c.steps for c in cores) > guard:
            raise InputError("simulate", "max_steps", f"the run took more than {guard:,} steps")
        return clients.finished_all

    clock.run(done)
    if not clients.finished_all:
        stuck = sum(len(s.waiting) for c in cores for s in c.ranks)
        raise InputError("simulate", "kv_cache", f"{stuck} request(s) can never be scheduled (their prompt needs "
                         "more KV blocks than the cache holds)")
    topo = engine.topology
    meta = {
        "label": workload.label, "model": engine.spec.name, "gpu": engine.gpu.name, "mode": "agg",
        "topology": topo.name, "gpus_decode": topo.gpus, "mtp_tokens": engine.mtp_tokens,
        "isl": common_value(r.isl for r in workload.main.requests), "osl": common_value(r.osl for r in workload.main.requests),
        "concurrency": workload.concurrency, "max_model_len": max_len,
        "max_num_batched_tokens": setup.scheduler.max_num_batched_tokens, "max_num_seqs": setup.scheduler.max_num_seqs,
        "async_scheduling": config.async_scheduling, "prefix_caching": setup.scheduler.enable_prefix_caching,
        "kv_blocks": {c.name: setup.layout.num_blocks * len(c.ranks) for c in cores},
        "kv_blocks_per_rank": setup.layout.num_blocks, "dp_lockstep": setup.lockstep,
        "request_overhead_s": efficiency.request_overhead_s,
    }
    result = SimResult(
        records=request_records(clients.records, template),
        duration_s=clients.main_end - clients.main_start,
        gpus=topo.gpus,
        timelines={c.name: c.timeline for c in cores},
        preemptions=sum(s.num_preemptions for c in cores for s in c.ranks),
        steps=sum(c.steps for c in cores),
        meta=meta,
        warmup_requests=clients.warmups,
        notes=setup.notes + ([f"chat template adds {template} tokens to each prompt"] if template else []),
    )
    result.cost = cost
    return result


def simulate_sweep(engine: Engine, concurrencies: list[int], isl: int, osl: int, *, efficiency: Efficiency,
                   config: SimConfig | None = None, harness: str = "vllm-bench", num_prompts: int | None = None,
                   range_ratio: float | None = None, cost: StepCost | None = None) -> list[SimResult]:
    """A concurrency sweep as a harness runs it (one closed loop per concurrency, ``num_prompts`` per point,
    default ``10 x C``), sharing one step-cost cache: what ``predict``, ``validate`` and ``calibrate`` call for an
    aggregated deployment. ``[r.to_row() for r in ...]`` are tidy rows labelled modeled."""
    out: list[SimResult] = []
    for c in concurrencies:
        workload = closed_loop(c, isl, osl, num_prompts=num_prompts or 10 * c, range_ratio=range_ratio,
                               harness=harness)
        result = simulate(engine, workload, efficiency=efficiency, config=config, cost=cost)
        cost = result.cost
        out.append(result)
    return out


def common_value(values) -> int | None:  # type: ignore[no-untyped-def]
    """The value every request has, else the rounded mean (a range ratio draws lengths)."""
    vals = list(values)
    if not vals:
        return None
    if all(v == vals[0] for v in vals):
        return int(vals[0])
    return int(round(sum(vals) / len(vals)))


__all__ = ["DEFAULT_MAX_NUM_SEQS", "Clients", "Clock", "EngineSetup", "Phase", "SimConfig", "replace",
           "setup_engine", "simulate", "simulate_sweep"]
