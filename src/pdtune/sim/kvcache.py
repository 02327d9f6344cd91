"""KV cache blocks as vLLM 0.33 hands them out: the block pool, one manager per KV cache group, admission.

The groups, their block sizes and windows come from :func:`pdtune.state.plan_state` (:meth:`KVLayout.from_plan`),
the number of blocks from the engine's KV cache (``kv_cache_bytes // pool_block_bytes``). The rules, each named
after the vLLM function it follows (``vllm/v1/core/``):

* ``KVCacheManager.allocate_slots`` (kv_cache_manager.py): a request gets blocks for ``computed + new +
  lookahead`` tokens, all groups or none; with ``scheduler_reserve_full_isl`` (on by default) a *new* request
  is first checked for its whole prompt (``full_sequence_must_fit``), sliding-window groups capped at
  ``SlidingWindowSpec.max_admission_blocks_per_request``; out-of-window blocks are freed first
  (``remove_skipped_blocks``, on the processed-token basis ``computed - in_flight``).
* ``SingleTypeKVCacheManager.get_num_blocks_to_allocate`` / ``allocate_new_blocks``
  (single_type_kv_cache_manager.py): ``cdiv(tokens, block_size)`` blocks minus those held; a prefix-cache hit
  on a free block costs a free block too (it leaves the free queue). ``SlidingWindowManager``: tokens before
  ``computed - window + 1`` are skipped; ``MambaManager`` (``mamba_cache_mode`` "none"): ``1 +
  num_speculative_blocks`` blocks for the whole request.
* ``BlockPool`` (block_pool.py): one block is the null block; freed blocks without a hash go to the front of
  the free queue, hashed ones to its back (LRU), a request's blocks are freed tail first
  (``SingleTypeKVCacheManager.free``), and a new block taken from the front evicts the hash it held.
* Prefix caching (``KVCacheManager.get_computed_blocks``, ``FullAttentionManager.find_longest_cache_hit``): the
  longest run of cached full blocks from the start, at most ``num_tokens - 1`` tokens. Hashes name content:
  the shared prefix of a workload's prefix group, else the request itself (random prompts share nothing),
  so the only hits are shared prefixes and a preempted request's own blocks that were not yet evicted.

The pool holds counts, not block ids: only a block some request may hit later (a shared-prefix block, a
preempted request's block) is an object; every other free block is a count in its place in the queue. What
is followed here and what is not: prefix-cache hits are computed for full-attention groups; sliding-window
and recurrent groups take no hits (vLLM's windowed hit search is not followed: it matters only for a resumed
preempted request or a shared prefix), and recurrent groups need prefix caching off (``mamba_cache_mode``
"align" and its chunk alignment are not simulated; :func:`kv_layout` refuses them).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from pdtune.errors import InputError
from pdtune.model.spec import LayerKind
from pdtune.sim.request import SimRequest, Status
from pdtune.state import RecurrentPage, StatePlan

FULL, SLIDING, RECURRENT = "full", "sliding", "recurrent"


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class GroupLayout:
    """One KV cache group as the scheduler sees it."""

    kind: str  # FULL, SLIDING or RECURRENT
    block_size: int
    sliding_window: int | None = None
    spec_blocks: int = 0  # recurrent: MambaSpec.num_speculative_blocks
    admission_cap: int | None = None  # sliding: max_admission_blocks_per_request
    extra_retained: int = 0  # sliding: SlidingWindowSpec.extra_retained_tokens

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"kind": self.kind, "block_size": self.block_size}
        if self.sliding_window is not None:
            out["sliding_window"] = self.sliding_window
        if self.spec_blocks:
            out["spec_blocks"] = self.spec_blocks
        if self.admission_cap is not None:
            out["admission_cap"] = self.admission_cap
        if self.extra_retained:
            out["extra_retained"] = self.extra_retained
        return out


@dataclass(frozen=True)
class KVLayout:
    """The KV cache of one engine (one DP rank): its groups and the blocks of its pool."""

    groups: tuple[GroupLayout, ...]
    num_blocks: int

    def __post_init__(self) -> None:
        if self.num_blocks < 2:
            raise InputError("kv_cache", "num_blocks", f"a KV cache of {self.num_blocks} block(s) holds no request")

    @property
    def has_recurrent(self) -> bool:
        return any(g.kind == RECURRENT for g in self.groups)

    @classmethod
    def from_plan(cls, plan: StatePlan, num_blocks: int) -> KVLayout:
        """The groups of a :class:`~pdtune.state.StatePlan` (pdtune's copy of vLLM's planner)."""
        return cls(tuple(_group_layout(plan, g) for g in plan.groups), num_blocks)

    def to_dict(self) -> dict[str, object]:
        return {"num_blocks": self.num_blocks, "groups": [g.to_dict() for g in self.groups]}


def _group_layout(plan: StatePlan, group) -> GroupLayout:  # type: ignore[no-untyped-def]
    page = group.page
    if isinstance(page, RecurrentPage):
        if plan.mamba_cache_mode.value != "none":
            raise InputError("--enable-prefix-caching", "mamba_cache_mode",
                             f"recurrent layers in mamba_cache_mode {plan.mamba_cache_mode.value!r} are not "
                             "simulated (run the hybrid model with prefix caching off)")
        return GroupLayout(RECURRENT, page.block_size, spec_blocks=page.spec_blocks)
    if group.kind is LayerKind.SLIDING_ATTENTION:
        return GroupLayout(SLIDING, page.block_size, sliding_window=page.sliding_window,
                           admission_cap=group.blocks_per_request,
                           extra_retained=plan.request.extra_retained_tokens)
    if group.kind is LayerKind.CHUNKED_ATTENTION:
        raise InputError(plan.model.source, "attention_chunk_size",
                         "chunked local attention groups are not simulated")
    return GroupLayout(FULL, page.block_size)


class _Cached:
    """A hashed block some request may hit: its content key, its users, its place in the free queue."""

    __slots__ = ("key", "ref", "fid")

    def __init__(self, key: tuple[object, ...], ref: int) -> None:
        self.key = key
        self.ref = ref
        self.fid = -1


class BlockPool:
    """vLLM's ``BlockPool``: ``num_blocks - 1`` usable blocks (one is the null block) in one free queue.

    The queue is ``[unhashed blocks | hashed blocks, oldest first]``: ``free_blocks`` prepends blocks without
    a hash (reused first) and appends hashed ones (evicted least-recently freed first), ``get_new_blocks``
    pops from the front. Hashed blocks nobody can hit again are counted in runs; the others are
    :class:`_Cached` objects so that a hit can take them out of the queue (``touch``).
    """

    def __init__(self, num_blocks: int) -> None:
        self.num_gpu_blocks = num_blocks
        self.num_free = num_blocks - 1
        self._unhashed = num_blocks - 1
        self._fifo: OrderedDict[int, _Cached | int] = OrderedDict()  # hashed free blocks, front = next evicted
        self._next_fid = 0
        self.cache: dict[tuple[object, ...], list[_Cached]] = {}

    def usage(self) -> float:
        """``BlockPool.get_usage``: the used share of the usable blocks."""
        total = self.num_gpu_blocks - 1
        return 1.0 - self.num_free / total if total else 0.0

    @property
    def used(self) -> int:
        return self.num_gpu_blocks - 1 - self.num_free

    def take(self, n: int) -> None:
        """``get_new_blocks``: ``n`` blocks from the front of the free queue, evicting their hashes."""
        if n > self.num_free:
            raise AssertionError(f"cannot take {n} of {self.num_free} free blocks")
        self.num_free -= n
        first = min(n, self._unhashed)
        self._unhashed -= first
        n -= first
        fifo = self._fifo
        while n:
            fid, entry = next(iter(fifo.items()))
            if isinstance(entry, int):
                if entry <= n:
                    del fifo[fid]
                    n -= entry
                else:
                    fifo[fid] = entry - n
                    n = 0
            else:
                del fifo[fid]
                entry.fid = -1
                copies = self.cache[entry.key]
                copies.remove(entry)
                if not copies:
                    del self.cache[entry.key]
                n -= 1

    def give_unhashed(self, n: int) -> None:
        self._unhashed += n
        self.num_free += n

    def give_anonymous(self, n: int) -> None:
        """Hashed blocks nobody can hit again, appended to the back of the queue (one run)."""
        if n <= 0:
            return
        self.num_free += n
        fifo = self._fifo
        if fifo:
            last = next(reversed(fifo))
            if isinstance(fifo[last], int):
                fifo[last] = fifo[last] + n  # type: ignore[operator]
                return
        fifo[self._next_fid] = n
        self._next_fid += 1

    def release(self, block: _Cached) -> None:
        """One user lets go of a hashed block; the last one puts it at the back of the queue."""
        block.ref -= 1
        if block.ref == 0:
            block.fid = self._next_fid
            self._fifo[self._next_fid] = block
            self._next_fid += 1
            self.num_free += 1

    def touch(self, block: _Cached) -> None:
        """A hit on ``block``: out of the free queue if nobody held it."""
        if block.ref == 0:
            del self._fifo[block.fid]
            block.fid = -1
            self.num_free -= 1
        block.ref += 1

    def lookup(self, key: tuple[object, ...]) -> _Cached | None:
        """``get_one_block``: the first cached copy of this content."""
        copies = self.cache.get(key)
        return copies[0] if copies else None

    def insert(self, key: tuple[object, ...], ref: int) -> _Cached:
        block = _Cached(key, ref)
        self.cache.setdefault(key, []).append(block)
        if ref == 0:
            block.fid = self._next_fid
            self._fifo[self._next_fid] = block
            self._next_fid += 1
            self.num_free += 1
        return block


class _Blocks:
    """One request's blocks in one group (``req_to_blocks`` as counts)."""

    __slots__ = ("n", "nulls", "cached", "tracked", "explicit")

    def __init__(self) -> None:
        self.n = 0  # len(req_to_blocks), null blocks included
        self.nulls = 0  # leading null blocks (freed out-of-window blocks)
        self.cached = 0  # num_cached_block: blocks hashed so far
        self.tracked = False  # request_id in num_cached_block
        self.explicit: dict[int, _Cached] | None = None  # blocks some other request may hit


