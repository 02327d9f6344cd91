"""The latency model every prediction uses: the benchmark run step by step in :mod:`pdtune.sim`, and its linear form.

A measured row is a benchmark: ``C`` clients of a harness against one vLLM deployment. pdtune predicts it by running
that benchmark in the step-level simulator of vLLM 0.33's scheduler (:func:`pdtune.sim.simulate`, or
:func:`pdtune.sim.simulate_disagg` for an ``xPyD`` deployment) with the clients the harness starts
(:data:`pdtune.harnesses.HARNESSES`): its warm-ups, its number of prompts, its lengths. TTFT and TPOT are the
medians (and the 90th and 99th percentiles) over the simulated requests, as the harness computes them, so the
queues of the KV-limited admission, the closed loop's cohorts and the chunked prefill's stalls are in them. The steady-state model
(:mod:`pdtune.perfmodel.aggregated`, :mod:`pdtune.perfmodel.sweeps`) stays as a quick bound and for pruning, and
every output names the model that produced each latency (``latency_model``: :data:`LATENCY_MODELS`).

**The linear form, for fitting.** In a simulated run the GPU runs the steps back to back while any request waits or
runs, so a request's TTFT is its front-end time plus the steps that end between its arrival and its first token
(the first one in part), and its TPOT the steps between its first and last token over ``OSL - 1``. With the
scheduling decisions held fixed, both are sums of step times, and a step's time is
:meth:`pdtune.perfmodel.engine.StepTerms.seconds` of the factors. :func:`linear_form` writes the median request's
TTFT and TPOT that way (the requests within :data:`BAND` of the median, averaged and scaled to it, so that the form
does not jump from one request to another), with the steps grouped by their batch: a
:class:`~pdtune.perfmodel.compiled.CompiledPoint`, exactly what the steady-state fit compiles. The fit through
the simulator (:func:`pdtune.perfmodel.fit.fit_efficiency` with ``latency_model="simulated"``, ``pdtune calibrate
--latency-model simulated``) alternates: simulate every row at the current factors, fit the factors on the linear
forms (``scipy.optimize.least_squares``), simulate again at the new ones. At the
factors a form was made at, it equals the simulation (to the grouping's rounding); every prediction reported is a
fresh simulation, never the form. Every number here is **modeled**.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from pdtune.errors import InputError
from pdtune.harnesses import HARNESSES, LATENCY_MODELS, SIMULATED, STEADY_STATE, Harness  # noqa: F401 (re-exported)
from pdtune.perfmodel.efficiency import Efficiency
from pdtune.perfmodel.engine import Batch, Engine, StepTerms
from pdtune.perfmodel.sweeps import Prediction
from pdtune.perfmodel.compiled import CompiledPoint
from pdtune.sim import SimConfig, SimResult, StepCost, closed_loop, simulate, simulate_disagg
from pdtune.sim.engine import BATCH_FIELDS
from pdtune.sim.workload import Workload

#: The harness of aiconfigurator's silicon rows. The file records none, so this is an assumption, and it is said
#: wherever those rows are scored. The rows sit on InferenceX's grid: ISL/OSL 1k/1k, 1k/8k and 8k/1k, concurrency 4
#: to 64, with a container image and a workflow date per row. InferenceX's launchers run ``benchmark_serving.py``
#: with ``--num-prompts $((CONC * 10)) --max-concurrency $CONC --random-range-ratio $RANDOM_RANGE_RATIO``
#: (SemiAnalysisAI/InferenceX/benchmarks/gptoss_fp4_h200.sh). aiconfigurator's own accuracy replay of such
#: points takes the sa-bench runner's verified defaults: range ratio 0.8, 10C prompts, 2C warm-ups, rate inf,
#: seed 0 (ai-dynamo/aisimulate/scripts/e2e_accuracy/source/defaults/workload_defaults.py). That is
#: :data:`HARNESSES`'s ``sa-bench``. Until 2026-12-06 pdtune assumed AIPerf's fixed lengths instead. Those keep
#: every closed-loop cohort in step, and the simulated TTFT came out 2-3x the measured one at low concurrency.
SILICON_HARNESS = "sa-bench"
#: What the silicon file's TTFT and TPOT are: the benchmark's *means*. The same replay fills ``silicon_ttft_ms``
#: from ``metrics.mean_ttft x 1000`` and ``silicon_tpot_ms`` from ``mean_tpot``, so the simulated mean is compared
#: with them.
SILICON_STATISTIC = "mean"

#: The requests around the median that make a row's linear form: those within 10 percentile points of it.
BAND = 0.10


def workload(harness: str, concurrency: int, isl: int, osl: int, *, rounds: int | None = None,
             warmup_rounds: int | None = None) -> Workload:
    """The clients ``harness`` starts for one point; ``rounds`` (``warmup_rounds``) replaces its measured (warm-up)
    requests per client."""
    h = HARNESSES.get(harness)
    if h is None:
        raise InputError("--harness", "harness", f"unknown harness {harness!r}; known: {', '.join(HARNESSES)}")
    prompts = (h.prompts if rounds is None else rounds) * concurrency
    warmups = (h.warmups if warmup_rounds is None else warmup_rounds) * concurrency
    kind = h.kind
    if kind == "sa-bench":
        return closed_loop(concurrency, isl, osl, num_prompts=prompts, warmups=warmups, harness=kind)
    if kind == "aiperf":
        return closed_loop(concurrency, isl, osl, num_prompts=prompts, warmups=warmups or None, harness=kind)
    return closed_loop(concurrency, isl, osl, num_prompts=prompts, warmups=warmups, harness=kind,
                       ready_check=h.ready_check)


@dataclass(frozen=True)
class SimulatedPoint:
    """One simulated point: the run's statistics (ms, tokens/s) and, when asked, its linear form."""

    stats: dict[str, float]
    summary: dict[str, Any]
    linear: CompiledPoint | None = field(default=None, compare=False)


