"""``pdtune dataset``: write the modeled default dataset, and check the model against InferenceX."""

from __future__ import annotations

import argparse
import sys

from pdtune.commands._common import emit_json
from pdtune.dataset import DEFAULT_DATASET, DatasetSpec, generate_dataset, generated_files
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
    gen.add_argument("--out", metavar="DIR", help=f"output folder (default data/clusters/{DEFAULT_DATASET})")
    gen.add_argument("--calibration", metavar="CAL",
                     help="predict with a calibration file's factors (from `pdtune calibrate`; needs --out)")
    gen.set_defaults(func=run_generate)
    chk = actions.add_parser(
        "inferencex", help="predicted vs measured for InferenceX's GB200 DeepSeek-R1 points"
    )
    fmt = chk.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true")
    fmt.add_argument("--csv", action="store_true")
    chk.set_defaults(func=run_inferencex)


def run_generate(args: argparse.Namespace) -> int:
    spec = DatasetSpec()
    if args.calibration:
        from dataclasses import replace

        from pdtune.perfmodel.calibrate import load_calibration

        if not args.out:
            raise InputError("--out", "out", f"--calibration writes a new dataset: give --out (data/clusters/"
                                             f"{DEFAULT_DATASET} is the article's)")
        cal = load_calibration(args.calibration, model=spec.model, gpu=spec.gpu)
        spec = replace(spec, efficiency=cal.efficiency)
    target = generate_dataset(args.out, spec)
    print(f"wrote {len(generated_files(target))} modeled files to {target}")
    return 0


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
