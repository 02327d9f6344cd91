"""KV transfer between the pools: one request's state, the link it crosses, and the time it adds to TTFT.

In a disaggregated deployment the prefill engine computes a request's state and vLLM's NixlConnector moves it
to a decode engine before the first decode step: the time is a term of TTFT. What moves (vLLM 0.33,
``kv_connector/v1/nixl/base_scheduler.py``, ``NixlBaseScheduler._clip_transfer_block_ids`` and the KV cache
config's ``select_transfer_block_ids``):

* attention layers: the blocks that hold the ISL prompt tokens, whole blocks, per TP rank;
* recurrent (GDN, Mamba) layers: only the state-bearing page, one per layer (the speculative scratch slots
  stay behind), padded to the attention page as vLLM stores it.

Padding layer slots of a KV cache group hold no tensor and move nothing. Bytes come from
:func:`pdtune.state.plan_state` for each side's TP: with different prefill and decode TP, NIXL re-shards, each
decode TP rank reading its share from the prefill rank(s) that hold it. Ranks move in parallel, each over its
own link, so the time is set by the busiest GPU: ``max(bytes one decode GPU receives, bytes one prefill GPU
sends) / (bandwidth * link efficiency) + latency``.

The link: NVLink when both pools are the same GPU kind and the whole deployment fits one NVLink domain (an
NVL72 rack, or one 8-GPU HGX board); otherwise the scale-out network, at the slower of the two ends' NICs
(between HGX nodes, between racks, between GPU kinds). Bandwidths and the NVLink domain are the GPU table's
(``data/gpus/gpus.csv``: ``nvlink_gb_s``, ``nvlink_domain_gpus``, ``network_gb_s``); ``data/gpus/links.csv``
adds what that table lacks, each link's name, fixed latency and source.

A hybrid model's attention block is grown to cover the recurrent state, and the state shrinks with TP while
replicated KV heads do not, so prefill and decode of different TP can pick different block sizes; NIXL needs
one, so :func:`block_sizes` detects the mismatch and names the block to set with ``--block-size`` on both
sides (the larger one; the side that grows pays some padding per request).

Not modeled: NIXL's per-descriptor costs, the wait for the decode scheduler's next step, and contention
beyond the link utilisation a plan row reports.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path

from pdtune.errors import InputError
from pdtune.gpus import GpuSpec, gpus_file, load_gpu
from pdtune.guarded import bundled
from pdtune.io import read_csv_table
from pdtune.model import ModelSpec
from pdtune.paths import data_dir
from pdtune.state import StatePlan, plan_state
from pdtune.topology import Topology
from pdtune.units import MiB

NVLINK = "nvlink"
SCALE_OUT = "scale_out"
#: links.csv holds what gpus.csv lacks: the link's name, its fixed latency and where the link is published.
#: Bandwidths (``nvlink_gb_s``, ``network_gb_s``) and the NVLink domain come from gpus.csv, their one source.
_COLUMNS = ("gpu", "scope", "name", "latency_us", "source")


def links_file() -> Path:
    return data_dir() / "gpus" / "links.csv"


@dataclass(frozen=True)
class Link:
    """One GPU's link of one scope: bytes/s per GPU per direction and a fixed latency per transfer."""

    gpu: str
    scope: str  # NVLINK or SCALE_OUT
    name: str
    bandwidth: float  # bytes/s
    latency_s: float
    domain_gpus: int | None = None  # GPUs one NVLink domain holds (NVLink rows only)
    source: str = ""  # where the link of this GPU kind is published

    def seconds(self, n_bytes: float, efficiency: float = 1.0) -> float:
        """Time to move ``n_bytes`` over this link at ``efficiency`` of its bandwidth."""
        return n_bytes / (self.bandwidth * efficiency) + self.latency_s

    def to_dict(self) -> dict[str, object]:
        return {"gpu": self.gpu, "scope": self.scope, "name": self.name,
                "bandwidth_gb_s": self.bandwidth / 1e9, "latency_us": self.latency_s * 1e6,
                "domain_gpus": self.domain_gpus, "source": self.source}


@cache
def _links(path: str) -> dict[tuple[str, str], Link]:
    with bundled():
        return _read_links(Path(path))


def _read_links(source: Path) -> dict[tuple[str, str], Link]:
    rows = read_csv_table(source, _COLUMNS)
    out: dict[tuple[str, str], Link] = {}
    for i, row in enumerate(rows, start=2):
        where = f"{source}:{i}"
        scope = row["scope"].strip()
        if scope not in (NVLINK, SCALE_OUT):
            raise InputError(where, "scope", f"expected {NVLINK} or {SCALE_OUT}, got {scope!r}")
        try:
            latency = float(row["latency_us"])
        except (TypeError, ValueError):
            raise InputError(where, "latency_us", f"expected a number, got {row['latency_us']!r}") from None
        if not math.isfinite(latency) or latency < 0:
            raise InputError(where, "latency_us", f"must be a number >= 0, got {row['latency_us']}")
        name = (row.get("gpu") or "").strip().lower()
        try:
            gpu = load_gpu(name)
        except InputError:
            raise InputError(where, "gpu", f"{name!r} is not a GPU of {gpus_file()}") from None
        nvlink = scope == NVLINK
        out[(name, scope)] = Link(name, scope, row["name"].strip(),
                                  gpu.nvlink_bandwidth if nvlink else gpu.network_bandwidth, latency * 1e-6,
                                  gpu.nvlink_domain if nvlink else None, (row.get("source") or "").strip())
    return out


