"""Predicted beside measured: every matching result row predicted at its own deployment, with its error.

:func:`select_rows` keeps the rows of one model (matched by the last path component of the results' model id,
case-insensitive: ``openai/gpt-oss-120b`` is ``gpt-oss-120b``) and one GPU (the row's ``gpu`` column where the
format records one, else the GPU the user names), optionally one GPU count and one topology, and counts every
other row with the reason it was left out. :func:`validate` predicts each kept row at its own topology,
concurrency, ISL/OSL, mode (aggregated, disaggregated, prefill- or decode-only), vLLM version and weight precision
(:func:`pdtune.precision.served_weights` from the row's quant modes), and returns one point per row: measured,
predicted, ``error = predicted / measured - 1`` and the row's source. A row the model cannot predict (a layout that
does not fit, a topology it cannot read, worker counts the file does not record) stays in the table, marked
unpredicted with its reason; nothing is dropped.

Two latency models (``latency_model``, the names of :data:`pdtune.perfmodel.simulated.LATENCY_MODELS`): the
steady-state model (:mod:`pdtune.perfmodel.aggregated`, the default) or ``simulated``, each aggregated and
disaggregated row run as its benchmark in :mod:`pdtune.sim` (:func:`pdtune.perfmodel.simulated.simulate_point`)
with the clients of the harness that measured it (:func:`row_harness`). Prefill-only and decode-only rows have no
simulated harness and keep the steady-state model; every point names the model that produced it in its
``latency_model`` column, with the predicted p90 and p99 beside the median (the steady-state model's are its mean).

:func:`error_summary` gives the median and the 90th percentile of ``|error|`` (in percent) per metric, over all
points and by model x GPU x mode: the numbers ``pdtune validate --json`` reports.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from pdtune.errors import InputError
from pdtune.gpus import GpuSpec
from pdtune.model import ModelSpec
from pdtune.perfmodel.aggregated import AggPlan, agg_config, agg_plan, agg_prediction
from pdtune.perfmodel.efficiency import Efficiency
from pdtune.perfmodel.compiled import CompiledPoint
from pdtune.perfmodel.engine import Batch, Engine, EngineConfig, StepTerms, build_engine
from pdtune.perfmodel.launch_flags import ServerFlags, row_flags, served_topology
from pdtune.perfmodel.simulated import SILICON_HARNESS, SILICON_STATISTIC
from pdtune.perfmodel.sweeps import Prediction, predict_decode, predict_disagg, predict_prefill
from pdtune.precision import requantized, served_weights
from pdtune.topology import Deployment, Topology, parse_deployment, parse_topology
from pdtune.versions import parse as parse_version

if TYPE_CHECKING:
    from pdtune.sim import SimConfig

#: The three numbers every point is scored on.
METRICS = ("ttft_ms_p50", "tpot_ms_p50", "tps_per_gpu")

#: vLLM line assumed for rows that record none (or an unparseable one, e.g. a nightly build).
FALLBACK_VLLM = "0.18.0"

#: Per-GPU memory that is neither weights nor KV cache on a measured server whose start-up log we do not have
#: (activation peak, non-torch, CUDA graphs, GiB), from llm-d-planner's measured vLLM start-ups on H100
#: (data/clusters/llm-d-vllm-memory/): the median activation peak of its eight runs, 5.6 GiB; non-torch memory at
#: TP2, 0.55 GiB; CUDA-graph memory about 0 (its median is -0.4 GiB). The article's table 3 (a 2.4 T-parameter
#: model on GB300) is no guide for these.
MEASURED_OVERHEADS_GIB = (5.6, 0.55, 0.0)


def model_key(name: object) -> str:
    """``openai/gpt-oss-120b`` -> ``gpt-oss-120b``: the last path component, lower case."""
    text = str(name or "").strip().rstrip("/")
    return text.rsplit("/", 1)[-1].lower()


def deployment_key(row: pd.Series | dict[str, Any]) -> str:
    """What makes a deployment: model, GPU, mode, layout, weight precision (not vLLM version, not workload,
    so that the same run exported twice is always one deployment)."""
    get = row.get

    def txt(name: str) -> str:
        value = get(name)
        return "" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)

    return " | ".join(
        [model_key(get("model")), txt("gpu"), txt("mode"), txt("topology"), txt("precision"),
         txt("gemm_quant_mode"), txt("moe_quant_mode")]
    )


@dataclass(frozen=True)
class Selection:
    rows: pd.DataFrame
    skipped: dict[str, int]  # reason -> rows

    @property
    def used(self) -> int:
        return len(self.rows)


def select_rows(
    df: pd.DataFrame,
    model: str,
    gpu: str,
    *,
    gpus: int | None = None,
    topology: str | None = None,
    backend: str | None = "vllm",
) -> Selection:
    """The rows of ``model`` on ``gpu`` (and ``gpus`` GPUs, ``topology``, served by ``backend`` where the results
    name one; ``None`` or ``"all"``: any), and why every other row was left out."""
    want = model_key(model)
    keys = df["model"].map(model_key)
    keep = pd.Series(True, index=df.index)
    skipped: dict[str, int] = {}

    def drop(mask: pd.Series, reason: Callable[[pd.DataFrame], pd.Series]) -> None:
        nonlocal keep
        hit = keep & mask
        if hit.any():
            for label, n in _group_reason(df[hit], reason):
                skipped[label] = skipped.get(label, 0) + n
        keep = keep & ~mask

    drop(keys != want, lambda d: d["model"].map(lambda m: f"another model ({m})"))
    if backend not in (None, "all") and "backend" in df.columns:
        served = df["backend"].fillna(backend).astype(str).str.lower()
        drop(served != backend.lower(),
             lambda d: d["backend"].map(lambda b: f"served by {b}, not {backend} (pdtune models vLLM)"))
    if "gpu" in df.columns:
        row_gpu = df["gpu"].fillna(gpu).astype(str).str.lower()
        drop(row_gpu != gpu.lower(), lambda d: d["gpu"].map(lambda g: f"another GPU ({g})"))
    if gpus is not None:
        drop(df["gpus_total"] != gpus, lambda d: d["gpus_total"].map(lambda n: f"{n} GPUs, not {gpus}"))
    if topology is not None:
        wanted = _canonical(topology)
        drop(df["topology"].map(_canonical) != wanted,
             lambda d: d["topology"].map(lambda t: f"topology {t}, not {topology}"))
    return Selection(df[keep], skipped)


def _group_reason(rows: pd.DataFrame, reason: Callable[[pd.DataFrame], pd.Series]) -> list[tuple[str, int]]:
    return [(str(k), int(v)) for k, v in reason(rows).value_counts().sort_index().items()]


def _canonical(name: object) -> str:
    text = str(name or "")
    try:
        if ":" in text:
            return parse_deployment(text).label
        return parse_topology(text).canonical
    except InputError:
        return text.upper()


# ----------------------------------------------------------------------------------------------- points


@dataclass(frozen=True)
class RowSetup:
    """How one row is predicted: the served model, its layout, its vLLM line (or why it cannot be)."""

    mode: str
    spec: ModelSpec | None
    topology: Topology | None
    deployment: Deployment | None
    vllm: str
    weights_note: str
    reason: str | None = None  # set when the row cannot be predicted
    kv_cache_dtype: str = "auto"
    flags: ServerFlags | None = None  # how the measured server was launched, where known (launch_flags.csv)
    recorded_gpus: int | None = None  # the file's layout's GPUs, where the server ran on another count


def row_setup(row: pd.Series, spec: ModelSpec) -> RowSetup:
    mode = str(row.get("mode") or "agg")
    vllm = _vllm_of(row)
    try:
        served, note = served_weights(spec, _text(row.get("gemm_quant_mode")), _text(row.get("moe_quant_mode")),
                                      source=str(row.get("path", "results")))
    except InputError as exc:
        return RowSetup(mode, None, None, None, vllm, "", f"weights: {exc.message}")
    kv = "fp8" if requantized(spec, served) else "auto"
    flags = row_flags(row) if mode == "agg" else None

    def setup(topology: Topology | None = None, deployment: Deployment | None = None,
              reason: str | None = None, recorded_gpus: int | None = None) -> RowSetup:
        return RowSetup(mode, served, topology, deployment, vllm, note, reason, kv, flags, recorded_gpus)

    if flags is not None and flags.unpredictable:
        return setup(reason=f"{flags.unpredictable} ({flags.source})")
    name = _text(row.get("topology"))
    if name is None or (mode == "disagg" and "?" in name):
        return setup(reason="the file does not record the worker counts" if name else "no topology recorded")
    try:
        if mode == "disagg":
            return setup(deployment=parse_deployment(name, "topology"))
        recorded = parse_topology(name, "topology")
        topology = served_topology(recorded, flags)
        return setup(topology=topology, recorded_gpus=recorded.gpus if topology.gpus != recorded.gpus else None)
    except InputError as exc:
        return setup(reason=f"topology: {exc.message}")


def _text(value: Any) -> str | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    s = str(value).strip()
    return s or None


def _vllm_of(row: pd.Series) -> str:
    version = _text(row.get("backend_version")) if str(row.get("backend") or "vllm") == "vllm" else None
    if version is not None:
        try:
            major, minor, patch = parse_version(version)
            if (major, minor) >= (0, 11):
                return f"{major}.{minor}.{patch}"
        except InputError:
            pass
    return FALLBACK_VLLM


def agg_engine_config(gpu: GpuSpec, vllm: str, kv_cache_dtype: str = "auto",
                      flags: ServerFlags | None = None) -> EngineConfig:
    """vLLM's own defaults for a measured aggregated server: its batch defaults, 0.9 of the memory, the KV
    cache in the model dtype (``--kv-cache-dtype auto``) or as the checkpoint says (FP8); then every flag the
    server was launched with where that is known (``flags``: :mod:`pdtune.perfmodel.launch_flags`)."""
    base = agg_config(gpu, None, vllm)
    config = EngineConfig(
        gpu_memory_utilization=0.9,
        kv_cache_dtype=kv_cache_dtype,
        vllm=vllm,
        max_num_batched_tokens=base.max_num_batched_tokens,
        max_num_seqs=base.max_num_seqs,
        overheads_gib=MEASURED_OVERHEADS_GIB,
    )
    return flags.engine_config(config) if flags is not None else config


@dataclass
class EngineCache:
    engines: dict[tuple[Any, ...], Engine | InputError] = field(default_factory=dict)
    costs: dict[tuple[Any, ...], Any] = field(default_factory=dict)  # engine key -> pdtune.sim.StepCost


#: The harness whose clients ``validate --latency-model simulated`` simulates for a row, by the reader that read
#: it (``source``): aiconfigurator's silicon file records none (pdtune.perfmodel.simulated.SILICON_HARNESS, an
#: assumption with its sources), srt-slurm runs sa-bench, a ``vllm bench serve`` file its own loop. Other sources:
#: ``vllm-bench``.
HARNESS_BY_SOURCE = {"aiconfigurator-silicon": SILICON_HARNESS, "aiperf": "aiperf", "srt-slurm": "sa-bench",
                     "srt-slurm-rollup": "sa-bench", "vllm-bench": "vllm-bench", "inferencex": "inferencex"}
#: The statistic a source's ``ttft_ms_p50``/``tpot_ms_p50`` columns hold where it is not the median: the silicon
#: file's are the benchmark's means (pdtune.perfmodel.simulated.SILICON_STATISTIC).
STATISTIC_BY_SOURCE = {"aiconfigurator-silicon": SILICON_STATISTIC}


def row_harness(row: pd.Series, harness: str | None = None) -> str:
    """The harness a row is simulated with: ``harness`` when given, else the one its source runs."""
    if harness is not None:
        return harness
    return HARNESS_BY_SOURCE.get(str(row.get("source") or ""), "vllm-bench")


def row_statistic(row: pd.Series) -> str:
    """The statistic of the simulated requests a row's measured TTFT and TPOT are compared with."""
    return STATISTIC_BY_SOURCE.get(str(row.get("source") or ""), "p50")


