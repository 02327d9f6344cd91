"""Per-request state: page sizes, the hybrid block size, KV cache groups, and what fits in a KV cache.

vLLM stores every layer's per-request state in fixed-size *pages* drawn from one pool. Attention pages
hold ``block_size`` tokens; a GatedDeltaNet or Mamba2 layer holds its whole recurrent state in one page.
A hybrid model only works if both kinds of page have the same size, so vLLM grows the attention block
until its page covers the recurrent state, then pads the recurrent page up to it. Layers are then
bucketed into *KV cache groups* of equal size; one block of the pool is one page in every layer of a
group, and a request takes blocks from each group.

The rules changed over vLLM releases, so every function here takes the semantics of one line
(:class:`Semantics`), selected by ``--vllm VERSION``:

- **0.11** — the article's arithmetic (``16 * cdiv(mamba_page, 16 * attn_page_1_token)``, one recurrent
  block per request, "KV cache size" logged as ``num_blocks // groups * block_size``).
- **0.20** — attention kernel-block alignment, speculative slots in recurrent blocks (``1 + spec``),
  prefix caching puts recurrent layers in ``align`` (``2 + spec`` blocks) or, for Mamba2 models, ``all``
  mode (a state per block); the group-size heuristic keeps near-equal buckets whole; NemotronH keeps its
  SSM state in float32; ``requested`` memory is rounded up; the CUDA-graph estimate is subtracted.
- **0.21** — "KV cache size" becomes ``int(max_concurrency * max_model_len)``.
- **0.27** — MLA hybrids round the attention block to 128 tokens.
- **0.28** — ``all`` mode is gone: prefix caching always means ``align``.
- **0.32** — Mamba2 layers keep one more block in ``align`` mode (a prefill checkpoint).
- **0.33** (current) — GDN layers on FlashInfer's prefill kernel do too, and in ``align`` mode the
  attention block is aligned to their 64-token checkpoint grid.

Each boundary was found by reading the published wheels 0.11 and 0.20-0.33 (see ``tests/test_state.py``).

Why the current line reserves more than the article: with MTP, every recurrent layer keeps ``1 + spec``
states (and ``3 + spec`` with prefix caching on), and the MTP draft's own attention layer joins the
attention group. The article's 759 MiB is the TP=1, no-MTP, no-prefix-caching case of 0.11.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from enum import StrEnum

from pdtune import versions
from pdtune.errors import InputError
from pdtune.model import DTYPE_BYTES, LayerKind, ModelSpec
from pdtune.units import MiB, cdiv


class MambaCacheMode(StrEnum):
    NONE = "none"  # no prefix caching: the running state only (plus speculative slots)
    ALIGN = "align"  # prefix caching: also the state at the last block boundary (and a checkpoint)
    ALL = "all"  # 0.20-0.32 Mamba2 prefix caching: a state for every block of the sequence


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
}

#: FlashInfer's GDN prefill kernel exports states on a 64-token grid (``gdn_attn.py``, 0.33).
FLASHINFER_GDN_CHECKPOINT_TOKENS = 64


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

    @classmethod
    def for_version(cls, version: str = versions.CURRENT) -> Semantics:
        v = versions.parse(version)
        if v < (0, 11, 0):
            raise InputError("--vllm", "vllm", f"{version}: pdtune follows vLLM 0.11 and newer")
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
        )

    @property
    def label(self) -> str:
        return f"vLLM {self.version}"


# ------------------------------------------------------------------------------------- page specs


@dataclass(frozen=True)
class AttentionPage:
    """Full or sliding-window attention: K and V for ``block_size`` tokens of the local KV heads."""

    block_size: int
    num_kv_heads: int
    head_size: int
    dtype_bytes: int
    sliding_window: int | None = None

    @property
    def bytes_per_token(self) -> int:
        return 2 * self.num_kv_heads * self.head_size * self.dtype_bytes

    @property
    def page_size_bytes(self) -> int:
        return self.block_size * self.bytes_per_token

    def blocks_per_request(self, request: RequestShape) -> int:
        if self.sliding_window is None:
            return cdiv(request.max_model_len, self.block_size)
        # The window slides over a chunked prefill: W - 1 earlier tokens plus one scheduler step,
        # and one extra block because the window need not start on a block boundary.
        tokens = min(self.sliding_window - 1 + request.max_num_batched_tokens, request.max_model_len)
        return cdiv(tokens, self.block_size) + 1


@dataclass(frozen=True)
class MLAPage:
    """MLA: one latent vector (``kv_lora_rank + qk_rope_head_dim``) per token, no heads."""

    block_size: int
    latent_dim: int
    dtype_bytes: int
    fp8_ds_mla: bool = False  # DeepSeek-V3.2's packed fp8 layout: 656 bytes per token

    @property
    def bytes_per_token(self) -> int:
        return 656 if self.fp8_ds_mla else self.latent_dim * self.dtype_bytes

    @property
    def page_size_bytes(self) -> int:
        return self.block_size * self.bytes_per_token

    def blocks_per_request(self, request: RequestShape) -> int:
        return cdiv(request.max_model_len, self.block_size)


@dataclass(frozen=True)
class RecurrentPage:
    """A GDN or Mamba2 layer's whole state for one request: a conv window and an SSM state."""

    kind: LayerKind
    conv_shape: tuple[int, int]  # (kernel - 1 + spec, conv_dim // tp)
    ssm_shape: tuple[int, int, int]  # (heads // tp, head_v_dim, head_k_dim) or (heads // tp, head_dim, state)
    conv_dtype_bytes: int
    ssm_dtype_bytes: int
    block_size: int  # tokens a block stands for (max_model_len unless prefix caching aligns it)
    page_size_padded: int | None = None

    @property
    def conv_bytes(self) -> int:
        return math.prod(self.conv_shape) * self.conv_dtype_bytes

    @property
    def ssm_bytes(self) -> int:
        return math.prod(self.ssm_shape) * self.ssm_dtype_bytes

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


