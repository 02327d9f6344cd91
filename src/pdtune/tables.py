"""The frames chapters 1-4 print and chart, for the article's model and for the reader's.

:mod:`pdtune.article` recomputes the article's own tables. The chapters also need frames the article
never printed: one request's state broken down by layer kind and part, the same state across TP sizes and
vLLM lines, the memory waterfall as chart rows, graph counts for other ``max_num_seqs``, and how many
requests each decode topology holds. They live here so the notebooks stay free of logic: every function
takes a model (or a plan) and plain parameters and returns a small :class:`pandas.DataFrame`.

Bytes stay ints until a column is named ``*_gib`` or ``*_mib``. Every frame a chart draws carries a
``provenance`` column saying where each row comes from ("article table 3, run 5", "pdtune.state, vLLM
0.26.1"), because the charts put it in their tooltips.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pandas as pd

from pdtune import article, versions
from pdtune.errors import InputError
from pdtune.memory import (
    Accounting,
    CUDAGraphMode,
    Waterfall,
    cudagraph_plan,
    default_max_num_batched_tokens,
    implied_increment,
    weights_per_gpu,
)
from pdtune.model import LayerKind, ModelSpec
from pdtune.state import AttentionPage, MambaCacheMode, StatePlan, plan_state
from pdtune.topology import parse_topology
from pdtune.units import GiB, MiB, from_gib

#: TP sizes chapter 1 sweeps; those that do not divide a model's heads are skipped.
TP_SIZES: tuple[int, ...] = (1, 2, 4, 8)

#: Parts of one request's state, in the order the charts stack and colour them.
STATE_PARTS: tuple[str, ...] = (
    "attention KV",
    "attention: empty tail of the last block",
    "MTP draft layer KV",
    "conv state",
    "SSM state",
    "recurrent page padding",
    "padding layer slots",
)

LAYER_KIND_NAMES: dict[LayerKind, str] = {
    LayerKind.FULL_ATTENTION: "full attention",
    LayerKind.SLIDING_ATTENTION: "sliding-window attention",
    LayerKind.MLA: "MLA",
    LayerKind.GDN: "GDN",
    LayerKind.MAMBA2: "Mamba2",
    LayerKind.MLP: "MLP",
}
LAYER_KIND_NAMES.update({k: k.label for k in LayerKind if k not in LAYER_KIND_NAMES})  # kinds added by issue 11


def is_article_model(model: str | ModelSpec) -> bool:
    """True for the article's Qwen3.8-2.4T, by bundled name."""
    name = model.name if isinstance(model, ModelSpec) else str(model)
    return name == article.MODEL


def has_recurrent_state(spec: ModelSpec) -> bool:
    """True when some layer keeps a per-request recurrent state (GDN or Mamba2): a hybrid model."""
    return spec.is_hybrid


def plan_label(plan: StatePlan) -> str:
    """A short name for a plan: model, vLLM line, TP, and what it reserves beyond the article."""
    parts = [plan.model.name, plan.semantics.label, f"TP{plan.tp}"]
    k = plan.request.num_speculative_tokens
    if k:
        parts.append(f"MTP {k}")
    if plan.mamba_cache_mode is not MambaCacheMode.NONE:
        parts.append(f"prefix caching ({plan.mamba_cache_mode})")
    return " · ".join(parts)


def provenance_of(plan: StatePlan) -> str:
    return f"pdtune.state, {plan.semantics.label}, TP{plan.tp}, {plan.model.name}"


def request_line(plan: StatePlan) -> str:
    """One sentence with a plan's bytes per request, formatted as ``pdtune state`` prints them."""
    return (
        f"{plan_label(plan)}: {plan.blocks_per_request:,} pages x {plan.block_bytes:,} B = "
        f"{plan.bytes_per_request:,} B = {plan.bytes_per_request / MiB:.2f} MiB per request"
    )


# ------------------------------------------------------------------------------------- chapter 1: state


def with_article(plan: StatePlan, article_plan: StatePlan | None = None) -> dict[str, StatePlan]:
    """``{label: plan}`` with the article's plan first and ``plan`` second, unless they are the same."""
    reference = article_plan if article_plan is not None else article.article_plan()
    out = {f"the article's {reference.model.name} ({reference.semantics.label})": reference}
    if plan.to_dict() != reference.to_dict():
        out[plan_label(plan)] = plan
    return out


def state_summary(plans: Mapping[str, StatePlan]) -> pd.DataFrame:
    """Chapter 1's arithmetic, one column per plan: per-layer state, block, groups, bytes per request.

    Rows that do not apply to a model (the recurrent lines of an attention-only model) are empty.
    """
    columns: dict[str, list[Any]] = {}
    index = [
        "layers",
        "attention bytes per token per layer",
        "conv state bytes per request per layer",
        "SSM state bytes per request per layer",
        "recurrent state bytes per layer (conv + SSM)",
        "recurrent state in attention tokens",
        "block size (tokens)",
        "page bytes (one layer, one block)",
        "recurrent page padding (bytes)",
        "KV cache groups x layer slots",
        "pool blocks per request",
        "pages per request",
        "bytes per request",
        "MiB per request",
    ]
    for label, plan in plans.items():
        per = plan.per_layer_bytes()
        rec = plan.recurrent_page
        attn = per.get("attention_per_token")
        columns[label] = [
            plan.model.kinds_summary(),
            attn,
            per.get("conv_per_request"),
            per.get("ssm_per_request"),
            rec.state_bytes if rec is not None else None,
            rec.state_bytes / attn if rec is not None and attn else None,
            plan.block_tokens,
            plan.block_bytes,
            rec.padding_bytes if rec is not None else None,
            f"{len(plan.groups)} x {plan.group_size}",
            plan.pool_blocks_per_request,
            plan.blocks_per_request,
            plan.bytes_per_request,
            plan.bytes_per_request / MiB,
        ]
    return pd.DataFrame(columns, index=pd.Index(index, name="quantity"))


def groups_frame(plan: StatePlan) -> pd.DataFrame:
    """One row per KV cache group: what it holds and what one request takes from it."""
    rows = []
    for i, g in enumerate(plan.groups):
        real = [layer for layer in g.layers if layer is not None]
        draft = sum(1 for layer in real if layer >= plan.model.num_layers)
        rows.append({
            "group": i,
            "layer kind": LAYER_KIND_NAMES[g.kind],
            "model layers": len(real) - draft,
            "MTP draft layers": draft,
            "padding slots": g.padding_layers,
            "blocks per request": g.blocks_per_request,
            "pages per request": g.blocks_per_request * len(g.layers),
            "bytes per request": g.blocks_per_request * len(g.layers) * g.page.page_size_bytes,
        })
    return pd.DataFrame(rows)


