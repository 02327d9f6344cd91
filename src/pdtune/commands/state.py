"""``pdtune state``: per-request state and, given a KV cache size, how many requests fit."""

from __future__ import annotations

import argparse
import math

from pdtune import versions
from pdtune.commands._common import emit_json, gib_flag, shared_flag, whole_flag
from pdtune.errors import InputError
from pdtune.gpus import load_gpu
from pdtune.limits import MAX_MODEL_LEN, MAX_PARALLEL, MAX_TOKENS_PER_STEP
from pdtune.memory import vllm_default_max_num_batched_tokens
from pdtune.model import LayerKind, load_model
from pdtune.state import KERNEL_BLOCK_TOKENS, SPECULATIVE_METHODS, MambaCacheMode, StatePlan, plan_state
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
  * in-flight tokens (0.26+): a sliding-window or chunked layer keeps the window plus the tokens of
    every batch in flight, VllmConfig.max_in_flight_tokens = max_concurrent_batches x
    max_num_batched_tokens, 2 batches with async scheduling (on by default from 0.20) and 1 without; its
    blocks per request are cdiv(min(window - 1 + in_flight, max_model_len), block) + 1. gpt-oss-120b at
    32,768 tokens, mnbt 8192: sliding cdiv(127 + 16384, 16) + 1 = 1,033 plus full 2,048 = 3,081 blocks
    (0.25 and older: one batch, cdiv(127 + 8192, 16) + 1 = 521);
  * chunked local attention (Llama 4) keeps the hybrid KV-cache manager on where
    VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE is 1 (its default from 0.20, 0 in 0.11; set it
    with --vllm-env): Llama-4-Scout at 32,768 tokens then takes 3 x 1,536 + 2,048 = 6,656 blocks in 4
    groups; with the variable 0, or behind a KV connector without HMA support
    (--kv-connector-without-hma), sliding/chunked layers keep every token (2,048 blocks, one group);
  * --speculative-model adds an EAGLE/EAGLE3 head's or a draft model's layers to the cache (Llama-3.1-8B
    + an EAGLE3 head: 33 attention layers); --decode-context-parallel-size N shards full-attention tokens
    over N ranks (0.11-0.20 multiply the logged size by N instead).