@dataclass(frozen=True)
class RequestShape:
    """What vLLM sizes a request by."""

    max_model_len: int
    num_speculative_tokens: int = 0
    max_num_batched_tokens: int = 8192


# ------------------------------------------------------------------------------------- the plan


@dataclass(frozen=True)
class KVCacheGroup:
    """Layers sharing one block table: ``layers`` holds layer indices, ``None`` for a padding slot."""

    kind: LayerKind
    page: PageSpec
    layers: tuple[int | None, ...]
    blocks_per_request: int

    @property
    def padding_layers(self) -> int:
        return sum(1 for layer in self.layers if layer is None)


@dataclass(frozen=True)
class Capacity:
    """What a KV cache of ``kv_cache_bytes`` holds, as vLLM computes and logs it."""

    kv_cache_bytes: int
    num_blocks: int
    max_concurrency: float
    kv_cache_tokens: int
    requests_by_bytes: float  # the article's arithmetic: KV cache / bytes per request


@dataclass(frozen=True)
class StatePlan:
    """The per-request state of one model on one TP rank under one vLLM line."""

    model: ModelSpec
    semantics: Semantics
    tp: int
    request: RequestShape
    kv_cache_dtype: str
    mamba_cache_mode: MambaCacheMode
    block_tokens: int
    attention_page: AttentionPage | MLAPage | None
    recurrent_page: RecurrentPage | None
    groups: tuple[KVCacheGroup, ...]
    draft_layers: int
    notes: tuple[str, ...] = field(default=())

    @property
    def group_size(self) -> int:
        return max(len(g.layers) for g in self.groups)

    @property
    def block_bytes(self) -> int:
        """Bytes of one page (one layer, one block): every group's pages are this size."""
        return self.groups[0].page.page_size_bytes

    @property
    def pool_block_bytes(self) -> int:
        """One block of the shared pool: a page in each layer slot of a group."""
        return self.block_bytes * self.group_size

    @property
    def pool_blocks_per_request(self) -> int:
        """Block ids one request at ``max_model_len`` takes from the pool, summed over groups."""
        return sum(g.blocks_per_request for g in self.groups)

    @property
    def blocks_per_request(self) -> int:
        """Pages per request over every layer slot (padding slots included): 184 in the article."""
        return self.pool_blocks_per_request * self.group_size

    @property
    def bytes_per_request(self) -> int:
        return self.pool_blocks_per_request * self.pool_block_bytes

    @property
    def max_model_len(self) -> int:
        return self.request.max_model_len

    def capacity(self, kv_cache_bytes: int) -> Capacity:
        if kv_cache_bytes < 0:
            raise InputError("--kv-cache-gib", "kv_cache", f"must not be negative, got {kv_cache_bytes} bytes")
        num_blocks = kv_cache_bytes // self.pool_block_bytes
        max_concurrency = num_blocks / self.pool_blocks_per_request
        if self.semantics.tokens_from_concurrency:
            tokens = int(max_concurrency * self.max_model_len)
        else:
            # Recurrent groups stand for max_model_len tokens per block outside prefix caching.
            min_block = min(g.page.block_size for g in self.groups)
            tokens = num_blocks // len(self.groups) * min_block
        return Capacity(
            kv_cache_bytes=kv_cache_bytes,
            num_blocks=num_blocks,
            max_concurrency=max_concurrency,
            kv_cache_tokens=tokens,
            requests_by_bytes=kv_cache_bytes / self.bytes_per_request,
        )

    def per_layer_bytes(self) -> dict[str, int]:
        """State of one request in one layer of each kind (the article's "per token"/"per request" lines)."""
        out: dict[str, int] = {}
        if self.attention_page is not None:
            out["attention_per_token"] = self.attention_page.bytes_per_token
        if self.recurrent_page is not None:
            out["conv_per_request"] = self.recurrent_page.conv_bytes
            out["ssm_per_request"] = self.recurrent_page.ssm_bytes
            out["recurrent_padding"] = self.recurrent_page.padding_bytes
        return out

    def to_dict(self) -> dict[str, object]:
        return {
            "model": self.model.name,
            "vllm": self.semantics.version,
            "tp": self.tp,
            "max_model_len": self.max_model_len,
            "num_speculative_tokens": self.request.num_speculative_tokens,
            "kv_cache_dtype": self.kv_cache_dtype,
            "mamba_cache_mode": str(self.mamba_cache_mode),
            "block_tokens": self.block_tokens,
            "block_bytes": self.block_bytes,
            **self.per_layer_bytes(),
            "groups": [
                {
                    "kind": str(g.kind),
                    "layers": len(g.layers) - g.padding_layers,
                    "padding_layers": g.padding_layers,
                    "blocks_per_request": g.blocks_per_request,
                }
                for g in self.groups
            ],
            "group_size": self.group_size,
            "draft_layers": self.draft_layers,
            "pool_block_bytes": self.pool_block_bytes,
            "pool_blocks_per_request": self.pool_blocks_per_request,
            "blocks_per_request": self.blocks_per_request,
            "bytes_per_request": self.bytes_per_request,
            "mib_per_request": self.bytes_per_request / MiB,
            "notes": list(self.notes),
        }