def load_link(gpu: str, scope: str) -> Link:
    """The bundled ``scope`` link of a GPU kind; an unknown GPU is bad input naming the file."""
    table = _links(str(links_file()))
    key = (str(gpu).strip().lower(), scope)
    if key not in table:
        known = sorted({g for g, _ in table})
        raise InputError(links_file(), "gpu", f"no {scope} link for GPU {gpu!r}; listed: {', '.join(known)}")
    return table[key]


def link_table(n_bytes: int, efficiency: float = 1.0) -> list[dict[str, object]]:
    """Every bundled link with the time ``n_bytes`` take over it (the chapter's worked number)."""
    return [{**link.to_dict(), "ms": 1000 * link.seconds(n_bytes, efficiency)}
            for _, link in sorted(_links(str(links_file())).items())]


def pool_scope(prefill_gpu: GpuSpec, decode_gpu: GpuSpec, gpus_total: int) -> str:
    """``nvlink`` when both pools are one GPU kind and the deployment fits one NVLink domain, else
    ``scale_out``."""
    if prefill_gpu.name == decode_gpu.name:
        domain = load_link(prefill_gpu.name, NVLINK).domain_gpus
        if domain is not None and gpus_total <= domain:
            return NVLINK
    return SCALE_OUT


def scope_link(prefill_gpu: GpuSpec, decode_gpu: GpuSpec, scope: str) -> Link:
    """The link of ``scope`` between the pools: NVLink of the (one) GPU kind, or the slower end's NIC."""
    if scope == NVLINK:
        if prefill_gpu.name != decode_gpu.name:
            raise InputError(links_file(), "scope", "NVLink does not join two GPU kinds")
        return load_link(prefill_gpu.name, NVLINK)
    ends = [load_link(prefill_gpu.name, SCALE_OUT), load_link(decode_gpu.name, SCALE_OUT)]
    return min(ends, key=lambda link: (link.bandwidth, -link.latency_s))


def pool_link(prefill_gpu: GpuSpec, decode_gpu: GpuSpec, gpus_total: int) -> Link:
    """The link the KV cache crosses from the prefill pool to the decode pool (see the module docstring)."""
    return scope_link(prefill_gpu, decode_gpu, pool_scope(prefill_gpu, decode_gpu, gpus_total))


def transfer_bytes(plan: StatePlan) -> int:
    """Bytes one TP rank moves for one request planned at ``max_model_len`` = the prompt's tokens.

    Attention groups: their blocks for those tokens; recurrent groups: one page (the running state); padding
    layer slots: nothing.
    """
    total = 0
    for group in plan.groups:
        layers = len(group.layers) - group.padding_layers
        blocks = 1 if group.kind.is_recurrent else group.blocks_per_request
        total += layers * blocks * group.page.page_size_bytes
    return total


@dataclass(frozen=True)
class BlockSizes:
    """The attention block each side picks for itself, and the one to set when they differ."""

    prefill: int
    decode: int

    @property
    def match(self) -> bool:
        return self.prefill == self.decode

    @property
    def to_set(self) -> int | None:
        """``--block-size`` for both sides when they differ (the larger, which both accept), else None."""
        return None if self.match else max(self.prefill, self.decode)


@dataclass(frozen=True)
class EngineExtras:
    """What both engines of a deployment run beyond the model: speculative decoding and, on the decode side,
    decode context parallelism. Both sides carry the same draft (its layers register KV caches NIXL moves);
    DCP shards the decode ranks' full-attention tokens only."""

    num_speculative_tokens: int = 0
    speculative_model: ModelSpec | None = None  # an EAGLE/EAGLE3 head or a draft model; None = MTP or none
    decode_context_parallel_size: int = 1

    def state_args(self, *, decode: bool) -> dict[str, object]:
        """The :func:`pdtune.state.plan_state` arguments for one side."""
        return {"num_speculative_tokens": self.num_speculative_tokens, "speculative_model": self.speculative_model,
                "decode_context_parallel_size": self.decode_context_parallel_size if decode else 1}


NO_EXTRAS = EngineExtras()


def block_sizes(spec: ModelSpec, prefill_tp: int, decode_tp: int, *, max_model_len: int,
                kv_cache_dtype: str, vllm: str, extras: EngineExtras = NO_EXTRAS) -> BlockSizes:
    """Each side's own block size (``pdtune.state``'s hybrid alignment for its TP; speculative tokens grow the
    recurrent state and so the block)."""
    def own(tp: int, decode: bool) -> int:
        return _side_state(spec, max_model_len, tp, kv_cache_dtype, vllm, extras, decode, None).block_tokens
    return BlockSizes(own(prefill_tp, False), own(decode_tp, True))


