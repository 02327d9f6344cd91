"""``pdtune plan``: what to deploy on N GPUs for an SLA, with the KV transfer in TTFT."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from pdtune.commands._common import (
    MAX_LIST,
    draft_and_dcp_flags,
    emit_json,
    non_negative_float,
    shared_flag,
    whole_flag,
)
from pdtune.errors import InputError, brief
from pdtune.switches import env_from_args
from pdtune.limits import MAX_GPUS, MAX_SPECULATIVE_TOKENS, MAX_TOKENS_PER_STEP
from pdtune.perfmodel import DEFAULT_ACCEPTANCE
from pdtune.plan import (
    PLAN_VLLM,
    Plan,
    PlanSettings,
    ceil_to,
    comparison_sentence,
    floor_to,
    picks_sentence,
    plan,
    sla_list,
)
from pdtune.plan.evaluate import LATENCY_NOTE, SIMULATED, SIMULATED_NOTE, SimProgress
from pdtune.topology import layout_notation

EPILOG = """\
Rows built on modeled sweeps are MODELED (pdtune.perfmodel, a roofline model), not measured; pass your own
isolated sweeps with --prefill-results/--decode-results (any format `pdtune results` reads) to plan from them.
The table holds aggregated rows (replicas of one vllm serve server on the same budget) beside the disaggregated
xPyD rows, and says for each SLA which serving mode wins and by how much (--no-aggregated leaves them out).
tok/s/GPU = total (input + output) tokens/s over all GPUs; tok/s/user = 1000 / TPOT; TTFT includes the KV
transfer from the prefill to the decode engine (NVLink inside one NVLink domain, else the scale-out network).
Numbers are rounded the way they are compared: tok/s/user down (19.98 reads 19.9 against >= 20), TTFT and TPOT
up. Latencies come from the steady-state model by default (column latency_model): no queueing spread, so TTFT
p90 = p99 = the median, and TPOT p90 = p99 = the median x the measured p99/median ratio of the bundled
InferenceX points (or --tpot-p90-factor), or a measured decode sweep's p99; the plan prints which. With
--latency-model simulated every reported row and SLA check comes from pdtune.sim (vLLM 0.33's scheduler stepped
on the same costs: queueing, TTFT and TPOT tails), the search still ranked by the steady-state model; large
rows are simulated one per CPU in worker processes (PDTUNE_JOBS=N sets how many, 1 keeps one process).
Without an SLA the plan picks for 20, 50, 100 and 150 tokens/s per user; with one, nothing meeting it is an error.
A pick keeps its TTFT under a ceiling when any row meeting the SLA does: by default 4x the ISL-token prompt's
own TTFT alone on the fastest engine, at least 1 s (--ttft-ceiling-ms sets it); a pick above it is a warning.
Factors: --calibration CAL (from `pdtune calibrate`, one per pool GPU) or each GPU's defaults
(data/perfmodel/defaults.csv); the KV transfer runs at the lower pool's link factor.

Layout notation:
{notation}

Examples:
  pdtune plan deepseek-v3 --gpu gb200 --max-gpus 72 --isl 8192 --osl 1024 --min-tps-per-user 20 --json
  pdtune plan gpt-oss-120b --gpu h200 --max-gpus 8 --isl 1024 --osl 1024 --min-tps-per-user 50
  pdtune plan qwen3-next-80b-a3b --gpu b200 --decode-gpu h200 --max-gpus 32 --isl 8192 --osl 1024 \\
      --max-ttft-ms 500 --recipes recipes/
