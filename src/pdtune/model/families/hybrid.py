"""Decoders that mix attention with a recurrent state: GatedDeltaNet (Qwen3-Next/3.5), Mamba2 (Nemotron-H,
Granite-4.0-H, and Falcon-H1 with both in every layer), Mamba1 (Jamba), Kimi Delta Attention (Kimi-Linear,
with MLA) and LFM2's short convolution.

Each state shape is read the way the model's ``get_mamba_state_shape_from_config`` in vLLM 0.33 reads it
(``model_executor/models/<family>.py`` and ``layers/mamba/mamba_utils.py``); see :mod:`pdtune.state.specs`
for the shapes themselves.
"""

from __future__ import annotations

from typing import Any

from pdtune import limits
from pdtune.errors import InputError, brief
from pdtune.model.config import Config
from pdtune.model.families.common import attention_shape, moe_shape, mtp_layers, weight_format
from pdtune.model.families.mla import mla_shape
from pdtune.model.spec import (
    CacheLayer,
    GDNShape,
    KDAShape,
    LayerKind,
    Mamba1Shape,
    Mamba2Shape,
    ModelSpec,
    ShortConvShape,
    dtype_bytes,
)


def gdn(cfg: Config, common: dict[str, Any], family: str) -> ModelSpec:
    n = cfg.int("num_hidden_layers")
    if cfg.has("layer_types"):
        kinds = cfg.layer_types(n, {"full_attention": LayerKind.FULL_ATTENTION, "linear_attention": LayerKind.GDN})
    elif cfg.has("full_attention_interval"):
        every = cfg.int("full_attention_interval")
        # Qwen3-Next puts full attention last in every block of `every` layers.
        kinds = tuple(LayerKind.FULL_ATTENTION if (i + 1) % every == 0 else LayerKind.GDN for i in range(n))
    else:
        raise InputError(cfg.source, "layer_types", "missing (and no full_attention_interval either)")
    shape = GDNShape(
        num_k_heads=cfg.int("linear_num_key_heads"),
        num_v_heads=cfg.int("linear_num_value_heads"),
        head_k_dim=cfg.int("linear_key_head_dim"),
        head_v_dim=cfg.int("linear_value_head_dim"),
        conv_kernel=cfg.int("linear_conv_kernel_dim"),
    )
    if shape.num_v_heads % shape.num_k_heads:
        raise InputError(cfg.source, "linear_num_value_heads", "must be a multiple of linear_num_key_heads")
    # qwen3_next.py builds experts only when num_experts > 0; Qwen3.5-MoE always does (qwen3_5.py)
    moe = moe_shape(cfg, dense_below=1 if family == "qwen3_next" else None)
    sparse_step = cfg.int("decoder_sparse_step", 1)
    mlp_only = cfg.layer_indices("mlp_only_layers", n)
    moe_layers = tuple(moe is not None and i not in mlp_only and (i + 1) % sparse_step == 0 for i in range(n))
    ssm_dtype = cfg.raw.get("mamba_ssm_dtype")
    if ssm_dtype is not None:
        dtype_bytes(str(ssm_dtype), cfg.source, "mamba_ssm_dtype")
    return ModelSpec(
        **common,
        layer_kinds=kinds,
        weights=weight_format(cfg, common["dtype"]),
        attention=attention_shape(cfg, output_gate=bool(cfg.raw.get("attn_output_gate", True))),
        gdn=shape,
        moe=moe,
        moe_layers=moe_layers,
        intermediate_size=cfg.int("intermediate_size") if not all(moe_layers) else 0,
        mamba_ssm_dtype=str(ssm_dtype) if ssm_dtype is not None else None,
        # Qwen3-Next/3.5 checkpoints ship one MTP layer; vLLM assumes 1 when the config does not say.
        num_mtp_layers=mtp_layers(cfg, default=1),
    )


