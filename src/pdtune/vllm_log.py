"""Read a vLLM start-up log (0.11 to 0.33) into per-worker figures and the memory waterfall.

vLLM prints what it measured while starting: the weights it loaded, the CUDA graphs it profiled, the
memory left for the KV cache, the KV cache size in tokens and the concurrency it allows. Every line comes
from one process, named by the prefix vLLM puts in front of it::

    (EngineCore_DP0 pid=2201) INFO 10-14 09:12:41 [gpu_worker.py:298] Available KV cache memory: 61.41 GiB
    (Worker_TP1 pid=2342) INFO 10-14 09:12:41 [gpu_worker.py:298] Available KV cache memory: 61.39 GiB

0.11 adds the prefix by wrapping stdout, 0.33 puts it in the log format; lines without one belong to
``main``. Each process keeps its own record, so TP ranks and DP engines never mix: workers
(``Worker_TP1``, ``Worker_DP1_TP0``) report memory, engine cores (``EngineCore``, ``EngineCore_DP1``)
report the KV cache size and concurrency for the ranks they drive (in-process when TP=1).

The lines read, with the vLLM source that prints them (format strings checked in 0.11, 0.20, 0.26, 0.33):

- ``Model loading took X GiB [memory] and Y seconds`` (``gpu_model_runner.py``)
- ``Setting attention block size to N tokens ...``, ``Padding mamba page size by P% ...`` (hybrid models;
  ``model_executor/models/config.py`` in 0.11, ``platforms/interface.py`` later)
- ``Profiling CUDA graph memory: PIECEWISE=51 (largest=512), FULL=35 (largest=256)`` and
  ``Estimated CUDA graph memory: X GiB total`` (0.20+); the warning that the estimate is *not* applied
- ``Available KV cache memory: X GiB`` (``gpu_worker.py``)
- ``GPU KV cache size: N tokens`` + ``Maximum concurrency for L tokens per request: Cx`` (two lines up
  to 0.27, one line ``... tokens, Maximum concurrency ...`` from 0.28; other devices print their own name;
  0.11 prints one pair per TP rank, from that rank's memory, before every rank is cut to the smallest)
- ``Graph capturing finished in S secs, took X GiB`` and ``CUDA graph pool memory: X GiB (actual), Y GiB
  (estimated), difference: ...`` (0.20+)
- ``init engine (profile, create kv cache, warmup model) took S seconds|s`` (``v1/engine/core.py``)
- ``Free memory on device (F/T GiB) on startup. Desired GPU memory utilization is (U, R GiB). Actual
  usage is ...`` (INFO from 0.26, DEBUG before): the GPU's total memory and the split of the overhead
- DEBUG ``Memory profiling takes ...`` and ``worker init memory snapshot: ...total_memory=...``
- the config banner ``Initializing a V1 LLM engine (vX) with config: model=..., ...``, ``non-default args:
  {...}``, ``vLLM API server version X`` / ``vLLM server version X, serving model M``

Figures are GiB rounded to two decimals as vLLM prints them; they become bytes here and stay approximate
to that rounding (about 5 MiB).
"""

from __future__ import annotations

import ast
import json
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from pdtune.errors import InputError
from pdtune.memory import Waterfall
from pdtune.units import GiB, from_gib

MAIN = "main"

#: vLLM's default ``--gpu-memory-utilization`` (0.11-0.33), used only when the log's non-default-args
#: line shows the user did not set it.
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_HEADER = re.compile(
    r"(?:\((?P<proc>[A-Za-z_][\w.\-]*) pid=(?P<pid>\d+)[^)]*\)\s+)?"
    r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)?\s+"
    r"\[[^\]\s]+:\d+\]\s?(?P<msg>.*)$"
)
_N = r"-?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?"


def _num(text: str) -> float:
    value = float(text.replace(",", ""))
    if not math.isfinite(value):
        raise ValueError(f"not a finite number: {text}")
    return value