def state_breakdown(plan: StatePlan) -> pd.DataFrame:
    """One request's bytes on one TP rank, by part and layer kind; ``bytes`` sums to ``bytes_per_request``.

    Attention pages are split into the tokens a request can fill and the empty tail of its last block
    (``blocks x block_size`` minus the tokens it needs: ``max_model_len``, or for a sliding window the
    window plus one scheduler step). Recurrent pages are split into conv state, SSM state and the padding
    that makes them as large as an attention page; ``1 + K`` states with MTP count ``1 + K`` times.
    Group slots no layer fills (vLLM pads groups to equal size) are their own part.
    """
    totals: dict[tuple[str, str], list[int]] = {}

    def add(part: str, kind: str, layers: int, pages: int, size: int) -> None:
        entry = totals.setdefault((part, kind), [0, 0, 0])
        entry[0] += layers
        entry[1] += pages
        entry[2] += size

    for g in plan.groups:
        page_bytes = g.page.page_size_bytes
        blocks = g.blocks_per_request
        for layer in g.layers:
            if layer is None:
                add("padding layer slots", "padding", 1, blocks, blocks * page_bytes)
            elif layer >= plan.model.num_layers:
                add("MTP draft layer KV", LAYER_KIND_NAMES[g.kind], 1, blocks, blocks * page_bytes)
            elif g.kind.is_recurrent:
                rec = plan.recurrent_page
                assert rec is not None
                kind = LAYER_KIND_NAMES[g.kind]
                add("conv state", kind, 1, blocks, blocks * rec.conv_bytes)
                add("SSM state", kind, 0, 0, blocks * rec.ssm_bytes)
                add("recurrent page padding", kind, 0, 0, blocks * rec.padding_bytes)
            else:
                kind = LAYER_KIND_NAMES[g.kind]
                page = g.page
                per_token = page.bytes_per_token  # type: ignore[union-attr]
                needed = plan.max_model_len
                if isinstance(page, AttentionPage) and page.sliding_window is not None:
                    needed = min(page.sliding_window - 1 + plan.request.max_num_batched_tokens, needed)
                held = blocks * page_bytes
                used = min(needed * per_token, held)
                add("attention KV", kind, 1, blocks, used)
                add("attention: empty tail of the last block", kind, 0, 0, held - used)
    rows = [
        {"part": part, "layer_kind": kind, "layers": v[0], "pages": v[1], "bytes": v[2], "mib": v[2] / MiB}
        for (part, kind), v in totals.items()
        if v[2] > 0
    ]
    frame = pd.DataFrame(rows, columns=["part", "layer_kind", "layers", "pages", "bytes", "mib"])
    order = {p: i for i, p in enumerate(STATE_PARTS)}
    frame = frame.sort_values("part", key=lambda s: s.map(order), kind="stable").reset_index(drop=True)
    return frame


def recurrent_share(plan: StatePlan) -> float:
    """Fraction of a request's bytes in recurrent pages (conv, SSM and their padding); 0 without any."""
    parts = state_breakdown(plan)
    recurrent = parts[parts["part"].isin(["conv state", "SSM state", "recurrent page padding"])]["bytes"].sum()
    return int(recurrent) / plan.bytes_per_request


def state_breakdowns(plans: Mapping[str, StatePlan]) -> pd.DataFrame:
    """:func:`state_breakdown` of several plans, long format, with ``scenario`` and ``provenance``."""
    frames = []
    for order, (label, plan) in enumerate(plans.items()):
        f = state_breakdown(plan)
        f.insert(0, "scenario", label)
        f["model"] = plan.model.name
        f.insert(1, "scenario_order", order)
        f["tp"] = plan.tp
        f["vllm"] = plan.semantics.version
        f["mib_per_request"] = plan.bytes_per_request / MiB
        f["provenance"] = provenance_of(plan)
        frames.append(f)
    return pd.concat(frames, ignore_index=True)


def version_plans(
    spec: ModelSpec,
    *,
    max_model_len: int,
    kv_cache_dtype: str,
    vllm: str,
    num_speculative_tokens: int,
    tp: int = 1,
) -> dict[str, StatePlan]:
    """The same request under the article's arithmetic and under what later vLLM lines reserve.

    In order: vLLM 0.11 (the article's arithmetic); ``vllm`` without MTP or prefix caching; ``vllm`` with
    ``num_speculative_tokens`` MTP tokens; that plus prefix caching; and the newest line pdtune follows
    with both, when it differs from ``vllm``. Steps that change nothing for this model are kept: a flat
    bar says as much as a tall one.
    """
    common = dict(max_model_len=max_model_len, kv_cache_dtype=kv_cache_dtype, tp=tp)
    plans = {"vLLM 0.11: the article's arithmetic": plan_state(spec, vllm="0.11", **common)}
    plans[f"vLLM {vllm}: no MTP, no prefix caching"] = plan_state(spec, vllm=vllm, **common)
    if num_speculative_tokens:
        plans[f"vLLM {vllm}: MTP {num_speculative_tokens}"] = plan_state(
            spec, vllm=vllm, num_speculative_tokens=num_speculative_tokens, **common)
    k = num_speculative_tokens
    with_mtp = f" + MTP {k}" if k else ""
    plans[f"vLLM {vllm}: prefix caching{with_mtp}"] = plan_state(
        spec, vllm=vllm, num_speculative_tokens=k, prefix_caching=True, **common)
    if versions.parse(vllm)[:2] != versions.parse(versions.CURRENT)[:2]:
        plans[f"vLLM {versions.CURRENT}: prefix caching{with_mtp}"] = plan_state(
            spec, vllm=versions.CURRENT, num_speculative_tokens=k, prefix_caching=True, **common)
    return plans


def tp_plans(
    spec: ModelSpec,
    *,
    tps: Iterable[int] = TP_SIZES,
    **kwargs: Any,
) -> dict[str, StatePlan]:
    """``{"TP<t>": plan}`` for every ``t`` that divides the model's heads (the others are left out)."""
    plans = {}
    for t in tps:
        try:
            plans[f"TP{t}"] = plan_state(spec, tp=t, **kwargs)
        except InputError:
            continue  # this TP does not divide the heads: vLLM would refuse it too
    return plans


def tp_sweep(plans: Mapping[str, StatePlan]) -> pd.DataFrame:
    """What one TP rank holds per request, and all ranks together against TP=1 of the same vLLM setting.

    ``all_ranks_vs_tp1`` is 1.0 when the state shards perfectly and more when heads are replicated; it is
    empty when ``plans`` has no TP=1 plan with the same vLLM line, speculative tokens and cache mode.
    """
    def setting(p: StatePlan) -> tuple[str, int, str]:
        return (p.semantics.version, p.request.num_speculative_tokens, str(p.mamba_cache_mode))

    tp1 = {setting(p): p.bytes_per_request for p in plans.values() if p.tp == 1}
    rows = []
    for label, p in plans.items():
        rec = p.recurrent_page
        all_ranks = p.bytes_per_request * p.tp
        base = tp1.get(setting(p))
        rows.append({
            "plan": label,
            "tp": p.tp,
            "attention_bytes_per_token": p.per_layer_bytes().get("attention_per_token"),
            "recurrent_state_bytes": rec.state_bytes if rec is not None else None,
            "block_tokens": p.block_tokens,
            "pool_blocks_per_request": p.pool_blocks_per_request,
            "mib_per_request_rank": p.bytes_per_request / MiB,
            "mib_per_request_all_ranks": all_ranks / MiB,
            "all_ranks_vs_tp1": all_ranks / base if base else None,
        })
    return pd.DataFrame(rows)