@lru_cache(maxsize=4096)
def _side_state(spec: ModelSpec, max_model_len: int, tp: int, kv_cache_dtype: str, vllm: str, extras: EngineExtras,
                decode: bool, block_size: int | None) -> StatePlan:
    """One side's state plan; a plan asks for the same few (TP, side) pairs for hundreds of layout pairs."""
    return plan_state(spec, max_model_len=max_model_len, tp=tp, kv_cache_dtype=kv_cache_dtype, vllm=vllm,
                      block_size=block_size, **extras.state_args(decode=decode))  # type: ignore[arg-type]


@dataclass(frozen=True)
class Transfer:
    """One request's KV transfer from a prefill engine to a decode engine over one link."""

    isl: int
    prefill_tp: int
    decode_tp: int
    blocks: BlockSizes
    prefill_bytes_per_rank: int  # the request's state on one prefill TP rank
    decode_bytes_per_rank: int  # what one decode TP rank receives
    link: Link
    efficiency: float

    @property
    def bytes_total(self) -> int:
        """Bytes crossing the link: every decode TP rank's share."""
        return self.decode_tp * self.decode_bytes_per_rank

    @property
    def send_bytes_per_gpu(self) -> float:
        """What the busiest prefill GPU sends: its state once per decode rank reading it (replicated state,
        such as MLA's latent, is read whole by every decode rank), spread over the prefill ranks."""
        whole = self.prefill_bytes_per_rank if self.decode_tp <= self.prefill_tp else 0
        return max(whole, self.bytes_total / self.prefill_tp)

    @property
    def bottleneck_bytes(self) -> float:
        return max(self.decode_bytes_per_rank, self.send_bytes_per_gpu)

    @property
    def seconds(self) -> float:
        return self.link.seconds(self.bottleneck_bytes, self.efficiency)

    @property
    def ms(self) -> float:
        return 1000.0 * self.seconds

    def link_utilization(self, requests_per_s: float, prefill_ranks: int, decode_ranks: int) -> float:
        """Share of the busiest GPU's link the KV stream takes at ``requests_per_s``, with requests spread
        evenly over ``prefill_ranks`` and ``decode_ranks`` (DP ranks of all engines on each side)."""
        per_send = requests_per_s / prefill_ranks * self.send_bytes_per_gpu
        per_recv = requests_per_s / decode_ranks * self.decode_bytes_per_rank
        return max(per_send, per_recv) / (self.link.bandwidth * self.efficiency)

    def to_dict(self) -> dict[str, object]:
        return {
            "isl": self.isl, "prefill_tp": self.prefill_tp, "decode_tp": self.decode_tp,
            "prefill_block_tokens": self.blocks.prefill, "decode_block_tokens": self.blocks.decode,
            "block_size_to_set": self.blocks.to_set,
            "prefill_mib_per_rank": self.prefill_bytes_per_rank / MiB,
            "decode_mib_per_rank": self.decode_bytes_per_rank / MiB,
            "mib_total": self.bytes_total / MiB, "link": self.link.to_dict(), "efficiency": self.efficiency,
            "ms": self.ms,
        }


def request_transfer(
    spec: ModelSpec,
    prefill: Topology,
    decode: Topology,
    link: Link,
    *,
    isl: int,
    osl: int,
    kv_cache_dtype: str,
    vllm: str,
    num_speculative_tokens: int = 0,
    efficiency: float = 1.0,
    speculative_model: ModelSpec | None = None,
    decode_context_parallel_size: int = 1,
) -> Transfer:
    """One request's transfer from ``prefill`` to ``decode`` engines over ``link``.

    Block sizes are decided at the request length both engines are sized for (``isl + osl``); the bytes
    moved are those of the ``isl`` prompt tokens. With MTP, or an EAGLE head / draft model
    (``speculative_model``), both engines carry the draft layers' KV (vLLM keeps them in the attention group),
    and it moves too. With decode context parallelism each decode rank receives its share of the
    full-attention tokens (``cdiv(tokens, dcp)``).
    """
    sp = EngineExtras(num_speculative_tokens, speculative_model, decode_context_parallel_size)
    blocks = block_sizes(spec, prefill.tp, decode.tp, max_model_len=isl + osl, kv_cache_dtype=kv_cache_dtype,
                         vllm=vllm, extras=sp)

    def per_rank(tp: int, decode_side: bool) -> int:
        return transfer_bytes(_side_state(spec, isl, tp, kv_cache_dtype, vllm, sp, decode_side, blocks.to_set))

    return Transfer(isl, prefill.tp, decode.tp, blocks, per_rank(prefill.tp, False), per_rank(decode.tp, True),
                    link, efficiency)
