"""``pdtune results``: benchmark outputs of any supported tool as one tidy table."""

from __future__ import annotations

import argparse
import json
import math
import sys

import pandas as pd

from pdtune.commands._common import shared_flag
from pdtune.io import atomic_write_text
from pdtune.results import SIDECAR_NAME, TIDY_COLUMNS, load_results
from pdtune.results.schema import EXTRA_COLUMNS

#: What the plain-text view shows; --csv and --json carry every column.
_SUMMARY = (
    "source", "model", "mode", "isl", "osl", "concurrency", "gpus_prefill", "gpus_decode", "gpus_total",
    "tpot_ms_p50", "tps_per_user", "tps_per_gpu", "output_tps_per_decode_gpu", "modeled",
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "results",
        help="load AIPerf, vLLM bench, SGLang, srt-slurm, InferenceX or aiconfigurator silicon results into one table",
        description=(
            "Folders are walked and each file's format recognised. tps_per_gpu is total tokens/s over all GPUs, "
            "output_tps_per_decode_gpu output tokens/s over decode GPUs, tps_per_user 1000 / median TPOT. "
            f"GPU counts come from the files, else --gpus or a {SIDECAR_NAME} beside them."
        ),
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="result files or folders")
    shared_flag(p, "--gpus")
    p.add_argument("--single-workload", action="store_true", help="fail unless every row has the same ISL/OSL")
    fmt = p.add_mutually_exclusive_group()
    shared_flag(fmt, "--csv", help="every column, as CSV")
    shared_flag(fmt, "--json", help="every column, as a JSON list of rows")
    p.add_argument("-o", "--out", metavar="FILE", help="write here (whole or not at all) instead of stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    df = load_results(args.paths, gpus=args.gpus, single_workload=args.single_workload)
    if args.csv:
        out = df.to_csv(index=False)
    elif args.json:
        out = json.dumps(records(df), indent=2) + "\n"
    else:
        out = summary(df)
    if args.out:
        atomic_write_text(args.out, out)
        print(f"{len(df)} rows -> {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(out)
    return 0


def records(df: pd.DataFrame) -> list[dict[str, object]]:
    """Rows as JSON-ready dicts: NaN becomes null, numpy scalars plain numbers (the tidy columns, then any
    extra columns a format adds: backend, GPU, quantization, provenance)."""
    rows = []
    columns = [*TIDY_COLUMNS, *(c for c in EXTRA_COLUMNS if c in df.columns)]
    for rec in df[columns].to_dict("records"):
        clean: dict[str, object] = {}
        for key, value in rec.items():
            if hasattr(value, "item"):
                value = value.item()
            if isinstance(value, float) and math.isnan(value):
                value = None
            clean[str(key)] = value
        rows.append(clean)
    return rows


def summary(df: pd.DataFrame) -> str:
    view = df[list(_SUMMARY)].copy()
    for col in ("isl", "osl"):
        view[col] = view[col].map(lambda v: "" if pd.isna(v) else str(int(v)))
    text = view.to_string(index=False, float_format=lambda v: f"{v:,.2f}", na_rep="")
    note = ("tps_per_gpu: total tok/s / all GPUs; output_tps_per_decode_gpu: output tok/s / decode GPUs; "
            "tps_per_user: 1000 / median TPOT")
    return f"{text}\n{len(df)} rows. {note}\n"