# ------------------------------------------------------------------------------------- planning


def plan_state(
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
    gdn_prefill_backend: str = "flashinfer",
    max_num_batched_tokens: int = 8192,
    include_draft_layers: bool | None = None,
) -> StatePlan:
    """Plan one TP rank's KV cache for ``spec`` the way vLLM ``vllm`` would.

    ``prefix_caching`` mirrors ``--enable-prefix-caching`` (vLLM's own default is on; PD deployments
    usually turn it off). ``include_draft_layers`` adds the MTP module's attention layers to the cache
    when speculating (vLLM does; the article does not); by default it follows the version: on for 0.20+.
    """
    sem = Semantics.for_version(vllm)
    _check_positive("--max-model-len", "max_model_len", max_model_len)
    _check_positive("--tp", "tp", tp)
    if num_speculative_tokens < 0:
        raise InputError("--num-speculative-tokens", "num_speculative_tokens", "must not be negative")
    request = RequestShape(max_model_len, num_speculative_tokens, max_num_batched_tokens)
    notes: list[str] = []

    mode = _mamba_mode(spec, sem, prefix_caching, mamba_cache_mode, num_speculative_tokens)
    if include_draft_layers is None:
        include_draft_layers = sem.spec_in_recurrent_blocks
    draft = spec.num_mtp_layers if (num_speculative_tokens > 0 and include_draft_layers) else 0

    kv_bytes = _kv_dtype_bytes(spec, kv_cache_dtype)
    backend = attention_backend or _default_backend(spec, sem)
    if backend not in KERNEL_BLOCK_TOKENS:
        raise InputError("--attention-backend", "attention_backend",
                         f"unknown backend {backend!r}; known: {', '.join(KERNEL_BLOCK_TOKENS)}")
    if block_size is not None:
        _check_positive("--block-size", "block_size", block_size)
    # The cache block before hybrid alignment: the user's, else the backend's smallest kernel block
    # (0.11 forced 128 for CUTLASS_MLA and left GQA at 16). 0.11 aligned hybrids to 16 tokens.
    base_block = block_size or KERNEL_BLOCK_TOKENS[backend]
    kernel_block = KERNEL_BLOCK_TOKENS[backend] if sem.kernel_alignment else 16

    attention = _attention_page(spec, tp, kv_bytes, kv_cache_dtype, base_block)
    recurrent = _recurrent_page(spec, sem, tp, num_speculative_tokens, mamba_cache_dtype, mamba_ssm_cache_dtype,
                                max_model_len)

    block_tokens = base_block
    if recurrent is not None and attention is not None:
        block_tokens, recurrent, hybrid_notes = _align_hybrid(
            spec, sem, attention, recurrent, base_block, block_size, kernel_block, mode, gdn_prefill_backend,
            max_model_len,
        )
        notes += hybrid_notes
        attention = replace(attention, block_size=block_tokens)
    elif recurrent is not None:
        raise InputError(spec.source, "layer_types", "pure recurrent models (no attention layer) are not supported")

    layers: list[tuple[int, LayerKind]] = [(i, k) for i, k in enumerate(spec.layer_kinds) if k is not LayerKind.MLP]
    layers += [(spec.num_layers + j, spec.attention_kind) for j in range(draft)]
    groups = _group(spec, sem, layers, attention, recurrent, request, mode, gdn_prefill_backend)
    if draft:
        notes.append(f"{draft} MTP draft attention layer(s) share the attention group")
    return StatePlan(
        model=spec,
        semantics=sem,
        tp=tp,
        request=request,
        kv_cache_dtype=kv_cache_dtype,
        mamba_cache_mode=mode,
        block_tokens=block_tokens,
        attention_page=attention,
        recurrent_page=recurrent,
        groups=groups,
        draft_layers=draft,
        notes=tuple(notes),
    )