--max-num-batched-tokens defaults to vLLM's own default for --gpu / --gpu-memory-gib
(EngineArgs.get_batch_defaults: >= 160 GiB 16384 (0.28+), >= 70 GiB and not A100 8192, else 2048), and to
8192 when neither is given.
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
    p.add_argument("--kv-cache-gib", type=gib_flag, metavar="G",
                   help="KV cache memory of one GPU in GiB: adds num_blocks, max_concurrency, kv_cache_tokens")
    shared_flag(p, "--json")
    p.set_defaults(func=run)


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    """The flags that pick a model and a vLLM configuration; shared with other commands."""
    shared_flag(p, "model")
    p.add_argument("--tp", type=whole_flag(MAX_PARALLEL, "ranks"), default=1, help="tensor-parallel size of attention (default 1)")
    shared_flag(p, "--kv-cache-dtype", default="auto", help="auto | fp8 | fp8_e4m3 | bfloat16 | ... (default auto)")
    p.add_argument("--mamba-cache-dtype", default="auto", help="GDN/Mamba conv (and SSM) state dtype")
    p.add_argument("--mamba-ssm-cache-dtype", default="auto", help="GDN/Mamba SSM state dtype")
    shared_flag(p, "--isl")
    shared_flag(p, "--osl")
    p.add_argument("--template-tokens", type=whole_flag(MAX_MODEL_LEN, "tokens", minimum=0), default=0,
                   help="chat-template tokens added to ISL + OSL (default 0)")
    p.add_argument("--max-model-len", type=whole_flag(MAX_MODEL_LEN, "tokens"), help="instead of --isl/--osl")
    shared_flag(p, "--num-speculative-tokens", help="MTP / speculative tokens per step (default 0)")
    shared_flag(p, "--vllm", default=versions.DEFAULT_VLLM,
                help=f"vLLM line whose arithmetic to follow (default {versions.DEFAULT_VLLM}; 0.11 = the article)")
    caching = p.add_mutually_exclusive_group()
    caching.add_argument("--prefix-caching", dest="prefix_caching", action="store_true", default=None,
                         help="prefix caching on (vLLM's default)")
    caching.add_argument("--no-prefix-caching", dest="prefix_caching", action="store_false")
    p.add_argument("--mamba-cache-mode", choices=[m.value for m in MambaCacheMode],
                   help="override the mode vLLM derives from prefix caching")
    p.add_argument("--block-size", type=whole_flag(MAX_TOKENS_PER_STEP, "tokens"), help="--block-size given to vLLM (default: let vLLM pick)")
    p.add_argument("--attention-backend", choices=sorted(KERNEL_BLOCK_TOKENS),
                   help="attention backend (default: FlashInfer, FlashInfer-MLA for MLA; Blackwell)")
    p.add_argument("--max-num-batched-tokens", type=whole_flag(MAX_TOKENS_PER_STEP, "tokens per step"),
                   help="scheduler token budget; sizes sliding-window state (default: vLLM's for --gpu, else 8192)")
    gpu = p.add_mutually_exclusive_group()
    gpu.add_argument("--gpu", metavar="NAME", help="bundled GPU (gb300, h100, ...): picks vLLM's default token budget")
    gpu.add_argument("--gpu-memory-gib", type=gib_flag, metavar="G",
                     help="GPU memory torch reports, in GiB: picks vLLM's default token budget")
    shared_flag(p, "--speculative-model")
    p.add_argument("--speculative-method", choices=SPECULATIVE_METHODS,
                   help="default: eagle3/eagle from the draft's architecture, else draft_model; mtp without a draft")
    shared_flag(p, "--decode-context-parallel-size")
    hma = p.add_mutually_exclusive_group()
    hma.add_argument("--disable-hybrid-kv-cache-manager", dest="hybrid_kv_cache_manager", action="store_false",
                     default=None, help="sliding/chunked layers allocated as full attention")
    hma.add_argument("--enable-hybrid-kv-cache-manager", dest="hybrid_kv_cache_manager", action="store_true")
    p.add_argument("--allow-chunked-local-hma", action="store_true",
                   help="the same as --vllm-env VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1 (the default "
                        "from 0.20; 0 in 0.11)")
    shared_flag(p, "--vllm-env")
    p.add_argument("--kv-connector-without-hma", action="store_true",
                   help="a KV connector (e.g. for PD transfer) that does not support the hybrid KV-cache manager")
    p.add_argument("--no-async-scheduling", dest="async_scheduling", action="store_false", default=None,
                   help="one batch in flight instead of two (0.26+ sliding/chunked state)")
    p.add_argument("--mamba-block-size", type=whole_flag(MAX_TOKENS_PER_STEP, "tokens"), help="--mamba-block-size (prefix caching only)")
    p.add_argument("--kv-cache-dtype-skip-layers", default="", metavar="LIST",
                   help="comma-separated layer indices or 'sliding_window' kept in the model dtype (0.20+)")


def max_model_len_from_args(args: argparse.Namespace) -> int:
    if args.max_model_len is not None:
        if args.isl is not None or args.osl is not None:
            raise InputError("--max-model-len", "max_model_len", "give either --max-model-len or --isl/--osl, not both")
        return int(args.max_model_len) + args.template_tokens
    if args.isl is None or args.osl is None:
        raise InputError("--isl/--osl", "max_model_len", "give --isl and --osl, or --max-model-len")
    return int(args.isl + args.osl + args.template_tokens)


def max_num_batched_tokens_from_args(args: argparse.Namespace, max_model_len: int) -> int:
    """``--max-num-batched-tokens``, else vLLM's default for the GPU given, else 8192 (H100/H200 serve)."""
    if args.max_num_batched_tokens is not None:
        return int(args.max_num_batched_tokens)
    memory: int | None = None
    name = ""
    if getattr(args, "gpu", None):
        gpu = load_gpu(args.gpu)
        memory, name = gpu.memory_total, gpu.name
    elif getattr(args, "gpu_memory_gib", None) is not None:
        memory = from_gib(args.gpu_memory_gib, "--gpu-memory-gib", "gpu_memory_gib")
    if memory is None:
        return 8192
    return vllm_default_max_num_batched_tokens(memory, vllm=args.vllm, device_name=name, max_model_len=max_model_len)


