"""One small frozen spec per KV cache kind, each with ``page_size_bytes``, like ``vllm/v1/kv_cache_interface.py``.

A *page* is one layer's memory for one block. ``blocks_per_request`` is vLLM's
``cdiv(spec.max_memory_usage_bytes(vllm_config), spec.page_size_bytes)`` (what
``get_max_concurrency_for_kv_cache_config`` in ``v1/core/kv_cache_utils.py`` sums over groups), vLLM 0.33:

- full attention (``FullAttentionSpec``): ``cdiv(L', block)`` with ``L' = cdiv(L, dcp)`` when decode context
  parallelism shards the tokens;
- sliding window (``SlidingWindowSpec.max_admission_blocks_per_request``):
  ``cdiv(min(W - 1 + extra_retained + in_flight, L), block) + 1`` (the +1: the window need not start on a
  block boundary); DCP is refused;
- chunked local (``ChunkedLocalAttentionSpec``): ``cdiv(min(chunk + in_flight, L), block)``;
- MLA (``MLAAttentionSpec``): as full attention, one latent per token;
- recurrent state (``MambaSpec``): ``1 + spec`` blocks, ``2 + spec + checkpoint`` in prefix-caching
  ``align`` mode, one per block in the 0.20-0.27 ``all`` mode.

``in_flight`` is ``VllmConfig.max_in_flight_tokens`` from 0.26 (``max_concurrent_batches x
max_num_batched_tokens``: two batches with async scheduling) and ``max_num_batched_tokens`` before.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pdtune.errors import InputError
from pdtune.model.spec import LayerKind
from pdtune.units import cdiv


@dataclass(frozen=True)
class RequestShape:
    """What vLLM sizes a request by."""

    max_model_len: int
    num_speculative_tokens: int = 0
    max_num_batched_tokens: int = 8192
    in_flight_tokens: int | None = None  # max_in_flight_tokens; None = max_num_batched_tokens (before 0.26)
    dcp: int = 1  # decode_context_parallel_size
    extra_retained_tokens: int = 0  # num_prefill_lookahead_tokens - 1 (multi-module MTP), 0.28+

    @property
    def in_flight(self) -> int:
        return self.max_num_batched_tokens if self.in_flight_tokens is None else self.in_flight_tokens


@dataclass(frozen=True)
class AttentionPage:
    """Full, sliding-window or chunked-local attention: K and V for ``block_size`` tokens of the local heads.

    ``slot_bytes`` is the bytes one (token, head slot) takes; plain dtypes store ``(d + d_v) x dtype`` in
    one slot per KV head, nvfp4 two slots, per-token-head dtypes add their fp32 scales.
    """

    block_size: int
    num_kv_heads: int
    head_size: int
    dtype_bytes: int
    sliding_window: int | None = None
    chunk_size: int | None = None
    head_size_v: int | None = None
    slot_bytes: int | None = None
    head_slots: int = 1
    page_size_padded: int | None = None
    dcp_sharded: bool = True

    @property
    def kind(self) -> LayerKind:
        if self.sliding_window is not None:
            return LayerKind.SLIDING_ATTENTION
        if self.chunk_size is not None:
            return LayerKind.CHUNKED_ATTENTION
        return LayerKind.FULL_ATTENTION

    @property
    def bytes_per_token(self) -> int:
        slot = self.slot_bytes
        if slot is None:
            slot = (self.head_size + (self.head_size_v or self.head_size)) * self.dtype_bytes
        return self.num_kv_heads * self.head_slots * slot

    @property
    def real_page_size_bytes(self) -> int:
        return self.block_size * self.bytes_per_token

    @property
    def page_size_bytes(self) -> int:
        return self.page_size_padded if self.page_size_padded is not None else self.real_page_size_bytes

    def blocks_per_request(self, request: RequestShape) -> int:
        length = request.max_model_len
        if self.sliding_window is not None:
            if request.dcp > 1:
                raise InputError("--decode-context-parallel-size", "decode_context_parallel_size",
                                 "vLLM does not support sliding-window layers with DCP (SlidingWindowSpec)")
            # The window slides over the in-flight batches: W - 1 earlier tokens plus every token scheduled
            # but not yet settled, and one extra block because the window need not start on a block boundary.
            tokens = min(self.sliding_window - 1 + request.extra_retained_tokens + request.in_flight, length)
            return cdiv(tokens, self.block_size) + 1
        if self.chunk_size is not None:
            return cdiv(min(self.chunk_size + request.in_flight, length), self.block_size)
        if self.dcp_sharded and request.dcp > 1:
            length = cdiv(length, request.dcp)
        return cdiv(length, self.block_size)


@dataclass(frozen=True)
class MLAPage:
    """MLA: one latent vector (``kv_lora_rank + qk_rope_head_dim``) per token, no heads.

    DeepSeek-V3.2 keeps its indexer's key cache in the same KV cache group (one ``UniformTypeKVCacheSpecs``),
    so a layer slot here is the latent page and the indexer page together (``indexer_bytes_per_token``).
    """

    block_size: int
    latent_dim: int
    dtype_bytes: int
    latent_bytes_per_token: int | None = None  # a packed layout's size (pdtune.state.dtypes.DS_MLA_BYTES_PER_TOKEN)
    indexer_bytes_per_token: int = 0

    kind = LayerKind.MLA

    @property
    def latent_bytes(self) -> int:
        if self.latent_bytes_per_token is not None:
            return self.latent_bytes_per_token
        return self.latent_dim * self.dtype_bytes

    @property
    def bytes_per_token(self) -> int:
        return self.latent_bytes + self.indexer_bytes_per_token

    @property
    def page_size_bytes(self) -> int:
        return self.block_size * self.bytes_per_token

    @property
    def indexer_page_bytes(self) -> int:
        return self.block_size * self.indexer_bytes_per_token

    def blocks_per_request(self, request: RequestShape) -> int:
        length = cdiv(request.max_model_len, request.dcp) if request.dcp > 1 else request.max_model_len
        return cdiv(length, self.block_size)


@dataclass(frozen=True)
class RecurrentPage:
    """A recurrent layer's whole state for one request (vLLM's ``MambaSpec``): conv windows and SSM states.

    ``shapes``/``dtypes`` are the state tensors in order; the first ``conv_states`` of them are convolution
    windows. GDN, Mamba2, Mamba1 and KDA keep (conv, ssm); LFM2's short conv keeps a conv only; linear
    attention an ssm only.
    """

    kind: LayerKind
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[int, ...]
    conv_states: int
    block_size: int  # tokens a block stands for (max_model_len unless prefix caching aligns it)
    page_size_padded: int | None = None
    spec_blocks: int = 0  # num_speculative_blocks
    checkpoint_blocks: int = 0  # num_prefill_checkpoint_blocks (align mode)

    @property
    def conv_shape(self) -> tuple[int, ...]:
        return self.shapes[0] if self.conv_states else ()

    @property
    def ssm_shape(self) -> tuple[int, ...]:
        return self.shapes[-1] if self.conv_states < len(self.shapes) else ()

    @property
    def conv_bytes(self) -> int:
        return sum(math.prod(s) * b for s, b in zip(self.shapes[:self.conv_states], self.dtypes, strict=False))

    @property
    def ssm_bytes(self) -> int:
        rest = zip(self.shapes[self.conv_states:], self.dtypes[self.conv_states:], strict=True)
        return sum(math.prod(s) * b for s, b in rest)

    @property
    def state_bytes(self) -> int:
        return self.conv_bytes + self.ssm_bytes

    @property
    def page_size_bytes(self) -> int:
        return self.page_size_padded if self.page_size_padded is not None else self.state_bytes

    @property
    def padding_bytes(self) -> int:
        return self.page_size_bytes - self.state_bytes


PageSpec = AttentionPage | MLAPage | RecurrentPage