def _engine_key(setup: RowSetup, isl: int, osl: int) -> tuple[Any, ...]:
    return (setup.spec, setup.topology, isl, osl, setup.vllm, setup.kv_cache_dtype, setup.flags)


def cached_engine(cache: EngineCache, setup: RowSetup, gpu: GpuSpec, isl: int, osl: int) -> Engine:
    assert setup.spec is not None and setup.topology is not None
    key = _engine_key(setup, isl, osl)
    if key not in cache.engines:
        config = agg_engine_config(gpu, setup.vllm, setup.kv_cache_dtype, setup.flags)
        try:
            cache.engines[key] = build_engine(setup.spec, gpu, setup.topology, isl=isl, osl=osl, config=config)
        except InputError as exc:
            cache.engines[key] = exc
    found = cache.engines[key]
    if isinstance(found, InputError):
        raise found
    return found


def compile_agg(engine: Engine, plan: AggPlan, index: Any, isl: int, osl: int) -> CompiledPoint:
    terms: dict[Batch, StepTerms] = {}

    def of(b: Batch) -> StepTerms:
        if b not in terms:
            terms[b] = engine.step_terms(b)
        return terms[b]

    return CompiledPoint(
        index,
        tuple((of(b), w) for b, w in plan.ttft.steps),
        plan.ttft.overhead,
        tuple((of(b), w) for b, w in plan.tpot.steps),
        plan.concurrency,
        isl,
        osl,
        engine.topology.gpus,
    )


