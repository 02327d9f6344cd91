"""Attention-only decoders: dense and MoE GQA, sliding windows (per layer or model-wide), llama4's chunked
local attention, gpt-oss, gemma's interleaved windows and gemma3n's KV sharing.

Which layers slide follows vLLM 0.33 exactly. ``EngineArgs.create_engine_config`` (``engine/arg_utils.py``)
sets ``CacheConfig.sliding_window`` to the model's window only when the config has no ``layer_types`` or all
of them are ``sliding_attention``; ``Attention.__init__`` (``layers/attention/attention.py``) uses a layer's
own window when the model passes one and that model-wide value otherwise. So a Mistral-7B-v0.1 config (a
``sliding_window`` and no ``layer_types``) slides in every layer, and gemma's full layers stay full. The
``layer_types`` a config omits are the ones its transformers class writes (transformers 5.20, which vLLM
0.33 requires): gemma2 slides every even layer, gemma3 all but every sixth, gemma3n all but every fifth.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pdtune import limits
from pdtune.errors import InputError
from pdtune.model.config import Config
from pdtune.model.families.common import attention_shape, moe_shape, mtp_layers, weight_format
from pdtune.model.spec import LayerKind, ModelSpec

_QWEN = {"qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "qwen2_5_vl", "qwen2_5_vl_text", "qwen3_vl", "qwen3_vl_text",
         "qwen3_vl_moe", "qwen3_vl_moe_text"}
#: transformers' default window where a config leaves ``sliding_window`` out (``MistralConfig`` 4096,
#: ``Gemma2Config``/``Gemma3TextConfig`` 4096, ``Gemma3nTextConfig`` 512); everything else has none.
_DEFAULT_WINDOW = {"mistral": 4096, "gemma2": 4096, "gemma3_text": 4096, "gemma3n_text": 512}

_LAYER_TYPES = {"full_attention": LayerKind.FULL_ATTENTION, "sliding_attention": LayerKind.SLIDING_ATTENTION}


def model_window(cfg: Config, family: str) -> int | None:
    """The model-wide sliding window, as the family's transformers config class leaves it."""
    if "sliding_window" in cfg.raw:
        window = cfg.raw["sliding_window"]
    else:
        window = _DEFAULT_WINDOW.get(family)
    if family in _QWEN and not cfg.raw.get("use_sliding_window", False):
        window = None  # Qwen2Config/Qwen3Config: sliding_window if use_sliding_window else None
    if window in (None, 0):  # ModelConfig turns 0 into "no sliding window"
        return None
    if isinstance(window, bool) or not isinstance(window, int) or window < 0:
        raise InputError(cfg.source, "sliding_window", f"must be a whole number of tokens, got {window!r}")
    # A window is a number of tokens: no longer than the longest context pdtune (or any model) has.
    return limits.bound(window, limits.MAX_MODEL_LEN, cfg.source, "sliding_window", "tokens a window can span")


def _default_layer_types(cfg: Config, family: str, n: int, window: int | None) -> list[str] | None:
    """What the transformers config class writes into ``layer_types`` when the file has none."""
    if family == "gemma2":
        return ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(n)]
    if family == "gemma3_text":
        pattern = cfg.int("sliding_window_pattern", 6)
        return ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(n)]
    if family == "gemma3n_text":
        return ["full_attention" if (i + 1) % 5 == 0 else "sliding_attention" for i in range(n)]
    if family in _QWEN:
        max_window = cfg.int("max_window_layers", n, minimum=0)
        return ["sliding_attention" if window is not None and i >= max_window else "full_attention"
                for i in range(n)]
    return None


def layer_pattern(cfg: Config, family: str, n: int) -> tuple[tuple[LayerKind, ...], int | None]:
    """Each layer's kind and the window of the sliding ones."""
    window = model_window(cfg, family)
    if family == "gpt_oss":
        # gpt_oss.py: sliding_window = config.sliding_window if layer_idx % 2 == 0 else None
        if window is None:
            raise InputError(cfg.source, "sliding_window", "missing (gpt-oss slides every even layer)")
        return tuple(LayerKind.SLIDING_ATTENTION if i % 2 == 0 else LayerKind.FULL_ATTENTION for i in range(n)), window
    types = cfg.raw.get("layer_types")
    if types is None:
        types = _default_layer_types(cfg, family, n, window)
    if types is None:
        kind = LayerKind.SLIDING_ATTENTION if window is not None else LayerKind.FULL_ATTENTION
        return (kind,) * n, window
    if not isinstance(types, list):
        raise InputError(cfg.source, "layer_types", "must be a list")
    raw = {**cfg.raw, "layer_types": types}
    kinds = Config(raw, cfg.source).layer_types(n, _LAYER_TYPES)
    if LayerKind.SLIDING_ATTENTION in kinds and window is None:
        raise InputError(cfg.source, "sliding_window", "missing, but layer_types has sliding_attention layers")
    return kinds, window if LayerKind.SLIDING_ATTENTION in kinds else None


