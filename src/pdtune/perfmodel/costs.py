"""What one token costs a model, layer by layer: matmul FLOPs, weight bytes, attention and recurrent work.

Everything here is a property of the model alone (no GPU, no topology). The matmul parameters come from
:func:`pdtune.paramcount.count_parameters`, so the bytes a GPU streams are the same bytes the memory waterfall
loads; the per-layer split divides each component's total over the layers that carry it.

The non-matmul work per layer:

* attention, per (query token, key token) pair: ``4 * heads * head_dim`` FLOPs (``Q K^T`` and ``P V``); MLA in
  prefill runs un-absorbed (``2 * heads * (qk_dim + v_dim)``) and in decode absorbed into the latent
  (``2 * heads * (2 * kv_lora_rank + rope_dim)``);
* GatedDeltaNet, per token and value head: ``6 * dk * dv`` for the recurrent update (``S k``, the rank-1
  update and ``q S``) plus, in chunked prefill, ``(6 * dk + 4 * dv) * C`` for the intra-chunk terms (chunk
  ``C = 64``, as the FLA kernels use): the linear term that replaces attention's ``S^2``;
* Mamba2 likewise with ``head_dim`` x ``state_size`` states and the config's chunk size.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from functools import cache

from pdtune.model import LayerKind, ModelSpec
from pdtune.paramcount import ParameterCount, count_parameters
from pdtune.precision import math_format

#: GatedDeltaNet chunk length of the chunked prefill kernels (``chunk_gated_delta_rule``, BT = 64).
GDN_CHUNK = 64


@dataclass(frozen=True)
class LayerCost:
    """One decoder layer: its matmul parameters and the bytes they occupy (whole model, before sharding)."""

    kind: LayerKind
    dense_params: int  # mixer projections, dense MLP, shared experts, router: sharded by TP
    dense_bytes: int
    moe: bool


@dataclass(frozen=True)
class ModelCosts:
    """Per-token work of a :class:`ModelSpec`; build with :func:`model_costs`."""

    name: str
    hidden: int
    vocab: int
    layers: tuple[LayerCost, ...]
    dense_dtype: str
    # routed experts
    num_experts: int
    experts_per_token: int
    expert_params: int  # one expert
    expert_bytes: int  # one expert, with its block scales
    expert_dtype: str
    # vocabulary
    lm_head_params: int
    lm_head_bytes: int
    embedding_bytes: int  # input embedding (memory only: a lookup, not a matmul)
    # attention core, per (query, key) pair per attention layer
    attn_pair_flops_prefill: int
    attn_pair_flops_decode: int
    attention_heads: int
    # recurrent core, per token per recurrent layer (all heads)
    recurrent_flops_prefill: int
    recurrent_flops_decode: int
    recurrent_heads: int  # value heads (GDN) or heads (Mamba2): what TP divides
    # MTP draft module (one pass over one token)
    mtp_dense_params: int
    mtp_dense_bytes: int
    mtp_moe: bool

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @property
    def num_moe_layers(self) -> int:
        return sum(1 for layer in self.layers if layer.moe)

    def count(self, kind: LayerKind) -> int:
        return sum(1 for layer in self.layers if layer.kind is kind)

    @property
    def attention_layers(self) -> int:
        return sum(1 for layer in self.layers if layer.kind.is_attention)

    @property
    def recurrent_layers(self) -> int:
        return sum(1 for layer in self.layers if layer.kind.is_recurrent)

    @property
    def dense_params(self) -> int:
        return sum(layer.dense_params for layer in self.layers)

    @property
    def active_params_per_token(self) -> int:
        """Matmul parameters one token multiplies through: dense layers, k experts per MoE layer, lm_head."""
        return (
            self.dense_params
            + self.num_moe_layers * self.experts_per_token * self.expert_params
            + self.lm_head_params
        )


def _split(total: int, n: int) -> list[int]:
    """``total`` over ``n`` layers, remainders to the first ones, so the sum is exact."""
    base, extra = divmod(total, n)
    return [base + (1 if i < extra else 0) for i in range(n)]


@cache
def model_costs(spec: ModelSpec) -> ModelCosts:
    params = count_parameters(spec)
    main = params.main
    fmt = spec.weights
    h = spec.hidden_size
    kinds = spec.layer_kinds
    n = len(kinds)
    moe_flags = tuple(spec.moe_layers) if spec.moe_layers else (False,) * n

    # Each component lives in the layers of its kind; divide its total over them.
    per_layer = [0] * n
    bytes_per_layer = [Fraction(0)] * n

    def spread(count: int, members: list[int], per_param: Fraction) -> None:
        if not members or not count:
            return
        for i, share in zip(members, _split(count, len(members)), strict=True):
            per_layer[i] += share
            bytes_per_layer[i] += share * per_param

    attn_layers = [i for i, k in enumerate(kinds) if k.is_attention]
    spread(main.attention + main.attention_kv, attn_layers, fmt.dense)
    spread(main.gdn, [i for i, k in enumerate(kinds) if k is LayerKind.GDN], fmt.dense)
    spread(main.mamba, [i for i, k in enumerate(kinds) if k is LayerKind.MAMBA2], fmt.dense)
    moe_members = [i for i in range(n) if moe_flags[i]]
    dense_mlp_members = [
        i
        for i in range(n)
        if not moe_flags[i] and (spec.model_type != "nemotron_h" or kinds[i] is LayerKind.MLP)
    ]
    spread(main.dense_mlp, dense_mlp_members, fmt.dense)
    spread(main.shared_experts, moe_members, fmt.dense)
    spread(main.router, moe_members, fmt.embedding)
    layers = tuple(
        LayerCost(kinds[i], per_layer[i], int(bytes_per_layer[i]), moe_flags[i] and spec.moe is not None)
        for i in range(n)
    )

    moe = spec.moe
    expert_params = main.experts // (moe.num_experts * max(1, len(moe_members))) if moe and moe_members else 0
    lm_head = spec.vocab_size * h
    embedding_bytes = int(spec.vocab_size * h * fmt.embedding)

    attn_prefill = attn_decode = heads = 0
    if spec.mla is not None:
        m = spec.mla
        heads = m.num_heads
        attn_prefill = 2 * m.num_heads * (m.qk_nope_head_dim + m.qk_rope_head_dim + m.v_head_dim)
        attn_decode = 2 * m.num_heads * (2 * m.kv_lora_rank + m.qk_rope_head_dim)
    elif spec.attention is not None:
        a = spec.attention
        heads = a.num_heads
        attn_prefill = attn_decode = 4 * a.num_heads * a.head_dim

    rec_prefill = rec_decode = rec_heads = 0
    if spec.gdn is not None:
        g = spec.gdn
        rec_heads = g.num_v_heads
        state = 6 * g.head_k_dim * g.head_v_dim
        chunk = (6 * g.head_k_dim + 4 * g.head_v_dim) * GDN_CHUNK
        conv = 2 * g.conv_kernel * g.conv_dim // g.num_v_heads  # per head share of the causal conv
        rec_decode = g.num_v_heads * (state + conv)
        rec_prefill = g.num_v_heads * (state + chunk + conv)
    elif spec.mamba is not None:
        mb = spec.mamba
        rec_heads = mb.num_heads
        state = 6 * mb.head_dim * mb.state_size
        chunk = 4 * mb.chunk_size * (mb.head_dim + mb.state_size)
        rec_decode = mb.num_heads * state
        rec_prefill = mb.num_heads * (state + chunk)

    mtp: ParameterCount = params.mtp
    mtp_dense = mtp.total - mtp.experts - mtp.norms
    mtp_dense_bytes = int(mtp_dense * fmt.dense)

    return ModelCosts(
        name=spec.name,
        hidden=h,
        vocab=spec.vocab_size,
        layers=layers,
        dense_dtype=math_format(fmt, "dense"),
        num_experts=moe.num_experts if moe else 0,
        experts_per_token=moe.experts_per_token if moe else 0,
        expert_params=expert_params,
        expert_bytes=int(expert_params * fmt.experts),
        expert_dtype=math_format(fmt, "experts"),
        lm_head_params=lm_head,
        lm_head_bytes=int(lm_head * fmt.embedding),
        embedding_bytes=embedding_bytes,
        attn_pair_flops_prefill=attn_prefill,
        attn_pair_flops_decode=attn_decode,
        attention_heads=heads,
        recurrent_flops_prefill=rec_prefill,
        recurrent_flops_decode=rec_decode,
        recurrent_heads=rec_heads,
        mtp_dense_params=mtp_dense,
        mtp_dense_bytes=mtp_dense_bytes,
        mtp_moe=spec.num_mtp_layers > 0 and moe is not None,
    )


def pp_partition(num_layers: int, pp: int) -> list[int]:
    """Layers per pipeline stage, as vLLM's ``get_pp_indices`` splits them.

    The remainder goes to the stages before the last, counting back from the second-to-last (the last
    stage holds the final norm and the lm_head).
    """
    base, remaining = divmod(num_layers, pp)
    parts = [base] * pp
    for i in range(2, remaining + 2):
        parts[-i] += 1
    return parts


def stage_layers(num_layers: int, pp: int) -> list[range]:
    """Layer index ranges of each pipeline stage."""
    out, start = [], 0
    for size in pp_partition(num_layers, pp):
        out.append(range(start, start + size))
        start += size
    return out
