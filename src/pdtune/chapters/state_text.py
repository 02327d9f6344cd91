"""Chapter 1's sentences whose wording branches on the scenario (a hybrid or not, MLA, MTP or not, layouts that
agree or not): kept short, beside the chapter module (:mod:`pdtune.chapters.state`), whose frames and numbers
they read. Sentences that read the same for every model are written in the pages themselves.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pdtune.chapters.state import kind_name, mtp_tokens, plan_numbers
from pdtune.model import LayerKind, ModelSpec
from pdtune.state import StatePlan
from pdtune.units import MiB


def size_text(nbytes: int | float) -> str:
    """Bytes for a sentence, in the unit that reads best: ``32 KiB``, ``4.125 MiB``, ``1.41 GiB``."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= size:
            return f"{nbytes / size:,.4g} {unit}"
    return f"{nbytes:,.0f} B"


def request_sentence(plan: StatePlan) -> str:
    """One request's pages and bytes, and how much of it is the empty tail of the last attention block."""
    n = plan_numbers(plan)
    text = (f"One {n['tokens']:,}-token request of {n['model']} pins {n['pages']:,} pages × "
            f"{size_text(n['page-bytes'])} = {n['mib']:,.2f} MiB in the article's arithmetic.")
    if n["tail-mib"] > 0 and n["slots"] == n["tokens"]:  # the full layers fill their blocks; the sliding ones don't
        text += (f" Its {n['attn-block']:,}-token full-attention blocks divide the {n['tokens']:,} tokens exactly; "
                 f"the {size_text(n['tail-mib'] * MiB)} left empty is the extra block each sliding-window layer "
                 "keeps, because its window need not start on a block boundary.")
    elif n["tail-mib"] > 0:
        text += (f" About {size_text(n['tail-mib'] * MiB)} of it is the empty tail of the last attention block: "
                 f"{n['attn-blocks']:,} blocks of {n['attn-block']:,} tokens hold {n['slots']:,} token slots for "
                 f"{n['tokens']:,} tokens.")
    else:
        text += (f" Its {n['block']:,}-token blocks divide the {n['tokens']:,} tokens exactly, so no block "
                 "is left partly empty.")
    return text


def recurrent_sentence(spec: ModelSpec) -> str:
    """What the recurrent rows mean for this model."""
    if spec.is_hybrid:
        recurrent = sum(1 for kind in spec.layer_kinds if kind.is_recurrent)
        return (f"{spec.name} keeps such a state in {recurrent} of its {spec.num_layers} layers "
                f"({spec.kinds_summary()}).")
    local = any(layer.kind in (LayerKind.SLIDING_ATTENTION, LayerKind.CHUNKED_ATTENTION) for layer in spec.cache_layers)
    grows = ("its state grows with tokens, its windowed layers' only up to their window" if local
             else "all of its state grows with tokens")
    return f"{spec.name} has no recurrent layers ({spec.kinds_summary()}): its column is empty here, and {grows}."


def mtp_sentence(spec: ModelSpec, plans: Mapping[str, StatePlan], vllm: str) -> str:
    """What MTP and prefix caching add to a request of the parameters' model under ``vllm``."""
    by_kind = {label.split(": ", 1)[1]: p for label, p in plans.items() if label.startswith(f"vLLM {vllm}:")}
    base = by_kind.get("no MTP, no prefix caching")
    old = next(iter(plans.values()))
    mtp = next((p for k, p in by_kind.items() if k.startswith("MTP")), None)
    cached = next((p for k, p in by_kind.items() if k.startswith("prefix caching")), None)
    if base is None:
        return ""
    mib = base.bytes_per_request / MiB
    text = f"For {spec.name}, vLLM {vllm} reserves {mib:,.2f} MiB per request without MTP or prefix caching"
    text += (f", {mib / (old.bytes_per_request / MiB):.2f} times the article's arithmetic" if
             base.bytes_per_request != old.bytes_per_request else ", the same as the article's arithmetic")
    if mtp is not None:
        k = mtp.request.num_speculative_tokens
        text += f"; with {k} MTP tokens {mtp.bytes_per_request / MiB:,.2f} MiB"
    elif spec.num_mtp_layers == 0:
        text += f"; it has no MTP layer, so MTP adds nothing to it"
    if cached is not None:
        on_top = cached.bytes_per_request / MiB
        before = (mtp or base).bytes_per_request / MiB
        text += (f"; with prefix caching on top, {on_top:,.2f} MiB" if on_top != before
                 else "; prefix caching adds nothing to it (no recurrent state to checkpoint)")
    return text + "."


def tp_sentence(spec: ModelSpec, numbers: Mapping[str, Any]) -> str:
    """One rank at the middle and the largest TP of chapter 1's sweep, for the parameters' model."""
    n = numbers
    text = (f"For {spec.name} the {n['tp1-mib']:,.2f} MiB of the article's arithmetic is the whole, unsharded "
            f"request: a TP{n['mid']} rank holds {n['mid-mib']:,.2f} MiB of it.")
    if n["high-rec-bytes"]:
        text += (f" At TP{n['high']} one rank keeps {n['high-attn-bytes']:,} B of attention state per token and "
                 f"{n['high-rec-bytes']:,} B of recurrent state per layer, the hybrid rule gives a block of "
                 f"{n['high-block']:,} tokens")
    else:
        text += (f" At TP{n['high']} one rank keeps {n['high-attn-bytes']:,} B of attention state per token in "
                 f"blocks of {n['high-block']:,} tokens (no recurrent state sets them)")
    replicated = n["high-ratio"] > 1 + 1e-9
    what = "the MLA latent is replicated." if spec.mla is not None else "heads are replicated."
    text += (f", and the {n['high']} ranks together hold {n['high-ratio']:.2f} times the unsharded request: "
             + (what if replicated else "nothing is replicated."))
    return text


