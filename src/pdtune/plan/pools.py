"""The plan's candidates and their isolated sweeps: the layouts a model admits on each pool's GPU, the
sweeps modeled or measured, and the pruning of points and sweeps that cannot reach a frontier."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from pdtune.errors import InputError
from pdtune.gpus import GpuSpec
from pdtune.model import ModelSpec
from pdtune.perfmodel import Efficiency, build_engine, predict_decode, predict_prefill, to_frame
from pdtune.perfmodel.calibrate import load_calibration
from pdtune.perfmodel.defaults import gpu_defaults
from pdtune.perfmodel.sweeps import PREFILL_OSL
from pdtune.results import load_results
from pdtune.sweep import canonical_topologies
from pdtune.plan.inputs import PlanSettings
from pdtune.topology import Topology, parse_topology
from pdtune.units import GiB


# ------------------------------------------------------------------------------------------ candidates


@dataclass(frozen=True)
class Candidate:
    """One engine layout of one role with its isolated sweep's provenance."""

    role: str  # "prefill" or "decode"
    gpu: str
    topology: str  # canonical name
    gpus: int
    mtp_tokens: int
    kv_room: int | None  # running requests the engine holds at ISL + OSL (None: unknown)
    weights_gib: float | None
    network_charged: bool  # the TP/EP group spans more GPUs than one NVLink domain
    source: str  # "modeled" (predicted here), or "measured: <files>" / "modeled: <files>" (given sweeps)
    points: int  # sweep points kept for rate matching
    sweep_concurrencies: tuple[int, ...] = ()  # what its isolated sweep should measure

    @property
    def label(self) -> str:
        return self.topology + (f"+MTP{self.mtp_tokens}" if self.mtp_tokens else "")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Rejected:
    role: str
    gpu: str
    topology: str
    reason: str
    # where the refusal came from (the InputError's file or flag and field): what to blame when every layout
    # of a pool is refused for the same cause (not written into the plan file)
    cause: tuple[str, str] | None = field(default=None, compare=False, repr=False)

    def to_dict(self) -> dict[str, str]:
        return {"role": self.role, "gpu": self.gpu, "topology": self.topology, "reason": self.reason}


def candidate_topologies(spec: ModelSpec, max_gpus: int) -> list[Topology]:
    """Every layout of at most ``max_gpus`` GPUs in powers of two: TP, and for MoE models TEP and TPxDPy+EP.

    Dense models take TP only (more engines replace DP); MoE models with DP > 1 always use expert parallelism
    (vLLM's DP attention with EP MoE, the article's layouts). Pipeline parallelism is left out: the article
    found its PP layouts slower, and PP stages hold KV of their own layers only.
    """
    out: list[Topology] = []
    size = 1
    while size <= max_gpus:
        tp = 1
        while tp <= size:
            dp = size // tp
            if spec.moe is None:
                if dp == 1:
                    out.append(Topology(tp=tp))
            elif dp == 1:
                out.append(Topology(tp=tp))
                if tp > 1:
                    out.append(Topology(tp=tp, expert_parallel=True))
            else:
                out.append(Topology(tp=tp, dp=dp, expert_parallel=True))
            tp *= 2
        size *= 2
    return out


def check_listed_layouts(spec: ModelSpec, s: PlanSettings) -> None:
    """The layouts the user lists (``--prefill-topologies``, ``--decode-topologies``) pass the checks the
    workbook runs on its own lists (:func:`pdtune.scenario.layout_problem`: the name, TP against the heads
    and head groups, ``+EP`` only with experts, EP and PP ranks): a layout vLLM cannot start is bad input,
    not a candidate rejected for memory."""
    from pdtune.scenario import layout_problem

    for role, names in (("prefill", s.prefill_topologies), ("decode", s.decode_topologies)):
        for name in names or ():
            problem = layout_problem(spec, name, max_model_len=s.isl + s.osl, kv_cache_dtype=s.kv_cache_dtype,
                                     vllm=s.vllm, source=f"--{role}-topologies")
            if problem:
                shown = problem if repr(name.strip()) in problem else f"{name.strip()}: {problem}"
                raise InputError(f"--{role}-topologies", "topology", shown)