def _int(text: str) -> int:
    return int(_num(text))


# ------------------------------------------------------------------------------------ records


@dataclass(frozen=True)
class CudaGraphGroup:
    """One entry of ``Profiling CUDA graph memory``: ``count`` graphs of ``mode``, the largest one first."""

    mode: str
    count: int
    largest: int


@dataclass(frozen=True)
class KvCacheReport:
    """One ``KV cache size`` report. vLLM 0.11 prints one per rank, from that rank's memory, before it
    shrinks every rank to the smallest; later versions print the shrunk size once."""

    tokens: int | None
    max_concurrency: float | None
    max_model_len: int | None
    device: str | None = None


@dataclass(frozen=True)
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


@dataclass(frozen=True)
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


# ------------------------------------------------------------------------------------ line patterns

_Handler = Callable[[dict[str, Any], "re.Match[str]"], None]
_RULES: list[tuple[str, re.Pattern[str], _Handler]] = []


def _rule(keyword: str, pattern: str) -> Callable[[_Handler], _Handler]:
    def register(fn: _Handler) -> _Handler:
        _RULES.append((keyword, re.compile(pattern), fn))
        return fn

    return register


@_rule("Model loading took", rf"Model loading took (?P<gib>{_N}) GiB(?: memory)? and (?P<sec>{_N}) seconds?")
def _model_loading(rec: dict[str, Any], m: re.Match[str]) -> None:
    rec["weights"] = from_gib(_num(m["gib"]))
    rec["model_load_seconds"] = _num(m["sec"])


@_rule("Setting attention block size", r"Setting attention block size to (?P<bs>\d+) tokens")
def _block_size(rec: dict[str, Any], m: re.Match[str]) -> None:
    rec["attention_block_size"] = int(m["bs"])


@_rule("Padding mamba page size", rf"Padding mamba page size by (?P<pct>{_N})%")
def _mamba_padding(rec: dict[str, Any], m: re.Match[str]) -> None:
    rec["mamba_padding_pct"] = _num(m["pct"])


_GROUP = re.compile(r"(?P<mode>[A-Z][A-Z_]*)=(?P<n>\d+) \(largest=(?P<largest>\d+)\)")


@_rule("Profiling CUDA graph memory", r"Profiling CUDA graph memory: (?P<groups>.*)")
def _cg_profile(rec: dict[str, Any], m: re.Match[str]) -> None:
    rec["cudagraph_groups"] = tuple(
        CudaGraphGroup(g["mode"], int(g["n"]), int(g["largest"])) for g in _GROUP.finditer(m["groups"])
    )


@_rule("Estimated CUDA graph memory", rf"Estimated CUDA graph memory: (?P<gib>{_N}) GiB total")
def _cg_estimate(rec: dict[str, Any], m: re.Match[str]) -> None:
    rec["cudagraph_estimate"] = from_gib(_num(m["gib"]))


@_rule("CUDA graph memory profiling is enabled",
       rf"CUDA graph memory profiling is enabled.*?--gpu-memory-utilization=(?P<util>{_N})")
def _cg_enabled(rec: dict[str, Any], m: re.Match[str]) -> None:
    rec["cudagraph_estimate_applied"] = True
    rec["gpu_memory_utilization"] = _num(m["util"])


@_rule("CUDA graph memory profiling is disabled",
       rf"CUDA graph memory profiling is disabled.*?--gpu-memory-utilization from (?P<util>{_N})")
def _cg_disabled(rec: dict[str, Any], m: re.Match[str]) -> None:
    rec["cudagraph_estimate_applied"] = False
    rec["gpu_memory_utilization"] = _num(m["util"])


@_rule("Available KV cache memory", rf"Available KV cache memory: (?P<gib>{_N}) GiB")
def _available(rec: dict[str, Any], m: re.Match[str]) -> None:
    rec["available_kv_cache"] = from_gib(_num(m["gib"]))