def simulation_jobs() -> int:
    """Worker processes a large simulated job may use: ``PDTUNE_JOBS`` when it is a positive integer (1 keeps
    everything in the calling process), else the CPUs."""
    import os

    env = os.environ.get("PDTUNE_JOBS", "").strip()
    return int(env) if env.isdigit() and int(env) > 0 else (os.cpu_count() or 1)


def _config(config: SimConfig | None, eff: Efficiency) -> SimConfig:
    base = config or SimConfig()
    return replace(base, overhead_cv=eff.front_end_cv, record_timeline=True)


def simulate_point(engine: Engine, isl: int, osl: int, concurrency: int, eff: Efficiency, *,
                   harness: str = SILICON_HARNESS, rounds: int | None = None, warmup_rounds: int | None = None,
                   config: SimConfig | None = None, cost: StepCost | None = None, linearize: bool = False,
                   index: Any = None, statistic: str = "p50") -> tuple[SimulatedPoint, StepCost]:
    """``concurrency`` clients of ``harness`` on one aggregated server (``engine``), simulated; the step-cost cache
    to reuse comes back with it."""
    load = workload(harness, concurrency, isl, osl, rounds=rounds, warmup_rounds=warmup_rounds)
    result = simulate(engine, load, efficiency=eff, config=_config(config, eff), cost=cost)
    linear = linear_form(result, eff, index=index, statistic=statistic) if linearize else None
    return SimulatedPoint(result.stats(), _summary(result), linear), result.cost


def _summary(result: SimResult) -> dict[str, Any]:
    s = result.summary()
    lines = s.get("timeline", {})
    return {"running_mean": sum(v["running_mean"] for v in lines.values()),
            "waiting_mean": sum(v["waiting_mean"] for v in lines.values()),
            "kv_blocks_used_max": max((v["kv_blocks_used_max"] for v in lines.values()), default=0),
            "kv_blocks": result.meta.get("kv_blocks_per_rank"),
            "preemptions": result.preemptions, "steps": result.steps, "notes": list(result.notes)}