def _check_model(df: pd.DataFrame, spec: ModelSpec, where: str) -> None:
    """Measured sweeps are this model's, the rule ``pdtune validate`` and the workbook apply (the row's model by
    :func:`pdtune.perfmodel.validation.model_key`), checked before anything else is read of them: another
    model's sweep is wrong whatever its workload. Rows that name no model are taken for the plan's."""
    from pdtune.perfmodel.validation import model_key

    want = model_key(spec.name)
    if "model" in df.columns:
        for path, model in df[["path", "model"]].drop_duplicates().itertuples(index=False):
            if isinstance(model, str) and model.strip() and model_key(model) != want:
                raise InputError(path if isinstance(path, str) and path else where, "model",
                                 f"{where}: a sweep of {model.strip()}, and the plan is for {spec.name}: rate "
                                 "matching another model's sweeps would plan that model")


def _check_measured(df: pd.DataFrame, spec: ModelSpec, s: PlanSettings, where: str) -> None:
    """The measured sweeps' layouts can run the model (:func:`pdtune.scenario.layout_problem`)."""
    from pdtune.scenario import layout_problem

    for topology, path in df.groupby("topology", sort=True)["path"].first().items():
        problem = layout_problem(spec, str(topology), max_model_len=s.isl + s.osl, kv_cache_dtype=s.kv_cache_dtype,
                                 vllm=s.vllm, source=where)
        if problem:
            raise InputError(path if isinstance(path, str) and path else where, "topology",
                             f"{where}: {topology}: {problem}")


def spans_nvlink_domain(gpu: GpuSpec, topology: Topology) -> bool:
    """Whether one TP or EP group of ``topology`` spans more than one NVLink domain of ``gpu``: the groups whose
    collectives :mod:`pdtune.perfmodel.network` charges at the NIC's bandwidth and latency."""
    return gpu.crosses_network(max(topology.tp, topology.expert_shards))


@dataclass
class Pool:
    """One role's candidates, their sweeps (tidy frames, canonical topology names) and rejections."""

    candidates: list[Candidate] = field(default_factory=list)
    sweeps: list[pd.DataFrame] = field(default_factory=list)
    rejected: list[Rejected] = field(default_factory=list)
    dropped_above_room: int = 0
    pruned: list[str] = field(default_factory=list)


def _wanted(names: tuple[str, ...] | None, source: str) -> set[Topology] | None:
    if names is None:
        return None
    return {parse_topology(n, source) for n in names}


@dataclass(frozen=True)
class Factors:
    """The performance model's factors one pool is predicted with, and where they come from."""

    efficiency: Efficiency
    source: str

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "factors": self.efficiency.to_dict()}


def pool_factors(s: PlanSettings, prefill_gpu: GpuSpec, decode_gpu: GpuSpec) -> dict[str, Factors]:
    """Per pool: the calibration file of its GPU (``pdtune calibrate``; read by
    :func:`pdtune.perfmodel.calibrate.load_calibration`, checked against the model as ``pdtune predict`` and
    ``pdtune dataset generate`` check it), else the GPU's default factors (``data/perfmodel/defaults.csv``)."""
    kinds = sorted({prefill_gpu.name, decode_gpu.name})
    by_gpu: dict[str, Factors] = {}
    for path in s.calibration:
        # One GPU kind: the reader checks the GPU itself (the same line `dataset generate` prints).
        cal = load_calibration(path, model=s.model, gpu=kinds[0] if len(kinds) == 1 else None)
        if cal.gpu not in kinds:
            raise InputError(path, "gpu", f"calibrated for {cal.gpu}, not {' or '.join(kinds)} (the plan's pools)")
        if cal.gpu in by_gpu:
            raise InputError(path, "gpu", f"a second calibration for {cal.gpu} ({by_gpu[cal.gpu].source})")
        by_gpu[cal.gpu] = Factors(cal.efficiency, f"calibration {path}")
    out = {}
    for role, gpu in (("prefill", prefill_gpu), ("decode", decode_gpu)):
        if gpu.name not in by_gpu:
            defaults = gpu_defaults(gpu.name, s.latency_model)
            by_gpu[gpu.name] = Factors(defaults.efficiency, f"{gpu.name} defaults ({defaults.source})")
        out[role] = by_gpu[gpu.name]
    return out


