"""What to deploy on N GPUs for an SLA: the search over topologies and xPyD, with KV transfer in TTFT.

The article's workflow, run before anything is measured:

1. **Candidates.** Every engine layout the model admits on each pool's GPU, up to the budget: TP (and DP with
   expert parallelism for MoE models; dense models scale by more engines instead) in powers of two, with and
   without MTP on the decode side when the model has an MTP module. A layout is rejected, with the reason
   kept, when heads or experts do not divide or when weights and one request's KV do not fit the memory
   waterfall (:func:`pdtune.perfmodel.build_engine`). A TP/EP group larger than one NVLink domain (an 8-GPU
   HGX board) stays a candidate, its collectives charged at the scale-out NIC's bandwidth by the performance
   model (:meth:`pdtune.gpus.GpuSpec.link_bandwidth`), and every row built on it says so
   (``network_charged``).
2. **Isolated sweeps.** Each candidate's prefill-only sweep (ISL/2, the article's 8192/2) and decode-only
   sweep at the plan's ISL/OSL, **modeled** by :mod:`pdtune.perfmodel` with each pool's factors (the
   ``--calibration`` file naming its GPU, else the GPU's defaults: :func:`pool_factors`; a draft model and
   DCP size the engines' KV room through :mod:`pdtune.state`), or the user's **measured** sweeps
   (``prefill_results`` / ``decode_results``, any format :func:`pdtune.results.load_results` reads). Decode
   points beyond the engine's KV room at ISL + OSL are dropped (the KV-room check of chapter 7; a decode sweep
   run at a short ISL holds far more requests than the same engine can at the plan's workload). Points and
   sweeps that cannot reach a frontier are pruned (see :func:`_pareto_points`, :func:`_prune_sweeps`).
3. **Rate matching within the budget.** :func:`pdtune.frontier.rate_match` combines every prefill sweep with
   every decode sweep as ``x`` prefill and ``y`` decode engines, and only ``x * g_p + y * g_d <= N`` is kept.
4. **KV transfer.** Each row's TTFT gains the time to move one request's state from the prefill layout to the
   decode layout over the link between the pools (:mod:`pdtune.transfer`, the rule ``pdtune predict`` and the
   dataset generator charge too, at the lower of the two pools' ``link`` factors): ``kv_transfer_ms`` and its
   share of TTFT are columns of every row. A row whose KV stream would need more than the busiest GPU's link
   is dropped and counted.
5. **Frontier and picks.** The upper envelope of the rows (:func:`pdtune.frontier.upper_envelope`) with its
   provenance, and for each SLA the most tokens/s per GPU that meets it (:func:`pdtune.frontier.sla_pick` on
   the rows that meet the latency limits). A TPOT p90 limit is checked against each row's ``tpot_ms_p90``:
   a measured decode sweep's p99 where it has one, else the TPOT times a stated factor (:class:`TpotP90`);
   ``tpot_p90_basis`` says which.

Every modeled number is labelled so (``modeled``, ``prefill_source``, ``decode_source``). GPU counts,
workers and concurrencies are integers: a row's ``concurrency`` is Little's law rounded to whole requests,
what a benchmark's ``--max-concurrency`` would be set to.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pdtune import limits
from pdtune.errors import InputError, brief
from pdtune.frontier import rate_match, sla_pick, upper_envelope
from pdtune.gpus import GpuSpec, load_gpu
from pdtune.io import read_mapping
from pdtune.model import ModelSpec, load_model
from pdtune.paths import clusters_dir
from pdtune.perfmodel import (
    DEFAULT_ACCEPTANCE,
    Efficiency,
    EngineConfig,
    build_engine,
    predict_decode,
    predict_prefill,
    to_frame,
)
from pdtune.perfmodel.calibrate import load_calibration
from pdtune.perfmodel.defaults import gpu_defaults
from pdtune.perfmodel.sweeps import PREFILL_OSL
from pdtune.results import load_results
from pdtune.state import plan_state
from pdtune.sweep import canonical_topologies
from pdtune.topology import Topology, parse_topology
from pdtune.transfer import NVLINK, SCALE_OUT, EngineExtras, Transfer, load_link, request_transfer, scope_link
from pdtune.units import GiB, MiB

#: Concurrencies of the modeled isolated sweeps (points above a decode engine's KV room are dropped).
GRID: tuple[int, ...] = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048,
                         3072, 4096)

#: Interactivity floors (tokens/s per user) a plan picks for when no SLA is given.
DEFAULT_FLOORS: tuple[float, ...] = (20.0, 50.0, 100.0, 150.0)

#: The vLLM line the plan's state accounting and its recipes follow.
PLAN_VLLM = "0.33.0"

#: Columns of a plan row, in the order a table shows them first.
ROW_COLUMNS: tuple[str, ...] = (
    "row", "deployment", "gpus_total", "concurrency", "tps_per_gpu", "tps_per_user", "ttft_ms_p50",
    "kv_transfer_ms", "kv_transfer_share", "tpot_ms_p50", "tpot_ms_p90", "tpot_p90_basis", "tpot_ms_p99",
    "ttft_ms_p99", "prefill_ttft_ms",
    "prefill_topology", "decode_topology", "n_prefill_workers", "n_decode_workers", "gpus_prefill",
    "gpus_decode", "prefill_gpu", "decode_gpu", "mtp_tokens", "prefill_concurrency", "decode_concurrency",
    "decode_room", "total_tps", "output_tps", "bottleneck", "kv_link", "kv_mib_per_request",
    "kv_link_utilization", "prefill_block_tokens", "decode_block_tokens", "block_size_to_set", "network_charged",
    "network_groups", "replicas_in_budget", "on_frontier", "picked_for", "modeled", "prefill_source",
    "decode_source", "source", "curve_concurrencies", "curve_prefill_concurrency_max",
    "curve_decode_concurrency_max",
)


# ------------------------------------------------------------------------------------------ inputs


@dataclass(frozen=True)
class Sla:
    """Service levels a row must meet; None = no limit. TPOT p90 is checked against each row's
    ``tpot_ms_p90``, whose basis the row names (``tpot_p90_basis``, see :func:`tpot_p90_rule`)."""

    min_tps_per_user: float | None = None
    max_ttft_ms: float | None = None
    max_tpot_ms_p90: float | None = None

    def __post_init__(self) -> None:
        for name in ("min_tps_per_user", "max_ttft_ms", "max_tpot_ms_p90"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not math.isfinite(value) or value <= 0):
                raise InputError(f"--{name.replace('_', '-')}", name, f"must be a positive number, got {value!r}")

    @property
    def latency_limits(self) -> tuple[float | None, float | None]:
        return self.max_ttft_ms, self.max_tpot_ms_p90

    def describe(self) -> str:
        parts = []
        if self.min_tps_per_user is not None:
            parts.append(f">= {self.min_tps_per_user:g} tokens/s per user")
        if self.max_ttft_ms is not None:
            parts.append(f"TTFT <= {self.max_ttft_ms:g} ms")
        if self.max_tpot_ms_p90 is not None:
            parts.append(f"TPOT p90 <= {self.max_tpot_ms_p90:g} ms")
        return ", ".join(parts) or "no limit"

    def meets_latency(self, rows: pd.DataFrame) -> np.ndarray:
        ok = np.ones(len(rows), dtype=bool)
        if self.max_ttft_ms is not None:
            ok &= rows["ttft_ms_p50"].to_numpy(dtype=float) <= self.max_ttft_ms
        if self.max_tpot_ms_p90 is not None:
            ok &= _tpot_p90_bound(rows) <= self.max_tpot_ms_p90
        return ok

    def shortfall(self, rows: pd.DataFrame) -> np.ndarray:
        """How far each row is from meeting the SLA: the largest relative miss over its limits (0 = meets)."""
        miss = np.zeros(len(rows))
        if self.min_tps_per_user is not None:
            x = rows["tps_per_user"].to_numpy(dtype=float)
            miss = np.maximum(miss, (self.min_tps_per_user - x) / self.min_tps_per_user)
        if self.max_ttft_ms is not None:
            t = rows["ttft_ms_p50"].to_numpy(dtype=float)
            miss = np.maximum(miss, (t - self.max_ttft_ms) / self.max_ttft_ms)
        if self.max_tpot_ms_p90 is not None:
            miss = np.maximum(miss, (_tpot_p90_bound(rows) - self.max_tpot_ms_p90) / self.max_tpot_ms_p90)
        return np.maximum(miss, 0.0)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _tpot_p90_bound(rows: pd.DataFrame) -> np.ndarray:
    return rows["tpot_ms_p90"].to_numpy(dtype=float)


def inferencex_dir() -> Path:
    return clusters_dir() / "inferencex-gb200-dsr1"


@dataclass(frozen=True)
class TpotP90:
    """How a plan row's TPOT p90 is obtained where no measured spread is given.

    The performance model predicts a mean TPOT (a deterministic model has no spread: its p50 = p99), so a p90
    limit is checked against that TPOT times ``factor``. By default the factor is measured: the median ratio
    of p99 to median TPOT over the measured disaggregated points bundled with pdtune (InferenceX, GB200,
    ``data/clusters/inferencex-gb200-dsr1``); a p99 bounds the p90 from above, so the rule leans safe. A row
    built on a measured decode sweep that records its p99 TPOT uses that p99 instead (again >= p90).
    """

    factor: float
    basis: str
    source: str
    points: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def tpot_p90_rule(factor: float | None = None) -> TpotP90:
    """The rule for modeled rows: ``factor`` if given, else the measured p99/p50 ratio (see :class:`TpotP90`)."""
    if factor is not None:
        return TpotP90(float(factor), f"modeled TPOT x {factor:g} (--tpot-p90-factor)", "--tpot-p90-factor", 0)
    source = inferencex_dir()
    df = load_results([str(source)])
    ratio = (df["tpot_ms_p99"] / df["tpot_ms_p50"]).to_numpy(dtype=float)
    ratio = ratio[np.isfinite(ratio)]
    if not ratio.size:
        raise InputError(source, "tpot_ms_p99", "no measured point with a p99 and a median TPOT")
    value = float(np.median(ratio))
    return TpotP90(value, f"modeled TPOT x {value:.2f}: the median p99/median TPOT of {ratio.size} measured "
                          f"InferenceX GB200 disaggregated points (a p99 bounds the p90)", str(source),
                   int(ratio.size))


@dataclass(frozen=True)
class PlanSettings:
    """The question: a model, the GPUs of each pool, a budget, a workload, and the engine settings assumed."""

    model: str
    gpu: str
    max_gpus: int
    isl: int
    osl: int
    decode_gpu: str | None = None  # None: the same kind as prefill
    mtp_tokens: int = 3  # MTP draft tokens for decode candidates (when the model has an MTP module); 0 = none
    acceptance: float = DEFAULT_ACCEPTANCE
    kv_cache_dtype: str = "fp8"
    vllm: str = PLAN_VLLM
    gpu_memory_utilization: float = 0.92
    max_num_batched_tokens: int = 8192  # per DP rank, both roles
    grid: tuple[int, ...] = GRID
    prefill_topologies: tuple[str, ...] | None = None  # restrict the search; None = every admissible layout
    decode_topologies: tuple[str, ...] | None = None
    calibration: tuple[str, ...] = ()  # `pdtune calibrate` files; each serves the pool whose GPU it names
    # A draft beside the model (EAGLE/EAGLE3 head or draft model) and decode context parallelism: they size
    # the KV room of the engines and the KV transfer (pdtune.state); the step model does not see them.
    speculative_model: str | None = None
    num_speculative_tokens: int = 0  # the draft's tokens (MTP candidates use ``mtp_tokens``)
    decode_context_parallel_size: int = 1  # decode engines only
    tpot_p90_factor: float | None = None  # None: the measured p99/p50 ratio (:func:`tpot_p90_rule`)

    def __post_init__(self) -> None:
        if isinstance(self.calibration, str):
            object.__setattr__(self, "calibration", (self.calibration,))
        for name in ("max_gpus", "isl", "osl"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(f"--{name.replace('_', '-')}", name, f"must be a whole number >= 1, got {value!r}")
        if self.max_gpus < 2:
            raise InputError("--max-gpus", "max_gpus",
                             f"a disaggregated deployment needs at least 2 GPUs (one per pool), got {self.max_gpus}")
        if self.osl < 2:
            raise InputError("--osl", "osl", "a disaggregated request decodes at least one token after prefill")
        if self.mtp_tokens < 0:
            raise InputError("--mtp", "mtp_tokens", f"must not be negative, got {self.mtp_tokens}")
        if not 0 <= self.acceptance <= 1:
            raise InputError("--acceptance", "acceptance", f"must be in [0, 1], got {self.acceptance}")
        if self.speculative_model is not None and self.num_speculative_tokens < 1:
            raise InputError("--num-speculative-tokens", "num_speculative_tokens",
                             "a speculative model needs --num-speculative-tokens >= 1")
        if self.speculative_model is None and self.num_speculative_tokens:
            raise InputError("--num-speculative-tokens", "num_speculative_tokens",
                             "counts the draft tokens of --speculative-model; for MTP use --mtp K")
        if self.decode_context_parallel_size < 1:
            raise InputError("--decode-context-parallel-size", "decode_context_parallel_size", "must be >= 1")
        if self.tpot_p90_factor is not None and not (math.isfinite(self.tpot_p90_factor)
                                                     and self.tpot_p90_factor >= 1):
            raise InputError("--tpot-p90-factor", "tpot_p90_factor",
                             f"must be >= 1 (a p90 is not below the median), got {self.tpot_p90_factor}")

    @property
    def decode_gpu_name(self) -> str:
        return self.decode_gpu or self.gpu

    @property
    def mixed(self) -> bool:
        return self.decode_gpu_name.strip().lower() != self.gpu.strip().lower()

    @property
    def mtp_candidates(self) -> bool:
        """MTP decode candidates: off when a separate draft (``speculative_model``) does the drafting."""
        return bool(self.mtp_tokens) and self.speculative_model is None

    def extras(self) -> EngineExtras:
        """The draft and DCP as the state accounting takes them (:mod:`pdtune.transfer`)."""
        return self._extras

    @cached_property
    def _extras(self) -> EngineExtras:
        draft = load_model(self.speculative_model) if self.speculative_model else None
        return EngineExtras(self.num_speculative_tokens, draft, self.decode_context_parallel_size)

    def engine_config(self, role: str = "decode") -> EngineConfig:
        extras = self.extras()
        return EngineConfig(gpu_memory_utilization=self.gpu_memory_utilization, kv_cache_dtype=self.kv_cache_dtype,
                            vllm=self.vllm, max_num_batched_tokens=self.max_num_batched_tokens,
                            speculative_model=extras.speculative_model,
                            num_speculative_tokens=extras.num_speculative_tokens,
                            decode_context_parallel_size=extras.decode_context_parallel_size if role == "decode"
                            else 1)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["decode_gpu"] = self.decode_gpu_name
        out["grid"] = list(self.grid)
        out["calibration"] = list(self.calibration)
        return out


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

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


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


def spans_nvlink_domain(gpu: GpuSpec, topology: Topology) -> bool:
    """Whether one TP or EP group of ``topology`` spans more than one NVLink domain of ``gpu``: the groups whose
    collectives :mod:`pdtune.perfmodel.network` charges at the NIC's bandwidth and latency."""
    return gpu.crosses_network(max(topology.tp, topology.expert_shards))


