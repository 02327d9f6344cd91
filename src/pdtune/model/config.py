"""Typed access to one ``config.json``, every failure naming the file and the field.

Also the two things vLLM derives from a config before any layer is built: the longest ``max_model_len``
it accepts (``config/model.py``, ``_get_and_verify_max_len``) and what ``--kv-cache-dtype auto``
resolves to for a checkpoint that declares its KV quantization (``utils/torch_utils.py``,
``resolve_kv_cache_dtype_string``).
"""

from __future__ import annotations

from typing import Any

import math

from pdtune import limits
from pdtune.errors import InputError, brief
from pdtune.model.spec import LayerKind, MaxLength

#: The keys ``derive_max_model_len_and_key`` reads, smallest value wins (``transformers_utils/
#: model_arch_config_convertor.py``, vLLM 0.33).
MAX_LEN_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
                "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len")

#: RoPE types whose ``factor`` vLLM does not multiply in: their max_position_embeddings is already scaled.
_ROPE_ALREADY_SCALED = {"su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling"}

#: vLLM assumes this length (and warns) when a config has none of MAX_LEN_KEYS.
DEFAULT_MAX_LEN = 2048


def bound_for(key: str) -> int:
    """The ceiling of an integer config field, from its name (:mod:`pdtune.limits`): layer counts and layer
    indices, head counts, expert counts, vocabulary, lengths; every other width or size ``MAX_WIDTH``."""
    name = key.rsplit(".", 1)[-1]
    if "layer" in name or name in ("first_k_dense_replace", "num_nextn_predict_layers"):
        return limits.MAX_LAYERS
    if "experts" in name:
        return limits.MAX_EXPERTS
    if "heads" in name:
        return limits.MAX_HEADS
    if name == "vocab_size":
        return limits.MAX_VOCAB
    if name in MAX_LEN_KEYS or name in ("attention_chunk_size", "sliding_window"):
        return limits.MAX_MODEL_LEN
    return limits.MAX_WIDTH