@_rule("KV cache size:",
       rf"(?:(?P<dev>[A-Za-z][\w+ ]*?) )?KV cache size: (?P<tokens>{_N}) tokens"
       rf"(?:, Maximum concurrency for (?P<len>{_N}) tokens per request: (?P<conc>{_N})x)?")
def _kv_size(rec: dict[str, Any], m: re.Match[str]) -> None:
    report: dict[str, Any] = {"tokens": _int(m["tokens"]), "device": (m["dev"] or "").strip() or None}
    if m["conc"] is not None:
        report["max_model_len"], report["max_concurrency"] = _int(m["len"]), _num(m["conc"])
    rec.setdefault("kv_reports", []).append(report)


@_rule("Maximum concurrency for",
       rf"^Maximum concurrency for (?P<len>{_N}) tokens per request: (?P<conc>{_N})x")
def _max_concurrency(rec: dict[str, Any], m: re.Match[str]) -> None:
    reports = rec.setdefault("kv_reports", [])
    if not reports or "max_concurrency" in reports[-1]:
        reports.append({"tokens": None, "device": None})
    reports[-1]["max_model_len"], reports[-1]["max_concurrency"] = _int(m["len"]), _num(m["conc"])


@_rule("Graph capturing finished", rf"Graph capturing finished in (?P<sec>{_N}) secs?, took (?P<gib>{_N}) GiB")
def _capture(rec: dict[str, Any], m: re.Match[str]) -> None:
    rec["graph_capture_seconds"] = _num(m["sec"])
    rec["graph_capture_memory"] = max(from_gib(_num(m["gib"])), 0)


@_rule("CUDA graph pool memory",
       rf"CUDA graph pool memory: (?P<actual>{_N}) GiB \(actual\), (?P<est>{_N}) GiB \(estimated\), "
       rf"difference: (?P<diff>{_N}) GiB \((?P<pct>{_N})%\)")
def _pool(rec: dict[str, Any], m: re.Match[str]) -> None:
    rec["cudagraph_pool_actual"] = max(from_gib(_num(m["actual"])), 0)
    rec["cudagraph_pool_estimated"] = max(from_gib(_num(m["est"])), 0)
    rec["cudagraph_pool_difference_pct"] = _num(m["pct"])


@_rule("init engine", rf"init engine \(profile, create kv cache, warmup model\) took (?P<sec>{_N}) (?:seconds|s)"
                      rf"(?: \(compilation: (?P<comp>{_N}) s)?")
def _init(rec: dict[str, Any], m: re.Match[str]) -> None:
    rec["init_seconds"] = _num(m["sec"])
    if m["comp"] is not None:
        rec["compilation_seconds"] = _num(m["comp"])


@_rule("Free memory on device",
       rf"Free memory on device \((?P<free>{_N})/(?P<total>{_N}) GiB\) on startup\. Desired GPU memory "
       rf"utilization is \((?P<util>{_N}), (?P<req>{_N}) GiB\)\. Actual usage is (?P<rest>.*)")
def _free_memory(rec: dict[str, Any], m: re.Match[str]) -> None:
    rec["free_memory_at_start"] = from_gib(_num(m["free"]))
    rec["total_memory"] = from_gib(_num(m["total"]))
    rec["gpu_memory_utilization"] = _num(m["util"])
    rec["requested_memory"] = from_gib(_num(m["req"]))
    rest = m["rest"]
    parts = {
        "weights": rf"(?P<v>{_N}) GiB for weight,",
        "consumed": rf"(?P<v>{_N}) GiB for consumed memory",
        "peak_activation": rf"(?P<v>{_N}) GiB\s+for peak activation",
        "non_torch": rf"(?P<v>{_N}) GiB\s+for non-torch memory",
        "cudagraph_memory": rf"(?P<v>{_N}) GiB for CUDAGraph memory",
        "kv_cache_in_use": rf"kv cache memory in use is (?P<v>{_N}) GiB",
    }
    for key, pattern in parts.items():
        hit = re.search(pattern, rest)
        if hit:
            value = from_gib(_num(hit["v"]))
            if key == "weights":
                rec.setdefault("weights", value)
            else:
                rec[key] = value


