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
all-reduces leave the node. The engine (:mod:`pdtune.perfmodel.engine`) prices its collectives with
:func:`group_bandwidth` and :func:`scale_out_latency`.
"""

from __future__ import annotations

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


def group_bandwidth(gpu: GpuSpec, group: int, eff: Efficiency) -> float:
    """Achieved per-GPU bandwidth of a collective over ``group`` GPUs, bytes/s."""
    return gpu.link_bandwidth(group) * eff.link
