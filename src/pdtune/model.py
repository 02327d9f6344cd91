"""A model as pdtune needs it: the layer stack, each layer's state shape, and its weights.

:func:`load_model` reads a Hugging Face ``config.json`` (a bundled name from ``data/models/``, a folder or
a file) into a frozen :class:`ModelSpec`. Five families are understood, each by its own config fields:

========================  ==========================================================================
family                    fields read
========================  ==========================================================================
dense GQA (Llama, Qwen3)  ``num_key_value_heads``, ``head_dim``
MLA (DeepSeek-V3)         ``kv_lora_rank``, ``qk_rope_head_dim`` (+ ``qk_nope_head_dim``, ``v_head_dim``)
GatedDeltaNet hybrids     ``layer_types`` or ``full_attention_interval``, ``linear_*``, ``mamba_ssm_dtype``
Mamba2 hybrids            ``hybrid_override_pattern`` (``M`` Mamba2, ``*`` attention, ``-`` MLP, ``E`` MoE)
sliding window (gpt-oss)  ``sliding_window`` with ``layer_types``
========================  ==========================================================================

Anything missing or unknown is an :class:`~pdtune.errors.InputError` naming the file and the field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from fractions import Fraction
from pathlib import Path
from typing import Any

from pdtune.errors import InputError
from pdtune.paths import models_dir


class LayerKind(StrEnum):
    """What a layer keeps per request: the key of its KV cache spec."""

    FULL_ATTENTION = "full_attention"
    SLIDING_ATTENTION = "sliding_attention"
    MLA = "mla"
    GDN = "gdn"  # GatedDeltaNet linear attention: conv + SSM state per request
    MAMBA2 = "mamba2"
    MLP = "mlp"  # no cache at all (Nemotron-H's '-' and 'E' layers)

    @property
    def is_attention(self) -> bool:
        return self in (LayerKind.FULL_ATTENTION, LayerKind.SLIDING_ATTENTION, LayerKind.MLA)

    @property
    def is_recurrent(self) -> bool:
        return self in (LayerKind.GDN, LayerKind.MAMBA2)


#: Bytes per element of the dtypes configs and vLLM flags name.
DTYPE_BYTES: dict[str, int] = {
    "float32": 4,
    "fp32": 4,
    "float": 4,
    "bfloat16": 2,
    "bf16": 2,
    "float16": 2,
    "fp16": 2,
    "half": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
}


def dtype_bytes(name: str, source: str, field_name: str) -> int:
    try:
        return DTYPE_BYTES[name.lower().removeprefix("torch.")]
    except KeyError:
        raise InputError(source, field_name, f"unknown dtype {name!r}; known: {', '.join(sorted(DTYPE_BYTES))}") from None


@dataclass(frozen=True)
class AttentionShape:
    """Standard (GQA) attention: what the KV cache stores per token and what the weights are."""

    num_heads: int
    num_kv_heads: int
    head_dim: int
    output_gate: bool = False  # Qwen3-Next/3.5 double the q projection for a sigmoid output gate
    sliding_window: int | None = None


@dataclass(frozen=True)
class MLAShape:
    """Multi-head latent attention: one latent vector per token, shared by every head."""

    num_heads: int
    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int
    q_lora_rank: int | None

    @property
    def latent_dim(self) -> int:
        """Elements cached per token per layer: 512 + 64 = 576 for DeepSeek-V3."""
        return self.kv_lora_rank + self.qk_rope_head_dim


@dataclass(frozen=True)
class GDNShape:
    """GatedDeltaNet: a causal conv over q, k, v channels and a dk x dv state matrix per value head."""

    num_k_heads: int
    num_v_heads: int
    head_k_dim: int
    head_v_dim: int
    conv_kernel: int

    @property
    def conv_dim(self) -> int:
        """Channels of the causal conv: q and k (num_k_heads wide) plus v (num_v_heads wide)."""
        return self.head_k_dim * self.num_k_heads * 2 + self.head_v_dim * self.num_v_heads


@dataclass(frozen=True)
class Mamba2Shape:
    num_heads: int
    head_dim: int
    n_groups: int
    state_size: int
    conv_kernel: int
    chunk_size: int

    @property
    def intermediate_size(self) -> int:
        return self.num_heads * self.head_dim


@dataclass(frozen=True)
class MoEShape:
    num_experts: int
    experts_per_token: int
    expert_intermediate_size: int
    shared_intermediate_size: int = 0  # all shared experts together; 0 if none
    shared_expert_gate: bool = False  # Qwen3-Next's sigmoid gate on the shared expert


@dataclass(frozen=True)
class WeightFormat:
    """Bytes per parameter of each weight class, from ``quantization_config`` (or the model dtype)."""

    dense: Fraction  # attention, GDN/Mamba, dense MLP, shared experts
    experts: Fraction  # routed experts
    embedding: Fraction  # embeddings, lm_head, norms, routers: kept in the model dtype
    name: str = "bf16"


@dataclass(frozen=True)
class ModelSpec:
    """Everything pdtune needs from a ``config.json``; built by :func:`load_model`."""

    name: str
    source: str
    model_type: str
    architecture: str
    hidden_size: int
    vocab_size: int
    layer_kinds: tuple[LayerKind, ...]
    dtype: str
    weights: WeightFormat
    attention: AttentionShape | None = None
    mla: MLAShape | None = None
    gdn: GDNShape | None = None
    mamba: Mamba2Shape | None = None
    moe: MoEShape | None = None
    moe_layers: tuple[bool, ...] = ()  # per layer: MoE block (True) or dense MLP (False)
    intermediate_size: int = 0  # dense MLP width where a layer has one
    mlp_gated: bool = True  # SwiGLU (3 matrices) or a plain up/down MLP (2, Nemotron-H relu2)
    tie_word_embeddings: bool = False
    max_position_embeddings: int | None = None
    mamba_ssm_dtype: str | None = None  # Qwen3.5 configs name the SSM state dtype here
    mamba_ssm_cache_dtype_default: str | None = None  # vLLM's per-architecture default (NemotronH: float32)
    num_mtp_layers: int = 0
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def num_layers(self) -> int:
        return len(self.layer_kinds)

    def count(self, kind: LayerKind) -> int:
        return sum(1 for k in self.layer_kinds if k is kind)

    @property
    def is_hybrid(self) -> bool:
        return any(k.is_recurrent for k in self.layer_kinds)

    @property
    def attention_kind(self) -> LayerKind:
        """The kind of the model's full-context attention layers (what an MTP layer adds)."""
        return LayerKind.MLA if self.mla is not None else LayerKind.FULL_ATTENTION

    @property
    def dtype_bytes(self) -> int:
        return dtype_bytes(self.dtype, self.source, "torch_dtype")

    def kinds_summary(self) -> str:
        parts = [f"{self.count(k)} {k.value}" for k in LayerKind if self.count(k)]
        return ", ".join(parts)


