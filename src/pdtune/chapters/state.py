"""Chapter 1, per-request state: the frames, sentences and glued numbers the chapter prints.

One request's state broken down by layer kind and part, the same request under the article's arithmetic
and under later vLLM lines, across TP sizes, and where prefill and decode engines disagree on the block
size. Every function takes a model (or a plan from :func:`pdtune.state.plan_state`) and plain parameters
and returns a small frame, a sentence or a dict of numbers for the prose; the rules are in
:mod:`pdtune.state`. Chapters 2-4 quote a request the same way (:func:`request_line`, :func:`plan_numbers`).

Bytes stay ints until a column is named ``*_gib`` or ``*_mib``. Every frame a chart draws carries a
``provenance`` column saying where each row comes from, because the charts put it in their tooltips.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

from pdtune import article, versions
from pdtune.capacity import ARTICLE_LINE, article_request
from pdtune.errors import InputError
from pdtune.model import LayerKind, ModelSpec
from pdtune.state import AttentionPage, MambaCacheMode, StatePlan, plan_state
from pdtune.topology import parse_topology
from pdtune.units import MiB


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


LAYER_KIND_NAMES: dict[LayerKind, str] = {kind: kind.label for kind in LayerKind}


def kind_name(kind: LayerKind) -> str:
    """A layer kind in words (:data:`LAYER_KIND_NAMES`; a kind added later reads as its name, spaced)."""
    return LAYER_KIND_NAMES.get(kind) or str(kind.value).replace("_", " ")


def mtp_tokens(spec: ModelSpec, num_speculative_tokens: int) -> int:
    """The MTP draft tokens a model can run: none without an MTP layer, whatever the parameters say."""
    return num_speculative_tokens if spec.num_mtp_layers else 0


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
        f"{plan.bytes_per_request:,} B = {plan.bytes_per_request / MiB:,.2f} MiB per request"
    )


def with_article(plan: StatePlan, article_plan: StatePlan | None = None) -> dict[str, StatePlan]:
    """``{label: plan}`` with the article's plan first and ``plan`` second, unless they are the same."""
    reference = article_plan if article_plan is not None else article.article_plan()
    out = {f"the article's {reference.model.name} ({reference.semantics.label})": reference}
    if plan.to_dict() != reference.to_dict():
        out[plan_label(plan)] = plan
    return out


def _whole(value: float) -> float | int:
    """A ratio that came out whole, as an int (2108, not 2,108.00)."""
    return int(value) if float(value).is_integer() else value


#: The plain dense models chapter 1 works by hand before any hybrid (bundled in data/models/).
DENSE_MODELS: tuple[str, ...] = ("llama-3.1-8b", "llama-3.1-70b")

#: Request lengths of the length chart: 1k to 128k tokens.
LENGTHS: tuple[int, ...] = (1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)


def beside_references(spec: ModelSpec, *, dense: Iterable[str] = DENSE_MODELS[:1]) -> dict[str, ModelSpec]:
    """``{label: model}``: the plain dense model(s), the model of the parameters cell and the article's, each once
    (the parameters' model keeps its own name; the article's is labelled as the article's)."""
    from pdtune.model import load_model

    out: dict[str, ModelSpec] = {}
    for name in dense:
        out[name] = load_model(name)
    if spec.name not in out:
        out[spec.name] = spec
    if article.MODEL not in out:
        out[f"{article.MODEL} (the article's)"] = load_model(article.MODEL)
    return out


def request_table(plans: Mapping[str, StatePlan]) -> pd.DataFrame:
    """One row per plan: the model, its layers, one token's attention bytes per layer, the block, the pages and
    MiB one request takes. The short form of :func:`state_summary`, for a page that sets models side by side."""
    rows = []
    for label, plan in plans.items():
        rows.append({
            "model": label,
            "layers": plan.model.kinds_summary(),
            "attention_bytes_per_token": plan.per_layer_bytes().get("attention_per_token"),
            "block_tokens": plan.block_tokens,
            "pages": plan.blocks_per_request,
            "mib_per_request": plan.bytes_per_request / MiB,
        })
    return pd.DataFrame(rows)


