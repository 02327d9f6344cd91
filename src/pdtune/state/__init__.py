"""Per-request state: page sizes, the hybrid block size, KV cache groups, and what fits in a KV cache.

vLLM stores every layer's per-request state in fixed-size *pages* drawn from one pool. Attention pages
hold ``block_size`` tokens; a recurrent layer (GDN, Mamba1/2, KDA, short conv) holds its whole state in one
page. A hybrid model only works if both kinds of page have the same size, so vLLM grows the attention block
until its page covers the recurrent state, then pads the recurrent page up to it. Layers are then
bucketed into *KV cache groups* of equal size; one block of the pool is one page in every layer of a
group, and a request takes blocks from each group: a full-attention group ``cdiv(max_model_len, block)``,
a sliding-window group ``cdiv(min(W - 1 + in_flight, max_model_len), block) + 1`` where ``in_flight`` is
``VllmConfig.max_in_flight_tokens`` (two batches of ``max_num_batched_tokens`` with async scheduling, vLLM
0.26+; one batch before), a chunked-local group ``cdiv(min(chunk + in_flight, max_model_len), block)``, a
recurrent group ``1 + spec`` blocks (``2 + spec + checkpoint`` with prefix caching).

The rules changed over vLLM releases, so every function here takes the semantics of one line
(:class:`Semantics`, each flag read from its row of the switches table ``data/vllm/switches.csv``, which
``scripts/vllm_switches.py`` generated from the published wheels), selected by ``--vllm VERSION``.
The lines that change the article's hybrid arithmetic:

- **0.11** — the article's arithmetic (``16 * cdiv(mamba_page, 16 * attn_page_1_token)``, one recurrent
  block per request, "KV cache size" logged as ``num_blocks // groups * block_size``).
- **0.20** — attention kernel-block alignment, speculative slots in recurrent blocks (``1 + spec``),
  prefix caching puts recurrent layers in ``align`` (``2 + spec`` blocks) or, for Mamba2 models, ``all``
  mode (a state per block); the group-size heuristic keeps near-equal buckets whole; NemotronH keeps its
  SSM state in float32; ``requested`` memory is rounded up; the CUDA-graph estimate is subtracted.
- **0.21** — "KV cache size" becomes ``int(max_concurrency * max_model_len)``.
- **0.27** — MLA hybrids round the attention block to 128 tokens.
- **0.28** — prefix caching defaults every model to ``align`` (an explicit ``all`` stays a choice to 0.31).
- **0.32** — Mamba2 layers keep one more block in ``align`` mode (a prefill checkpoint).
- **0.33** (current) — GDN layers on FlashInfer's prefill kernel do too, and in ``align`` mode the
  attention block is aligned to their 64-token checkpoint grid.

From 0.26 sliding-window and chunked-local layers hold two scheduler batches instead of one (see above).
The modules: :mod:`~pdtune.state.specs` (one frozen spec per kind with ``page_size_bytes``),
:mod:`~pdtune.state.dtypes` (every KV cache dtype), :mod:`~pdtune.state.layers` (each layer's spec on one
TP rank), :mod:`~pdtune.state.planner` (block size, alignment, groups) and :mod:`~pdtune.state.kvcache` (the
result).

Why the current line reserves more than the article: with MTP, every recurrent layer keeps ``1 + spec``
states (and ``3 + spec`` with prefix caching on), and the MTP draft's own attention layer joins the
attention group. The article's 759 MiB is the TP=1, no-MTP, no-prefix-caching case of 0.11.
"""

from pdtune.state.dtypes import FIRST_VERSION as KV_CACHE_DTYPES
from pdtune.state.dtypes import KVDtype, kv_dtype
from pdtune.state.kvcache import Capacity, KVCacheGroup, Speculation, StatePlan
from pdtune.state.planner import (
    FLASHINFER_GDN_CHECKPOINT_TOKENS,
    KERNEL_BLOCK_TOKENS,
    SPECULATIVE_METHODS,
    plan_state,
)
from pdtune.state.semantics import MambaCacheMode, Semantics
from pdtune.state.specs import AttentionPage, MLAPage, PageSpec, RecurrentPage, RequestShape

__all__ = [
    "FLASHINFER_GDN_CHECKPOINT_TOKENS", "KERNEL_BLOCK_TOKENS", "KV_CACHE_DTYPES", "SPECULATIVE_METHODS",
    "AttentionPage", "Capacity", "KVCacheGroup", "KVDtype", "MLAPage", "MambaCacheMode", "PageSpec",
    "RecurrentPage", "RequestShape", "Semantics", "Speculation", "StatePlan", "kv_dtype", "plan_state",
]