@dataclass
class _Pool:
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
            defaults = gpu_defaults(gpu.name)
            by_gpu[gpu.name] = Factors(defaults.efficiency, f"{gpu.name} defaults ({defaults.source})")
        out[role] = by_gpu[gpu.name]
    return out


def _modeled_pool(spec: ModelSpec, gpu: GpuSpec, role: str, s: PlanSettings, eff: Efficiency) -> _Pool:
    pool = _Pool()
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
                pool.rejected.append(Rejected(role, gpu.name, topo.name + (f"+MTP{k}" if k else ""), err.message))
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


def _measured_pool(paths: Sequence[str], spec: ModelSpec, gpu: GpuSpec, role: str, s: PlanSettings) -> _Pool:
    """Isolated sweeps the user measured: one candidate per (topology, MTP) in the files."""
    pool = _Pool()
    df = load_results(list(paths), single_workload=True)
    where = f"--{role}-results"
    if "topology" not in df.columns or df["topology"].isna().any():
        bad = df[df["topology"].isna()]["path"].iloc[0] if "topology" in df.columns else paths[0]
        raise InputError(bad, "topology", f"{where}: every isolated sweep must name its topology (a topology key, "
                                          "or the recipe srt-slurm copies to outputs/<job>/config.yaml)")
    modes = set(df["mode"].dropna()) - {"agg", role}
    if modes:
        raise InputError(df["path"].iloc[0], "mode", f"{where} holds {', '.join(sorted(modes))} results")
    if role == "prefill":
        isl = df["isl"].dropna()
        if len(isl) and int(isl.iloc[0]) != s.isl:
            raise InputError(df["path"].iloc[0], "isl",
                             f"the prefill sweep ran ISL {int(isl.iloc[0])}, the plan is for ISL {s.isl}")
    df = canonical_topologies(df)
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


