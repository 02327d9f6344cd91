"""One tuning scenario: the model, the GPU, the workload and where the measurements are.

Every chapter's ``parameters`` cell assigns a subset of these fields under the same names, and the
workbook's parameters file (``data/params/*.yaml``) is a :class:`Scenario` written out. Validating here,
once, means a typo in a parameters file fails before any notebook runs.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from pdtune import limits
from pdtune.errors import InputError, brief
from pdtune.paths import REPO_ROOT

MODELED_CLUSTER = "data/clusters/gb300-qwen3.8-modeled"

#: The three kinds of benchmark results a scenario names (``<kind>_results``), in the order the chapters read them.
RESULT_KINDS: tuple[str, ...] = ("prefill", "decode", "disagg")


@dataclass(frozen=True)
class Scenario:
    """Defaults are the article's: Qwen3.8-2.4T on GB300, ISL/OSL 8192/1024, vLLM 0.26.1."""

    model: str = "qwen3.8-2.4t"
    gpu: str = "gb300"
    gpu_memory_gib: float = 276.62  # what torch reports for one GPU (not the box's marketing capacity)
    gpu_memory_utilization: float = 0.92
    isl: int = 8192
    osl: int = 1024
    kv_cache_dtype: str = "fp8"
    vllm: str = "0.26.1"  # the vLLM that serves; chapter 1 also shows the article's 0.11 arithmetic
    num_speculative_tokens: int = 3  # MTP draft tokens when a topology runs with MTP
    mtp_acceptance: float = 0.25  # mean fraction of draft tokens accepted (modeled data only; pdtune.perfmodel.DEFAULT_ACCEPTANCE)
    prefill_topologies: tuple[str, ...] = (
        "TP4DP2+EP", "TP2DP4+EP", "TP4DP4+EP", "TP2DP8+EP", "DP16+EP", "TP1PP6+EP", "TP1PP8+EP", "TP8+EP", "TP16+EP",
    )
    decode_topologies: tuple[str, ...] = ("TP2DP4+EP", "TP4DP8+EP", "TEP8", "TEP16", "TP4DP4+EP")
    # Per-engine memory the model cannot predict: measured at start-up (a vLLM log) or assumed.
    non_torch_gib: float = 2.90
    activation_peak_gib: float = 1.83
    cudagraph_estimate_gib: float = 8.29
    max_num_seqs: tuple[int, ...] = (20, 32, 80, 272, 528, 656)
    vllm_logs: tuple[str, ...] = ()
    prefill_results: tuple[str, ...] = (f"{MODELED_CLUSTER}/prefill",)
    decode_results: tuple[str, ...] = (f"{MODELED_CLUSTER}/decode",)
    disagg_results: tuple[str, ...] = (f"{MODELED_CLUSTER}/disagg",)
    gpus: str = ""  # GPU counts for result files that do not record them: "24" or "prefill=8,decode=16"
    accuracy_threshold: float = 0.95
    min_tps_per_user: float = 50.0  # the SLA chapter 7 picks a configuration for
    title: str = field(default="", compare=False)  # free text shown in the workbook's summary

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    @classmethod
    def from_mapping(cls, values: dict[str, Any], *, source: str = "parameters") -> Scenario:
        """Check names and types of every value; nothing unknown, nothing of the wrong type."""
        known = {f.name: f for f in fields(cls)}
        hints = typing.get_type_hints(cls)
        kwargs: dict[str, Any] = {}
        for key, value in values.items():
            if key not in known:
                raise InputError(source, key, f"unknown parameter; known: {', '.join(known)}")
            kwargs[key] = _coerce(value, hints[key], source, key)
        scenario = cls(**kwargs)
        scenario.check(source)
        return scenario

    def check(self, source: str = "parameters") -> None:
        _check_bounds(self, source)
        for name in ("gpu_memory_gib", "isl", "osl"):
            if getattr(self, name) <= 0:
                raise InputError(source, name, f"must be positive, got {getattr(self, name)}")
        for name in ("gpu_memory_utilization", "mtp_acceptance", "accuracy_threshold"):
            if not 0 < getattr(self, name) <= 1:
                raise InputError(source, name, f"must be in (0, 1], got {getattr(self, name)}")
        for name in ("non_torch_gib", "activation_peak_gib", "cudagraph_estimate_gib", "min_tps_per_user"):
            if getattr(self, name) < 0:
                raise InputError(source, name, f"must not be negative, got {getattr(self, name)}")
        if self.num_speculative_tokens < 0:
            raise InputError(source, "num_speculative_tokens", "must not be negative")
        if any(n <= 0 for n in self.max_num_seqs):
            raise InputError(source, "max_num_seqs", "every entry must be positive")

    def resolve(self, path: str, *, base: Path | None = None) -> Path:
        """A path as written in a parameters file: absolute, relative to ``base``, or to the repository."""
        candidate = Path(path).expanduser()
        if candidate.is_absolute():
            return candidate
        if base is not None and (base / candidate).exists():
            return base / candidate
        return REPO_ROOT / candidate

    def result_paths(self, kind: str, *, base: Path | None = None) -> list[Path]:
        return [self.resolve(p, base=base) for p in getattr(self, f"{kind}_results")]

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}


