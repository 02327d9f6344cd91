"""``pdtune memory``: the waterfall of one GPU, from its total memory down to the KV cache.

Either every part by hand (``--total-gib``, ``--weights-gib``, ...), or ``--model M --topology T [--gpu G]``:
then the weights per GPU come from the model's config sharded by the topology, the total from the GPU table,
and every part not given takes the workbook's default (:class:`pdtune.scenario.Scenario`: the article's
GB300 start-up memory), said so on the output; the requests it holds are vLLM's count
(:func:`pdtune.capacity.topology_capacity`, chapter 4's table).
"""

from __future__ import annotations

import argparse
import math

from pdtune import versions
from pdtune.commands._common import emit_json, gib_flag, mib_flag, shared_flag
from pdtune.errors import InputError
from pdtune.precision import WEIGHTS_HELP
from pdtune.memory import Accounting, Waterfall
from pdtune.units import GiB, MiB, from_gib, from_mib

#: What ``--model`` mode takes from the workbook's defaults when a part is not given, by flag.
_DEFAULTED = {"non_torch_gib": "--non-torch-gib", "activation_gib": "--activation-gib",
              "graphs_gib": "--graphs-gib", "gpu_memory_utilization": "--gpu-memory-utilization"}


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
    p.add_argument("--total-gib", type=gib_flag,
                   help="device memory torch sees (GB300: 276.62; with --model, default: --gpu's)")
    shared_flag(p, "--gpu-memory-utilization", default=None, help="default 0.92 (vLLM 0.20+; the workbook's)")
    p.add_argument("--weights-gib", type=gib_flag, help='"Model loading took ... GiB" (or --model)')
    shared_flag(p, "--model", help="config.json, its folder or a bundled name: weights per GPU from it")
    shared_flag(p, "--weights", help=f"with --model: {WEIGHTS_HELP}")
    p.add_argument("--topology", help="with --model: the layout whose GPU this is (TEP8, TP4DP4+EP, ...)")
    p.add_argument("--gpu", help="with --model: a GPU of data/gpus/gpus.csv for the total (default gb300)")
    p.add_argument("--mtp", action="store_true", help="with --model: the MTP draft layers' weights too")
    p.add_argument("--non-torch-gib", type=gib_flag, default=None,
                   help="default 0, or with --model the workbook's 2.90 (the article's GB300 run 7)")
    p.add_argument("--activation-gib", type=gib_flag, default=None,
                   help="torch activation peak (default 0, or with --model the workbook's 1.83)")
    p.add_argument("--graphs-gib", type=gib_flag, default=None,
                   help="CUDA-graph memory estimate (default 0, or with --model the workbook's 8.29)")
    shared_flag(p, "--isl", default=8192, help="with --model: input tokens per request (default 8192)")
    shared_flag(p, "--osl", default=1024, help="with --model: output tokens per request (default 1024)")
    shared_flag(p, "--kv-cache-dtype", default="fp8", help="with --model: KV cache dtype (default fp8)")
    shared_flag(p, "--num-speculative-tokens", help="with --model and --mtp: MTP draft tokens (default 3)",
                default=None)
    p.add_argument("--cuda-context-gib", type=gib_flag, default=0.0)
    p.add_argument("--per-request-mib", type=mib_flag,
                   help="state one request needs (pdtune state ... --json: mib_per_request)")
    p.add_argument("--accounting", choices=[a.value for a in Accounting], default=Accounting.VLLM.value)
    shared_flag(p, "--vllm", default=versions.DEFAULT_VLLM,
                help=f"rounding of requested memory and KV accounting (default {versions.DEFAULT_VLLM})")
    shared_flag(p, "--json")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.model is not None:
        return _run_model(args)
    for flag, value in (("--total-gib", args.total_gib), ("--weights-gib", args.weights_gib)):
        if value is None:
            raise InputError(flag, flag.lstrip("-").replace("-", "_"), "required (or give --model and --topology)")
    if args.topology or args.gpu or args.mtp or args.weights:
        raise InputError("--topology", "model", "--topology, --gpu, --mtp and --weights need --model")
    waterfall = Waterfall(
        total=from_gib(args.total_gib, "--total-gib", "total_gib"),
        gpu_memory_utilization=0.92 if args.gpu_memory_utilization is None else args.gpu_memory_utilization,
        weights=from_gib(args.weights_gib, "--weights-gib", "weights_gib"),
        activation_peak=from_gib(args.activation_gib or 0.0, "--activation-gib", "activation_gib"),
        non_torch=from_gib(args.non_torch_gib or 0.0, "--non-torch-gib", "non_torch_gib"),
        cudagraph_estimate=from_gib(args.graphs_gib or 0.0, "--graphs-gib", "graphs_gib"),
        cuda_context=from_gib(args.cuda_context_gib, "--cuda-context-gib", "cuda_context_gib"),
        source="command line",
        version=args.vllm,
    )
    return _report(waterfall, args, {})