def tp_plans_compared(
    spec: ModelSpec,
    *,
    max_model_len: int,
    kv_cache_dtype: str,
    vllm: str,
    num_speculative_tokens: int,
    tps: Iterable[int] = TP_SIZES,
) -> dict[str, StatePlan]:
    """For each TP size: the article's arithmetic (vLLM 0.11, no MTP) and ``vllm`` with MTP, side by side."""
    common = dict(max_model_len=max_model_len, kv_cache_dtype=kv_cache_dtype)
    old = tp_plans(spec, tps=tps, vllm="0.11", **common)
    new = tp_plans(spec, tps=tps, vllm=vllm, num_speculative_tokens=num_speculative_tokens, **common)
    mtp = f" + MTP {num_speculative_tokens}" if num_speculative_tokens else ""
    out: dict[str, StatePlan] = {}
    for key in old:
        out[f"{key} · vLLM 0.11 (the article's arithmetic)"] = old[key]
        if key in new:
            out[f"{key} · vLLM {vllm}{mtp}"] = new[key]
    return out


# ------------------------------------------------------------------------------------- topologies


def weights_by_topology(spec: ModelSpec, topologies: Iterable[str], *, mtp: bool = False) -> pd.DataFrame:
    """Weight GiB one GPU holds under each topology, by component (``pdtune.memory.weights_per_gpu``).

    Pipeline-parallel layouts are left out: ``weights_per_gpu`` does not split layers into stages.
    """
    use_mtp = mtp and spec.num_mtp_layers > 0
    rows = []
    for name in topologies:
        layout = parse_topology(name, "decode_topologies")
        if layout.pp > 1:
            continue
        w = weights_per_gpu(spec, tp=layout.tp, ep=layout.expert_shards, mtp=use_mtp)
        row: dict[str, Any] = {"topology": name.strip(), "tp": layout.tp, "expert_shards": layout.expert_shards,
                               "gpus": layout.gpus, "mtp": use_mtp}
        row.update({f"{k}_gib": v for k, v in w.gib().items() if v})
        row["weights_gib"] = w.total / GiB
        rows.append(row)
    return pd.DataFrame(rows).fillna(0.0)


# ------------------------------------------------------------------------------------- PD block sizes


def pd_block_sizes(
    spec: ModelSpec,
    prefill_topologies: Iterable[str],
    decode_topologies: Iterable[str],
    **plan_kwargs: Any,
) -> pd.DataFrame:
    """Block size each side computes for itself, for every prefill x decode TP pair, and the common one.

    Prefill and decode engines each align the attention block to their own (TP-sharded) recurrent state,
    so different TP sizes can disagree; KV transfer needs one block size, so the fix is ``--block-size``
    at least the larger of the two on both sides (a multiple of 16, as both already are).
    """
    def by_tp(names: Iterable[str], source: str) -> dict[int, list[str]]:
        out: dict[int, list[str]] = {}
        for n in names:
            out.setdefault(parse_topology(n, source).tp, []).append(n.strip())
        return out

    prefill = by_tp(prefill_topologies, "prefill_topologies")
    decode = by_tp(decode_topologies, "decode_topologies")
    blocks: dict[int, int | None] = {}
    for t in {*prefill, *decode}:
        plans = tp_plans(spec, tps=[t], **plan_kwargs)
        blocks[t] = plans[f"TP{t}"].block_tokens if plans else None
    rows = []
    for pt, pnames in sorted(prefill.items()):
        for dt, dnames in sorted(decode.items()):
            pb, db = blocks[pt], blocks[dt]
            rows.append({
                "prefill": ", ".join(pnames),
                "prefill_tp": pt,
                "decode": ", ".join(dnames),
                "decode_tp": dt,
                "prefill_block_tokens": pb,
                "decode_block_tokens": db,
                "match": pb == db and pb is not None,
                "block_size_to_set": max(pb, db) if pb is not None and db is not None else None,
            })
    return pd.DataFrame(rows)


def pd_block_matrix(
    spec: ModelSpec,
    prefill_topologies: Iterable[str],
    decode_topologies: Iterable[str],
    **plan_kwargs: Any,
) -> pd.DataFrame:
    """:func:`pd_block_sizes` as a grid: prefill TP groups down, decode TP groups across.

    A cell reads ``2112 (same)`` when both sides pick the same block, else ``2112 vs 1056: set 2112``.
    """
    pairs = pd_block_sizes(spec, prefill_topologies, decode_topologies, **plan_kwargs)

    def cell(r: Any) -> str:
        if pd.isna(r.prefill_block_tokens) or pd.isna(r.decode_block_tokens):
            return "TP does not divide the heads"
        if r.match:
            return f"{int(r.prefill_block_tokens)} (same)"
        return f"{int(r.prefill_block_tokens)} vs {int(r.decode_block_tokens)}: set {int(r.block_size_to_set)}"

    grid = pairs.assign(
        prefill_side=[f"{r.prefill} (TP{r.prefill_tp})" for r in pairs.itertuples()],
        decode_side=[f"{r.decode} (TP{r.decode_tp})" for r in pairs.itertuples()],
        cell=[cell(r) for r in pairs.itertuples()],
    )
    out = grid.pivot(index="prefill_side", columns="decode_side", values="cell")
    out = out.loc[list(dict.fromkeys(grid["prefill_side"])), list(dict.fromkeys(grid["decode_side"]))]
    out.index.name = "prefill \\ decode"
    out.columns.name = None
    return out


def pd_block_fix(
    spec: ModelSpec,
    prefill_topologies: Iterable[str],
    decode_topologies: Iterable[str],
    **plan_kwargs: Any,
) -> pd.DataFrame:
    """For each TP size that must raise its block to match the other side: what one request then costs.

    One row per (side, TP, block to set), from the mismatching pairs of :func:`pd_block_sizes`; empty when
    every pair already agrees. The larger block pads the recurrent page up to a bigger attention page, so
    the side that grows pays in bytes per request.
    """
    pairs = pd_block_sizes(spec, prefill_topologies, decode_topologies, **plan_kwargs)
    seen: set[tuple[str, int, int]] = set()
    rows = []
    for r in pairs[~pairs["match"] & pairs["block_size_to_set"].notna()].itertuples():
        target = int(r.block_size_to_set)
        for side, tp, own in (("prefill", r.prefill_tp, r.prefill_block_tokens),
                              ("decode", r.decode_tp, r.decode_block_tokens)):
            if own == target or (side, tp, target) in seen:
                continue
            seen.add((side, tp, target))
            mine = plan_state(spec, tp=tp, **plan_kwargs)
            forced = plan_state(spec, tp=tp, block_size=target, **plan_kwargs)
            rows.append({
                "side": side,
                "topologies": r.prefill if side == "prefill" else r.decode,
                "tp": tp,
                "own_block_tokens": mine.block_tokens,
                "block_size_to_set": forced.block_tokens,
                "mib_per_request_rank_own": mine.bytes_per_request / MiB,
                "mib_per_request_rank_set": forced.bytes_per_request / MiB,
                "extra_pct": 100 * (forced.bytes_per_request / mine.bytes_per_request - 1),
            })
    columns = ["side", "topologies", "tp", "own_block_tokens", "block_size_to_set", "mib_per_request_rank_own",
               "mib_per_request_rank_set", "extra_pct"]
    return pd.DataFrame(rows, columns=columns)