def nemotron_h(cfg: Config, common: dict[str, Any], family: str) -> ModelSpec:
    n = cfg.int("num_hidden_layers")
    pattern = cfg.str("hybrid_override_pattern")
    if len(pattern) != n:
        raise InputError(cfg.source, "hybrid_override_pattern", f"has {len(pattern)} symbols for {n} layers")
    mapping = {"M": LayerKind.MAMBA2, "*": LayerKind.FULL_ATTENTION, "-": LayerKind.MLP, "E": LayerKind.MLP}
    bad = sorted(set(pattern) - set(mapping))
    if bad:
        raise InputError(cfg.source, "hybrid_override_pattern", f"unknown layer symbol(s) {''.join(bad)!r}")
    mamba = _grouped(cfg, Mamba2Shape(
        num_heads=cfg.int("mamba_num_heads"),
        head_dim=cfg.int("mamba_head_dim"),
        n_groups=cfg.int("n_groups"),
        state_size=cfg.int("ssm_state_size"),
        conv_kernel=cfg.int("conv_kernel"),
        chunk_size=cfg.int("chunk_size", cfg.raw.get("mamba_chunk_size", 2048)),
    ), "mamba_num_heads", "n_groups")
    moe = moe_shape(cfg, experts_key="n_routed_experts") if "E" in pattern else None
    common = {**common, "extra": {**common["extra"], "pattern": pattern}}
    return ModelSpec(
        **common,
        layer_kinds=tuple(mapping[c] for c in pattern),
        weights=weight_format(cfg, common["dtype"]),
        attention=attention_shape(cfg) if "*" in pattern else None,
        mamba=mamba,
        moe=moe,
        moe_layers=tuple(c == "E" for c in pattern),
        intermediate_size=cfg.int("intermediate_size"),
        mlp_gated=str(cfg.raw.get("mlp_hidden_act", "silu")) not in ("relu2", "relu", "gelu"),
        mamba_ssm_cache_dtype_default=str(cfg.raw.get("mamba_ssm_cache_dtype", "float32")),
        num_mtp_layers=mtp_layers(cfg),
    )


def _mamba2_from_hf(cfg: Config, intermediate: int) -> Mamba2Shape:
    """Falcon-H1 / Granite-4.0-H fields (``mamba_n_heads``, ``mamba_d_head`` possibly "auto", ...)."""
    heads = cfg.int("mamba_n_heads")
    head = cfg.raw.get("mamba_d_head", "auto")
    if head == "auto":  # FalconH1Config / GraniteMoeHybridConfig: intermediate // mamba_n_heads
        head = intermediate // heads
    else:
        head = limits.whole_number(head, cfg.source, "mamba_d_head", maximum=limits.MAX_WIDTH)
    return _grouped(cfg, Mamba2Shape(
        num_heads=heads,
        head_dim=head,
        n_groups=cfg.int("mamba_n_groups", 1),
        state_size=cfg.int("mamba_d_state"),
        conv_kernel=cfg.int("mamba_d_conv", 4),
        chunk_size=cfg.int("mamba_chunk_size", 256),
        intermediate=intermediate,
    ), "mamba_n_heads", "mamba_n_groups")


def _grouped(cfg: Config, shape: Mamba2Shape, heads_key: str, groups_key: str) -> Mamba2Shape:
    """Mamba2 shares B and C across the heads of a group: the groups split the heads evenly (vLLM 0.33
    ``layers/mamba/mamba_mixer2.py``, ``MambaMixer2``: "n_heads % n_groups == 0" is the invariant its TP
    sharding keeps)."""
    if shape.num_heads % shape.n_groups:
        raise InputError(cfg.source, groups_key, f"{shape.n_groups} groups do not split the {shape.num_heads} "
                                                 f"heads ({heads_key}) evenly")
    return shape


