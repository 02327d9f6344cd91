"""What a collective costs a group of GPUs: NVLink inside one NVLink domain, the scale-out network beyond it.

A TP all-reduce or an EP all-gather among ``G`` GPUs moves a known number of bytes per GPU (a ring moves
``2 (G-1)/G`` of the buffer for an all-reduce, ``(G-1)/G`` of the gathered tensor for an all-gather). Where
the bytes go depends on the group:

* ``G`` within one NVLink domain (8 GPUs of an HGX board, 72 of an NVL72 rack): NVLink, at
  ``nvlink_gb_s x link`` per GPU, plus ``collective_latency_s`` per call;
* ``G`` larger than the domain: the ring crosses the scale-out NIC, which is its slowest hop, so the bytes move
  at ``network_gb_s x link`` per GPU, and every call also pays the network's fixed cost (the scale-out latency of
  ``data/gpus/links.csv``, 20 us: a small all-reduce between two nodes) on top of ``collective_latency_s``.

Inside one NVLink domain vLLM's custom all-reduce runs a small message one-shot and a larger one two-shot, two
rounds each behind its own barrier (:func:`allreduce_rounds`): each round pays ``collective_latency_s``.

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


#: The largest message vLLM's custom all-reduce sends one-shot, by group size (``csrc/custom_all_reduce.cuh``,
#: ``CustomAllreduce::allreduce``: ``world_size_ <= 4 && bytes < 512 * 1024 || world_size_ <= 8 && bytes < 256 *
#: 1024``); a larger one is two-shot on NVLink, and on Hopper at TP8 it leaves the custom all-reduce for torch's
#: symmetric memory at the same size (``CUSTOM_ALL_REDUCE_MAX_SIZES["9.0"][8]``, 256 KiB, in vLLM 0.33's
#: ``distributed/device_communicators/all_reduce_utils.py``).
ONE_SHOT_BYTES = ((4, 512 * 1024), (8, 256 * 1024))


def allreduce_rounds(group: int, message_bytes: float) -> int:
    """Synchronisation rounds of one all-reduce of ``message_bytes`` over ``group`` GPUs of one NVLink domain: one
    (one-shot: every GPU reads every peer's buffer once) on two GPUs and for a small message, else two (a
    reduce-scatter and an all-gather, each behind its own barrier), each paying ``collective_latency_s``."""
    if group <= 2:
        return 1
    for largest_group, limit in ONE_SHOT_BYTES:
        if group <= largest_group:
            return 1 if message_bytes < limit else 2
    return 2


def allreduce_calls(gpu: GpuSpec, group: int, message_bytes: float) -> int:
    """Collective calls (each a ``collective_latency_s``) of one all-reduce: :func:`allreduce_rounds` inside one
    NVLink domain; one NCCL call for a group beyond it (the custom all-reduce needs every GPU in reach)."""
    return 1 if gpu.crosses_network(group) else allreduce_rounds(group, message_bytes)
