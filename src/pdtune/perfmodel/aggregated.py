"""Aggregated serving: one vLLM server prefilling and decoding the same requests, at each concurrency.

A benchmark such as ``aiperf --concurrency C`` (or ``vllm bench serve --max-concurrency C``) keeps ``C``
clients busy: each sends a request of ``ISL`` prompt tokens, streams ``OSL`` output tokens, and sends its next
request. vLLM's scheduler (V1, chunked prefill always on) builds every step from a token budget of
``max_num_batched_tokens`` (``M``) per DP rank: every running request's next decode token first, then as much of
the waiting prompts as the rest of the budget holds, a long prompt in chunks over several steps. The first output
token comes out of the step that finishes the prompt; TPOT is the mean time between the steps a request decodes
in, so it includes the steps that also carry other requests' prefill chunks.

**Cohorts.** The clients start together, so their prompts meet the budget together: as many prompts as fit go
into one step, the rest into the next ones. Requests that finish prefill in the same step decode in lockstep
(same OSL), finish in the same step and send their next prompts together: the closed loop keeps ``g`` cohorts of
``m`` requests. Measured sweeps show the cohorts disperse (the front end, the network and the tokenizer spread a
cohort's prompts over time), so pdtune keeps ``m = 1 + arrival_clustering x (R - 1)`` for ``R`` running requests
per rank, the efficiency's ``arrival_clustering`` fitted like the other factors. A cohort's prompts share the
budget the others' decode tokens leave, ``M - (R - m)``, first come first served: they take
``s = ceil(m ISL / (M - R + m))`` steps and the median prompt is done after ``ceil((m + 1)/2 ISL / (M - R + m))``.
A request's life is ``L = w + s + (OSL - 1)`` steps, ``w`` the step it waits for (1 while other cohorts keep
the engine busy, 0 when the whole loop is one cohort and the engine idles between rounds).

**Three regimes**, decided by counting steps (never by timing them, so the regime is the same for every set of
efficiency factors, which keeps calibration smooth):

1. *Sparse* (``g s <= L``): per life, ``g s`` steps carry a cohort's prefill next to the others' decode tokens
   and the rest decode only. ``TPOT = [(g - 1) s t_mixed + (OSL - 1 - (g - 1) s) t_decode] / (OSL - 1)``,
   ``TTFT = w t_mean`` plus the median prompt's steps.
2. *Dense* (every step carries prefill, the budget not full): prompts finish in ``s`` steps after the step they
   arrive in; each step carries ``R ISL / L`` prompt tokens and ``R (OSL - 1) / L`` decode tokens.
3. *Full* (the budget is the limit): every step carries ``M`` tokens, so a life is ``L = R (ISL + OSL - 1) / M``
   steps; ``B = M (OSL - 1) / (ISL + OSL - 1)`` of the tokens are decode tokens, the rest prompt chunks; a new
   request waits behind the prompts ahead of it, ``TTFT = (L - OSL + 1) t_full``.

TTFT adds ``request_overhead_s`` (front end, tokenisation, streaming). The KV cache's room is vLLM's accounting at
the mean context ``ISL + OSL / 2`` (blocks are allocated as tokens arrive). Beyond it, or beyond ``max_num_seqs``,
prompts wait for admission and the closed loop queues: the ``S`` running requests decode at their own pace (TPOT
stays flat) and by Little's law each of the ``k`` clients cycles through the wait ``W`` and a life
``T_S = TTFT_S + (OSL - 1) TPOT_S`` at a rate of ``S / T_S`` requests per second, so ``W = (k / S - 1) T_S`` and
the TTFT is ``W + TTFT_S`` (linear in ``k``). Until 2026-12-07 the KV-limited case let the admitted requests take
turns instead (TPOT growing by ``k / R``, TTFT flat), the opposite of what the measured KV-limited rows show and
of what :mod:`pdtune.sim` does. DP ranks share the load as in
the decode sweep
(:func:`pdtune.perfmodel.sweeps._spread`); MoE layers keep them in lockstep. Pipeline stages run one after the
other (no micro-batch overlap in aggregated serving).

Each point is kept as a :class:`AggPlan`: TTFT and TPOT as weighted sums of step times of fixed batches, so
:meth:`AggPlan.evaluate` re-times a point for any :class:`~pdtune.perfmodel.efficiency.Efficiency` without
solving it again. Every number is **modeled**.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from pdtune.errors import InputError
from pdtune.gpus import GpuSpec
from pdtune.memory import vllm_batch_defaults, vllm_default_max_num_batched_tokens
from pdtune.perfmodel.efficiency import ROOFLINE, Efficiency
from pdtune.perfmodel.engine import Batch, Engine, EngineConfig
from pdtune.perfmodel.sweeps import Prediction
from pdtune.state import plan_state


def serving_defaults(vllm: str, gpu: GpuSpec) -> tuple[int, int]:
    """vLLM's ``max_num_batched_tokens`` and ``max_num_seqs`` for ``vllm serve`` on ``gpu``: the tokens of
    :func:`pdtune.memory.vllm_default_max_num_batched_tokens`, the sequences of the same GPU tier
    (:func:`pdtune.memory.vllm_batch_defaults`, the switches table)."""
    tokens = vllm_default_max_num_batched_tokens(gpu.memory_total, vllm=vllm, device_name=gpu.name)
    _, seqs = vllm_batch_defaults(gpu.memory_total, vllm=vllm, device_name=gpu.name)
    return tokens, seqs


@dataclass(frozen=True)
class LinearTime:
    """A time as ``sum(weight x step time of batch) + overhead x request_overhead_s``."""

    steps: tuple[tuple[Batch, float], ...] = ()
    overhead: float = 0.0

    def plus(self, other: LinearTime, scale: float = 1.0) -> LinearTime:
        merged: dict[Batch, float] = dict(self.steps)
        for batch, w in other.steps:
            merged[batch] = merged.get(batch, 0.0) + scale * w
        return LinearTime(tuple(merged.items()), self.overhead + scale * other.overhead)

    def scaled(self, factor: float) -> LinearTime:
        return LinearTime(tuple((b, w * factor) for b, w in self.steps), self.overhead * factor)

    def seconds(self, step: Callable[[Batch], float], eff: Efficiency) -> float:
        return sum(w * step(b) for b, w in self.steps) + self.overhead * eff.request_overhead_s


def _steps(*pairs: tuple[Batch, float]) -> LinearTime:
    return LinearTime(()).plus(LinearTime(tuple((b, w) for b, w in pairs if w)))


@dataclass(frozen=True)
class AggPlan:
    """One concurrency of one engine: how TTFT and TPOT are made of step times (efficiency left out)."""

    concurrency: int
    regime: str  # sparse | dense | full (the heavier level's when DP ranks interpolate)
    running: float  # requests decoding on average, whole engine
    ttft: LinearTime
    tpot: LinearTime
    kv_limited: bool
    mixed: Batch | None = field(default=None, compare=False)  # a step with prefill (for the step breakdown)

    def evaluate(self, engine: Engine, eff: Efficiency) -> tuple[float, float]:
        """(TTFT, TPOT) in seconds with the exact step model."""

        def step(b: Batch) -> float:
            return sum(s.total for s in engine.stage_times(b, eff))

        return self.ttft.seconds(step, eff), self.tpot.seconds(step, eff)


def _batch(ranks: int, decodes: float, prefill: float, isl: int, context: float, others: float) -> Batch:
    """The busiest rank's step: ``decodes`` requests one token each at ``context`` cached tokens and ``prefill``
    prompt tokens (a prompt token attends to the positions before it: half the prompt on average, chunks
    included); ``others`` tokens from the other DP ranks meet them in the experts."""
    decodes, prefill = max(decodes, 0.0), max(prefill, 0.0)
    chunk = min(float(isl), prefill) if prefill else 0.0
    prompts = prefill / chunk if chunk else 0.0  # prompt chunks in the step
    return Batch(
        tokens=decodes + prefill,
        seqs=max(decodes + prompts, 1e-9),
        prefill_tokens=prefill,
        attn_pairs=decodes * context + prefill * (isl + 1) / 2,
        decode_pairs=decodes * context,
        kv_tokens_read=decodes * context + prompts * (isl - chunk) / 2,
        logits=decodes + prefill / isl,
        ep_tokens=decodes + prefill + others,
    )


def steady_capacity(engine: Engine, isl: int, osl: int) -> float:
    """Requests one DP rank's KV cache holds in steady state.

    vLLM allocates blocks as tokens arrive (and preempts when they run out), so a running request holds its
    current context, not ``max_model_len``: in a closed loop the requests are spread evenly over their lives,
    ``ISL + OSL / 2`` tokens each on average. vLLM's own accounting at that length (sliding windows and
    recurrent states included), then ``max_num_seqs``.
    """
    config = engine.config
    plan = plan_state(
        engine.spec,
        max_model_len=max(1, math.ceil(isl + osl / 2)),
        tp=engine.topology.tp,
        kv_cache_dtype=config.kv_cache_dtype,
        vllm=config.vllm,
        prefix_caching=False,
    )
    stages = engine.stages
    per_stage = max(len(s) for s in stages)
    room = plan.capacity(engine.kv_cache_per_gpu).max_concurrency * engine.spec.num_layers / per_stage
    if config.max_num_seqs is not None:
        room = min(room, config.max_num_seqs)
    return room


def _level(
    engine: Engine, ranks: int, k: int, isl: int, osl: int, clustering: float, capacity: float
) -> AggPlan:
    """``ranks`` DP ranks serving ``k`` concurrent requests each, ``capacity`` of them running at most."""
    budget = engine.config.max_num_batched_tokens
    cap = min(capacity, budget - 1)  # a step holds every running request's decode token
    running = float(min(k, cap))
    decode_steps = max(osl - 1, 0)
    # DP ranks that share MoE layers step in lockstep: one rank's prefill step holds every rank up.
    lock = ranks if engine.spec.moe is not None and engine.topology.dp > 1 else 1
    context = isl + osl / 2  # cached tokens a decoding request reads, on average over its life
    # A cohort: the prompts that reach the scheduler together. They share the budget left by the others'
    # decode tokens, first come first served, so the median one is done when half the cohort's tokens are.
    cohort = max(1.0, min(running, 1 + clustering * (running - 1)))
    avail = max(budget - (running - cohort), 1.0)
    chunks = max(1, math.ceil(cohort * isl / avail))
    median_chunks = max(1, math.ceil((cohort + 1) / 2 * isl / avail))
    groups = lock * running / cohort  # cohorts whose prefill steps the (lockstep) group runs
    wait = min(1.0, groups - 1)  # the step a request waits for: none when the loop is a single cohort
    life = wait + chunks + decode_steps
    if groups * chunks <= life:
        regime = "sparse"
        mixed_steps = groups * chunks
        average = running * decode_steps / life  # requests decoding on a rank, on average
        own = mixed_steps / lock  # the rank's own prefill steps
        mixed = _batch(ranks, running - cohort, cohort * isl / chunks, isl, context, (ranks - 1) * average)
        decode_only = life - mixed_steps
        slots = running * decode_steps - (running - cohort) * own - average * (mixed_steps - own)
        per_step = slots / decode_only if decode_only > 0 else running
        dec = _batch(ranks, per_step, 0.0, isl, context, (ranks - 1) * per_step)
        if decode_steps:
            others = min((groups - 1) * chunks, decode_steps) / decode_steps
            tpot = _steps((mixed, others), (dec, 1 - others))
        else:
            tpot = _steps((dec, 1.0))
        mean = _steps((mixed, mixed_steps / life), (dec, decode_only / life))
        first = _batch(ranks, running - cohort, (cohort + 1) / 2 * isl / median_chunks, isl, context,
                       (ranks - 1) * average)
        ttft = mean.scaled(wait).plus(_steps((first, float(median_chunks))))
        decoding = average
    else:
        # Every step carries prefill: dense while the budget has room, else full.
        chunks_d, life_d = 1, 2 + decode_steps
        for _ in range(3):  # s depends on the budget the decode tokens leave, which depends on s
            decodes = running * decode_steps / life_d
            chunks_d = max(1, math.ceil(isl / max(budget - decodes, 1)))
            life_d = 1 + chunks_d + decode_steps
        decodes = running * decode_steps / life_d
        prefill = running * isl / life_d
        if decodes + prefill <= budget:
            regime = "dense"
            mixed = _batch(ranks, decodes, prefill, isl, context, (ranks - 1) * (decodes + prefill))
            ttft = _steps((mixed, float(1 + chunks_d)))
        else:
            regime = "full"
            life_d = running * (isl + decode_steps) / budget
            decodes = budget * decode_steps / (isl + decode_steps)
            mixed = _batch(ranks, decodes, budget - decodes, isl, context, (ranks - 1) * budget)
            ttft = _steps((mixed, max(life_d - decode_steps, 1.0)))
        tpot = _steps((mixed, 1.0))
        decoding = decodes
    ttft = LinearTime(ttft.steps, 1.0)
    kv_limited = running < k
    # Beyond the KV room a waiting prompt is not admitted until its blocks fit (``Scheduler.schedule``,
    # vllm/v1/core/sched/scheduler.py: the waiting loop stops when ``allocate_slots`` returns None), and beyond
    # max_num_seqs not at all (it stops at ``max_num_running_reqs``; ``capacity`` is steady_capacity, which holds
    # both): the running batch stays at the limit and decodes at its pace, and the other clients queue.
    if kv_limited:
        # By Little's law each of the k clients waits (k / S - 1) lives of an admitted request before its prompt
        # starts.
        queued = k / running - 1
        ttft = ttft.scaled(1 + queued).plus(tpot, queued * decode_steps)
    return AggPlan(0, regime, ranks * decoding, ttft, tpot, kv_limited, mixed)


def _mix(a: AggPlan, b: AggPlan, w: float) -> AggPlan:
    """``(1 - w) a + w b``: a fractional load between two whole ones."""
    return AggPlan(
        b.concurrency,
        b.regime,
        a.running + (b.running - a.running) * w,
        a.ttft.scaled(1 - w).plus(b.ttft, w),
        a.tpot.scaled(1 - w).plus(b.tpot, w),
        b.kv_limited,
        b.mixed,
    )


def agg_plan(engine: Engine, concurrency: int, isl: int, osl: int, clustering: float = 0.0,
             room: float | None = None) -> AggPlan:
    """The :class:`AggPlan` of ``concurrency`` clients on ``engine`` (DP ranks share them evenly);
    ``clustering`` is the efficiency's ``arrival_clustering``; ``room`` is :func:`steady_capacity` of the
    engine when the caller already has it (it depends on the engine and the workload only)."""
    dp = engine.topology.dp
    requests = float(concurrency)
    room = steady_capacity(engine, isl, osl) if room is None else room
    if requests < dp:
        lo = math.floor(requests)
        if lo == 0:
            raise InputError("--concurrency", "concurrency", "must be at least 1")
        low = _level(engine, lo, 1, isl, osl, clustering, room)
        high = _level(engine, lo + 1, 1, isl, osl, clustering, room)
        plan = low if lo == requests else _mix(low, high, requests - lo)
    else:
        per_rank = requests / dp
        lo = math.floor(per_rank)
        low = _level(engine, dp, lo, isl, osl, clustering, room)
        high = _level(engine, dp, lo + 1, isl, osl, clustering, room)
        plan = low if lo == per_rank else _mix(low, high, per_rank - lo)
    return AggPlan(concurrency, plan.regime, plan.running, plan.ttft, plan.tpot, plan.kv_limited, plan.mixed)


def agg_config(gpu: GpuSpec, config: EngineConfig | None, vllm: str | None = None) -> EngineConfig:
    """The engine settings of an aggregated server: ``config`` as given, else vLLM's defaults for ``vllm``."""
    if config is not None:
        return config
    base = EngineConfig()
    version = vllm or base.vllm
    mnbt, seqs = serving_defaults(version, gpu)
    return EngineConfig(vllm=version, max_num_batched_tokens=mnbt, max_num_seqs=seqs)


