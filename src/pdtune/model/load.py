"""Reading a ``config.json``: a bundled name, a folder or a file, into a :class:`ModelSpec`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pdtune import guarded
from pdtune.errors import InputError, brief
from pdtune.model.config import Config
from pdtune.model.families import CONFIG_CLASS_DEFAULTS, FAMILIES, SUPPORTED_MODEL_TYPES, family_of
from pdtune.model.families.common import model_dtype
from pdtune.model.spec import ModelSpec
from pdtune.paths import models_dir


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
    if candidate.exists() and not candidate.is_dir():  # a FIFO or a device: said so, never opened
        guarded.check_regular(candidate, "config.json")
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


def read_config(path: Path) -> dict[str, Any]:
    try:
        raw = guarded.read_json(path, "config.json")
    except InputError as exc:
        if exc.field in ("file", "json"):
            raise InputError(exc.source, "config.json", exc.message) from None
        raise
    if not isinstance(raw, dict):
        raise InputError(path, "config.json", "top level must be a JSON object")
    return raw


#: Text decoders pdtune knows of but does not plan, and why (vLLM 0.33 model_executor/models/registry.py).
NOT_MODELLED = {
    **dict.fromkeys(("minimax", "minimax_text_01", "minimax_m1"),
                    "removed from vLLM in 0.23 (_PREVIOUSLY_SUPPORTED_MODELS; MiniMax-Text-01/M1 lightning attention):"),
    **dict.fromkeys(("bailing_hybrid", "bailing_moe_linear"),
                    "linear attention (BailingMoeV2_5, vLLM 0.33's one LinearAttentionSpec model) is not modelled:"),
}


#: What transformers (5.20, the version vLLM 0.33 loads configs with) accepts in a config's ``layer_types``
#: (``configuration_utils.ALLOWED_ATTN_LAYER_TYPES``), and the legacy names it renames first
#: (``_LEGACY_LAYER_TYPE_REMAP``).
ALLOWED_LAYER_TYPES = (
    "full_attention", "sliding_attention", "chunked_attention", "window_attention", "indexed_attention",
    "compressed_sparse_attention", "heavily_compressed_attention", "minimax_m3_sparse", "conv", "moe", "hybrid",
    "hybrid_sliding", "reference_sliding_attention", "linear_attention",
)
LEGACY_LAYER_TYPES = {"mamba": "linear_attention", "attention": "full_attention",
                      "deepseek_sparse_attention": "indexed_attention", "qwen_sparse_attention": "indexed_attention"}


def check_layer_types(cfg: Config) -> None:
    """A config's ``layer_types``, whatever its family reads of it: one known type per layer.

    transformers' ``PreTrainedConfig.validate_layer_type`` (5.20), run on every config vLLM loads, refuses
    anything else; pdtune applies it to every family, including those whose vLLM model ignores the list
    (gpt-oss slides every even layer, DeepSeek's layers are all MLA), so a file vLLM cannot load is refused
    here too, not planned.
    """
    types = cfg.raw.get("layer_types")
    if types is None:
        return
    if not isinstance(types, list):
        raise InputError(cfg.source, "layer_types", f"must be a list of layer types, got {brief(types)}")
    n = cfg.int("num_hidden_layers")
    if len(types) != n:
        raise InputError(cfg.source, "layer_types", f"has {len(types)} entries for num_hidden_layers {n}")
    for i, t in enumerate(types):
        if not isinstance(t, str) or LEGACY_LAYER_TYPES.get(t, t) not in ALLOWED_LAYER_TYPES:
            raise InputError(cfg.source, "layer_types", f"entry {i} is {brief(t)}, not a layer type transformers "
                                                        f"knows ({', '.join(ALLOWED_LAYER_TYPES)})")


def load_model(name_or_path: str | Path, *, weights: str = "") -> ModelSpec:
    """A model from its ``config.json`` (a bundled name, a folder or the file).

    ``weights`` is the checkpoint's weight format when it is not what the config says (Kimi-K2's config says
    bfloat16 and its weights are FP8): a format of :mod:`pdtune.precision` (``fp8``, ``nvfp4``, ...) or
    ``dense=F,experts=G``; "" keeps the config's.
    """
    path = resolve_config_path(name_or_path)
    raw = read_config(path)
    # "config.json" given bare names no folder: the folder it sits in, else the config's own model type
    name = (path.absolute().parent.name if path.name == "config.json" else path.stem) or str(
        raw.get("model_type") or "model")
    spec = spec_from_config(raw, source=str(path), name=name)
    if str(weights).strip():
        from pdtune.precision import parse_weights_dtype  # precision builds on this package's specs

        spec = parse_weights_dtype(weights, spec, source="weights", field="weights")
    return spec


def spec_from_config(raw: dict[str, Any], *, source: str = "config.json", name: str = "model") -> ModelSpec:
    cfg = Config(raw, source)
    outer_type = raw.get("model_type")  # the outer type names a multimodal wrapper
    model_type = outer_type if isinstance(outer_type, str) else cfg.str("model_type")
    family = family_of(cfg, model_type)
    if family is None:
        why = NOT_MODELLED.get(model_type, "unknown architecture")
        raise InputError(source, "model_type",
                         f"{why} {model_type!r}; pdtune understands: {', '.join(SUPPORTED_MODEL_TYPES)}")
    if family in CONFIG_CLASS_DEFAULTS:
        cfg = cfg.with_defaults(CONFIG_CLASS_DEFAULTS[family])
    check_layer_types(cfg)
    archs = raw.get("architectures") or cfg.raw.get("architectures") or [model_type]
    architecture = str(archs[0]) if isinstance(archs, list) and archs else model_type
    text_type = cfg.text.get("model_type") if cfg.text is not None else None
    common: dict[str, Any] = dict(
        name=name,
        source=source,
        model_type=model_type,
        architecture=architecture,
        hidden_size=cfg.int("hidden_size"),
        vocab_size=cfg.int("vocab_size"),
        dtype=model_dtype(cfg),
        tie_word_embeddings=bool(cfg.raw.get("tie_word_embeddings", False)),
        max_position_embeddings=cfg.opt_int("max_position_embeddings"),
        max_length=cfg.max_length(str(text_type or model_type)),
        kv_cache_quant_algo=cfg.kv_cache_quant_algo(),
        text_model_type=str(text_type) if isinstance(text_type, str) else None,
        total_attention_heads=cfg.opt_int("num_attention_heads", minimum=0) or 0,
        extra={"config": raw, "family": family},
    )
    return FAMILIES[family](cfg, common, family)
