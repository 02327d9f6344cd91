"""Which reader builds a :class:`~pdtune.model.spec.ModelSpec` for each ``model_type`` vLLM 0.33 serves.

Multimodal wrappers (Qwen2.5-VL, Qwen3-VL, Gemma 3, Llama 4, Kimi-K2.5, Gemma 3n, LFM2-VL) are read by their
language model: the ``text_config`` and its ``model_type`` decide, as vLLM's ``hf_text_config`` does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pdtune.model.config import Config
from pdtune.model.families import attention, hybrid, mla
from pdtune.model.spec import ModelSpec

Builder = Callable[[Config, dict[str, Any], str], ModelSpec]

#: model_type -> reader. Every entry is a text decoder vLLM 0.33 registers whose config.json transformers
#: reads without remote code (or vLLM ships the config class).
FAMILIES: dict[str, Builder] = {
    **{t: attention.dense for t in (
        "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "phi3", "gemma", "gemma2",
        "gemma3_text", "gemma3n_text", "glm4", "glm4_moe", "minimax_m2", "gpt_oss", "granite", "granitemoe",
        "qwen2_5_vl", "qwen2_5_vl_text", "qwen3_vl_text", "qwen3_vl_moe_text", "olmoe",
        "phimoe")},
    "llama4_text": attention.llama4,
    "mimo_v2_flash": attention.mimo_v2,
    **{t: mla.mla for t in ("deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2", "glm_moe_dsa")},
    **{t: hybrid.gdn for t in ("qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text")},
    "nemotron_h": hybrid.nemotron_h,
    "falcon_h1": hybrid.falcon_h1,
    "granitemoehybrid": hybrid.granite_hybrid,
    "jamba": hybrid.jamba,
    "kimi_linear": hybrid.kimi_linear,
    "lfm2": hybrid.lfm2,
    "lfm2_moe": hybrid.lfm2,
}

#: Wrappers whose language model sits under ``text_config``; the value is the reader's family when the
#: text_config does not name its own model_type.
WRAPPERS: dict[str, str] = {
    "qwen2_5_vl": "qwen2_5_vl",
    "qwen3_vl": "qwen3_vl_text",
    "qwen3_vl_moe": "qwen3_vl_moe_text",
    "gemma3": "gemma3_text",
    "gemma3n": "gemma3n_text",
    "llama4": "llama4_text",
    "kimi_k25": "deepseek_v3",
    "mistral3": "mistral",
    "qwen3_5": "qwen3_5_text",
    "qwen3_5_moe": "qwen3_5_moe_text",
    "lfm2_vl": "lfm2",  # LFM2-VL: lfm2_vl.py builds the registered Lfm2ForCausalLM from text_config
}

#: What the family's transformers config class (5.20, the newest vLLM 0.33 accepts) fills in for keys a
#: published config.json leaves out, for the keys pdtune reads. vLLM reads the class, not the file:
#: google/gemma-3-27b-it's text_config names neither vocab_size nor max_position_embeddings.
CONFIG_CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    # transformers/models/gemma3/configuration_gemma3.py, Gemma3TextConfig (and Gemma3Config's tied embeddings)
    "gemma3_text": {"vocab_size": 262_208, "max_position_embeddings": 131_072, "head_dim": 256,
                    "tie_word_embeddings": True},
}

SUPPORTED_MODEL_TYPES: tuple[str, ...] = tuple(sorted(set(FAMILIES) | set(WRAPPERS)))


def family_of(cfg: Config, model_type: str) -> str | None:
    """The reader's key for a config: the text model's type inside a known wrapper, else the model_type."""
    if model_type in WRAPPERS:
        text_type = cfg.text.get("model_type") if cfg.text is not None else None
        if isinstance(text_type, str) and text_type in FAMILIES:
            return text_type
        return WRAPPERS[model_type]
    if model_type == "deepseek_v3" and cfg.has("index_topk"):
        return "deepseek_v32"
    return model_type if model_type in FAMILIES else None
