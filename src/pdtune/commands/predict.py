"""``pdtune predict``: modeled throughput, TTFT and TPOT versus concurrency for one deployment."""

from __future__ import annotations

import argparse
from dataclasses import replace

from pdtune.commands._common import (
    draft_and_dcp_flags,
    emit_json,
    gib_flag,
    int_list,
    non_negative_float,
    shared_flag,
    whole_flag,
)
from pdtune import versions
from pdtune.errors import InputError
from pdtune.gpus import load_gpu
from pdtune.limits import MAX_NUM_SEQS, MAX_SPECULATIVE_TOKENS, MAX_TOKENS_PER_STEP
from pdtune.model import load_model
from pdtune.perfmodel import (
    DEFAULT_ACCEPTANCE,
    EngineConfig,
    Prediction,
    build_engine,
    predict_decode,
    predict_disagg,
    predict_prefill,
)
from pdtune.perfmodel.aggregated import agg_plan, agg_prediction, serving_defaults
from pdtune.switches import default_gpu_memory_utilization
from pdtune.perfmodel.calibrate import load_calibration
from pdtune.perfmodel.defaults import gpu_defaults
from pdtune.perfmodel.sweeps import DECODE_ISL, DECODE_OSL, DISAGG_ISL, DISAGG_OSL, PREFILL_ISL, PREFILL_OSL
from pdtune.perfmodel.simulated import HARNESSES, SIMULATED, predict_agg_simulated, predict_disagg_simulated
from pdtune.perfmodel.validation import MEASURED_OVERHEADS_GIB
from pdtune.sim import SimConfig
from pdtune.precision import parse_weights_dtype
from pdtune.topology import Deployment, Topology, is_deployment, parse_deployment, parse_topology
from pdtune.units import GiB

MODES = ("prefill", "decode", "agg", "disagg")
DEFAULT_WORKLOAD = {
    "prefill": (PREFILL_ISL, PREFILL_OSL),
    "decode": (DECODE_ISL, DECODE_OSL),
    "agg": (1024, 1024),
    "disagg": (DISAGG_ISL, DISAGG_OSL),
}