def prediction(point: SimulatedPoint, engine: Engine, isl: int, osl: int, concurrency: int, harness: str,
               *, mode: str = "agg", gpus_prefill: int = 0, gpus_decode: int | None = None,
               topology: str | None = None, prefill_topology: str | None = None, decode_topology: str | None = None,
               n_prefill: int | None = None, n_decode: int | None = None, kv_transfer_ms: float = 0.0,
               acceptance: float | None = None) -> Prediction:
    """A simulated point as a :class:`~pdtune.perfmodel.sweeps.Prediction` labelled ``simulated``: the medians and
    tails of the simulated requests, and their means (for a measurement that reports means)."""
    s = point.stats

    def ms(name: str) -> float:  # a TPOT of runs with one output token is NaN: 0 here, as before
        return s[name] if not math.isnan(s[name]) else 0.0

    gpus_decode = engine.topology.gpus if gpus_decode is None else gpus_decode
    rate = s["request_rate"]
    return Prediction(
        mode=mode, model=engine.spec.name, gpu=engine.gpu.name,
        topology=topology if topology is not None else engine.topology.name,
        prefill_topology=prefill_topology, decode_topology=decode_topology, n_prefill_workers=n_prefill,
        n_decode_workers=n_decode, gpus_prefill=gpus_prefill, gpus_decode=gpus_decode,
        mtp_tokens=engine.mtp_tokens, acceptance=acceptance, isl=isl, osl=osl, concurrency=concurrency,
        running=point.summary["running_mean"], request_rate=rate,
        ttft_ms=s["ttft_ms_p50"], tpot_ms=ms("tpot_ms_p50"), ttft_ms_mean=s["ttft_ms_mean"],
        tpot_ms_mean=ms("tpot_ms_mean"),
        roofline_tps=math.inf, kv_capacity=engine.capacity, kv_limited=point.summary["waiting_mean"] >= 1.0,
        kv_transfer_ms=kv_transfer_ms, latency_model=SIMULATED,
        ttft_ms_p90=s["ttft_ms_p90"], ttft_ms_p99=s["ttft_ms_p99"],
        tpot_ms_p90=ms("tpot_ms_p90"), tpot_ms_p99=ms("tpot_ms_p99"),
        harness=harness,
    )


def predict_agg_simulated(engine: Engine, concurrencies: list[int], isl: int, osl: int, eff: Efficiency, *,
                          harness: str = "vllm-bench", config: SimConfig | None = None,
                          cost: StepCost | None = None, mode: str = "agg") -> list[Prediction]:
    """A concurrency sweep of one server, simulated point by point (one step-cost cache for the sweep)."""
    out = []
    for c in concurrencies:
        point, cost = simulate_point(engine, isl, osl, c, eff, harness=harness, config=config, cost=cost)
        out.append(prediction(point, engine, isl, osl, c, harness, mode=mode,
                              acceptance=(config or SimConfig()).acceptance if engine.mtp_tokens else None))
    return out


def predict_disagg_simulated(prefill: Engine, decode: Engine, n_prefill: int, n_decode: int,
                             concurrencies: list[int], isl: int, osl: int, eff: Efficiency, *,
                             harness: str = "vllm-bench", config: SimConfig | None = None,
                             label: str | None = None) -> list[Prediction]:
    """An ``xPyD`` deployment's sweep, simulated (prefill pool, KV transfer, decode pool's queue)."""
    out = []
    costs: tuple[StepCost | None, StepCost | None] = (None, None)
    cfg = _config(config, eff)
    for c in concurrencies:
        load = workload(harness, c, isl, osl)
        result = simulate_disagg(prefill, decode, n_prefill, n_decode, load, efficiency=eff, config=cfg, costs=costs)
        costs = result.cost
        point = SimulatedPoint(result.stats(), _summary(result))
        transfer = result.meta.get("kv_transfer_ms", {})
        out.append(prediction(
            point, decode, isl, osl, c, harness, mode="disagg", gpus_prefill=n_prefill * prefill.topology.gpus,
            gpus_decode=n_decode * decode.topology.gpus,
            topology=label or f"{n_prefill}x{prefill.topology.name}:{n_decode}x{decode.topology.name}",
            prefill_topology=prefill.topology.name, decode_topology=decode.topology.name, n_prefill=n_prefill,
            n_decode=n_decode, kv_transfer_ms=float(np.median(list(transfer.values()))) if transfer else 0.0,
            acceptance=cfg.acceptance if decode.mtp_tokens else None))
    return out


