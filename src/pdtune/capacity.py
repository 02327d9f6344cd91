"""KV room: how many requests one engine, and one deployment of a topology, holds at a workload.

The rule composes :mod:`pdtune.memory` and :mod:`pdtune.state`: a GPU of the topology keeps
``total x gpu_memory_utilization`` minus its weights (from the config, sharded by the topology) and the
measured or assumed overheads for the KV cache (:func:`scenario_waterfall`); vLLM divides that cache into
pool blocks and admits as many requests as their blocks allow (:meth:`pdtune.state.StatePlan.capacity`,
the "Maximum concurrency" line), per TP rank, so per engine; a deployment of ``DP`` engines holds ``DP``
times that (:func:`topology_capacity`). The article's simpler arithmetic divides one GPU's KV cache by
the whole, unsharded request; it is kept beside vLLM's.

Chapter 4 prints the rule per topology, chapter 6 sets it beside where each decode sweep stops rising
(:func:`kv_room`, :func:`flattens_at`), and rate matching (:func:`pdtune.frontier.rate_match`) refuses a
predicted point whose decode worker runs more requests than its room at the disaggregated workload
(:func:`room_lookup`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from pdtune.errors import InputError
from pdtune.memory import Waterfall, weights_per_gpu
from pdtune.model import ModelSpec
from pdtune.results.schema import empty_frame
from pdtune.state import StatePlan, plan_state
from pdtune.topology import deployment_layout, parse_topology
from pdtune.units import GiB, MiB, from_gib

if TYPE_CHECKING:
    from pdtune.sweep import Sweep


def scenario_waterfall(
    spec: ModelSpec,
    *,
    topology: str,
    gpu_memory_gib: float,
    gpu_memory_utilization: float,
    non_torch_gib: float,
    activation_peak_gib: float,
    cudagraph_estimate_gib: float,
    mtp: bool,
    vllm: str,
) -> Waterfall:
    """A reader's GPU: the measured (or assumed) parts as given, weights from ``weights_per_gpu``."""
    layout = parse_topology(topology, "decode_topologies")
    if layout.pp > 1:
        raise InputError("decode_topologies", "topology", f"{topology}: pipeline parallelism is not modeled here")
    weights = weights_per_gpu(spec, tp=layout.tp, ep=layout.expert_shards, mtp=mtp and spec.num_mtp_layers > 0)
    return Waterfall(
        total=from_gib(gpu_memory_gib),
        gpu_memory_utilization=gpu_memory_utilization,
        weights=weights.total,
        activation_peak=from_gib(activation_peak_gib),
        non_torch=from_gib(non_torch_gib),
        cudagraph_estimate=from_gib(cudagraph_estimate_gib),
        source=f"pdtune.memory: {spec.name} {topology}{' + MTP' if weights.mtp else ''}, weights from the config",
        version=vllm,
    )


def capacity_by_version(
    spec: ModelSpec,
    kv_cache_bytes: int,
    vllm_versions: Iterable[str],
    **plan_kwargs: Any,
) -> pd.DataFrame:
    """What vLLM logs for one KV cache under several lines: blocks, max concurrency, "GPU KV cache size".

    A line that cannot plan the model (0.11 and MiMo-V2-Flash's pages of two sizes) has no row; the frame's
    ``attrs["cannot_plan"]`` says which and why. The last line's refusal is raised (nothing to show).
    """
    rows = []
    cannot: dict[str, str] = {}
    lines = list(dict.fromkeys(vllm_versions))  # a line named twice (the parameter and a fixed one) once
    for v in lines:
        try:
            plan = plan_state(spec, vllm=v, **plan_kwargs)
        except InputError as err:
            if v == lines[-1] or len(cannot) == len(lines) - 1:
                raise
            cannot[v] = err.message
            continue
        cap = plan.capacity(kv_cache_bytes)
        rows.append({
            "vllm": v,
            "tokens_formula": ("int(max_concurrency * max_model_len)" if plan.semantics.tokens_from_concurrency
                               else "num_blocks // groups * block_size"),
            "block_tokens": plan.block_tokens,
            "groups": len(plan.groups),
            "group_size": plan.group_size,
            "num_blocks": cap.num_blocks,
            "pool_blocks_per_request": plan.pool_blocks_per_request,
            "max_concurrency": cap.max_concurrency,
            "kv_cache_tokens": cap.kv_cache_tokens,
            "requests_by_bytes": cap.requests_by_bytes,
        })
    frame = pd.DataFrame(rows)
    frame.attrs["cannot_plan"] = cannot
    return frame