# ------------------------------------------------------------------------------------- chapter 2: memory


def capacity_readings() -> pd.DataFrame:
    """The article's "279 GB" read as GB and as GiB, each minus the 2.28 GiB driver, against 276.62 GiB."""
    c = article.constants()
    rows = []
    for reading, capacity_gib in (("279 read as GB (10^9 bytes)", c["box_capacity"] * 1e9 / GiB),
                                  ("279 read as GiB (2^30 bytes)", c["box_capacity"])):
        after = capacity_gib - c["driver_overhead"]
        rows.append({
            "reading": reading,
            "capacity_gib": capacity_gib,
            "driver_gib": c["driver_overhead"],
            "left_gib": after,
            "torch_total_gib": c["total_memory"],
            "left_minus_torch_total_gib": after - c["total_memory"],
        })
    return pd.DataFrame(rows)


def article_waterfall(run: int, *, utilization: float | None = None) -> Waterfall:
    """Table 3's ``run`` as a :class:`Waterfall` starting from the box (279, read as the article reads it)."""
    t3 = article.table(3)
    rows = t3[t3["run"] == run]
    if rows.empty:
        raise InputError("data/article/table3_memory_per_engine.csv", "run", f"no run {run}")
    return article.waterfall_of(rows.iloc[0], utilization=utilization)


def prose_budget() -> pd.DataFrame:
    """The prose's "276.62 x 0.92 - 3.13 - 2.90 = 248 GiB", step by step, beside its published figures.

    ``value`` is ours (recomputed where the step is arithmetic, the article's input where it is not);
    ``published`` is the figure the prose prints.
    """
    c = article.constants()
    w = Waterfall(total=from_gib(c["total_memory"]), gpu_memory_utilization=c["gpu_memory_utilization"],
                  weights=0, activation_peak=0, non_torch=from_gib(c["prose_non_torch"]), cudagraph_estimate=0,
                  cuda_context=from_gib(c["prose_cuda_context"]), source="article prose",
                  version=article.ARTICLE_VLLM)
    rows = [
        ("torch total", w.total / GiB, c["total_memory"], "GiB"),
        ("gpu_memory_utilization", w.gpu_memory_utilization, c["gpu_memory_utilization"], "fraction"),
        ("requested = total x utilization", w.requested / GiB, c["requested_per_engine"], "GiB"),
        ("... rounded, as the prose says 'about'", float(round(w.requested / GiB)), c["prose_after_reserve"],
         "GiB"),
        ("CUDA context (prose)", w.cuda_context / GiB, c["prose_cuda_context"], "GiB"),
        ("non-torch (prose)", w.non_torch / GiB, c["prose_non_torch"], "GiB"),
        ("before weights = requested - context - non-torch", w.kv_cache(Accounting.ARTICLE_PROSE) / GiB,
         c["prose_before_weights"], "GiB"),
    ]
    return pd.DataFrame(rows, columns=["step", "value", "published", "unit"])


#: The decode layout the article picks for high concurrency (table 3 runs 5-8).
ARTICLE_DECODE_TOPOLOGY = "TP4DP4+EP"


def reference_topology(topologies: Sequence[str]) -> str:
    """The layout a chapter draws in detail: the article's TP4DP4+EP when listed, else the first listed."""
    if not topologies:
        raise InputError("decode_topologies", "decode_topologies", "the list is empty")
    wanted = parse_topology(ARTICLE_DECODE_TOPOLOGY)
    for name in topologies:
        if parse_topology(name, "decode_topologies") == wanted:
            return name
    return topologies[0]


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


_STEP_PROVENANCE = {
    "reserve": "gpu_memory_utilization",
    "cuda_context": "measured at start-up",
    "non_torch": "measured at start-up",
    "weights": "measured at start-up",
    "activation_peak": "measured in the profiling run",
    "cudagraph_estimate": "vLLM's estimate",
}


def waterfall_frame(
    waterfalls: Mapping[str, Waterfall],
    *,
    accounting: Accounting | str = Accounting.VLLM,
    bytes_per_request: Mapping[str, int] | None = None,
) -> pd.DataFrame:
    """Chart rows of one or more waterfalls, from :meth:`Waterfall.steps`.

    Each scenario starts with a *level* row (the box when ``capacity`` is known, else the torch total),
    takes its steps, and ends with the KV cache level. The driver step is split into the driver the
    article names and whatever is left unexplained. ``delta_gib`` is what a step takes; the reserve's is
    recomputed by the chart from the utilization slider, so the frame also carries ``total_gib``.
    ``mib_per_request`` (if given) lets the chart turn the KV cache into requests.
    """
    rows: list[dict[str, Any]] = []
    for s_order, (scenario, w) in enumerate(waterfalls.items()):
        steps = w.steps(accounting)
        start = w.capacity if w.capacity is not None and w.driver is not None else w.total
        per_request = (bytes_per_request or {}).get(scenario)
        base = {
            "scenario": scenario,
            "scenario_order": s_order,
            "start_gib": start / GiB,
            "total_gib": w.total / GiB,
            "utilization": w.gpu_memory_utilization,
            "mib_per_request": per_request / MiB if per_request else None,
            "source": w.source,
        }
        order = 0

        def add(key: str, label: str, kind: str, delta: int, provenance: str) -> None:
            nonlocal order
            rows.append({**base, "order": order, "key": key, "label": label, "kind": kind,
                         "delta_gib": delta / GiB, "provenance": provenance})
            order += 1

        if start != w.total:
            add("box", "on the box (279 read as GiB)", "level", 0, "article prose: the GB300 starts with 279 GB")
        for step in steps:
            if step.key == "driver":
                assert w.driver is not None
                add("driver", "driver (article: 2.28 GiB)", "step", w.driver, "article prose")
                rest = step.bytes - w.driver
                if rest:
                    add("unexplained", "unexplained (279 - 2.28 - 276.62)", "step", rest,
                        "arithmetic of the prose")
                continue
            if step.key == "reserve":
                add("total", "torch total (what vLLM sees)", "level", 0, f"total memory; {w.source}")
            if step.key == "cuda_context" and step.bytes == 0:
                continue  # a scenario with no measured context: nothing for the prose toggle to subtract
            kind = "reserve" if step.key == "reserve" else "step"
            # The reserve's size follows the chart's slider, so its label must not print today's value.
            label = "reserve (1 - utilization)" if step.key == "reserve" else step.label
            add(step.key, label, kind, step.bytes, f"{_STEP_PROVENANCE.get(step.key, step.key)}; {w.source}")
        add("kv_cache", "KV cache", "kv", 0, f"what is left; {w.source}")
    return pd.DataFrame(rows)


