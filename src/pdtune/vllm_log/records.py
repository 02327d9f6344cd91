"""What one process logged, and what the banner and argument lines say about the engine: plain records."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from pdtune.units import GiB

#: Records of lines that carry no ``(Name pid=N)`` prefix.
MAIN = "main"


@dataclass(frozen=True, slots=True)
class CudaGraphGroup:
    """One entry of ``Profiling CUDA graph memory``: ``count`` graphs of ``mode``, the largest one first."""

    mode: str
    count: int
    largest: int


@dataclass(frozen=True, slots=True)
class KvCacheReport:
    """One ``KV cache size`` report. vLLM 0.11 prints one per rank, from that rank's memory, before it
    shrinks every rank to the smallest; later versions print the shrunk size once."""

    tokens: int | None
    max_concurrency: float | None
    max_model_len: int | None
    device: str | None = None


def open_kv_report(rec: dict[str, Any], report: dict[str, Any] | None = None) -> dict[str, Any]:
    """The report a ``KV cache size`` or ``Maximum concurrency`` line fills, in a record under construction.

    ``report`` starts a new one (a size line); without it, the one still open is returned when it lacks its
    concurrency, else a new empty one (a concurrency line on its own). Reports are kept as runs of equal
    ones with a count (``kv_runs``) plus the open one (``kv_open``): a process that logs the same report again
    and again (a crash loop whose restarts reuse its pid) costs one run, not one report per restart.
    """
    current = rec.get("kv_open")
    if report is None:
        if current is not None and "max_concurrency" not in current:
            return current
        report = {"tokens": None, "device": None}
    _close_kv_report(rec)
    rec["kv_open"] = report
    return report


def _close_kv_report(rec: dict[str, Any]) -> None:
    current = rec.pop("kv_open", None)
    if current is None:
        return
    key = tuple(sorted(current.items()))
    runs = rec.setdefault("kv_runs", [])
    if runs and runs[-1][0] == key:
        runs[-1][1] += 1
    else:
        runs.append([key, 1])


def kv_reports(rec: dict[str, Any]) -> tuple[KvCacheReport, ...]:
    """A record's reports in the order logged (equal reports share one object)."""
    runs = list(rec.get("kv_runs", ()))
    if rec.get("kv_open") is not None:
        runs.append((tuple(sorted(rec["kv_open"].items())), 1))
    out: list[KvCacheReport] = []
    for key, count in runs:
        r = dict(key)
        out += [KvCacheReport(r.get("tokens"), r.get("max_concurrency"), r.get("max_model_len"), r.get("device"))] * count
    return tuple(out)


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """What the banner, the non-default-args line and the version lines say about the engine."""

    version: str | None = None
    model: str | None = None
    tensor_parallel_size: int | None = None
    data_parallel_size: int | None = None
    pipeline_parallel_size: int | None = None
    max_model_len: int | None = None
    kv_cache_dtype: str | None = None
    dtype: str | None = None
    quantization: str | None = None
    speculative_method: str | None = None
    num_speculative_tokens: int | None = None
    enable_prefix_caching: bool | None = None
    gpu_memory_utilization: float | None = None
    block_size: int | None = None
    decode_context_parallel_size: int | None = None
    speculative_model: str | None = None
    max_num_batched_tokens: int | None = None
    mamba_ssm_cache_dtype: str | None = None
    async_scheduling: bool | None = None
    disable_hybrid_kv_cache_manager: bool | None = None  # --disable-/--enable-hybrid-kv-cache-manager
    # What the start-up says about the environment: VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE is "0"
    # where vLLM warns that it disables the hybrid manager for chunked local attention (config/vllm.py)
    chunked_local_hma: str | None = None
    kv_connector_without_hma: bool | None = None  # "Turning off hybrid kv cache manager because --kv-transfer-config"
    unknown_env: tuple[str, ...] | None = None  # "Unknown vLLM environment variable detected: NAME" (envs.py)
    args_logged: bool = False  # a non-default-args line was seen: unset flags are vLLM's defaults

    def merged(self, fallback: EngineConfig) -> EngineConfig:
        """These values, with gaps filled from ``fallback``."""
        values = {}
        for f in fields(self):
            mine = getattr(self, f.name)
            values[f.name] = getattr(fallback, f.name) if mine is None else mine
        values["args_logged"] = self.args_logged or fallback.args_logged
        return EngineConfig(**values)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class WorkerLog:
    """Everything one process logged. Memory in bytes, times in seconds; None where the log is silent."""

    name: str
    process: str
    pid: int | None
    first_line: int
    config: EngineConfig = EngineConfig()
    weights: int | None = None
    model_load_seconds: float | None = None
    attention_block_size: int | None = None
    mamba_padding_pct: float | None = None
    cudagraph_groups: tuple[CudaGraphGroup, ...] = ()
    cudagraph_estimate: int | None = None
    cudagraph_estimate_applied: bool | None = None
    available_kv_cache: int | None = None
    kv_cache_reports: tuple[KvCacheReport, ...] = ()
    num_gpu_blocks: int | None = None  # "vllm cache_config_info ... after num_gpu_blocks is: N"
    padding_layers: int | None = None  # "Add N padding layers, may waste at most P% KV cache memory"
    padding_waste_pct: float | None = None
    kv_size_multiplier: int | None = None  # "Multiplying the GPU KV cache size by the ... world_size N" (0.11-0.20)
    graph_capture_seconds: float | None = None
    graph_capture_memory: int | None = None
    cudagraph_pool_actual: int | None = None
    cudagraph_pool_estimated: int | None = None
    cudagraph_pool_difference_pct: float | None = None
    init_seconds: float | None = None
    compilation_seconds: float | None = None
    total_memory: int | None = None
    free_memory_at_start: int | None = None
    gpu_memory_utilization: float | None = None
    requested_memory: int | None = None
    peak_activation: int | None = None  # as logged: 0.33 includes the applied CUDA-graph estimate
    non_torch: int | None = None
    consumed: int | None = None  # 0.33: weights + non-torch, from mem_get_info
    cudagraph_memory: int | None = None
    kv_cache_in_use: int | None = None
    profile_torch_peak_increase: int | None = None
    profile_non_torch_increase: int | None = None
    profile_non_kv_cache: int | None = None
    lines: int = 0

    @property
    def is_engine(self) -> bool:
        return bool(self.kv_cache_reports)

    @property
    def kv_cache_tokens(self) -> int | None:
        """What the engine ends up with: the smallest report (0.11 logs one per rank)."""
        tokens = [r.tokens for r in self.kv_cache_reports if r.tokens is not None]
        return min(tokens) if tokens else None

    @property
    def max_concurrency(self) -> float | None:
        values = [r.max_concurrency for r in self.kv_cache_reports if r.max_concurrency is not None]
        return min(values) if values else None

    @property
    def max_concurrency_tokens(self) -> int | None:
        """The ``max_model_len`` of the concurrency line."""
        return next((r.max_model_len for r in self.kv_cache_reports if r.max_model_len is not None), None)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None or f.name in ("lines",):
                continue
            if f.name == "config":
                out["config"] = {k: v for k, v in value.to_dict().items() if v is not None}
            elif f.name in ("cudagraph_groups", "kv_cache_reports"):
                if value:
                    out[f.name] = [asdict(g) for g in value]
            elif isinstance(value, int) and _is_bytes_field(f.name):
                out[f"{f.name}_gib"] = value / GiB
            else:
                out[f.name] = value
        for name in ("kv_cache_tokens", "max_concurrency", "max_concurrency_tokens"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        return out


_BYTE_FIELDS = {
    "weights", "cudagraph_estimate", "available_kv_cache", "graph_capture_memory", "cudagraph_pool_actual",
    "cudagraph_pool_estimated", "total_memory", "free_memory_at_start", "requested_memory", "peak_activation",
    "non_torch", "consumed", "cudagraph_memory", "kv_cache_in_use", "profile_torch_peak_increase",
    "profile_non_torch_increase", "profile_non_kv_cache",
}


def _is_bytes_field(name: str) -> bool:
    return name in _BYTE_FIELDS
