"""A model as pdtune needs it: the layer stack, each layer's state shape, and its weights.

:func:`load_model` reads a Hugging Face ``config.json`` (a bundled name from ``data/models/``, a folder or
a file) into a frozen :class:`ModelSpec`. The readers, one per family (:mod:`pdtune.model.families`):

==============================================  ======================================================
family (model_type)                             fields read
==============================================  ======================================================
dense / MoE GQA (llama, mistral, mixtral,       ``num_key_value_heads``, ``head_dim``; ``sliding_window``
qwen2/3, phi3, glm4, glm4_moe, minimax_m2, ...) with or without ``layer_types`` (see ``attention.py``)
gemma2, gemma3(_text), gemma3n(_text)           interleaved windows; gemma3n's ``num_kv_shared_layers``
gpt_oss                                         a window on every even layer
llama4                                          ``attention_chunk_size``, ``no_rope_layers``
MLA (deepseek_v2/v3, kimi_k2), deepseek_v32     ``kv_lora_rank``, ``qk_rope_head_dim``; ``index_*``
GatedDeltaNet hybrids (qwen3_next, qwen3_5)     ``layer_types``/``full_attention_interval``, ``linear_*``
Mamba2 hybrids (nemotron_h, granitemoehybrid)   ``hybrid_override_pattern`` / ``layer_types``, ``mamba_*``
falcon_h1                                       attention and Mamba2 in every layer
jamba                                           ``attn_layer_period/offset``, Mamba1 ``mamba_*``
kimi_linear                                     ``linear_attn_config`` (KDA) and MLA
lfm2                                            ``layer_types`` of conv / full_attention, ``conv_*``
multimodal wrappers (qwen2_5_vl, qwen3_vl(_moe),  their ``text_config``
gemma3, llama4, kimi_k25, gemma3n, mistral3)
==============================================  ======================================================

Anything missing or unknown is an :class:`~pdtune.errors.InputError` naming the file and the field.
"""

from pdtune.model.config import Config
from pdtune.model.families import FAMILIES, SUPPORTED_MODEL_TYPES
from pdtune.model.load import bundled_models, load_model, read_config, resolve_config_path, spec_from_config
from pdtune.model.spec import (
    DTYPE_BYTES,
    AttentionShape,
    CacheLayer,
    GDNShape,
    IndexerShape,
    KDAShape,
    LayerKind,
    Mamba1Shape,
    Mamba2Shape,
    MaxLength,
    MLAShape,
    ModelSpec,
    MoEShape,
    ShortConvShape,
    WeightFormat,
    dtype_bytes,
)
from pdtune.paths import models_dir

__all__ = [
    "DTYPE_BYTES", "FAMILIES", "SUPPORTED_MODEL_TYPES", "AttentionShape", "CacheLayer", "Config", "GDNShape",
    "IndexerShape", "KDAShape", "LayerKind", "MLAShape", "Mamba1Shape", "Mamba2Shape", "MaxLength", "ModelSpec",
    "MoEShape", "ShortConvShape", "WeightFormat", "bundled_models", "dtype_bytes", "load_model", "models_dir",
    "read_config", "resolve_config_path", "spec_from_config",
]