@_rule("Memory profiling takes", r"Memory profiling takes .*")
def _profile_result(rec: dict[str, Any], m: re.Match[str]) -> None:
    text = m.group(0)
    for key, label in (("profile_non_kv_cache", "Total non KV cache memory"),
                       ("profile_torch_peak_increase", "torch peak memory increase"),
                       ("profile_non_torch_increase", "non-torch forward increase memory"),
                       ("consumed", r"total consumed \(from mem_get_info\)")):
        hit = re.search(rf"{label}: (?P<v>{_N}) ?GiB", text)
        if hit:
            rec[key] = from_gib(_num(hit["v"]))
    hit = re.search(rf"weights memory: (?P<v>{_N}) ?GiB", text)
    if hit:
        rec.setdefault("weights", from_gib(_num(hit["v"])))


@_rule("memory snapshot", rf"memory snapshot: .*?total_memory=(?P<total>{_N}) ?GiB")
def _snapshot(rec: dict[str, Any], m: re.Match[str]) -> None:
    rec.setdefault("total_memory", from_gib(_num(m["total"])))


@_rule("Initializing a V1 LLM engine", r"Initializing a V1 LLM engine \(v(?P<version>[^)\s]+)\) with config: (?P<cfg>.*)")
def _banner(rec: dict[str, Any], m: re.Match[str]) -> None:
    cfg = m["cfg"]
    conf = rec["config"]
    conf["version"] = m["version"]

    def grab(pattern: str) -> str | None:
        hit = re.search(pattern, cfg)
        return hit.group(1) if hit else None

    conf["model"] = grab(r"^model='([^']*)'") or conf.get("model")
    for key, name in (("max_model_len", "max_seq_len"), ("tensor_parallel_size", "tensor_parallel_size"),
                      ("data_parallel_size", "data_parallel_size"),
                      ("pipeline_parallel_size", "pipeline_parallel_size")):
        value = grab(rf"(?:^|, ){name}=(\d+)")
        if value is not None:
            conf[key] = int(value)
    for key in ("kv_cache_dtype", "quantization"):
        value = grab(rf"(?:^|, ){key}=([\w.]+)")
        if value is not None and value != "None":
            conf[key] = value
    value = grab(r"(?:^|, )dtype=(?:torch\.)?([\w]+)")
    if value is not None:
        conf["dtype"] = value
    caching = grab(r"(?:^|, )enable_prefix_caching=(True|False)")
    if caching is not None:
        conf["enable_prefix_caching"] = caching == "True"
    spec = grab(r"speculative_config=(SpeculativeConfig\([^)]*\)|None)")
    if spec == "None":
        conf["num_speculative_tokens"] = 0
    elif spec:
        tokens = re.search(r"num_spec_tokens=(\d+)", spec)
        method = re.search(r"method='([^']*)'", spec)
        if tokens:
            conf["num_speculative_tokens"] = int(tokens.group(1))
        if method:
            conf["speculative_method"] = method.group(1)


@_rule("non-default args", r"non-default args: (?P<args>\{.*\})\s*$")
def _non_default_args(rec: dict[str, Any], m: re.Match[str]) -> None:
    conf = rec["config"]
    conf["args_logged"] = True
    args = _literal_dict(m["args"])
    model = args.get("model") or args.get("model_tag")
    if isinstance(model, str):
        conf["model"] = model
    for key in ("tensor_parallel_size", "data_parallel_size", "pipeline_parallel_size", "max_model_len",
                "block_size"):
        if isinstance(args.get(key), int) and not isinstance(args.get(key), bool):
            conf[key] = args[key]
    for key in ("kv_cache_dtype", "dtype", "quantization"):
        if isinstance(args.get(key), str):
            conf[key] = args[key]
    if isinstance(args.get("gpu_memory_utilization"), (int, float)):
        conf["gpu_memory_utilization"] = float(args["gpu_memory_utilization"])
    if isinstance(args.get("enable_prefix_caching"), bool):
        conf["enable_prefix_caching"] = args["enable_prefix_caching"]
    spec = args.get("speculative_config")
    if isinstance(spec, str):
        try:
            spec = json.loads(spec)
        except json.JSONDecodeError:
            spec = None
    if isinstance(spec, dict):
        if isinstance(spec.get("num_speculative_tokens"), int):
            conf["num_speculative_tokens"] = spec["num_speculative_tokens"]
        if isinstance(spec.get("method"), str):
            conf["speculative_method"] = spec["method"]