# --------------------------------------------------------------------------------------------- loading

_GDN_TYPES = {"qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text"}
_MLA_TYPES = {"deepseek_v3", "deepseek_v2", "kimi_k2", "deepseek_v32"}
_DENSE_TYPES = {"llama", "mistral", "qwen2", "qwen3", "qwen3_moe", "qwen2_moe", "mixtral", "gemma", "phi3"}
_SLIDING_TYPES = {"gpt_oss"}
_MAMBA_TYPES = {"nemotron_h"}
SUPPORTED_MODEL_TYPES = tuple(sorted(_GDN_TYPES | _MLA_TYPES | _DENSE_TYPES | _SLIDING_TYPES | _MAMBA_TYPES))


def bundled_models() -> list[str]:
    """Names accepted by :func:`load_model` without a path."""
    root = models_dir()
    return sorted(p.parent.name for p in root.glob("*/config.json"))


def resolve_config_path(name_or_path: str | Path) -> Path:
    """A bundled name, a folder holding ``config.json``, or the file itself."""
    text = str(name_or_path)
    candidate = Path(text)
    if candidate.is_file():
        return candidate
    if candidate.is_dir():
        inner = candidate / "config.json"
        if inner.is_file():
            return inner
        raise InputError(candidate, "config.json", "folder has no config.json")
    bundled = models_dir() / text / "config.json"
    if bundled.is_file():
        return bundled
    known = ", ".join(bundled_models()) or "none"
    raise InputError(text, "model", f"no such file, folder or bundled model (bundled: {known})")