class KVCacheManager:
    """``KVCacheManager`` and its coordinator for one engine: ``allocate_slots``, ``get_computed_blocks``,
    ``cache_blocks``, ``free``."""

    def __init__(self, layout: KVLayout, *, max_model_len: int, enable_caching: bool = True,
                 num_hash_lookahead_tokens: int = 0, drop_eagle_block: bool = False,
                 num_reprefillable_tokens: int = 0, watermark: float = 0.0) -> None:
        if enable_caching and layout.has_recurrent:
            raise InputError("--enable-prefix-caching", "enable_prefix_caching",
                             "a model with recurrent layers is simulated with prefix caching off "
                             "(mamba_cache_mode 'align' is not simulated)")
        self.layout = layout
        self.groups = layout.groups
        self.pool = BlockPool(layout.num_blocks)
        self.max_model_len = max_model_len
        self.enable_caching = enable_caching
        # Hits are searched where vLLM's search is followed: full-attention groups of one block size.
        sizes = {g.block_size for g in layout.groups}
        self.hits_modeled = enable_caching and all(g.kind == FULL for g in layout.groups) and len(sizes) == 1
        self.hash_block_size = min(sizes)
        self.num_hash_lookahead_tokens = num_hash_lookahead_tokens
        self.drop_eagle_block = drop_eagle_block
        self.num_reprefillable_tokens = num_reprefillable_tokens
        self.watermark_blocks = int(watermark * layout.num_blocks)
        self.req: list[dict[str, _Blocks]] = [{} for _ in layout.groups]
        # Full-attention-only layouts (most models) take allocate_slots' short path: no skipped blocks, no
        # recurrent state, a group's need is its missing blocks.
        self._full_only = all(g.kind == FULL for g in layout.groups)
        self._full_groups = [(per, g.block_size) for per, g in zip(self.req, layout.groups)]
        # Other layouts: per request, the slot and processed-token counts below which allocate_slots neither
        # takes nor frees a block (most decode steps), so it can return at once. Dropped whenever its blocks change.
        self._quiet: dict[str, tuple[int, int]] = {}

    # ------------------------------------------------------------------------------------ queries

    @property
    def num_free_blocks(self) -> int:
        return self.pool.num_free

    def usage(self) -> float:
        return self.pool.usage()

    def blocks_of(self, rid: str) -> tuple[int, ...]:
        """Blocks the request holds in each group (null blocks left out)."""
        out = []
        for per_group in self.req:
            rb = per_group.get(rid)
            out.append(rb.n - rb.nulls if rb is not None else 0)
        return tuple(out)

    def _key(self, request: SimRequest, group: int, j: int) -> tuple[object, ...]:
        block = self.groups[group].block_size
        if request.prefix_id is not None and (j + 1) * block + self.num_hash_lookahead_tokens <= request.prefix_len:
            return ("p", request.prefix_id, group, j)
        return ("r", request.rid, group, j)

    def _num_hashes(self, request: SimRequest) -> int:
        """``len(request.block_hashes)``: full hash blocks of the known tokens (a hash covers the lookahead
        tokens after its block too, with EAGLE/MTP and prefix caching)."""
        return max(0, request.num_tokens - self.num_hash_lookahead_tokens) // self.hash_block_size

    def get_computed_blocks(self, request: SimRequest) -> tuple[list[list[_Cached]] | None, int]:
        """``get_computed_blocks``: the cached blocks (per group) of the request's longest cached prefix and
        its tokens; None without prefix caching (vLLM then returns its shared empty blocks)."""
        if not self.enable_caching:
            return None, 0
        hits: list[list[_Cached]] = [[] for _ in self.groups]
        if not self.hits_modeled:
            return hits, 0
        block = self.hash_block_size
        max_blocks = min((request.num_tokens - 1) // block, self._num_hashes(request))
        lookup = self.pool.lookup
        for j in range(max_blocks):
            found = [lookup(self._key(request, g, j)) for g in range(len(self.groups))]
            if any(b is None for b in found):
                break
            for g, b in enumerate(found):
                hits[g].append(b)  # type: ignore[arg-type]
        if self.drop_eagle_block and hits[0]:
            for h in hits:
                h.pop()
        return hits, len(hits[0]) * block

    def blocks_to_allocate(self, request: SimRequest, num_tokens: int, *, cap: bool = False) -> int:
        """``KVCacheCoordinator.get_num_blocks_to_allocate`` for a request with no new hits."""
        empty: list[_Cached] = []
        return sum(self._blocks_needed(i, request.rid, num_tokens, empty, request.num_computed_tokens, cap)
                   for i in range(len(self.groups)))

    # ------------------------------------------------------------------------------ allocation

    def _skipped_tokens(self, g: GroupLayout, computed: int) -> int:
        """``get_num_skipped_tokens``."""
        if g.kind == SLIDING:
            assert g.sliding_window is not None
            return max(0, computed - g.sliding_window + 1 - g.extra_retained)
        if g.kind == RECURRENT:
            return computed - 1
        return 0

    def _blocks_needed(self, gi: int, rid: str, num_tokens: int, hits: list[_Cached], total_computed: int,
                       cap: bool) -> int:
        """``get_num_blocks_to_allocate`` of one group."""
        g = self.groups[gi]
        if g.kind == RECURRENT:
            num_tokens += g.block_size * g.spec_blocks
        required = cdiv(num_tokens, g.block_size)
        if cap and g.admission_cap is not None:
            required = min(required, g.admission_cap)
        rb = self.req[gi].get(rid)
        held = rb.n if rb is not None else 0
        if rb is not None and rb.tracked:
            return max(required - held, 0)
        skipped = self._skipped_tokens(g, total_computed) // g.block_size
        new = max(required - max(skipped, len(hits) + held), 0)
        skip_hits = max(0, skipped - held)
        evictable = sum(1 for b in hits[skip_hits:] if b.ref == 0)
        return new + evictable

    def _remove_skipped(self, gi: int, rid: str, processed: int) -> None:
        """``remove_skipped_blocks``: free the blocks no attention will read again."""
        g = self.groups[gi]
        if g.kind == FULL:
            return
        rb = self.req[gi].get(rid)
        if rb is None:
            return
        skipped = self._skipped_tokens(g, processed)
        if skipped <= 0:
            return
        last = min(skipped // g.block_size, rb.n)
        if last <= rb.nulls:
            return
        self._free_range(gi, rb, rb.nulls, last, keep=False)
        rb.nulls = last

    def allocate_slots(self, request: SimRequest, num_new_tokens: int, *, num_new_computed_tokens: int = 0,
                       hits: list[list[_Cached]] | None = None, num_lookahead_tokens: int = 0,
                       num_external_computed_tokens: int = 0, delay_cache_blocks: bool = False,
                       full_sequence_must_fit: bool = False, reserved_blocks: int = 0,
                       has_scheduled_reqs: bool = True) -> bool:
        """``KVCacheManager.allocate_slots``: True when the blocks were allocated, False (vLLM's None) when
        they do not fit."""
        rid = request.rid
        if (self._full_only and hits is None and not num_external_computed_tokens and not full_sequence_must_fit):
            return self._allocate_full(request, num_new_tokens, num_new_computed_tokens, num_lookahead_tokens,
                                       delay_cache_blocks, reserved_blocks, has_scheduled_reqs)
        quiet = self._quiet.get(rid)
        if (quiet is not None and hits is None and not num_external_computed_tokens and not full_sequence_must_fit
                and not num_new_computed_tokens):
            computed = min(request.num_computed_tokens, self.max_model_len)
            slot = min(computed + num_new_tokens + num_lookahead_tokens, self.max_model_len)
            watermark = (self.watermark_blocks if has_scheduled_reqs
                         and request.status in (Status.WAITING, Status.PREEMPTED) else 0)
            if (slot <= quiet[0] and max(0, computed - request.num_in_flight_tokens) < quiet[1]
                    and watermark <= self.pool.num_free - reserved_blocks):
                if not delay_cache_blocks:
                    self.cache_blocks(request, min(computed + num_new_tokens, request.num_tokens))
                return True
        ngroups = len(self.groups)
        hit_lists = hits if hits is not None else [[] for _ in range(ngroups)]
        local = request.num_computed_tokens + num_new_computed_tokens
        total_computed = min(local + num_external_computed_tokens, self.max_model_len)
        watermark = 0
        if has_scheduled_reqs and request.status in (Status.WAITING, Status.PREEMPTED):
            watermark = self.watermark_blocks
        if full_sequence_must_fit:
            full = min(request.num_tokens, self.max_model_len)
            need = sum(self._blocks_needed(i, rid, full, hit_lists[i], total_computed, True) for i in range(ngroups))
            if need + watermark > self.pool.num_free:
                return False
        main = total_computed + num_new_tokens
        need_slot = min(main + num_lookahead_tokens, self.max_model_len)
        processed = max(0, total_computed - request.num_in_flight_tokens)
        for i in range(ngroups):
            self._remove_skipped(i, rid, processed)
        need = sum(self._blocks_needed(i, rid, need_slot, hit_lists[i], local + num_external_computed_tokens,
                                       False) for i in range(ngroups))
        if need + watermark > self.pool.num_free - reserved_blocks:
            self._quiet.pop(rid, None)
            return False
        if hits is not None or num_external_computed_tokens > 0:
            self._add_computed(request, hit_lists, local, num_external_computed_tokens)
        for i in range(ngroups):
            g = self.groups[i]
            rb = self.req[i].get(rid)
            if rb is None:
                rb = self.req[i][rid] = _Blocks()
            tokens = need_slot + (g.block_size * g.spec_blocks if g.kind == RECURRENT else 0)
            new = cdiv(tokens, g.block_size) - rb.n
            if new > 0:
                self.pool.take(new)
                rb.n += new
        self._quiet[rid] = self._quiet_limits(rid)
        if not delay_cache_blocks:
            self.cache_blocks(request, min(total_computed + num_new_tokens, request.num_tokens))
        return True

    def grow_running(self, rid: str, computed: int, in_flight: int, lookahead: int) -> None:
        """:meth:`allocate_slots` of one new token for a running request whose blocks are known to fit, with
        prefix caching off, no hits, no external tokens and no recurrent group (a parked decoder's renewal,
        :mod:`pdtune.sim.parking`): the same frees and takes, from the counters given, without the checks that
        cannot fail there and the hashing that does nothing without caching."""
        max_len = self.max_model_len
        total = computed if computed < max_len else max_len
        slot = total + 1 + lookahead
        if slot > max_len:
            slot = max_len
        processed = total - in_flight if total > in_flight else 0
        quiet = self._quiet.get(rid)
        if quiet is not None and slot <= quiet[0] and processed < quiet[1]:
            return  # allocate_slots' quiet case: nothing freed, nothing taken
        req = self.req
        for i, g in enumerate(self.groups):
            if g.kind != FULL:
                self._remove_skipped(i, rid, processed)
        for i, g in enumerate(self.groups):
            rb = req[i][rid]
            new = -(-slot // g.block_size) - rb.n
            if new > 0:
                self.pool.take(new)
                rb.n += new
        self._quiet[rid] = self._quiet_limits(rid)

    def forget_limits(self) -> None:
        """Drop every request's quiet limits (:mod:`pdtune.sim.fastpath` changed blocks behind
        :meth:`allocate_slots`)."""
        self._quiet.clear()

    def _quiet_limits(self, rid: str) -> tuple[int, int]:
        """The most slots a request's blocks hold in every group (``get_num_blocks_to_allocate`` is 0 up to
        it) and the fewest processed tokens at which ``remove_skipped_blocks`` frees one."""
        slot = proc = self.max_model_len + 1
        for g, per in zip(self.groups, self.req):
            rb = per[rid]
            b = g.block_size
            slot = min(slot, rb.n * b - (b * g.spec_blocks if g.kind == RECURRENT else 0))
            if g.kind != FULL and rb.n > rb.nulls:
                first = (rb.nulls + 1) * b  # skipped tokens that free the next block
                if g.kind == SLIDING:
                    assert g.sliding_window is not None
                    proc = min(proc, first + g.sliding_window - 1 + g.extra_retained)
                else:
                    proc = min(proc, first + 1)
        return slot, proc

    def _allocate_full(self, request: SimRequest, num_new_tokens: int, num_new_computed_tokens: int,
                       num_lookahead_tokens: int, delay_cache_blocks: bool, reserved_blocks: int,
                       has_scheduled_reqs: bool) -> bool:
        """:meth:`allocate_slots` for a layout of full-attention groups and a request with no new hits or
        external tokens (the running loop's every call): the same arithmetic, without the general case's calls
        (``remove_skipped_blocks`` frees nothing and a group's need is ``cdiv(tokens, block) - held``)."""
        rid = request.rid
        total_computed = min(request.num_computed_tokens + num_new_computed_tokens, self.max_model_len)
        need_slot = min(total_computed + num_new_tokens + num_lookahead_tokens, self.max_model_len)
        need = 0
        for per, block in self._full_groups:
            rb = per.get(rid)
            new = -(-need_slot // block) - (rb.n if rb is not None else 0)
            if new > 0:
                need += new
        watermark = 0
        if has_scheduled_reqs and request.status in (Status.WAITING, Status.PREEMPTED):
            watermark = self.watermark_blocks
        pool = self.pool
        if need + watermark > pool.num_free - reserved_blocks:
            return False
        if need:
            for per, block in self._full_groups:
                rb = per.get(rid)
                if rb is None:
                    rb = per[rid] = _Blocks()
                new = -(-need_slot // block) - rb.n
                if new > 0:
                    pool.take(new)
                    rb.n += new
        if not delay_cache_blocks:
            self.cache_blocks(request, min(total_computed + num_new_tokens, request.num_tokens))
        return True

    def _add_computed(self, request: SimRequest, hits: list[list[_Cached]], local: int, external: int) -> None:
        """``allocate_new_computed_blocks``: adopt the hit blocks (``add_local_computed_blocks``), then blocks
        for externally computed tokens (``allocate_external_computed_blocks``). A no-op for a request that
        already has its blocks."""
        rid = request.rid
        if any(rid in per_group and per_group[rid].tracked for per_group in self.req):
            return
        self._quiet.pop(rid, None)
        total = local + external
        for i, g in enumerate(self.groups):
            rb = self.req[i].get(rid)
            if rb is None:
                rb = self.req[i][rid] = _Blocks()
            skipped = self._skipped_tokens(g, total) // g.block_size
            skipped = max(skipped, 0)
            kept = hits[i][skipped:] if skipped > 0 else hits[i]
            if kept:
                rb.explicit = {}
                for k, b in enumerate(kept):
                    self.pool.touch(b)
                    rb.explicit[skipped + k] = b
            rb.nulls = skipped
            rb.n = skipped + len(kept)
            rb.cached = rb.n
            rb.tracked = True
        if external > 0:
            for i, g in enumerate(self.groups):
                rb = self.req[i][rid]
                skipped_tokens = self._skipped_tokens(g, total)
                ext = external
                if skipped_tokens > 0:
                    ext = min(total - skipped_tokens, external)
                if ext <= 0:
                    continue
                new = max(0, cdiv(total, g.block_size) - rb.n)
                if new:
                    self.pool.take(new)
                    rb.n += new

    def cache_blocks(self, request: SimRequest, num_tokens: int) -> None:
        """``KVCacheCoordinator.cache_blocks``: hash the request's full blocks up to ``num_tokens``."""
        if not self.enable_caching:
            return
        num_tokens = max(0, num_tokens - self.num_reprefillable_tokens)
        if num_tokens < request.hash_floor:
            return  # every group's hashes already cover these tokens (the hot path: a decode step within a block)
        upto = min(num_tokens, self._num_hashes(request) * self.hash_block_size)
        rid = request.rid
        floor = None
        for i, g in enumerate(self.groups):
            if g.kind == RECURRENT:
                continue  # MambaSpec in mode "none" is not prefix-cacheable
            rb = self.req[i].get(rid)
            if rb is None:
                continue
            full = upto // g.block_size
            if rb.cached >= full:
                if floor is None or (rb.cached + 1) * g.block_size < floor:
                    floor = (rb.cached + 1) * g.block_size
                continue
            if self.hits_modeled and request.prefix_id is not None:
                for j in range(max(rb.cached, rb.nulls), full):
                    key = self._key(request, i, j)
                    if key[0] == "p" and (rb.explicit is None or j not in rb.explicit):
                        if rb.explicit is None:
                            rb.explicit = {}
                        rb.explicit[j] = self.pool.insert(key, 1)
            rb.cached = full
            rb.tracked = True
            if floor is None or (full + 1) * g.block_size < floor:
                floor = (full + 1) * g.block_size
        if floor is not None:
            request.hash_floor = floor

    # ------------------------------------------------------------------------------------ freeing

    def _free_range(self, gi: int, rb: _Blocks, lo: int, hi: int, *, keep: bool, rid: str = "") -> None:
        """Free blocks ``[lo, hi)`` of one request, tail first (vLLM's eviction order)."""
        pool = self.pool
        explicit = rb.explicit or {}
        unhashed = hi - max(lo, rb.cached)
        if unhashed > 0:
            pool.give_unhashed(unhashed)
        top = min(hi, rb.cached)
        if top <= lo:
            return
        make_own = keep and self.hits_modeled
        if not explicit and not make_own:
            pool.give_anonymous(top - lo)
            return
        run = 0
        for j in range(top - 1, lo - 1, -1):
            b = explicit.get(j)
            if b is not None:
                if run:
                    pool.give_anonymous(run)
                    run = 0
                del explicit[j]
                pool.release(b)
            elif make_own:
                pool.insert(("r", rid, gi, j), 0)
            else:
                run += 1
        if run:
            pool.give_anonymous(run)

    def free(self, request: SimRequest, *, may_return: bool = False) -> None:
        """``KVCacheManager.free``: every group's blocks back to the pool, tail first. A preempted request
        (``may_return``) keeps its hashed blocks findable until they are evicted."""
        rid = request.rid
        request.hash_floor = 0  # its hashes start again with its next blocks
        self._quiet.pop(rid, None)
        for i, per_group in enumerate(self.req):
            rb = per_group.pop(rid, None)
            if rb is None:
                continue
            self._free_range(i, rb, rb.nulls, rb.n, keep=may_return, rid=rid)

    def check(self) -> None:
        """Conservation: blocks held by requests plus free blocks equal the pool (a test hook)."""
        held = sum(rb.n - rb.nulls for per_group in self.req for rb in per_group.values())
        shared = {id(b) for per_group in self.req for rb in per_group.values() if rb.explicit
                  for b in rb.explicit.values()}
        dup = sum(len(rb.explicit) for per_group in self.req for rb in per_group.values() if rb.explicit) - len(shared)
        assert held - dup + self.pool.num_free == self.pool.num_gpu_blocks - 1, (held, dup, self.pool.num_free)
