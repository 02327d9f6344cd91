"""``pdtune simulate``: a benchmark run simulated step by step through vLLM's scheduler (modeled)."""

from __future__ import annotations

import argparse
import io
import math

from pdtune import versions
from pdtune.commands._common import (
    draft_and_dcp_flags,
    emit_json,
    non_negative_float,
    shared_flag,
    whole_flag,
)
from pdtune.commands.predict import engine_config
from pdtune.errors import InputError
from pdtune.gpus import load_gpu
from pdtune.harnesses import SIMULATED
from pdtune.io import atomic_write_text
from pdtune.limits import MAX_CONCURRENCY, MAX_MODEL_LEN, MAX_NUM_SEQS, MAX_SPECULATIVE_TOKENS, MAX_TOKENS_PER_STEP
from pdtune.model import load_model
from pdtune.perfmodel import DEFAULT_ACCEPTANCE, build_engine
from pdtune.perfmodel.calibrate import load_calibration
from pdtune.perfmodel.defaults import gpu_defaults
from pdtune.precision import parse_weights_dtype
from pdtune.sim import SimConfig, closed_loop, open_loop, read_trace, simulate
from pdtune.sim.disagg import simulate_disagg
from pdtune.sim.results import SimResult
from pdtune.topology import Deployment, is_deployment, parse_deployment, parse_topology

EPILOG = """\
Every number printed is MODELED: pdtune.sim steps vLLM 0.33's scheduler (checked call by call against vLLM's own,
data/vllm/scheduler-traces/) and times each step with pdtune's per-step cost model; nothing is measured.
Workloads, as the harnesses drive them: --concurrency N (a closed loop of N clients, vllm bench serve
--max-concurrency N; --harness sa-bench or aiperf for theirs), --rate R (open loop, Poisson or --burstiness B),
--trace F (a CSV of arrival_s,isl,osl). Topologies: TP4, TP2DP4+EP, ... or <x>x<prefill>:<y>x<decode> for
disaggregated serving. Each engine takes vLLM's serving defaults (max-num-batched-tokens, max-num-seqs, 0.9 of
the memory, KV cache in the model dtype) unless flags say otherwise.
Examples:
  pdtune simulate llama-3.1-70b --gpu h200 --topology TP4 --concurrency 64 --isl 1024 --osl 128
  pdtune simulate gpt-oss-120b --gpu h200 --topology TP2 --rate 8 --isl 2048 --osl 256 --num-prompts 400
  pdtune simulate llama-3.1-70b --gpu h200 --topology 1xTP4:1xTP4 --concurrency 32 --isl 4096 --osl 256 --json
  pdtune simulate qwen3-32b --gpu h100 --topology TP2 --concurrency 16 --isl 1024 --osl 128 --csv requests.csv
"""