def predict_row(row: pd.Series, setup: RowSetup, gpu: GpuSpec, eff: Efficiency, cache: EngineCache, *,
                latency_model: str = "steady-state", harness: str | None = None) -> Prediction:
    """One row's prediction at its own deployment (raises InputError when the layout does not fit), by
    ``latency_model`` where the row's mode has a simulated harness (aggregated, disaggregated)."""
    assert setup.spec is not None
    isl, osl, c = int(row["isl"]), int(row["osl"]), int(row["concurrency"])
    if latency_model == "simulated" and setup.mode in ("agg", "disagg"):
        return _simulated_row(row, setup, gpu, eff, cache, row_harness(row, harness))
    if setup.mode == "disagg":
        assert setup.deployment is not None
        config = agg_engine_config(gpu, setup.vllm, setup.kv_cache_dtype)
        [pred] = predict_disagg(setup.spec, gpu, setup.deployment, [c], isl=isl, osl=osl, prefill_config=config,
                                decode_config=config, efficiency=eff)
        return pred
    assert setup.topology is not None
    if setup.mode == "prefill":
        [pred] = predict_prefill(setup.spec, gpu, setup.topology, [c], isl=isl, osl=osl, efficiency=eff)
        return pred
    if setup.mode == "decode":
        [pred] = predict_decode(setup.spec, gpu, setup.topology, [c], isl=isl, osl=osl, efficiency=eff)
        return pred
    engine = cached_engine(cache, setup, gpu, isl, osl)
    return agg_prediction(engine, agg_plan(engine, c, isl, osl, eff.arrival_clustering), isl, osl, eff)


