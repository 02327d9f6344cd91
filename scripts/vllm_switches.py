"""Write vLLM's switches table: the defaults and rules that change the KV plan, the memory waterfall or the
scheduler, read from each published wheel's source.

    python scripts/vllm_switches.py fetch 0.11.2 0.20.2 ... 0.33.0 --dest /tmp/vllm-src
    python scripts/vllm_switches.py table --src /tmp/vllm-src --out data/vllm/switches.csv
    python scripts/vllm_switches.py flip VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE --src /tmp/vllm-src \
        --src /tmp/vllm-between --out data/vllm/chunked-local-default.csv

``fetch`` runs ``pip download --no-deps vllm==X``, records the wheel's name and sha256 in ``X/WHEEL``, unpacks
only the files this script reads (:data:`READ`) into ``DEST/X/vllm/`` and deletes the wheel (each is about
400 MB). ``table`` parses those files with :mod:`ast` and :mod:`re` (vLLM needs torch and CUDA to import, so
nothing is imported) and writes one row per switch and run of versions where its value stays the same:

``name, kind, from, to, value, affects, source``

* ``env:NAME``: an environment variable's default, the second argument of the ``os.getenv("NAME", ...)``
  in ``envs.py``'s ``environment_variables`` (``absent`` where the variable does not exist);
* ``field:Class.name``: a config dataclass field's default (``config/*.py``; ``Field(default=...)``,
  ``field(default=...)``, class constants resolved), ``arg:name`` an ``EngineArgs`` field's default;
* ``batch:...``: ``EngineArgs.get_batch_defaults``' tiers: the memory threshold, the device names kept off
  each tier, and ``max_num_batched_tokens``/``max_num_seqs`` per usage context;
* ``value:...``: a number in one function's source (a regular expression's group), e.g. the CUDA-graph
  capture ceiling;
* ``rule:...``: ``yes`` when a function's source has a construct (a regular expression), else ``no``: the
  behaviours pdtune's :mod:`pdtune.state.semantics` switches on per line.

Each row names the file and function it was read from. The header lists every wheel and its sha256.
"""

from __future__ import annotations

import argparse
import ast
import csv
import hashlib
import io
import re
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

#: What ``fetch`` unpacks (zip wildcards; ``*`` crosses folders).
READ = (
    "vllm/envs.py", "vllm/version.py", "vllm/_version.py", "vllm/engine/arg_utils.py", "vllm/config/*.py",
    "vllm/config.py", "vllm/platforms/*.py", "vllm/v1/core/*", "vllm/v1/kv_cache_interface.py",
    "vllm/model_executor/models/config.py", "vllm/usage/usage_lib.py", "vllm/v1/attention/backends/*",
    "vllm/model_executor/layers/mamba/*", "vllm/v1/worker/gpu_worker.py", "vllm/v1/worker/utils.py",
    "vllm/utils/*",
)

COLUMNS = ("name", "kind", "from", "to", "value", "affects", "source")
ABSENT = "absent"


# ------------------------------------------------------------------------------------------ one wheel