def falcon_h1(cfg: Config, common: dict[str, Any], family: str) -> ModelSpec:
    """Falcon-H1: every decoder layer runs attention and a Mamba2 mixer in parallel (falcon_h1.py), so each
    layer has two cache specs: ``model.layers.i.self_attn.attn`` and ``model.layers.i.mamba``."""
    n = cfg.int("num_hidden_layers")
    # transformers' FalconH1Config (5.16-5.20, what vLLM 0.33 reads): mamba_d_ssm defaults to 1024 when the key
    # is absent; an explicit null means mamba_expand x hidden_size (falcon_h1.py FalconH1SSMDecoderLayer).
    if "mamba_d_ssm" not in cfg.raw:
        intermediate = 1024
    elif cfg.raw["mamba_d_ssm"] is None:
        intermediate = cfg.int("mamba_expand", 2) * cfg.int("hidden_size")
    else:
        intermediate = cfg.int("mamba_d_ssm")
    layers = tuple(CacheLayer(i, kind) for i in range(n) for kind in (LayerKind.FULL_ATTENTION, LayerKind.MAMBA2))
    return ModelSpec(
        **common,
        layer_kinds=(LayerKind.ATTENTION_MAMBA2,) * n,
        weights=weight_format(cfg, common["dtype"]),
        attention=attention_shape(cfg),
        mamba=_mamba2_from_hf(cfg, intermediate),
        moe_layers=(False,) * n,
        intermediate_size=cfg.int("intermediate_size"),
        explicit_cache_layers=layers,
    )


def granite_hybrid(cfg: Config, common: dict[str, Any], family: str) -> ModelSpec:
    """Granite-4.0 (H and the all-attention micro): ``layer_types`` of mamba / attention layers."""
    n = cfg.int("num_hidden_layers")
    mapping = {"mamba": LayerKind.MAMBA2, "linear_attention": LayerKind.MAMBA2,
               "attention": LayerKind.FULL_ATTENTION, "full_attention": LayerKind.FULL_ATTENTION}
    kinds = cfg.layer_types(n, mapping) if cfg.has("layer_types") else (LayerKind.MAMBA2,) * n
    intermediate = cfg.int("mamba_expand", 2) * cfg.int("hidden_size")  # granitemoehybrid.py
    has_mamba = LayerKind.MAMBA2 in kinds
    # granitemoehybrid.py: a MoE block only when num_local_experts > 0 (Granite-4.0-H-Micro is dense)
    moe = moe_shape(cfg, experts_key="num_local_experts", expert_size_key="intermediate_size", dense_below=1)
    return ModelSpec(
        **common,
        layer_kinds=kinds,
        weights=weight_format(cfg, common["dtype"]),
        attention=attention_shape(cfg) if LayerKind.FULL_ATTENTION in kinds else None,
        mamba=_mamba2_from_hf(cfg, intermediate) if has_mamba else None,
        moe=moe,
        moe_layers=(moe is not None,) * n,
        intermediate_size=cfg.int("shared_intermediate_size", cfg.raw.get("intermediate_size")) if moe is None else 0,
    )


