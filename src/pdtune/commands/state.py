"""``pdtune state``: per-request state and, given a KV cache size, how many requests fit."""

from __future__ import annotations

import argparse

from pdtune import versions
from pdtune.commands._common import emit_json, non_negative_float, non_negative_int, positive_int, shared_flag
from pdtune.errors import InputError
from pdtune.model import load_model
from pdtune.state import KERNEL_BLOCK_TOKENS, MambaCacheMode, StatePlan, plan_state
from pdtune.units import GiB, MiB, from_gib

EPILOG = """\
Which vLLM?  --vllm 0.11 reproduces the article's arithmetic: the attention block is
16 * ceil(mamba_page / (16 * attention_page_per_token)) tokens and every GDN layer keeps exactly one
block per request, so Qwen3.8-2.4T at TP=1 needs 184 pages = 759 MiB per request. The current line
(the default, vLLM %(current)s) reserves more per request:
  * with speculative decoding (MTP) every GDN/Mamba layer keeps 1 + K states, its conv window grows
    by K rows, and the MTP layer's own attention joins the attention group;
  * with prefix caching (vLLM's default; PD deployments usually pass --no-prefix-caching) recurrent
    layers run in 'align' mode: 2 + K blocks, plus a prefill-checkpoint block for GDN on FlashInfer
    (0.33) and Mamba2 (0.32+), and the attention block aligns to a 64-token grid;
  * the "GPU KV cache size" line is int(max_concurrency * max_model_len) (0.21+), not
    num_blocks // groups * block_size.
All numbers are for one TP rank: KV heads shard as max(1, kv_heads // tp), GDN/Mamba heads as
heads // tp. See the book's chapters "Per-request state" and "Concurrency per engine".
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "state",
        help="per-request KV/GDN/Mamba state, block size, groups, and capacity of a KV cache",
        description="Per-request state of MODEL on one TP rank, as a given vLLM line computes it.",
        epilog=EPILOG % {"current": versions.CURRENT},
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_model_arguments(p)
    p.add_argument("--kv-cache-gib", type=non_negative_float, metavar="G",
                   help="KV cache memory of one GPU in GiB: adds num_blocks, max_concurrency, kv_cache_tokens")
    shared_flag(p, "--json")
    p.set_defaults(func=run)


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    """The flags that pick a model and a vLLM configuration; shared with other commands."""
    shared_flag(p, "model")
    p.add_argument("--tp", type=positive_int, default=1, help="tensor-parallel size of attention (default 1)")
    shared_flag(p, "--kv-cache-dtype", default="auto", help="auto | fp8 | fp8_e4m3 | bfloat16 | ... (default auto)")
    p.add_argument("--mamba-cache-dtype", default="auto", help="GDN/Mamba conv (and SSM) state dtype")
    p.add_argument("--mamba-ssm-cache-dtype", default="auto", help="GDN/Mamba SSM state dtype")
    shared_flag(p, "--isl")
    shared_flag(p, "--osl")
    p.add_argument("--template-tokens", type=non_negative_int, default=0,
                   help="chat-template tokens added to ISL + OSL (default 0)")
    p.add_argument("--max-model-len", type=positive_int, help="instead of --isl/--osl")
    shared_flag(p, "--num-speculative-tokens", help="MTP / speculative tokens per step (default 0)")
    shared_flag(p, "--vllm", default=versions.CURRENT,
                help=f"vLLM line whose arithmetic to follow (default {versions.CURRENT}; 0.11 = the article)")
    caching = p.add_mutually_exclusive_group()
    caching.add_argument("--prefix-caching", dest="prefix_caching", action="store_true", default=None,
                         help="prefix caching on (vLLM's default)")
    caching.add_argument("--no-prefix-caching", dest="prefix_caching", action="store_false")
    p.add_argument("--mamba-cache-mode", choices=[m.value for m in MambaCacheMode],
                   help="override the mode vLLM derives from prefix caching")
    p.add_argument("--block-size", type=positive_int, help="--block-size given to vLLM (default: let vLLM pick)")
    p.add_argument("--attention-backend", choices=sorted(KERNEL_BLOCK_TOKENS),
                   help="attention backend (default: FlashInfer, FlashInfer-MLA for MLA; Blackwell)")
    p.add_argument("--max-num-batched-tokens", type=positive_int, default=8192,
                   help="scheduler token budget; sizes sliding-window state (default 8192)")


def max_model_len_from_args(args: argparse.Namespace) -> int:
    if args.max_model_len is not None:
        if args.isl is not None or args.osl is not None:
            raise InputError("--max-model-len", "max_model_len", "give either --max-model-len or --isl/--osl, not both")
        return int(args.max_model_len) + args.template_tokens
    if args.isl is None or args.osl is None:
        raise InputError("--isl/--osl", "max_model_len", "give --isl and --osl, or --max-model-len")
    return int(args.isl + args.osl + args.template_tokens)


def plan_from_args(args: argparse.Namespace) -> StatePlan:
    spec = load_model(args.model)
    prefix_caching = args.prefix_caching if args.prefix_caching is not None else True
    return plan_state(
        spec,
        max_model_len=max_model_len_from_args(args),
        tp=args.tp,
        kv_cache_dtype=args.kv_cache_dtype,
        mamba_cache_dtype=args.mamba_cache_dtype,
        mamba_ssm_cache_dtype=args.mamba_ssm_cache_dtype,
        num_speculative_tokens=args.num_speculative_tokens,
        vllm=args.vllm,
        prefix_caching=prefix_caching,
        mamba_cache_mode=args.mamba_cache_mode,
        block_size=args.block_size,
        attention_backend=args.attention_backend,
        max_num_batched_tokens=args.max_num_batched_tokens,
    )


def run(args: argparse.Namespace) -> int:
    plan = plan_from_args(args)
    out = plan.to_dict()
    if args.kv_cache_gib is not None:
        cap = plan.capacity(from_gib(args.kv_cache_gib))
        out.update(
            kv_cache_gib=args.kv_cache_gib,
            num_blocks=cap.num_blocks,
            max_concurrency=cap.max_concurrency,
            kv_cache_tokens=cap.kv_cache_tokens,
            requests_by_bytes=cap.requests_by_bytes,
        )
    if args.json:
        emit_json(out)
    else:
        print(render(plan, out))
    return 0


def render(plan: StatePlan, out: dict[str, object]) -> str:
    m = plan.model
    lines = [
        f"{m.name}: {m.kinds_summary()} layers; {plan.semantics.label}, TP={plan.tp}, "
        f"max_model_len {plan.max_model_len:,}, KV cache {plan.kv_cache_dtype}, "
        f"{plan.request.num_speculative_tokens} speculative tokens, mamba cache mode {plan.mamba_cache_mode}",
    ]
    if plan.attention_page is not None:
        lines.append(f"  attention      {plan.attention_page.bytes_per_token:>13,} B per token per layer")
    if plan.recurrent_page is not None:
        r = plan.recurrent_page
        lines.append(f"  {r.kind.value} conv     {r.conv_bytes:>13,} B per request per layer  shape {r.conv_shape}")
        lines.append(f"  {r.kind.value} SSM      {r.ssm_bytes:>13,} B per request per layer  shape {r.ssm_shape}")
    lines.append(f"  block          {plan.block_tokens:>13,} tokens = {plan.block_bytes:,} B per layer page")
    for g in plan.groups:
        pad = f" + {g.padding_layers} padding" if g.padding_layers else ""
        lines.append(f"  group {g.kind.value:<17} {len(g.layers) - g.padding_layers} layers{pad}, "
                     f"{g.blocks_per_request} block(s) per request")
    lines.append(f"  per request    {plan.blocks_per_request:>13,} pages = {plan.bytes_per_request:,} B "
                 f"= {plan.bytes_per_request / MiB:.1f} MiB")
    if "num_blocks" in out:
        lines.append(
            f"  KV cache {out['kv_cache_gib']} GiB -> {out['num_blocks']:,} blocks of {plan.pool_block_bytes / GiB:.4f} GiB, "
            f"max concurrency {out['max_concurrency']:.2f}x, \"GPU KV cache size: {out['kv_cache_tokens']:,} tokens\", "
            f"{out['requests_by_bytes']:.1f} requests by bytes"
        )
    for note in plan.notes:
        lines.append(f"  note: {note}")
    return "\n".join(lines)