def _simulated_row(row: pd.Series, setup: RowSetup, gpu: GpuSpec, eff: Efficiency, cache: EngineCache,
                   harness: str) -> Prediction:
    """The row's benchmark run in pdtune.sim on the engines the steady-state model would size (one step-cost
    cache per engine, shared by the rows of one deployment)."""
    from pdtune.perfmodel.simulated import predict_disagg_simulated, prediction, simulate_point

    assert setup.spec is not None
    isl, osl, c = int(row["isl"]), int(row["osl"]), int(row["concurrency"])
    if setup.mode == "disagg":
        assert setup.deployment is not None
        dep = setup.deployment
        config = agg_engine_config(gpu, setup.vllm, setup.kv_cache_dtype)
        prefill = build_engine(setup.spec, gpu, dep.prefill, isl=isl, osl=osl, config=config)
        decode = build_engine(setup.spec, gpu, dep.decode, isl=isl, osl=osl, config=config)
        [pred] = predict_disagg_simulated(prefill, decode, dep.n_prefill, dep.n_decode, [c], isl, osl, eff,
                                          harness=harness, label=dep.label)
        return pred
    engine = cached_engine(cache, setup, gpu, isl, osl)
    key = _engine_key(setup, isl, osl)
    point, cache.costs[key] = simulate_point(engine, isl, osl, c, eff, harness=harness, cost=cache.costs.get(key),
                                             config=sim_config(setup))
    return prediction(point, engine, isl, osl, c, harness)


def sim_config(setup: RowSetup) -> SimConfig | None:
    """The simulation settings of a row's server: prefix caching as it was launched, where that is known."""
    from pdtune.sim import SimConfig

    if setup.flags is None or setup.flags.prefix_caching is None:
        return None
    return SimConfig(enable_prefix_caching=setup.flags.prefix_caching)


def _measured(row: pd.Series, metric: str) -> float:
    value = row.get(metric)
    return float(value) if value is not None and not pd.isna(value) else math.nan


#: The predicted tails every point carries beside the median (ms).
TAILS = ("ttft_ms_p90", "ttft_ms_p99", "tpot_ms_p90", "tpot_ms_p99")


