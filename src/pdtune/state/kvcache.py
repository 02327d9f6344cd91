"""The result of planning: KV cache groups, what one request takes, and what a KV cache of N bytes holds."""

from __future__ import annotations

from dataclasses import dataclass, field

from pdtune.errors import InputError
from pdtune.model.spec import LayerKind, ModelSpec
from pdtune.state.semantics import MambaCacheMode, Semantics
from pdtune.state.specs import AttentionPage, MLAPage, PageSpec, RecurrentPage, RequestShape
from pdtune.units import MiB


@dataclass(frozen=True)
class KVCacheGroup:
    """Layers sharing one block table: ``layers`` holds layer indices, ``None`` for a padding slot.

    ``page`` is the group's page (one layer, one block); a group of one type but several page sizes
    (vLLM's ``UniformTypeKVCacheSpecs``, e.g. a draft model with other KV heads) lists each slot's page in
    ``slot_pages``.
    """

    kind: LayerKind
    page: PageSpec
    layers: tuple[int | None, ...]
    blocks_per_request: int
    slot_pages: tuple[PageSpec, ...] = ()

    @property
    def padding_layers(self) -> int:
        return sum(1 for layer in self.layers if layer is None)

    @property
    def pages(self) -> tuple[PageSpec, ...]:
        return self.slot_pages or (self.page,) * len(self.layers)

    @property
    def block_bytes(self) -> int:
        """One block of this group: a page in every layer slot."""
        return sum(p.page_size_bytes for p in self.pages)


@dataclass(frozen=True)
class Capacity:
    """What a KV cache of ``kv_cache_bytes`` holds, as vLLM computes and logs it."""

    kv_cache_bytes: int
    num_blocks: int
    max_concurrency: float
    kv_cache_tokens: int
    requests_by_bytes: float  # the article's arithmetic: KV cache / bytes per request
    tokens_by_blocks: int = 0  # the 0.11-0.20 formula, num_blocks // groups * block (x DCP)
    tokens_by_concurrency: int = 0  # the 0.21+ formula, int(max_concurrency * max_model_len)


@dataclass(frozen=True)
class Speculation:
    """The speculative decoder whose layers join the KV cache."""

    method: str  # mtp | eagle | eagle3 | draft_model
    num_tokens: int
    draft: ModelSpec | None = None  # the draft's config (None for MTP: the target's own layers)
    draft_tp: int = 1


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
    dcp: int = 1
    hybrid_kv_cache_manager: bool = True
    speculation: Speculation | None = None
    async_scheduling: bool = True
    #: every layer's spec before grouping (``pdtune.state.layers.Slot``: target layers, then the draft's), as
    #: ``get_kv_cache_groups`` receives them; scripts/golden_plans.py hands them to vLLM's own planner
    layer_specs: tuple[object, ...] = field(default=(), repr=False, compare=False)

    @property
    def group_size(self) -> int:
        return max(len(g.layers) for g in self.groups)

    @property
    def block_bytes(self) -> int:
        """Bytes of one page (one layer, one block) of the first group."""
        return self.groups[0].page.page_size_bytes

    @property
    def pool_block_bytes(self) -> int:
        """One block of the shared pool: vLLM's ``_get_kv_cache_bytes_per_block``, the largest group's pages."""
        return max(g.block_bytes for g in self.groups)

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

    @property
    def min_block_tokens(self) -> int:
        return min(g.page.block_size for g in self.groups)

    def capacity(self, kv_cache_bytes: int) -> Capacity:
        if kv_cache_bytes < 0:
            raise InputError("--kv-cache-gib", "kv_cache", f"must not be negative, got {kv_cache_bytes} bytes")
        num_blocks = kv_cache_bytes // self.pool_block_bytes
        max_concurrency = num_blocks / self.pool_blocks_per_request
        by_concurrency = int(max_concurrency * self.max_model_len)
        # 0.11-0.20: recurrent groups stand for max_model_len tokens per block outside prefix caching, and
        # DCP multiplies the size ("Multiplying the GPU KV cache size by the dcp_world_size").
        by_blocks = num_blocks // len(self.groups) * self.min_block_tokens * self.dcp
        return Capacity(
            kv_cache_bytes=kv_cache_bytes,
            num_blocks=num_blocks,
            max_concurrency=max_concurrency,
            kv_cache_tokens=by_concurrency if self.semantics.tokens_from_concurrency else by_blocks,
            requests_by_bytes=kv_cache_bytes / self.bytes_per_request,
            tokens_by_blocks=by_blocks,
            tokens_by_concurrency=by_concurrency,
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
        out: dict[str, object] = {
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
        # Fields beyond the first layouts, only when they say something.
        if self.dcp > 1:
            out["decode_context_parallel_size"] = self.dcp
        if self.speculation is not None and self.speculation.method != "mtp":
            out["speculative_method"] = self.speculation.method
        if not self.hybrid_kv_cache_manager:
            out["hybrid_kv_cache_manager"] = False
        if self.request.in_flight != self.request.max_num_batched_tokens:
            out["in_flight_tokens"] = self.request.in_flight
        return out