#: The vLLM line of the article's arithmetic (its 759 MiB per request).
ARTICLE_LINE = "0.11"


def article_request(spec: ModelSpec, *, vllm: str, **plan_kwargs: Any) -> tuple[StatePlan, str]:
    """The request the article's arithmetic plans (:func:`plan_state` with ``plan_kwargs``): vLLM 0.11's, as the
    article computed it, and ``vllm``'s for a model 0.11 cannot plan (MiMo-V2-Flash: its full and sliding layers
    have pages of different sizes, which 0.11 cannot group). The second value says why in one sentence, "" for
    0.11's; a model ``vllm`` cannot plan either is refused."""
    try:
        return plan_state(spec, vllm=ARTICLE_LINE, **plan_kwargs), ""
    except InputError as err:
        plan = plan_state(spec, vllm=vllm, **plan_kwargs)
        return plan, (f"vLLM {ARTICLE_LINE} cannot plan {spec.name} ({err.message}); the article's arithmetic "
                      f"below is vLLM {vllm}'s")


def topology_capacity(
    spec: ModelSpec,
    topologies: Iterable[str],
    *,
    gpu_memory_gib: float,
    gpu_memory_utilization: float,
    non_torch_gib: float,
    activation_peak_gib: float,
    cudagraph_estimate_gib: float,
    max_model_len: int,
    kv_cache_dtype: str,
    vllm: str,
    num_speculative_tokens: int,
    prefix_caching: bool = False,
    speculative_model: ModelSpec | None = None,
    decode_context_parallel_size: int = 1,
) -> pd.DataFrame:
    """Requests each decode topology holds, with and without MTP: modeled weights, given overheads.

    ``speculative_model`` (an EAGLE/EAGLE3 head or draft model) takes the MTP rows' place: those rows run the
    draft with ``num_speculative_tokens``, its layers in the KV cache as ``pdtune state --speculative-model``
    counts them (its weights are not in the waterfall; the note says so). ``decode_context_parallel_size``
    shards every row's full-attention tokens as ``pdtune state --decode-context-parallel-size`` does.

    Per GPU: KV cache = requested - weights - the given overheads. Per engine (``tp`` GPUs): vLLM's max
    concurrency on one TP rank. Per deployment: that times ``dp`` engines. The article's arithmetic divides
    one GPU's KV cache by the whole model's unsharded request. A topology whose TP does not divide the
    model's heads, or that uses pipeline parallelism, gets a ``note`` and no numbers. Rows with MTP only
    for a model with an MTP layer.
    """
    unsharded, _ = article_request(spec, max_model_len=max_model_len, kv_cache_dtype=kv_cache_dtype, vllm=vllm)
    # MTP rows only for a model that has an MTP layer to draft with.
    ks = [0] + ([num_speculative_tokens] if num_speculative_tokens and (spec.num_mtp_layers or speculative_model)
                else [])
    rows = []
    for name in topologies:
        layout = parse_topology(name, "decode_topologies")
        for k in ks:
            row: dict[str, Any] = {"topology": name.strip(), "mtp": k > 0, "tp": layout.tp, "engines": layout.dp,
                                   "gpus": layout.gpus, "note": ""}
            try:
                w = scenario_waterfall(
                    spec, topology=name, gpu_memory_gib=gpu_memory_gib,
                    gpu_memory_utilization=gpu_memory_utilization, non_torch_gib=non_torch_gib,
                    activation_peak_gib=activation_peak_gib, cudagraph_estimate_gib=cudagraph_estimate_gib,
                    mtp=k > 0 and speculative_model is None, vllm=vllm)
                plan = plan_state(spec, tp=layout.tp, max_model_len=max_model_len, kv_cache_dtype=kv_cache_dtype,
                                  vllm=vllm, num_speculative_tokens=k, prefix_caching=prefix_caching,
                                  speculative_model=speculative_model if k else None,
                                  decode_context_parallel_size=decode_context_parallel_size)
                if k and speculative_model is not None:
                    row["note"] = f"draft {speculative_model.name}, {k} tokens (its weights not counted)"
            except InputError as err:
                row["note"] = err.message
                rows.append(row)
                continue
            kv = w.kv_cache()
            if kv < 0:
                row.update(weights_gib=w.weights / GiB, kv_cache_gib=kv / GiB, note="weights do not fit")
                rows.append(row)
                continue
            cap = plan.capacity(kv)
            row.update(
                weights_gib=w.weights / GiB,
                kv_cache_gib=kv / GiB,
                mib_per_request_rank=plan.bytes_per_request / MiB,
                requests_article=kv / unsharded.bytes_per_request,
                requests_per_engine=cap.max_concurrency,
                requests_per_deployment=cap.max_concurrency * layout.dp,
                requests_per_gpu=cap.max_concurrency * layout.dp / layout.gpus,
                kv_cache_tokens=cap.kv_cache_tokens,
            )
            rows.append(row)
    return pd.DataFrame(rows, columns=CAPACITY_COLUMNS)