def _check_positive(source: str, name: str, value: int) -> None:
    if value <= 0:
        raise InputError(source, name, f"must be positive, got {value}")


def _mamba_mode(
    spec: ModelSpec, sem: Semantics, prefix_caching: bool, requested: str | None, num_spec: int
) -> MambaCacheMode:
    if not spec.is_hybrid:
        return MambaCacheMode.NONE
    if requested is not None:
        try:
            mode = MambaCacheMode(requested)
        except ValueError:
            raise InputError("--mamba-cache-mode", "mamba_cache_mode", f"unknown mode {requested!r}") from None
        if mode is MambaCacheMode.ALL and not sem.has_all_mode:
            raise InputError("--mamba-cache-mode", "mamba_cache_mode", f"'all' does not exist in {sem.label}")
        if mode is not MambaCacheMode.NONE and not sem.spec_in_recurrent_blocks:
            raise InputError("--mamba-cache-mode", "mamba_cache_mode", f"{sem.label} has no mamba prefix caching")
        return mode
    if not prefix_caching or not sem.spec_in_recurrent_blocks:
        return MambaCacheMode.NONE
    # 0.20-0.27: models implementing SupportsMambaPrefixCaching (the Mamba2 family) default to "all",
    # except with speculative decoding in 0.20-0.21; GDN models fall back to "align". 0.28+: "align".
    if sem.has_all_mode and spec.mamba is not None:
        if sem.all_mode_yields_to_spec and num_spec > 0:
            return MambaCacheMode.ALIGN
        return MambaCacheMode.ALL
    return MambaCacheMode.ALIGN