def validate_rows(rows: pd.DataFrame, spec: ModelSpec, gpu: GpuSpec, eff: Efficiency, *,
                  latency_model: str = "steady-state", harness: str | None = None, jobs: int = 1) -> pd.DataFrame:
    """One point per row of ``rows`` (already selected): measured, predicted (median and tails), error, source,
    the ``latency_model`` that predicted it; unpredicted rows carry ``predicted = False`` and their ``reason``.
    ``harness`` overrides the harness a simulated row's source implies (:func:`row_harness`). With ``jobs`` > 1 a
    simulated validation runs its deployments in that many worker processes (:func:`_validate_in_workers`)."""
    if jobs > 1 and latency_model == "simulated" and len(rows) > 1:
        return _validate_in_workers(rows, spec, gpu, eff, harness, jobs)
    cache = EngineCache()
    points = []
    for index, row in rows.iterrows():
        setup = row_setup(row, spec)
        point: dict[str, Any] = {
            "row": index,
            "source": row.get("source"),
            "path": row.get("path"),
            "source_id": _text(row.get("source_id")),
            "model": row.get("model"),
            "gpu": gpu.name,
            "mode": setup.mode,
            "topology": row.get("topology"),
            "gpus_total": int(row["gpus_total"]),
            "isl": _int_or_none(row.get("isl")),
            "osl": _int_or_none(row.get("osl")),
            "concurrency": int(row["concurrency"]),
            "vllm": setup.vllm,
            "weights": setup.weights_note,
            "predicted": False,
            "reason": setup.reason,
            "latency_model": latency_model if setup.mode in ("agg", "disagg") else "steady-state",
            "harness": row_harness(row, harness) if latency_model == "simulated" and setup.mode in ("agg", "disagg")
            else None,
            # what the measured TTFT and TPOT are, so what the prediction compared with them is (STATISTIC_BY_SOURCE)
            "statistic": row_statistic(row),
        }
        for metric in METRICS:
            point[f"measured_{metric}"] = _measured(row, metric)
            point[f"predicted_{metric}"] = math.nan
            point[f"{metric}_error"] = math.nan
        if setup.recorded_gpus is not None:
            # The server ran on fewer GPUs than the file records (launch_flags.served_topology): per GPU over those.
            # Only then: a file's GPU count may differ from one engine's for other reasons (replicas, --gpus).
            point["measured_tps_per_gpu"] *= point["gpus_total"] / setup.topology.gpus
            point["gpus_total"] = setup.topology.gpus
        for tail in TAILS:
            point[f"predicted_{tail}"] = math.nan
        if setup.reason is None and (point["isl"] is None or point["osl"] is None):
            point["reason"] = "ISL/OSL not recorded"
        if point["reason"] is None:
            try:
                pred = predict_row(row, setup, gpu, eff, cache, latency_model=latency_model, harness=harness)
            except InputError as exc:
                point["reason"] = f"{exc.field}: {exc.message}"
            else:
                point["predicted"] = True
                point["latency_model"] = pred.latency_model
                for tail in TAILS:
                    metric, p = tail.rsplit("_ms_p", 1)
                    point[f"predicted_{tail}"] = pred.percentile(metric, int(p))
                predicted = {"ttft_ms_p50": pred.statistic("ttft", point["statistic"]),
                             "tpot_ms_p50": pred.statistic("tpot", point["statistic"]), "tps_per_gpu": pred.tps_per_gpu}
                for metric in METRICS:
                    point[f"predicted_{metric}"] = predicted[metric]
                    measured = point[f"measured_{metric}"]
                    if measured > 0:
                        point[f"{metric}_error"] = predicted[metric] / measured - 1
        points.append(point)
    return pd.DataFrame(points)


def _validate_in_workers(rows: pd.DataFrame, spec: ModelSpec, gpu: GpuSpec, eff: Efficiency, harness: str | None,
                         jobs: int) -> pd.DataFrame:
    """:func:`validate_rows` simulated, one deployment (:func:`deployment_key`) per job in
    ``jobs`` worker processes, the most simulated requests first; the table is the serial one, in the rows' order
    (each row's simulation is seeded, so where it ran changes nothing)."""
    from functools import partial

    from pdtune.signals import map_in_workers

    parts: dict[str, list[int]] = {}
    for position, key in enumerate(rows.apply(deployment_key, axis=1)):
        parts.setdefault(key, []).append(position)
    work = pd.to_numeric(rows["concurrency"], errors="coerce").fillna(1) * \
        pd.to_numeric(rows.get("osl", pd.Series(1, index=rows.index)), errors="coerce").fillna(1)
    chunks = sorted(parts.values(), key=lambda p: -float(work.iloc[p].sum()))
    if len(chunks) < 2:
        return validate_rows(rows, spec, gpu, eff, latency_model="simulated", harness=harness)
    one = partial(validate_rows, spec=spec, gpu=gpu, eff=eff, latency_model="simulated", harness=harness)
    frames = map_in_workers(one, [rows.iloc[c] for c in chunks], jobs)
    order = np.argsort(np.concatenate(chunks), kind="stable")
    records = pd.concat(frames, ignore_index=True).iloc[order].to_dict("records")
    return pd.DataFrame(records)  # built as the serial table is, so its columns' types are the same