#: The columns of :func:`topology_capacity`, present even when no topology fits (then all NaN).
CAPACITY_COLUMNS = ["topology", "mtp", "tp", "engines", "gpus", "note", "weights_gib", "kv_cache_gib",
                    "mib_per_request_rank", "requests_article", "requests_per_engine", "requests_per_deployment",
                    "requests_per_gpu", "kv_cache_tokens"]


def flattens_at(concurrency: Sequence[float], tps: Sequence[float], tolerance: float = 0.01) -> float:
    """The first swept concurrency after which a curve gains less than ``tolerance`` (NaN if it never
    flattens inside the sweep): where requests start to wait instead of running."""
    points = sorted(zip(concurrency, tps, strict=True))
    for i, (c, y) in enumerate(points[:-1]):
        later = max(v for _, v in points[i + 1:])
        if later <= y * (1 + tolerance):
            return float(c)
    return math.nan


def kv_room(
    sweep: Sweep,
    spec: ModelSpec,
    *,
    gpu_memory_gib: float,
    gpu_memory_utilization: float,
    non_torch_gib: float,
    activation_peak_gib: float,
    cudagraph_estimate_gib: float,
    kv_cache_dtype: str,
    vllm: str,
    num_speculative_tokens: int,
    isl: int,
    osl: int,
) -> pd.DataFrame:
    """Requests each swept decode deployment holds, from :func:`topology_capacity` (chapter
    4's accounting), beside where its curve flattens.

    ``room`` is vLLM's max concurrency of one engine times its DP engines at the sweep's own workload
    (its ISL + OSL tokens per request); ``room_at_workload`` the same at ``isl + osl`` (the disaggregated
    workload). ``first_swept_above_room`` is the smallest swept concurrency the KV cache cannot hold.
    """
    columns = ["deployment", "layout", "mtp", "gpus", "kv_cache_gib", "mib_per_request_rank", "room",
               "room_per_gpu", "room_at_workload", "first_swept_above_room", "flattens_at", "note"]
    if not sweep.available:
        return empty_frame(columns)
    sweep_isl, sweep_osl = sweep.workload or (isl, osl)
    layouts = list(dict.fromkeys(sweep.frame["layout"]))
    common = dict(gpu_memory_gib=gpu_memory_gib, gpu_memory_utilization=gpu_memory_utilization,
                  non_torch_gib=non_torch_gib, activation_peak_gib=activation_peak_gib,
                  cudagraph_estimate_gib=cudagraph_estimate_gib, kv_cache_dtype=kv_cache_dtype, vllm=vllm)
    rows = []
    for (layout, mtp), group in sweep.frame.groupby(["layout", "mtp"], sort=False):
        k = int(pd.to_numeric(group["mtp_tokens"], errors="coerce").fillna(0).max()) if mtp else 0
        k = k or (num_speculative_tokens if mtp else 0)
        row: dict[str, Any] = {"deployment": group["deployment"].iloc[0], "layout": layout, "mtp": bool(mtp),
                               "gpus": int(group["gpus_total"].iloc[0])}
        try:
            here, there = (topology_capacity(spec, [layout], max_model_len=n, num_speculative_tokens=k,
                                             **common)
                           for n in (sweep_isl + sweep_osl, isl + osl))
        except InputError as err:
            rows.append({**row, "note": err.message})
            continue
        mine, theirs = (t[t["mtp"] == bool(k)].iloc[0] for t in (here, there))
        curve = group.sort_values("concurrency")
        room = mine.get("requests_per_deployment", math.nan)
        swept = curve["concurrency"]
        above = swept[swept > room] if pd.notna(room) else swept[:0]
        rows.append({
            **row, "kv_cache_gib": mine.get("kv_cache_gib", math.nan),
            "mib_per_request_rank": mine.get("mib_per_request_rank", math.nan), "room": room,
            "room_per_gpu": mine.get("requests_per_gpu", math.nan),
            "room_at_workload": theirs.get("requests_per_deployment", math.nan),
            "first_swept_above_room": float(above.iloc[0]) if len(above) else math.nan,
            "flattens_at": flattens_at(swept.astype(float), curve["tps_per_gpu"].astype(float)),
            "note": mine.get("note", "") or "",
        })
    out = pd.DataFrame(rows, columns=columns)
    rank = out["layout"].map({name: i for i, name in enumerate(layouts)}) * 2 + out["mtp"].astype(int)
    return out.iloc[np.argsort(rank.to_numpy(), kind="stable")].reset_index(drop=True)