def load_model(name_or_path: str | Path) -> ModelSpec:
    path = resolve_config_path(name_or_path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise InputError(path, "config.json", "not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise InputError(path, "config.json", f"not valid JSON (line {exc.lineno}: {exc.msg})") from None
    except OSError as exc:
        raise InputError(path, "config.json", f"unreadable: {exc.strerror}") from None
    if not isinstance(raw, dict):
        raise InputError(path, "config.json", "top level must be a JSON object")
    name = path.parent.name if path.name == "config.json" else path.stem
    return spec_from_config(raw, source=str(path), name=name)


class _Config:
    """Typed access to one config dict, every failure naming the file and the field."""

    def __init__(self, raw: dict[str, Any], source: str) -> None:
        text = raw.get("text_config")
        # Multimodal wrappers (Qwen3.5) keep the language model under text_config.
        self.raw = {**raw, **text} if isinstance(text, dict) else raw
        self.source = source

    def has(self, key: str) -> bool:
        return self.raw.get(key) is not None

    def int(self, key: str, default: int | None = None, *, minimum: int = 1) -> int:
        value = self.raw.get(key, default)
        if value is None:
            raise InputError(self.source, key, "missing")
        if isinstance(value, bool) or not isinstance(value, int):
            raise InputError(self.source, key, f"must be a whole number, got {value!r}")
        if value < minimum:
            raise InputError(self.source, key, f"must be >= {minimum}, got {value}")
        return value

    def opt_int(self, key: str, *, minimum: int = 1) -> int | None:
        return self.int(key, minimum=minimum) if self.has(key) else None

    def str(self, key: str, default: str | None = None) -> str:
        value = self.raw.get(key, default)
        if not isinstance(value, str):
            raise InputError(self.source, key, "missing" if value is None else f"must be a string, got {value!r}")
        return value

    def layer_types(self, n: int, mapping: dict[str, LayerKind]) -> tuple[LayerKind, ...]:
        """``layer_types``: one known name per layer."""
        types = self.list("layer_types")
        if len(types) != n:
            raise InputError(self.source, "layer_types", f"has {len(types)} entries for {n} layers")
        unknown = sorted({str(t) for t in types} - set(mapping))
        if unknown:
            raise InputError(self.source, "layer_types", f"unknown layer type {unknown[0]!r}")
        return tuple(mapping[t] for t in types)

    def list(self, key: str) -> list[Any]:
        value = self.raw.get(key)
        if not isinstance(value, list):
            raise InputError(self.source, key, "missing" if value is None else "must be a list")
        return value


def spec_from_config(raw: dict[str, Any], *, source: str = "config.json", name: str = "model") -> ModelSpec:
    cfg = _Config(raw, source)
    model_type = cfg.str("model_type")
    archs = raw.get("architectures") or cfg.raw.get("architectures") or [model_type]
    architecture = str(archs[0]) if isinstance(archs, list) and archs else model_type
    family = _family(model_type, cfg)
    hidden = cfg.int("hidden_size")
    dtype = cfg.str("torch_dtype", cfg.raw.get("dtype", "bfloat16"))  # transformers 5 writes "dtype"
    dtype_bytes(dtype, source, "torch_dtype")
    common: dict[str, Any] = dict(
        name=name,
        source=source,
        model_type=model_type,
        architecture=architecture,
        hidden_size=hidden,
        vocab_size=cfg.int("vocab_size"),
        dtype=dtype,
        tie_word_embeddings=bool(cfg.raw.get("tie_word_embeddings", False)),
        max_position_embeddings=cfg.opt_int("max_position_embeddings"),
        extra={"config": raw},
    )
    builder = {
        "gdn": _gdn_hybrid,
        "mla": _mla,
        "dense": _dense,
        "sliding": _dense,
        "mamba": _mamba_hybrid,
    }[family]
    return builder(cfg, common)


def _family(model_type: str, cfg: _Config) -> str:
    if model_type in _GDN_TYPES:
        return "gdn"
    if model_type in _MLA_TYPES:
        return "mla"
    if model_type in _MAMBA_TYPES:
        return "mamba"
    if model_type in _SLIDING_TYPES:
        return "sliding"
    if model_type in _DENSE_TYPES:
        return "mla" if cfg.has("kv_lora_rank") else "dense"
    raise InputError(
        cfg.source,
        "model_type",
        f"unknown architecture {model_type!r}; pdtune understands: {', '.join(SUPPORTED_MODEL_TYPES)}",
    )


def _attention(cfg: _Config, *, output_gate: bool = False, sliding_window: int | None = None) -> AttentionShape:
    heads = cfg.int("num_attention_heads")
    kv = cfg.int("num_key_value_heads", heads)
    if heads % kv:
        raise InputError(cfg.source, "num_key_value_heads", f"{kv} does not divide num_attention_heads {heads}")
    head_dim = cfg.raw.get("head_dim")
    if head_dim is None:
        hidden = cfg.int("hidden_size")
        if hidden % heads:
            raise InputError(cfg.source, "head_dim", "missing, and hidden_size is not a multiple of num_attention_heads")
        head_dim = hidden // heads
    else:
        head_dim = cfg.int("head_dim")
    return AttentionShape(heads, kv, head_dim, output_gate, sliding_window)


def _moe(cfg: _Config, *, experts_key: str = "num_experts") -> MoEShape | None:
    if not cfg.has(experts_key):
        return None
    experts = cfg.int(experts_key, minimum=0)
    if experts == 0:
        return None
    shared = 0
    if cfg.has("shared_expert_intermediate_size"):
        shared = cfg.int("shared_expert_intermediate_size", minimum=0)
    elif cfg.has("n_shared_experts"):
        shared = cfg.int("n_shared_experts", minimum=0) * cfg.int("moe_intermediate_size")
    return MoEShape(
        num_experts=experts,
        experts_per_token=cfg.int("num_experts_per_tok"),
        expert_intermediate_size=cfg.int("moe_intermediate_size") if cfg.has("moe_intermediate_size")
        else cfg.int("intermediate_size"),
        shared_intermediate_size=shared,
        shared_expert_gate=shared > 0 and cfg.raw.get("model_type", "").startswith("qwen"),
    )


def _weights(cfg: _Config, dtype: str) -> WeightFormat:
    """Bytes per parameter per weight class, from ``quantization_config``.

    Block-scaled formats carry their scales: FP8 with 128x128 fp32 block scales (DeepSeek-V3) costs
    1 + 4/16384 B; NVFP4 (4-bit values, one fp8 scale per 16) 9/16 B; MXFP4 (one e8m0 scale per 32) 17/32 B.
    """
    base = Fraction(dtype_bytes(dtype, cfg.source, "torch_dtype"))
    q = cfg.raw.get("quantization_config")
    if not isinstance(q, dict):
        return WeightFormat(base, base, base, name=dtype)
    method = str(q.get("quant_method", "")).lower()
    algo = str(q.get("quant_algo", "")).upper()
    if method == "fp8":
        block = q.get("weight_block_size") or [128, 128]
        per = Fraction(1) + Fraction(4, int(block[0]) * int(block[1]))
        return WeightFormat(per, per, base, name="fp8-block")
    if method == "mxfp4":
        # gpt-oss: only the routed experts are MXFP4; attention, router and embeddings stay bf16.
        return WeightFormat(base, Fraction(17, 32), base, name="mxfp4-experts")
    if method == "modelopt" and algo == "NVFP4" or method == "nvfp4":
        experts_only = bool(q.get("experts_only", False)) or bool(q.get("exclude_modules"))
        nvfp4 = Fraction(9, 16)
        return WeightFormat(base if experts_only else nvfp4, nvfp4, base, name="nvfp4")
    raise InputError(cfg.source, "quantization_config.quant_method", f"unsupported quantization {method or algo!r}")


def _mtp_layers(cfg: _Config, default: int = 0) -> int:
    for key in ("num_nextn_predict_layers", "mtp_num_hidden_layers"):
        if cfg.has(key):
            return cfg.int(key, minimum=0)
    return default


def _dense(cfg: _Config, common: dict[str, Any]) -> ModelSpec:
    n = cfg.int("num_hidden_layers")
    window = cfg.opt_int("sliding_window")
    kinds: tuple[LayerKind, ...]
    if cfg.has("layer_types"):
        kinds = cfg.layer_types(
            n, {"full_attention": LayerKind.FULL_ATTENTION, "sliding_attention": LayerKind.SLIDING_ATTENTION}
        )
        if LayerKind.SLIDING_ATTENTION in kinds and window is None:
            raise InputError(cfg.source, "sliding_window", "missing, but layer_types has sliding_attention layers")
    else:
        kinds = (LayerKind.FULL_ATTENTION,) * n
    moe = _moe(cfg, experts_key="num_local_experts" if cfg.has("num_local_experts") else "num_experts")
    return ModelSpec(
        **common,
        layer_kinds=kinds,
        weights=_weights(cfg, common["dtype"]),
        attention=_attention(cfg, sliding_window=window if LayerKind.SLIDING_ATTENTION in kinds else None),
        moe=moe,
        moe_layers=(moe is not None,) * n,
        intermediate_size=cfg.int("intermediate_size") if moe is None else 0,
        num_mtp_layers=_mtp_layers(cfg),
    )


def _mla(cfg: _Config, common: dict[str, Any]) -> ModelSpec:
    n = cfg.int("num_hidden_layers")
    mla = MLAShape(
        num_heads=cfg.int("num_attention_heads"),
        kv_lora_rank=cfg.int("kv_lora_rank"),
        qk_rope_head_dim=cfg.int("qk_rope_head_dim"),
        qk_nope_head_dim=cfg.int("qk_nope_head_dim"),
        v_head_dim=cfg.int("v_head_dim"),
        q_lora_rank=cfg.opt_int("q_lora_rank"),
    )
    moe = _moe(cfg, experts_key="n_routed_experts")
    first_dense = cfg.int("first_k_dense_replace", 0, minimum=0) if moe else n
    step = cfg.int("moe_layer_freq", 1) if moe else 1
    moe_layers = tuple(moe is not None and i >= first_dense and i % step == 0 for i in range(n))
    return ModelSpec(
        **common,
        layer_kinds=(LayerKind.MLA,) * n,
        weights=_weights(cfg, common["dtype"]),
        mla=mla,
        moe=moe,
        moe_layers=moe_layers,
        intermediate_size=cfg.int("intermediate_size"),
        num_mtp_layers=_mtp_layers(cfg),
    )


def _gdn_hybrid(cfg: _Config, common: dict[str, Any]) -> ModelSpec:
    n = cfg.int("num_hidden_layers")
    if cfg.has("layer_types"):
        kinds = cfg.layer_types(n, {"full_attention": LayerKind.FULL_ATTENTION, "linear_attention": LayerKind.GDN})
    elif cfg.has("full_attention_interval"):
        every = cfg.int("full_attention_interval")
        # Qwen3-Next puts full attention last in every block of `every` layers.
        kinds = tuple(LayerKind.FULL_ATTENTION if (i + 1) % every == 0 else LayerKind.GDN for i in range(n))
    else:
        raise InputError(cfg.source, "layer_types", "missing (and no full_attention_interval either)")
    gdn = GDNShape(
        num_k_heads=cfg.int("linear_num_key_heads"),
        num_v_heads=cfg.int("linear_num_value_heads"),
        head_k_dim=cfg.int("linear_key_head_dim"),
        head_v_dim=cfg.int("linear_value_head_dim"),
        conv_kernel=cfg.int("linear_conv_kernel_dim"),
    )
    if gdn.num_v_heads % gdn.num_k_heads:
        raise InputError(cfg.source, "linear_num_value_heads", "must be a multiple of linear_num_key_heads")
    moe = _moe(cfg)
    sparse_step = cfg.int("decoder_sparse_step", 1)
    mlp_only = set(cfg.raw.get("mlp_only_layers") or [])
    moe_layers = tuple(moe is not None and i not in mlp_only and (i + 1) % sparse_step == 0 for i in range(n))
    ssm_dtype = cfg.raw.get("mamba_ssm_dtype")
    if ssm_dtype is not None:
        dtype_bytes(str(ssm_dtype), cfg.source, "mamba_ssm_dtype")
    return ModelSpec(
        **common,
        layer_kinds=kinds,
        weights=_weights(cfg, common["dtype"]),
        attention=_attention(cfg, output_gate=bool(cfg.raw.get("attn_output_gate", True))),
        gdn=gdn,
        moe=moe,
        moe_layers=moe_layers,
        intermediate_size=cfg.int("intermediate_size") if not all(moe_layers) else 0,
        mamba_ssm_dtype=str(ssm_dtype) if ssm_dtype is not None else None,
        # Qwen3-Next/3.5 checkpoints ship one MTP layer; vLLM assumes 1 when the config does not say.
        num_mtp_layers=_mtp_layers(cfg, default=1),
    )


def _mamba_hybrid(cfg: _Config, common: dict[str, Any]) -> ModelSpec:
    n = cfg.int("num_hidden_layers")
    pattern = cfg.str("hybrid_override_pattern")
    if len(pattern) != n:
        raise InputError(cfg.source, "hybrid_override_pattern", f"has {len(pattern)} symbols for {n} layers")
    mapping = {"M": LayerKind.MAMBA2, "*": LayerKind.FULL_ATTENTION, "-": LayerKind.MLP, "E": LayerKind.MLP}
    bad = sorted(set(pattern) - set(mapping))
    if bad:
        raise InputError(cfg.source, "hybrid_override_pattern", f"unknown layer symbol(s) {''.join(bad)!r}")
    mamba = Mamba2Shape(
        num_heads=cfg.int("mamba_num_heads"),
        head_dim=cfg.int("mamba_head_dim"),
        n_groups=cfg.int("n_groups"),
        state_size=cfg.int("ssm_state_size"),
        conv_kernel=cfg.int("conv_kernel"),
        chunk_size=cfg.int("chunk_size", cfg.raw.get("mamba_chunk_size", 2048)),
    )
    moe = _moe(cfg, experts_key="n_routed_experts") if "E" in pattern else None
    common = {**common, "extra": {**common["extra"], "pattern": pattern}}
    return ModelSpec(
        **common,
        layer_kinds=tuple(mapping[c] for c in pattern),
        weights=_weights(cfg, common["dtype"]),
        attention=_attention(cfg) if "*" in pattern else None,
        mamba=mamba,
        moe=moe,
        moe_layers=tuple(c == "E" for c in pattern),
        intermediate_size=cfg.int("intermediate_size"),
        mlp_gated=str(cfg.raw.get("mlp_hidden_act", "silu")) not in ("relu2", "relu", "gelu"),
        mamba_ssm_cache_dtype_default=str(cfg.raw.get("mamba_ssm_cache_dtype", "float32")),
        num_mtp_layers=_mtp_layers(cfg),
    )
