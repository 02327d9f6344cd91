"""What pdtune keeps of a model: the layer stack, each layer's state shape, and its weights.

Every class here is a small frozen record built by :mod:`pdtune.model.families` from a ``config.json``;
the state planner (:mod:`pdtune.state`) and the parameter count (:mod:`pdtune.paramcount`) read them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from fractions import Fraction
from typing import Any

from pdtune.errors import InputError


class LayerKind(StrEnum):
    """What a layer keeps per request: the kind of its KV cache spec in vLLM."""

    FULL_ATTENTION = "full_attention"
    SLIDING_ATTENTION = "sliding_attention"
    CHUNKED_ATTENTION = "chunked_attention"  # llama4 chunked local attention (ChunkedLocalAttentionSpec)
    MLA = "mla"
    GDN = "gdn"  # GatedDeltaNet linear attention: conv + SSM state per request
    MAMBA2 = "mamba2"
    MAMBA1 = "mamba1"  # Jamba's selective scan: conv + (d_inner, d_state) state
    KDA = "kda"  # Kimi Delta Attention: one conv over q, k, v and a per-head recurrent state
    LINEAR_ATTENTION = "linear_attention"  # lightning-style linear attention: one (d, d) state per head
    SHORT_CONV = "short_conv"  # LFM2's gated short convolution: a conv window only
    ATTENTION_MAMBA2 = "attention_mamba2"  # Falcon-H1: attention and Mamba2 side by side in one layer
    MLP = "mlp"  # no cache at all (Nemotron-H's '-' and 'E' layers)

    @property
    def is_attention(self) -> bool:
        return self in (LayerKind.FULL_ATTENTION, LayerKind.SLIDING_ATTENTION, LayerKind.CHUNKED_ATTENTION,
                        LayerKind.MLA)

    @property
    def is_recurrent(self) -> bool:
        """The layer keeps a fixed-size state per request (a vLLM ``MambaSpec``)."""
        return self in _RECURRENT

    @property
    def label(self) -> str:
        """The kind in words, as tables print it."""
        return _LABELS[self]


_RECURRENT = frozenset({LayerKind.GDN, LayerKind.MAMBA2, LayerKind.MAMBA1, LayerKind.KDA,
                        LayerKind.LINEAR_ATTENTION, LayerKind.SHORT_CONV})
_LABELS = {
    LayerKind.FULL_ATTENTION: "full attention",
    LayerKind.SLIDING_ATTENTION: "sliding-window attention",
    LayerKind.CHUNKED_ATTENTION: "chunked local attention",
    LayerKind.MLA: "MLA",
    LayerKind.GDN: "GDN",
    LayerKind.MAMBA2: "Mamba2",
    LayerKind.MAMBA1: "Mamba1",
    LayerKind.KDA: "KDA",
    LayerKind.LINEAR_ATTENTION: "linear attention",
    LayerKind.SHORT_CONV: "short conv",
    LayerKind.ATTENTION_MAMBA2: "attention + Mamba2",
    LayerKind.MLP: "MLP",
}

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
    head_dim_v: int | None = None  # when V is narrower than K (MiMo-V2-Flash: K 192, V 128)

    @property
    def v_head_dim(self) -> int:
        return self.head_dim if self.head_dim_v is None else self.head_dim_v


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
class IndexerShape:
    """DeepSeek-V3.2's lightning indexer: one fp8 key of ``head_dim`` plus fp32 scales per token."""

    num_heads: int
    head_dim: int
    topk: int
    quant_block: int = 128  # Indexer.quant_block_size in vLLM's deepseek_v2.py

    @property
    def bytes_per_token(self) -> int:
        """``index_head_dim + index_head_dim // 128 * 4``: 128 fp8 values and one fp32 scale = 132 B."""
        return self.head_dim + self.head_dim // self.quant_block * 4


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
    intermediate: int | None = None  # mamba_d_ssm when a config names it (Falcon-H1); else heads x head_dim

    @property
    def intermediate_size(self) -> int:
        return self.intermediate if self.intermediate is not None else self.num_heads * self.head_dim


@dataclass(frozen=True)
class Mamba1Shape:
    """Mamba1 (Jamba): conv over ``d_inner`` channels and a ``(d_inner, d_state)`` state."""

    intermediate_size: int  # mamba_expand x hidden_size
    state_size: int
    conv_kernel: int
    dt_rank: int


@dataclass(frozen=True)
class KDAShape:
    """Kimi Delta Attention (Kimi-Linear): conv over q, k, v and a (head_dim, head_dim) state per head."""

    num_heads: int
    head_dim: int
    conv_kernel: int

    @property
    def conv_dim(self) -> int:
        """``num_heads * head_dim`` for v plus the same twice for q and k (kda_state_shape)."""
        return 3 * self.num_heads * self.head_dim


