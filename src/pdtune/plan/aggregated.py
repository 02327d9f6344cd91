"""The plan's aggregated baseline: replicas of one ``vllm serve`` server on the same GPU budget.

For every layout the model admits on a pool's GPU (the same candidates as the disaggregated pools:
:func:`pdtune.plan.pools.candidate_topologies`; the union of ``--prefill-topologies`` and
``--decode-topologies`` when either restricts the search), one aggregated server is predicted at each concurrency of the
plan's grid by :mod:`pdtune.perfmodel.aggregated` (chunked prefill and decode in the same steps, the token
budget, the KV room, all **modeled**), with the pool's factors and the plan's engine settings
(``--max-num-batched-tokens`` per DP rank, ``--gpu-memory-utilization``, ``--kv-cache-dtype``). The budget
holds ``k = N // g`` replicas of a ``g``-GPU layout: a row is ``k`` servers at concurrency ``c`` each
(``<k>x<layout>``), with ``k x`` the server's throughput over ``k x g`` GPUs, so tokens/s per GPU and per user
are the server's. Requests are spread over the replicas by a load balancer in front of them (each
``vllm serve`` is its own OpenAI server).

Not modeled here: MTP and draft models in the aggregated server (pdtune's aggregated model runs no
speculative decoding), so with MTP candidates on the decode side the comparison favours disaggregation.
Points beyond a server's KV room (its steady-state room, :func:`pdtune.perfmodel.aggregated.steady_capacity`)
are dropped and counted, as the decode pools drop theirs: the steady-state model's preemption branch is not
what vLLM does there (it queues new requests; issue 23).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from pdtune.errors import InputError
from pdtune.gpus import GpuSpec
from pdtune.model import ModelSpec
from pdtune.perfmodel import Efficiency, build_engine
from pdtune.perfmodel.aggregated import agg_plan, steady_capacity
from pdtune.plan.inputs import PlanSettings
from pdtune.plan.pools import Rejected, candidate_topologies, spans_nvlink_domain
from pdtune.topology import parse_topology

#: What limits an aggregated server, by the regime :mod:`pdtune.perfmodel.aggregated` finds.
AGG_BOTTLENECK = {
    "sparse": "decode steps: each server spends most steps decoding, its prompts interleaved in a few "
              "chunked-prefill steps",
    "dense": "mixed steps: every step of each server carries prompt chunks beside the decode tokens",
    "full": "the token budget: every step of each server is full (--max-num-batched-tokens), prompts queue",
}


@dataclass
class AggPool:
    """Aggregated candidates on one GPU: the rows they give and the layouts refused."""

    gpu: str
    rows: list[pd.DataFrame] = field(default_factory=list)
    layouts: list[str] = field(default_factory=list)
    rejected: list[Rejected] = field(default_factory=list)
    unloaded_ttft_ms: float = math.inf  # TTFT of one request alone on the fastest server
    dropped_above_room: int = 0  # grid points beyond a server's KV room


def aggregated_pool(spec: ModelSpec, gpu: GpuSpec, s: PlanSettings, eff: Efficiency) -> AggPool:
    """Every admissible layout of at most the budget as ``N // g`` aggregated replicas, at each grid point."""
    pool = AggPool(gpu.name)
    config = s.engine_config("prefill")  # no DCP: an aggregated server prefills too
    layouts = candidate_topologies(spec, s.max_gpus)
    given = [*(s.prefill_topologies or ()), *(s.decode_topologies or ())]
    if s.prefill_topologies is not None or s.decode_topologies is not None:
        # A restricted search restricts the aggregated servers to the same layouts.
        wanted = {parse_topology(t, "--prefill-topologies/--decode-topologies") for t in given}
        layouts = [t for t in layouts if t in wanted] + sorted((t for t in wanted if t not in layouts),
                                                                key=lambda t: (t.gpus, t.name))
    for topo in layouts:
        if topo.gpus > s.max_gpus:
            pool.rejected.append(Rejected("aggregated", gpu.name, topo.name, f"{topo.gpus} GPUs: over the budget"))
            continue
        try:
            engine = build_engine(spec, gpu, topo, isl=s.isl, osl=s.osl, config=config)
        except InputError as err:
            pool.rejected.append(Rejected("aggregated", gpu.name, topo.name, err.message))
            continue
        per_rank = steady_capacity(engine, s.isl, s.osl)
        room = per_rank * topo.dp
        points = []
        for c in s.grid:
            p = agg_plan(engine, c, s.isl, s.osl, eff.arrival_clustering, room=per_rank)
            if p.kv_limited:  # beyond the KV room, as the decode pools drop theirs
                pool.dropped_above_room += 1
                continue
            ttft_s, tpot_s = p.evaluate(engine, eff)
            points.append((c, ttft_s, tpot_s, p.regime))
        if not points:
            pool.rejected.append(Rejected("aggregated", gpu.name, topo.name,
                                          f"not one request of {s.isl}+{s.osl} tokens per DP rank fits its KV room"))
            continue
        c_arr = np.array([q[0] for q in points], dtype=float)
        ttft = np.array([q[1] for q in points]) * 1000.0
        tpot = np.array([q[2] for q in points]) * 1000.0
        pool.unloaded_ttft_ms = min(pool.unloaded_ttft_ms, float(ttft[0]))
        replicas = s.max_gpus // topo.gpus
        life_s = (ttft + (s.osl - 1) * tpot) / 1000.0
        server_tps = c_arr * (s.isl + s.osl) / life_s
        # a mixed plan has servers of each GPU kind: the label says which, as a pair's layouts say its pools
        label = f"{replicas}x{topo.canonical}" + (f" on {gpu.name}" if s.mixed else "")
        pool.layouts.append(topo.canonical)
        n = len(points)
        pool.rows.append(pd.DataFrame({
            "mode": "agg",
            "deployment": label,
            "topology": topo.canonical,
            "agg_replicas": replicas,
            "gpus_total": replicas * topo.gpus,
            "concurrency": (replicas * c_arr).astype(np.int64),
            "server_concurrency": c_arr.astype(np.int64),
            "total_tps": replicas * server_tps,
            "output_tps": replicas * c_arr * s.osl / life_s,
            "tps_per_gpu": server_tps / topo.gpus,
            "tps_per_user": 1000.0 / tpot,
            "ttft_ms_p50": ttft,
            "prefill_ttft_ms": ttft,
            "tpot_ms_p50": tpot,
            "kv_transfer_ms": 0.0,
            "kv_transfer_share": 0.0,
            "kv_link": "none",
            "kv_mib_per_request": 0.0,
            "kv_link_utilization": 0.0,
            "bottleneck": [q[3] for q in points],
            "decode_room": float(room),
            "prefill_gpu": gpu.name,
            "decode_gpu": gpu.name,
            "mtp_tokens": 0,
            "network_charged": spans_nvlink_domain(gpu, topo),
            "network_groups": (f"aggregated {topo.canonical}: a {max(topo.tp, topo.expert_shards)}-GPU group over "
                               f"{math.ceil(max(topo.tp, topo.expert_shards) / gpu.nvlink_domain)} NVLink domains"
                               if spans_nvlink_domain(gpu, topo) else ""),
            "replicas_in_budget": 1,
            "modeled": True,
            "prefill_source": "modeled",
            "decode_source": "modeled",
            "source": f"modeled aggregated server ({topo.canonical} on {gpu.name}), {replicas} replicas",
            "isl": s.isl,
            "osl": s.osl,
        }, index=range(n)))
    return pool


def bottleneck_words(row: dict) -> str:
    """What limits a row, in words (aggregated: the server's regime; disaggregated: rate matching's side)."""
    b = str(row.get("bottleneck") or "")
    if row.get("mode") == "agg":
        return AGG_BOTTLENECK.get(b, b)
    x, y = int(row.get("n_prefill_workers") or 0), int(row.get("n_decode_workers") or 0)
    if b == "prefill":
        # The row's concurrency is what the decode side holds at that rate (pdtune.frontier.xpyd, paced_tpot_ms):
        # the prefill engines run flat out, so a client more waits in their queue.
        return (f"prefill-bound: the {x} prefill engine{'s' if x != 1 else ''} set the rate and run at it, so "
                "clients beyond the row's concurrency wait in their queue; the decode side could take more")
    if b == "decode":
        return (f"decode-bound: the {y} decode engine{'s' if y != 1 else ''} set the rate; the prefill side "
                "could deliver more")
    if b == "balanced":
        return "balanced: prefill and decode deliver the same rate"
    return b