def _literal_dict(text: str) -> dict[str, Any]:
    """A logged ``dict`` repr; when it holds non-literals, the simple ``'key': value`` pairs in it."""
    try:
        value = ast.literal_eval(text)
        if isinstance(value, dict):
            return {str(k): v for k, v in value.items()}
    except (ValueError, SyntaxError, RecursionError, MemoryError, TypeError):
        pass
    out: dict[str, Any] = {}
    for hit in re.finditer(r"'(?P<key>\w+)': (?P<val>'[^']*'|[\w.+-]+)", text):
        raw = hit["val"]
        try:
            out[hit["key"]] = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            out[hit["key"]] = raw
    return out


@_rule("server version", r"vLLM (?:API )?server version (?P<version>\S+?)(?:,? serving model (?P<model>\S+))?$")
def _server_version(rec: dict[str, Any], m: re.Match[str]) -> None:
    rec["config"]["version"] = m["version"]
    if m["model"]:
        rec["config"].setdefault("model", m["model"])


@_rule("█", r"█\s+(?P<key>version|model)\s+(?P<value>\S+)\s*$")
def _logo(rec: dict[str, Any], m: re.Match[str]) -> None:
    rec["config"][m["key"]] = m["value"]


# ------------------------------------------------------------------------------------ the parse


@dataclass(frozen=True)
class KvCheck:
    """One engine's logged KV cache size beside what :mod:`pdtune.state` predicts from its memory."""

    engine: str
    worker: str  # the rank with the least available memory: vLLM sizes every rank's cache by it
    available_kv_cache: int
    max_model_len: int
    num_blocks: int
    logged_kv_cache_tokens: int | None
    predicted_kv_cache_tokens: int
    logged_max_concurrency: float | None
    predicted_max_concurrency: float
    settings: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    @property
    def tokens_difference(self) -> int | None:
        if self.logged_kv_cache_tokens is None:
            return None
        return self.predicted_kv_cache_tokens - self.logged_kv_cache_tokens

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["available_kv_cache_gib"] = out.pop("available_kv_cache") / GiB
        out["tokens_difference"] = self.tokens_difference
        out["notes"] = list(self.notes)
        return out


