"""Multi-head latent attention: DeepSeek-V2/V3, Kimi-K2 (and K2.5's text model), and DeepSeek-V3.2's sparse
attention, whose lightning indexer keeps its own key cache beside every MLA layer.

vLLM 0.33 (``model_executor/models/deepseek_v2.py``): ``DeepseekV32IndexerCache.get_kv_cache_spec`` is an
``MLAAttentionSpec`` with one head of ``index_head_dim + index_head_dim // 128 * 4`` uint8 elements (the fp8 key
and its fp32 scale), ``cache_role=INDEXER``; a config is V3.2 when it has ``index_topk``.
"""

from __future__ import annotations

from typing import Any

from pdtune.model.config import Config
from pdtune.model.families.common import moe_shape, mtp_layers, weight_format
from pdtune.model.spec import CacheLayer, IndexerShape, LayerKind, MLAShape, ModelSpec


def mla_shape(cfg: Config) -> MLAShape:
    return MLAShape(
        num_heads=cfg.int("num_attention_heads"),
        kv_lora_rank=cfg.int("kv_lora_rank"),
        qk_rope_head_dim=cfg.int("qk_rope_head_dim"),
        qk_nope_head_dim=cfg.int("qk_nope_head_dim"),
        v_head_dim=cfg.int("v_head_dim"),
        q_lora_rank=cfg.opt_int("q_lora_rank"),
    )


def indexer_shape(cfg: Config) -> IndexerShape | None:
    if not cfg.has("index_topk"):
        return None
    return IndexerShape(num_heads=cfg.int("index_n_heads"), head_dim=cfg.int("index_head_dim"),
                        topk=cfg.int("index_topk"))


def mla(cfg: Config, common: dict[str, Any], family: str) -> ModelSpec:
    n = cfg.int("num_hidden_layers")
    moe = moe_shape(cfg, experts_key="n_routed_experts")
    first_dense = cfg.int("first_k_dense_replace", 0, minimum=0) if moe else n
    step = cfg.int("moe_layer_freq", 1) if moe else 1
    moe_layers = tuple(moe is not None and i >= first_dense and i % step == 0 for i in range(n))
    indexer = indexer_shape(cfg)
    layers = None
    if indexer is not None:
        layers = tuple(CacheLayer(i, LayerKind.MLA, indexer=part) for i in range(n) for part in (False, True))
    return ModelSpec(
        **common,
        layer_kinds=(LayerKind.MLA,) * n,
        weights=weight_format(cfg, common["dtype"]),
        mla=mla_shape(cfg),
        moe=moe,
        moe_layers=moe_layers,
        intermediate_size=cfg.int("intermediate_size"),
        num_mtp_layers=mtp_layers(cfg),
        indexer=indexer,
        explicit_cache_layers=layers,
    )