def _prune_sweeps(pool: _Pool, role: str, osl: int) -> None:
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


# ------------------------------------------------------------------------------------------ the plan


@dataclass(frozen=True)
class Pick:
    """The best row for one SLA, or how close the rows get."""

    sla: Sla
    met: bool
    row: int | None  # row number in :attr:`Plan.table` (None when nothing meets it)
    closest_row: int | None  # when not met: the row with the smallest shortfall
    shortfall: float | None  # relative miss of the closest row (0.1 = 10 % short)
    candidates: int  # rows meeting the SLA

    def to_dict(self) -> dict[str, Any]:
        return {"sla": self.sla.to_dict(), "describe": self.sla.describe(), "met": self.met, "row": self.row,
                "closest_row": self.closest_row, "shortfall": self.shortfall, "candidates": self.candidates}


@dataclass(frozen=True, eq=False)
class Plan:
    """A finished search: candidates, every feasible rate-matched row, the frontier, the picks."""

    settings: PlanSettings
    spec: ModelSpec
    prefill_gpu: GpuSpec
    decode_gpu: GpuSpec
    candidates: tuple[Candidate, ...]
    rejected: tuple[Rejected, ...]
    pruned: tuple[str, ...]
    rows: pd.DataFrame  # every feasible row (see ROW_COLUMNS)
    table: pd.DataFrame  # frontier rows and pick rows, numbered by ``row``
    picks: tuple[Pick, ...]
    counts: dict[str, int]
    transfers: dict[str, dict[str, Any]]  # per prefill -> decode layout pair and link: the transfer
    factors: dict[str, Factors] = field(default_factory=dict)  # per pool: the model's factors and their source
    tpot_p90: TpotP90 | None = None  # how modeled rows' TPOT p90 is obtained

    @property
    def frontier(self) -> pd.DataFrame:
        return self.table[self.table["on_frontier"]]

    @property
    def modeled(self) -> bool:
        return bool(self.table["modeled"].any()) if len(self.table) else True

    def row(self, k: int) -> dict[str, Any]:
        """Plan row ``k`` as plain Python values."""
        hit = self.table[self.table["row"] == k]
        if not len(hit):
            raise InputError("--row", "row", f"no row {k}; the plan has rows 0 to {len(self.table) - 1}")
        return _plain_row(hit.iloc[0])

    def ends(self) -> dict[str, Any]:
        """The frontier's two ends: the most tokens/s per GPU, the most tokens/s per user."""
        f = self.frontier
        if not len(f):
            return {}
        top = f.loc[f["tps_per_gpu"].idxmax()]
        fast = f.loc[f["tps_per_user"].idxmax()]
        return {"throughput": _plain_row(top), "latency": _plain_row(fast)}

    def search_summary(self) -> pd.DataFrame:
        """Per role: layouts tried, kept as candidates, rejected (heads, experts, memory, budget) and pruned."""
        rows = []
        for role in ("prefill", "decode"):
            rows.append({
                "role": role,
                "gpu": (self.prefill_gpu if role == "prefill" else self.decode_gpu).name,
                "candidates": sum(1 for c in self.candidates if c.role == role),
                "rejected": sum(1 for r in self.rejected if r.role == role),
                "pruned": sum(1 for p in self.pruned if p.startswith(role + " ")),
                "network_charged": sum(1 for c in self.candidates if c.role == role and c.network_charged),
                "source": ", ".join(sorted({c.source.split(":")[0] for c in self.candidates if c.role == role})),
            })
        return pd.DataFrame(rows)

    def transfer_frame(self) -> pd.DataFrame:
        """One row per prefill -> decode layout pair and link of the table: bytes, link, time, share of TTFT."""
        cols = ["prefill_topology", "decode_topology", "mtp_tokens", "kv_link", "kv_mib_per_request",
                "kv_transfer_ms", "prefill_block_tokens", "decode_block_tokens", "block_size_to_set"]
        frame = self.table[cols + ["kv_transfer_share"]]
        return (frame.groupby(cols, dropna=False, sort=False)["kv_transfer_share"]
                .agg(["min", "max"]).rename(columns={"min": "share_of_ttft_min", "max": "share_of_ttft_max"})
                .reset_index())

    def state_extras(self) -> dict[str, Any] | None:
        """What ``--speculative-model`` and ``--decode-context-parallel-size`` changed, in words and values."""
        s = self.settings
        if s.speculative_model is None and s.decode_context_parallel_size == 1:
            return None
        extras = s.extras()
        draft = extras.speculative_model
        method = None
        if draft is not None:  # the method vLLM infers from the draft's architecture (pdtune.state's rule)
            state = plan_state(self.spec, max_model_len=s.isl + s.osl, tp=s.decode_context_parallel_size,
                               kv_cache_dtype=s.kv_cache_dtype, vllm=s.vllm, **extras.state_args(decode=True))
            method = state.speculation.method if state.speculation is not None else None
        return {
            "speculative_model": draft.name if draft is not None else None,
            "speculative_model_path": s.speculative_model,
            "speculative_method": method,
            "num_speculative_tokens": s.num_speculative_tokens,
            "decode_context_parallel_size": s.decode_context_parallel_size,
            "affects": ("the KV room of every engine (the draft's layers, on both pools) and of the decode engines "
                        "(DCP shards full-attention tokens over their TP group), the KV transfer's bytes and "
                        "block sizes, and the recipes (speculative-config, decode-context-parallel-size); not "
                        "the step model: the draft's passes and acceptance and DCP's attention all-gather are "
                        "not in the predicted TPOT, and MTP decode candidates are off while a draft is given"),
        }

    def to_dict(self) -> dict[str, Any]:
        extras = self.state_extras()
        settings = self.settings.to_dict()
        if extras is not None and extras["speculative_method"]:
            settings["speculative_method"] = extras["speculative_method"]  # what the recipes write
        return {
            "generator": "pdtune plan",
            "modeled": self.modeled,
            "modeled_note": ("rows built on modeled sweeps are predictions of pdtune.perfmodel (a roofline "
                             "model), not measurements") if self.modeled else "",
            "settings": settings,
            "model": {"name": self.spec.name, "source": self.spec.source, "precision": self.spec.weights.name,
                      "hybrid": self.spec.is_hybrid, "num_mtp_layers": self.spec.num_mtp_layers},
            "gpus": {"prefill": self.prefill_gpu.to_dict(), "decode": self.decode_gpu.to_dict()},
            "factors": {role: f.to_dict() for role, f in self.factors.items()},
            "tpot_p90": self.tpot_p90.to_dict() if self.tpot_p90 is not None else None,
            "state_extras": extras,
            "counts": self.counts,
            "candidates": [c.to_dict() for c in self.candidates],
            "rejected": [r.to_dict() for r in self.rejected],
            "pruned": list(self.pruned),
            "transfers": self.transfers,
            "rows": [_plain_row(r) for _, r in self.table.iterrows()],
            "picks": [p.to_dict() for p in self.picks],
        }


