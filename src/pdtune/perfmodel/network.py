"""What a collective costs a group of GPUs: NVLink inside one NVLink domain, the scale-out network beyond it.

A TP all-reduce or an EP all-gather among ``G`` GPUs moves a known number of bytes per GPU (a ring moves
``2 (G-1)/G`` of the buffer for an all-reduce, ``(G-1)/G`` of the gathered tensor for an all-gather). Where
the bytes go depends on the group:

* ``G`` within one NVLink domain (8 GPUs of an HGX board, 72 of an NVL72 rack): NVLink, at
  ``nvlink_gb_s x link`` per GPU, plus ``collective_latency_s`` per call;
* ``G`` larger than the domain: the ring crosses the scale-out NIC, which is its slowest hop, so the bytes move
  at ``network_gb_s x link`` per GPU, and every call also pays the network's fixed cost (the scale-out latency of
  ``data/gpus/links.csv``, 20 us: a small all-reduce between two nodes) on top of ``collective_latency_s``.

That is why TEP16 across two 8-GPU HGX H200 nodes is slower per user than TEP8 in one: every layer's two
all-reduces leave the node. :func:`collective_cost` is the one function the engine (and a planner weighing
layouts against each other) calls for it.
"""

from __future__ import annotations

from dataclasses import dataclass

from functools import cache

from pdtune.errors import InputError
from pdtune.gpus import GpuSpec
from pdtune.perfmodel.efficiency import Efficiency
from pdtune.transfer import SCALE_OUT, load_link

#: The scale-out latency of a GPU that ``links.csv`` does not list: the one every listed GPU has.
UNLISTED_SCALE_OUT_LATENCY_S = 20e-6


@cache
def scale_out_latency(gpu: str) -> float:
    """Seconds one collective call adds when it leaves the NVLink domain (``links.csv``, scale-out row)."""
    try:
        return load_link(gpu, SCALE_OUT).latency_s
    except InputError:
        return UNLISTED_SCALE_OUT_LATENCY_S


@dataclass(frozen=True)
class CollectiveCost:
    """Seconds one GPU spends in ``calls`` collectives moving ``nbytes`` over a group of ``group`` GPUs."""

    group: int
    nbytes: float
    calls: int
    crosses_network: bool
    transfer_s: float  # bytes over the group's slowest link
    latency_s: float  # collective_latency_s per call
    network_latency_s: float  # the network's fixed cost per call (0 inside one NVLink domain)

    @property
    def seconds(self) -> float:
        return self.transfer_s + self.latency_s + self.network_latency_s


def group_bandwidth(gpu: GpuSpec, group: int, eff: Efficiency) -> float:
    """Achieved per-GPU bandwidth of a collective over ``group`` GPUs, bytes/s."""
    return gpu.link_bandwidth(group) * eff.link


def collective_cost(gpu: GpuSpec, group: int, nbytes: float, calls: int, eff: Efficiency) -> CollectiveCost:
    """The cost of ``calls`` collectives that move ``nbytes`` per GPU in total over ``group`` GPUs."""
    crosses = gpu.crosses_network(group)
    transfer = nbytes / group_bandwidth(gpu, group, eff) if nbytes else 0.0
    return CollectiveCost(
        group=group,
        nbytes=nbytes,
        calls=calls,
        crosses_network=crosses,
        transfer_s=transfer,
        latency_s=calls * eff.collective_latency_s,
        network_latency_s=calls * scale_out_latency(gpu.name) if crosses else 0.0,
    )


def all_reduce_bytes(group: int, buffer_bytes: float) -> float:
    """Bytes one GPU sends in a ring all-reduce of ``buffer_bytes``: ``2 (G-1)/G`` of the buffer."""
    return 2 * (group - 1) / group * buffer_bytes if group > 1 else 0.0


def all_reduce_seconds(gpu: GpuSpec, group: int, buffer_bytes: float, eff: Efficiency) -> float:
    """One all-reduce of ``buffer_bytes`` over ``group`` GPUs (0 for a group of one)."""
    if group <= 1:
        return 0.0
    return collective_cost(gpu, group, all_reduce_bytes(group, buffer_bytes), 1, eff).seconds
