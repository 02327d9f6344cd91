"""Concurrency sweeps: prefill-only and decode-only aggregated servers, and xPyD disaggregated deployments.

Every sweep is a closed loop, as ``vllm bench serve --max-concurrency C`` (and sa-bench) runs it: ``C``
clients each send a request, wait for its last token, and send the next. The engine model
(:mod:`pdtune.perfmodel.engine`) gives the time of one step for a given batch; the sweeps decide the batch.

**Requests across DP ranks.** vLLM's DP load balancer sends each request to the least-loaded rank, so the
ranks carry ``C / DP`` requests on average; MoE layers keep them in lockstep and every rank's tokens meet in
the experts. Below one request per rank only ``C`` ranks work; a fractional average load interpolates
linearly between the two whole loads around it (which also keeps every curve monotone in ``C``).

**Prefill-only** (``OSL`` small, the article's 8192/2). A step carries at most ``max_num_batched_tokens``
(``M``) tokens per rank: ``r = max(1, M // ISL)`` requests' prompts at a time, each prompt in ``s =
ceil(ISL / M)`` chunks. A pipeline of ``PP`` stages keeps up to ``PP`` micro-batches in flight (vLLM's batch
queue), one per request at a time, so with fewer requests than stages the pipeline has bubbles. A request's
life is ``PP * (s * t_prefill + (OSL - 1) * t_decode)``; a rank completes ``min(n, r * PP)`` of them per life.

**Decode-only** (the article's 1/1000). Each rank runs every request it holds, up to its KV room (vLLM's
TP-sharded accounting for ``ISL + OSL`` tokens); the rest wait. A step verifies ``1 + K`` tokens per request
with ``K`` MTP draft tokens and keeps ``1 + K * A`` of them on average (``A`` = vLLM's draft acceptance rate).

**Disaggregated.** ``x`` prefill engines feed ``y`` decode engines. In steady state ``B`` of the ``C``
requests are decoding and ``C - B`` are in prefill (queued or running); the request rate out of prefill with
``C - B`` requests equals the rate out of decode with ``B``. That balance has exactly one solution (one rate
rises with ``B``, the other falls), found by bisection; decode holds at most its KV room. Every request's
TTFT then gains its KV transfer from the prefill to the decode engine, :func:`kv_transfer`: the rule of
:mod:`pdtune.transfer`, the same one ``pdtune plan`` charges (``kv_transfer_ms`` of each prediction).

Latencies are modeled means: a deterministic model has no spread, so median and p99 equal the mean. Every TTFT
includes the efficiency's ``request_overhead_s`` (the front end's share; 0 in the article's factors).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field

import pandas as pd

from pdtune.errors import InputError
from pdtune.gpus import GpuSpec
from pdtune.model import ModelSpec
from pdtune.perfmodel.efficiency import DEFAULT_EFFICIENCY, Efficiency
from pdtune.perfmodel.engine import Batch, Engine, EngineConfig, build_engine
from pdtune.topology import Deployment, Topology
from pdtune.transfer import Transfer, pool_link, request_transfer

#: Default workloads of the article.
PREFILL_ISL, PREFILL_OSL = 8192, 2
DECODE_ISL, DECODE_OSL = 1, 1000
DISAGG_ISL, DISAGG_OSL = 8192, 1024


@dataclass(frozen=True)
class Prediction:
    """One deployment at one concurrency: the tidy-schema numbers plus what produced them."""

    mode: str
    model: str
    gpu: str
    topology: str | None
    prefill_topology: str | None
    decode_topology: str | None
    n_prefill_workers: int | None
    n_decode_workers: int | None
    gpus_prefill: int
    gpus_decode: int
    mtp_tokens: int
    acceptance: float | None
    isl: int
    osl: int
    concurrency: int
    running: float  # requests being served: prefilled at once (prefill), decoding (decode, disagg)
    request_rate: float  # requests/s
    ttft_ms: float
    tpot_ms: float
    roofline_tps: float  # the GPUs' limit for the same batches: total tokens/s at peak, no overheads
    kv_capacity: int  # running requests the (decode) engines hold
    kv_limited: bool  # requests wait for KV room (the decode side is full, for a disaggregated deployment)
    step: dict[str, float] = field(default_factory=dict)  # seconds per kind of work in the limiting step
    kv_transfer_ms: float = 0.0  # disaggregated: one request's KV transfer, a term of ``ttft_ms`` (pdtune.transfer)
    # Which model produced the latencies: "steady-state" (this module, pdtune.perfmodel.aggregated: means, so every
    # percentile is the mean) or "simulated" (pdtune.perfmodel.simulated: medians and tails of simulated requests).
    latency_model: str = "steady-state"
    ttft_ms_p90: float | None = None  # None: the steady-state mean (ttft_ms)
    ttft_ms_p99: float | None = None
    tpot_ms_p90: float | None = None
    tpot_ms_p99: float | None = None
    harness: str | None = None  # simulated: the benchmark harness whose clients were simulated
    ttft_ms_mean: float | None = None  # simulated: the mean over the simulated requests (None: ttft_ms)
    tpot_ms_mean: float | None = None

    def statistic(self, metric: str, name: str) -> float:
        """``ttft`` or ``tpot`` in ms as the statistic ``name`` ("p50" or "mean"): what a measurement reporting
        that statistic is compared with. A steady-state prediction's one number serves as both."""
        if name == "mean":
            value = getattr(self, f"{metric}_ms_mean")
            return self.percentile(metric, 50) if value is None else value
        return self.percentile(metric, int(name[1:]))

    def percentile(self, metric: str, p: int) -> float:
        """``ttft`` or ``tpot`` at percentile ``p`` (50, 90, 99) in ms: the median is ``ttft_ms`` / ``tpot_ms``;
        a steady-state prediction has no spread, so every percentile is its mean."""
        base = self.ttft_ms if metric == "ttft" else self.tpot_ms
        if p == 50:
            return base
        value = getattr(self, f"{metric}_ms_p{p}")
        return base if value is None else value

    @property
    def gpus_total(self) -> int:
        return self.gpus_prefill + self.gpus_decode

    @property
    def output_tps(self) -> float:
        return self.request_rate * self.osl

    @property
    def total_tps(self) -> float:
        return self.request_rate * (self.isl + self.osl)

    @property
    def tps_per_gpu(self) -> float:
        return self.total_tps / self.gpus_total

    @property
    def tps_per_user(self) -> float:
        return 1000.0 / self.tpot_ms

    def to_dict(self) -> dict[str, object]:
        out = asdict(self)
        out.update(
            gpus_total=self.gpus_total,
            output_tps=self.output_tps,
            total_tps=self.total_tps,
            tps_per_gpu=self.tps_per_gpu,
            tps_per_user=self.tps_per_user,
            **{f"{m}_ms_p{q}": self.percentile(m, q) for m in ("ttft", "tpot") for q in (90, 99)},
        )
        return out


