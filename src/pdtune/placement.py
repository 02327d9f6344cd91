"""Where a deployment's engines sit: nodes and GPUs, the way srt-slurm allocates them.

srt-slurm's ``allocate_endpoints`` (``srtctl/core/topology.py``, srt-slurm 0.3.0) places workers in order
(prefill, decode, aggregated): a worker of a whole node or more takes whole nodes from the current one; a
smaller one packs from the current node's next free GPU and moves on when it does not fit; between the two pools
a partly used node is left behind unless prefill and decode may share nodes (its P/D colocation).
:func:`place_workers` follows those rules, so that a recipe's ``resources`` and the serve script's device lists
are the GPUs srt-slurm will hand out (the tests run srt-slurm's own allocator on every recipe); it refuses a
packing in which srt-slurm would give a whole-node worker GPUs a packed worker already holds.
:func:`disagg_placement` chooses between the two pools on nodes of their own and packed onto shared nodes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Worker:
    """One engine's place: its role and index, and per node it spans the node's index and its GPUs there."""

    role: str  # "prefill", "decode" or "agg"
    index: int
    gpus: int
    places: tuple[tuple[int, tuple[int, ...]], ...]  # (node, GPU indices on it), leader first

    @property
    def nodes(self) -> tuple[int, ...]:
        return tuple(n for n, _ in self.places)


def place_workers(groups: Sequence[tuple[str, int, int]], gpus_per_node: int, *,
                  packed: bool) -> list[Worker]:
    """Workers placed the way srt-slurm's ``allocate_endpoints`` places them (``srtctl/core/topology.py``):
    groups in order (prefill, decode, agg); a worker of a whole node or more takes whole nodes from the current
    one; smaller workers pack from the current node's next free GPU, moving on when one does not fit; between
    groups a partly used node is left behind unless ``packed`` (srt-slurm's P/D colocation). Raises ValueError
    when two workers would get the same GPU (srt-slurm's whole-node workers start at the current node even when
    a packed worker already uses part of it)."""
    out: list[Worker] = []
    node, offset = 0, 0
    used: set[tuple[int, int]] = set()
    for k, (role, count, gpus) in enumerate(groups):
        if count <= 0:
            continue
        if k and offset and not packed:
            node, offset = node + 1, 0
        span = math.ceil(gpus / gpus_per_node)
        for i in range(count):
            if gpus >= gpus_per_node:
                places = tuple((node + j, tuple(range(gpus_per_node))) for j in range(span))
                node += span
            else:
                if offset + gpus > gpus_per_node:
                    node, offset = node + 1, 0
                places = ((node, tuple(range(offset, offset + gpus))),)
                offset += gpus
                if offset >= gpus_per_node:
                    node, offset = node + 1, 0
            for n, idx in places:
                for g in idx:
                    if (n, g) in used:
                        raise ValueError(f"{role} worker {i} would share GPU {g} of node {n}")
                    used.add((n, g))
            out.append(Worker(role, i, gpus, places))
    return out


def nodes_used(workers: Sequence[Worker]) -> int:
    return 1 + max(n for w in workers for n in w.nodes) if workers else 0


@dataclass(frozen=True)
class Placement:
    """How a disaggregated row's workers sit on nodes, and why."""

    packed: bool
    prefill_nodes: int
    decode_nodes: int
    workers: tuple[Worker, ...]
    reason: str


def disagg_placement(x: int, gp: int, y: int, gd: int, gpus_per_node: int, *, nvlink_in_node: bool) -> Placement:
    """Separate prefill and decode nodes, or both packed on shared nodes (see the module docstring)."""
    groups = [("prefill", x, gp), ("decode", y, gd)]
    apart = place_workers(groups, gpus_per_node, packed=False)
    p_nodes = nodes_used([w for w in apart if w.role == "prefill"])
    d_nodes = nodes_used(apart) - p_nodes
    try:
        packed = place_workers(groups, gpus_per_node, packed=True)
    except ValueError:
        packed = []
    if packed and (nvlink_in_node or nodes_used(packed) < nodes_used(apart)):
        why = ("the plan priced the KV transfer over NVLink inside one node" if nvlink_in_node else
               f"{nodes_used(packed)} shared nodes instead of {nodes_used(apart)}")
        return Placement(True, nodes_used(packed), 0, tuple(packed), why)
    return Placement(False, p_nodes, d_nodes, tuple(apart), "prefill and decode on nodes of their own")