class Tree:
    """One version's unpacked ``vllm/`` files."""

    def __init__(self, root: Path) -> None:
        self.root = root
        wheel, sha = (root / "WHEEL").read_text().split()
        self.wheel, self.sha256 = wheel, sha
        self.version = wheel.split("-")[1]
        major, minor, *_ = self.version.split(".")
        self.line = f"{major}.{minor}"

    def text(self, rel: str) -> str | None:
        path = self.root / "vllm" / rel
        return path.read_text(encoding="utf-8") if path.is_file() else None

    @cache  # noqa: B019 - one Tree per version, kept for the run
    def module(self, rel: str) -> ast.Module | None:
        text = self.text(rel)
        return ast.parse(text) if text is not None else None

    def node(self, rel: str, qualname: str) -> ast.AST | None:
        """The class or function ``qualname`` (``Class.method``) of ``rel``, top level first."""
        node: ast.AST | None = self.module(rel)
        for part in qualname.split("."):
            if node is None:
                return None
            node = next((n for n in getattr(node, "body", []) if isinstance(
                n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and n.name == part), None)
        return node

    def source(self, rel: str, qualname: str) -> str | None:
        """The code of ``qualname`` (the whole file for ""), normalised by :func:`ast.unparse`: no comments, no
        docstrings, one spelling of quotes and line breaks, so a pattern matches code and never prose."""
        node = self.node(rel, qualname) if qualname else self.module(rel)
        return _code(node) if node is not None else None

    def files(self, folder: str) -> list[str]:
        base = self.root / "vllm" / folder
        return sorted(p.relative_to(self.root / "vllm").as_posix() for p in base.glob("*.py")) if base.is_dir() else []

    def config_class(self, name: str) -> tuple[str, ast.ClassDef] | None:
        """A config dataclass by name: ``config/*.py``, else the pre-package ``config.py``."""
        for rel in [*self.files("config"), "config.py"]:
            module = self.module(rel)
            if module is None:
                continue
            for n in module.body:
                if isinstance(n, ast.ClassDef) and n.name == name:
                    return rel, n
        return None


# ------------------------------------------------------------------------------------------ extractors


def _code(node: ast.AST) -> str:
    """``ast.unparse`` of ``node`` without its docstrings."""
    import copy

    node = copy.deepcopy(node)
    for n in ast.walk(node):
        body = getattr(n, "body", None)
        if (isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            n.body = body[1:] or [ast.Pass()]
    return ast.unparse(node)


def _literal(node: ast.expr | None) -> str:
    if node is None:
        return ABSENT
    if isinstance(node, ast.Constant):
        return "None" if node.value is None else str(node.value)
    return ast.unparse(node)


def _class_constant(cls: ast.ClassDef, name: str) -> ast.expr | None:
    for stmt in cls.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == name:
            return stmt.value
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets):
            return stmt.value
    return None


def _field_value(cls: ast.ClassDef, value: ast.expr | None) -> ast.expr | None:
    """A field's default: ``Field(default=X)``/``field(default=X)`` is X; a class constant is resolved."""
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name | ast.Attribute):
        func = value.func.id if isinstance(value.func, ast.Name) else value.func.attr
        if func in ("Field", "field"):
            for kw in value.keywords:
                if kw.arg == "default":
                    return _field_value(cls, kw.value)
                if kw.arg == "default_factory":
                    return kw.value
            return value.args[0] if value.args else None
    if isinstance(value, ast.Name):
        resolved = _class_constant(cls, value.id)
        if resolved is not None:
            return resolved
    return value


@dataclass(frozen=True)
class Env:
    """An environment variable's default in ``envs.py``."""

    var: str
    affects: str

    @property
    def name(self) -> str:
        return f"env:{self.var}"

    kind = "env"
    source = "envs.py environment_variables"

    def __call__(self, tree: Tree) -> str:
        module = tree.module("envs.py")
        assert module is not None, f"{tree.root}: no envs.py"
        for node in ast.walk(module):
            if not isinstance(node, ast.Dict):
                continue
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and key.value == self.var:
                    return _env_default(value, self.var)
        return ABSENT


def _env_default(value: ast.expr, var: str) -> str:
    """The default in the first call whose first argument names ``var`` (``os.getenv``, ``env_with_choices``,
    ``os.environ.get``); "None" when that call has no default."""
    for call in ast.walk(value):
        if (isinstance(call, ast.Call) and call.args and isinstance(call.args[0], ast.Constant)
                and call.args[0].value == var):
            if len(call.args) > 1:
                return _literal(call.args[1])
            for kw in call.keywords:
                if kw.arg == "default":
                    return _literal(kw.value)
            return "None"
    return "computed: " + ast.unparse(value).replace("\n", " ")[:120]


@dataclass(frozen=True)
class ConfigField:
    """A config dataclass field's default."""

    cls: str
    field: str
    affects: str
    kind = "field"

    @property
    def name(self) -> str:
        return f"field:{self.cls}.{self.field}"

    @property
    def source(self) -> str:
        return f"config {self.cls}.{self.field}"

    def __call__(self, tree: Tree) -> str:
        found = tree.config_class(self.cls)
        if found is None:
            return ABSENT
        _, cls = found
        for stmt in cls.body:
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == self.field:
                return _literal(_field_value(cls, stmt.value))
        return ABSENT


@dataclass(frozen=True)
class EngineArg:
    """An ``EngineArgs`` field's default (``engine/arg_utils.py``), a config field it names resolved."""

    field: str
    affects: str
    kind = "arg"

    @property
    def name(self) -> str:
        return f"arg:{self.field}"

    source = "engine/arg_utils.py EngineArgs"

    def __call__(self, tree: Tree) -> str:
        cls = tree.node("engine/arg_utils.py", "EngineArgs")
        assert isinstance(cls, ast.ClassDef)
        for stmt in cls.body:
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == self.field:
                value = _field_value(cls, stmt.value)
                return _resolve_config_reference(tree, value)
        return ABSENT


