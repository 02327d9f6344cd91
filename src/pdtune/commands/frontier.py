"""``pdtune frontier``: the upper envelope of benchmark results, and the best point under an SLA."""

from __future__ import annotations

import argparse
import math
from typing import Any

import pandas as pd

from pdtune.commands._common import emit_json, fraction, non_negative_float, shared_flag
from pdtune.frontier import GateResult, SlaPick, accuracy_gate, sla_pick, upper_envelope
from pdtune.io import plain
from pdtune.results import load_results

# What each axis divides by, said once for the table header and the JSON.
TPS_PER_GPU = "total tok/s per GPU (all GPUs)"
TPS_PER_USER = "output tok/s per user (1000 / TPOT p50)"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "frontier",
        help="upper envelope (Pareto frontier) of benchmark results, with the deployment behind each point",
        description=(
            "Loads results like `pdtune results`, keeps the points no other point beats on both total tokens/s "
            "per GPU and output tokens/s per user, and names the deployment and concurrency of each. "
            "With a floor, prints the best point that meets it."
        ),
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="result files or folders")
    shared_flag(p, "--gpus")
    p.add_argument("--min-tps-per-user", type=non_negative_float, metavar="X",
                   help="SLA: the most tok/s per GPU with at least X tok/s per user")
    p.add_argument("--min-tps-per-gpu", type=non_negative_float, metavar="Y",
                   help="SLA: the most tok/s per user with at least Y tok/s per GPU")
    p.add_argument("--accuracy-threshold", type=fraction, metavar="A",
                   help="drop deployments whose accuracy is below A, a fraction (the article: GSM8K 0.95)")
    shared_flag(p, "--json")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    results = load_results(args.paths, gpus=args.gpus)
    gate = accuracy_gate(results, args.accuracy_threshold) if args.accuracy_threshold is not None else None
    kept = gate.kept if gate is not None else results
    envelope = upper_envelope(kept)
    picks = []
    if args.min_tps_per_user is not None:
        picks.append(sla_pick(kept, min_tps_per_user=args.min_tps_per_user))
    if args.min_tps_per_gpu is not None:
        picks.append(sla_pick(kept, min_tps_per_gpu=args.min_tps_per_gpu))
    if args.json:
        emit_json(_as_json(results, kept, envelope, gate, picks))
    else:
        print(_as_text(kept, envelope, gate, picks))
    return 0


def _workload(df: pd.DataFrame) -> str:
    pairs = df[["isl", "osl"]].dropna().drop_duplicates() if {"isl", "osl"} <= set(df.columns) else pd.DataFrame()
    if len(pairs) != 1:
        return "ISL/OSL not recorded"
    isl, osl = pairs.iloc[0]
    return f"ISL/OSL {int(isl)}/{int(osl)}"


def _concurrency(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return str(int(value)) if float(value).is_integer() else f"{float(value):.1f}"


def _as_text(kept: pd.DataFrame, envelope: pd.DataFrame, gate: GateResult | None, picks: list[SlaPick]) -> str:
    lines = []
    if gate is not None:
        lines.append(f"Accuracy gate {gate.threshold:g}:")
        for row in gate.excluded.itertuples(index=False):
            lines.append(f"  excluded {row.deployment} (accuracy {row.accuracy:.3f}, {row.rows} points)")
        for label in gate.unmeasured:
            lines.append(f"  kept without an accuracy recorded: {label}")
        if gate.excluded.empty and not gate.unmeasured:
            lines.append("  every deployment passes")
        lines.append("")
    n_deployments = envelope["deployment"].nunique() if len(envelope) else 0
    lines.append(f"Upper envelope, {_workload(kept)}: {len(envelope)} of {len(kept)} points, "
                 f"from {n_deployments} deployment(s)")
    modeled = "modeled" in envelope.columns and bool(envelope["modeled"].fillna(False).astype(bool).any())
    rows = [("deployment", "concurrency", TPS_PER_GPU, TPS_PER_USER)]
    for r in envelope.itertuples(index=False):
        mark = " (modeled)" if modeled and bool(getattr(r, "modeled", False)) else ""
        rows.append((f"{r.deployment}{mark}", _concurrency(r.concurrency), f"{r.tps_per_gpu:.1f}",
                     f"{r.tps_per_user:.1f}"))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        lines.append(f"  {row[0]:<{widths[0]}}  " + "  ".join(f"{c:>{w}}" for c, w in zip(row[1:], widths[1:])))
    if modeled:
        lines.append("  (modeled): predicted, not measured")
    for pick in picks:
        lines.append("")
        lines.append(_pick_text(pick))
    return "\n".join(lines)


def _pick_text(pick: SlaPick) -> str:
    unit = {"tps_per_user": "tok/s per user", "tps_per_gpu": "tok/s per GPU"}
    floor = f"SLA >= {pick.minimum:g} {unit[pick.constraint]}"
    if not pick.met:
        return f"{floor}: no point meets it (the best reaches {pick.best_available:.1f} {unit[pick.constraint]})"
    modeled = " (modeled)" if pick.modeled else ""
    return (f"{floor}: {pick.deployment}{modeled} at concurrency {_concurrency(pick.concurrency)}: "
            f"{pick.tps_per_gpu:.1f} tok/s per GPU, {pick.tps_per_user:.1f} tok/s per user "
            f"({pick.candidates} points meet the floor)")


def _as_json(results: pd.DataFrame, kept: pd.DataFrame, envelope: pd.DataFrame, gate: GateResult | None,
             picks: list[SlaPick]) -> dict[str, Any]:
    columns = ["deployment", "concurrency", "tps_per_gpu", "tps_per_user", "modeled", "source", "path"]
    points = []
    for record in envelope[[c for c in columns if c in envelope.columns]].to_dict("records"):
        points.append({k: plain(v) for k, v in record.items()})
    return {
        "axes": {"tps_per_gpu": TPS_PER_GPU, "tps_per_user": TPS_PER_USER},
        "workload": _workload(kept),
        "points_loaded": len(results),
        "points_considered": len(kept),
        "accuracy_gate": gate.to_dict() if gate is not None else None,
        "envelope": points,
        "sla": [pick.to_dict() for pick in picks],
    }