def jamba(cfg: Config, common: dict[str, Any], family: str) -> ModelSpec:
    """Jamba: attention every ``attn_layer_period`` layers from ``attn_layer_offset`` (JambaConfig's
    ``layers_block_type``), Mamba1 elsewhere; MoE every ``expert_layer_period`` from ``expert_layer_offset``."""
    n = cfg.int("num_hidden_layers")
    period, offset = cfg.int("attn_layer_period", 8), cfg.int("attn_layer_offset", 4, minimum=0)
    if offset >= period:
        raise InputError(cfg.source, "attn_layer_offset", f"{offset} must be smaller than attn_layer_period {period}")
    kinds = tuple(LayerKind.FULL_ATTENTION if i % period == offset else LayerKind.MAMBA1 for i in range(n))
    e_period, e_offset = cfg.int("expert_layer_period", 2), cfg.int("expert_layer_offset", 1, minimum=0)
    # jamba.py: a MoE block where the layer's experts number more than 1, a dense MLP otherwise
    moe = moe_shape(cfg, expert_size_key="intermediate_size", dense_below=2)
    hidden = cfg.int("hidden_size")
    return ModelSpec(
        **common,
        layer_kinds=kinds,
        weights=weight_format(cfg, common["dtype"]),
        attention=attention_shape(cfg),
        mamba1=Mamba1Shape(
            intermediate_size=cfg.int("mamba_expand", 2) * hidden,
            state_size=cfg.int("mamba_d_state", 16),
            conv_kernel=cfg.int("mamba_d_conv", 4),
            dt_rank=cfg.int("mamba_dt_rank", -(-hidden // 16)),
        ),
        moe=moe,
        moe_layers=tuple(moe is not None and i % e_period == e_offset for i in range(n)),
        intermediate_size=cfg.int("intermediate_size"),
    )


def kimi_linear(cfg: Config, common: dict[str, Any], family: str) -> ModelSpec:
    """Kimi-Linear: KDA in ``linear_attn_config.kda_layers`` and MLA in ``full_attn_layers`` (1-based)."""
    n = cfg.int("num_hidden_layers")
    lac = cfg.dict("linear_attn_config")
    kda_layers, full_layers = lac.get("kda_layers"), lac.get("full_attn_layers")
    if isinstance(kda_layers, list) and isinstance(full_layers, list):
        by_layer: dict[int, LayerKind] = {}
        for key, layers, kind in (("full_attn_layers", full_layers, LayerKind.MLA),
                                  ("kda_layers", kda_layers, LayerKind.KDA)):
            for i in layers:
                if isinstance(i, bool) or not isinstance(i, int) or not 1 <= i <= n:
                    raise InputError(cfg.source, f"linear_attn_config.{key}",
                                     f"must hold layer numbers 1 to {n}, got {brief(i)}")
                by_layer[i - 1] = kind
        if sorted(by_layer) != list(range(n)):
            raise InputError(cfg.source, "linear_attn_config.kda_layers",
                             f"kda_layers and full_attn_layers must cover layers 1..{n} once")
        kinds = tuple(by_layer[i] for i in range(n))
    else:  # KimiLinearConfig's default: full attention on every 4th layer after the first
        kinds = tuple(LayerKind.MLA if i and i % 4 == 0 else LayerKind.KDA for i in range(n))
    moe = moe_shape(cfg, top_k_key="num_experts_per_token")
    first_dense = cfg.int("first_k_dense_replace", 0, minimum=0)
    return ModelSpec(
        **common,
        layer_kinds=kinds,
        weights=weight_format(cfg, common["dtype"]),
        mla=mla_shape(cfg),
        kda=KDAShape(num_heads=cfg.int_in("linear_attn_config", "num_heads"),
                     head_dim=cfg.int_in("linear_attn_config", "head_dim"),
                     conv_kernel=cfg.int_in("linear_attn_config", "short_conv_kernel_size", 4)),
        moe=moe,
        moe_layers=tuple(moe is not None and i >= first_dense for i in range(n)),
        intermediate_size=cfg.int("intermediate_size"),
        num_mtp_layers=mtp_layers(cfg),
    )


def lfm2(cfg: Config, common: dict[str, Any], family: str) -> ModelSpec:
    """LFM2: gated short-conv layers and full attention (``layer_types`` of conv / full_attention)."""
    n = cfg.int("num_hidden_layers")
    if cfg.has("layer_types"):
        kinds = cfg.layer_types(n, {"conv": LayerKind.SHORT_CONV, "full_attention": LayerKind.FULL_ATTENTION})
    else:  # Lfm2Config: full attention in full_attn_idxs (every layer when absent)
        full = cfg.layer_indices("full_attn_idxs", n) or set(range(n))
        kinds = tuple(LayerKind.FULL_ATTENTION if i in full else LayerKind.SHORT_CONV for i in range(n))
    moe = moe_shape(cfg) if family == "lfm2_moe" else None
    dense_first = cfg.int("num_dense_layers", 0, minimum=0) if moe else n
    width = cfg.int("block_ff_dim", cfg.raw.get("intermediate_size"))
    return ModelSpec(
        **common,
        layer_kinds=kinds,
        weights=weight_format(cfg, common["dtype"]),
        attention=attention_shape(cfg),
        short_conv=ShortConvShape(conv_dim=cfg.int("conv_dim"),  # lfm2.py reads hf_config.conv_dim
                                  l_cache=cfg.int("conv_L_cache", 3)),
        moe=moe,
        moe_layers=tuple(moe is not None and i >= dense_first for i in range(n)),
        intermediate_size=width,
    )