def _resolve_config_reference(tree: Tree, value: ast.expr | None) -> str:
    """``CacheConfig.block_size`` or ``get_field(CacheConfig, "x")`` is that field's default."""
    ref: tuple[str, str] | None = None
    if isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name) and value.value.id.endswith("Config"):
        ref = (value.value.id, value.attr)
    if (isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "get_field"
            and len(value.args) == 2 and isinstance(value.args[0], ast.Name) and isinstance(value.args[1], ast.Constant)):
        ref = (value.args[0].id, str(value.args[1].value))
    if ref is None:
        return _literal(value)
    found = tree.config_class(ref[0])
    if found is None:
        return _literal(value)
    _, cls = found
    resolved = _class_constant(cls, ref[1])
    return _literal(_field_value(cls, resolved)) if resolved is not None else _literal(value)


@dataclass(frozen=True)
class Value:
    """A number (or word) in a function's source: the first group that matched of the first of ``places``
    ((file, qualname, pattern)) that matches; ``absent`` where none does."""

    name: str
    places: tuple[tuple[str, str, str], ...]
    affects: str
    kind = "value"

    @property
    def source(self) -> str:
        return "; ".join(dict.fromkeys(f"{rel} {qual}" for rel, qual, _ in self.places))

    def __call__(self, tree: Tree) -> str:
        for rel, qual, pattern in self.places:
            match = re.search(pattern, tree.source(rel, qual) or "", re.S)
            if match:
                return next(g for g in match.groups() if g is not None)
        return ABSENT


@dataclass(frozen=True)
class Rule:
    """``yes`` where one of the functions has a construct: ``places`` are (file, qualname, pattern)."""

    name: str
    places: tuple[tuple[str, str, str], ...]
    affects: str
    kind = "rule"

    @property
    def source(self) -> str:
        return "; ".join(f"{rel} {qual}" for rel, qual, _ in self.places)

    def __call__(self, tree: Tree) -> str:
        for rel, qual, pattern in self.places:
            text = tree.source(rel, qual)
            if text is not None and re.search(pattern, text, re.S):
                return "yes"
        return "no"


@dataclass(frozen=True)
class BatchDefaults:
    """``EngineArgs.get_batch_defaults``: the GPU tiers and each tier's defaults per usage context.

    The function is an ``if``/``elif``/``else`` chain on ``device_memory >= N * GiB_bytes`` (and device names
    kept off); each branch assigns ``default_max_num_batched_tokens`` and ``default_max_num_seqs`` dicts keyed
    by ``UsageContext.LLM_CLASS`` and ``UsageContext.OPENAI_API_SERVER``. One row per tier and item.
    """

    affects: str = "scheduler"

    def rows(self, tree: Tree) -> dict[str, str]:
        fn = (tree.node("engine/arg_utils.py", "EngineArgs.get_batch_defaults")
              or tree.node("engine/arg_utils.py", "EngineArgs._set_default_args"))  # 0.11
        assert isinstance(fn, ast.FunctionDef), f"{tree.root}: no EngineArgs.get_batch_defaults"
        chain = next(s for s in ast.walk(fn) if isinstance(s, ast.If) and "device_memory >=" in ast.unparse(s.test))
        out: dict[str, str] = {}
        tiers: list[tuple[ast.expr | None, list[ast.stmt]]] = []
        node = chain
        while True:
            tiers.append((node.test, node.body))
            if len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If):
                node = node.orelse[0]
                continue
            tiers.append((None, node.orelse))
            break
        names = ("large", "medium", "small") if len(tiers) == 3 else ("medium", "small")
        for label, (test, body) in zip(names, tiers, strict=True):
            out[f"batch:{label}.min_memory_gib"] = _memory_threshold(test)
            out[f"batch:{label}.excluded_devices"] = _excluded(test)
            for stmt in body:
                if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Dict):
                    target = ast.unparse(stmt.targets[0]).removeprefix("default_")
                    for key, value in zip(stmt.value.keys, stmt.value.values, strict=True):
                        usage = {"LLM_CLASS": "llm", "OPENAI_API_SERVER": "serve"}[ast.unparse(key).split(".")[-1]]
                        out[f"batch:{label}.{target}.{usage}"] = _literal(value)
        for label in ("large", "medium", "small"):
            for item in ("min_memory_gib", "excluded_devices", "max_num_batched_tokens.serve",
                         "max_num_batched_tokens.llm", "max_num_seqs.serve", "max_num_seqs.llm"):
                out.setdefault(f"batch:{label}.{item}", ABSENT)
        return out


