"""The lines ``pdtune log`` reads: one anchored pattern per vLLM message and the handler that records it.

Every pattern starts with a literal run of the message and bounds its numbers, so a search costs time linear
in the line's length; :data:`RULES` is tried only when its keyword occurs in the message (``str`` search).
"""

from __future__ import annotations

import ast
import json
import math
import re
from collections.abc import Callable
from typing import Any

from pdtune.units import from_gib
from pdtune.vllm_log.records import CudaGraphGroup, open_kv_report

#: A number as vLLM prints it (thousands commas, decimals, exponent); bounded so no search backtracks far, and
#: never starting inside another number (``0.21410000044852495 GiB`` is not ``21410000044852495 GiB``). Python
#: prints up to 17 significant digits, so 24 decimals are room enough.
_N = r"(?<![\d.])-?\d[\d,]{0,24}(?:\.\d{1,24})?(?:[eE][-+]?\d{1,4})?"


def _num(text: str) -> float:
    value = float(text.replace(",", ""))
    if not math.isfinite(value):
        raise ValueError(f"not a finite number: {text}")
    return value


def _int(text: str) -> int:
    return int(_num(text))


def _gib(text: str) -> int:
    """A GiB figure of the log as bytes; a negative one is kept (vLLM prints a deficit before it refuses to
    start), one too large for any GPU is not a line of ours (``from_gib`` raises a ``ValueError``)."""
    return from_gib(_num(text), "log", "GiB", negative=True)


_Handler = Callable[[dict[str, Any], "re.Match[str]"], None]
RULES: list[tuple[str, re.Pattern[str], _Handler]] = []


def _rule(keyword: str, pattern: str) -> Callable[[_Handler], _Handler]:
    def register(fn: _Handler) -> _Handler:
        RULES.append((keyword, re.compile(pattern), fn))
        return fn

    return register


@_rule("Model loading took", rf"Model loading took (?P<gib>{_N}) GiB(?: memory)? and (?P<sec>{_N}) seconds?")
def _model_loading(rec: dict[str, Any], m: re.Match[str]) -> None:
    rec["weights"] = _gib(m["gib"])
    rec["model_load_seconds"] = _num(m["sec"])


@_rule("Setting attention block size", r"Setting attention block size to (?P<bs>\d+) tokens")
def _block_size(rec: dict[str, Any], m: re.Match[str]) -> None:
    rec["attention_block_size"] = int(m["bs"])


@_rule("Padding mamba page size", rf"Padding mamba page size by (?P<pct>{_N})%")
def _mamba_padding(rec: dict[str, Any], m: re.Match[str]) -> None:
    rec["mamba_padding_pct"] = _num(m["pct"])


# A mode name starts after a non-capital (lookbehind), so a run of capitals is tried once, not at every letter.
_GROUP = re.compile(r"(?<![A-Z_])(?P<mode>[A-Z][A-Z_]{0,40})=(?P<n>\d{1,9}) \(largest=(?P<largest>\d{1,9})\)")


@_rule("Profiling CUDA graph memory", r"Profiling CUDA graph memory: (?P<groups>.*)")
def _cg_profile(rec: dict[str, Any], m: re.Match[str]) -> None:
    rec["cudagraph_groups"] = tuple(
        CudaGraphGroup(g["mode"], int(g["n"]), int(g["largest"])) for g in _GROUP.finditer(m["groups"])
    )


@_rule("Estimated CUDA graph memory", rf"Estimated CUDA graph memory: (?P<gib>{_N}) GiB total")
def _cg_estimate(rec: dict[str, Any], m: re.Match[str]) -> None:
    rec["cudagraph_estimate"] = _gib(m["gib"])


@_rule("CUDA graph memory profiling is enabled",
       rf"CUDA graph memory profiling is enabled.{{0,400}}?--gpu-memory-utilization=(?P<util>{_N})")
def _cg_enabled(rec: dict[str, Any], m: re.Match[str]) -> None:
    rec["cudagraph_estimate_applied"] = True
    rec["gpu_memory_utilization"] = _num(m["util"])


@_rule("CUDA graph memory profiling is disabled",
       rf"CUDA graph memory profiling is disabled.{{0,400}}?--gpu-memory-utilization from (?P<util>{_N})")
def _cg_disabled(rec: dict[str, Any], m: re.Match[str]) -> None:
    rec["cudagraph_estimate_applied"] = False
    rec["gpu_memory_utilization"] = _num(m["util"])


@_rule("Available KV cache memory", rf"Available KV cache memory: (?P<gib>{_N}) GiB")
def _available(rec: dict[str, Any], m: re.Match[str]) -> None:
    rec["available_kv_cache"] = _gib(m["gib"])