def overhead_readings() -> pd.DataFrame:
    """"About 20 GiB (7 %) is neither weights nor KV cache", against the two ways to read table 3."""
    t3 = article.table(3)
    c = article.constants()
    total = c["total_memory"]
    everything_else = total - t3["weights_gib"] - t3["published_kv_cache_gib"]
    measured = (t3["cuda_context_gib"] + t3["non_torch_gib"] + t3["activation_peak_gib"]
                + t3["cudagraph_estimate_gib"])
    return pd.DataFrame({
        "run": t3["run"],
        "topology": t3["topology"],
        "mtp": t3["mtp"],
        "not_weights_nor_kv_gib": everything_else,
        "not_weights_nor_kv_pct": 100 * everything_else / total,
        "measured_parts_gib": measured,
        "measured_parts_pct": 100 * measured / total,
        "published_overhead_gib": c["non_weight_overhead"],
        "published_overhead_pct": c["non_weight_overhead_share"],
    })


def utilization_what_if(
    waterfalls: Mapping[str, Waterfall],
    utilizations: Sequence[float],
    bytes_per_request: Mapping[str, int],
) -> pd.DataFrame:
    """KV cache and requests (KV / bytes per request) of each waterfall at other ``gpu_memory_utilization``."""
    rows = []
    for label, w in waterfalls.items():
        for u in utilizations:
            wu = w.with_utilization(u)
            kv = wu.kv_cache()
            rows.append({
                "scenario": label,
                "gpu_memory_utilization": u,
                "reserve_gib": wu.reserve / GiB,
                "kv_cache_gib": kv / GiB,
                "requests": kv / bytes_per_request[label] if label in bytes_per_request else None,
            })
    return pd.DataFrame(rows)


def reserve_check() -> pd.DataFrame:
    """Tables 2 and 3 side by side: the reserve, the CUDA context inside it, and any graph overrun.

    vLLM only starts if ``total x utilization`` is free once the CUDA context exists, and a graph that
    outgrows its estimate spills into what the reserve leaves. So the highest utilization a run tolerates is
    ``(total - context - overrun) / total``.
    """
    c = article.constants()
    t2 = article.table(2).set_index("run")
    t3 = article.table(3).set_index("run")
    total = c["total_memory"]
    rows = []
    for run in t3.index:
        w = article_waterfall(int(run))
        overrun = max(0.0, float(t2.loc[run, "actual_gib"] - t2.loc[run, "reserved_gib"]))
        ctx = float(t3.loc[run, "cuda_context_gib"])
        rows.append({
            "run": int(run),
            "topology": t3.loc[run, "topology"],
            "mtp": bool(t3.loc[run, "mtp"]),
            "reserve_gib": w.reserve / GiB,
            "cuda_context_gib": ctx,
            "graph_overrun_gib": overrun,
            "reserve_left_gib": w.reserve / GiB - ctx - overrun,
            "max_utilization": (total - ctx - overrun) / total,
        })
    return pd.DataFrame(rows)


def log_waterfalls(paths: Iterable[str], *, gpu_memory_gib: float | None = None) -> dict[str, Waterfall]:
    """``{label: waterfall}`` for the first memory-profiling worker of each vLLM start-up log."""
    from pdtune.scenario import Scenario
    from pdtune.vllm_log import parse_log

    out: dict[str, Waterfall] = {}
    for path in paths:
        resolved = Scenario().resolve(path)
        log = parse_log(resolved)
        workers = log.memory_workers
        if not workers:
            raise InputError(resolved, "Available KV cache memory", "no process in the log profiled memory")
        worker = workers[0]
        total = None
        if worker.total_memory is None and gpu_memory_gib is not None:
            total = from_gib(gpu_memory_gib)
        out[f"measured: {resolved.name} [{worker.name}]"] = log.waterfall(worker.name, total=total)
    return out


# ------------------------------------------------------------------------------------- chapter 3: graphs


def table1_checked() -> pd.DataFrame:
    """Table 1 with ``max_num_batched_tokens`` recomputed from the article's rule, and each activation peak
    as a share of the GPU's torch total (``pct_of_gpu``)."""
    t1 = article.table(1)
    t1["max_num_batched_tokens_rule"] = [
        default_max_num_batched_tokens(int(r.max_num_seqs), int(r.num_speculative_tokens)) for r in t1.itertuples()
    ]
    t1["rule_holds"] = t1["max_num_batched_tokens_rule"] == t1["max_num_batched_tokens"]
    t1["pct_of_gpu"] = 100 * t1["activation_peak_gib"] / article.constants()["total_memory"]
    t1["provenance"] = [f"article table 1, run {r}" for r in t1["run"]]
    return t1


def graph_counts(max_num_seqs: Iterable[int], num_speculative_tokens: int) -> pd.DataFrame:
    """Graphs captured for each ``max_num_seqs``, without and with ``num_speculative_tokens``, in both modes."""
    rows = []
    ks = sorted({0, num_speculative_tokens})
    for seqs in max_num_seqs:
        for k in ks:
            decode_only = cudagraph_plan(seqs, num_speculative_tokens=k, mode=CUDAGraphMode.FULL_DECODE_ONLY)
            both = cudagraph_plan(seqs, num_speculative_tokens=k, mode=CUDAGraphMode.FULL_AND_PIECEWISE)
            rows.append({
                "max_num_seqs": seqs,
                "num_speculative_tokens": k,
                "max_num_batched_tokens": default_max_num_batched_tokens(seqs, k),
                "max_capture_size": decode_only.max_capture_size,
                "smallest_graph": min(decode_only.capture_sizes),
                "graphs_full_decode_only": decode_only.count,
                "graphs_full_and_piecewise": both.count,
            })
    return pd.DataFrame(rows)


def table2_bounds() -> pd.DataFrame:
    """Table 2 recomputed, with the largest per-graph increment each estimate allows.

    ``estimate = first + (n - 1) x increment`` with ``first`` > 0, so ``increment < estimate / (n - 1)``:
    :func:`pdtune.memory.implied_increment` with ``first = 0``.
    """
    t2 = article.table2_recomputed()
    t2["max_increment_mib"] = [
        implied_increment(from_gib(r.reserved_gib), 0, int(r.graphs)) / MiB for r in t2.itertuples()
    ]
    t2["estimate_covers_actual"] = t2["reserved_gib"] >= t2["actual_gib"]
    t2["provenance"] = [f"article table 2, run {r}" for r in t2["run"]]
    return t2


