"""``pdtune memory``: the waterfall of one GPU, from its total memory down to the KV cache."""

from __future__ import annotations

import argparse

from pdtune.commands._common import emit_json, non_negative_float, shared_flag
from pdtune.errors import InputError
from pdtune.memory import Accounting, Waterfall
from pdtune.units import GiB, MiB, from_gib, from_mib


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "memory",
        help="KV cache left on one GPU after weights, activations, graphs; and requests it holds",
        description=(
            "vLLM's accounting: KV = total * gpu_memory_utilization - non-torch - weights - activation peak "
            "- CUDA-graph estimate. The CUDA context is already inside the reserve; --accounting "
            "article-prose subtracts it again, as the article's text does."
        ),
    )
    p.add_argument("--total-gib", type=non_negative_float, required=True, help="device memory torch sees (GB300: 276.62)")
    shared_flag(p, "--gpu-memory-utilization", default=0.92, help="default 0.92 (vLLM 0.20+)")
    p.add_argument("--weights-gib", type=non_negative_float, required=True, help='"Model loading took ... GiB"')
    p.add_argument("--non-torch-gib", type=non_negative_float, default=0.0)
    p.add_argument("--activation-gib", type=non_negative_float, default=0.0, help="torch activation peak")
    p.add_argument("--graphs-gib", type=non_negative_float, default=0.0, help="CUDA-graph memory estimate")
    p.add_argument("--cuda-context-gib", type=non_negative_float, default=0.0)
    p.add_argument("--per-request-mib", type=non_negative_float,
                   help="state one request needs (pdtune state ... --json: mib_per_request)")
    p.add_argument("--accounting", choices=[a.value for a in Accounting], default=Accounting.VLLM.value)
    shared_flag(p, "--vllm", default="0.26", help="rounding of requested memory (default 0.26)")
    shared_flag(p, "--json")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    waterfall = Waterfall(
        total=from_gib(args.total_gib),
        gpu_memory_utilization=args.gpu_memory_utilization,
        weights=from_gib(args.weights_gib),
        activation_peak=from_gib(args.activation_gib),
        non_torch=from_gib(args.non_torch_gib),
        cudagraph_estimate=from_gib(args.graphs_gib),
        cuda_context=from_gib(args.cuda_context_gib),
        source="command line",
        version=args.vllm,
    )
    kv = waterfall.kv_cache(args.accounting)
    out = waterfall.to_dict(args.accounting)
    if args.per_request_mib is not None:
        if args.per_request_mib <= 0:
            raise InputError("--per-request-mib", "per_request_mib", "must be positive")
        out["max_requests"] = max(kv, 0) / from_mib(args.per_request_mib)
    if args.json:
        emit_json(out)
        return 0
    for step in waterfall.steps(args.accounting):
        print(f"{step.label:<32} -{step.bytes / GiB:8.2f} GiB  -> {step.remaining_after / GiB:8.2f} GiB left")
    print(f"{'KV cache':<32} {kv / GiB:9.2f} GiB")
    if "max_requests" in out:
        print(f"requests per engine at {args.per_request_mib:g} MiB each: {out['max_requests']:.1f}")
    if kv < 0:
        print(f"(negative: vLLM would refuse to start; {-kv / MiB:.0f} MiB short)")
    return 0