def _plain_row(row: pd.Series) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in row.items():
        if isinstance(value, (np.integer,)):
            value = int(value)
        elif isinstance(value, (np.floating, float)):
            value = None if not math.isfinite(float(value)) else float(value)
        elif isinstance(value, np.bool_):
            value = bool(value)
        elif value is pd.NA:
            value = None
        out[str(key)] = value
    return out


def plan(
    settings: PlanSettings,
    slas: Sequence[Sla] = (),
    *,
    prefill_results: Sequence[str] | None = None,
    decode_results: Sequence[str] | None = None,
    require_sla: bool = False,
) -> Plan:
    """Search ``settings``'s space and pick for each SLA (``DEFAULT_FLOORS`` when none is given).

    ``require_sla``: an SLA nothing meets is bad input (the CLI's behaviour when the user names one), with the
    closest row in the message; otherwise it is a pick with ``met=False``.
    """
    s = settings
    spec = load_model(s.model)
    prefill_gpu = load_gpu(s.gpu)
    decode_gpu = load_gpu(s.decode_gpu_name)
    for g in {prefill_gpu.name, decode_gpu.name}:
        load_link(g, "scale_out")  # a GPU without link data is bad input before any work
    factors = pool_factors(s, prefill_gpu, decode_gpu)
    s.extras()  # an unreadable --speculative-model is bad input before any work
    p90 = tpot_p90_rule(s.tpot_p90_factor)
    pools = {}
    for role, gpu, given in (("prefill", prefill_gpu, prefill_results), ("decode", decode_gpu, decode_results)):
        pools[role] = (_measured_pool(given, spec, gpu, role, s) if given
                       else _modeled_pool(spec, gpu, role, s, factors[role].efficiency))
    ttft_limited = any(sla.max_ttft_ms is not None for sla in slas)
    _prune_sweeps(pools["prefill"], "prefill", s.osl)
    if not ttft_limited:
        # Decode pruning can drop a slower sweep whose lower rate would let a lighter prefill point meet a TTFT
        # limit; with a TTFT limit every decode sweep stays.
        _prune_sweeps(pools["decode"], "decode", s.osl)
    _check_budget(spec, s, pools, prefill_gpu, decode_gpu)
    rows, counts, transfers = _match(spec, s, pools, prefill_gpu, decode_gpu, factors, p90)
    floors = list(slas) or [Sla(min_tps_per_user=f) for f in DEFAULT_FLOORS]
    table, picks = _picks(rows, floors, require_sla=require_sla and bool(slas))
    counts.update({
        "prefill_candidates": len(pools["prefill"].candidates),
        "decode_candidates": len(pools["decode"].candidates),
        "rejected": len(pools["prefill"].rejected) + len(pools["decode"].rejected),
        "pruned": len(pools["prefill"].pruned) + len(pools["decode"].pruned),
        "decode_points_above_kv_room": pools["decode"].dropped_above_room,
        "feasible_rows": len(rows),
        "frontier_rows": int(table["on_frontier"].sum()),
        "rows_network_charged": int(rows["network_charged"].sum()),
        "frontier_rows_network_charged": int(table.loc[table["on_frontier"], "network_charged"].sum()),
    })
    return Plan(s, spec, prefill_gpu, decode_gpu,
                tuple(pools["prefill"].candidates + pools["decode"].candidates),
                tuple(pools["prefill"].rejected + pools["decode"].rejected),
                tuple(pools["prefill"].pruned + pools["decode"].pruned), rows, table, tuple(picks), counts,
                transfers, factors, p90)