def to_frame(predictions: Iterable[Prediction]) -> pd.DataFrame:
    """Predictions as a tidy frame (design.md's columns, ``modeled`` True, plus the model's extras)."""
    rows = []
    for p in predictions:
        rows.append(
            {
                "source": "pdtune.perfmodel",
                "path": None,
                "model": p.model,
                "mode": p.mode,
                "topology": p.topology,
                "prefill_topology": p.prefill_topology,
                "decode_topology": p.decode_topology,
                "n_prefill_workers": p.n_prefill_workers,
                "n_decode_workers": p.n_decode_workers,
                "gpus_prefill": p.gpus_prefill,
                "gpus_decode": p.gpus_decode,
                "gpus_total": p.gpus_total,
                "mtp_tokens": p.mtp_tokens,
                "isl": p.isl,
                "osl": p.osl,
                "concurrency": p.concurrency,
                "total_tps": p.total_tps,
                "output_tps": p.output_tps,
                "ttft_ms_p50": p.ttft_ms,
                "ttft_ms_p99": p.percentile("ttft", 99),
                "tpot_ms_p50": p.tpot_ms,
                "tpot_ms_mean": p.tpot_ms,
                "tpot_ms_p99": p.percentile("tpot", 99),
                "tps_per_gpu": p.tps_per_gpu,
                "tps_per_user": p.tps_per_user,
                "accuracy": math.nan,
                "modeled": True,
                "gpu": p.gpu,
                "running": p.running,
                "request_rate": p.request_rate,
                "roofline_tps": p.roofline_tps,
                "kv_capacity": p.kv_capacity,
                "kv_limited": p.kv_limited,
                "acceptance": p.acceptance,
                "latency_model": p.latency_model,
                "ttft_ms_p90": p.percentile("ttft", 90),
                "tpot_ms_p90": p.percentile("tpot", 90),
            }
        )
    return pd.DataFrame(rows)