def _memory_threshold(test: ast.expr | None) -> str:
    if test is None:
        return "0"
    match = re.search(r"device_memory >= (\d+) \* GiB_bytes", ast.unparse(test))
    return match.group(1) if match else ABSENT


def _excluded(test: ast.expr | None) -> str:
    if test is None:
        return ""
    text = ast.unparse(test)
    names = re.findall(r"'(\w+)' not in device_name", text)
    if "not is_gb10" in text:
        names.append("gb10")
    return " ".join(names)


# ------------------------------------------------------------------------------------------ the switches

CFG = ("config/vllm.py", "config/__init__.py")  # VllmConfig; 0.11 keeps it in the package's __init__
KVI = "v1/kv_cache_interface.py"
PLAN = ("v1/core/kv_cache_planning.py", "v1/core/kv_cache_utils.py")
MAMBA_UTILS = "model_executor/layers/mamba/mamba_utils.py"
MODELS_CONFIG = "model_executor/models/config.py"


def _in(rels: tuple[str, ...], qualname: str, pattern: str) -> tuple[tuple[str, str, str], ...]:
    return tuple((rel, qualname, pattern) for rel in rels)


def _in_planner(qualname: str, pattern: str) -> tuple[tuple[str, str, str], ...]:
    """The planner moved from ``kv_cache_utils.py`` to ``kv_cache_planning.py``: look in both."""
    return tuple((rel, qualname, pattern) for rel in PLAN)