""".format(notation="\n".join("  " + line for line in layout_notation(108).splitlines()))


def _floats(text: str) -> list[float]:
    parts = [part for part in text.split(",") if part.strip()]
    if len(parts) > MAX_LIST:
        raise argparse.ArgumentTypeError(f"{len(parts):,} values are more than the {MAX_LIST:,} pdtune accepts")
    try:
        values = [non_negative_float(part) for part in parts]
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {brief(text)}") from None
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive numbers, got {brief(text)}")
    return values


def _names(text: str) -> tuple[str, ...]:
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    if not names:
        raise argparse.ArgumentTypeError("expected comma-separated topologies such as TEP8,TP4DP2+EP")
    if len(names) > MAX_LIST:
        raise argparse.ArgumentTypeError(f"{len(names):,} topologies are more than the {MAX_LIST:,} pdtune accepts")
    return names


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "plan",
        help="search topologies and xPyD for a GPU budget and an SLA (KV transfer in TTFT)",
        description="What to deploy on at most N GPUs: the frontier of rate-matched disaggregated deployments "
                    "and the pick for each SLA.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    shared_flag(p, "model")
    shared_flag(p, "--weights")
    p.add_argument("--gpu", required=True,
                   help="GPU of the prefill pool, and of decode (data/gpus/gpus.csv lists them)")
    p.add_argument("--decode-gpu", metavar="GPU", help="GPU of the decode pool, if another kind (a mixed pool)")
    p.add_argument("--max-gpus", type=whole_flag(MAX_GPUS, "GPUs"), required=True, metavar="N",
                   help="GPU budget, both pools (below the smallest prefill/decode pair: aggregated servers only)")
    shared_flag(p, "--isl", required=True)
    shared_flag(p, "--osl", required=True)
    p.add_argument("--min-tps-per-user", type=_floats, metavar="X[,X...]",
                   help="interactivity floor(s), tokens/s per user (one pick per floor)")
    p.add_argument("--max-ttft-ms", type=non_negative_float, metavar="T", help="TTFT limit, ms (median)")
    p.add_argument("--ttft-ceiling-ms", type=non_negative_float, metavar="T",
                   help="TTFT a pick should stay under when a row meeting its SLA does (default: 4x the prompt's "
                        "own TTFT alone on the fastest engine, at least 1000 ms); a pick above it is a warning")
    shared_flag(p, "--latency-model",
                help="what evaluates every reported row and SLA check: the steady-state model (default, seconds) "
                     "or the scheduler simulation pdtune.sim (queueing and tails; tens of seconds of CPU a row "
                     "at thousands of requests in flight)")
    p.add_argument("--no-aggregated", action="store_true",
                   help="leave out the aggregated rows (replicas of one vllm serve server on the same budget)")
    p.add_argument("--max-tpot-ms-p90", type=non_negative_float, metavar="P",
                   help="TPOT p90 limit, ms: checked against a measured decode sweep's p99 TPOT where given, else "
                        "the modeled TPOT x --tpot-p90-factor (the plan prints the basis)")
    p.add_argument("--tpot-p90-factor", type=non_negative_float, metavar="F",
                   help="TPOT p90 / modeled TPOT (default: the median p99/median TPOT of the measured InferenceX "
                        "disaggregated points in data/clusters/inferencex-gb200-dsr1)")
    p.add_argument("--calibration", nargs="+", default=[], metavar="CAL.yaml",
                   help="factors from `pdtune calibrate`, one file per pool GPU (the file names its GPU; a mixed "
                        "pool takes two); default: each GPU's defaults (data/perfmodel/defaults.csv)")
    draft_and_dcp_flags(p, engines="both pools (and the KV transfer; it replaces the MTP candidates)")
    p.add_argument("--prefill-results", nargs="+", metavar="PATH", help="measured prefill-only sweeps (ISL/2)")
    p.add_argument("--decode-results", nargs="+", metavar="PATH", help="measured decode-only sweeps")
    p.add_argument("--prefill-topologies", type=_names, metavar="T1,T2",
                   help="restrict the prefill layouts (and the aggregated servers to both lists' layouts)")
    p.add_argument("--decode-topologies", type=_names, metavar="T1,T2",
                   help="restrict the decode layouts (and the aggregated servers to both lists' layouts)")
    p.add_argument("--mtp", type=whole_flag(MAX_SPECULATIVE_TOKENS, "draft tokens", minimum=0), default=3, metavar="K",
                   help="MTP draft tokens for decode candidates when the model has MTP (default 3; 0 = none)")
    p.add_argument("--acceptance", type=non_negative_float, default=DEFAULT_ACCEPTANCE, metavar="A",
                   help=f"MTP draft acceptance rate (default {DEFAULT_ACCEPTANCE})")
    shared_flag(p, "--kv-cache-dtype", default="fp8", help="KV cache dtype (default fp8)")
    shared_flag(p, "--gpu-memory-utilization", default=0.92,
                help="fraction of each GPU's memory vLLM may take for weights, activations, CUDA graphs and the "
                     "KV cache (vLLM's --gpu-memory-utilization; default 0.92, vLLM's own)")
    p.add_argument("--max-num-batched-tokens", type=whole_flag(MAX_TOKENS_PER_STEP, "tokens per step"), default=8192,
                   help="per DP rank (default 8192)")
    shared_flag(p, "--vllm", default=PLAN_VLLM,
                help=f"vLLM line of the state accounting (default {PLAN_VLLM}, the recipes' version)")
    shared_flag(p, "--vllm-env")
    p.add_argument("--recipes", metavar="DIR", help="also write srt-slurm recipes of every pick into DIR")
    p.add_argument("--model-path", metavar="PATH", help="model path the recipes name (default: the model name)")
    shared_flag(p, "--json", help="machine-readable output (what `pdtune recipe` reads)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    for name in ("max_ttft_ms", "max_tpot_ms_p90", "ttft_ceiling_ms"):
        if getattr(args, name) is not None and getattr(args, name) <= 0:
            raise InputError(f"--{name.replace('_', '-')}", name, "must be positive")
    if not 0 <= args.acceptance <= 1:
        raise InputError("--acceptance", "acceptance", f"must be in [0, 1], got {args.acceptance}")
    if args.recipes:  # a folder that cannot be written is refused before the search, not after it
        from pdtune.io import output_folder

        output_folder(args.recipes, "--recipes")
    settings = PlanSettings(
        model=args.model, gpu=args.gpu, decode_gpu=args.decode_gpu, max_gpus=args.max_gpus, isl=args.isl,
        osl=args.osl, mtp_tokens=args.mtp, acceptance=args.acceptance, kv_cache_dtype=args.kv_cache_dtype,
        vllm=args.vllm, gpu_memory_utilization=args.gpu_memory_utilization,
        max_num_batched_tokens=args.max_num_batched_tokens, prefill_topologies=args.prefill_topologies,
        decode_topologies=args.decode_topologies, calibration=tuple(args.calibration),
        speculative_model=args.speculative_model, num_speculative_tokens=args.num_speculative_tokens,
        decode_context_parallel_size=args.decode_context_parallel_size, tpot_p90_factor=args.tpot_p90_factor,
        vllm_env=env_from_args(args, args.vllm).given,
        aggregated=not args.no_aggregated, ttft_ceiling_ms=args.ttft_ceiling_ms, latency_model=args.latency_model,
        weights=args.weights or "",
    )
    slas = sla_list(args.min_tps_per_user, args.max_ttft_ms, args.max_tpot_ms_p90)
    # A simulated plan takes minutes: on a terminal, a status line on stderr says how far it is.
    progress = SimProgress(sys.stderr) if args.latency_model == "simulated" and sys.stderr.isatty() else None
    try:
        result = plan(settings, slas, prefill_results=args.prefill_results, decode_results=args.decode_results,
                      require_sla=True, progress=progress)
    finally:
        if progress is not None:
            progress.close()
    data = result.to_dict()
    written: list[str] = []
    if args.recipes:
        from pdtune.recipe import write_recipes

        rows = sorted({pick.row for pick in result.picks if pick.row is not None})
        paths = write_recipes(data, rows, args.recipes, model_path=args.model_path, source="pdtune plan --recipes",
                              field="--recipes")
        written = [str(p) for p in paths]
        data["recipes"] = written
    if args.json:
        emit_json(data)
    else:
        print(render(result, written))
    return 0


def render(result: Plan, written: list[str] | None = None) -> str:
    from pdtune.gpus import gpu_count

    s = result.settings
    c = result.counts
    pools = s.gpu if not s.mixed else f"prefill on {s.gpu}, decode on {s.decode_gpu_name}"
    origin = ("MODELED (pdtune.perfmodel roofline predictions, rate-matched; not measurements)" if result.modeled
              else "from measured isolated sweeps")
    agg = (f"; {c['aggregated_candidates']} aggregated server layouts ({c['aggregated_rows']:,} rows, "
           f"{c['aggregated_rejected']} layouts rejected, {c['aggregated_points_above_kv_room']:,} points beyond "
           "their KV room dropped)") if s.aggregated else "; aggregated rows left out"
    lines = [
        f"Plan {origin}: {result.spec.name}, {pools}, at most {gpu_count(s.max_gpus)}, ISL/OSL {s.isl}/{s.osl}",
        f"  searched {c['prefill_candidates']} prefill and {c['decode_candidates']} decode sweeps "
        f"({c['rejected']} layouts rejected: heads, experts, memory or the budget; {c['pruned']} beaten by another "
        f"of the same size){agg}; {c['feasible_rows']:,} disaggregated deployments fit the budget"
        + (f" ({result.no_disagg})" if result.no_disagg else ""),
        f"  dropped: {c['decode_points_above_kv_room']:,} decode points beyond their KV room, "
        f"{c['rows_over_kv_room_after_block_size']:,} rows over KV room once --block-size grows the block, "
        f"{c['rows_link_saturated']:,} rows whose KV stream exceeds the link",
        f"  {c['rows_network_charged']:,} rows put a TP/EP group over more than one NVLink domain "
        f"(collectives charged at the NIC's bandwidth); {c['frontier_rows_network_charged']} of them on the "
        "frontier",
        "  factors: " + _factors(result),
        f"  latencies ({result.latency_model}): {SIMULATED_NOTE if result.latency_model == SIMULATED else LATENCY_NOTE}",
    ]
    if result.ceiling is not None:
        lines.append(f"  TTFT ceiling {result.ceiling.ms:,.0f} ms ({result.ceiling.source})")
    if any(p.sla.max_tpot_ms_p90 is not None for p in result.picks) and result.tpot_p90 is not None:
        lines.append(f"  TPOT p90 (for the p90 limit): {result.tpot_p90.basis}; rows built on a measured decode "
                     "sweep with a p99 TPOT use that p99")
    extras = result.state_extras()
    if extras is not None:
        lines.append(f"  {_extras(extras)}")
    slas = [p.sla for p in result.picks]
    lines += ["", "SLAs (the SLA column, in this order): " + "; ".join(
        f"{k + 1}. {sla.describe()}" for k, sla in enumerate(slas))]
    lines += [
        "",
        "Table: the frontier (upper envelope) of aggregated and disaggregated rows, each pick, its runner-up and "
        "the best of each mode (* = below another row of the table in both tokens/s per user and per GPU, as "
        f"{result.latency_model} gives them). tok/s/GPU: total tokens/s over all GPUs; tok/s/user: "
        "1000 / TPOT (rounded down); TTFT (with the KV transfer) and TPOT p90 rounded up; SLA: y/n per SLA; "
        "from: prefill/decode sweeps, M = modeled, X = measured",
        f"  {'row':>3}  {'mode':<6} {'deployment':<30} {'GPUs':>4} {'conc':>5} {'tok/s/GPU':>9} "
        f"{'tok/s/user':>10} {'TTFT ms':>8} {'TPOT p90':>8} {'KV ms':>6} {'link':<9} {'SLA':<{max(3, 2 * len(slas) - 1)}} "
        f"{'from':<4} notes",
    ]
    for r in result.table.to_dict("records"):
        notes = []
        if r["network_charged"]:
            notes.append("TP/EP group over the network")
        if r.get("block_size_to_set") is not None and not _missing(r["block_size_to_set"]):
            notes.append(f"--block-size {int(r['block_size_to_set'])}")
        if not r["within_ttft_ceiling"]:
            notes.append("TTFT above the ceiling")
        if r["picked_for"]:
            notes.append(f"pick: {r['picked_for']}")
        mark = " " if r["on_frontier"] else "*"
        origin = "/".join("M" if str(r[k]).startswith("modeled") else "X" for k in ("prefill_source", "decode_source"))
        sla = "/".join("y" if ok else "n" for ok in r["meets_sla"])
        kv = f"{r['kv_transfer_ms']:>6.2f}" if r["mode"] == "disagg" else f"{'-':>6}"
        link = r["kv_link"] if r["mode"] == "disagg" else "-"
        lines.append(
            f" {mark}{r['row']:>3}  {r['mode']:<6} {r['deployment']:<30} {r['gpus_total']:>4} {r['concurrency']:>5} "
            f"{r['tps_per_gpu']:>9,.0f} {floor_to(r['tps_per_user'], 1):>10.1f} {ceil_to(r['ttft_ms_p50']):>8,.0f} "
            f"{ceil_to(r['tpot_ms_p90'], 1):>8.1f} {kv} {link:<9} {sla:<{max(3, 2 * len(slas) - 1)}} {origin:<4} "
            f"{'; '.join(notes)}")
    lines += ["", "Picks:"]
    lines += [f"  {picks_sentence(result, pick)}" for pick in result.picks]
    lines += ["", "Aggregated or disaggregated:"]
    lines += [f"  {comparison_sentence(result, pick)}" for pick in result.picks]
    warnings = result.warnings()
    if warnings:
        lines += [""] + warnings
    lines += ["", _ends(result)]
    if written:
        lines += ["", f"Recipes written ({len(written)} files):"] + [f"  {w}" for w in written]
    return "\n".join(lines)


def _factors(result: Plan) -> str:
    """Where each pool's performance-model factors come from."""
    f = result.factors
    link = min(x.efficiency.link for x in f.values())
    where = (f"{f['prefill'].source}, both pools" if f["prefill"].source == f["decode"].source
             else f"prefill {f['prefill'].source}; decode {f['decode'].source}")
    return f"{where}; KV transfer at {link:.0%} of the link's bandwidth (the lower pool's link factor)"