@dataclass(frozen=True)
class VllmLog:
    """A parsed log: one :class:`WorkerLog` per process, in order of first appearance."""

    path: str
    workers: tuple[WorkerLog, ...]
    config: EngineConfig

    @property
    def names(self) -> list[str]:
        return [w.name for w in self.workers]

    def worker(self, name: str) -> WorkerLog:
        for w in self.workers:
            if w.name == name:
                return w
        raise InputError(self.path, "worker", f"no process {name!r} in the log (have: {', '.join(self.names)})")

    @property
    def engines(self) -> list[WorkerLog]:
        """Processes that logged a KV cache size (engine cores)."""
        return [w for w in self.workers if w.is_engine]

    @property
    def memory_workers(self) -> list[WorkerLog]:
        """Processes that profiled GPU memory (workers, or engine cores running their worker in-process)."""
        return [w for w in self.workers if w.available_kv_cache is not None]

    def engine_of(self, worker: str | WorkerLog) -> WorkerLog | None:
        w = self.worker(worker) if isinstance(worker, str) else worker
        if w.is_engine:
            return w
        dp = _dp_index(w.name)
        engines = self.engines
        matches = [e for e in engines if _dp_index(e.name) == dp]
        if len(matches) == 1:
            return matches[0]
        return engines[0] if len(engines) == 1 and dp in (None, 0) else None

    def workers_of(self, engine: str | WorkerLog) -> list[WorkerLog]:
        e = self.worker(engine) if isinstance(engine, str) else engine
        return [w for w in self.memory_workers if (eng := self.engine_of(w)) is not None and eng.name == e.name]

    def config_for(self, worker: str | WorkerLog) -> EngineConfig:
        """The worker's own config lines, then its engine's, then whatever the log says globally."""
        w = self.worker(worker) if isinstance(worker, str) else worker
        conf = w.config
        engine = self.engine_of(w)
        if engine is not None and engine is not w:
            conf = conf.merged(engine.config)
        return conf.merged(self.config)

    def waterfall(
        self,
        worker: str,
        *,
        total: int | None = None,
        gpu_memory_utilization: float | None = None,
    ) -> Waterfall:
        """The worker's memory as a :class:`~pdtune.memory.Waterfall`.

        ``total`` and ``gpu_memory_utilization`` fill in what the log does not say (logs before 0.26 print
        the GPU's total memory only at DEBUG level). When the log does not split the activation peak from
        non-torch memory, their sum (what is left once weights, the CUDA-graph estimate and the KV cache are
        taken from the requested memory) goes to ``activation_peak``, ``non_torch`` is 0, and ``source``
        says so.
        """
        w = self.worker(worker)
        label = f"{self.path} [{w.name}]"
        conf = self.config_for(w)
        total = w.total_memory if total is None else total
        if total is None:
            raise InputError(label, "total memory",
                             "the log does not give the GPU's total memory ('Free memory on device' is INFO from "
                             "vLLM 0.26, DEBUG before): pass it")
        util = gpu_memory_utilization or w.gpu_memory_utilization or conf.gpu_memory_utilization
        notes = [f"vLLM {conf.version or '?'} log, GiB as printed (0.01 GiB)"]
        if util is None:
            if not conf.args_logged:
                raise InputError(label, "gpu_memory_utilization", "not in the log: pass it")
            util = DEFAULT_GPU_MEMORY_UTILIZATION
            notes.append(f"gpu_memory_utilization not set: vLLM's default {util}")
        if w.weights is None:
            raise InputError(label, "Model loading took", "no weights line for this process")
        estimate = 0
        if w.cudagraph_estimate is not None and w.cudagraph_estimate_applied is not False:
            estimate = w.cudagraph_estimate
        version = _short_version(conf.version) or "0.26"
        base = Waterfall(total=total, gpu_memory_utilization=util, weights=w.weights, activation_peak=0,
                         non_torch=0, cudagraph_estimate=estimate, source=label, version=version)
        if w.consumed is not None and w.peak_activation is not None:
            # 0.33: "consumed" is weights + non-torch; the logged peak includes the applied graph estimate.
            activation, non_torch = w.peak_activation - estimate, w.consumed - w.weights
            notes.append("non-torch = consumed - weights; activation = logged peak - graph estimate")
        elif w.peak_activation is not None and w.non_torch is not None:
            activation, non_torch = w.peak_activation, w.non_torch
        elif w.profile_torch_peak_increase is not None and w.profile_non_torch_increase is not None:
            activation, non_torch = w.profile_torch_peak_increase, w.profile_non_torch_increase
        else:
            if w.available_kv_cache is None:
                raise InputError(label, "Available KV cache memory", "no line for this process")
            activation = base.requested - w.weights - estimate - w.available_kv_cache
            non_torch = 0
            notes.append("activation peak and non-torch not split in the log: activation_peak holds both")
        if activation < 0 or non_torch < 0:
            notes.append("a negative part from rounding was set to 0")
        source = f"{label}: " + "; ".join(notes)
        return replace(base, activation_peak=max(activation, 0), non_torch=max(non_torch, 0), source=source)

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "config": {k: v for k, v in self.config.to_dict().items() if v is not None},
            "workers": {w.name: w.to_dict() for w in self.workers},
        }