SWITCHES: tuple[Env | ConfigField | EngineArg | Value | Rule, ...] = (
    # --- environment variables
    Env("VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE", "kv-plan"),
    Env("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "kv-plan"),
    Env("VLLM_ATTENTION_BACKEND", "kv-plan"),
    Env("VLLM_KV_CACHE_LAYOUT", "kv-plan"),
    Env("VLLM_USE_V1", "scheduler"),
    Env("VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS", "memory"),
    Env("VLLM_ENABLE_V1_MULTIPROCESSING", "scheduler"),
    Env("VLLM_DISABLE_COMPILE_CACHE", "memory"),
    Env("VLLM_SSM_CONV_STATE_LAYOUT", "kv-plan"),
    Env("VLLM_KV_CACHE_SPACE", "memory"),
    Env("VLLM_CPU_KVCACHE_SPACE", "memory"),
    Env("VLLM_USE_FLASHINFER_MOE_FP4", "memory"),
    # --- cache
    ConfigField("CacheConfig", "block_size", "kv-plan"),
    ConfigField("CacheConfig", "DEFAULT_BLOCK_SIZE", "kv-plan"),
    Value("value:cuda_platform.default_block_size",
          (("platforms/cuda.py", "CudaPlatformBase.check_and_update_config",
            r"if cache_config and cache_config\.block_size is None:\n\s*cache_config\.block_size = (\d+)"),), "kv-plan"),
    ConfigField("CacheConfig", "gpu_memory_utilization", "memory"),
    ConfigField("CacheConfig", "kv_cache_memory_bytes", "memory"),
    ConfigField("CacheConfig", "swap_space", "memory"),
    ConfigField("CacheConfig", "cache_dtype", "kv-plan"),
    ConfigField("CacheConfig", "enable_prefix_caching", "kv-plan"),
    ConfigField("CacheConfig", "prefix_caching_hash_algo", "kv-plan"),
    ConfigField("CacheConfig", "mamba_cache_mode", "kv-plan"),
    ConfigField("CacheConfig", "mamba_block_size", "kv-plan"),
    ConfigField("CacheConfig", "mamba_cache_dtype", "kv-plan"),
    ConfigField("CacheConfig", "mamba_ssm_cache_dtype", "kv-plan"),
    ConfigField("CacheConfig", "kv_cache_dtype_skip_layers", "kv-plan"),
    ConfigField("CacheConfig", "num_gpu_blocks_override", "kv-plan"),
    ConfigField("CacheConfig", "kv_offloading_size", "memory"),
    EngineArg("block_size", "kv-plan"),
    EngineArg("gpu_memory_utilization", "memory"),
    EngineArg("enable_prefix_caching", "kv-plan"),
    EngineArg("max_num_batched_tokens", "scheduler"),
    EngineArg("max_num_seqs", "scheduler"),
    EngineArg("enable_chunked_prefill", "scheduler"),
    EngineArg("async_scheduling", "scheduler"),
    EngineArg("disable_hybrid_kv_cache_manager", "kv-plan"),
    EngineArg("max_model_len", "kv-plan"),
    EngineArg("performance_mode", "scheduler"),
    # --- scheduler
    ConfigField("SchedulerConfig", "DEFAULT_MAX_NUM_BATCHED_TOKENS", "scheduler"),
    ConfigField("SchedulerConfig", "DEFAULT_MAX_NUM_BATCHED_TOKENS_FOR_BATCHED_DP", "scheduler"),
    ConfigField("SchedulerConfig", "DEFAULT_MAX_NUM_SEQS", "scheduler"),
    ConfigField("SchedulerConfig", "max_num_batched_tokens", "scheduler"),
    ConfigField("SchedulerConfig", "max_num_seqs", "scheduler"),
    ConfigField("SchedulerConfig", "max_num_partial_prefills", "scheduler"),
    ConfigField("SchedulerConfig", "max_long_partial_prefills", "scheduler"),
    ConfigField("SchedulerConfig", "long_prefill_token_threshold", "scheduler"),
    ConfigField("SchedulerConfig", "enable_chunked_prefill", "scheduler"),
    ConfigField("SchedulerConfig", "async_scheduling", "scheduler"),
    ConfigField("SchedulerConfig", "disable_hybrid_kv_cache_manager", "kv-plan"),
    ConfigField("SchedulerConfig", "policy", "scheduler"),
    ConfigField("SchedulerConfig", "scheduler_reserve_full_isl", "scheduler"),
    ConfigField("SchedulerConfig", "watermark", "scheduler"),
    Value("value:long_prefill_token_threshold.fraction_of_max_model_len",
          (("config/scheduler.py", "SchedulerConfig.__post_init__",
            r"long_prefill_token_threshold = int\((?:self\.)?max_model_len \* ([\d.]+)\)"),), "scheduler"),
    # --- parallelism
    ConfigField("ParallelConfig", "decode_context_parallel_size", "kv-plan"),
    ConfigField("ParallelConfig", "dcp_kv_cache_interleave_size", "kv-plan"),
    ConfigField("ParallelConfig", "cp_kv_cache_interleave_size", "kv-plan"),
    ConfigField("ParallelConfig", "prefill_context_parallel_size", "kv-plan"),
    Rule("rule:dcp_refuses_sliding_window", ((KVI, "", r"DCP not support sliding window"),), "kv-plan"),
    # --- CUDA graphs and compilation
    ConfigField("CompilationConfig", "cudagraph_mode", "memory"),
    ConfigField("CompilationConfig", "max_cudagraph_capture_size", "memory"),
    ConfigField("CompilationConfig", "cudagraph_capture_sizes", "memory"),
    ConfigField("SchedulerConfig", "cuda_graph_sizes", "memory"),
    Value("value:cudagraph.max_capture_size.seqs_multiplier",
          _in(CFG, "VllmConfig._set_cudagraph_sizes", r"max_num_seqs \* decode_query_len \* (\d+)")
          + (("config/scheduler.py", "SchedulerConfig.__post_init__",
              r"cuda_graph_sizes = \[min\(self\.max_num_seqs \* (\d+), \d+\)\]"),), "memory"),
    Value("value:cudagraph.max_capture_size.ceiling",
          _in(CFG, "VllmConfig._set_cudagraph_sizes",
              r"default_max_graph_size = \d+ if [^\n]* else (\d+)\n|decode_query_len \* 2, (\d+)\)")
          + (("config/scheduler.py", "SchedulerConfig.__post_init__",
              r"cuda_graph_sizes = \[min\(self\.max_num_seqs \* \d+, (\d+)\)\]"),), "memory"),
    Value("value:cudagraph.max_capture_size.ceiling_sm100",
          _in(CFG, "VllmConfig._set_cudagraph_sizes",
              r"default_max_graph_size = (\d+) if current_platform\.is_device_capability_family\(100\)"), "memory"),
    Value("value:cudagraph.capture_sizes.step_below_256",
          _in(CFG, "VllmConfig._set_cudagraph_sizes",
              r"range\(8, min\(max_cudagraph_capture_size \+ 1, 256\), (\d+)\)|range\(8, cuda_graph_sizes\[0\] \+ 1, (\d+)\)"),
          "memory"),
    Value("value:cudagraph.capture_sizes.step_from_256",
          _in(CFG, "VllmConfig._set_cudagraph_sizes", r"range\(256, max_cudagraph_capture_size \+ 1, (\d+)\)"), "memory"),
    Rule("rule:cudagraph.capture_sizes_include_max_num_batched_tokens",
         _in(CFG, "VllmConfig._set_cudagraph_sizes", r"max_num_tokens <= max_cudagraph_capture_size and max_num_tokens not in cudagraph_capture_sizes"), "memory"),
    # --- the behaviours pdtune.state.semantics switches on (each Semantics field names its row)
    Rule("rule:hybrid_block_kernel_alignment",
         (("platforms/interface.py", "Platform._align_hybrid_block_size", r"kernel_block"),), "kv-plan"),
    Rule("rule:mamba_spec_speculative_blocks",
         ((KVI, "MambaSpec.max_memory_usage_bytes", r"num_speculative_blocks"),), "kv-plan"),
    Rule("rule:kv_cache_size_from_concurrency",
         tuple((rel, "", r"int\(max_concurrency \* max_model_len\)") for rel in PLAN), "kv-plan"),
    Rule("rule:group_size_heuristic_1_5",
         _in_planner("_get_kv_cache_groups_uniform_page_size", r"max_num_layers < min_num_layers \* 1\.5"), "kv-plan"),
    Rule("rule:mamba_cache_mode_all_exists",
         (("config/cache.py", "", r"MambaCacheMode = Literal\[[^\]]*'all'"),), "kv-plan"),
    Rule("rule:prefix_caching_defaults_mamba2_to_all",
         ((MODELS_CONFIG, "MambaModelConfig.verify_and_update_config",
           r"'all' if model_config\.supports_mamba_prefix_caching"),), "kv-plan"),
    Rule("rule:all_mode_yields_to_speculation",
         ((MODELS_CONFIG, "MambaModelConfig.verify_and_update_config",
           r"if model_config\.supports_mamba_prefix_caching and vllm_config\.speculative_config is not None"),),
         "kv-plan"),
    Rule("rule:mla_hybrid_block_128",
         (("platforms/interface.py", "Platform._align_hybrid_block_size", r"use_mla[\s\S]*\b128\b"),), "kv-plan"),
    Rule("rule:mamba2_prefill_checkpoint_block",
         (("model_executor/layers/mamba/mamba_mixer2.py", "MambaMixer2.get_kv_cache_spec",
           r"num_prefill_checkpoint_blocks=1"),), "kv-plan"),
    Rule("rule:gdn_prefill_checkpoint_block",
         (("model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py", "", r"num_prefill_checkpoint_blocks=1"),),
         "kv-plan"),
    Rule("rule:nemotron_h_ssm_cache_float32",
         ((MODELS_CONFIG, "NemotronHForCausalLMConfig", r"'float32'"),), "kv-plan"),
    Rule("rule:gdn_ssm_dtype_configurable",
         ((MAMBA_UTILS, "MambaStateDtypeCalculator.gated_delta_net_state_dtype", r"\n[\s\S]*mamba_ssm_cache_dtype"),),
         "kv-plan"),
    Rule("rule:cudagraph_memory_estimate_subtracted",
         (("v1/worker/gpu_worker.py", "Worker.determine_available_memory", r"cudagraph"),), "memory"),
    Rule("rule:requested_memory_rounded_up",
         (("v1/worker/utils.py", "request_memory", r"math\.ceil"),), "memory"),
    Rule("rule:local_attention_holds_in_flight_batches", ((KVI, "", r"max_in_flight_tokens"),), "kv-plan"),
    Rule("rule:sliding_window_retains_lookahead",
         ((KVI, "SlidingWindowSpec", r"self\.sliding_window - 1 \+ self\.extra_retained_tokens"),), "kv-plan"),
    Rule("rule:async_scheduling_decided_in_post_init",
         _in(CFG, "VllmConfig.__post_init__", r"self\.scheduler_config\.async_scheduling = True"), "scheduler"),
    Rule("rule:async_scheduling_default_with_draft_model",
         # the default branch lets a draft model keep async on (0.28), or the incompatibility check lists it
         # among the methods async scheduling supports (0.33)
         _in(CFG, "VllmConfig.__post_init__",
             r"async_scheduling is None:(?:(?!async_scheduling = True)[\s\S])*method != 'draft_model'")
         + _in(CFG, "VllmConfig.__post_init__", r"spec_config\.method not in \([^)]*'draft_model'"), "scheduler"),
    Rule("rule:unify_page_size_scales_block",
         _in_planner("unify_kv_cache_spec_page_size", r"new_block_size = layer_spec\.block_size \* ratio"), "kv-plan"),
    Rule("rule:unify_page_size_pads_mamba",
         _in_planner("unify_kv_cache_spec_page_size", r"elif isinstance\(layer_spec, MambaSpec\):\s*new_spec[^\n]*page_size_padded"),
         "kv-plan"),
    Rule("rule:unify_page_size_pads_block_stride_attention",
         _in_planner("unify_kv_cache_spec_page_size", r"isinstance\(layer_spec, AttentionSpec\) and layer_spec\.indexes_kv_by_block_stride"),
         "kv-plan"),
    Rule("rule:unify_page_size_pads_non_mla_attention",
         _in_planner("unify_kv_cache_spec_page_size", r"isinstance\(layer_spec, AttentionSpec\) and (?:\()?not isinstance\(layer_spec, MLAAttentionSpec\)"),
         "kv-plan"),
    Rule("rule:skip_layer_block_alignment",
         (("platforms/interface.py", "Platform._align_heterogeneous_kv_block_size", r"."),), "kv-plan"),
    Rule("rule:kda_conv_fused",
         ((MAMBA_UTILS, "MambaStateShapeCalculator.kda_state_shape", r"conv_dim = proj_size \+ 2 \* proj_k_size"),),
         "kv-plan"),
    Rule("rule:kda_conv_speculative_rows",
         ((MAMBA_UTILS, "MambaStateShapeCalculator.kda_state_shape", r"conv_kernel_size - 1 \+ num_spec"),), "kv-plan"),
    Rule("rule:kda_ssm_dtype_configurable",
         ((MAMBA_UTILS, "MambaStateDtypeCalculator.kda_state_dtype", r"\n[\s\S]*mamba_ssm_cache_dtype"),), "kv-plan"),
    Rule("rule:short_conv_speculative_rows",
         ((MAMBA_UTILS, "MambaStateShapeCalculator.short_conv_state_shape", r"conv_kernel - 1 \+ num_spec"),), "kv-plan"),
    Rule("rule:chunked_local_attention_disables_hma",
         _in(CFG, "VllmConfig.__post_init__", r"VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE"), "kv-plan"),
    Rule("rule:kv_connector_disables_hma_unless_supported",
         _in(CFG, "VllmConfig.__post_init__", r"supports_hma"), "kv-plan"),
    Rule("rule:kv_connector_always_disables_hma",
         _in(CFG, "VllmConfig.__post_init__", r"if self\.kv_transfer_config is not None:\n\s*logger\.warning\([^\n]*\)\n\s*self\.scheduler_config\.disable_hybrid_kv_cache_manager = True"),
         "kv-plan"),
    Rule("rule:kv_events_disable_hma",
         _in(CFG, "VllmConfig.__post_init__", r"if self\.kv_events_config is not None:\n\s*self\.scheduler_config\.disable_hybrid_kv_cache_manager = True"),
         "kv-plan"),
    Rule("rule:cpu_platform_has_no_hma",
         _in(CFG, "VllmConfig.__post_init__", r"if not current_platform\.support_hybrid_kv_cache\(\)"), "kv-plan"),
    Rule("rule:batch_default_capped_by_max_num_seqs_x_max_model_len",
         (("engine/arg_utils.py", "EngineArgs._set_default_max_num_seqs_and_batched_tokens_args",
           r"self\.max_num_batched_tokens = min\(self\.max_num_seqs \* model_config\.max_model_len"),),
         "scheduler"),
    Rule("rule:batch_default_without_chunked_prefill_is_max_model_len",
         (("engine/arg_utils.py", "EngineArgs._set_default_args",
           r"self\.max_num_batched_tokens = model_config\.max_model_len"),), "scheduler"),
    Rule("rule:hybrid_models_disable_prefix_caching",
         ((MODELS_CONFIG, "MambaModelConfig.verify_and_update_config",
           r"enable_prefix_caching = False\s*\n\s*logger\.info\(['\"]Hybrid or mamba-based model detected: disabling prefix"),),
         "kv-plan"),
    Rule("rule:prefix_caching_default_per_model",
         (("engine/arg_utils.py", "EngineArgs._set_default_chunked_prefill_and_prefix_caching_args",
           r"is_prefix_caching_supported"),), "kv-plan"),
)


# ------------------------------------------------------------------------------------------ the table


def read_trees(src: Path) -> list[Tree]:
    trees = [Tree(d) for d in src.iterdir() if (d / "WHEEL").is_file()]
    return sorted(trees, key=lambda t: tuple(int(x) for x in t.line.split(".")))


def values(trees: list[Tree]) -> dict[str, tuple[str, str, str, list[str]]]:
    """name -> (kind, affects, source, value per tree)."""
    out: dict[str, tuple[str, str, str, list[str]]] = {}
    for switch in SWITCHES:
        out[switch.name] = (switch.kind, switch.affects, switch.source, [switch(t) for t in trees])
    batch = BatchDefaults()
    per_tree = [batch.rows(t) for t in trees]
    for name in sorted({k for rows in per_tree for k in rows}):
        out[name] = ("batch", batch.affects, "engine/arg_utils.py EngineArgs.get_batch_defaults (0.11 _set_default_args)",
                     [rows.get(name, ABSENT) for rows in per_tree])
    return out


def runs(trees: list[Tree], vals: list[str]) -> list[tuple[str, str, str]]:
    """(from line, to line, value) for each run of equal values over the lines."""
    out: list[tuple[str, str, str]] = []
    start = 0
    for i in range(1, len(vals) + 1):
        if i == len(vals) or vals[i] != vals[start]:
            out.append((trees[start].line, trees[i - 1].line, vals[start]))
            start = i
    return out


def render(trees: list[Tree]) -> str:
    buf = io.StringIO()
    buf.write("# vLLM switches, generated by scripts/vllm_switches.py from the published wheels (no hand edits);\n")
    buf.write("# one row per switch and run of lines where its default stays the same. Wheels read:\n")
    for t in trees:
        buf.write(f"# wheel {t.line} {t.wheel} sha256 {t.sha256}\n")
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(COLUMNS)
    for name, (kind, affects, source, vals) in values(trees).items():
        for first, last, value in runs(trees, vals):
            writer.writerow((name, kind, first, last, value, affects, source))
    return buf.getvalue()


# ------------------------------------------------------------------------------------------ fetching


def fetch(versions: list[str], dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for version in versions:
        target = dest / version
        if (target / "WHEEL").is_file():
            continue
        with tempfile.TemporaryDirectory(dir=dest) as tmp:
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", f"vllm=={version}", "-d", tmp,
                            "-q"], check=True)
            wheel = next(Path(tmp).glob("vllm-*.whl"))
            digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
            with zipfile.ZipFile(wheel) as z:
                for name in z.namelist():
                    if any(_matches(name, pattern) for pattern in READ) and not name.endswith(".so"):
                        z.extract(name, target)
            (target / "WHEEL").write_text(f"{wheel.name} {digest}\n")
        print(f"{version}: {digest}", file=sys.stderr)