def check_concurrencies(concurrencies: Sequence[int]) -> list[int]:
    values = list(concurrencies)
    if not values:
        raise InputError("--concurrency", "concurrency", "give at least one concurrency")
    for c in values:
        if isinstance(c, bool) or not isinstance(c, int) or c < 1:
            raise InputError("--concurrency", "concurrency", f"must be whole numbers >= 1, got {c!r}")
    return values


def _check_acceptance(mtp_tokens: int, acceptance: float) -> None:
    if not (0 <= acceptance <= 1) or math.isnan(acceptance):
        raise InputError("--acceptance", "acceptance", f"must be in [0, 1], got {acceptance}")
    if mtp_tokens < 0:
        raise InputError("--mtp", "mtp_tokens", f"must not be negative, got {mtp_tokens}")


@dataclass(frozen=True)
class _Service:
    """One engine serving a given number of concurrent requests: rates, latencies and the limiting step."""

    rate: float  # requests/s completed by the engine
    running: float  # requests in the pipeline (prefill) or decoding (decode)
    first_token: float  # seconds from a request's start to its first token (prefill), 0 for decode
    cycle: float  # seconds between two steps of one request (decode), or one decode step (prefill)
    tokens_per_step: float  # accepted tokens per request per decode step
    roofline_rate: float  # the same batches at the GPU's limit
    kv_limited: bool
    step: dict[str, float]

    def mix(self, other: _Service, w: float) -> _Service:
        """``(1 - w) * self + w * other`` for the numbers; the flags and the step of ``other``."""

        def lerp(a: float, b: float) -> float:
            return a + (b - a) * w

        return _Service(
            lerp(self.rate, other.rate),
            lerp(self.running, other.running),
            lerp(self.first_token, other.first_token),
            lerp(self.cycle, other.cycle),
            lerp(self.tokens_per_step, other.tokens_per_step),
            lerp(self.roofline_rate, other.roofline_rate),
            other.kv_limited,
            other.step,
        )


_IDLE = _Service(0.0, 0.0, 0.0, 0.0, 1.0, 0.0, False, {})


def _spread(engine: Engine, requests: float, level: Callable[[int, int], _Service]) -> _Service:
    """Average over the DP ranks: ``requests`` spread evenly, fractional loads interpolated.

    vLLM's DP load balancer sends each new request to the least-loaded rank, so ranks carry ``requests / DP``
    on average. Below one request per rank only ``requests`` ranks work (their tokens alone meet in the
    experts); above it every rank works and the step follows the average load. ``level(ranks, k)`` is the
    engine with ``ranks`` ranks holding ``k`` requests each.
    """
    if requests <= 0:
        return _IDLE
    dp = engine.topology.dp
    if requests < dp:
        lo = math.floor(requests)
        low = level(lo, 1) if lo else _IDLE
        return low if lo == requests else low.mix(level(lo + 1, 1), requests - lo)
    per_rank = requests / dp
    lo = math.floor(per_rank)
    low = level(dp, lo)
    return low if lo == per_rank else low.mix(level(dp, lo + 1), per_rank - lo)


# ----------------------------------------------------------------------------------------------- prefill


def _prefill_service(engine: Engine, requests: float, isl: int, osl: int, eff: Efficiency) -> _Service:
    """One prefill engine holding ``requests`` concurrent requests (fractional counts interpolate)."""
    return _spread(engine, requests, lambda ranks, k: _prefill_level(engine, ranks, k, isl, osl, eff))