def modeled_pool(spec: ModelSpec, gpu: GpuSpec, role: str, s: PlanSettings, eff: Efficiency) -> Pool:
    pool = Pool()
    config = s.engine_config(role)
    wanted = _wanted(s.prefill_topologies if role == "prefill" else s.decode_topologies, f"--{role}-topologies")
    layouts = candidate_topologies(spec, s.max_gpus - 1)
    if wanted is not None:
        layouts = [t for t in layouts if t in wanted] + sorted(
            (t for t in wanted if t not in layouts), key=lambda t: (t.gpus, t.name))
    ks = [0]
    if role == "decode" and s.mtp_candidates and spec.num_mtp_layers:
        ks.append(s.mtp_tokens)
    for topo in layouts:
        if topo.gpus > s.max_gpus - 1:
            pool.rejected.append(Rejected(role, gpu.name, topo.name,
                                          f"{topo.gpus} GPUs leave none of the {s.max_gpus} for the other pool"))
            continue
        for k in ks:
            try:
                engine = build_engine(spec, gpu, topo, isl=s.isl, osl=s.osl, mtp_tokens=k, config=config)
                if role == "prefill":
                    preds = predict_prefill(spec, gpu, topo, list(s.grid), isl=s.isl, osl=PREFILL_OSL,
                                            config=config, efficiency=eff)
                else:
                    grid = [c for c in s.grid if c <= engine.capacity] or [engine.capacity]
                    pool.dropped_above_room += len(s.grid) - len(grid)
                    preds = predict_decode(spec, gpu, topo, grid, isl=s.isl, osl=s.osl, mtp_tokens=k,
                                           acceptance=s.acceptance, config=config, efficiency=eff)
            except InputError as err:
                pool.rejected.append(Rejected(role, gpu.name, topo.name + (f"+MTP{k}" if k else ""), err.message,
                                              (err.source, err.field)))
                continue
            frame = _pareto_points(to_frame(preds).assign(topology=topo.canonical), role, s.osl)
            if role == "prefill":  # past saturation more clients only queue: twice the last useful point
                sweep = tuple(c for c in s.grid if c <= 2 * int(frame["concurrency"].max()))
            else:
                sweep = tuple(int(p.concurrency) for p in preds)
            pool.sweeps.append(frame)
            pool.candidates.append(Candidate(
                role, gpu.name, topo.canonical, topo.gpus, k, engine.capacity, engine.weights_per_gpu / GiB,
                spans_nvlink_domain(gpu, topo), "modeled", len(frame), sweep))
    return pool