def _matches(name: str, pattern: str) -> bool:
    return re.fullmatch(re.escape(pattern).replace(r"\*", ".*"), name) is not None


def flip(var: str, srcs: list[Path]) -> str:
    """One environment variable's default in every wheel under ``srcs`` (also wheels between the lines the
    table follows), as CSV: where a default flipped, to the release."""
    trees = sorted((t for src in srcs for t in read_trees(src)),
                   key=lambda t: tuple(int(x) for x in t.version.split(".")[:3]))
    env = Env(var, "")
    buf = io.StringIO()
    buf.write(f"# {var}'s default in envs.py of each wheel, generated by scripts/vllm_switches.py flip\n")
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(("version", "default", "wheel", "sha256"))
    for t in trees:
        writer.writerow((t.version, env(t), t.wheel, t.sha256))
    return buf.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fetch")
    f.add_argument("versions", nargs="+")
    f.add_argument("--dest", type=Path, required=True)
    t = sub.add_parser("table")
    t.add_argument("--src", type=Path, required=True)
    t.add_argument("--out", type=Path, required=True)
    p = sub.add_parser("flip")
    p.add_argument("var")
    p.add_argument("--src", type=Path, action="append", required=True, help="repeatable")
    p.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if args.cmd == "fetch":
        fetch(args.versions, args.dest)
    elif args.cmd == "table":
        args.out.write_text(render(read_trees(args.src)), encoding="utf-8")
    elif args.out is not None:
        args.out.write_text(flip(args.var, args.src), encoding="utf-8")
    else:
        print(flip(args.var, args.src), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