def _check_budget(spec: ModelSpec, s: PlanSettings, pools: dict[str, _Pool], prefill_gpu: GpuSpec,
                  decode_gpu: GpuSpec) -> None:
    """No candidate on a side, or no pair within the budget: bad input, naming the smallest deployment."""
    sides = {role: pools[role].candidates for role in ("prefill", "decode")}
    for role, given in (("prefill", s.prefill_topologies), ("decode", s.decode_topologies)):
        if given is not None and not sides[role]:  # the user's own list: say what became of it
            why = "; ".join(f"{r.topology}: {r.reason}" for r in pools[role].rejected) or "none was usable"
            raise InputError(f"--{role}-topologies", f"{role}_topologies", f"no listed layout fits: {why}")
    if all(sides.values()):
        smallest = min(c.gpus for c in sides["prefill"]) + min(c.gpus for c in sides["decode"])
        if smallest <= s.max_gpus:
            return
    smallest = _smallest_deployment(spec, s, prefill_gpu, decode_gpu)
    where = f"{spec.name} on {prefill_gpu.name}" + (f"/{decode_gpu.name}" if s.mixed else "")
    if smallest is None:
        raise InputError("--max-gpus", "max_gpus",
                         f"{where}: no layout of up to 512 GPUs holds the weights and one {s.isl}+{s.osl}-token "
                         "request")
    label, gpus = smallest
    raise InputError("--max-gpus", "max_gpus",
                     f"{s.max_gpus} GPUs are fewer than the smallest deployment of {where}: {label} "
                     f"needs {gpus} GPUs")


def _smallest_deployment(spec: ModelSpec, s: PlanSettings, prefill_gpu: GpuSpec,
                         decode_gpu: GpuSpec) -> tuple[str, int] | None:
    config = s.engine_config()
    found: dict[str, Topology] = {}
    for role, gpu in (("prefill", prefill_gpu), ("decode", decode_gpu)):
        for topo in candidate_topologies(spec, 512):
            try:
                build_engine(spec, gpu, topo, isl=s.isl, osl=s.osl, config=config)
            except InputError:
                continue
            found[role] = topo
            break
    if len(found) < 2:
        return None
    p, d = found["prefill"], found["decode"]
    return f"1x{p.canonical} : 1x{d.canonical}", p.gpus + d.gpus


@dataclass(frozen=True)
class _Context:
    """What every matched block needs to finish its rows."""

    spec: ModelSpec
    settings: PlanSettings
    prefill_gpu: GpuSpec
    decode_gpu: GpuSpec
    candidates: dict[tuple[str, str, int], Candidate]  # (role, topology, MTP tokens)
    link_efficiency: float  # achieved share of the link's bandwidth: the lower of the two pools' factors
    extras: EngineExtras  # a draft model and DCP, as the state accounting takes them
    tpot_p90: TpotP90