def measured_pool(paths: Sequence[str], spec: ModelSpec, gpu: GpuSpec, role: str, s: PlanSettings) -> Pool:
    """Isolated sweeps the user measured: one candidate per (topology, MTP) in the files."""
    pool = Pool()
    df = load_results(list(paths), single_workload=True)
    where = f"--{role}-results"
    if "topology" not in df.columns or df["topology"].isna().any():
        bad = df[df["topology"].isna()]["path"].iloc[0] if "topology" in df.columns else paths[0]
        raise InputError(bad, "topology", f"{where}: every isolated sweep must name its topology (a topology key, "
                                          "or the recipe srt-slurm copies to outputs/<job>/config.yaml)")
    modes = set(df["mode"].dropna()) - {"agg", role}
    if modes:
        raise InputError(df["path"].iloc[0], "mode", f"{where} holds {', '.join(sorted(modes))} results")
    _check_model(df, spec, where)
    if role == "prefill":
        isl = df["isl"].dropna()
        if len(isl) and int(isl.iloc[0]) != s.isl:
            raise InputError(df["path"].iloc[0], "isl",
                             f"the prefill sweep ran ISL {int(isl.iloc[0])}, the plan is for ISL {s.isl}")
    else:
        _check_decode_context(df, s)
    df = canonical_topologies(df)
    _check_measured(df, spec, s, where)
    df["mtp_tokens"] = pd.to_numeric(df["mtp_tokens"], errors="coerce").fillna(0)
    config = s.engine_config(role)
    wanted = _wanted(s.prefill_topologies if role == "prefill" else s.decode_topologies, f"--{role}-topologies")
    for (name, mtp), group in df.groupby(["topology", "mtp_tokens"], sort=True):
        topo = parse_topology(str(name), where)
        if wanted is not None and topo not in wanted:
            continue
        k = int(mtp) if role == "decode" else 0
        gpus = int(group["gpus_total"].iloc[0])
        if gpus > s.max_gpus - 1:
            pool.rejected.append(Rejected(role, gpu.name, str(name), f"measured on {gpus} GPUs: over the budget"))
            continue
        room: int | None = None
        weights: float | None = None
        try:
            engine = build_engine(spec, gpu, topo, isl=s.isl, osl=s.osl, mtp_tokens=k, config=config)
            room, weights = engine.capacity, engine.weights_per_gpu / GiB
        except InputError:
            room = None  # measured, so it ran; pdtune cannot size its KV room: kept unchecked
        if role == "decode" and room is not None:
            keep = group["concurrency"].to_numpy(dtype=float) <= room
            pool.dropped_above_room += int((~keep).sum())
            group = group[keep]
            if not len(group):
                pool.rejected.append(Rejected(role, gpu.name, str(name),
                                              f"every measured point exceeds its KV room ({room}) at ISL+OSL"))
                continue
        frame = _pareto_points(group, role, s.osl)
        files = _files(sorted({str(p) for p in group["path"].dropna()}) or list(paths))
        # Files pdtune's model wrote say so ("modeled": true): they stay modeled, whoever passes them in.
        kind = "modeled" if group["modeled"].fillna(False).astype(bool).any() else "measured"
        pool.sweeps.append(frame)
        pool.candidates.append(Candidate(role, gpu.name, topo.canonical, gpus, k, room, weights,
                                         spans_nvlink_domain(gpu, topo), f"{kind}: {files}", len(frame),
                                         tuple(sorted({int(c) for c in group["concurrency"]}))))
    if not pool.candidates:
        raise InputError(paths[0], where, "no isolated sweep in these results fits the plan")
    return pool


#: How far a decode sweep's mean context may be from the plan's (relative) and still be read as the plan's.
CONTEXT_TOLERANCE = 0.05


def decode_context(isl: float, osl: float) -> float:
    """The mean context a decoding request holds over its life: ``ISL + OSL / 2`` tokens (it grows by one token
    per step from ISL to ISL + OSL). A decode step's attention reads every running request's context, so a
    decode sweep measures the plan's TPOT only at the plan's mean context."""
    return isl + osl / 2


def matching_decode_osl(isl: int, osl: int) -> int:
    """The OSL of a decode-only sweep at ISL 1 whose requests hold the plan's mean context: ``2 ISL + OSL``
    (their context grows from 1 to ``2 ISL + OSL + 1``, so its mean is ``ISL + OSL / 2 + 1``)."""
    return 2 * isl + osl


def _check_decode_context(df: pd.DataFrame, s: PlanSettings) -> None:
    """A decode sweep whose requests hold another mean context than the plan's is refused: TPOT grows with the
    context every step reads, and nothing here corrects for it (``tests/test_plan.py`` shows by how much)."""
    want = decode_context(s.isl, s.osl)
    for path, group in df.groupby("path", sort=True, dropna=False):
        isl, osl = group["isl"].dropna(), group["osl"].dropna()
        if not len(isl) or not len(osl):
            raise InputError(path, "isl", "--decode-results: the sweep does not say its ISL/OSL, so its context "
                                          "cannot be checked against the plan's")
        got = decode_context(float(isl.iloc[0]), float(osl.iloc[0]))
        if abs(got - want) > CONTEXT_TOLERANCE * want:
            raise InputError(path, "isl", f"--decode-results: the sweep's requests hold {got:,.0f} tokens of "
                                          f"context on average (ISL/OSL {int(isl.iloc[0])}/{int(osl.iloc[0])}), the "
                                          f"plan's {want:,.0f} ({s.isl} + {s.osl}/2); measure decode at ISL 1, OSL "
                                          f"{matching_decode_osl(s.isl, s.osl)} (pdtune recipe writes it) or at the "
                                          f"plan's ISL/OSL")