def skip_layers_from_args(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def plan_from_args(args: argparse.Namespace) -> StatePlan:
    spec = load_model(args.model)
    prefix_caching = args.prefix_caching if args.prefix_caching is not None else True
    max_model_len = max_model_len_from_args(args)
    draft = load_model(args.speculative_model) if args.speculative_model else None
    return plan_state(
        spec,
        max_model_len=max_model_len,
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
        max_num_batched_tokens=max_num_batched_tokens_from_args(args, max_model_len),
        speculative_model=draft,
        speculative_method=args.speculative_method,
        decode_context_parallel_size=args.decode_context_parallel_size,
        hybrid_kv_cache_manager=args.hybrid_kv_cache_manager,
        allow_chunked_local_hma=True if args.allow_chunked_local_hma else None,  # None: --vllm-env, else the default
        kv_connector_without_hma=args.kv_connector_without_hma,
        async_scheduling=args.async_scheduling,
        mamba_block_size=args.mamba_block_size,
        kv_cache_dtype_skip_layers=skip_layers_from_args(args.kv_cache_dtype_skip_layers),
    )


def run(args: argparse.Namespace) -> int:
    plan = plan_from_args(args)
    out = plan.to_dict()
    if args.kv_cache_gib is not None:
        cap = plan.capacity(from_gib(args.kv_cache_gib, "--kv-cache-gib", "kv_cache_gib"))
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
    extra = ""
    if plan.speculation is not None and plan.speculation.draft is not None:
        extra += f", {plan.speculation.method} draft {plan.speculation.draft.name}"
    if plan.dcp > 1:
        extra += f", DCP={plan.dcp}"
    lines = [
        f"{m.name}: {m.kinds_summary()} layers; {plan.semantics.label}, TP={plan.tp}, "
        f"max_model_len {plan.max_model_len:,}, KV cache {plan.kv_cache_dtype}, "
        f"{plan.request.num_speculative_tokens} speculative tokens{extra}, mamba cache mode {plan.mamba_cache_mode}",
    ]
    if plan.attention_page is not None:
        lines.append(f"  attention      {plan.attention_page.bytes_per_token:>13,} B per token per layer")
    if plan.recurrent_page is not None:
        r = plan.recurrent_page
        names = ["conv"] * r.conv_states + ["SSM"] * (len(r.shapes) - r.conv_states)
        for name, shape, size in zip(names, r.shapes, r.dtypes, strict=True):
            state = math.prod(shape) * size
            lines.append(f"  {r.kind.value} {name:<5}{state:>13,} B per request per layer  shape {shape}")
    lines.append(f"  block          {plan.block_tokens:>13,} tokens = {plan.block_bytes:,} B per layer page")
    if plan.request.in_flight != plan.request.max_num_batched_tokens or any(
            g.kind in (LayerKind.SLIDING_ATTENTION, LayerKind.CHUNKED_ATTENTION) for g in plan.groups):
        lines.append(f"  in flight      {plan.request.in_flight:>13,} tokens (max_num_batched_tokens "
                     f"{plan.request.max_num_batched_tokens:,})")
    for g in plan.groups:
        pad = f" + {g.padding_layers} padding" if g.padding_layers else ""
        lines.append(f"  group {g.kind.value:<17} {len(g.layers) - g.padding_layers} layers{pad}, "
                     f"{g.blocks_per_request:,} block{'' if g.blocks_per_request == 1 else 's'} per request")
    lines.append(f"  per request    {plan.pool_blocks_per_request:>13,} pool blocks, {plan.blocks_per_request:,} pages "
                 f"= {plan.bytes_per_request:,} B = {plan.bytes_per_request / MiB:,.1f} MiB")
    if "num_blocks" in out:
        lines.append(
            f"  KV cache {out['kv_cache_gib']} GiB -> {out['num_blocks']:,} blocks of {plan.pool_block_bytes / GiB:.4f} GiB, "
            f"max concurrency {out['max_concurrency']:.2f}x, \"GPU KV cache size: {out['kv_cache_tokens']:,} tokens\", "
            f"{out['requests_by_bytes']:.1f} requests by bytes"
        )
    for note in plan.notes:
        lines.append(f"  note: {note}")
    return "\n".join(lines)