def arithmetic_line(spec: ModelSpec, vllm: str = versions.CURRENT, *, quiet: bool = False, **plan_kwargs: Any) -> str:
    """The vLLM line whose arithmetic the chapters call the article's: 0.11, as the article computed, or
    ``vllm`` for a model 0.11 cannot plan (:func:`pdtune.capacity.article_request`). Says so in one printed line
    unless ``quiet``. ``plan_kwargs`` are :func:`plan_state`'s (the request the chapter plans)."""
    _, note = article_request(spec, vllm=vllm, **plan_kwargs)
    if not note:
        return ARTICLE_LINE
    if not quiet:
        print(f"Note: {note}.")
    return vllm


def length_sweep(models: Mapping[str, ModelSpec], lengths: Iterable[int] = LENGTHS, *, kv_cache_dtype: str,
                 vllm: str = "0.11") -> pd.DataFrame:
    """MiB one request of each model takes at each length (TP=1, ``vllm``'s arithmetic), for the length chart.

    A length above a model's own limit is left out for that model (vLLM would refuse it). A model ``vllm``
    cannot plan (0.11 and MiMo-V2-Flash) is planned by the newest line (:func:`arithmetic_line`).
    """
    rows = []
    for label, spec in models.items():
        limit = spec.max_length.tokens if spec.max_length else None
        line = vllm
        if vllm == ARTICLE_LINE:
            line = arithmetic_line(spec, quiet=True, max_model_len=LENGTHS[0], kv_cache_dtype=kv_cache_dtype)
        for tokens in lengths:
            if limit is not None and tokens > limit:
                continue
            plan = plan_state(spec, max_model_len=tokens, kv_cache_dtype=kv_cache_dtype, vllm=line)
            rows.append({"model": label, "tokens": tokens, "mib_per_request": plan.bytes_per_request / MiB,
                         "kind": "hybrid" if spec.is_hybrid else "attention only",
                         "provenance": provenance_of(plan)})
    return pd.DataFrame(rows, columns=["model", "tokens", "mib_per_request", "kind", "provenance"])


def plans_table(plans: Mapping[str, StatePlan]) -> pd.DataFrame:
    """One row per plan of one model: block, pages and MiB per request, and the request against the first plan."""
    first = next(iter(plans.values())) if plans else None
    rows = [{"plan": label, "block_tokens": p.block_tokens, "pages": p.blocks_per_request,
             "mib_per_request": p.bytes_per_request / MiB,
             "vs_first": p.bytes_per_request / first.bytes_per_request if first else None}
            for label, p in plans.items()]
    return pd.DataFrame(rows, columns=["plan", "block_tokens", "pages", "mib_per_request", "vs_first"])