# ------------------------------------------------------------------------------------------- the linear form


def _core_of(result: SimResult, engine_index: int) -> str:
    names = list(result.timelines)
    if len(names) == 1:
        return names[0]
    name = f"rank{engine_index}"
    if name not in result.timelines:
        raise InputError("simulate", "timeline", f"no timeline for engine {engine_index}")
    return name


def _band(values: np.ndarray, band: float, statistic: str = "p50") -> tuple[np.ndarray, float]:
    """Indices of the values within ``band`` of the median's rank, and the median over their mean; for the
    ``"mean"`` statistic every value, unscaled (the mean of all requests is a sum of their step weights)."""
    if statistic == "mean":
        return np.arange(len(values)), 1.0
    if statistic != "p50":
        raise InputError("statistic", "statistic", f"must be p50 or mean, got {statistic!r}")
    n = len(values)
    order = np.argsort(values, kind="stable")
    lo = max(0, int(math.floor((0.5 - band) * (n - 1))))
    hi = min(n - 1, int(math.ceil((0.5 + band) * (n - 1))))
    chosen = order[lo:hi + 1]
    mean = float(values[chosen].mean())
    median = float(np.median(values))
    return chosen, (median / mean if mean > 0 else 1.0)


#: Steps are grouped by their batch's key and by their KV tokens in bins of this ratio (a decode step's time is
#: affine in its KV tokens on either side of the roofline's knee, so a narrow bin is timed as its mean step).
KV_BIN_RATIO = 1.05