def agg_prediction(engine: Engine, plan: AggPlan, isl: int, osl: int, eff: Efficiency) -> Prediction:
    """The tidy prediction of one planned point."""
    ttft, tpot = plan.evaluate(engine, eff)
    roof_ttft, roof_tpot = plan.evaluate(engine, ROOFLINE)
    life = ttft + (osl - 1) * tpot
    roof_life = roof_ttft + (osl - 1) * roof_tpot
    step = engine.step_time(plan.mixed, eff).parts if plan.mixed is not None else {}
    topo = engine.topology
    return Prediction(
        mode="agg",
        model=engine.spec.name,
        gpu=engine.gpu.name,
        topology=topo.name,
        prefill_topology=None,
        decode_topology=None,
        n_prefill_workers=None,
        n_decode_workers=None,
        gpus_prefill=0,
        gpus_decode=topo.gpus,
        mtp_tokens=0,
        acceptance=None,
        isl=isl,
        osl=osl,
        concurrency=plan.concurrency,
        running=plan.running,
        request_rate=plan.concurrency / life,
        ttft_ms=1000 * ttft,
        tpot_ms=1000 * tpot,
        roofline_tps=plan.concurrency * (isl + osl) / roof_life if roof_life > 0 else math.inf,
        kv_capacity=engine.capacity,
        kv_limited=plan.kv_limited,
        step=step,
    )
