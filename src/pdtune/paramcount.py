"""Parameter counts and weight bytes of a :class:`~pdtune.model.ModelSpec`, component by component.

The memory waterfall needs the weights each GPU holds, and that depends on which parts a topology
shards (attention and GDN by TP, experts by EP) and which it replicates (routers, norms). So the count
is kept per component rather than as one total. Projection shapes follow the model code in vLLM
(``qwen3_next.py``, ``deepseek_v2.py``, ``nemotron_h.py``, ``llama.py``, ``gpt_oss.py``); small
vectors (norms, biases, ``A_log``, ``dt_bias``) are counted too so totals match a checkpoint's size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from functools import lru_cache
from fractions import Fraction

from pdtune.model import LayerKind, ModelSpec
from pdtune.units import GiB


@dataclass(frozen=True)
class ParameterCount:
    """Parameters of one model (or one layer), split by what shards them."""

    embedding: int = 0  # token embedding + untied lm_head: vocab-parallel over TP
    attention: int = 0  # full, sliding and MLA attention projections (q, o; MLA all): TP
    attention_kv: int = 0  # GQA k and v projections: TP, but replicated once TP exceeds the KV heads
    gdn: int = 0  # GatedDeltaNet projections, conv, gates: TP
    mamba: int = 0  # Mamba2 mixers: TP
    dense_mlp: int = 0  # dense feed-forward layers: TP
    shared_experts: int = 0  # always-on experts of MoE layers: TP
    experts: int = 0  # routed experts: EP (or TP inside each expert)
    router: int = 0  # expert gates: replicated on every rank
    norms: int = 0  # layer norms and other per-channel vectors: replicated

    def __add__(self, other: ParameterCount) -> ParameterCount:
        return ParameterCount(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    def scaled(self, factor: int) -> ParameterCount:
        return ParameterCount(**{f.name: getattr(self, f.name) * factor for f in fields(self)})

    @property
    def total(self) -> int:
        return sum(getattr(self, f.name) for f in fields(self))

    @property
    def non_expert(self) -> int:
        return self.total - self.experts

    def items(self) -> list[tuple[str, int]]:
        return [(f.name, getattr(self, f.name)) for f in fields(self)]


@dataclass(frozen=True)
class ModelParameters:
    """The whole model: the main stack, the MTP draft layers, and what one token activates."""

    main: ParameterCount
    mtp: ParameterCount
    active_per_token: int  # parameters a decode token touches: all non-expert + top-k experts

    @property
    def total(self) -> int:
        return self.main.total + self.mtp.total


@lru_cache(maxsize=64)  # a spec is frozen: the plan builds hundreds of engines of one model
def count_parameters(spec: ModelSpec) -> ModelParameters:
    h = spec.hidden_size
    embed = spec.vocab_size * h * (1 if spec.tie_word_embeddings else 2)
    main = ParameterCount(embedding=embed, norms=h)  # final norm
    for i, kind in enumerate(spec.layer_kinds):
        main += _layer(spec, i, kind)
    mtp = ParameterCount()
    for _ in range(spec.num_mtp_layers):
        # A DeepSeek/Qwen3-Next MTP module: one decoder layer of the model's attention kind with an MoE
        # block, the [embedding; hidden] -> hidden projection and three norms; it shares the embedding
        # and the lm_head with the main model.
        mtp += _layer(spec, spec.num_layers, spec.attention_kind, moe=spec.moe is not None)
        mtp += ParameterCount(dense_mlp=2 * h * h, norms=3 * h)
    active = main.non_expert
    if spec.moe is not None:
        per_expert = _expert_params(spec)
        active += sum(spec.moe_layers) * spec.moe.experts_per_token * per_expert
    return ModelParameters(main=main, mtp=mtp, active_per_token=active)


def _expert_params(spec: ModelSpec) -> int:
    assert spec.moe is not None
    h, inter = spec.hidden_size, spec.moe.expert_intermediate_size
    gated = 3 if spec.mlp_gated else 2
    per = gated * h * inter
    if spec.model_type == "gpt_oss":
        per += 2 * inter + h  # gpt-oss experts carry biases
    return per


def _layer(spec: ModelSpec, index: int, kind: LayerKind, moe: bool | None = None) -> ParameterCount:
    h = spec.hidden_size
    norms = h if spec.model_type == "nemotron_h" else 2 * h  # Nemotron-H blocks have one pre-norm
    count = ParameterCount(norms=norms)
    if kind is LayerKind.ATTENTION_MAMBA2:  # Falcon-H1: both mixers side by side, then the MLP
        count += _mixer(spec, LayerKind.FULL_ATTENTION) + _mixer(spec, LayerKind.MAMBA2)
    else:
        count += _mixer(spec, kind)
    # Nemotron-H layers are single blocks (a mixer or an MLP); everywhere else a mixer is followed by an FFN.
    if spec.model_type != "nemotron_h" or kind is LayerKind.MLP:
        count += _ffn(spec, index, moe)
    return count


def _mixer(spec: ModelSpec, kind: LayerKind) -> ParameterCount:
    """The token mixer of one layer: attention or a recurrent block (projections, convs, gates, norms)."""
    h = spec.hidden_size
    count = ParameterCount()
    if kind in (LayerKind.FULL_ATTENTION, LayerKind.SLIDING_ATTENTION, LayerKind.CHUNKED_ATTENTION):
        a = spec.attention_for(kind)  # MiMo-V2-Flash's sliding layers have their own heads
        assert a is not None
        q = a.num_heads * a.head_dim
        kv = a.num_kv_heads * a.head_dim
        k_and_v = h * a.num_kv_heads * (a.head_dim + a.v_head_dim)  # V narrower than K where head_dim_v says
        q_and_o = h * q * (2 if a.output_gate else 1) + a.num_heads * a.v_head_dim * h
        extra = 2 * a.head_dim if spec.model_type.startswith("qwen3") else 0  # q_norm, k_norm
        if spec.model_type == "gpt_oss":
            extra += q + 2 * kv + h + a.num_heads  # qkv/o biases and the per-head attention sinks
        count += ParameterCount(attention=q_and_o, attention_kv=k_and_v, norms=extra)
    elif kind is LayerKind.MLA:
        m = spec.mla
        assert m is not None
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        if m.q_lora_rank:
            q = h * m.q_lora_rank + m.q_lora_rank * m.num_heads * qk
            q_norm = m.q_lora_rank
        else:
            q, q_norm = h * m.num_heads * qk, 0
        kv = h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank * m.num_heads * (
            m.qk_nope_head_dim + m.v_head_dim
        )
        out = m.num_heads * m.v_head_dim * h
        count += ParameterCount(attention=q + kv + out, norms=q_norm + m.kv_lora_rank)
        if spec.indexer is not None:  # DeepSeek-V3.2's indexer: wq_b, wk and weights_proj (deepseek_v2.py)
            ix = spec.indexer
            q_in = m.q_lora_rank or h
            count += ParameterCount(attention=q_in * ix.num_heads * ix.head_dim + h * ix.head_dim + h * ix.num_heads,
                                    norms=2 * ix.head_dim)
    elif kind is LayerKind.GDN:
        g = spec.gdn
        assert g is not None
        v = g.num_v_heads * g.head_v_dim
        in_proj = h * (2 * g.num_k_heads * g.head_k_dim + 2 * v) + h * 2 * g.num_v_heads  # qkvz and b, a
        conv = g.conv_dim * g.conv_kernel
        out = v * h
        count += ParameterCount(gdn=in_proj + conv + out, norms=2 * g.num_v_heads + g.head_v_dim)
    elif kind is LayerKind.MAMBA2:
        mb = spec.mamba
        assert mb is not None
        inner = mb.intermediate_size
        conv_dim = inner + 2 * mb.n_groups * mb.state_size
        in_proj = h * (2 * inner + 2 * mb.n_groups * mb.state_size + mb.num_heads)
        conv = conv_dim * mb.conv_kernel + conv_dim  # weights and bias
        count += ParameterCount(mamba=in_proj + conv + inner * h, norms=3 * mb.num_heads + inner)
    elif kind is LayerKind.MAMBA1:
        m1 = spec.mamba1
        assert m1 is not None
        inner, n, r = m1.intermediate_size, m1.state_size, m1.dt_rank
        # in_proj (x and z), conv + bias, x_proj (dt, B, C), dt_proj + bias, A_log, D, out_proj
        params = h * 2 * inner + inner * m1.conv_kernel + inner + inner * (r + 2 * n) + r * inner + inner
        params += inner * n + inner + inner * h
        count += ParameterCount(mamba=params, norms=r + 2 * n)  # Jamba's dt/B/C layernorms
    elif kind is LayerKind.KDA:
        k = spec.kda
        assert k is not None
        width = k.num_heads * k.head_dim
        # q, k, v, o projections, three short convs, the low-rank f and g gates, beta, A_log and dt_bias
        params = 4 * h * width + 3 * width * k.conv_kernel + 2 * (h * k.head_dim + k.head_dim * width)
        params += h * k.num_heads + k.num_heads + width
        count += ParameterCount(gdn=params, norms=k.head_dim)
    elif kind is LayerKind.SHORT_CONV:
        sc = spec.short_conv
        assert sc is not None
        count += ParameterCount(mamba=h * 3 * sc.conv_dim + sc.conv_dim * sc.l_cache + sc.conv_dim * h)
    return count


def _ffn(spec: ModelSpec, index: int, moe: bool | None) -> ParameterCount:
    h = spec.hidden_size
    is_moe = moe if moe is not None else (index < len(spec.moe_layers) and spec.moe_layers[index])
    if is_moe and spec.moe is not None:
        e = spec.moe
        router = h * e.num_experts + (e.num_experts if spec.model_type in ("gpt_oss", "deepseek_v3") else 0)
        shared = 3 * h * e.shared_intermediate_size + (h if e.shared_expert_gate else 0)
        return ParameterCount(experts=e.num_experts * _expert_params(spec), shared_experts=shared, router=router)
    gated = 3 if spec.mlp_gated else 2
    return ParameterCount(dense_mlp=gated * h * spec.intermediate_size)


@dataclass(frozen=True)
class WeightBytes:
    """Bytes of each component once the checkpoint's weight formats are applied."""

    by_component: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.by_component.values())

    @property
    def experts(self) -> int:
        return self.by_component.get("experts", 0)

    @property
    def non_expert(self) -> int:
        return self.total - self.experts

    def gib(self) -> dict[str, float]:
        return {k: v / GiB for k, v in self.by_component.items()}


def weight_bytes(spec: ModelSpec, count: ParameterCount) -> WeightBytes:
    fmt = spec.weights
    per: dict[str, Fraction] = {
        "embedding": fmt.embedding,
        "attention": fmt.dense,
        "attention_kv": fmt.dense,
        "gdn": fmt.dense,
        "mamba": fmt.dense,
        "dense_mlp": fmt.dense,
        "shared_experts": fmt.dense,
        "experts": fmt.experts,
        "router": fmt.embedding,
        "norms": fmt.embedding,
    }
    return WeightBytes({name: math.ceil(n * per[name]) for name, n in count.items()})
