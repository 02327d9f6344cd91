"""Plan one TP rank's KV cache the way vLLM does: block size, hybrid alignment, page unification, groups.

The steps, in vLLM 0.33's order:

1. the cache block: ``--block-size``, else the smallest block every attention backend takes
   (``Platform._preferred_block_size_for_backends``);
2. hybrid models: grow the attention block until one attention page covers a recurrent state, then pad the
   recurrent page to it (``Platform._align_hybrid_block_size``); skip layers: grow it until the quantized page
   covers the unquantized one (``_align_heterogeneous_kv_block_size``);
3. every layer's spec (:mod:`pdtune.state.layers`), the draft's layers after the target's;
4. with the hybrid KV-cache manager off, sliding and chunked layers become full attention
   (``kv_cache_planning.unify_hybrid_kv_cache_specs``);
5. groups (``get_kv_cache_groups``): one group when every spec is the same or of one type
   (``UniformTypeKVCacheSpecs``: e.g. DeepSeek-V3.2's MLA and indexer pages), else unify page sizes
   (``unify_kv_cache_spec_page_size``: scale a smaller block, pad a recurrent or non-MLA page) and split each
   bucket of equal specs into groups of one size (``_get_kv_cache_groups_uniform_page_size``).
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import replace
from typing import Any

from pdtune import limits, switches, versions
from pdtune.errors import InputError
from pdtune.model.spec import CacheLayer, LayerKind, ModelSpec
from pdtune.state.dtypes import KVDtype, kv_dtype
from pdtune.state.layers import Slot, attention_page, check_tensor_parallel, draft_layers, recurrent_page, target_layers
from pdtune.state.kvcache import KVCacheGroup, Speculation, StatePlan
from pdtune.state.semantics import MambaCacheMode, Semantics
from pdtune.state.specs import AttentionPage, MLAPage, PageSpec, RecurrentPage, RequestShape
from pdtune.units import cdiv

#: Smallest kernel block (tokens) of the attention backends vLLM picks on NVIDIA GPUs
#: (``get_supported_kernel_block_sizes`` in ``v1/attention/backends``, 0.20-0.33).
KERNEL_BLOCK_TOKENS: dict[str, int] = {
    "FLASHINFER": 16,
    "FLASH_ATTN": 16,
    "TRITON_ATTN": 16,
    "FLASHINFER_MLA": 32,
    "FLASHMLA": 64,
    "CUTLASS_MLA": 128,
    "TRITON_MLA": 16,
    "FLASH_ATTN_MLA": 16,
    "FLASHMLA_SPARSE": 64,
    "FLASHINFER_MLA_SPARSE": 32,
    "TURBOQUANT": 16,
    "ULTRAQUANT": 64,
}
#: Kernel block sizes a backend lists as exact ints (the others take any multiple of their smallest).
_EXACT_SIZES: dict[str, tuple[int, ...]] = {"FLASHINFER": (16, 32, 64), "FLASHINFER_MLA": (32, 64),
                                            "CUTLASS_MLA": (128,), "FLASHMLA": (64,), "TURBOQUANT": (16, 32, 64, 128)}
#: DeepSeek-V3.2's indexer backend takes 64-token blocks only (``DeepseekV32IndexerBackend``).
INDEXER_BLOCK_TOKENS = 64
#: FlashInfer's GDN prefill kernel, vLLM's default for GatedDeltaNet, exports states on a 64-token grid
#: (``gdn_attn.py``, 0.33). KDA layers prefill with vLLM's default Triton kernel, which exports none.
FLASHINFER_GDN_CHECKPOINT_TOKENS = 64

SPECULATIVE_METHODS = ("mtp", "eagle", "eagle3", "draft_model")


def plan_state(spec: ModelSpec, **options: Any) -> StatePlan:
    """Plan one TP rank's KV cache for ``spec`` the way vLLM ``options["vllm"]`` would (every option is
    :func:`_plan_state`'s). The answer depends on the arguments, on the vLLM environment variables in force
    (``--vllm-env``, a chapter's ``vllm_env``) and on the data folder the switches table is read from; all of it
    is the cache's key, so a plan made under one environment is never handed out under another. A refused input
    is never cached (the error is raised again)."""
    key = (spec, frozenset(options.items()), switches.active(), switches.env_source(), os.environ.get("PDTUNE_DATA"))
    try:
        hash(key)
    except TypeError:  # an unhashable option (a list of skipped layers): plan without the cache
        return _plan_state(spec, **options)
    return _kept_plan(*key)


#: Plans already made in this process: a plan search asks the same question many times (chapter 9's page of the
#: article's model asks 1,112 times for about 100 distinct plans), and a plan is a frozen value. The environment
#: and data folder are in the key only to tell plans apart.
@functools.lru_cache(maxsize=4096)
def _kept_plan(spec: ModelSpec, options: frozenset, _env: tuple, _source: str, _data: str | None) -> StatePlan:
    return _plan_state(spec, **dict(options))


def _plan_state(
    spec: ModelSpec,
    *,
    max_model_len: int,
    tp: int = 1,
    kv_cache_dtype: str = "auto",
    mamba_cache_dtype: str = "auto",
    mamba_ssm_cache_dtype: str = "auto",
    num_speculative_tokens: int = 0,
    vllm: str = versions.CURRENT,
    prefix_caching: bool = False,
    mamba_cache_mode: str | None = None,
    block_size: int | None = None,
    attention_backend: str | None = None,
    max_num_batched_tokens: int = 8192,
    speculative_model: ModelSpec | None = None,
    speculative_method: str | None = None,
    decode_context_parallel_size: int = 1,
    hybrid_kv_cache_manager: bool | None = None,
    allow_chunked_local_hma: bool | None = None,
    kv_connector_without_hma: bool = False,
    async_scheduling: bool | None = None,
    mamba_block_size: int | None = None,
    kv_cache_dtype_skip_layers: tuple[str, ...] | list[str] = (),
    check_max_model_len: bool = True,
) -> StatePlan:
    """Plan one TP rank's KV cache for ``spec`` the way vLLM ``vllm`` would.

    ``prefix_caching`` mirrors ``--enable-prefix-caching`` (vLLM's own default is on; PD deployments
    usually turn it off). The MTP module's attention layers join the cache when speculating from 0.20 on
    (vLLM does; the article, 0.11's arithmetic, does not). GatedDeltaNet and KDA layers prefill with vLLM's
    default kernels (FlashInfer, Triton).
    ``speculative_model`` is an EAGLE/EAGLE3 head or a separate draft model (its layers join the cache);
    ``decode_context_parallel_size`` shards full-attention tokens over that many ranks of the TP group.
    ``hybrid_kv_cache_manager``: None lets vLLM decide (off for chunked local attention unless
    ``allow_chunked_local_hma``, the ``VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE`` switch, and off
    behind a KV connector that lacks HMA support, ``kv_connector_without_hma``). ``allow_chunked_local_hma``
    None takes the variable's default in the line (``envs.py``: 0 in 0.11, 1 from 0.20; the switches table).
    """
    sem = Semantics.for_version(vllm)
    _check_positive("--max-model-len", "max_model_len", max_model_len, limits.MAX_MODEL_LEN)
    _check_positive("--tp", "tp", tp, limits.MAX_PARALLEL)
    _check_positive("--decode-context-parallel-size", "decode_context_parallel_size", decode_context_parallel_size,
                    limits.MAX_PARALLEL)
    _check_positive("--max-num-batched-tokens", "max_num_batched_tokens", max_num_batched_tokens,
                    limits.MAX_TOKENS_PER_STEP)
    if num_speculative_tokens < 0:
        raise InputError("--num-speculative-tokens", "num_speculative_tokens", "must not be negative")
    limits.bound(num_speculative_tokens, limits.MAX_SPECULATIVE_TOKENS, "--num-speculative-tokens",
                 "num_speculative_tokens")
    check_tensor_parallel(spec, tp)
    dcp = decode_context_parallel_size
    if tp % dcp:  # ParallelConfig: DCP reuses the TP ranks
        raise InputError("--decode-context-parallel-size", "decode_context_parallel_size",
                         f"tp_size={tp} must be divisible by dcp_size={dcp}")
    env = switches.environment(sem.version)
    if check_max_model_len and not env.flag(switches.LONG_MAX_MODEL_LEN):
        _check_max_model_len(spec, max_model_len)
    notes: list[str] = []
    speculation = _speculation(spec, num_speculative_tokens, speculative_model, speculative_method, tp)

    kvd = kv_dtype(_resolve_auto(spec, kv_cache_dtype, sem.version), spec.dtype_bytes, sem.version)
    backend = attention_backend or _default_backend(spec, sem, kvd)
    if backend not in KERNEL_BLOCK_TOKENS:
        raise InputError("--attention-backend", "attention_backend",
                         f"unknown backend {backend!r}; known: {', '.join(KERNEL_BLOCK_TOKENS)}")
    if block_size is not None:
        _check_positive("--block-size", "block_size", block_size, limits.MAX_TOKENS_PER_STEP)
    # VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE: --vllm-env's value, else the line's default (envs.py)
    allow_chunked = env.flag(switches.CHUNKED_LOCAL_HMA) if allow_chunked_local_hma is None else allow_chunked_local_hma
    hma = _hybrid_manager(spec, speculation, hybrid_kv_cache_manager, allow_chunked, kv_connector_without_hma)
    mode = _mamba_mode(spec, sem, prefix_caching, mamba_cache_mode, num_speculative_tokens)
    if mamba_block_size is not None and mode is MambaCacheMode.NONE and mamba_block_size != max_model_len:
        raise InputError("--mamba-block-size", "mamba_block_size", "can only be set with --enable-prefix-caching")

    # (1) the cache block: the user's, else the backend's preferred (its smallest kernel block, 16 if taken);
    # DeepSeek-V3.2's indexer backend only takes 64. 0.11 aligned hybrids to 16.
    base_block = block_size or _preferred_block(spec, backend)
    kernel_block = KERNEL_BLOCK_TOKENS[backend] if sem.kernel_alignment else 16
    skip = _skip_layers(spec, kvd, kv_cache_dtype_skip_layers)
    layers = target_layers(spec)
    attention_layers = [c for c in layers if c.kind.is_attention]
    recurrent_kinds = {c.kind for c in layers if c.kind.is_recurrent}
    if len(recurrent_kinds) > 1:
        raise InputError(spec.source, "layer_types", "layers of two recurrent kinds are not supported")
    rec_kind = next(iter(recurrent_kinds), None)

    if attention_layers:  # the heads are checked against TP before the recurrent state is (vLLM builds attention first)
        attention_page(spec, attention_layers[0], tp, kvd, base_block, dcp)

    # (2) hybrid alignment
    block = base_block
    rec_shapes = None
    mamba_pad: int | None = None
    if rec_kind is not None:
        rec_shapes = recurrent_page(spec, rec_kind, sem, tp, num_speculative_tokens, mamba_cache_dtype,
                                    mamba_ssm_cache_dtype, max_model_len)
        if attention_layers:
            block, mamba_pad = _align_hybrid(spec, sem, kvd, tp, rec_shapes.config_state_bytes, base_block,
                                             kernel_block, backend, mode, notes)
            if block_size is not None and block != block_size:
                notes.append(f"--block-size {block_size} is too small for the recurrent state; vLLM raises it to {block}")
    skip_pad: int | None = None
    if skip and sem.skip_layer_alignment:
        block, skip_pad, mamba_pad = _align_skip_layers(spec, kvd, tp, block, backend, mamba_pad, notes)

    # (3) every layer's spec
    mamba_block = max_model_len if mode is MambaCacheMode.NONE else (mamba_block_size or block)
    slots: list[Slot] = []
    draft_count = 0
    auto = KVDtype("auto", spec.dtype_bytes)
    for layer in layers:
        if layer.kind.is_recurrent:
            assert rec_shapes is not None
            page = replace(rec_shapes.page, block_size=mamba_block)
            page = _recurrent_blocks_setup(spec, sem, page, mode, num_speculative_tokens)
            if mamba_pad is not None:
                if mamba_pad < page.state_bytes:
                    raise InputError(spec.source, "layer_types", "vLLM asserts here: the recurrent page "
                                     f"({page.state_bytes} B) outgrows the aligned attention page ({mamba_pad} B)")
                page = replace(page, page_size_padded=mamba_pad)
            slots.append(Slot(layer.index, page))
            continue
        if layer.indexer:
            continue  # the indexer page rides in its MLA layer's slot (see MLAPage)
        layer_dtype = auto if _is_skipped(layer, skip) else kvd
        page = attention_page(spec, layer, tp, layer_dtype, block, dcp)
        if isinstance(page, AttentionPage) and page.sliding_window is not None:
            page = _sliding_block(page, backend, block, skip_pad if layer_dtype is auto else None, sem)
        slots.append(Slot(layer.index, page))
    if speculation is not None:
        draft_slots = _draft_slots(spec, sem, speculation, kvd, block, dcp)
        draft_count = len(draft_slots)
        slots += draft_slots
        if draft_count:
            what = "MTP draft attention" if speculation.method == "mtp" else f"{speculation.method} draft"
            notes.append(f"{draft_count} {what} layer(s) join the KV cache")

    # (4) HMA off: local attention allocated as full attention
    layer_specs = tuple(slots)  # every layer's spec as the model hands it to the planner (vLLM's kv_cache_spec)
    if not hma:
        slots = _promote_local(slots, notes)
        if rec_kind is not None:
            raise InputError(spec.source, "layer_types", "hybrid SSM models need the hybrid KV-cache manager; "
                             "vLLM fails at start-up without it (e.g. behind a KV connector without HMA)")

    # (5) groups
    in_flight = _in_flight_tokens(sem, max_num_batched_tokens, async_scheduling, speculation)
    extra = max(0, _lookahead(speculation) - 1) if sem.extra_retained else 0
    request = RequestShape(max_model_len, num_speculative_tokens, max_num_batched_tokens, in_flight, dcp, extra)
    groups = group_layers(spec, sem, slots, request, mode, notes)
    attention = next((s.page for s in slots if not isinstance(s.page, RecurrentPage)), None)
    recurrent = next((s.page for s in slots if isinstance(s.page, RecurrentPage)), None)
    if attention is not None and isinstance(attention, AttentionPage) and attention.sliding_window is not None:
        full = next((s.page for s in slots if isinstance(s.page, AttentionPage) and s.page.sliding_window is None
                     and not s.draft), None)
        attention = full or attention
    return StatePlan(
        model=spec,
        semantics=sem,
        tp=tp,
        request=request,
        kv_cache_dtype=kv_cache_dtype,
        mamba_cache_mode=mode,
        block_tokens=block,
        attention_page=attention,  # type: ignore[arg-type]
        recurrent_page=recurrent,  # type: ignore[arg-type]
        groups=groups,
        draft_layers=draft_count,
        notes=tuple(notes),
        dcp=dcp,
        hybrid_kv_cache_manager=hma,
        speculation=speculation,
        async_scheduling=_async_on(sem, async_scheduling, speculation),
        layer_specs=layer_specs,
    )


def _check_positive(source: str, name: str, value: int, maximum: int) -> None:
    if value <= 0:
        raise InputError(source, name, f"must be positive, got {value}")
    limits.bound(value, maximum, source, name)


def _check_max_model_len(spec: ModelSpec, max_model_len: int) -> None:
    """``_get_and_verify_max_len``: a longer ``--max-model-len`` than the config allows makes vLLM refuse to
    start (unless ``VLLM_ALLOW_LONG_MAX_MODEL_LEN=1``)."""
    limit = spec.max_length
    if limit is None or limit.assumed or max_model_len <= limit.tokens:
        return
    if limit.model_max_length is not None and max_model_len <= limit.model_max_length:
        return
    raise InputError(spec.source, limit.key, f"--max-model-len {max_model_len:,} is greater than the derived "
                     f"max_model_len ({limit.key} = {limit.tokens:,}, RoPE scaling included); vLLM refuses to start "
                     "unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1")


#: The first vLLM whose ``EngineArgs.create_engine_config`` resolves ``--kv-cache-dtype auto`` to a modelopt
#: checkpoint's declared KV dtype (``resolve_kv_cache_dtype_string``, vllm/utils/torch_utils.py): in the 0.14.0
#: wheel, not in 0.13.0's or 0.12.0's, where "auto" is the model dtype whatever the checkpoint declares.
RESOLVES_AUTO_FROM = "0.14.0"


def _resolve_auto(spec: ModelSpec, name: str, vllm: str) -> str:
    """``resolve_kv_cache_dtype_string``: "auto" becomes the checkpoint's declared KV dtype, if any (from
    :data:`RESOLVES_AUTO_FROM`)."""
    if name == "auto" and spec.kv_cache_quant_algo and versions.at_least(vllm, RESOLVES_AUTO_FROM):
        return spec.kv_cache_quant_algo
    if name == "bfloat16" and spec.indexer is not None:
        return "auto"  # DeepseekV32ForCausalLM's config hook
    return name


def _default_backend(spec: ModelSpec, sem: Semantics, kvd: KVDtype) -> str:
    # Blackwell defaults (the article's GB300): FlashInfer for GQA, FlashInfer-MLA for MLA from 0.20; a
    # dtype only one backend reads picks that backend.
    if spec.indexer is not None:
        return "FLASHINFER_MLA_SPARSE" if kvd.is_quantized and kvd.name != "fp8_ds_mla" else "FLASHMLA_SPARSE"
    if spec.mla is not None:
        return "FLASHINFER_MLA" if sem.kernel_alignment else "CUTLASS_MLA"
    return kvd.backend or "FLASHINFER"


def _preferred_block(spec: ModelSpec, backend: str) -> int:
    block = KERNEL_BLOCK_TOKENS[backend]
    if spec.indexer is not None:  # the indexer backend's [64] alongside the sparse MLA backend's
        block = math.lcm(block, INDEXER_BLOCK_TOKENS)
    return block


def _speculation(spec: ModelSpec, num_spec: int, draft: ModelSpec | None, method: str | None,
                 tp: int) -> Speculation | None:
    if method is not None and method not in SPECULATIVE_METHODS:
        raise InputError("--speculative-method", "speculative_method",
                         f"unknown method {method!r}; use {', '.join(SPECULATIVE_METHODS)}")
    if draft is None:
        if method not in (None, "mtp"):
            raise InputError("--speculative-model", "speculative_model", f"method {method!r} needs a draft model config")
        return Speculation("mtp", num_spec, None, tp) if num_spec > 0 else None
    if num_spec <= 0:
        raise InputError("--num-speculative-tokens", "num_speculative_tokens",
                         "a speculative model needs --num-speculative-tokens >= 1")
    if method is None or method == "mtp":
        arch = draft.architecture.lower()
        method = "eagle3" if "eagle3" in arch else "eagle" if "eagle" in arch else "draft_model"
    return Speculation(method, num_spec, draft, tp)


def _lookahead(speculation: Speculation | None) -> int:
    """``VllmConfig.num_prefill_lookahead_tokens``: 0 without EAGLE-style drafting, K for multi-module MTP."""
    if speculation is None or speculation.method == "draft_model":
        return 0
    return 1


def _async_on(sem: Semantics, requested: bool | None, speculation: Speculation | None) -> bool:
    if requested is not None:
        return requested
    # VllmConfig.__post_init__ (0.20+): on unless an incompatible option (pooling, an executor without
    # support, ROCm DeepEP DBO, PP>1 on the V1 runner, or a CPU-side speculative method). A separate draft
    # model turns the default off in 0.20-0.27 (the default branch lists only EAGLE/MTP and ngram_gpu).
    if speculation is not None and speculation.method == "draft_model" and not sem.draft_model_async_default:
        return False
    return sem.async_default


def _in_flight_tokens(sem: Semantics, mnbt: int, async_scheduling: bool | None,
                      speculation: Speculation | None) -> int | None:
    if not sem.in_flight_batches:
        return None
    # VllmConfig.max_concurrent_batches: 2 with async scheduling (PP = 1), else 1.
    batches = 2 if _async_on(sem, async_scheduling, speculation) else 1
    return batches * mnbt


def _hybrid_manager(spec: ModelSpec, speculation: Speculation | None, requested: bool | None,
                    allow_chunked: bool, connector_without_hma: bool) -> bool:
    """``VllmConfig.__post_init__``: whether the hybrid KV-cache manager (HMA) stays on."""
    need_off = connector_without_hma
    if spec.attention_chunk_size is not None:
        eagle = speculation is not None and speculation.method in ("mtp", "eagle", "eagle3")
        if eagle or not allow_chunked:
            need_off = True
    if requested is None:
        return not need_off
    if requested and need_off:
        raise InputError("--enable-hybrid-kv-cache-manager", "disable_hybrid_kv_cache_manager",
                         "vLLM refuses an explicit enable here (chunked local attention, or a KV connector "
                         "without HMA support)")
    return requested


def _mamba_mode(spec: ModelSpec, sem: Semantics, prefix_caching: bool, requested: str | None,
                num_spec: int) -> MambaCacheMode:
    if not spec.is_hybrid:
        return MambaCacheMode.NONE
    if requested is not None:
        try:
            mode = MambaCacheMode(requested)
        except ValueError:
            raise InputError("--mamba-cache-mode", "mamba_cache_mode", f"unknown mode {requested!r}") from None
        if mode is MambaCacheMode.ALL and not sem.has_all_mode:
            raise InputError("--mamba-cache-mode", "mamba_cache_mode", f"'all' does not exist in {sem.label}")
        if mode is MambaCacheMode.ALL and spec.mamba is None:
            # MambaModelConfig: a model without Mamba2 prefix-caching support falls back to "align".
            return MambaCacheMode.ALIGN
        if mode is not MambaCacheMode.NONE and not sem.hybrid_prefix_caching:
            raise InputError("--mamba-cache-mode", "mamba_cache_mode", f"{sem.label} has no mamba prefix caching")
        return mode
    if not prefix_caching or not sem.hybrid_prefix_caching:  # 0.11: MambaModelConfig turns it off for hybrids
        return MambaCacheMode.NONE
    # 0.20-0.27: models implementing SupportsMambaPrefixCaching (the Mamba2 family) default to "all",
    # except with speculative decoding in 0.20-0.21; GDN models fall back to "align". 0.28+: "align".
    if sem.all_mode_default and spec.mamba is not None:
        if sem.all_mode_yields_to_spec and num_spec > 0:
            return MambaCacheMode.ALIGN
        return MambaCacheMode.ALL
    return MambaCacheMode.ALIGN


def _attn_page_one_token(spec: ModelSpec, kvd: KVDtype, tp: int) -> int:
    """The page of one token the platform aligns to (an MLA page ignores the packed *_ds_mla sizes)."""
    if spec.mla is not None:
        return spec.mla.latent_dim * kvd.element_bytes
    a = spec.attention
    assert a is not None
    slots, slot_bytes = kvd.attention_head_bytes(a.head_dim, a.v_head_dim)
    return max(1, a.num_kv_heads // tp) * slots * slot_bytes


def _checkpoint_alignment(spec: ModelSpec) -> int:
    return FLASHINFER_GDN_CHECKPOINT_TOKENS if spec.gdn is not None else 1


def _align_hybrid(spec: ModelSpec, sem: Semantics, kvd: KVDtype, tp: int, state_bytes: int, base_block: int,
                  kernel_block: int, backend: str, mode: MambaCacheMode, notes: list[str]) -> tuple[int, int | None]:
    """The attention block that makes one attention page cover one recurrent state, and the padded page."""
    per_token = _attn_page_one_token(spec, kvd, tp)
    if not sem.kernel_alignment:
        needed = 16 * cdiv(state_bytes, 16 * per_token)
    elif mode is MambaCacheMode.ALL:
        assert spec.mamba is not None
        chunk = math.lcm(spec.mamba.chunk_size, max(kernel_block, base_block))
        needed = chunk * cdiv(cdiv(state_bytes, per_token), chunk)
    else:
        align = max(kernel_block, base_block)
        if sem.mla_hybrid_128 and spec.mla is not None:
            align = max(align, 128)
        if sem.gdn_checkpoint_block and mode is MambaCacheMode.ALIGN:
            align = math.lcm(align, _checkpoint_alignment(spec))
        needed = align * cdiv(state_bytes, align * per_token)
        needed = KERNEL_BLOCK_TOKENS[backend] * cdiv(needed, KERNEL_BLOCK_TOKENS[backend])
    block = max(base_block, needed)
    page = block * per_token
    if page == state_bytes:
        return block, None
    notes.append(f"recurrent page padded by {100 * (page - state_bytes) / state_bytes:.2f}% to match the attention page")
    return block, page


def _skip_layers(spec: ModelSpec, kvd: KVDtype, requested: tuple[str, ...] | list[str]) -> set[str]:
    """``--kv-cache-dtype-skip-layers`` plus TurboQuant's/UltraQuant's boundary layers (first and last two
    attention layers of a dense model, ``TurboQuantConfig.get_boundary_skip_layers``)."""
    skip = {str(s) for s in requested}
    if kvd.packs_kv and not spec.is_hybrid:
        n = min(2, spec.num_layers // 2)
        skip |= {str(i) for i in list(range(n)) + list(range(spec.num_layers - n, spec.num_layers))}
    if skip and not kvd.is_quantized:
        return set()  # nothing to skip: every layer is at the model dtype already
    return skip


def _is_skipped(layer: CacheLayer, skip: set[str]) -> bool:
    return str(layer.index) in skip or (layer.kind is LayerKind.SLIDING_ATTENTION and "sliding_window" in skip)


def _align_skip_layers(spec: ModelSpec, kvd: KVDtype, tp: int, block: int, backend: str, mamba_pad: int | None,
                       notes: list[str]) -> tuple[int, int | None, int | None]:
    """``_align_heterogeneous_kv_block_size``: the quantized page grows to cover an unquantized one."""
    primary = _attn_page_one_token(spec, kvd, tp)
    padded = _attn_page_one_token(spec, KVDtype("auto", spec.dtype_bytes), tp)
    if padded == primary:
        return block, None, mamba_pad
    smallest = KERNEL_BLOCK_TOKENS[backend]
    alignment = max(smallest, block)
    required = max(padded * smallest, mamba_pad or 0)
    needed = alignment * cdiv(required, alignment * primary)
    if block < needed:
        notes.append(f"block raised to {needed} tokens so the quantized page covers the unquantized skip layers")
        block = needed
    shared = block * primary
    return block, shared, (shared if mamba_pad is not None else None)


def _sliding_block(page: AttentionPage, backend: str, block: int, shared_page: int | None,
                   sem: Semantics) -> AttentionPage:
    """A sliding layer picks its own block (0.26+, ``_largest_kernel_block_within``): the largest kernel block
    whose page fits the primary page (or the shared skip page), else the smallest."""
    if not sem.skip_layer_alignment:
        return page
    per_token = page.bytes_per_token
    budget = shared_page or per_token * block
    exact = _EXACT_SIZES.get(backend)
    smallest = KERNEL_BLOCK_TOKENS[backend]
    candidates = list(exact) if exact else [max(smallest, (budget // per_token) // smallest * smallest)]
    fitting = [b for b in candidates if b * per_token <= budget]
    chosen = max(fitting) if fitting else min(candidates)
    return replace(page, block_size=chosen, page_size_padded=shared_page)


def _recurrent_blocks_setup(spec: ModelSpec, sem: Semantics, page: RecurrentPage, mode: MambaCacheMode,
                            num_spec: int) -> RecurrentPage:
    exports = ((spec.mamba is not None and sem.mamba2_checkpoint_block)
               or (spec.gdn is not None and sem.gdn_checkpoint_block))
    return replace(page, spec_blocks=num_spec, checkpoint_blocks=int(exports))


def recurrent_blocks(sem: Semantics, page: RecurrentPage, request: RequestShape, mode: MambaCacheMode) -> int:
    """``MambaSpec.max_memory_usage_bytes / page_size_bytes``."""
    if not sem.spec_in_recurrent_blocks:
        return 1
    if mode is MambaCacheMode.NONE:
        return 1 + page.spec_blocks
    if mode is MambaCacheMode.ALL:
        return cdiv(request.max_model_len, page.block_size)
    return 2 + page.spec_blocks + page.checkpoint_blocks


def _draft_slots(spec: ModelSpec, sem: Semantics, speculation: Speculation, kvd: KVDtype, block: int,
                 dcp: int) -> list[Slot]:
    base = spec.num_layers
    if speculation.draft is None:  # MTP: the target's own next-token modules (in the cache from 0.20)
        if not sem.spec_in_recurrent_blocks or spec.num_mtp_layers == 0:
            return []
        return [Slot(layer.index, attention_page(spec, layer, speculation.draft_tp, kvd, block, dcp), draft=True)
                for layer in draft_layers(spec, spec.num_mtp_layers)]
    draft = speculation.draft
    if draft.is_hybrid:
        raise InputError(draft.source, "layer_types", "a recurrent draft model is not supported")
    draft_kvd = KVDtype(kvd.name, spec.dtype_bytes)  # the draft runs in the target's dtype
    slots = []
    for layer in draft.cache_layers:
        page = attention_page(draft, layer, speculation.draft_tp, draft_kvd, block, dcp)
        slots.append(Slot(base + layer.index, page, draft=True))
    return slots


def _promote_local(slots: list[Slot], notes: list[str]) -> list[Slot]:
    """``_promote_local_kv_cache_specs``: with full attention present, sliding and chunked layers are
    allocated as full attention at the full layers' block size."""
    pages = [s.page for s in slots if isinstance(s.page, AttentionPage)]
    has_full = any(p.sliding_window is None and p.chunk_size is None for p in pages) or any(
        isinstance(s.page, MLAPage) for s in slots)
    has_local = any(p.sliding_window is not None or p.chunk_size is not None for p in pages)
    if not (has_full and has_local):
        return slots
    full_blocks = {p.block_size for p in pages if p.sliding_window is None and p.chunk_size is None}
    block = next(iter(full_blocks)) if len(full_blocks) == 1 else None
    out = []
    for s in slots:
        p = s.page
        if isinstance(p, AttentionPage) and (p.sliding_window is not None or p.chunk_size is not None):
            p = replace(p, sliding_window=None, chunk_size=None, block_size=block or p.block_size,
                        page_size_padded=None)
        out.append(Slot(s.index, p, s.draft))
    notes.append("hybrid KV-cache manager off: sliding/chunked layers get blocks for every token")
    return out


# ------------------------------------------------------------------------------------- grouping


def _type_key(page: PageSpec) -> tuple[object, ...]:
    """What ``UniformTypeKVCacheSpecs.is_uniform_type`` compares: the registered base spec and its window."""
    if isinstance(page, RecurrentPage):
        return ("mamba", page.spec_blocks, page.checkpoint_blocks, page.page_size_bytes)
    if page.kind is LayerKind.SLIDING_ATTENTION:
        return ("sliding", page.sliding_window)  # type: ignore[union-attr]
    if page.kind is LayerKind.CHUNKED_ATTENTION:
        return ("chunked", page.chunk_size)  # type: ignore[union-attr]
    return ("full",)  # FullAttentionSpec and its MLA subclass group together


def _unify(spec: ModelSpec, sem: Semantics, slots: list[Slot]) -> list[Slot]:
    """``unify_kv_cache_spec_page_size``: every page as large as the largest."""
    sizes = {s.page.page_size_bytes for s in slots}
    if len(sizes) <= 1:
        return slots
    if not sem.unify_scale:
        raise InputError(spec.source, "layer_types",
                         f"layers with different page sizes cannot be grouped in {sem.label}")
    largest = max(sizes)
    out = []
    for s in slots:
        p = s.page
        size = p.page_size_bytes
        if size == largest:
            out.append(s)
            continue
        if isinstance(p, RecurrentPage) and sem.unify_pad_mamba:
            p = replace(p, page_size_padded=largest)
        elif not isinstance(p, RecurrentPage) and largest % size == 0:
            p = replace(p, block_size=p.block_size * (largest // size))
        elif isinstance(p, AttentionPage) and sem.unify_pad_attention:
            p = replace(p, page_size_padded=largest)
        else:
            raise InputError(spec.source, "layer_types", f"a {size}-byte page does not divide the {largest}-byte "
                             f"page and {sem.label} cannot pad it (unify_kv_cache_spec_page_size)")
        out.append(Slot(s.index, p, s.draft))
    return out


def _group_blocks(sem: Semantics, page: PageSpec, request: RequestShape, mode: MambaCacheMode) -> int:
    if isinstance(page, RecurrentPage):
        return recurrent_blocks(sem, page, request, mode)
    return page.blocks_per_request(request)


def group_layers(spec: ModelSpec, sem: Semantics, slots: list[Slot], request: RequestShape, mode: MambaCacheMode,
                 notes: list[str]) -> tuple[KVCacheGroup, ...]:
    """``get_kv_cache_groups``: one group, one group of one type, or groups of equal size."""
    if not slots:
        raise InputError(spec.source, "layer_types", "no layer keeps a KV cache (attention-free models plan nothing)")
    pages = [s.page for s in slots]
    if all(p == pages[0] for p in pages):
        return (_group(sem, slots, request, mode),)
    keys = {_type_key(p) for p in pages}
    if len(keys) == 1 and len({p.block_size for p in pages}) == 1:
        return (_group(sem, slots, request, mode),)  # UniformTypeKVCacheSpecs: one group of mixed pages
    slots = _unify(spec, sem, slots)
    buckets: dict[object, list[Slot]] = {}
    for s in slots:
        buckets.setdefault(_bucket_key(s.page), []).append(s)
    sizes = [len(v) for v in buckets.values()]
    group_size = min(sizes)
    if sem.group_size_heuristic and max(sizes) < 1.5 * min(sizes):
        group_size = max(sizes)
    groups = []
    for members in buckets.values():
        n_groups = cdiv(len(members), group_size)
        padding = n_groups * group_size - len(members)
        if padding:
            notes.append(f"Add {padding} padding layers, may waste at most {100 * padding / len(members):.2f}% "
                         "KV cache memory")
        for i in range(n_groups):
            # vLLM deals layers round-robin (layers[i::n]) so pipeline stages pad evenly.
            groups.append(_group(sem, members[i::n_groups], request, mode, pad_to=group_size))
    return tuple(groups)


def _bucket_key(page: PageSpec) -> object:
    return page


def _group(sem: Semantics, members: list[Slot], request: RequestShape, mode: MambaCacheMode,
           pad_to: int | None = None) -> KVCacheGroup:
    page = members[0].page
    kind = page.kind
    blocks = max(_group_blocks(sem, s.page, request, mode) for s in members)
    layers: list[int | None] = [s.index for s in members]
    slot_pages = [s.page for s in members]
    if pad_to is not None:
        layers += [None] * (pad_to - len(members))
        slot_pages += [page] * (pad_to - len(members))
    uniform = all(p == page for p in slot_pages)
    return KVCacheGroup(kind, page, tuple(layers), blocks, () if uniform else tuple(slot_pages))