def graph_estimate_cost() -> pd.DataFrame:
    """Table 2's unused graph memory as requests the KV cache could have held, both ways of counting."""
    t2 = article.table2_recomputed().set_index("run")
    t3 = article.table3_recomputed().set_index("run")
    per_request_mib = article.article_plan().bytes_per_request / MiB
    rows = []
    for run in t2.index:
        unused = float(t2.loc[run, "reserved_gib"] - t2.loc[run, "actual_gib"])
        rows.append({
            "run": int(run),
            "topology": t2.loc[run, "topology"],
            "mtp": bool(t2.loc[run, "mtp"]),
            "unused_gib": unused,
            "requests_article": unused * 1024 / per_request_mib,
            "requests_vllm_rank": unused * 1024 / float(t3.loc[run, "mib_per_request_rank"]),
        })
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------------------- chapter 4: concurrency


def capacity_by_version(
    spec: ModelSpec,
    kv_cache_bytes: int,
    vllm_versions: Iterable[str],
    **plan_kwargs: Any,
) -> pd.DataFrame:
    """What vLLM logs for one KV cache under several lines: blocks, max concurrency, "GPU KV cache size"."""
    rows = []
    for v in dict.fromkeys(vllm_versions):  # a line named twice (the parameter and a fixed one) once
        plan = plan_state(spec, vllm=v, **plan_kwargs)
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
    return pd.DataFrame(rows)


def requests_comparison(t3: pd.DataFrame | None = None) -> pd.DataFrame:
    """Table 3's requests per engine, long format for a chart: the article's column and vLLM's, per run."""
    frame = t3 if t3 is not None else article.table3_recomputed()
    rows = []
    for r in frame.itertuples():
        label = f"run {r.run} · {r.topology}{' + MTP' if r.mtp else ''}"
        rows.append({"run": r.run, "run_label": label, "topology": r.topology, "mtp": r.mtp,
                     "measure": "article: KV cache ÷ 759 MiB", "requests": r.published_requests_per_engine,
                     "mib_per_request": article.constants()["per_request_state"],
                     "provenance": f"article table 3, run {r.run}"})
        rows.append({"run": r.run, "run_label": label, "topology": r.topology, "mtp": r.mtp,
                     "measure": f"vLLM {article.ARTICLE_VLLM}: one TP rank", "requests": r.requests_vllm,
                     "mib_per_request": r.mib_per_request_rank,
                     "provenance": f"pdtune.state, vLLM {article.ARTICLE_VLLM}, KV cache of table 3 run {r.run}"})
    return pd.DataFrame(rows)


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
) -> pd.DataFrame:
    """Requests each decode topology holds, with and without MTP: modeled weights, given overheads.

    Per GPU: KV cache = requested - weights - the given overheads. Per engine (``tp`` GPUs): vLLM's max
    concurrency on one TP rank. Per deployment: that times ``dp`` engines. The article's arithmetic divides
    one GPU's KV cache by the whole model's unsharded request. A topology whose TP does not divide the
    model's heads, or that uses pipeline parallelism, gets a ``note`` and no numbers.
    """
    unsharded = plan_state(spec, max_model_len=max_model_len, kv_cache_dtype=kv_cache_dtype, vllm="0.11")
    ks = [0] + ([num_speculative_tokens] if num_speculative_tokens else [])
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
                    mtp=k > 0, vllm=vllm)
                plan = plan_state(spec, tp=layout.tp, max_model_len=max_model_len, kv_cache_dtype=kv_cache_dtype,
                                  vllm=vllm, num_speculative_tokens=k, prefix_caching=prefix_caching)
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
    return pd.DataFrame(rows)


def log_checks(paths: Iterable[str], model: str) -> pd.DataFrame:
    """Each engine of each vLLM start-up log: logged KV cache tokens and concurrency beside pdtune's.

    Empty (with the columns) when no log is given, so a chapter can show it unconditionally.
    """
    from pdtune.scenario import Scenario
    from pdtune.vllm_log import cross_check, parse_log

    columns = ["log", "engine", "available_kv_cache_gib", "num_blocks", "logged_kv_cache_tokens",
               "predicted_kv_cache_tokens", "logged_max_concurrency", "predicted_max_concurrency"]
    rows = []
    for path in paths:
        resolved = Scenario().resolve(path)
        for check in cross_check(parse_log(resolved), model):
            d = check.to_dict()
            rows.append({"log": resolved.name, **{c: d.get(c) for c in columns[1:]}})
    return pd.DataFrame(rows, columns=columns)


# ------------------------------------------------------------------------------------- display


def styled(frame: pd.DataFrame, *, precision: int = 2, index: bool = False) -> Any:
    """A frame for the page: thousands separators, ``precision`` decimals, empty cells as a dash."""
    style = frame.style.format(precision=precision, thousands=",", na_rep="—")
    return style if index else style.hide(axis="index")


# ------------------------------------------------------------------------------------- numbers for the prose
#
# A number the prose of a chapter states is glued from a code cell (MyST-NB's ``glue``) and written with the
# ``{glue:text}`` role, so it is recomputed on every build and follows the model of the parameters cell. The
# helpers below gather those numbers as plain Python values; ``glue_numbers`` and ``glue_frame`` hand them to
# MyST-NB under ``<prefix>-<key>``.


def plain(value: Any) -> Any:
    """A numpy or pandas scalar as the Python value it holds; ``None`` and NaN as ``float("nan")``.

    MyST-NB stores a glued value as its ``repr`` and reads it back with ``ast.literal_eval``: ``2112`` and
    ``189.75`` survive that, ``np.int64(2112)`` does not, and ``nan`` formats as "nan" instead of failing.
    """
    if value is None:
        return float("nan")
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and value != value:
        return float("nan")
    if isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def glue_numbers(prefix: str, numbers: Mapping[str, Any]) -> None:
    """Glue every value as ``<prefix>-<key>`` (not displayed), for ``{glue:text}`<prefix>-<key>:.2f` ``."""
    from myst_nb import glue

    for key, value in numbers.items():
        glue(f"{prefix}-{key}", plain(value), display=False)