def _match(spec: ModelSpec, s: PlanSettings, pools: dict[str, _Pool], prefill_gpu: GpuSpec,
           decode_gpu: GpuSpec, factors: dict[str, Factors], p90: TpotP90,
           ) -> tuple[pd.DataFrame, dict[str, int], dict[str, dict[str, Any]]]:
    """Rate-match every prefill sweep with every decode sweep within the budget; add the KV transfer."""
    n = s.max_gpus
    prefill, decode = pools["prefill"], pools["decode"]
    ctx = _Context(spec, s, prefill_gpu, decode_gpu,
                   {(c.role, c.topology, c.mtp_tokens): c for c in prefill.candidates + decode.candidates},
                   min(f.efficiency.link for f in factors.values()), s.extras(), p90)
    transfers: dict[tuple[str, str, int, str], Transfer] = {}
    counts = {"rate_matched_rows": 0, "rows_over_kv_room_after_block_size": 0, "rows_link_saturated": 0}
    parts = []
    for gp, pframes in _by_gpus(prefill).items():
        for gd, dframes in _by_gpus(decode).items():
            if gp + gd > n:
                continue
            workers = max((n - gd) // gp, (n - gp) // gd)
            matched = rate_match(pd.concat(pframes, ignore_index=True), pd.concat(dframes, ignore_index=True),
                                 s.osl, workers, isl=s.isl)
            matched = matched[matched["gpus_total"].to_numpy() <= n]
            counts["rate_matched_rows"] += len(matched)
            if len(matched):
                finished = _finish(matched, ctx, transfers, counts)
                if len(finished):
                    parts.append(finished)
    if not parts:
        raise InputError("--max-gpus", "max_gpus",
                         f"no rate-matched deployment of at most {n} GPUs is feasible (KV room or link limits)")
    rows = pd.concat(parts, ignore_index=True)
    summary = {f"{p} -> {d}{'+MTP' + str(k) if k else ''} over {scope}": t.to_dict()
               for (p, d, k, scope), t in sorted(transfers.items())}
    return rows, counts, summary


def _by_gpus(pool: _Pool) -> dict[int, list[pd.DataFrame]]:
    out: dict[int, list[pd.DataFrame]] = {}
    for c, frame in zip(pool.candidates, pool.sweeps, strict=True):
        out.setdefault(c.gpus, []).append(frame)
    return out


def _network_groups(prefill: Candidate, decode: Candidate, ctx: _Context) -> str:
    notes = []
    for c, gpu in ((prefill, ctx.prefill_gpu), (decode, ctx.decode_gpu)):
        if c.network_charged:
            topo = parse_topology(c.topology)
            group = max(topo.tp, topo.expert_shards)
            notes.append(f"{c.role} {c.topology}: a {group}-GPU group over {math.ceil(group / gpu.nvlink_domain)} "
                         f"NVLink domains, its collectives charged at {gpu.network_bandwidth / 1e9:g} GB/s")
    return "; ".join(notes)


def _finish(matched: pd.DataFrame, ctx: _Context, transfers: dict[tuple[str, str, int, str], Transfer],
            counts: dict[str, int]) -> pd.DataFrame:
    """The KV transfer term of every row (TTFT, concurrency, link load, the block-size fix) and the columns
    that follow from its two candidates (provenance, network charge); rows over KV room or link are dropped."""
    s = ctx.settings
    gpus_total = matched["gpus_total"].to_numpy()
    same_kind = ctx.prefill_gpu.name == ctx.decode_gpu.name
    domain = (load_link(ctx.prefill_gpu.name, NVLINK).domain_gpus or 0) if same_kind else 0
    keys = pd.DataFrame({
        "p": matched["prefill_topology"].astype(str).to_numpy(),
        "d": matched["decode_topology"].astype(str).to_numpy(),
        "k": matched["mtp_tokens"].to_numpy(dtype=float).astype(int),
        "scope": np.where(gpus_total <= domain, NVLINK, SCALE_OUT),
    })
    codes, uniques = pd.factorize(pd.MultiIndex.from_frame(keys))
    per_key: dict[str, list[Any]] = {name: [] for name in (
        "ms", "mib", "send", "recv", "bandwidth", "pblock", "dblock", "to_set", "room", "p_dp", "d_dp",
        "charged", "groups", "psource", "dsource", "modeled")}
    for p, d, k, scope in uniques:
        key = (p, d, int(k), scope)
        if key not in transfers:
            link = scope_link(ctx.prefill_gpu, ctx.decode_gpu, scope)
            x = ctx.extras
            transfers[key] = request_transfer(ctx.spec, parse_topology(p), parse_topology(d), link, isl=s.isl,
                                              osl=s.osl, kv_cache_dtype=s.kv_cache_dtype, vllm=s.vllm,
                                              num_speculative_tokens=int(k) or x.num_speculative_tokens,
                                              efficiency=ctx.link_efficiency, speculative_model=x.speculative_model,
                                              decode_context_parallel_size=x.decode_context_parallel_size)
        t = transfers[key]
        pc, dc = ctx.candidates[("prefill", p, 0)], ctx.candidates[("decode", d, int(k))]
        values = {
            "ms": t.ms, "mib": t.bytes_total / MiB, "send": t.send_bytes_per_gpu, "recv": t.decode_bytes_per_rank,
            "bandwidth": t.link.bandwidth * t.efficiency, "pblock": t.blocks.prefill, "dblock": t.blocks.decode,
            "to_set": t.blocks.to_set or 0,
            "room": np.nan if dc.kv_room is None else _room_with_block(ctx, parse_topology(d), int(k), dc.kv_room,
                                                                        t.blocks.to_set),
            "p_dp": parse_topology(p).dp, "d_dp": parse_topology(d).dp,
            "charged": pc.network_charged or dc.network_charged, "groups": _network_groups(pc, dc, ctx),
            "psource": pc.source, "dsource": dc.source,
            "modeled": pc.source.startswith("modeled") or dc.source.startswith("modeled"),
        }
        for name, value in values.items():
            per_key[name].append(value)
    col = {name: np.asarray(values)[codes] for name, values in per_key.items()}
    ttft = matched["ttft_ms_p50"].to_numpy(dtype=float)
    rate = matched["total_tps"].to_numpy(dtype=float) / (s.isl + s.osl)
    tpot = matched["tpot_ms_p50"].to_numpy(dtype=float)
    p_ranks = matched["n_prefill_workers"].to_numpy() * col["p_dp"]
    d_ranks = matched["n_decode_workers"].to_numpy() * col["d_dp"]
    utilization = np.maximum(rate / p_ranks * col["send"], rate / d_ranks * col["recv"]) / col["bandwidth"]
    total_ttft = ttft + col["ms"]
    # TPOT p90: a measured decode sweep's own p99 (>= p90) where it has one, else TPOT x the stated factor.
    p99 = matched["tpot_ms_p99"].to_numpy(dtype=float)
    measured_p99 = np.char.startswith(col["dsource"].astype(str), "measured") & np.isfinite(p99)
    tpot_p90 = np.where(measured_p99, p99, tpot * ctx.tpot_p90.factor)
    scaled = f"TPOT x {ctx.tpot_p90.factor:.2f}"
    decode_modeled = np.char.startswith(col["dsource"].astype(str), "modeled")
    p90_basis = np.where(measured_p99, "measured p99 TPOT of the decode sweep (bounds the p90)",
                         np.where(decode_modeled, f"modeled {scaled}", f"measured median {scaled}"))
    block = pd.array(col["to_set"].astype(np.int64), dtype="Int64")
    block[col["to_set"] == 0] = pd.NA
    out = matched.assign(
        deployment=matched["deployment"].astype(str),
        prefill_ttft_ms=ttft,
        ttft_ms_p50=total_ttft,
        ttft_ms_p99=matched["ttft_ms_p99"].to_numpy(dtype=float) + col["ms"],
        kv_transfer_ms=col["ms"],
        kv_transfer_share=col["ms"] / total_ttft,
        tpot_ms_p90=tpot_p90,
        tpot_p90_basis=p90_basis,
        kv_link=keys["scope"].to_numpy(),
        kv_mib_per_request=col["mib"],
        kv_link_utilization=utilization,
        prefill_block_tokens=col["pblock"].astype(np.int64),
        decode_block_tokens=col["dblock"].astype(np.int64),
        block_size_to_set=block,
        decode_room=col["room"].astype(float),
        # Little's law with the transfer inside TTFT, in whole requests (what --max-concurrency is set to).
        concurrency=np.maximum(1, np.rint(rate * (total_ttft + tpot * (s.osl - 1)) / 1000.0)).astype(np.int64),
        prefill_concurrency=matched["prefill_concurrency"].to_numpy(dtype=float).astype(np.int64),
        decode_concurrency=matched["decode_concurrency"].to_numpy(dtype=float).astype(np.int64),
        network_charged=col["charged"].astype(bool),
        network_groups=col["groups"],
        prefill_source=col["psource"],
        decode_source=col["dsource"],
        modeled=col["modeled"].astype(bool),
        prefill_gpu=ctx.prefill_gpu.name,
        decode_gpu=ctx.decode_gpu.name,
        replicas_in_budget=s.max_gpus // gpus_total,
    )
    over_room = out["decode_concurrency"].to_numpy() > col["room"]  # NaN room (unknown) keeps the row
    saturated = utilization > 1.0
    counts["rows_over_kv_room_after_block_size"] += int(over_room.sum())
    counts["rows_link_saturated"] += int((saturated & ~over_room).sum())
    return out[~(over_room | saturated)]


def _room_with_block(ctx: _Context, topo: Topology, k: int, room: int, block: int | None) -> float:
    """A decode engine's KV room when ``--block-size`` grows its block: fewer requests, by the bytes ratio."""
    if block is None:
        return float(room)
    s = ctx.settings
    common: dict[str, Any] = dict(max_model_len=s.isl + s.osl, tp=topo.tp, kv_cache_dtype=s.kv_cache_dtype,
                                  vllm=s.vllm, **ctx.extras.state_args(decode=True))
    if k:
        common["num_speculative_tokens"] = k
    own = plan_state(ctx.spec, **common).bytes_per_request
    forced = plan_state(ctx.spec, block_size=block, **common).bytes_per_request
    return float(math.floor(room * own / forced))


def _picks(rows: pd.DataFrame, slas: Sequence[Sla], *, require_sla: bool) -> tuple[pd.DataFrame, list[Pick]]:
    """The frontier (numbered rows) plus a row per SLA pick; the picks."""
    front = upper_envelope(rows)
    chosen: list[tuple[Sla, Any, int]] = []  # (sla, index label in rows or None, candidates)
    for sla in slas:
        latency_ok = sla.meets_latency(rows)
        pool = rows[latency_ok] if not latency_ok.all() else rows
        env = upper_envelope(pool) if pool is not rows else front
        meets = latency_ok & (rows["tps_per_user"].to_numpy(dtype=float) >= (sla.min_tps_per_user or 0.0))
        if len(env):
            pick = sla_pick(env, min_tps_per_user=sla.min_tps_per_user or 0.0)
        if not len(env) or not pick.met:
            chosen.append((sla, None, int(meets.sum())))
            continue
        hit = env[(env["deployment"] == pick.deployment) & (env["tps_per_user"] == pick.tps_per_user)
                  & (env["tps_per_gpu"] == pick.tps_per_gpu)]
        chosen.append((sla, hit.index[0], int(meets.sum())))
    labels = list(front.index) + [i for _, i, _ in chosen if i is not None and i not in set(front.index)]
    closest_of: dict[int, tuple[Any, float]] = {}
    for n_sla, (sla, label, _) in enumerate(chosen):
        if label is None:
            miss = sla.shortfall(rows)
            order = np.lexsort((-rows["tps_per_gpu"].to_numpy(dtype=float), miss))
            best = rows.index[order[0]]
            closest_of[n_sla] = (best, float(miss[order[0]]))
            if best not in labels:
                labels.append(best)
    table = rows.loc[labels].copy()
    table["on_frontier"] = [lab in set(front.index) for lab in labels]
    table = table.sort_values(["tps_per_user", "tps_per_gpu"], kind="stable")
    row_of = {lab: k for k, lab in enumerate(table.index)}
    table.insert(0, "row", np.arange(len(table)))
    picked: dict[Any, list[str]] = {}
    picks = []
    for n_sla, (sla, label, candidates) in enumerate(chosen):
        if label is not None:
            picked.setdefault(label, []).append(sla.describe())
            picks.append(Pick(sla, True, row_of[label], None, None, candidates))
            continue
        best, miss = closest_of[n_sla]
        if require_sla:
            r = rows.loc[best]
            p90 = (f" (p90 {r['tpot_ms_p90']:.1f} ms: {r['tpot_p90_basis']})"
                   if sla.max_tpot_ms_p90 is not None else "")
            raise InputError("SLA", sla.describe(),
                             f"no deployment within the budget meets it; the closest is {r['deployment']} at "
                             f"concurrency {int(r['concurrency'])}: {r['tps_per_user']:.1f} tokens/s per user, "
                             f"TTFT {r['ttft_ms_p50']:,.0f} ms, TPOT {r['tpot_ms_p50']:.1f} ms{p90}, "
                             f"{r['tps_per_gpu']:,.0f} tokens/s per GPU ({miss:.0%} short)")
        picks.append(Pick(sla, False, None, row_of[best], miss, candidates))
    table["picked_for"] = ["; ".join(picked.get(lab, [])) for lab in table.index]
    table["curve_concurrencies"] = _curves(rows, table)
    heaviest = rows[rows["deployment"].isin(set(table["deployment"]))].groupby("deployment")[
        ["prefill_concurrency", "decode_concurrency"]].max()
    table["curve_prefill_concurrency_max"] = table["deployment"].map(heaviest["prefill_concurrency"]).astype(int)
    table["curve_decode_concurrency_max"] = table["deployment"].map(heaviest["decode_concurrency"]).astype(int)
    table = table.reset_index(drop=True)
    return table[[c for c in ROW_COLUMNS if c in table.columns]], picks


def _curves(rows: pd.DataFrame, table: pd.DataFrame, points: int = 8) -> list[list[int]]:
    """Per table row, concurrencies spanning its deployment's predicted curve (at most ``points``, spread
    evenly in log scale, its own concurrency included): what the deployment's benchmark sweeps."""
    wanted = set(table["deployment"])
    mine = rows[rows["deployment"].isin(wanted)]
    curve = {dep: np.unique(group["concurrency"].to_numpy()) for dep, group in mine.groupby("deployment")}
    out = []
    for dep, own in zip(table["deployment"], table["concurrency"], strict=True):
        values = curve[dep]
        if values.size > points:
            targets = np.geomspace(values[0], values[-1], points)
            values = np.unique(values[np.abs(np.log(values[None, :]) - np.log(targets[:, None])).argmin(axis=1)])
        out.append(sorted({int(v) for v in values} | {int(own)}))
    return out


def picks_sentence(p: Plan, pick: Pick) -> str:
    """One pick in words."""
    if not pick.met:
        assert pick.closest_row is not None
        r = p.row(pick.closest_row)
        return (f"{pick.sla.describe()}: nothing meets it within {p.settings.max_gpus} GPUs; the closest is row "
                f"{pick.closest_row}, {r['deployment']} ({r['tps_per_user']:.1f} tokens/s per user, TTFT "
                f"{r['ttft_ms_p50']:,.0f} ms)")
    assert pick.row is not None
    r = p.row(pick.row)
    p90 = (f", TPOT p90 {r['tpot_ms_p90']:.1f} ms ({r['tpot_p90_basis']})" if pick.sla.max_tpot_ms_p90 is not None
           else "")
    return (f"{pick.sla.describe()}: row {pick.row}, {r['deployment']} on {r['gpus_total']} GPUs at concurrency "
            f"{r['concurrency']}: {r['tps_per_gpu']:,.0f} tokens/s per GPU, {r['tps_per_user']:.1f} tokens/s per "
            f"user, TTFT {r['ttft_ms_p50']:,.0f} ms ({r['kv_transfer_share']:.1%} of it KV transfer){p90}")


#: What ``pdtune recipe`` reads from a plan file and the kind of each value ("whole": an int, or a float such as
#: ``3.0``, within :data:`pdtune.limits.MAX_EXACT_INT`; "number": finite). A file ``pdtune plan --json`` wrote has
#: all of it; one edited by hand or truncated is refused here, naming the key, before a recipe is written.
_PLAN_SCHEMA: dict[str, dict[str, str]] = {
    "settings": {"isl": "whole", "osl": "whole", "max_gpus": "whole", "max_num_batched_tokens": "whole",
                 "gpu_memory_utilization": "number", "kv_cache_dtype": "text"},
    "model": {"name": "text", "precision": "text"},
    "gpus.prefill": {"name": "text", "gpus_per_node": "whole"},
    "gpus.decode": {"name": "text", "gpus_per_node": "whole"},
}
_PLAN_ROW = {"row": "whole", "deployment": "text", "prefill_topology": "text", "decode_topology": "text",
             "mtp_tokens": "whole", "n_prefill_workers": "whole", "n_decode_workers": "whole", "concurrency": "whole"}
_PLAN_CANDIDATE = {"role": "text", "topology": "text", "mtp_tokens": "whole"}


def load_plan(path: str | Path) -> dict[str, Any]:
    """A ``pdtune plan --json`` file, checked for everything ``pdtune recipe`` reads from it."""
    source = Path(path)
    data = read_mapping(source, "PLAN.json")
    if data.get("generator") != "pdtune plan":
        raise InputError(source, "generator", "not a `pdtune plan --json` output")
    for key in ("settings", "rows", "model", "gpus"):
        if key not in data:
            raise InputError(source, key, "missing")
    for where, fields in _PLAN_SCHEMA.items():
        section: Any = data
        for part in where.split("."):
            section = section.get(part) if isinstance(section, dict) else None
        if not isinstance(section, dict):
            raise InputError(source, where, "must be an object")
        _check_plan_fields(section, fields, source, where)
    for key, fields in (("rows", _PLAN_ROW), ("candidates", _PLAN_CANDIDATE)):
        entries = data.get(key, [])
        if not isinstance(entries, list):
            raise InputError(source, key, "must be a list")
        for i, entry in enumerate(entries):
            if not isinstance(entry, dict):
                raise InputError(source, f"{key}[{i}]", "must be an object")
            _check_plan_fields(entry, fields, source, f"{key}[{i}]")
    return data


def _check_plan_fields(section: dict[str, Any], fields: dict[str, str], source: Path, where: str) -> None:
    for key, kind in fields.items():
        value = section.get(key)
        name = f"{where}.{key}"
        if kind == "text":
            if not isinstance(value, str) or not value.strip():
                raise InputError(source, name, f"must be text, got {brief(value)}")
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise InputError(source, name, f"must be a number, got {brief(value)}")
        if kind == "whole" and (value != int(value) or not 0 <= value <= limits.MAX_EXACT_INT):
            raise InputError(source, name, f"must be a whole number from 0 to {limits.MAX_EXACT_INT:,}, got "
                                           f"{brief(value)}")


def sla_list(floors: Iterable[float] | None, max_ttft_ms: float | None,
             max_tpot_ms_p90: float | None) -> list[Sla]:
    """The SLAs a command line names: one per interactivity floor, each with the latency limits."""
    values = list(floors or [])
    if not values and max_ttft_ms is None and max_tpot_ms_p90 is None:
        return []
    return [Sla(f, max_ttft_ms, max_tpot_ms_p90) for f in (values or [None])]