def heads_clause(spec: ModelSpec) -> str:
    """What TP can split of the model's attention state, for the TP takeaway: its KV heads, or nothing (MLA)."""
    if spec.mla is not None:
        return f"{spec.name} keeps one MLA latent per token, which no TP rank splits"
    heads = spec.attention.num_kv_heads if spec.attention is not None else 0
    return f"{spec.name} has {heads} KV heads to split"


def pd_sentence(spec: ModelSpec, numbers: Mapping[str, Any]) -> str:
    """How far the parameters' prefill and decode layouts disagree on the block."""
    n = numbers
    if not n["pairs"]:
        return f"None of these prefill-decode pairs can run {spec.name}."
    if n["min-block"] == n["max-block"]:
        return (f"For {spec.name} every one of these layouts picks the same {n['min-block']:,}-token block, so "
                f"all {n['pairs']} prefill-decode TP pairs agree and nothing needs `--block-size`.")
    return (f"For {spec.name} these layouts pick blocks of {n['min-block']:,} to {n['max-block']:,} tokens; "
            f"{n['mismatched']} of the {n['pairs']} prefill-decode TP pairs disagree, and a side that has to grow "
            f"its block pays up to {n['max-extra-pct']:.0f} % more per request.")


def kind_sentence(plan: StatePlan) -> str:
    """How :eq:`state-pages-per-request` reads for ``plan``'s model, with its own numbers."""
    spec = plan.model
    attention = [g for g in plan.groups if not g.kind.is_recurrent]
    recurrent = [g for g in plan.groups if g.kind.is_recurrent]
    kinds = sorted({kind_name(g.kind) for g in plan.groups})
    n_attn = sum(len(g.layers) - g.padding_layers for g in attention)
    n_rec = sum(len(g.layers) - g.padding_layers for g in recurrent)
    text = (f"{spec.name} ({spec.kinds_summary()}) is planned by the same rules: {len(plan.groups)} KV cache groups "
            f"of {plan.group_size} layer slots ({', '.join(kinds)}), one page size of {size_text(plan.block_bytes)} "
            f"and {plan.block_tokens:,}-token blocks")
    if recurrent:
        rec = plan.recurrent_page
        text += (f"; its {n_rec} recurrent layers hold one page each ({size_text(rec.state_bytes)} of state), its "
                 f"{n_attn} attention layers {attention[0].blocks_per_request:,} blocks each")
    else:
        text += f"; its {n_attn} attention layers take {max(g.blocks_per_request for g in attention):,} blocks at most"
    return (text + f": {plan.blocks_per_request:,} pages, {plan.bytes_per_request / MiB:,.2f} MiB per "
            f"{plan.max_model_len:,}-token request.")


def model_line(spec: ModelSpec) -> str:
    """How the model of the parameters cell keeps its state, in one sentence: the branch of page 1."""
    attention = spec.num_layers - sum(1 for kind in spec.layer_kinds if kind.is_recurrent)
    if spec.is_hybrid:
        return (f"{spec.name} is a hybrid: {attention} of its {spec.num_layers} layers keep a KV cache like these, "
                "the others a fixed recurrent state (the next page).")
    if spec.mla is not None:
        return (f"{spec.name} uses MLA: one compressed latent vector per token in place of K and V per head, so "
                "its bytes per token are the latent's, and they grow with every token all the same.")
    local = [layer for layer in spec.cache_layers
             if layer.kind in (LayerKind.SLIDING_ATTENTION, LayerKind.CHUNKED_ATTENTION)]
    if local:
        windows = sorted({layer.window for layer in local if layer.window})
        span = " or ".join(f"{w:,}" for w in windows) or "a window of"
        what = "sliding-window" if local[0].kind is LayerKind.SLIDING_ATTENTION else "chunked local"
        return (f"All {spec.num_layers} layers of {spec.name} are attention, but only {spec.num_layers - len(local)} "
                f"of them see every token: the other {len(local)} are {what} layers that look back at most "
                f"{span} tokens, so their state stops growing there (vLLM still reserves blocks for the window "
                "plus the tokens in flight).")
    return f"All {spec.num_layers} layers of {spec.name} are attention: its state grows with every token."


def serving_label(spec: ModelSpec, vllm: str, num_speculative_tokens: int) -> str:
    """The serving line as the prose names it: ``vLLM 0.26.1 with 3 MTP tokens``, or without MTP and why."""
    k = mtp_tokens(spec, num_speculative_tokens)
    if k:
        return f"vLLM {vllm} with {k} MTP tokens"
    if not spec.num_mtp_layers:
        return f"vLLM {vllm} (no MTP: {spec.name} has no MTP layer)"
    return f"vLLM {vllm} without MTP"