def frame_numbers(
    frame: pd.DataFrame,
    columns: Sequence[str] | None = None,
    *,
    key: str | Sequence[str] | None = None,
    labels: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Cells of ``frame`` as ``<row>-<column>``, and each numeric column's ``min-``/``max-<column>``.

    ``columns`` limits the cells to those the prose quotes (all columns when None). A row is named by
    ``labels`` (one per row), else by the ``key`` column(s) joined with "-" in lower case (``run`` gives
    "7", ``["topology", "mtp"]`` gives "tp4dp4-true"), else by its index. Missing cells are left out, so a
    sentence that quotes one fails the build instead of printing a dash.
    """
    if labels is not None:
        names = [str(label) for label in labels]
        if len(names) != len(frame):
            raise ValueError(f"{len(names)} labels for {len(frame)} rows")
    elif key is not None:
        key_columns = [key] if isinstance(key, str) else list(key)
        rows = frame[key_columns].itertuples(index=False)
        names = ["-".join(str(plain(v)).lower() for v in row) for row in rows]
    else:
        names = [str(i) for i in frame.index]
    if columns is not None:
        missing = [c for c in columns if c not in frame.columns]
        if missing:
            raise KeyError(f"no column {', '.join(missing)} in the frame")
        frame = frame[list(columns)]
    numbers: dict[str, Any] = {}
    for name, (_, row) in zip(names, frame.iterrows(), strict=True):
        for column, value in row.items():
            if value is None or (isinstance(value, float) and value != value):
                continue
            numbers[f"{name}-{column}"] = plain(value)
    for column in frame.columns:
        values = frame[column]
        numeric = pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values)
        if numeric and values.notna().any():
            numbers[f"min-{column}"] = plain(values.min())
            numbers[f"max-{column}"] = plain(values.max())
    return numbers


def glue_frame(
    prefix: str,
    frame: pd.DataFrame,
    columns: Sequence[str] | None = None,
    *,
    key: str | Sequence[str] | None = None,
    labels: Sequence[str] | None = None,
) -> None:
    """Glue cells of a frame the chapter shows (:func:`frame_numbers`) under ``prefix``."""
    glue_numbers(prefix, frame_numbers(frame, columns, key=key, labels=labels))


def plan_numbers(plan: StatePlan, *, relative_to: StatePlan | None = None) -> dict[str, Any]:
    """What the prose says about one request of a plan.

    ``block`` tokens, ``pages`` and ``pool-blocks`` per request, ``page-mib``, ``mib`` per request,
    ``attn-bytes`` (one token, one attention layer) and ``rec-bytes`` (one recurrent layer's state; 0 without
    one), ``rec-share`` (fraction of the request in recurrent pages), ``attn-blocks`` (blocks per request of
    the first full-attention group), ``slots`` (the tokens those blocks hold), ``tail-mib`` (the empty tail of
    the last attention blocks), and ``tokens`` (``max_model_len``). With ``relative_to``, also ``vs-mib`` (the
    other plan's MiB per request), ``ratio`` (this over that), ``reciprocal``, and ``all-ranks-ratio`` (this
    plan's ``tp`` ranks together over that).
    """
    per = plan.per_layer_bytes()
    rec = plan.recurrent_page
    parts = state_breakdown(plan)
    tail = parts.loc[parts["part"] == "attention: empty tail of the last block", "bytes"].sum()
    attention = [g for g in plan.groups if not g.kind.is_recurrent]
    full = [g for g in attention if getattr(g.page, "sliding_window", None) is None] or attention
    attn_blocks = max((g.blocks_per_request for g in full), default=0)
    numbers: dict[str, Any] = {
        "model": plan.model.name,
        "vllm": plan.semantics.version,
        "tp": plan.tp,
        "speculative-tokens": plan.request.num_speculative_tokens,
        "tokens": plan.max_model_len,
        "block": plan.block_tokens,
        "pages": plan.blocks_per_request,
        "pool-blocks": plan.pool_blocks_per_request,
        "group-size": plan.group_size,
        "groups": len(plan.groups),
        "page-bytes": plan.block_bytes,
        "page-mib": plan.block_bytes / MiB,
        "bytes": plan.bytes_per_request,
        "mib": plan.bytes_per_request / MiB,
        "attn-bytes": per.get("attention_per_token", 0),
        "rec-bytes": rec.state_bytes if rec is not None else 0,
        "rec-share": recurrent_share(plan),
        "attn-blocks": attn_blocks,
        "slots": attn_blocks * plan.block_tokens,
        "tail-mib": float(tail) / MiB,
    }
    if relative_to is not None:
        numbers["vs-mib"] = relative_to.bytes_per_request / MiB
        numbers["ratio"] = plan.bytes_per_request / relative_to.bytes_per_request
        numbers["reciprocal"] = relative_to.bytes_per_request / plan.bytes_per_request
        numbers["all-ranks-ratio"] = plan.bytes_per_request * plan.tp / relative_to.bytes_per_request
    return numbers


def tp_numbers(plans: Mapping[str, StatePlan], *, middle: int = 4) -> dict[str, Any]:
    """One rank at a middle and at the largest TP of :func:`tp_plans` (one vLLM setting), against TP=1.

    ``mid`` is ``middle`` when it is among the plans (else the largest TP below the top one), ``high`` the
    largest TP; for each, ``<mid|high>-mib`` per request on one rank, ``-block``, ``-attn-bytes``,
    ``-rec-bytes``, and ``-ratio``: all ranks together over the TP=1 request (1.0 when nothing is
    replicated). ``tp1-mib`` is the unsharded request.
    """
    by_tp = {p.tp: p for p in plans.values()}
    if 1 not in by_tp:
        raise InputError("tp_plans", "tp", "the plans have no TP=1 plan to compare with")
    high = max(by_tp)
    below = [t for t in by_tp if t < high] or [high]
    mid = middle if middle in by_tp and middle != high else max(below)
    base = by_tp[1].bytes_per_request
    numbers: dict[str, Any] = {"tp1-mib": base / MiB, "mid": mid, "high": high}
    for name, t in (("mid", mid), ("high", high)):
        p = by_tp[t]
        rec = p.recurrent_page
        numbers.update({
            f"{name}-mib": p.bytes_per_request / MiB,
            f"{name}-block": p.block_tokens,
            f"{name}-attn-bytes": p.per_layer_bytes().get("attention_per_token", 0),
            f"{name}-rec-bytes": rec.state_bytes if rec is not None else 0,
            f"{name}-ratio": p.bytes_per_request * t / base,
        })
    return numbers


def pd_block_numbers(
    spec: ModelSpec,
    prefill_topologies: Iterable[str],
    decode_topologies: Iterable[str],
    **plan_kwargs: Any,
) -> dict[str, Any]:
    """How far prefill and decode layouts disagree on the block: :func:`pd_block_sizes`, :func:`pd_block_fix`.

    ``pairs``: prefill x decode TP pairs where both TP sizes divide the model's heads (``unsupported``
    counts the others); ``mismatched``: those whose blocks differ; ``min-block`` and ``max-block`` over
    every side; and ``max-extra-pct``: the most a side that has to raise its block pays per request (0 when
    every pair agrees).
    """
    pairs = pd_block_sizes(spec, prefill_topologies, decode_topologies, **plan_kwargs)
    fix = pd_block_fix(spec, prefill_topologies, decode_topologies, **plan_kwargs)
    blocks = pd.concat([pairs["prefill_block_tokens"], pairs["decode_block_tokens"]]).dropna()
    known = pairs["prefill_block_tokens"].notna() & pairs["decode_block_tokens"].notna()
    return {
        "pairs": int(known.sum()),
        "unsupported": int((~known).sum()),
        "mismatched": int((known & ~pairs["match"]).sum()),
        "min-block": int(blocks.min()) if len(blocks) else float("nan"),
        "max-block": int(blocks.max()) if len(blocks) else float("nan"),
        "max-extra-pct": float(fix["extra_pct"].max()) if len(fix) else 0.0,
    }


def utilization_step(waterfall: Waterfall, bytes_per_request: int, *, step: float = 0.01) -> dict[str, Any]:
    """What ``step`` more ``gpu_memory_utilization`` buys: ``gib`` of KV cache and ``requests`` of that size.

    Also ``total-gib``, the memory the step is a share of.
    """
    raised = waterfall.with_utilization(waterfall.gpu_memory_utilization + step)
    more = raised.kv_cache() - waterfall.kv_cache()
    return {"step": step, "total-gib": waterfall.total / GiB, "gib": more / GiB,
            "requests": more / bytes_per_request}


def capacity_numbers(plan: StatePlan, kv_cache_bytes: int) -> dict[str, Any]:
    """vLLM's count for one KV cache (:meth:`StatePlan.capacity`) and its inputs.

    ``kv-bytes`` (and ``kv-gib``), ``pool-block-bytes`` (``group-size`` pages of ``page-bytes``),
    ``num-blocks``, ``pool-blocks`` per request, ``max-concurrency``, ``kv-tokens`` (the "GPU KV cache
    size" line), ``groups``, ``block`` and ``mib`` per request.
    """
    cap = plan.capacity(kv_cache_bytes)
    return {
        "kv-bytes": kv_cache_bytes,
        "kv-gib": kv_cache_bytes / GiB,
        "page-bytes": plan.block_bytes,
        "group-size": plan.group_size,
        "pool-block-bytes": plan.pool_block_bytes,
        "num-blocks": cap.num_blocks,
        "pool-blocks": plan.pool_blocks_per_request,
        "max-concurrency": cap.max_concurrency,
        "kv-tokens": cap.kv_cache_tokens,
        "groups": len(plan.groups),
        "block": plan.block_tokens,
        "mib": plan.bytes_per_request / MiB,
    }


def table2_summary(t2: pd.DataFrame | None = None) -> dict[str, Any]:
    """Table 2 in a few numbers: ``runs``, ``graph-counts-match`` (our count equals the published one),
    ``over-reserved`` runs (estimate above actual) with ``min-over-pct``/``max-over-pct`` of actual, and
    ``under-reserved`` runs."""
    frame = t2 if t2 is not None else table2_bounds()
    over = frame[frame["reserved_gib"] > frame["actual_gib"]]
    pct = 100 * (over["reserved_gib"] - over["actual_gib"]) / over["actual_gib"]
    return {
        "runs": len(frame),
        "graph-counts-match": int((frame["graphs"] == frame["published_graphs"]).sum()),
        "over-reserved": len(over),
        "min-over-pct": float(pct.min()) if len(over) else float("nan"),
        "max-over-pct": float(pct.max()) if len(over) else float("nan"),
        "under-reserved": int((frame["reserved_gib"] < frame["actual_gib"]).sum()),
    }


def table3_per_gpu(t3: pd.DataFrame | None = None) -> pd.DataFrame:
    """:func:`pdtune.article.table3_recomputed` with what one GPU holds: an engine is ``tp`` GPUs.

    Adds ``gpus_per_engine``, ``requests_vllm_per_gpu`` and ``vllm_vs_article`` (vLLM's max concurrency
    over the article's requests per engine).
    """
    frame = (t3 if t3 is not None else article.table3_recomputed()).copy()
    frame["gpus_per_engine"] = [article.TOPOLOGIES[t].tp for t in frame["topology"]]
    frame["requests_vllm_per_gpu"] = frame["requests_vllm"] / frame["gpus_per_engine"]
    frame["vllm_vs_article"] = frame["requests_vllm"] / frame["requests_article"]
    return frame


def layout_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (topology, MTP) of :func:`table3_per_gpu`: the range of ``vllm_vs_article`` and of
    ``requests_vllm_per_gpu`` over the runs, as ``<column>_min`` and ``<column>_max``."""
    columns = ["vllm_vs_article", "requests_vllm_per_gpu", "kv_cache_gib"]
    grouped = frame.groupby(["topology", "mtp"], sort=False)[columns].agg(["min", "max"])
    grouped.columns = [f"{c}_{stat}" for c, stat in grouped.columns]
    return grouped.reset_index()


def article_topology_capacity(topologies: Iterable[str], *, run: int = 7) -> pd.DataFrame:
    """:func:`topology_capacity` of the article's model and workload, with table 3 ``run``'s measured parts.

    The GPU, its utilization and the speculative tokens are the article's.
    """
    t3 = article.table(3)
    row = t3[t3["run"] == run]
    if row.empty:
        raise InputError("data/article/table3_memory_per_engine.csv", "run", f"no run {run}")
    r = row.iloc[0]
    c = article.constants()
    from pdtune.model import load_model

    return topology_capacity(
        load_model(article.MODEL), topologies, gpu_memory_gib=c["total_memory"],
        gpu_memory_utilization=c["gpu_memory_utilization"], non_torch_gib=float(r["non_torch_gib"]),
        activation_peak_gib=float(r["activation_peak_gib"]),
        cudagraph_estimate_gib=float(r["cudagraph_estimate_gib"]), max_model_len=article.ISL + article.OSL,
        kv_cache_dtype=article.KV_CACHE_DTYPE, vllm=article.ARTICLE_VLLM,
        num_speculative_tokens=article_speculative_tokens(),
    )


def article_speculative_tokens() -> int:
    """The MTP draft tokens of the article's MTP runs (table 1)."""
    return int(article.table(1)["num_speculative_tokens"].max())


def capacity_leaders(capacity: pd.DataFrame) -> dict[str, Any]:
    """The layouts of :func:`topology_capacity` that lead: ``most-kv-*`` (KV cache per GPU) and
    ``most-requests-*`` (vLLM's requests per GPU, over every row with or without MTP), each with its
    ``-topology``, ``-gpus`` (per deployment), ``-mtp`` and the value; NaN and "none" when no row fits."""
    numbers: dict[str, Any] = {}
    has_numbers = "requests_per_gpu" in capacity
    fits = capacity.dropna(subset=["requests_per_gpu"]) if has_numbers else capacity.iloc[0:0]
    for name, column in (("most-kv", "kv_cache_gib"), ("most-requests", "requests_per_gpu")):
        if fits.empty:
            numbers.update({f"{name}-topology": "none", f"{name}-gpus": float("nan"),
                            f"{name}-mtp": False, name: float("nan")})
            continue
        best = fits.loc[fits[column].idxmax()]
        numbers.update({f"{name}-topology": best["topology"], f"{name}-gpus": int(best["gpus"]),
                        f"{name}-mtp": bool(best["mtp"]), name: float(best[column])})
    return numbers