def _extras(extras: dict[str, Any]) -> str:
    parts = []
    if extras["speculative_model"]:
        parts.append(f"draft {extras['speculative_model']} ({extras['speculative_method']}, "
                     f"{extras['num_speculative_tokens']} tokens)")
    if extras["decode_context_parallel_size"] > 1:
        parts.append(f"decode context parallel size {extras['decode_context_parallel_size']}")
    return f"{' and '.join(parts)}: affects {extras['affects']}"


def _missing(value: Any) -> bool:
    try:
        return bool(value != value) or value is None
    except TypeError:
        return True


def _ends(result: Plan) -> str:
    from pdtune import article

    ends = result.ends()
    top, fast = ends["throughput"], ends["latency"]
    text = (f"Frontier ends: {top['tps_per_gpu']:,.0f} total tokens/s per GPU ({top['deployment']}, concurrency "
            f"{top['concurrency']}); {floor_to(fast['tps_per_user'], 1):.1f} tokens/s per user ({fast['deployment']}, "
            f"concurrency {fast['concurrency']})")
    if result.spec.name == article.MODEL:
        c = article.constants()
        text += (f"\n  the article (measured on GB300, its own 7 configurations): "
                 f"{c['headline_tps_per_gpu']:,.0f} tokens/s per GPU and {c['headline_tps_per_user']:,.0f} "
                 f"tokens/s per user; this plan: {top['tps_per_gpu'] / c['headline_tps_per_gpu']:.2f}x and "
                 f"{fast['tps_per_user'] / c['headline_tps_per_user']:.2f}x of them")
    return text
