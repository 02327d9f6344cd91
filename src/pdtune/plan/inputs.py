"""What a plan is asked for: the SLAs, the TPOT p90 rule, the search's settings and its constants."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pdtune.errors import InputError
from pdtune.model import load_model
from pdtune.paths import clusters_dir
from pdtune.perfmodel import DEFAULT_ACCEPTANCE, EngineConfig
from pdtune.results import load_results
from pdtune.transfer import EngineExtras

#: Concurrencies of the modeled isolated sweeps (points above a decode engine's KV room are dropped).
GRID: tuple[int, ...] = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048,
                         3072, 4096)

#: Interactivity floors (tokens/s per user) a plan picks for when no SLA is given.
DEFAULT_FLOORS: tuple[float, ...] = (20.0, 50.0, 100.0, 150.0)

#: The vLLM line the plan's state accounting and its recipes follow.
PLAN_VLLM = "0.33.0"

#: The format of a plan file (``pdtune_plan`` in ``pdtune plan --json``); ``pdtune recipe`` reads this one only.
PLAN_FORMAT = 1

#: Columns of a plan row, in the order a table shows them first.
ROW_COLUMNS: tuple[str, ...] = (
    "row", "mode", "deployment", "gpus_total", "concurrency", "tps_per_gpu", "tps_per_user", "meets_sla",
    "ttft_ms_p50", "ttft_ms_p90", "ttft_ms_p99", "within_ttft_ceiling", "kv_transfer_ms", "kv_transfer_share",
    "tpot_ms_p50", "tpot_ms_p90", "tpot_ms_p99", "tpot_p90_basis", "latency_model", "prefill_ttft_ms",
    "topology", "agg_replicas", "server_concurrency",
    "prefill_topology", "decode_topology", "n_prefill_workers", "n_decode_workers", "gpus_prefill",
    "gpus_decode", "prefill_gpu", "decode_gpu", "mtp_tokens", "prefill_concurrency", "decode_concurrency",
    "decode_room", "total_tps", "output_tps", "bottleneck", "bottleneck_words", "kv_link", "kv_mib_per_request",
    "kv_link_utilization", "prefill_block_tokens", "decode_block_tokens", "block_size_to_set", "network_charged",
    "network_groups", "replicas_in_budget", "on_frontier", "picked_for", "modeled", "prefill_source",
    "decode_source", "source", "curve_concurrencies", "curve_prefill_concurrency_max",
    "curve_decode_concurrency_max", "curve_server_concurrency_max",
)

#: The default TTFT ceiling: at least this many ms (the limit for a user's flow of thought to stay uninterrupted,
#: Nielsen, *Usability Engineering*, 1993, ch. 5), and at least this many times the prompt's own prefill time.
TTFT_CEILING_FLOOR_MS = 1000.0
TTFT_CEILING_PROMPTS = 4


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

    def meets(self, rows: pd.DataFrame) -> np.ndarray:
        """Rows that meet every part of the SLA: the interactivity floor and the latency limits."""
        ok = self.meets_latency(rows)
        if self.min_tps_per_user is not None:
            ok &= rows["tps_per_user"].to_numpy(dtype=float) >= self.min_tps_per_user
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
class TtftCeiling:
    """The TTFT a pick should stay under when the SLA sets no TTFT limit, and where it comes from.

    By default it is derived from the workload: :data:`TTFT_CEILING_PROMPTS` times the TTFT of one request of
    the plan's ISL alone on the fastest engine the plan has (the prompt's own prefill, no queue: a request
    may wait behind three prompts of its size), and never below :data:`TTFT_CEILING_FLOOR_MS`. A pick meeting
    the SLA within it is preferred to a faster one above it; when no row meeting the SLA is within it, the
    best one is picked and the plan prints a warning line.
    """

    ms: float
    source: str
    given: bool  # --ttft-ceiling-ms (True) or the workload's default (False)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def ttft_ceiling(s: PlanSettings, unloaded_ttft_ms: float) -> TtftCeiling:
    """The plan's TTFT ceiling: ``--ttft-ceiling-ms`` when given, else the workload's (see :class:`TtftCeiling`)."""
    if s.ttft_ceiling_ms is not None:
        return TtftCeiling(float(s.ttft_ceiling_ms), "--ttft-ceiling-ms", True)
    if not math.isfinite(unloaded_ttft_ms):
        return TtftCeiling(TTFT_CEILING_FLOOR_MS, f"{TTFT_CEILING_FLOOR_MS:,.0f} ms, the floor of the rule "
                                                  "(no unloaded prefill time known)", False)
    derived = TTFT_CEILING_PROMPTS * unloaded_ttft_ms
    ms = max(TTFT_CEILING_FLOOR_MS, derived)
    how = (f"default from the workload: {TTFT_CEILING_PROMPTS}x the {s.isl:,}-token prompt's own TTFT alone on "
           f"the fastest engine ({unloaded_ttft_ms:,.0f} ms, modeled or measured as its sweep), at least "
           f"{TTFT_CEILING_FLOOR_MS:,.0f} ms (a user's flow of thought, Nielsen 1993)")
    return TtftCeiling(ms, how, False)


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
    # vLLM environment variables the engines set (``--vllm-env``): the search plans with them, the recipes
    # write them into every worker's environment
    vllm_env: tuple[tuple[str, str], ...] = ()
    aggregated: bool = True  # also plan replicas of aggregated servers (pdtune.plan.aggregated)
    ttft_ceiling_ms: float | None = None  # None: the workload's default (:func:`ttft_ceiling`)
    latency_model: str = "steady-state"  # what evaluates the reported rows: "steady-state" or "simulated"
    weights: str = ""  # the checkpoint's weight format when its config says another (pdtune.precision); "": the config's

    def __post_init__(self) -> None:
        if isinstance(self.calibration, str):
            object.__setattr__(self, "calibration", (self.calibration,))
        for name in ("max_gpus", "isl", "osl"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(f"--{name.replace('_', '-')}", name, f"must be a whole number >= 1, got {value!r}")
        if self.max_gpus < 2 and not self.aggregated:  # one GPU holds a server, never a prefill/decode pair
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
        if self.ttft_ceiling_ms is not None and (isinstance(self.ttft_ceiling_ms, bool)
                                                 or not math.isfinite(self.ttft_ceiling_ms)
                                                 or self.ttft_ceiling_ms <= 0):
            raise InputError("--ttft-ceiling-ms", "ttft_ceiling_ms",
                             f"must be a positive number of ms, got {self.ttft_ceiling_ms!r}")
        if self.latency_model not in ("steady-state", "simulated"):
            raise InputError("--latency-model", "latency_model",
                             f"must be steady-state or simulated, got {self.latency_model!r}")
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
        out["vllm_env"] = dict(self.vllm_env)
        return out



def sla_list(floors: Iterable[float] | None, max_ttft_ms: float | None,
             max_tpot_ms_p90: float | None) -> list[Sla]:
    """The SLAs a command line names: one per interactivity floor, each with the latency limits."""
    values = list(floors or [])
    if not values and max_ttft_ms is None and max_tpot_ms_p90 is None:
        return []
    return [Sla(f, max_ttft_ms, max_tpot_ms_p90) for f in (values or [None])]