def positive_float(text: str) -> float:
    value = non_negative_float(text)
    if value <= 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"must be a positive finite number, got {text}")
    return value


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "simulate",
        help="a benchmark run simulated step by step through vLLM's scheduler (modeled)",
        description="Simulate a benchmark of MODEL served as TOPOLOGY, step by step (modeled, not measured).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    shared_flag(p, "model")
    p.add_argument("--gpu", default="gb300", help="bundled GPU (default gb300; data/gpus/gpus.csv lists them)")
    p.add_argument("--topology", required=True, help="e.g. TP4, TP2DP4+EP, TEP8, or 2xTP4:1xTP8 (disaggregated)")
    load = p.add_mutually_exclusive_group(required=True)
    load.add_argument("--concurrency", type=whole_flag(MAX_CONCURRENCY, "clients"), metavar="N",
                      help="a closed loop of N clients")
    load.add_argument("--rate", type=positive_float, metavar="R", help="an open loop at R requests/s")
    load.add_argument("--trace", metavar="CSV", help="a trace: columns arrival_s,isl,osl, one row per request")
    shared_flag(p, "--isl", help="input tokens per request (with --concurrency or --rate)")
    shared_flag(p, "--osl", help="output tokens per request (with --concurrency or --rate)")
    p.add_argument("--num-prompts", type=whole_flag(MAX_CONCURRENCY, "requests"), metavar="N",
                   help="measured requests (default: the harness's: vllm bench 1000, sa-bench and AIPerf 10 x N)")
    p.add_argument("--harness", choices=("vllm-bench", "sa-bench", "aiperf"), default="vllm-bench",
                   help="how the closed loop draws lengths and warms up (default vllm-bench)")
    p.add_argument("--range-ratio", type=non_negative_float, metavar="R",
                   help="ISL/OSL drawn around their means with this range ratio (default: the harness's)")
    p.add_argument("--warmups", type=whole_flag(MAX_CONCURRENCY, "requests", minimum=0), metavar="N",
                   help="warm-up requests before the measured ones (default: the harness's)")
    p.add_argument("--burstiness", type=positive_float, default=1.0, metavar="B",
                   help="open loop: gamma shape of the gaps (1: Poisson)")
    p.add_argument("--max-concurrency", type=whole_flag(MAX_CONCURRENCY, "clients"), metavar="N",
                   help="open loop or trace: at most N requests in flight")
    p.add_argument("--seed", type=whole_flag(2**31 - 1, "seed", minimum=0), default=0, help="random seed (default 0)")
    p.add_argument("--mtp", type=whole_flag(MAX_SPECULATIVE_TOKENS, "draft tokens", minimum=0), default=0,
                   metavar="K", help="MTP draft tokens per decode step (default 0)")
    p.add_argument("--acceptance", type=non_negative_float, default=DEFAULT_ACCEPTANCE, metavar="A",
                   help=f"draft acceptance rate, accepted/proposed (default {DEFAULT_ACCEPTANCE})")
    shared_flag(p, "--gpu-memory-utilization", help="default 0.9 (vLLM's)")
    shared_flag(p, "--kv-cache-dtype", help="KV cache dtype (default auto: the model's)")
    shared_flag(p, "--vllm", default=versions.DEFAULT_VLLM,
                help=f"vLLM line whose state accounting and serving defaults apply (default {versions.DEFAULT_VLLM})")
    p.add_argument("--max-num-batched-tokens", type=whole_flag(MAX_TOKENS_PER_STEP, "tokens per step"),
                   help="per DP rank (default: vLLM's for the version and GPU)")
    p.add_argument("--max-num-seqs", type=whole_flag(MAX_NUM_SEQS, "sequences per engine"),
                   help="running requests per DP rank (default: vLLM's for the GPU)")
    p.add_argument("--max-model-len", type=whole_flag(MAX_MODEL_LEN, "tokens"),
                   help="default: the longest request of the workload")
    p.add_argument("--long-prefill-token-threshold", type=whole_flag(MAX_MODEL_LEN, "tokens", minimum=0),
                   default=0, metavar="T", help="cap each prompt chunk at T tokens (default 0: off)")
    p.add_argument("--no-async-scheduling", action="store_true", help="schedule each step after the last one ends")
    p.add_argument("--no-prefix-caching", action="store_true", help="turn prefix caching off (vLLM's default: on)")
    p.add_argument("--overhead-cv", type=non_negative_float, default=0.0, metavar="CV",
                   help="spread of the front end's time per request, its coefficient of variation (default 0)")
    p.add_argument("--weights-dtype", metavar="FMT", help="serve the weights as FMT (see pdtune predict --help)")
    p.add_argument("--calibration", metavar="CAL", help="factors from `pdtune calibrate` (default: the GPU's)")
    draft_and_dcp_flags(p, engines="the engine")
    p.add_argument("--csv", metavar="OUT", help="write one row per measured request to OUT (times in ms)")
    shared_flag(p, "--json")
    p.set_defaults(func=run)