@dataclass(frozen=True)
class ShortConvShape:
    """LFM2's short convolution: a window of ``L_cache - 1`` rows of ``conv_dim`` channels."""

    conv_dim: int
    l_cache: int


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
class CacheLayer:
    """One vLLM layer that keeps per-request state (one ``KVCacheSpec`` in ``get_kv_cache_spec``).

    ``index`` is the decoder layer it belongs to; Falcon-H1 has two per decoder layer (attention and
    Mamba2), DeepSeek-V3.2 two (the MLA latent and the indexer key). ``window`` is the sliding window or
    the attention chunk in tokens.
    """

    index: int
    kind: LayerKind
    window: int | None = None
    indexer: bool = False  # the DeepSeek-V3.2 indexer's key cache beside an MLA layer


@dataclass(frozen=True)
class MaxLength:
    """The longest ``max_model_len`` vLLM accepts for a config (``_get_and_verify_max_len``)."""

    tokens: int  # the derived length, after RoPE scaling
    key: str  # the config field it came from, for error messages
    model_max_length: int | None = None  # a larger user value is allowed up to this (Command-R style)
    assumed: bool = False  # no length field at all: vLLM assumes 2048 and warns


@dataclass(frozen=True)
class ModelSpec:
    """Everything pdtune needs from a ``config.json``; built by :func:`pdtune.model.load_model`."""

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
    # Added for the layouts beyond the first five families:
    mamba1: Mamba1Shape | None = None
    kda: KDAShape | None = None
    short_conv: ShortConvShape | None = None
    indexer: IndexerShape | None = None
    explicit_cache_layers: tuple[CacheLayer, ...] | None = None  # when layer_kinds alone do not say it
    kv_shared_layers: tuple[int, ...] = ()  # layers reading another layer's KV (gemma3n): no cache
    attention_chunk_size: int | None = None  # model_config.attention_chunk_size (llama4)
    max_length: MaxLength | None = None
    kv_cache_quant_algo: str | None = None  # what --kv-cache-dtype auto resolves to (modelopt checkpoints)
    text_model_type: str | None = None  # the language model's model_type inside a multimodal wrapper
    total_attention_heads: int = 0  # the config's num_attention_heads (0 when it has none), what vLLM checks TP on
    sliding_attention: AttentionShape | None = None  # the sliding layers' own, when not ``attention`` (MiMo)

    @property
    def num_layers(self) -> int:
        return len(self.layer_kinds)

    def attention_for(self, kind: LayerKind) -> AttentionShape | None:
        """The GQA shape of a layer of ``kind``: the sliding layers' own where the model has one
        (MiMo-V2-Flash's sliding layers have 8 KV heads, its full layers 4), else ``attention``."""
        if kind is LayerKind.SLIDING_ATTENTION and self.sliding_attention is not None:
            return self.sliding_attention
        return self.attention

    def count(self, kind: LayerKind) -> int:
        return sum(1 for k in self.layer_kinds if k is kind)

    @property
    def cache_layers(self) -> tuple[CacheLayer, ...]:
        """The layers vLLM gives a KV cache spec, in layer order (draft layers not included)."""
        if self.explicit_cache_layers is not None:
            return self.explicit_cache_layers
        out: list[CacheLayer] = []
        shared = set(self.kv_shared_layers)
        for i, kind in enumerate(self.layer_kinds):
            if kind is LayerKind.MLP or i in shared:
                continue
            window = None
            if kind is LayerKind.SLIDING_ATTENTION and self.attention is not None:
                window = self.attention.sliding_window
            elif kind is LayerKind.CHUNKED_ATTENTION:
                window = self.attention_chunk_size
            out.append(CacheLayer(i, kind, window))
        return tuple(out)

    @property
    def is_hybrid(self) -> bool:
        """Some layer keeps a recurrent state (vLLM's ``model_config.is_hybrid``)."""
        return any(layer.kind.is_recurrent for layer in self.cache_layers)

    @property
    def recurrent_kind(self) -> LayerKind | None:
        kinds = {layer.kind for layer in self.cache_layers if layer.kind.is_recurrent}
        return next(iter(kinds)) if len(kinds) == 1 else None

    @property
    def attention_kind(self) -> LayerKind:
        """The kind of the model's full-context attention layers (what an MTP layer adds)."""
        return LayerKind.MLA if self.mla is not None else LayerKind.FULL_ATTENTION

    @property
    def dtype_bytes(self) -> int:
        return dtype_bytes(self.dtype, self.source, "torch_dtype")

    def kinds_summary(self) -> str:
        parts = [f"{self.count(k)} {k.value}" for k in LayerKind if self.count(k)]
        if self.kv_shared_layers:
            parts.append(f"{len(self.kv_shared_layers)} sharing an earlier layer's KV")
        return ", ".join(parts)