class Config:
    """One config dict; multimodal wrappers keep the language model under ``text_config``."""

    def __init__(self, raw: dict[str, Any], source: str) -> None:
        text = raw.get("text_config")
        self.outer = raw
        self.text = text if isinstance(text, dict) else None
        # The language model's fields win over the wrapper's (vLLM reads hf_text_config).
        self.raw = {**raw, **text} if isinstance(text, dict) else raw
        self.source = source

    def with_defaults(self, defaults: dict[str, Any]) -> Config:
        """The same config with the transformers config class's defaults under the keys it leaves out."""
        out = Config(self.outer, self.source)
        out.raw = {**defaults, **self.raw}
        return out

    def has(self, key: str) -> bool:
        return self.raw.get(key) is not None

    def get(self, key: str, default: Any = None) -> Any:
        value = self.raw.get(key)
        return default if value is None else value

    def int(self, key: str, default: int | None = None, *, minimum: int = 1) -> int:
        value = self.raw.get(key, default)
        if value is None:
            value = default
        if value is None:
            raise InputError(self.source, key, "missing")
        return limits.whole_number(value, self.source, key, minimum=minimum, maximum=bound_for(key))

    def opt_int(self, key: str, *, minimum: int = 1) -> int | None:
        return self.int(key, minimum=minimum) if self.has(key) else None

    def str(self, key: str, default: str | None = None) -> str:
        value = self.raw.get(key, default)
        if value is None:
            value = default
        if not isinstance(value, str):
            raise InputError(self.source, key, "missing" if value is None else f"must be a string, got {brief(value)}")
        return value

    def list(self, key: str) -> list[Any]:
        value = self.raw.get(key)
        if not isinstance(value, list):
            raise InputError(self.source, key, "missing" if value is None else "must be a list")
        return value

    def dict(self, key: str) -> dict[str, Any]:
        value = self.raw.get(key)
        if not isinstance(value, dict):
            raise InputError(self.source, key, "missing" if value is None else "must be an object")
        return value

    def int_in(self, parent: str, key: str, default: int | None = None) -> int:
        """An int inside a nested object (``linear_attn_config.num_heads``)."""
        value = self.dict(parent).get(key, default)
        name = f"{parent}.{key}"
        if value is None:
            raise InputError(self.source, name, "missing")
        return limits.whole_number(value, self.source, name, maximum=bound_for(name))

    def layer_indices(self, key: str, n: int) -> set[int]:
        """A list of layer indices (``mlp_only_layers``): whole numbers from 0 to ``n - 1``; absent is empty."""
        value = self.raw.get(key)
        if value is None:
            return set()
        if not isinstance(value, list):
            raise InputError(self.source, key, f"must be a list of layer indices, got {brief(value)}")
        for item in value:
            if isinstance(item, bool) or not isinstance(item, int) or not 0 <= item < n:
                raise InputError(self.source, key, f"must hold layer indices 0 to {n - 1}, got {brief(item)}")
        return set(value)

    def layer_types(self, n: int, mapping: dict[str, LayerKind], key: str = "layer_types") -> tuple[LayerKind, ...]:
        """``layer_types``: one known name per layer."""
        types = self.list(key)
        if len(types) != n:
            raise InputError(self.source, key, f"has {len(types)} entries for {n} layers")
        unknown = sorted({str(t) for t in types} - set(mapping))
        if unknown:
            raise InputError(self.source, key, f"unknown layer type {unknown[0]!r}; known: {', '.join(mapping)}")
        return tuple(mapping[t] for t in types)

    # ---------------------------------------------------------------------------------- derived

    def rope_factor(self) -> float:
        """The factor vLLM multiplies the derived length by (every RoPE type but the pre-scaled ones)."""
        params = self.raw.get("rope_parameters")
        if not isinstance(params, dict) or not params:
            params = self.raw.get("rope_scaling")
        if not isinstance(params, dict) or not params:
            return 1.0
        # Nested per layer type (gemma3, gpt-oss in transformers 5): every entry is a dict.
        entries = list(params.values()) if all(isinstance(v, dict) for v in params.values()) else [params]
        factor = 1.0
        for entry in entries:
            if not isinstance(entry, dict) or not entry:
                continue
            rope_type = str(entry.get("rope_type", entry.get("type", "default")))
            if rope_type == "mrope":
                rope_type = "default"
            if rope_type not in _ROPE_ALREADY_SCALED:
                value = entry.get("factor", factor)
                if value is None:
                    factor = 1.0
                    continue
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                        or not 0 < value <= 1024:
                    raise InputError(self.source, "rope_scaling.factor",
                                     f"must be a number in (0, 1024], got {brief(value)}")
                factor = float(value)
        return factor

    def max_length(self, model_type: str) -> MaxLength:
        """vLLM's derived ``max_model_len`` and the key it came from (no tokenizer_config is read)."""
        derived: float | None = None
        key = ""
        for name in MAX_LEN_KEYS:
            value = self.raw.get(name)
            if isinstance(value, int) and not isinstance(value, bool) and (derived is None or value < derived):
                derived, key = value, name
        model_max = self.raw.get("model_max_length")
        if isinstance(model_max, int) and not isinstance(model_max, bool) and model_max:
            derived, key = model_max, "model_max_length"  # Command-R / Cohere: this key wins outright
        if derived is None:
            return MaxLength(DEFAULT_MAX_LEN, "max_position_embeddings", assumed=True)
        if "gemma3" not in model_type:  # Gemma3's 128K is already scaled by RoPE
            derived *= self.rope_factor()
        return MaxLength(int(derived), key, model_max if isinstance(model_max, int) else None)

    def kv_cache_quant_algo(self) -> str | None:
        """``get_kv_cache_quant_algo_string``: the KV dtype a modelopt checkpoint declares, if any."""
        q = self.outer.get("quantization_config") or self.raw.get("quantization_config")
        if not isinstance(q, dict):
            return None
        if not str(q.get("quant_method", "")).startswith("modelopt"):
            return None
        inner = q.get("quantization", q)
        inner = inner if isinstance(inner, dict) else q
        algo = (inner.get("kv_cache_scheme") or q.get("kv_cache_scheme") or inner.get("kv_cache_quant_algo")
                or q.get("kv_cache_quant_algo"))
        if algo is None:
            return None
        if isinstance(algo, dict):
            if algo.get("dynamic") is False and algo.get("num_bits") == 8 and algo.get("type") == "float":
                return "fp8"
            if algo.get("num_bits") == 4 and algo.get("type") == "float":
                return "nvfp4"
            return "auto"
        # MODELOPT_TO_VLLM_KV_CACHE_DTYPE_MAP; anything else falls back to "auto" (vLLM warns).
        return {"fp8": "fp8_e4m3", "nvfp4": "nvfp4"}.get(str(algo).lower(), "auto")