#: Ceilings of the numeric parameters (:mod:`pdtune.limits`); every float must also be finite, since a NaN
#: passes every comparison the checks below make.
_BOUNDS: dict[str, float] = {
    "gpu_memory_gib": limits.MAX_BYTES / 2**30, "isl": limits.MAX_MODEL_LEN, "osl": limits.MAX_MODEL_LEN,
    "num_speculative_tokens": limits.MAX_SPECULATIVE_TOKENS, "non_torch_gib": limits.MAX_BYTES / 2**30,
    "activation_peak_gib": limits.MAX_BYTES / 2**30, "cudagraph_estimate_gib": limits.MAX_BYTES / 2**30,
    "max_num_seqs": limits.MAX_NUM_SEQS, "min_tps_per_user": limits.MAX_MEASURE,
}
#: Entries of one list parameter.
MAX_LIST = 4096


def _check_bounds(scenario: Scenario, source: str) -> None:
    for f in fields(scenario):
        value = getattr(scenario, f.name)
        values = value if isinstance(value, tuple) else (value,)
        if isinstance(value, tuple) and len(value) > MAX_LIST:
            raise InputError(source, f.name, f"{len(value):,} entries are more than the {MAX_LIST:,} pdtune accepts")
        for v in values:
            if isinstance(v, float) and not math.isfinite(v):
                raise InputError(source, f.name, f"must be a finite number, got {v}")
            if f.name in _BOUNDS and isinstance(v, (int, float)) and v > _BOUNDS[f.name]:
                shown = f"{v:,}" if isinstance(v, int) and v < 10**30 else f"{v:g}"
                raise InputError(source, f.name, f"{shown} is more than the {_BOUNDS[f.name]:,.0f} pdtune accepts")


def _coerce(value: Any, hint: Any, source: str, key: str) -> Any:
    origin = typing.get_origin(hint)
    if origin is tuple:
        (inner, _ellipsis) = typing.get_args(hint)
        if isinstance(value, (str, int, float)):
            value = [value]  # one path or one topology given without a list
        if not isinstance(value, (list, tuple)):
            raise InputError(source, key, f"must be a list, got {type(value).__name__}")
        return tuple(_coerce(v, inner, source, key) for v in value)
    if hint is bool or (isinstance(hint, types.UnionType) and bool in typing.get_args(hint)):
        if not isinstance(value, bool):
            raise InputError(source, key, f"must be true or false, got {brief(value)}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise InputError(source, key, f"must be a whole number, got {brief(value)}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InputError(source, key, f"must be a number, got {brief(value)}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise InputError(source, key, f"must be a string, got {brief(value)}")
        return value
    raise InputError(source, key, f"unsupported parameter type {hint}")
