"""``pdtune graphs``: which CUDA graphs an engine captures, and what vLLM reserves for them."""

from __future__ import annotations

import argparse

from pdtune.commands._common import emit_json, mib_flag, shared_flag, whole_flag
from pdtune.limits import MAX_NUM_SEQS, MAX_TOKENS_PER_STEP
from pdtune.memory import CUDAGraphMode, cudagraph_estimate, cudagraph_plan
from pdtune.units import GiB, from_mib


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "graphs",
        help="CUDA-graph capture sizes and count; optionally vLLM's memory estimate",
        description=(
            "Capture sizes follow vLLM's list 1, 2, 4, 8..248 step 8, 256.. step 16 up to the maximum capture "
            "size, rounded up to multiples of 1 + K with K speculative tokens. By default the maximum is "
            "max_num_seqs * (1 + K), as in the article's decode runs (--max-cudagraph-capture-size)."
        ),
    )
    p.add_argument("--max-num-seqs", type=whole_flag(MAX_NUM_SEQS, "sequences per engine"), required=True)
    shared_flag(p, "--num-speculative-tokens")
    p.add_argument("--max-capture-size", type=whole_flag(MAX_TOKENS_PER_STEP, "tokens per step"),
                   help="max-cudagraph-capture-size (default max_num_seqs * (1 + K))")
    p.add_argument("--max-num-batched-tokens", type=whole_flag(MAX_TOKENS_PER_STEP, "tokens per step"),
                   help="default max_num_seqs * (1 + K) + 16, as in the article's table 1")
    p.add_argument("--mode", choices=[m.value for m in CUDAGraphMode], default=CUDAGraphMode.FULL_DECODE_ONLY.value)
    p.add_argument("--first-graph-mib", type=mib_flag,
                   help="memory the largest graph took when captured: prints the estimate")
    p.add_argument("--per-graph-mib", type=mib_flag, default=0.0,
                   help="memory the second-largest graph added (floored at 1 MiB, as vLLM does)")
    shared_flag(p, "--json")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    plan = cudagraph_plan(
        args.max_num_seqs,
        num_speculative_tokens=args.num_speculative_tokens,
        max_capture_size=args.max_capture_size,
        max_num_batched_tokens=args.max_num_batched_tokens,
        mode=args.mode,
    )
    out = plan.to_dict()
    if args.first_graph_mib is not None:
        est = cudagraph_estimate(from_mib(args.first_graph_mib, "--first-graph-mib", "first_graph_mib"),
                                 from_mib(args.per_graph_mib, "--per-graph-mib", "per_graph_mib"), plan.count)
        out["estimate_gib"] = est / GiB
    if args.json:
        emit_json(out)
        return 0
    print(f"{plan.count} graphs ({len(plan.full_sizes)} FULL, {len(plan.piecewise_sizes)} PIECEWISE), "
          f"decode query length {plan.decode_query_len}, largest {plan.max_capture_size} tokens")
    print("sizes: " + ", ".join(str(s) for s in out["sizes"]))  # type: ignore[union-attr]
    if "estimate_gib" in out:
        print(f"vLLM reserves first + (n - 1) x increment = {out['estimate_gib']:.2f} GiB")
    return 0