def _grouped(cost: StepCost, batches: np.ndarray, weights: np.ndarray) -> tuple[tuple[StepTerms, float], ...]:
    """The weighted steps as (terms of the group's mean step, total weight), grouped by key and KV bin."""
    keep = weights > 0
    if not keep.any():
        return ()
    b, w = batches[keep], weights[keep]
    key_cols = [BATCH_FIELDS.index(f) for f in ("tokens", "seqs", "prefill_tokens", "logits", "ep_tokens",
                                                 "state_writes", "draft_passes")]
    kv = b[:, BATCH_FIELDS.index("kv_tokens_read")]
    kv_bin = np.floor(np.log1p(kv) / math.log(KV_BIN_RATIO))
    groups = np.column_stack([b[:, key_cols], kv_bin])
    _, inverse = np.unique(groups, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    total = np.bincount(inverse, weights=w)
    means = np.column_stack([np.bincount(inverse, weights=w * b[:, j]) for j in range(b.shape[1])]) / total[:, None]
    first = np.zeros(len(total), dtype=int)
    first[inverse[::-1]] = np.arange(len(inverse))[::-1]  # a member of each group, for its exact key
    out = []
    for g in range(len(total)):
        row = b[first[g]]
        m = means[g]
        batch = Batch(tokens=row[0], seqs=row[1], prefill_tokens=row[2], attn_pairs=m[3], decode_pairs=m[4],
                      kv_tokens_read=m[5], logits=row[6], ep_tokens=row[7], state_writes=int(row[8]),
                      draft_passes=int(row[9]))
        out.append((cost.terms(batch), float(total[g])))
    return tuple(out)


def _constant(seconds: float) -> StepTerms:
    """A fixed time no factor scales (the engine idle inside a request's window)."""
    return StepTerms((), (), (), "", 0.0, 0.0, float(seconds), 0, stages=0)


def linear_form(result: SimResult, eff: Efficiency, *, index: Any = None, band: float = BAND,
                statistic: str = "p50") -> CompiledPoint:
    """The median request's TTFT and TPOT of an aggregated run as weighted step terms (see the module); with
    ``statistic="mean"`` the mean request's, for a measurement that reports means."""
    cost = result.cost
    if not isinstance(cost, StepCost):
        raise InputError("simulate", "linear_form", "only an aggregated run has one step-cost model")
    records = result.records
    if not records:
        raise InputError("simulate", "records", "no measured request")
    timelines = {name: (np.asarray(tl.t), np.asarray(tl.seconds), tl.batch_array())
                 for name, tl in result.timelines.items()}
    ttft = np.asarray([r.ttft for r in records])
    tpot_ok = [i for i, r in enumerate(records) if r.osl > 1]
    chosen_ttft, scale_ttft = _band(ttft, band, statistic)
    weights: dict[str, tuple[np.ndarray, np.ndarray]] = {
        n: (np.zeros(len(t) + 1), np.zeros(len(t) + 1)) for n, (t, _, _) in timelines.items()}
    overhead = 0.0
    gap = 0.0
    per = 1.0 / len(chosen_ttft)
    for i in chosen_ttft:
        r = records[int(i)]
        name = _core_of(result, r.engine)
        ends, secs, _ = timelines[name]
        w = weights[name][0]
        a = int(np.searchsorted(ends, r.t_arrive, side="right"))
        b = int(np.searchsorted(ends, r.t_first, side="right"))
        covered = 0.0
        if b > a:
            w[a] += per
            w[b] -= per
            covered = float(secs[a:b].sum())
            start = ends[a] - secs[a]
            if start < r.t_arrive and secs[a] > 0:  # the step under way when it arrived: the part left
                part = (ends[a] - r.t_arrive) / secs[a]
                w[a] -= per * (1 - part)
                w[a + 1] += per * (1 - part)
                covered -= (1 - part) * secs[a]
        overhead += per * r.front_scale
        gap += per * max(0.0, (r.t_first - r.t_arrive) - covered)
    ttft_terms = []
    for name, (ends, secs, batches) in timelines.items():
        w = np.cumsum(weights[name][0])[:-1] * scale_ttft
        ttft_terms.extend(_grouped(cost, batches, w))
    if gap > 1e-12:
        ttft_terms.append((_constant(gap), scale_ttft))
    tpot_terms: list[tuple[StepTerms, float]] = []
    if tpot_ok:
        tpot = np.asarray([records[i].tpot for i in tpot_ok])
        chosen, scale = _band(tpot, band, statistic)
        per = 1.0 / len(chosen)
        for j in chosen:
            r = records[tpot_ok[int(j)]]
            name = _core_of(result, r.engine)
            ends, _, _ = timelines[name]
            w = weights[name][1]
            a = int(np.searchsorted(ends, r.t_first, side="right"))
            b = int(np.searchsorted(ends, r.t_last, side="right"))
            if b > a:
                w[a] += per / (r.osl - 1)
                w[b] -= per / (r.osl - 1)
        for name, (_, _, batches) in timelines.items():
            w = np.cumsum(weights[name][1])[:-1] * scale
            tpot_terms.extend(_grouped(cost, batches, w))
    meta = result.meta
    return CompiledPoint(index, tuple(ttft_terms), overhead * scale_ttft, tuple(tpot_terms),
                         int(meta.get("concurrency") or len(records)), int(meta.get("isl") or 0),
                         int(meta.get("osl") or 0), result.gpus)


def form_error(point: CompiledPoint, stats: dict[str, float], eff: Efficiency,
               statistic: str = "p50") -> tuple[float, float]:
    """(TTFT, TPOT) of the linear form over the simulation's ``statistic``, less 1: ~0 at the factors it was made
    at."""
    ttft, tpot = point.times(eff)
    return (ttft * 1e3 / stats[f"ttft_ms_{statistic}"] - 1,
            (tpot * 1e3 / stats[f"tpot_ms_{statistic}"] - 1) if point.tpot else 0.0)


__all__ = ["BAND", "HARNESSES", "Harness", "LATENCY_MODELS", "SILICON_HARNESS", "SILICON_STATISTIC", "SIMULATED",
           "STEADY_STATE", "SimulatedPoint", "form_error", "linear_form", "predict_agg_simulated",
           "predict_disagg_simulated", "prediction", "simulate_point", "simulation_jobs", "workload", "Callable"]