def _prefill_level(engine: Engine, ranks: int, k: int, isl: int, osl: int, eff: Efficiency) -> _Service:
    topo = engine.topology
    m = engine.config.max_num_batched_tokens
    per_step = max(1, m // isl) if isl <= m else 1  # prompts one step carries
    chunks = math.ceil(isl / m)
    chunk = min(isl, m)
    # Requests in flight on a rank: the pipeline holds PP micro-batches, the KV cache its capacity.
    in_flight = min(k, per_step * topo.pp, engine.capacity_per_rank)
    b = min(in_flight, per_step)  # prompts in one micro-batch
    before = (isl - chunk) / 2  # a chunk also attends to the earlier chunks of its prompt
    prefill = Batch(
        tokens=b * chunk,
        seqs=b,
        prefill_tokens=b * chunk,
        attn_pairs=b * (chunk * before + chunk * (chunk + 1) / 2),
        kv_tokens_read=b * before,
        logits=b,
        ep_tokens=ranks * b * chunk,
    )
    decode = Batch(
        tokens=b, seqs=b, attn_pairs=b * isl, kv_tokens_read=b * isl, logits=b, ep_tokens=ranks * b
    )
    pre_stages = engine.stage_times(prefill, eff)
    dec_stages = engine.stage_times(decode, eff)
    first_token = chunks * sum(s.total for s in pre_stages)  # every stage in turn, for every chunk
    decode_latency = sum(s.total for s in dec_stages)
    life = first_token + (osl - 1) * decode_latency
    # The slowest stage passes one micro-batch at a time: the pipeline's cadence.
    cadence = chunks * max(s.total for s in pre_stages) + (osl - 1) * max(s.total for s in dec_stages)
    roof_cadence = chunks * engine.roofline_time(prefill) + (osl - 1) * engine.roofline_time(decode)
    rate = ranks * min(in_flight / life, b / cadence)
    slowest = max(pre_stages, key=lambda s: s.total)
    return _Service(
        rate=rate,
        running=ranks * in_flight,
        first_token=first_token,
        cycle=decode_latency,
        tokens_per_step=1.0,
        roofline_rate=ranks * b / roof_cadence,
        kv_limited=engine.capacity_per_rank < min(k, per_step * topo.pp),
        step=slowest.parts,
    )


def predict_prefill(
    spec: ModelSpec,
    gpu: GpuSpec,
    topology: Topology,
    concurrencies: Sequence[int],
    *,
    isl: int = PREFILL_ISL,
    osl: int = PREFILL_OSL,
    config: EngineConfig | None = None,
    efficiency: Efficiency = DEFAULT_EFFICIENCY,
) -> list[Prediction]:
    """A prefill-only sweep of one aggregated engine (the article's figure 1 workload by default)."""
    engine = build_engine(spec, gpu, topology, isl=isl, osl=osl, config=config)
    out = []
    for c in check_concurrencies(concurrencies):
        svc = _prefill_service(engine, c, isl, osl, efficiency)
        life = c / svc.rate
        tpot = svc.cycle
        ttft = life - (osl - 1) * tpot
        out.append(
            Prediction(
                mode="prefill",
                model=spec.name,
                gpu=gpu.name,
                topology=topology.name,
                prefill_topology=None,
                decode_topology=None,
                n_prefill_workers=None,
                n_decode_workers=None,
                gpus_prefill=topology.gpus,
                gpus_decode=0,
                mtp_tokens=0,
                acceptance=None,
                isl=isl,
                osl=osl,
                concurrency=c,
                running=svc.running,
                request_rate=svc.rate,
                ttft_ms=1000 * (ttft + efficiency.request_overhead_s),
                tpot_ms=1000 * tpot,
                roofline_tps=svc.roofline_rate * (isl + osl),
                kv_capacity=engine.capacity,
                kv_limited=svc.kv_limited,
                step=svc.step,
            )
        )
    return out


# ------------------------------------------------------------------------------------------------ decode


def _decode_service(
    engine: Engine, requests: float, context: float, osl_steps: float, acceptance: float, eff: Efficiency
) -> _Service:
    """Decode of ``requests`` concurrent requests on one engine, ``context`` cached tokens on average each.

    ``osl_steps`` is the number of output tokens a request decodes here. Requests beyond the KV room wait.
    """
    running = min(requests, engine.capacity)
    out = _spread(
        engine, running, lambda ranks, k: _decode_level(engine, ranks, k, context, osl_steps, acceptance, eff)
    )
    if requests > engine.capacity:
        return _Service(
            out.rate,
            out.running,
            out.first_token,
            out.cycle,
            out.tokens_per_step,
            out.roofline_rate,
            True,
            out.step,
        )
    return out


def _decode_level(
    engine: Engine, ranks: int, k: int, context: float, osl_steps: float, acceptance: float, eff: Efficiency
) -> _Service:
    """``ranks`` DP ranks decoding ``k`` requests each. With PP a rank's requests split into up to PP
    micro-batches that take turns in the pipeline."""
    topo = engine.topology
    spec_tokens = engine.mtp_tokens
    micro = min(topo.pp, k)
    b = k / micro  # the rank's requests split evenly over the micro-batches (on average)
    q = 1 + spec_tokens
    batch = Batch(
        tokens=b * q,
        seqs=b,
        attn_pairs=b * q * context,
        kv_tokens_read=b * context,
        logits=b * q,
        state_writes=q,
        ep_tokens=ranks * b * q,
        draft_passes=spec_tokens,
    )
    stages = engine.stage_times(batch, eff)
    cycle = max(sum(s.total for s in stages), micro * max(s.total for s in stages))
    per_step = 1 + spec_tokens * acceptance
    running = ranks * k
    slowest = max(stages, key=lambda s: s.total)
    return _Service(
        rate=running * per_step / (osl_steps * cycle),
        running=running,
        first_token=0.0,
        cycle=cycle,
        tokens_per_step=per_step,
        roofline_rate=running * q / (osl_steps * micro * engine.roofline_time(batch)),
        kv_limited=False,
        step=slowest.parts,
    )


def predict_decode(
    spec: ModelSpec,
    gpu: GpuSpec,
    topology: Topology,
    concurrencies: Sequence[int],
    *,
    isl: int = DECODE_ISL,
    osl: int = DECODE_OSL,
    mtp_tokens: int = 0,
    acceptance: float = 0.0,
    config: EngineConfig | None = None,
    efficiency: Efficiency = DEFAULT_EFFICIENCY,
) -> list[Prediction]:
    """A decode-only sweep of one aggregated engine (the article's figure 2 workload by default)."""
    _check_acceptance(mtp_tokens, acceptance)
    engine = build_engine(spec, gpu, topology, isl=isl, osl=osl, mtp_tokens=mtp_tokens, config=config)
    context = isl + osl / 2  # cached tokens a request reads, on average over its life
    out = []
    for c in check_concurrencies(concurrencies):
        svc = _decode_service(engine, c, context, osl, acceptance, efficiency)
        # Cycle and tokens per step mix linearly between DP load levels: take TPOT from the rate itself.
        cycle = svc.running * svc.tokens_per_step / (osl * svc.rate)
        tpot = cycle / svc.tokens_per_step
        # The one-token prompt rides along in a decode step; the rest wait for KV room.
        wait = (c - svc.running) / svc.rate
        out.append(
            Prediction(
                mode="decode",
                model=spec.name,
                gpu=gpu.name,
                topology=topology.name,
                prefill_topology=None,
                decode_topology=None,
                n_prefill_workers=None,
                n_decode_workers=None,
                gpus_prefill=0,
                gpus_decode=topology.gpus,
                mtp_tokens=mtp_tokens,
                acceptance=acceptance if mtp_tokens else None,
                isl=isl,
                osl=osl,
                concurrency=c,
                running=svc.running,
                request_rate=svc.rate,
                ttft_ms=1000 * (wait + cycle + efficiency.request_overhead_s),
                tpot_ms=1000 * tpot,
                roofline_tps=svc.roofline_rate * (isl + osl),
                kv_capacity=engine.capacity,
                kv_limited=svc.kv_limited,
                step=svc.step,
            )
        )
    return out


# ------------------------------------------------------------------------------------------ disaggregated


def predict_disagg(
    spec: ModelSpec,
    gpu: GpuSpec,
    deployment: Deployment,
    concurrencies: Sequence[int],
    *,
    isl: int = DISAGG_ISL,
    osl: int = DISAGG_OSL,
    mtp_tokens: int = 0,
    acceptance: float = 0.0,
    prefill_config: EngineConfig | None = None,
    decode_config: EngineConfig | None = None,
    efficiency: Efficiency = DEFAULT_EFFICIENCY,
) -> list[Prediction]:
    """An xPyD sweep: ``x`` prefill engines hand each request's KV cache to one of ``y`` decode engines."""
    _check_acceptance(mtp_tokens, acceptance)
    if osl < 2:
        raise InputError("--osl", "osl", "a disaggregated request decodes at least one token after prefill")
    prefill = build_engine(spec, gpu, deployment.prefill, isl=isl, osl=osl, config=prefill_config)
    decode = build_engine(
        spec, gpu, deployment.decode, isl=isl, osl=osl, mtp_tokens=mtp_tokens, config=decode_config
    )
    x, y = deployment.n_prefill, deployment.n_decode
    context = isl + osl / 2
    decode_cap = y * decode.capacity
    transfer = kv_transfer_seconds(spec, gpu, deployment, isl=isl, osl=osl, mtp_tokens=mtp_tokens,
                                   config=decode.config, efficiency=efficiency)

    def prefill_rate(n: float) -> float:
        return x * _prefill_service(prefill, n / x, isl, 1, efficiency).rate

    def decode_rate(b: float) -> float:
        return y * _decode_service(decode, b / y, context, osl - 1, acceptance, efficiency).rate

    out = []
    for c in check_concurrencies(concurrencies):
        # B requests decode, C - B are in prefill: prefill's rate falls as B grows, decode's rises.
        lo, hi = 0.0, float(min(c, decode_cap))
        if prefill_rate(c - hi) >= decode_rate(hi):
            lo = hi  # decode is full: the rest of the requests wait for its KV room
        while hi - lo > 1e-9 * max(1.0, hi):
            mid = (lo + hi) / 2
            if prefill_rate(c - mid) > decode_rate(mid):
                lo = mid
            else:
                hi = mid
        b = lo
        psvc = _prefill_service(prefill, (c - b) / x, isl, 1, efficiency)
        dsvc = _decode_service(decode, b / y, context, osl - 1, acceptance, efficiency)
        rate = min(x * psvc.rate, y * dsvc.rate)
        if rate <= 0:
            raise InputError("--concurrency", "concurrency", f"no steady state at concurrency {c}")
        # Cycle and tokens per step mix linearly between DP load levels: take TPOT from the decode rate.
        tpot = b / (y * dsvc.rate * (osl - 1)) if b > 0 else dsvc.cycle / dsvc.tokens_per_step
        # Time before the first token: waiting and prefilling (Little's law over the prefill side), at
        # least one prefill; then the KV cache moves to the decode engine.
        ttft = max(psvc.first_token, (c - b) / rate) + transfer
        roof = min(x * psvc.roofline_rate, y * dsvc.roofline_rate) if b > 0 else x * psvc.roofline_rate
        out.append(
            Prediction(
                mode="disagg",
                model=spec.name,
                gpu=gpu.name,
                topology=None,
                prefill_topology=deployment.prefill.name,
                decode_topology=deployment.decode.name,
                n_prefill_workers=x,
                n_decode_workers=y,
                gpus_prefill=deployment.gpus_prefill,
                gpus_decode=deployment.gpus_decode,
                mtp_tokens=mtp_tokens,
                acceptance=acceptance if mtp_tokens else None,
                isl=isl,
                osl=osl,
                concurrency=c,
                running=b,
                request_rate=rate,
                ttft_ms=1000 * (ttft + efficiency.request_overhead_s),
                tpot_ms=1000 * tpot,
                roofline_tps=roof * (isl + osl),
                kv_capacity=decode_cap,
                kv_limited=b >= decode_cap,
                step=dsvc.step,
                kv_transfer_ms=1000 * transfer,
            )
        )
    return out


def kv_transfer(
    spec: ModelSpec,
    gpu: GpuSpec,
    deployment: Deployment,
    *,
    isl: int,
    osl: int,
    mtp_tokens: int,
    config: EngineConfig,
    efficiency: Efficiency,
    decode_gpu: GpuSpec | None = None,
) -> Transfer:
    """One request's KV transfer from ``deployment``'s prefill engine to its decode engine, by the one rule
    ``pdtune plan`` uses too (:func:`pdtune.transfer.request_transfer`): the prompt's state per TP rank on each
    side (re-sharded when TP differs, the P/D block-size fix applied), over NVLink while the deployment fits
    one NVLink domain, else the slower end's NIC, at the efficiency's ``link`` share of the bandwidth."""
    link = pool_link(gpu, decode_gpu or gpu, deployment.gpus_total)
    return request_transfer(
        spec, deployment.prefill, deployment.decode, link, isl=isl, osl=osl, kv_cache_dtype=config.kv_cache_dtype,
        vllm=config.vllm, num_speculative_tokens=mtp_tokens or config.num_speculative_tokens,
        efficiency=efficiency.link, speculative_model=config.speculative_model,
        decode_context_parallel_size=config.decode_context_parallel_size,
    )


def kv_transfer_seconds(spec: ModelSpec, gpu: GpuSpec, deployment: Deployment, *, isl: int, osl: int,
                        mtp_tokens: int, config: EngineConfig, efficiency: Efficiency) -> float:
    """Seconds :func:`kv_transfer` adds to every request's TTFT."""
    return kv_transfer(spec, gpu, deployment, isl=isl, osl=osl, mtp_tokens=mtp_tokens, config=config,
                       efficiency=efficiency).seconds