def _files(paths: list[str]) -> str:
    """Where a sweep's points come from, short: one file, or the folder they share and how many."""
    if len(paths) == 1:
        return paths[0]
    return f"{os.path.commonpath(paths)} ({len(paths)} files)"


def _capacity(frame: pd.DataFrame, role: str, osl: int) -> np.ndarray:
    """Requests/s one engine completes at each point (rate matching's P or D).

    Prefill: the sweep's own throughput (``total_tps`` over its ISL + OSL) where it has one, else Little's
    law ``C / TTFT``. A fixed cost outside the engine (the front end's share of TTFT) keeps ``C / TTFT``
    creeping up forever past saturation, where the engine's throughput is flat: judged by ``C / TTFT``, a
    point queued for minutes would never be beaten by the knee of the curve.
    """
    c = frame["concurrency"].to_numpy(dtype=float)
    if role == "prefill":
        little = c * 1000.0 / frame["ttft_ms_p50"].to_numpy(dtype=float)
        if "total_tps" not in frame.columns:
            return little
        tokens = frame["isl"].to_numpy(dtype=float) + frame["osl"].to_numpy(dtype=float)
        rate = frame["total_tps"].to_numpy(dtype=float) / tokens
        return np.where(np.isfinite(rate) & (rate > 0), rate, little)
    return c * 1000.0 / (frame["tpot_ms_p50"].to_numpy(dtype=float) * (osl - 1))


def _latency(frame: pd.DataFrame, role: str) -> np.ndarray:
    return frame["ttft_ms_p50" if role == "prefill" else "tpot_ms_p50"].to_numpy(dtype=float)


def _pareto_points(frame: pd.DataFrame, role: str, osl: int) -> pd.DataFrame:
    """The points of one sweep that no other point beats on both capacity (up) and latency (down).

    A beaten point is never useful to rate matching: the other point carries at least its rate with no more
    TTFT (prefill) or TPOT (decode). On a prefill sweep this drops the saturated tail, where more clients only
    queue.
    """
    cap, lat = _capacity(frame, role, osl), _latency(frame, role)
    keep = _undominated(cap, lat)
    return frame.iloc[np.flatnonzero(keep)].reset_index(drop=True)


def _undominated(cap: np.ndarray, lat: np.ndarray) -> np.ndarray:
    order = np.lexsort((-cap, lat))  # by latency, then larger capacity first
    keep = np.zeros(cap.size, dtype=bool)
    best = -np.inf
    for i in order:
        if cap[i] > best:
            keep[i] = True
            best = cap[i]
    return keep


def prune_sweeps(pool: Pool, role: str, osl: int) -> None:
    """Drop every sweep whose points are all beaten (capacity, latency) by points of another sweep of the same
    GPU count: any deployment built on it is matched or beaten by the same deployment built on the other."""
    by_gpus: dict[int, list[int]] = {}
    for i, c in enumerate(pool.candidates):
        by_gpus.setdefault(c.gpus, []).append(i)
    drop: set[int] = set()
    points = [(_capacity(f, role, osl), _latency(f, role)) for f in pool.sweeps]
    for members in by_gpus.values():
        for i in members:
            cap, lat = points[i]
            for j in members:
                if j == i or j in drop:
                    continue
                ocap, olat = points[j]
                beaten = ((ocap[None, :] >= cap[:, None]) & (olat[None, :] <= lat[:, None])).any(axis=1)
                if beaten.all():
                    drop.add(i)
                    break
    pool.pruned += [f"{role} {pool.candidates[i].label}" for i in sorted(drop)]
    pool.candidates = [c for i, c in enumerate(pool.candidates) if i not in drop]
    pool.sweeps = [f for i, f in enumerate(pool.sweeps) if i not in drop]