def _int_or_none(value: Any) -> int | None:
    if value is None or pd.isna(value):
        return None
    return int(value)


def measured_frontier(points: pd.DataFrame) -> pd.DataFrame:
    """The measured Pareto frontier of predicted points (tokens/s per user against tokens/s per GPU, both
    maximised, per ISL/OSL), each frontier point with its prediction and ``predicted / measured`` ratios.

    ``points`` is :func:`validate_rows`' table (rows without a per-GPU figure or a prediction are left out of the
    frontier, not of the table they came from).
    """
    from pdtune.frontier import pareto_frontier

    usable = points[points["predicted"] & points["measured_tps_per_gpu"].notna()].copy()
    usable["measured_tps_per_user"] = 1000 / usable["measured_tpot_ms_p50"]
    usable["predicted_tps_per_user"] = 1000 / usable["predicted_tpot_ms_p50"]
    frames = []
    for _, group in usable.groupby(["isl", "osl"], sort=True):
        front = pareto_frontier(group["measured_tps_per_user"].to_numpy(), group["measured_tps_per_gpu"].to_numpy())
        frames.append(group.iloc[front])
    if not frames:
        return usable.iloc[0:0]
    out = pd.concat(frames)
    out["tps_per_user_ratio"] = out["predicted_tps_per_user"] / out["measured_tps_per_user"]
    out["tps_per_gpu_ratio"] = out["predicted_tps_per_gpu"] / out["measured_tps_per_gpu"]
    out["ttft_ratio"] = out["predicted_ttft_ms_p50"] / out["measured_ttft_ms_p50"]
    return out.reset_index(drop=True)


# ---------------------------------------------------------------------------------------------- summary


def error_percentiles(errors: Iterable[float]) -> tuple[float | None, float | None]:
    values = np.abs(np.asarray([e for e in errors if e is not None and not math.isnan(e)], dtype=float)) * 100
    if not len(values):
        return None, None
    return float(np.median(values)), float(np.percentile(values, 90))


def error_table(points: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Median and p90 |error| (%) of every metric, per group of ``by`` (e.g. ``["gpu", "topology"]`` or
    ``["isl", "osl"]``): where the model is wrong, regime by regime. Unpredicted rows are counted, not scored."""
    rows = []
    for key, frame in points.groupby(by, sort=True, dropna=False):
        rec: dict[str, Any] = dict(zip(by, key if isinstance(key, tuple) else (key,), strict=True))
        rec["rows"], rec["predicted"] = len(frame), int(frame["predicted"].sum())
        for metric in METRICS:
            rec[f"{metric}_median"], rec[f"{metric}_p90"] = error_percentiles(frame.loc[frame["predicted"], f"{metric}_error"])
        rows.append(rec)
    return pd.DataFrame(rows)


def error_summary(points: pd.DataFrame) -> dict[str, Any]:
    """``median_abs_pct_error`` and ``p90_abs_pct_error`` per metric, overall and by model x GPU x mode."""

    def block(frame: pd.DataFrame) -> dict[str, Any]:
        med: dict[str, float | None] = {}
        p90: dict[str, float | None] = {}
        for metric in METRICS:
            col = f"{metric}_error"
            med[metric], p90[metric] = error_percentiles(frame[col]) if col in frame else (None, None)
        return {"median_abs_pct_error": med, "p90_abs_pct_error": p90,
                "points": int(frame["predicted"].sum()) if "predicted" in frame else 0}

    predicted = points[points["predicted"]] if len(points) else points
    out = block(predicted)
    groups = []
    if len(predicted):
        for (model, gpu, mode), frame in predicted.groupby(["model", "gpu", "mode"], sort=True):
            groups.append({"model": model, "gpu": gpu, "mode": mode, **block(frame)})
    out["by_model_gpu_mode"] = groups
    return out