def _run_model(args: argparse.Namespace) -> int:
    """``--model M --topology T``: the workbook's waterfall of one GPU of that layout, and vLLM's count."""
    from pdtune.capacity import scenario_waterfall, topology_capacity
    from pdtune.gpus import load_gpu
    from pdtune.model import load_model
    from pdtune.scenario import Scenario

    if not args.topology:
        raise InputError("--topology", "topology", "--model needs --topology (the layout whose GPU this is)")
    if args.weights_gib is not None:
        raise InputError("--weights-gib", "weights_gib", "--model computes the weights per GPU; drop one of them")
    from pdtune.scenario import layout_problem

    spec = load_model(args.model)
    if args.weights:
        from pdtune.precision import parse_weights_dtype

        spec = parse_weights_dtype(args.weights, spec)
    problem = layout_problem(spec, args.topology, max_model_len=args.isl + args.osl,
                             kv_cache_dtype=args.kv_cache_dtype, vllm=args.vllm, source="--topology")
    if problem:
        raise InputError("--topology", "topology", f"{args.topology}: {problem}")
    if args.mtp and not spec.num_mtp_layers:
        raise InputError("--mtp", "mtp", f"{spec.name} has no MTP layer")
    defaults = Scenario()
    total = args.total_gib if args.total_gib is not None else round(
        load_gpu(args.gpu or defaults.gpu).memory_total / GiB, 2)
    given = {"non_torch_gib": args.non_torch_gib, "activation_gib": args.activation_gib,
             "graphs_gib": args.graphs_gib, "gpu_memory_utilization": args.gpu_memory_utilization}
    fallback = {"non_torch_gib": defaults.non_torch_gib, "activation_gib": defaults.activation_peak_gib,
                "graphs_gib": defaults.cudagraph_estimate_gib,
                "gpu_memory_utilization": defaults.gpu_memory_utilization}
    parts = {k: v if v is not None else fallback[k] for k, v in given.items()}
    assumed = {_DEFAULTED[k]: fallback[k] for k, v in given.items() if v is None}
    k = args.num_speculative_tokens if args.num_speculative_tokens is not None else defaults.num_speculative_tokens
    memory = dict(gpu_memory_gib=total, gpu_memory_utilization=parts["gpu_memory_utilization"],
                  non_torch_gib=parts["non_torch_gib"], activation_peak_gib=parts["activation_gib"],
                  cudagraph_estimate_gib=parts["graphs_gib"])
    waterfall = scenario_waterfall(spec, topology=args.topology, mtp=args.mtp, vllm=args.vllm, **memory)
    row = topology_capacity(spec, [args.topology], max_model_len=args.isl + args.osl,
                            kv_cache_dtype=args.kv_cache_dtype, vllm=args.vllm,
                            num_speculative_tokens=k if args.mtp else 0, **memory)
    mine = {k: _finite(v) for k, v in row[row["mtp"] == (args.mtp and spec.num_mtp_layers > 0)].iloc[0].items()}
    if mine.get("mib_per_request_rank") is None:  # weights that do not fit leave no count, but a request has a size
        from pdtune.state import plan_state
        from pdtune.topology import parse_topology

        rank = plan_state(spec, tp=parse_topology(args.topology).tp, max_model_len=args.isl + args.osl,
                          kv_cache_dtype=args.kv_cache_dtype, vllm=args.vllm,
                          num_speculative_tokens=k if args.mtp else 0)
        mine["mib_per_request_rank"] = rank.bytes_per_request / MiB
    extra = {"model": spec.name, "weights": spec.weights.name, "topology": args.topology,
             "mtp": bool(args.mtp and spec.num_mtp_layers), "assumed": assumed,
             "requests_per_engine": mine.get("requests_per_engine"), "requests_per_gpu": mine.get("requests_per_gpu"),
             "mib_per_request_rank": mine.get("mib_per_request_rank"), "note": mine.get("note") or None}
    return _report(waterfall, args, extra)


def _finite(value: object) -> object:
    """A frame's cell for the output: NaN (a count that does not exist) as None, never printed as "nan"."""
    if hasattr(value, "item"):
        value = value.item()
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _report(waterfall: Waterfall, args: argparse.Namespace, extra: dict) -> int:
    kv = waterfall.kv_cache(args.accounting)
    out = waterfall.to_dict(args.accounting) | {k: v for k, v in extra.items() if v is not None}
    if args.per_request_mib is not None:
        if args.per_request_mib <= 0:
            raise InputError("--per-request-mib", "per_request_mib", "must be positive")
        out["max_requests"] = max(kv, 0) / from_mib(args.per_request_mib, "--per-request-mib", "per_request_mib")
    if args.json:
        emit_json(out)
        return 0
    if extra:
        print(f"{extra['model']} {extra['topology']}{' + MTP' if extra['mtp'] else ''}: weights per GPU "
              f"{waterfall.weights / GiB:.2f} GiB from the config ({extra['weights']} weights)")
    for step in waterfall.steps(args.accounting):
        print(f"{step.label:<32} -{step.bytes / GiB:8.2f} GiB  -> {step.remaining_after / GiB:8.2f} GiB left")
    print(f"{'KV cache':<32} {kv / GiB:9.2f} GiB")
    if "max_requests" in out:
        print(f"requests per engine at {args.per_request_mib:g} MiB each: {out['max_requests']:.1f}")
    if extra.get("requests_per_engine") is not None:
        print(f"requests per engine (vLLM {args.vllm}, {extra['mib_per_request_rank']:.2f} MiB per request on one "
              f"rank): {extra['requests_per_engine']:.2f}; per GPU {extra['requests_per_gpu']:.2f}")
    elif extra:
        why = extra.get("note") or "no KV cache is left"
        print(f"requests per engine (vLLM {args.vllm}, {extra['mib_per_request_rank']:.2f} MiB per request on one "
              f"rank): none, {why}")
        if kv < 0:
            print("if the checkpoint's weights are quantized and its config does not say so, give --weights "
                  "(fp8, nvfp4, ...)")
    if extra.get("assumed"):
        shown = ", ".join(f"{flag} {value:g}" for flag, value in extra["assumed"].items())
        print(f"assumed, not given: {shown} (the workbook's defaults: the article's GB300 setup)")
    if kv < 0:
        print(f"(negative: vLLM would refuse to start; {-kv / MiB:,.0f} MiB short)")
    return 0