def _workload(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    if args.trace is not None:
        if args.isl is not None or args.osl is not None:
            raise InputError("--trace", "isl", "a trace gives each request's ISL and OSL; drop --isl/--osl")
        w = read_trace(args.trace)
        if args.max_concurrency is not None:
            from dataclasses import replace

            w = replace(w, phases=(replace(w.main, concurrency=args.max_concurrency),))
        return w
    for flag in ("isl", "osl"):
        if getattr(args, flag) is None:
            raise InputError(f"--{flag}", flag, "missing (give --isl and --osl with --concurrency or --rate)")
    if args.range_ratio is not None and not 0 <= args.range_ratio < 1:
        raise InputError("--range-ratio", "range_ratio", f"must be in [0, 1), got {args.range_ratio}")
    if args.rate is not None:
        return open_loop(args.rate, args.isl, args.osl, num_prompts=args.num_prompts or 1000,
                         range_ratio=args.range_ratio or 0.0, burstiness=args.burstiness, seed=args.seed,
                         max_concurrency=args.max_concurrency)
    if args.max_concurrency is not None:
        raise InputError("--max-concurrency", "max_concurrency", "is for --rate or --trace; --concurrency N caps itself")
    return closed_loop(args.concurrency, args.isl, args.osl, num_prompts=args.num_prompts,
                       range_ratio=args.range_ratio, warmups=args.warmups, seed=args.seed, harness=args.harness)


def run(args: argparse.Namespace) -> int:
    if not 0 <= args.acceptance <= 1:
        raise InputError("--acceptance", "acceptance", f"must be in [0, 1], got {args.acceptance}")
    disagg = is_deployment(args.topology)
    parsed = parse_deployment(args.topology) if disagg else parse_topology(args.topology)
    if args.num_speculative_tokens and not args.speculative_model:
        raise InputError("--num-speculative-tokens", "num_speculative_tokens",
                         "counts the draft tokens of --speculative-model; for MTP use --mtp K")
    workload = _workload(args)
    spec = load_model(args.model)
    if args.weights_dtype:
        spec = parse_weights_dtype(args.weights_dtype, spec)
    gpu = load_gpu(args.gpu)
    if args.calibration:
        eff = load_calibration(args.calibration, model=args.model, gpu=gpu.name).efficiency
        eff_source = f"calibration {args.calibration}"
    else:
        defaults = gpu_defaults(gpu.name, SIMULATED)
        eff, eff_source = defaults.efficiency, f"{gpu.name} defaults ({defaults.source})"
    config = engine_config(args, "agg", gpu)
    isl = max(r.isl for p in workload.phases for r in p.requests)
    osl = max(r.osl for p in workload.phases for r in p.requests)
    sim = SimConfig(async_scheduling=not args.no_async_scheduling,
                    enable_prefix_caching=False if args.no_prefix_caching else None,
                    long_prefill_token_threshold=args.long_prefill_token_threshold, max_model_len=args.max_model_len,
                    acceptance=args.acceptance, overhead_cv=args.overhead_cv, seed=args.seed)
    if disagg:
        dep = parsed
        assert isinstance(dep, Deployment)
        prefill = build_engine(spec, gpu, dep.prefill, isl=isl, osl=osl, config=config)
        decode = build_engine(spec, gpu, dep.decode, isl=isl, osl=osl, mtp_tokens=args.mtp, config=config)
        result = simulate_disagg(prefill, decode, dep.n_prefill, dep.n_decode, workload, efficiency=eff, config=sim)
    else:
        engine = build_engine(spec, gpu, parsed, isl=isl, osl=osl, mtp_tokens=args.mtp, config=config)
        result = simulate(engine, workload, efficiency=eff, config=sim)
    if args.csv:
        buffer = io.StringIO()
        result.request_frame().to_csv(buffer, index=False, float_format="%.6g")
        atomic_write_text(args.csv, buffer.getvalue(), "--csv")
    if args.json:
        emit_json({**result.summary(), "efficiency_source": eff_source, "efficiency": eff.to_dict(),
                   "row": result.to_row(), "csv": args.csv})
    else:
        print(render(result, eff_source, args.csv))
    return 0


def render(result: SimResult, eff_source: str, csv: str | None) -> str:
    s = result.stats()
    m = result.meta
    lines = [
        f"MODELED (step-level simulation of vLLM's scheduler, not a measurement): {m['model']} on {m['gpu']}, "
        f"{m['mode']} {m['topology']}, {m['label']}",
        f"  {int(s['requests'])} measured requests ({result.warmup_requests} warm-up) in {s['duration_s']:.2f} s "
        f"simulated, {int(s['steps'])} engine steps, {int(s['preemptions'])} preemptions; factors: {eff_source}",
        f"  {'':8} {'p50':>10} {'p90':>10} {'p99':>10} {'mean':>10}",
    ]
    for metric in ("ttft", "tpot", "itl", "e2e"):
        lines.append(f"  {metric.upper() + ' ms':8} " + " ".join(
            f"{s[f'{metric}_ms_{k}']:>10.2f}" for k in ("p50", "p90", "p99", "mean")))
    lines.append(f"  throughput {s['total_tps']:.0f} tok/s total, {s['output_tps']:.0f} tok/s output; "
                 f"{s['tps_per_gpu']:.1f} tok/s per GPU ({result.gpus} GPUs), {s['tps_per_user']:.1f} tok/s per user")
    summary = result.summary()
    for name, tl in summary.get("timeline", {}).items():
        kv = f" of {tl['kv_blocks']}" if tl.get("kv_blocks") else ""
        lines.append(f"  {name}: running {tl['running_mean']:.1f} mean / {tl['running_max']} max, waiting "
                     f"{tl['waiting_mean']:.1f} mean / {tl['waiting_max']} max, KV blocks used {tl['kv_blocks_used_max']}"
                     f"{kv} at most, {tl['prefill_steps']} of {tl['steps']} steps carried prefill")
    for note in result.notes:
        lines.append(f"  note: {note}")
    if csv:
        lines.append(f"  per-request rows written to {csv}")
    return "\n".join(lines)
