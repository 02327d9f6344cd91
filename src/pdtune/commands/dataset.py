"""``pdtune dataset``: write the modeled default dataset, and check the model against InferenceX."""

from __future__ import annotations

import argparse
import sys

from pdtune.commands._common import emit_json, shared_flag
from pdtune.dataset import (
    DEFAULT_DATASET,
    PARAMS_KEYS,
    DatasetSpec,
    generate_dataset,
    generated_files,
    read_params,
    spec_from_params,
)
from pdtune.errors import InputError

EPILOG = f"""\
generate   writes the article's prefill, decode and disaggregated sweeps as predicted by pdtune.perfmodel,
           in srt-slurm's result-tree layout (every file marked "modeled": true). Without --out it
           regenerates the committed copy, data/clusters/{DEFAULT_DATASET}/ (its README is kept).
inferencex predicts InferenceX's nine measured GB200 DeepSeek-R1 points (data/clusters/inferencex-gb200-dsr1/)
           with the same calibration and prints the error of each; nothing is fitted to them.
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "dataset",
        help="generate the modeled default dataset; check the model against InferenceX measurements",
        description="The modeled default dataset of the book, and the model's check against measurements.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION", parser_class=type(p))
    actions.required = True
    gen = actions.add_parser("generate", help="write the modeled dataset (srt-slurm layout)")
    shared_flag(gen, "--out", help=f"output folder (default data/clusters/{DEFAULT_DATASET})")
    gen.add_argument("--params", metavar="PARAMS.yaml",
                     help="model, GPU, topologies, deployments and workloads to model (default: the article's); "
                          f"keys: {', '.join(PARAMS_KEYS)}")
    shared_flag(gen, "--model", help="the model to model (overrides the parameters file)")
    gen.add_argument("--gpu", help="bundled GPU (overrides the parameters file)")
    gen.add_argument("--prefill-topologies", metavar="T1,T2", help="prefill-only layouts, e.g. TP4DP2+EP,TEP8")
    gen.add_argument("--decode-topologies", metavar="T1,T2", help="decode-only layouts (each with and without MTP)")
    gen.add_argument("--disagg", metavar="D1,D2", help="deployments, e.g. 1xTP2:1xTEP8+MTP,2xTP2:1xTP4")
    gen.add_argument("--concurrency", metavar="C1,C2", help="concurrencies of every sweep")
    gen.add_argument("--calibration", metavar="CAL",
                     help="predict with a calibration file's factors (from `pdtune calibrate`; needs --out)")
    gen.set_defaults(func=run_generate)
    chk = actions.add_parser(
        "inferencex", help="predicted vs measured for InferenceX's GB200 DeepSeek-R1 points"
    )
    fmt = chk.add_mutually_exclusive_group()
    shared_flag(fmt, "--json")
    shared_flag(fmt, "--csv")
    chk.set_defaults(func=run_inferencex)


def run_generate(args: argparse.Namespace) -> int:
    spec = None
    flags = {"model": args.model, "gpu": args.gpu, "prefill_topologies": _split(args.prefill_topologies),
             "decode_topologies": _split(args.decode_topologies), "disagg_configs": _split(args.disagg),
             "concurrencies": [_int(c) for c in _split(args.concurrency) or []] or None}
    given = {k: v for k, v in flags.items() if v}
    if args.params or given:
        if args.out is None:
            raise InputError("--out", "out", "a dataset of other parameters needs its own --out folder")
        params = read_params(args.params) if args.params else {}
        spec = spec_from_params({**params, **given}, args.params or "flags")
    if args.calibration:
        from dataclasses import replace

        from pdtune.perfmodel.calibrate import load_calibration

        if args.out is None:
            raise InputError("--out", "out", f"--calibration writes a new dataset: give --out (data/clusters/"
                                             f"{DEFAULT_DATASET} is the article's)")
        spec = spec or DatasetSpec()
        cal = load_calibration(args.calibration, model=spec.model, gpu=spec.gpu)
        spec = replace(spec, efficiency=cal.efficiency)
    target = generate_dataset(args.out, spec)
    print(f"wrote {len(generated_files(target))} modeled files to {target}")
    return 0


def _split(text: str | None) -> list[str] | None:
    return [part.strip() for part in text.split(",") if part.strip()] if text else None


def _int(text: str) -> int | str:
    # a non-number (and "²", which isdigit() calls a digit) is reported by spec_from_params
    return int(text) if text.isascii() and text.isdigit() and len(text) < 4000 else text


def run_inferencex(args: argparse.Namespace) -> int:
    from pdtune.perfmodel.inferencex import inferencex_check

    table = inferencex_check()
    if args.json:
        emit_json({"modeled_vs_measured": table.to_dict(orient="records")})
    elif args.csv:
        table.to_csv(sys.stdout, index=False)
    else:
        cols = [
            "concurrency",
            "deployment",
            "measured_tps_per_gpu",
            "predicted_tps_per_gpu",
            "tps_per_gpu_error",
            "measured_tps_per_user",
            "predicted_tps_per_user",
            "tps_per_user_error",
        ]
        print(
            "Predicted (modeled) vs measured, InferenceX GB200 DeepSeek-R1-0528, ISL/OSL 1024/1024; "
            "error = predicted / measured - 1"
        )
        print(table[cols].to_string(index=False, float_format=lambda x: f"{x:,.3f}"))
    return 0