def _dp_index(name: str) -> int | None:
    hit = re.search(r"_DP(\d+)", name)
    return int(hit.group(1)) if hit else None


def _short_version(version: str | None) -> str | None:
    if not version:
        return None
    hit = re.match(r"v?(\d+)\.(\d+)", version)
    return f"{hit.group(1)}.{hit.group(2)}" if hit else None


class _Builder:
    def __init__(self) -> None:
        self.records: dict[tuple[str, int | None], dict[str, Any]] = {}
        self.global_config: dict[str, Any] = {}

    def record(self, process: str, pid: int | None, lineno: int) -> dict[str, Any]:
        key = (process, pid)
        rec = self.records.get(key)
        if rec is None:
            rec = {"process": process, "pid": pid, "first_line": lineno, "config": {}, "lines": 0}
            self.records[key] = rec
        return rec

    def feed(self, lines: Iterable[str]) -> None:
        for lineno, raw in enumerate(lines, start=1):
            line = _ANSI.sub("", raw).rstrip("\r\n")
            header = _HEADER.search(line)
            if header is None:
                continue
            msg = header["msg"]
            for keyword, pattern, handler in _RULES:
                if keyword in msg:
                    hit = pattern.search(msg)
                    if hit is None:
                        continue
                    pid = int(header["pid"]) if header["pid"] else None
                    key = (header["proc"] or MAIN, pid)
                    fresh = key not in self.records
                    rec = self.record(*key, lineno)
                    try:
                        handler(rec, hit)
                    except (ValueError, OverflowError):
                        if fresh:  # a number vLLM never prints (1e999): not a line of ours
                            del self.records[key]
                        break
                    rec["lines"] += 1
                    break

    def build(self, path: str) -> VllmLog:
        by_name: dict[str, list[dict[str, Any]]] = {}
        for rec in self.records.values():
            by_name.setdefault(rec["process"], []).append(rec)
        workers: list[WorkerLog] = []
        merged: EngineConfig = EngineConfig()
        for rec in sorted(self.records.values(), key=lambda r: r["first_line"]):
            same = by_name[rec["process"]]
            name = rec["process"] if len(same) == 1 else f"{rec['process']} pid={rec['pid']}"
            skip = ("process", "pid", "first_line", "config", "lines", "kv_reports")
            values = {k: v for k, v in rec.items() if k not in skip}
            values["kv_cache_reports"] = tuple(
                KvCacheReport(r.get("tokens"), r.get("max_concurrency"), r.get("max_model_len"), r.get("device"))
                for r in rec.get("kv_reports", [])
            )
            config = EngineConfig(**rec["config"])
            merged = merged.merged(config)
            workers.append(WorkerLog(name=name, process=rec["process"], pid=rec["pid"],
                                     first_line=rec["first_line"], config=config, lines=rec["lines"], **values))
        return VllmLog(path=path, workers=tuple(workers), config=merged)


def parse_log_text(text: str, source: str = "<log>", *, require_kv: bool = True) -> VllmLog:
    """Parse log text; see :func:`parse_log`."""
    builder = _Builder()
    builder.feed(text.splitlines())
    return _finish(builder, source, require_kv)


def parse_log(path: str | Path, *, require_kv: bool = True) -> VllmLog:
    """Parse a vLLM start-up log file.

    Raises :class:`InputError` for a file that is not a vLLM log, and (with ``require_kv``, the default)
    for one in which no process reached the KV cache lines, e.g. an engine that died while loading.
    """
    p = Path(path)
    try:
        with p.open("rb") as fh:
            head = fh.read(8192)
    except OSError as exc:
        raise InputError(p, "file", f"unreadable: {exc.strerror or exc}") from None
    if b"\x00" in head:
        raise InputError(p, "file", "binary data, not a vLLM log")
    builder = _Builder()
    with p.open("r", encoding="utf-8", errors="replace") as fh:
        builder.feed(fh)
    return _finish(builder, str(p), require_kv)