@_rule("KV cache size:", rf"KV cache size: (?P<tokens>{_N}) tokens"
                          rf"(?:, Maximum concurrency for (?P<len>{_N}) tokens per request: (?P<conc>{_N})x)?")
def _kv_size(rec: dict[str, Any], m: re.Match[str]) -> None:
    # The device name in front ("GPU", "XPU", "GPU + host") is read from the few characters before the match,
    # not by the pattern: a leading lazy group would make the search quadratic on long lines.
    device = _DEVICE.fullmatch(m.string[max(0, m.start() - 40):m.start()].lstrip())
    report: dict[str, Any] = {"tokens": _int(m["tokens"]), "device": device[1] if device else None}
    if m["conc"] is not None:
        report["max_model_len"], report["max_concurrency"] = _int(m["len"]), _num(m["conc"])
    open_kv_report(rec, report)


_DEVICE = re.compile(r"([A-Za-z][\w+]*(?: [\w+]+)*) ")


@_rule("Maximum concurrency for",
       rf"^Maximum concurrency for (?P<len>{_N}) tokens per request: (?P<conc>{_N})x")
def _max_concurrency(rec: dict[str, Any], m: re.Match[str]) -> None:
    report = open_kv_report(rec)
    report["max_model_len"], report["max_concurrency"] = _int(m["len"]), _num(m["conc"])


@_rule("Graph capturing finished", rf"Graph capturing finished in (?P<sec>{_N}) secs?, took (?P<gib>{_N}) GiB")
def _capture(rec: dict[str, Any], m: re.Match[str]) -> None:
    rec["graph_capture_seconds"] = _num(m["sec"])
    rec["graph_capture_memory"] = max(_gib(m["gib"]), 0)


@_rule("CUDA graph pool memory",
       rf"CUDA graph pool memory: (?P<actual>{_N}) GiB \(actual\), (?P<est>{_N}) GiB \(estimated\), "
       rf"difference: (?P<diff>{_N}) GiB \((?P<pct>{_N})%\)")
def _pool(rec: dict[str, Any], m: re.Match[str]) -> None:
    rec["cudagraph_pool_actual"] = max(_gib(m["actual"]), 0)
    rec["cudagraph_pool_estimated"] = max(_gib(m["est"]), 0)
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
    rec["free_memory_at_start"] = _gib(m["free"])
    rec["total_memory"] = _gib(m["total"])
    rec["gpu_memory_utilization"] = _num(m["util"])
    rec["requested_memory"] = _gib(m["req"])
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
            value = _gib(hit["v"])
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
            rec[key] = _gib(hit["v"])
    hit = re.search(rf"weights memory: (?P<v>{_N}) ?GiB", text)
    if hit:
        rec.setdefault("weights", _gib(hit["v"]))


@_rule("memory snapshot", rf"memory snapshot: .{{0,2000}}?total_memory=(?P<total>{_N}) ?GiB")
def _snapshot(rec: dict[str, Any], m: re.Match[str]) -> None:
    rec.setdefault("total_memory", _gib(m["total"]))


@_rule("Initializing a V1 LLM engine",
       r"Initializing a V1 LLM engine \(v(?P<version>[^)\s]{1,80})\) with config: (?P<cfg>.*)")
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
                      ("pipeline_parallel_size", "pipeline_parallel_size"),
                      ("decode_context_parallel_size", "decode_context_parallel_size")):
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
    spec = grab(r"speculative_config=(SpeculativeConfig\([^)]{0,600}\)|None)")  # bounded: linear on any line
    if spec == "None":
        conf["num_speculative_tokens"] = 0
    elif spec:
        tokens = re.search(r"num_spec_tokens=(\d+)", spec)
        method = re.search(r"method='([^']*)'", spec)
        draft = re.search(r"model='([^']*)'", spec)
        if tokens:
            conf["num_speculative_tokens"] = int(tokens.group(1))
        if method:
            conf["speculative_method"] = method.group(1)
        if draft:
            conf["speculative_model"] = draft.group(1)


@_rule("non-default args", r"non-default args: (?P<args>\{.*)")  # to the end at once: no backtracking
def _non_default_args(rec: dict[str, Any], m: re.Match[str]) -> None:
    if not m["args"].rstrip().endswith("}"):
        raise ValueError("not a logged dict")  # not a line of ours
    conf = rec["config"]
    conf["args_logged"] = True
    args = _literal_dict(m["args"].rstrip())
    model = args.get("model") or args.get("model_tag")
    if isinstance(model, str):
        conf["model"] = model
    for key in ("tensor_parallel_size", "data_parallel_size", "pipeline_parallel_size", "max_model_len",
                "block_size", "decode_context_parallel_size", "max_num_batched_tokens"):
        if isinstance(args.get(key), int) and not isinstance(args.get(key), bool):
            conf[key] = args[key]
    for key in ("kv_cache_dtype", "dtype", "quantization", "mamba_ssm_cache_dtype"):
        if isinstance(args.get(key), str):
            conf[key] = args[key]
    if isinstance(args.get("async_scheduling"), bool):
        conf["async_scheduling"] = args["async_scheduling"]
    if isinstance(args.get("disable_hybrid_kv_cache_manager"), bool):
        conf["disable_hybrid_kv_cache_manager"] = args["disable_hybrid_kv_cache_manager"]
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
        if isinstance(spec.get("model"), str):
            conf["speculative_model"] = spec["model"]


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