EPILOG = """\
Every number printed is MODELED by a roofline model (pdtune.perfmodel), not measured.
Topologies: TP<n>, DP<n>, PP<n> in any combination with an optional +EP (experts over all TP x DP ranks),
or TEP<n> (= TP<n>+EP); a disaggregated deployment is <x>x<prefill>:<y>x<decode>, e.g. 3xTP2DP4+EP:1xTEP8.
Default workloads follow the article: prefill 8192/2, decode 1/1000, disagg 8192/1024; agg (one server prefilling
and decoding, closed loop) 1024/1024 with vLLM's own serving defaults (max-num-batched-tokens, max-num-seqs,
--gpu-memory-utilization: 0.9 in 0.11, 0.92 from 0.20, KV cache in the model dtype) unless flags say otherwise.
Factors: --calibration CAL (from `pdtune calibrate`) or the GPU's defaults (data/perfmodel/defaults.csv).
Latencies: the steady-state model by default; --latency-model simulated runs each concurrency's benchmark (closed
loop of C clients of --harness, default vllm-bench) in pdtune.sim, vLLM 0.33's scheduler stepped on the same step
costs: medians and p90/p99 of the simulated requests, queues and cohorts included (agg and disagg; prefill- and
decode-only sweeps keep the steady-state model). Each row names its latency model.
Examples:
  pdtune predict gpt-oss-120b --gpu h200 --topology TP2 --mode agg --concurrency 4,16,64
  pdtune predict gpt-oss-120b --gpu h200 --topology TP2 --mode agg --concurrency 4,64 --latency-model simulated
  pdtune predict llama-3.1-70b --gpu h100 --topology TP4 --mode agg --weights fp8
  pdtune predict qwen3.8-2.4t --gpu gb300 --topology TP4DP4+EP --mode decode --concurrency 1,8,64,512
  pdtune predict qwen3.8-2.4t --gpu gb300 --topology TEP8 --mode decode --mtp 3 --acceptance 0.25 --json
  pdtune predict qwen3.8-2.4t --gpu gb300 --topology 4xTP2DP4+EP:1xTP4DP4+EP --concurrency 256,2560
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "predict",
        help="modeled throughput per GPU, TTFT and TPOT versus concurrency (roofline model)",
        description="Predict a concurrency sweep of MODEL served as TOPOLOGY (modeled, not measured).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    shared_flag(p, "model")
    p.add_argument("--gpu", default="gb300", help="bundled GPU (default gb300; data/gpus/gpus.csv lists them)")
    p.add_argument("--topology", required=True, help="e.g. TP4DP2+EP, TEP8, TP1PP6+EP, or 3xTP2DP4+EP:1xTEP8")
    p.add_argument(
        "--mode",
        choices=MODES,
        help="prefill-only, decode-only, aggregated or disaggregated (default: disagg for an x:y topology)",
    )
    p.add_argument(
        "--concurrency",
        type=int_list,
        default=[1, 8, 64, 512],
        metavar="C1,C2,...",
        help="concurrencies to predict (default 1,8,64,512)",
    )
    shared_flag(p, "--isl", help="input tokens per request (default: the mode's article workload)")
    shared_flag(p, "--osl")
    p.add_argument(
        "--mtp",
        type=whole_flag(MAX_SPECULATIVE_TOKENS, "draft tokens", minimum=0),
        default=0,
        metavar="K",
        help="MTP draft tokens on the decode side (default 0)",
    )
    p.add_argument(
        "--acceptance",
        type=non_negative_float,
        default=DEFAULT_ACCEPTANCE,
        metavar="A",
        help=f"draft acceptance rate, accepted/proposed (default {DEFAULT_ACCEPTANCE})",
    )
    p.add_argument(
        "--gpu-memory-gib",
        type=gib_flag,
        metavar="G",
        help="device memory torch reports, in GiB (default: the GPU table's)",
    )
    shared_flag(p, "--gpu-memory-utilization", help="default 0.92 (the article's); agg: vLLM's default for --vllm (0.9 in 0.11, 0.92 from 0.20)")
    shared_flag(p, "--kv-cache-dtype", help="KV cache dtype (default fp8, as the article; agg: auto)")
    shared_flag(p, "--vllm", default=versions.DEFAULT_VLLM,
                help=f"vLLM line whose state accounting and serving defaults apply (default {versions.DEFAULT_VLLM}; "
                     "the article ran 0.26.1)")
    shared_flag(p, "--vllm-env")
    p.add_argument(
        "--max-num-batched-tokens", type=whole_flag(MAX_TOKENS_PER_STEP, "tokens per step"),
        help="per DP rank (default 8192; agg: vLLM's default for the version and GPU)",
    )
    p.add_argument(
        "--max-num-seqs", type=whole_flag(MAX_NUM_SEQS, "sequences per engine"),
        help="running requests per DP rank (default: KV room only)"
    )
    shared_flag(p, "--weights", dest="weights")
    p.add_argument("--weights-dtype", dest="weights", metavar="FMT", help="the same as --weights (its older name)")
    p.add_argument("--calibration", metavar="CAL", help="factors from `pdtune calibrate` (default: the GPU's)")
    draft_and_dcp_flags(p, engines="the engine (both engines of a disaggregated deployment)")
    shared_flag(p, "--latency-model")
    shared_flag(p, "--harness", help="with --latency-model simulated: the benchmark whose clients are simulated "
                "(default vllm-bench: vllm bench serve --max-concurrency C --num-prompts 10C)")
    shared_flag(p, "--json")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.gpu_memory_gib is not None and args.gpu_memory_gib <= 0:
        raise InputError("--gpu-memory-gib", "gpu_memory_gib", "must be positive")
    disagg_name = is_deployment(args.topology)
    # Read the name first: a typo is the likeliest mistake and the most useful message.
    parsed = parse_deployment(args.topology) if disagg_name else parse_topology(args.topology)
    mode = args.mode or ("disagg" if disagg_name else None)
    if mode is None:
        raise InputError("--mode", "mode", "give --mode prefill|decode|agg for a single-engine topology")
    if (mode == "disagg") != disagg_name:
        want = "<x>x<prefill>:<y>x<decode>" if mode == "disagg" else "a single engine such as TEP8"
        raise InputError("--topology", "topology", f"--mode {mode} needs {want}, got {args.topology!r}")
    if not 0 <= args.acceptance <= 1:
        raise InputError("--acceptance", "acceptance", f"must be in [0, 1], got {args.acceptance}")
    if mode in ("prefill", "agg") and args.mtp:
        raise InputError("--mtp", "mtp", f"MTP is not modeled for {mode} sweeps; use decode or disagg")
    if args.speculative_model and args.mtp:
        raise InputError("--speculative-model", "speculative_model",
                         "give --mtp K (the model's own MTP module) or --speculative-model with "
                         "--num-speculative-tokens K, not both")
    if args.num_speculative_tokens and not args.speculative_model:
        raise InputError("--num-speculative-tokens", "num_speculative_tokens",
                         "counts the draft tokens of --speculative-model; for MTP use --mtp K")
    if mode == "prefill" and (args.speculative_model or args.decode_context_parallel_size > 1):
        flag = "--speculative-model" if args.speculative_model else "--decode-context-parallel-size"
        raise InputError(flag, flag.lstrip("-").replace("-", "_"),
                         "sizes a decode (or aggregated) engine's KV room; use --mode decode, agg or disagg")
    simulated = args.latency_model == SIMULATED
    if args.harness is not None and not simulated:
        raise InputError("--harness", "harness", "names the clients --latency-model simulated runs; give both")
    if simulated and mode in ("prefill", "decode"):
        raise InputError("--latency-model", "latency_model",
                         f"a {mode}-only sweep has no simulated harness; use --mode agg or disagg, or steady-state")
    harness = args.harness or "vllm-bench"
    isl, osl = DEFAULT_WORKLOAD[mode]
    isl = args.isl if args.isl is not None else isl
    osl = args.osl if args.osl is not None else osl
    spec = load_model(args.model)
    if args.weights:
        spec = parse_weights_dtype(args.weights, spec)
    gpu = load_gpu(args.gpu, memory_gib=args.gpu_memory_gib)
    if args.calibration:
        cal = load_calibration(args.calibration, model=args.model, gpu=gpu.name)
        eff, eff_source = cal.efficiency, f"calibration {args.calibration}"
    else:
        defaults = gpu_defaults(gpu.name, args.latency_model)
        eff, eff_source = defaults.efficiency, f"{gpu.name} defaults ({defaults.source})"
    config = engine_config(args, mode, gpu)
    # DCP is the decode engine's; a draft joins both engines' caches (NIXL moves its layers' KV too).
    prefill_config = replace(config, decode_context_parallel_size=1)
    engines: dict[str, object] = {}
    if mode == "agg":
        topo = parsed
        assert isinstance(topo, Topology)
        engine = build_engine(spec, gpu, topo, isl=isl, osl=osl, config=config)
        preds = predict_agg_simulated(engine, args.concurrency, isl, osl, eff, harness=harness) if simulated else [
            agg_prediction(engine, agg_plan(engine, c, isl, osl, eff.arrival_clustering), isl, osl, eff)
            for c in args.concurrency
        ]
        engines["agg"] = engine
        label = topo.name
    elif mode == "disagg":
        dep = parsed
        assert isinstance(dep, Deployment)
        engines["prefill"] = build_engine(spec, gpu, dep.prefill, isl=isl, osl=osl, config=prefill_config)
        engines["decode"] = build_engine(
            spec, gpu, dep.decode, isl=isl, osl=osl, mtp_tokens=args.mtp, config=config
        )
        preds = predict_disagg_simulated(
            engines["prefill"], engines["decode"], dep.n_prefill, dep.n_decode, args.concurrency, isl, osl, eff,
            harness=harness, config=SimConfig(acceptance=args.acceptance), label=dep.label,
        ) if simulated else predict_disagg(
            spec,
            gpu,
            dep,
            args.concurrency,
            isl=isl,
            osl=osl,
            mtp_tokens=args.mtp,
            acceptance=args.acceptance,
            prefill_config=prefill_config,
            decode_config=config,
            efficiency=eff,
        )
        label = dep.label
    else:
        topo = parsed
        assert isinstance(topo, Topology)
        if mode == "prefill":
            preds = predict_prefill(spec, gpu, topo, args.concurrency, isl=isl, osl=osl, config=config,
                                    efficiency=eff)
        else:
            preds = predict_decode(
                spec,
                gpu,
                topo,
                args.concurrency,
                isl=isl,
                osl=osl,
                mtp_tokens=args.mtp,
                acceptance=args.acceptance,
                config=config,
                efficiency=eff,
            )
        engines[mode] = build_engine(
            spec, gpu, topo, isl=isl, osl=osl, mtp_tokens=args.mtp if mode == "decode" else 0, config=config
        )
        label = topo.name
    memory = {role: e.memory_summary() for role, e in engines.items()}  # type: ignore[attr-defined]
    if args.json:
        emit_json(
            {
                "modeled": True,
                "model": spec.name,
                "gpu": gpu.name,
                "mode": mode,
                "topology": label,
                "isl": isl,
                "osl": osl,
                "mtp_tokens": args.mtp,
                "acceptance": args.acceptance if args.mtp else None,
                "weights": spec.weights.name,
                "efficiency": eff.to_dict(),
                "efficiency_source": eff_source,
                "latency_model": args.latency_model,
                "harness": harness if simulated else None,
                "speculative_model": config.speculative_model.name if config.speculative_model else None,
                "num_speculative_tokens": config.num_speculative_tokens,
                "decode_context_parallel_size": config.decode_context_parallel_size,
                "kv_room_note": _extras_note(config),
                "engines": memory,
                "predictions": [p.to_dict() for p in preds],
            }
        )
    else:
        print(render(spec.name, gpu.name, mode, label, isl, osl, args.mtp, args.acceptance, memory, preds))
        if simulated:
            print(f"  latencies simulated by pdtune.sim: {HARNESSES[harness].source}")
        print(f"  weights {spec.weights.name}; factors: {eff_source}")
        note = _extras_note(config)
        if note:
            print(f"  {note}")
    return 0


def _extras_note(config: EngineConfig) -> str:
    """What --speculative-model and --decode-context-parallel-size changed, and what they did not."""
    parts = []
    if config.speculative_model is not None:
        parts.append(f"draft {config.speculative_model.name} ({config.num_speculative_tokens} speculative tokens): "
                     "its layers are in the KV room; its draft passes and acceptance are not in the step time")
    if config.decode_context_parallel_size > 1:
        parts.append(f"DCP {config.decode_context_parallel_size}: full-attention tokens shard over the TP group "
                     "in the KV room; the step time does not model DCP's attention all-gather")
    return "; ".join(parts)


def engine_config(args: argparse.Namespace, mode: str, gpu: object) -> EngineConfig:
    """The flags, else the article's settings, else (aggregated serving) vLLM's own defaults."""
    if mode == "agg":
        mnbt, seqs = serving_defaults(args.vllm, gpu)  # type: ignore[arg-type]
        defaults = {"util": default_gpu_memory_utilization(args.vllm), "kv": "auto", "mnbt": mnbt, "seqs": seqs,
                    "overheads": MEASURED_OVERHEADS_GIB}
    else:
        defaults = {"util": 0.92, "kv": "fp8", "mnbt": 8192, "seqs": None, "overheads": None}
    draft = load_model(args.speculative_model) if args.speculative_model else None
    return EngineConfig(
        speculative_model=draft,
        num_speculative_tokens=args.num_speculative_tokens if draft is not None else 0,
        decode_context_parallel_size=args.decode_context_parallel_size,
        gpu_memory_utilization=args.gpu_memory_utilization or defaults["util"],
        kv_cache_dtype=args.kv_cache_dtype or defaults["kv"],
        vllm=args.vllm,
        max_num_batched_tokens=args.max_num_batched_tokens or defaults["mnbt"],
        max_num_seqs=args.max_num_seqs or defaults["seqs"],
        overheads_gib=defaults["overheads"],
    )


def render(
    model: str,
    gpu: str,
    mode: str,
    label: str,
    isl: int,
    osl: int,
    mtp: int,
    acceptance: float,
    memory: dict[str, dict[str, object]],
    preds: list[Prediction],
) -> str:
    mtp_text = f", MTP {mtp} draft tokens at acceptance {acceptance:g}" if mtp else ""
    lines = [
        f"MODELED (roofline prediction, not a measurement): {model} on {gpu}, {mode} {label}, "
        f"ISL/OSL {isl}/{osl}{mtp_text}"
    ]
    for role, m in memory.items():
        lines.append(
            f"  {role} engine: weights {m['weights_gib']:.1f} GiB/GPU, "
            f"KV cache {m['kv_cache_gib']:.1f} GiB/GPU, "
            f"{m['bytes_per_request'] / GiB * 1024:.0f} MiB per request per TP rank, "
            f"room for {m['capacity']} running requests (overheads: {m['overheads_source']})"
        )
    if mode == "disagg":
        lines.append(f"  TTFT includes {preds[0].kv_transfer_ms:.2f} ms of KV transfer per request "
                     "(pdtune.transfer, as pdtune plan charges it)")
    lines.append(
        f"  {'concurrency':>11} {'running':>8} {'tok/s':>10} {'tok/s/GPU':>10} {'tok/s/user':>10} "
        f"{'TTFT ms':>9} {'p99':>9} {'TPOT ms':>8} {'p99':>8}  {'latency':<12} note"
    )
    for p in preds:
        note = "waits for KV room" if p.kv_limited else ""
        lines.append(
            f"  {p.concurrency:>11} {p.running:>8.0f} {p.total_tps:>10.0f} {p.tps_per_gpu:>10.1f} "
            f"{p.tps_per_user:>10.1f} {p.ttft_ms:>9.1f} {p.percentile('ttft', 99):>9.1f} {p.tpot_ms:>8.2f} "
            f"{p.percentile('tpot', 99):>8.2f}  {p.latency_model:<12} {note}"
        )
    lines.append(
        f"  tok/s = total (input + output) tokens/s; per GPU over all {preds[0].gpus_total} GPUs; "
        "per user = 1000 / TPOT"
    )
    return "\n".join(lines)