def _finish(builder: _Builder, source: str, require_kv: bool) -> VllmLog:
    if not builder.records:
        raise InputError(source, "log", "no vLLM start-up lines found (expected lines like "
                                        "'INFO 10-14 09:12:41 [gpu_worker.py:298] Available KV cache memory: ...')")
    log = builder.build(source)
    if require_kv and not any(w.available_kv_cache is not None or w.is_engine for w in log.workers):
        raise InputError(source, "KV cache size", "no 'Available KV cache memory' or 'KV cache size' line: "
                                                  "the engine did not finish starting")
    return log


# ------------------------------------------------------------------------------------ cross-check


def cross_check(log: VllmLog, model: str, *, vllm: str | None = None) -> list[KvCheck]:
    """For every engine, the KV cache tokens and max concurrency that :mod:`pdtune.state` predicts from the
    available memory the log reports, beside the logged ones.

    vLLM sizes each engine's cache from the smallest available memory among its ranks, so that is the
    input. The settings (TP, KV dtype, max_model_len, speculative tokens, prefix caching, block size) are
    the log's own.
    """
    from pdtune.model import load_model
    from pdtune.state import plan_state

    spec = load_model(model)
    checks: list[KvCheck] = []
    engines = log.engines
    if not engines:
        raise InputError(log.path, "KV cache size", "no engine logged its KV cache size: nothing to check")
    for engine in engines:
        ranks = log.workers_of(engine)
        if not ranks:
            raise InputError(log.path, "Available KV cache memory", f"no rank of {engine.name} logged it")
        rank = min(ranks, key=lambda w: w.available_kv_cache or 0)
        conf = log.config_for(engine)
        notes: list[str] = []
        version = vllm or _short_version(conf.version)
        if version is None:
            raise InputError(log.path, "version", "the log does not name the vLLM version: pass --vllm")
        max_model_len = engine.max_concurrency_tokens or conf.max_model_len
        if max_model_len is None:
            raise InputError(log.path, "max_model_len", "not in the log (banner max_seq_len or the concurrency line)")
        prefix_caching = conf.enable_prefix_caching
        if prefix_caching is None:
            prefix_caching = True
            notes.append("prefix caching not in the log: vLLM's default (on) assumed")
        tp = conf.tensor_parallel_size or 1
        kv_dtype = conf.kv_cache_dtype or "auto"
        spec_tokens = conf.num_speculative_tokens or 0
        plan = plan_state(spec, tp=tp, kv_cache_dtype=kv_dtype, max_model_len=max_model_len,
                          num_speculative_tokens=spec_tokens, vllm=version, prefix_caching=prefix_caching,
                          block_size=conf.block_size)
        settings: dict[str, Any] = {
            "tp": tp, "kv_cache_dtype": kv_dtype, "max_model_len": max_model_len,
            "num_speculative_tokens": spec_tokens, "vllm": version, "prefix_caching": prefix_caching,
            "block_size": conf.block_size,
        }
        cap = plan.capacity(rank.available_kv_cache or 0)
        checks.append(KvCheck(
            engine=engine.name,
            worker=rank.name,
            available_kv_cache=rank.available_kv_cache or 0,
            max_model_len=max_model_len,
            num_blocks=cap.num_blocks,
            logged_kv_cache_tokens=engine.kv_cache_tokens,
            predicted_kv_cache_tokens=cap.kv_cache_tokens,
            logged_max_concurrency=engine.max_concurrency,
            predicted_max_concurrency=cap.max_concurrency,
            settings=settings,
            notes=tuple(notes),
        ))
    return checks