def groups_frame(plan: StatePlan) -> pd.DataFrame:
    """One row per KV cache group: what it holds and what one request takes from it."""
    rows = []
    for i, g in enumerate(plan.groups):
        real = [layer for layer in g.layers if layer is not None]
        draft = sum(1 for layer in real if layer >= plan.model.num_layers)
        rows.append({
            "group": i,
            "layer kind": kind_name(g.kind),
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
                add("MTP draft layer KV", kind_name(g.kind), 1, blocks, blocks * page_bytes)
            elif g.kind.is_recurrent:
                rec = plan.recurrent_page
                assert rec is not None
                kind = kind_name(g.kind)
                add("conv state", kind, 1, blocks, blocks * rec.conv_bytes)
                add("SSM state", kind, 0, 0, blocks * rec.ssm_bytes)
                add("recurrent page padding", kind, 0, 0, blocks * rec.padding_bytes)
            else:
                kind = kind_name(g.kind)
                page = g.page
                per_token = page.bytes_per_token  # type: ignore[union-attr]
                needed = plan.max_model_len
                if isinstance(page, AttentionPage) and page.sliding_window is not None:
                    # what SlidingWindowSpec reserves: the window over every token in flight (the planner's rule)
                    r = plan.request
                    needed = min(page.sliding_window - 1 + r.extra_retained_tokens + r.in_flight, needed)
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
    bar says as much as a tall one. A model without an MTP layer gets no MTP step (:func:`mtp_tokens`).
    """
    common = dict(max_model_len=max_model_len, kv_cache_dtype=kv_cache_dtype, tp=tp)
    num_speculative_tokens = mtp_tokens(spec, num_speculative_tokens)
    plans = {}
    article_plan, note = article_request(spec, vllm=vllm, **common)
    if not note:  # a model 0.11 cannot plan: no bar
        plans["vLLM 0.11: the article's arithmetic"] = article_plan
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

    ``all_ranks_vs_tp1`` (the last column) is 1.0 when the state shards perfectly and more when heads are
    replicated; it is empty when ``plans`` has no TP=1 plan with the same vLLM line, speculative tokens and
    cache mode. The recurrent column is left out for a model without recurrent state.
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
            "attention_bytes_per_token": p.per_layer_bytes().get("attention_per_token"),
            "recurrent_state_bytes": rec.state_bytes if rec is not None else None,
            "block_tokens": p.block_tokens,
            "mib_per_request_rank": p.bytes_per_request / MiB,
            "all_ranks_vs_tp1": all_ranks / base if base else None,
        })
    frame = pd.DataFrame(rows)
    if len(frame) and frame["recurrent_state_bytes"].isna().all():
        frame = frame.drop(columns="recurrent_state_bytes")  # an attention-only model: nothing to show
    return frame


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

    def side(names: str, tp: int) -> str:
        return names if names == f"TP{tp}" else f"{names} (TP{tp})"

    grid = pairs.assign(
        prefill_side=[side(r.prefill, r.prefill_tp) for r in pairs.itertuples()],
        decode_side=[side(r.decode, r.decode_tp) for r in pairs.itertuples()],
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
    # the group's own block: unifying page sizes can scale it past plan.block_tokens (MiMo-V2-Flash's full layers)
    attn_block = max((getattr(g.page, "block_size", plan.block_tokens) for g in full
                      if g.blocks_per_request == attn_blocks), default=plan.block_tokens)
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
        "attn-block": attn_block,
        "slots": attn_blocks * attn_block,
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
    numbers: dict[str, Any] = {"tp1-mib": base / MiB, "mid": mid, "high": high,
                               "kv-heads": by_tp[1].model.attention.num_kv_heads
                               if by_tp[1].model.attention is not None else 0}
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




def state_command(plan: StatePlan, model: str | None = None) -> str:
    """The ``pdtune state`` command that prints ``plan``: ``model`` as the chapter names it (a bundled name or
    a path; default the model's name), its request length, KV dtype, vLLM line, TP, MTP and prefix caching."""
    words = ["pdtune state", model or plan.model.name, f"--max-model-len {plan.max_model_len}",
             f"--kv-cache-dtype {plan.kv_cache_dtype}", f"--vllm {plan.semantics.version}"]
    if plan.tp != 1:
        words.append(f"--tp {plan.tp}")
    k = plan.request.num_speculative_tokens
    if k:
        words.append(f"--num-speculative-tokens {k}")
    if plan.mamba_cache_mode is MambaCacheMode.NONE:
        words.append("--no-prefix-caching")
    return " ".join(words)


# --- another kind beside the article's: the same arithmetic -------------------------------------------------

#: The bundled model chapter 1 sets beside the article's: Jamba-1.5-Mini's Mamba1 layers are a recurrent kind
#: the article's model does not have (Gemma-3's interleaved sliding windows when the parameters name Jamba).
OTHER_KIND_MODEL = "jamba-1.5-mini"
OTHER_KIND_FALLBACK = "gemma-3-27b-it"


def other_kind_plan(spec: ModelSpec, max_model_len: int, kv_cache_dtype: str) -> StatePlan:
    """One request of :data:`OTHER_KIND_MODEL` (or the fallback when that is the parameters' model) under
    the current vLLM line's rules, at the chapter's request length."""
    from pdtune.model import load_model
    from pdtune.state import plan_state
    from pdtune.versions import CURRENT

    name = OTHER_KIND_FALLBACK if spec.name == OTHER_KIND_MODEL else OTHER_KIND_MODEL
    other = load_model(name)
    length = min(max_model_len, other.max_length.tokens) if other.max_length else max_model_len
    return plan_state(other, max_model_len=length, kv_cache_dtype=kv_cache_dtype, vllm=CURRENT)