def layout_room(
    spec: ModelSpec,
    topologies: Iterable[str],
    *,
    sweep_isl: int,
    sweep_osl: int,
    isl: int,
    osl: int,
    gpu_memory_gib: float,
    gpu_memory_utilization: float,
    non_torch_gib: float,
    activation_peak_gib: float,
    cudagraph_estimate_gib: float,
    kv_cache_dtype: str,
    vllm: str,
    num_speculative_tokens: int,
) -> pd.DataFrame:
    """The KV room of :func:`kv_room` for decode layouts nobody has swept yet: the same accounting
    (:func:`topology_capacity`), at a decode sweep's request length (``sweep_isl + sweep_osl``) and at the
    disaggregated workload (``isl + osl``). The columns a sweep adds (``first_swept_above_room``,
    ``flattens_at``) are NaN. With MTP rows when the model has an MTP layer."""
    columns = ["deployment", "layout", "mtp", "gpus", "kv_cache_gib", "mib_per_request_rank", "room",
               "room_per_gpu", "room_at_workload", "first_swept_above_room", "flattens_at", "note"]
    common = dict(gpu_memory_gib=gpu_memory_gib, gpu_memory_utilization=gpu_memory_utilization,
                  non_torch_gib=non_torch_gib, activation_peak_gib=activation_peak_gib,
                  cudagraph_estimate_gib=cudagraph_estimate_gib, kv_cache_dtype=kv_cache_dtype, vllm=vllm,
                  num_speculative_tokens=num_speculative_tokens)
    names = list(topologies)
    here = topology_capacity(spec, names, max_model_len=sweep_isl + sweep_osl, **common)
    there = topology_capacity(spec, names, max_model_len=isl + osl, **common)
    rows = []
    for mine, theirs in zip(here.to_dict("records"), there.to_dict("records"), strict=True):
        name = mine["topology"] + (" + MTP" if mine["mtp"] else "")
        rows.append({"deployment": name, "layout": mine["topology"], "mtp": bool(mine["mtp"]),
                     "gpus": int(mine["gpus"]), "kv_cache_gib": mine["kv_cache_gib"],
                     "mib_per_request_rank": mine["mib_per_request_rank"], "room": mine["requests_per_deployment"],
                     "room_per_gpu": mine["requests_per_gpu"], "room_at_workload": theirs["requests_per_deployment"],
                     "first_swept_above_room": math.nan, "flattens_at": math.nan, "note": mine["note"] or ""})
    return pd.DataFrame(rows, columns=columns)


def room_lookup(room: pd.DataFrame | None) -> Callable[[str, float], float]:
    """The KV room of a decode deployment at the disaggregated workload, from a :func:`kv_room` frame.

    Returns ``(topology, mtp_tokens) -> room_at_workload``, the ``decode_room`` that
    :func:`pdtune.frontier.rate_match` checks its decode points against. Deployments are matched as layouts
    with or without MTP, so that a rate-matched ``TP8+EP`` finds the room of the swept ``TEP8``; NaN when
    the frame has no such deployment (or no frame is given).
    """
    if room is None or len(room) == 0:
        return lambda topology, mtp_tokens: math.nan
    by_key = {deployment_layout(d): r for d, r in zip(room["deployment"], room["room_at_workload"], strict=True)}

    def lookup(topology: str, mtp_tokens: float) -> float:
        layout = deployment_layout(topology)
        return by_key.get((layout[0], mtp_tokens > 0) if layout else None, math.nan)

    return lookup

