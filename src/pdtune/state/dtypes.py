"""Every ``--kv-cache-dtype`` vLLM 0.33 accepts, and the bytes one token of one KV head takes in each.

``CacheDType`` in ``vllm/config/cache.py`` lists the names; the page layout of each comes from the attention
backend that serves it (``customize_spec`` in ``v1/attention/backends``), vLLM 0.33:

====================================  =====================================================  =================
dtype                                 bytes per token per KV head (K + V, head size d)       backend
====================================  =====================================================  =================
auto, bfloat16, float16               2 d x 2 (auto: the model dtype)                        any
fp8, fp8_e4m3, fp8_e5m2, fp8_inc      2 d x 1 (per-tensor scales live in the layer)          any
int8_per_token_head,                  2 d x 1 + 2 x 4: one fp32 scale each for K and V       TRITON_ATTN
fp8_per_token_head                    (``TritonAttentionBackend.customize_spec``)
int4_per_token_head                   2 (d / 2) + 2 x 4                                      TRITON_ATTN
nvfp4, nvfp4_4over6                   2 (d / 2 + d / 16): fp4 values and fp8 scales per 16   FLASHINFER
                                      in separate K and V slots (``nvfp4_kv_cache_full_dim``)
turboquant_k8v4 / _4bit_nc /          one packed K+V slot, ``TurboQuantConfig.slot_size_    TURBOQUANT
_k3v4_nc / _3bit_nc                   aligned``: K fp8 (d) or d bits/8 + 2, V d bits/8 + 4
ultraquant_4bit                       d + 2 d / 32 (4-bit codes and UE8M0 scales per 32)     ULTRAQUANT
fp8_ds_mla, nvfp4_ds_mla              MLA only: packed (``DS_MLA_BYTES_PER_TOKEN``)            sparse MLA
octave_*                              ROCm-only layouts (``rocm_octave.py``): not modelled   ROCM_OCTAVE
====================================  =====================================================  =================

MLA caches one latent of ``kv_lora_rank + qk_rope_head_dim`` elements per token, at 2 bytes (bf16), 1 (any fp8
name) or the packed ``*_ds_mla`` size. TurboQuant and UltraQuant keep the first and last two attention
layers of a dense model at the model dtype (``TurboQuantConfig.get_boundary_skip_layers``, applied by
``EngineArgs.create_engine_config``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pdtune import versions
from pdtune.errors import InputError

#: The first vLLM line whose ``CacheDType`` accepts each name (read from every wheel 0.11, 0.20-0.33).
FIRST_VERSION: dict[str, str] = {
    "auto": "0.11", "bfloat16": "0.11", "fp8": "0.11", "fp8_e4m3": "0.11", "fp8_e5m2": "0.11", "fp8_inc": "0.11",
    "float16": "0.20", "fp8_ds_mla": "0.20", "turboquant_k8v4": "0.20", "turboquant_4bit_nc": "0.20",
    "turboquant_k3v4_nc": "0.20", "turboquant_3bit_nc": "0.20", "int8_per_token_head": "0.20",
    "fp8_per_token_head": "0.20", "nvfp4": "0.20", "int4_per_token_head": "0.25", "nvfp4_4over6": "0.28",
    "nvfp4_ds_mla": "0.30", "ultraquant_4bit": "0.32", "octave_k3v4": "0.33", "octave_k3v3": "0.33",
    "octave_k3v3_compact": "0.33",
}

#: ``TQ_PRESETS`` (``quantization/turboquant/config.py``): key bits (8 = fp8 keys) and value bits.
_TURBOQUANT = {"turboquant_k8v4": (8, 4), "turboquant_4bit_nc": (4, 4), "turboquant_k3v4_nc": (3, 4),
               "turboquant_3bit_nc": (3, 3)}

_FP8 = {"fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc"}


#: DeepSeek-V3.2's packed sparse-MLA layouts, bytes per token (vLLM's ``FlashMLASparseBackend``): fp8_ds_mla is the
#: 512-dim latent in fp8 (512 B), four float32 scales (16 B) and the 64-dim RoPE part in bf16 (128 B): 656.
DS_MLA_BYTES_PER_TOKEN = {"fp8_ds_mla": 656, "nvfp4_ds_mla": 352}


@dataclass(frozen=True)
class KVDtype:
    """One ``--kv-cache-dtype`` value, resolved against a model's dtype."""

    name: str
    model_dtype_bytes: int

    @property
    def element_bytes(self) -> int:
        """Bytes of one stored element of a plain layout (the torch dtype of the cache tensor)."""
        if self.name == "auto":
            return self.model_dtype_bytes
        if self.name in ("bfloat16", "float16"):
            return 2
        return 1

    @property
    def backend(self) -> str | None:
        """The attention backend this dtype forces on NVIDIA GPUs (None: the model's default)."""
        if self.name.endswith("_per_token_head"):
            return "TRITON_ATTN"
        if self.name in _TURBOQUANT:
            return "TURBOQUANT"
        if self.name == "ultraquant_4bit":
            return "ULTRAQUANT"
        return None

    @property
    def is_quantized(self) -> bool:
        return self.name not in ("auto", "bfloat16", "float16")

    @property
    def packs_kv(self) -> bool:
        """TurboQuant and UltraQuant keep boundary layers unquantized (skip layers)."""
        return self.name in _TURBOQUANT or self.name == "ultraquant_4bit"

    def attention_head_bytes(self, head_size: int, head_size_v: int) -> tuple[int, int]:
        """(head slots per KV head, bytes per slot per token) of a GQA page."""
        name = self.name
        if name.endswith("_per_token_head"):
            hk, hv = (head_size // 2, head_size_v // 2) if name.startswith("int4") else (head_size, head_size_v)
            return 1, hk + hv + 2 * 4
        if name.startswith("nvfp4") and not name.endswith("_ds_mla"):
            if head_size != head_size_v:
                raise InputError("--kv-cache-dtype", "kv_cache_dtype", "nvfp4 needs equal K and V head sizes")
            return 2, head_size // 2 + head_size // 16
        if name in _TURBOQUANT:
            key_bits, value_bits = _TURBOQUANT[name]
            key = head_size if key_bits == 8 else math.ceil(head_size * key_bits / 8) + 2
            value = math.ceil(head_size * value_bits / 8) + 4
            slot = key + value
            return 1, slot + slot % 2
        if name == "ultraquant_4bit":
            if head_size % 32:
                raise InputError("--kv-cache-dtype", "kv_cache_dtype", f"ultraquant needs head_dim % 32 == 0, got {head_size}")
            return 1, 2 * (head_size // 2 + head_size // 32)
        if name.endswith("_ds_mla"):
            raise InputError("--kv-cache-dtype", "kv_cache_dtype", f"{name} is an MLA-only layout; this model has GQA")
        if name.startswith("octave_"):
            raise InputError("--kv-cache-dtype", "kv_cache_dtype", f"{name} is a ROCm-only layout pdtune does not model")
        return 1, (head_size + head_size_v) * self.element_bytes

    def mla_bytes_per_token(self, latent_dim: int) -> int:
        if self.name in DS_MLA_BYTES_PER_TOKEN:
            return DS_MLA_BYTES_PER_TOKEN[self.name]
        if self.name == "nvfp4" or self.name == "nvfp4_4over6":
            raise InputError("--kv-cache-dtype", "kv_cache_dtype",
                             "nvfp4 KV cache is not supported with MLA (use fp8, auto or nvfp4_ds_mla)")
        if self.packs_kv or self.name.endswith("_per_token_head") or self.name.startswith("octave_"):
            raise InputError("--kv-cache-dtype", "kv_cache_dtype", f"{self.name} has no MLA layout")
        return latent_dim * self.element_bytes


def kv_dtype(name: str, model_dtype_bytes: int, vllm: str) -> KVDtype:
    """Check ``name`` against the line's ``CacheDType`` and return its layout."""
    first = FIRST_VERSION.get(name)
    if first is None:
        raise InputError("--kv-cache-dtype", "kv_cache_dtype",
                         f"unknown dtype {name!r}; vLLM {versions.CURRENT} accepts {', '.join(FIRST_VERSION)}")
    if versions.parse(vllm) < versions.parse(first):
        raise InputError("--kv-cache-dtype", "kv_cache_dtype", f"{name!r} is accepted from vLLM {first}, not {vllm}")
    return KVDtype(name, model_dtype_bytes)