def _moe_layers(cfg: Config, family: str, n: int, has_moe: bool) -> tuple[bool, ...]:
    if not has_moe:
        return (False,) * n
    if family in ("qwen2_moe", "qwen3_moe", "qwen3_vl_moe", "qwen3_vl_moe_text"):
        step = cfg.int("decoder_sparse_step", 1)
        mlp_only = cfg.layer_indices("mlp_only_layers", n)
        return tuple(i not in mlp_only and (i + 1) % step == 0 for i in range(n))
    if family == "glm4_moe":
        first = cfg.int("first_k_dense_replace", 0, minimum=0)
        return tuple(i >= first for i in range(n))
    return (True,) * n


#: Families whose vLLM decoder layer is a dense MLP when ``num_experts`` is 0 (``config.num_experts > 0`` in
#: qwen2_moe.py / qwen3_moe.py, which Qwen3-VL-MoE reuses); every other family always builds its experts.
_ZERO_EXPERTS_IS_DENSE = {"qwen2_moe", "qwen3_moe", "qwen3_vl_moe", "qwen3_vl_moe_text"}


def _moe(cfg: Config, family: str) -> Any:
    if cfg.has("num_local_experts"):  # mixtral, minimax_m2, gpt-oss, phimoe: experts as wide as intermediate_size
        return moe_shape(cfg, experts_key="num_local_experts", expert_size_key="moe_intermediate_size")
    if family == "glm4_moe":
        return moe_shape(cfg, experts_key="n_routed_experts")
    return moe_shape(cfg, dense_below=1 if family in _ZERO_EXPERTS_IS_DENSE else None)


def dense(cfg: Config, common: dict[str, Any], family: str) -> ModelSpec:
    n = cfg.int("num_hidden_layers")
    kinds, window = layer_pattern(cfg, family, n)
    moe = _moe(cfg, family)
    moe_layers = _moe_layers(cfg, family, n, moe is not None)
    shared: tuple[int, ...] = ()
    if family == "gemma3n_text":
        shared = _gemma3n_shared(cfg, kinds)
    return ModelSpec(
        **common,
        layer_kinds=kinds,
        weights=weight_format(cfg, common["dtype"]),
        attention=attention_shape(cfg, sliding_window=window),
        moe=moe,
        moe_layers=moe_layers,
        intermediate_size=_dense_width(cfg) if not all(moe_layers) else 0,
        num_mtp_layers=mtp_layers(cfg),
        kv_shared_layers=shared,
    )


def _dense_width(cfg: Config) -> int:
    value = cfg.raw.get("intermediate_size")
    if isinstance(value, list):  # gemma3n: one width per layer
        value = value[0] if value else None
    if value is None:
        raise InputError(cfg.source, "intermediate_size", "missing")
    return limits.whole_number(value, cfg.source, "intermediate_size", maximum=limits.MAX_WIDTH)


def _gemma3n_shared(cfg: Config, kinds: tuple[LayerKind, ...]) -> tuple[int, ...]:
    """gemma3n.py: the last ``num_kv_shared_layers`` layers read the KV of the last layer of their kind before
    them (``first_shared - 2`` for sliding, ``- 1`` for full) and allocate none of their own."""
    n = len(kinds)
    first = n - cfg.int("num_kv_shared_layers", 15, minimum=0)
    if first < 0:
        raise InputError(cfg.source, "num_kv_shared_layers", f"more shared layers than the {n} layers")
    out = []
    for i in range(first, n):
        target = first - (2 if kinds[i] is LayerKind.SLIDING_ATTENTION else 1)
        if target >= 0:
            out.append(i)
    return tuple(out)