@_rule("server version",
       r"vLLM (?:API )?server version (?P<version>\S{1,80}?)(?:,? serving model (?P<model>\S{1,400}))?$")
def _server_version(rec: dict[str, Any], m: re.Match[str]) -> None:
    rec["config"]["version"] = m["version"]
    if m["model"]:
        rec["config"].setdefault("model", m["model"])


@_rule("█", r"█\s+(?P<key>version|model)\s+(?P<value>\S+)\s*$")
def _logo(rec: dict[str, Any], m: re.Match[str]) -> None:
    rec["config"][m["key"]] = m["value"]


@_rule("after num_gpu_blocks is", rf"after num_gpu_blocks is: (?P<n>{_N})")
def _num_gpu_blocks(rec: dict[str, Any], m: re.Match[str]) -> None:
    rec["num_gpu_blocks"] = _int(m["n"])  # v1/metrics/loggers.py, log_engine_initialized (INFO in 0.11, DEBUG after)


@_rule("padding layers", rf"Add (?P<n>{_N}) padding layers, may waste at most (?P<pct>{_N})% KV cache memory")
def _padding_layers(rec: dict[str, Any], m: re.Match[str]) -> None:
    rec["padding_layers"] = _int(m["n"])  # kv_cache_utils / kv_cache_planning: groups padded to one size
    rec["padding_waste_pct"] = _num(m["pct"])


@_rule("Updating mamba_ssm_cache_dtype", r"Updating mamba_ssm_cache_dtype to '(?P<dtype>[\w.]+)'")
def _ssm_dtype(rec: dict[str, Any], m: re.Match[str]) -> None:
    rec["config"]["mamba_ssm_cache_dtype"] = m["dtype"]  # model_executor/models/config.py (NemotronH), 0.20+


@_rule("Multiplying the GPU KV cache size",
       rf"Multiplying the GPU KV cache size by the (?:dcp_world_size (?P<dcp>{_N})|cp_world_size (?P<cp>{_N}) "
       rf"\(pcp_world_size (?P<pcp>{_N}) \* dcp_world_size (?P<dcp2>{_N})\))")
def _dcp_multiply(rec: dict[str, Any], m: re.Match[str]) -> None:
    # 0.11: "... by the dcp_world_size N."; 0.20: "... by the cp_world_size N (pcp_world_size P * dcp_world_size D)."
    rec["kv_size_multiplier"] = _int(m["dcp"] or m["cp"])
    rec["config"]["decode_context_parallel_size"] = _int(m["dcp"] or m["dcp2"])


@_rule("Chunked prefill is enabled", rf"Chunked prefill is enabled with max_num_batched_tokens=(?P<n>{_N})")
def _chunked_prefill(rec: dict[str, Any], m: re.Match[str]) -> None:
    rec["config"]["max_num_batched_tokens"] = _int(m["n"])  # config/scheduler.py


@_rule("Asynchronous scheduling is", r"Asynchronous scheduling is (?P<state>enabled|disabled)")
def _async(rec: dict[str, Any], m: re.Match[str]) -> None:
    rec["config"]["async_scheduling"] = m["state"] == "enabled"  # config/vllm.py


@_rule("latency regression when using chunked local",
       r"There is a latency regression when using chunked local attention with the hybrid KV cache manager")
def _chunked_local_off(rec: dict[str, Any], m: re.Match[str]) -> None:
    # config/vllm.py VllmConfig.__post_init__ warns so exactly when the variable is 0 and turns the manager off
    rec["config"]["chunked_local_hma"] = "0"


@_rule("Turning off hybrid kv cache manager", r"Turning off hybrid kv cache manager because `--kv-transfer-config`")
def _connector_off(rec: dict[str, Any], m: re.Match[str]) -> None:
    rec["config"]["kv_connector_without_hma"] = True  # a KV connector without HMA support (0.11: any connector)


@_rule("Unknown vLLM environment variable", r"Unknown vLLM environment variable detected: (?P<name>[A-Za-z_]\w{0,100})")
def _unknown_env(rec: dict[str, Any], m: re.Match[str]) -> None:
    seen = tuple(rec["config"].get("unknown_env") or ())
    if m["name"] not in seen:
        rec["config"]["unknown_env"] = (*seen, m["name"])