def _default_backend(spec: ModelSpec, sem: Semantics) -> str:
    # Blackwell defaults (the article's GB300): FlashInfer for GQA, FlashInfer-MLA for MLA from 0.20.
    if spec.mla is not None:
        return "FLASHINFER_MLA" if sem.kernel_alignment else "CUTLASS_MLA"
    return "FLASHINFER"


def _kv_dtype_bytes(spec: ModelSpec, kv_cache_dtype: str) -> int:
    if kv_cache_dtype == "auto":
        return spec.dtype_bytes
    if kv_cache_dtype == "fp8_ds_mla":
        return 1
    key = kv_cache_dtype.lower()
    if key not in DTYPE_BYTES:
        raise InputError("--kv-cache-dtype", "kv_cache_dtype",
                         f"unknown dtype {kv_cache_dtype!r}; use auto, fp8, fp8_e4m3, fp8_e5m2, bfloat16 or float16")
    return DTYPE_BYTES[key]


def _attention_page(
    spec: ModelSpec, tp: int, kv_bytes: int, kv_cache_dtype: str, block: int
) -> AttentionPage | MLAPage | None:
    if spec.mla is not None:
        # MLA caches one latent vector per token: nothing to shard across TP ranks.
        return MLAPage(block, spec.mla.latent_dim, kv_bytes, fp8_ds_mla=kv_cache_dtype == "fp8_ds_mla")
    a = spec.attention
    if a is None:
        return None
    if a.num_heads % tp:
        raise InputError(spec.source, "num_attention_heads", f"{a.num_heads} heads do not divide over TP={tp}")
    if a.num_kv_heads >= tp and a.num_kv_heads % tp:
        raise InputError(spec.source, "num_key_value_heads", f"{a.num_kv_heads} KV heads do not divide over TP={tp}")
    if a.num_kv_heads < tp and tp % a.num_kv_heads:
        raise InputError(spec.source, "num_key_value_heads",
                         f"TP={tp} is not a multiple of {a.num_kv_heads} KV heads (vLLM replicates them evenly)")
    # Below one KV head per rank vLLM replicates heads, so each rank still holds a whole head.
    kv_heads = max(1, a.num_kv_heads // tp)
    return AttentionPage(block, kv_heads, a.head_dim, kv_bytes, a.sliding_window)


def _recurrent_page(
    spec: ModelSpec,
    sem: Semantics,
    tp: int,
    num_spec: int,
    mamba_cache_dtype: str,
    mamba_ssm_cache_dtype: str,
    max_model_len: int,
) -> RecurrentPage | None:
    conv_dt = _state_dtype(spec, mamba_cache_dtype, "--mamba-cache-dtype")
    if spec.gdn is not None:
        g = spec.gdn
        _divides(spec, "linear_num_value_heads", g.num_v_heads, tp)
        _divides(spec, "linear_num_key_heads", g.num_k_heads, tp)
        ssm_dt = conv_dt
        if sem.ssm_dtype_configurable:
            # Qwen3.5-style configs name the SSM dtype; an explicit flag wins over it.
            chosen = mamba_ssm_cache_dtype if mamba_ssm_cache_dtype != "auto" else (spec.mamba_ssm_dtype or "auto")
            if chosen != "auto":
                ssm_dt = _state_dtype(spec, chosen, "--mamba-ssm-cache-dtype")
        return RecurrentPage(
            kind=LayerKind.GDN,
            conv_shape=(g.conv_kernel - 1 + num_spec, g.conv_dim // tp),
            ssm_shape=(g.num_v_heads // tp, g.head_v_dim, g.head_k_dim),
            conv_dtype_bytes=conv_dt,
            ssm_dtype_bytes=ssm_dt,
            block_size=max_model_len,
        )
    if spec.mamba is not None:
        m = spec.mamba
        _divides(spec, "mamba_num_heads", m.num_heads, tp)
        # Groups that do not divide over TP are replicated up to one per rank (extra_groups_for_head_shards).
        n_groups = m.n_groups if m.n_groups % tp == 0 else tp
        conv_dim = m.intermediate_size + 2 * n_groups * m.state_size
        _divides(spec, "n_groups", conv_dim, tp)
        ssm_dt = conv_dt
        if mamba_ssm_cache_dtype != "auto":
            ssm_dt = _state_dtype(spec, mamba_ssm_cache_dtype, "--mamba-ssm-cache-dtype")
        elif sem.ssm_fp32_for_nemotron and spec.mamba_ssm_cache_dtype_default:
            ssm_dt = _state_dtype(spec, spec.mamba_ssm_cache_dtype_default, "mamba_ssm_cache_dtype")
        spec_rows = num_spec if sem.spec_in_recurrent_blocks else 0  # 0.11's Mamba2 conv ignores spec tokens
        return RecurrentPage(
            kind=LayerKind.MAMBA2,
            conv_shape=(m.conv_kernel - 1 + spec_rows, conv_dim // tp),
            ssm_shape=(m.num_heads // tp, m.head_dim, m.state_size),
            conv_dtype_bytes=conv_dt,
            ssm_dtype_bytes=ssm_dt,
            block_size=max_model_len,
        )
    return None


def _state_dtype(spec: ModelSpec, name: str, source: str) -> int:
    if name == "auto":
        return spec.dtype_bytes
    key = name.lower()
    if key not in DTYPE_BYTES:
        raise InputError(source, source.lstrip("-").replace("-", "_"), f"unknown dtype {name!r}")
    return DTYPE_BYTES[key]


def _divides(spec: ModelSpec, field_name: str, value: int, tp: int) -> None:
    if value % tp:
        raise InputError(spec.source, field_name, f"{value} does not divide over TP={tp}")


def _align_hybrid(
    spec: ModelSpec,
    sem: Semantics,
    attention: AttentionPage | MLAPage,
    recurrent: RecurrentPage,
    base_block: int,
    user_block: int | None,
    kernel_block: int,
    mode: MambaCacheMode,
    gdn_prefill_backend: str,
    max_model_len: int,
) -> tuple[int, RecurrentPage, list[str]]:
    """The attention block that makes one attention page cover one recurrent state, and the padded state."""
    per_token = attention.bytes_per_token
    state = recurrent.state_bytes
    notes: list[str] = []
    if not sem.kernel_alignment:
        needed = 16 * cdiv(state, 16 * per_token)
    elif mode is MambaCacheMode.ALL:
        assert spec.mamba is not None
        chunk = math.lcm(spec.mamba.chunk_size, max(kernel_block, base_block))
        needed = chunk * cdiv(cdiv(state, per_token), chunk)
    else:
        align = max(kernel_block, base_block)
        if sem.mla_hybrid_128 and spec.mla is not None:
            align = max(align, 128)
        if sem.gdn_checkpoint_block and mode is MambaCacheMode.ALIGN:
            align = math.lcm(align, _checkpoint_alignment(spec, gdn_prefill_backend))
        needed = align * cdiv(state, align * per_token)
    block = base_block if user_block is not None and user_block >= needed else max(base_block, needed)
    if user_block is not None and user_block < needed:
        notes.append(f"--block-size {user_block} is too small for the recurrent state; vLLM raises it to {block}")
    page = block * per_token
    mamba_block = block if mode is not MambaCacheMode.NONE else max_model_len
    padded = replace(recurrent, block_size=mamba_block, page_size_padded=page if page != state else None)
    if page != state:
        notes.append(f"recurrent page padded by {100 * (page - state) / state:.2f}% to match the attention page")
    return block, padded, notes


def _checkpoint_alignment(spec: ModelSpec, gdn_prefill_backend: str) -> int:
    if spec.gdn is not None and gdn_prefill_backend == "flashinfer":
        return FLASHINFER_GDN_CHECKPOINT_TOKENS
    return 1


def _recurrent_blocks(
    spec: ModelSpec, sem: Semantics, page: RecurrentPage, request: RequestShape, mode: MambaCacheMode,
    gdn_prefill_backend: str,
) -> int:
    if not sem.spec_in_recurrent_blocks:
        return 1
    spec_blocks = request.num_speculative_tokens
    if mode is MambaCacheMode.NONE:
        return 1 + spec_blocks
    if mode is MambaCacheMode.ALL:
        return cdiv(request.max_model_len, page.block_size)
    # A prefill checkpoint block: Mamba2 mixers export one from 0.32, GDN on FlashInfer prefill from 0.33.
    exports = (spec.mamba is not None and sem.mamba2_checkpoint_block) or (
        spec.gdn is not None and sem.gdn_checkpoint_block and gdn_prefill_backend == "flashinfer"
    )
    return 2 + spec_blocks + int(exports)


def _group(
    spec: ModelSpec,
    sem: Semantics,
    layers: list[tuple[int, LayerKind]],
    attention: AttentionPage | MLAPage | None,
    recurrent: RecurrentPage | None,
    request: RequestShape,
    mode: MambaCacheMode,
    gdn_prefill_backend: str,
) -> tuple[KVCacheGroup, ...]:
    """Bucket layers by spec and split the buckets into groups of equal size, as vLLM's planner does."""
    buckets: dict[LayerKind, list[int]] = {}
    for index, kind in layers:
        key = LayerKind.GDN if kind.is_recurrent else kind
        buckets.setdefault(key, []).append(index)
    # Full and sliding attention share a page size, so they are separate buckets of one page.
    sizes = [len(v) for v in buckets.values()]
    group_size = min(sizes)
    if sem.group_size_heuristic and max(sizes) < 1.5 * min(sizes):
        group_size = max(sizes)
    groups: list[KVCacheGroup] = []
    for key, members in buckets.items():
        n_groups = cdiv(len(members), group_size)
        page: PageSpec
        if key.is_recurrent:
            assert recurrent is not None
            page = recurrent
            kind = recurrent.kind
            blocks = _recurrent_blocks(spec, sem, recurrent, request, mode, gdn_prefill_backend)
        else:
            assert attention is not None
            kind = key
            page = attention
            if isinstance(attention, AttentionPage) and key is LayerKind.FULL_ATTENTION:
                page = replace(attention, sliding_window=None)  # full layers of a sliding-window model
            blocks = page.blocks_per_request(request)
        for i in range(n_groups):
            # vLLM deals layers round-robin (layers[i::n]) so pipeline stages pad evenly.
            slot: list[int | None] = list(members[i::n_groups])
            slot += [None] * (group_size - len(slot))
            groups.append(KVCacheGroup(kind, page, tuple(slot), blocks))
    pages = {g.page.page_size_bytes for g in groups}
    if len(pages) > 1:
        raise InputError(spec.source, "layer_types",
                         "layers with different page sizes that vLLM cannot unify are not supported")
    return tuple(groups)