def llama4(cfg: Config, common: dict[str, Any], family: str) -> ModelSpec:
    """Llama 4: chunked local attention on RoPE layers, global attention on every NoPE layer (llama4.py)."""
    n = cfg.int("num_hidden_layers")
    chunk = cfg.opt_int("attention_chunk_size")
    interval = cfg.int("no_rope_layer_interval", 4)
    no_rope = cfg.raw.get("no_rope_layers") or [int((i + 1) % interval != 0) for i in range(n)]
    if not isinstance(no_rope, list) or len(no_rope) != n or any(f not in (0, 1) for f in no_rope):
        raise InputError(cfg.source, "no_rope_layers", f"must list one 0/1 per layer ({n} layers)")
    # Llama4Attention: nope = no_rope_layers[i] == 0; ChunkedLocalAttention if not nope and attention_chunk_size.
    kinds = tuple(LayerKind.CHUNKED_ATTENTION if flag and chunk else LayerKind.FULL_ATTENTION for flag in no_rope)
    moe = moe_shape(cfg, experts_key="num_local_experts", expert_size_key="intermediate_size")
    step = cfg.int("interleave_moe_layer_step", 1, minimum=0)
    moe_layers = tuple(moe is not None and step > 0 and (i + 1) % step == 0 for i in range(n))
    if moe is not None:  # one shared expert as wide as a routed one
        moe = type(moe)(moe.num_experts, moe.experts_per_token, moe.expert_intermediate_size,
                        shared_intermediate_size=moe.expert_intermediate_size)
    return ModelSpec(
        **common,
        layer_kinds=kinds,
        weights=weight_format(cfg, common["dtype"]),
        attention=attention_shape(cfg),
        moe=moe,
        moe_layers=moe_layers,
        intermediate_size=cfg.int("intermediate_size_mlp", cfg.raw.get("intermediate_size")),
        attention_chunk_size=chunk,
    )


def mimo_v2(cfg: Config, common: dict[str, Any], family: str) -> ModelSpec:
    """MiMo-V2-Flash (vLLM 0.33 ``mimo_v2.py``, ``MiMoV2FlashDecoderLayer``): ``hybrid_layer_pattern[i] == 1``
    makes layer ``i`` a sliding-window layer of its own shape (``swa_num_attention_heads``,
    ``swa_num_key_value_heads``, ``swa_head_dim``, ``swa_v_head_dim``; window ``sliding_window_size``), 0 a
    full-attention layer (``num_attention_heads``, ``num_key_value_heads``, ``head_dim``, ``v_head_dim``).
    Each ``Attention`` caches K at the K head size and V at the V head size (``head_size_v``). A layer is MoE
    when ``moe_layer_freq`` is a list whose entry is truthy (an int makes every layer dense, as
    ``is_moe_layer`` reads it). ``attention_chunk_size`` is ignored: vLLM deletes it from MiMo-V2 configs
    (``_strip_mimo_v2_attention_chunk_size``), so the hybrid KV-cache manager stays on."""
    n = cfg.int("num_hidden_layers")
    pattern = cfg.raw.get("hybrid_layer_pattern")
    if not isinstance(pattern, list) or len(pattern) != n or any(
            isinstance(f, bool) or f not in (0, 1) for f in pattern):
        raise InputError(cfg.source, "hybrid_layer_pattern", f"must list one 0 (full) or 1 (sliding) per layer "
                                                              f"({n} layers)")
    kinds = tuple(LayerKind.SLIDING_ATTENTION if f == 1 else LayerKind.FULL_ATTENTION for f in pattern)
    window = None
    if LayerKind.SLIDING_ATTENTION in kinds:
        window = limits.bound(cfg.int("sliding_window_size"), limits.MAX_MODEL_LEN, cfg.source,
                              "sliding_window_size", "tokens a window can span")
    full = attention_shape(cfg, sliding_window=window)
    if cfg.has("v_head_dim"):
        full = replace(full, head_dim_v=cfg.int("v_head_dim"))
    sliding = None
    if window is not None:
        sliding = attention_shape(cfg, sliding_window=window, heads_key="swa_num_attention_heads",
                                  kv_key="swa_num_key_value_heads", head_dim_key="swa_head_dim")
        if cfg.has("swa_v_head_dim"):
            sliding = replace(sliding, head_dim_v=cfg.int("swa_v_head_dim"))
    moe = moe_shape(cfg, experts_key="n_routed_experts")
    freq = cfg.raw.get("moe_layer_freq")
    if isinstance(freq, list):
        if len(freq) != n or any(not isinstance(f, (bool, int)) for f in freq):
            raise InputError(cfg.source, "moe_layer_freq", f"must list one 0/1 per layer ({n} layers)")
        moe_layers = tuple(moe is not None and bool(f) for f in freq)
    else:
        moe_layers = (False,) * n
    if any(moe_layers) and moe is None:
        raise InputError(cfg.source, "n_routed_experts", "missing, but moe_layer_freq names MoE layers")
    return ModelSpec(
        **common,
        layer_kinds=kinds,
        weights=weight_format(cfg, common["dtype"]),
        attention=full,
        sliding_attention=sliding,
        moe=moe if any(moe_layers) else None,
        moe_layers=moe_layers,
        intermediate_size=_dense_width(cfg) if not all(moe_layers) else 0,
        num_mtp_layers=mtp_layers(cfg),
    )
