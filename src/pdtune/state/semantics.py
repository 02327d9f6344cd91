"""What each vLLM line does differently, found by reading the published wheels 0.11 and 0.20-0.33.

:class:`Semantics` holds one flag per rule; :meth:`Semantics.for_version` sets them from the version. The
boundaries (the first release that has the rule):

===========================================================  ======  ===========================================
rule                                                         from    source (vLLM)
===========================================================  ======  ===========================================
hybrid block aligned to the backend's kernel block            0.20    ``platforms/interface.py``
recurrent layers keep ``1 + spec`` states; MTP joins cache    0.20    ``kv_cache_interface.py`` ``MambaSpec``
near-equal buckets (max < 1.5 min) use max as group size      0.20    ``_get_kv_cache_groups_uniform_page_size``
page sizes unified by scaling a layer's block size            0.20    ``unify_kv_cache_spec_page_size``
async scheduling on by default                                0.20    ``VllmConfig.__post_init__``
"KV cache size" = ``int(max_concurrency * max_model_len)``   0.21    ``kv_cache_utils.py``
  (before: ``num_blocks // groups * block``, times the DCP size with the "Multiplying ..." line)
KDA keeps its speculative rows in one fused conv state        0.23    ``mamba_utils.kda_state_shape``
sliding/chunked layers hold ``max_in_flight_tokens``          0.26    ``SlidingWindowSpec``, ``VllmConfig``
  (``max_concurrent_batches x max_num_batched_tokens``; before: ``max_num_batched_tokens``)
recurrent pages padded up to a larger page when unifying      0.26    ``unify_kv_cache_spec_page_size``
skip-layer pages aligned to the quantized primary page        0.26    ``_align_heterogeneous_kv_block_size``
MLA hybrids round the block to 128 tokens                     0.27    ``_align_hybrid_block_size``
prefix caching always means ``align`` (``all`` mode gone)     0.28    ``MambaModelConfig``
async scheduling on by default with a separate draft model    0.28    ``VllmConfig.__post_init__``
sliding windows retain ``num_prefill_lookahead_tokens - 1``   0.28    ``get_global_kv_cache_groups``
non-MLA attention pages padded when they do not divide        0.29    ``unify_kv_cache_spec_page_size``
short-conv state keeps speculative rows                       0.29    ``mamba_utils.short_conv_state_shape``
KDA recurrent state dtype follows mamba_ssm_cache_dtype       0.30    ``mamba_utils.kda_state_dtype``
Mamba2 layers keep a prefill-checkpoint block in align mode   0.32    ``mamba_mixer2.py``
GDN on FlashInfer prefill too; align block on its 64 grid      0.33    ``gdn/qwen_gdn_linear_attn.py``
===========================================================  ======  ===========================================
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from pdtune import versions


class MambaCacheMode(StrEnum):
    NONE = "none"  # no prefix caching: the running state only (plus speculative slots)
    ALIGN = "align"  # prefix caching: also the state at the last block boundary (and a checkpoint)
    ALL = "all"  # 0.20-0.27 Mamba2 prefix caching: a state for every block of the sequence


@dataclass(frozen=True)
class Semantics:
    """What one vLLM line does differently; build it with :meth:`for_version`."""

    version: str
    kernel_alignment: bool  # hybrid block aligned to the backend's kernel block (0.20+), else to 16
    spec_in_recurrent_blocks: bool  # recurrent layers keep 1 + spec states (0.20+), else 1
    tokens_from_concurrency: bool  # "KV cache size" = int(max_concurrency * max_model_len) (0.21+)
    group_size_heuristic: bool  # near-equal buckets (max < 1.5 min) use max as group size (0.20+)
    has_all_mode: bool  # Mamba2 models default to "all" under prefix caching (0.20-0.27)
    all_mode_yields_to_spec: bool  # ... except with speculative decoding (0.20-0.21)
    mla_hybrid_128: bool  # MLA hybrids round the block to 128 tokens (0.27+)
    mamba2_checkpoint_block: bool  # align mode keeps a Mamba2 prefill-checkpoint block (0.32+)
    gdn_checkpoint_block: bool  # ... and a GDN one, on a 64-token grid, with FlashInfer prefill (0.33+)
    ssm_fp32_for_nemotron: bool  # NemotronH's SSM cache defaults to float32 (0.20+)
    ssm_dtype_configurable: bool  # GDN SSM dtype follows mamba_ssm_cache_dtype (0.20+)
    cudagraph_estimate: bool  # the CUDA-graph memory estimate is subtracted from the KV cache (0.20+)
    requested_ceil: bool  # requested memory rounded up to a whole byte (0.20+)
    in_flight_batches: bool = False  # recycling caches hold max_in_flight_tokens (0.26+)
    extra_retained: bool = False  # sliding windows retain lookahead - 1 tokens for multi-module MTP (0.28+)
    async_default: bool = False  # async scheduling on unless something forbids it (0.20+)
    draft_model_async_default: bool = True  # ... also with method draft_model (0.28+)
    unify_scale: bool = False  # unify page sizes by scaling block sizes (0.20+)
    unify_pad_mamba: bool = False  # ... padding recurrent pages (0.26+)
    unify_pad_attention: bool = False  # ... and padding non-MLA attention pages (0.29+)
    skip_layer_alignment: bool = False  # _align_heterogeneous_kv_block_size (0.26+)
    kda_fused_spec_rows: bool = False  # KDA conv keeps 1 + spec rows (0.23+)
    kda_ssm_dtype_configurable: bool = False  # 0.30+
    short_conv_spec_rows: bool = False  # 0.29+

    @classmethod
    def for_version(cls, version: str = versions.CURRENT) -> Semantics:
        # Callers check where the version came from (a flag, a parameters file, a log) and say so; this
        # refuses a line pdtune does not follow whoever calls.
        v = versions.parse(versions.check(version, "vLLM version"))
        return cls(
            version=version,
            kernel_alignment=v >= (0, 20, 0),
            spec_in_recurrent_blocks=v >= (0, 20, 0),
            tokens_from_concurrency=v >= (0, 21, 0),
            group_size_heuristic=v >= (0, 20, 0),
            has_all_mode=(0, 20, 0) <= v < (0, 28, 0),
            all_mode_yields_to_spec=(0, 20, 0) <= v < (0, 22, 0),
            mla_hybrid_128=v >= (0, 27, 0),
            mamba2_checkpoint_block=v >= (0, 32, 0),
            gdn_checkpoint_block=v >= (0, 33, 0),
            ssm_fp32_for_nemotron=v >= (0, 20, 0),
            ssm_dtype_configurable=v >= (0, 20, 0),
            cudagraph_estimate=v >= (0, 20, 0),
            requested_ceil=v >= (0, 20, 0),
            in_flight_batches=v >= (0, 26, 0),
            extra_retained=v >= (0, 28, 0),
            async_default=v >= (0, 20, 0),
            draft_model_async_default=v >= (0, 28, 0),
            unify_scale=v >= (0, 20, 0),
            unify_pad_mamba=v >= (0, 26, 0),
            unify_pad_attention=v >= (0, 29, 0),
            skip_layer_alignment=v >= (0, 26, 0),
            kda_fused_spec_rows=v >= (0, 23, 0),
            kda_ssm_dtype_configurable=v >= (0, 30, 0),
            short_conv_spec_rows=v >= (0, 29, 0),
        )

    @property
    def label(self) -> str:
        return f"vLLM {self.version}"
