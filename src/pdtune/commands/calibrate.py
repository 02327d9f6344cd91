"""``pdtune calibrate``: fit the model's global factors on some measured deployments, score the others."""

from __future__ import annotations

import argparse
import sys

from pdtune.commands._common import emit_json, fraction_or_zero, shared_flag
from pdtune.commands.validate import add_selection_arguments, load_selection
from pdtune.io import output_file
from pdtune.perfmodel.calibrate import calibrate, write_calibration
from pdtune.perfmodel.validation import METRICS

EPILOG = """\
Whole deployments (one layout and weight precision, every concurrency and ISL/OSL of it) are held out, never single
points: about --holdout of them (at least one when there are two), chosen by a stable hash of their names. The
factors are fitted on the others only, starting from the GPU's defaults; the held-out error is of exactly the factors
written. `pdtune predict`, `pdtune validate` and `pdtune dataset generate` accept the file with --calibration
(validate never scores the deployments it was fitted on).
Example:
  pdtune calibrate data/clusters/aiconfigurator-silicon --model gpt-oss-120b --gpu h200 --out gpt-oss-h200.yaml
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "calibrate",
        help="fit the performance model's factors on measured sweeps, holding out whole deployments",
        description="Fit the model's global factors on measured rows of MODEL on GPU and write a calibration file.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_selection_arguments(p)
    p.add_argument("--out", required=True, metavar="CAL.yaml", help="the calibration file to write")
    p.add_argument("--holdout", type=fraction_or_zero, default=0.25, metavar="F",
                   help="fraction of the deployments to hold out (default 0.25)")
    shared_flag(p, "--json", help="machine-readable summary")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    output_file(args.out, "--out")  # a path that cannot be written is refused before the fit, not after it
    spec, gpu, selection, name = load_selection(args)
    done = calibrate(selection.rows, spec, gpu, model=name, holdout_fraction=args.holdout, results=args.results)
    cal = done.calibration
    write_calibration(args.out, cal)
    if args.json:
        emit_json({"calibration": args.out, "model": cal.model, "gpu": cal.gpu, "factors": cal.efficiency.to_dict(),
                   "fitted_on": {"deployments": list(cal.fitted_deployments), "rows": cal.fitted_rows},
                   "held_out": {"deployments": list(cal.held_out_deployments), "rows": cal.held_out_rows,
                                **cal.held_out_error},
                   "rows_skipped": selection.skipped})
        return 0
    lines = [f"calibration of {cal.model} on {cal.gpu}: {args.out}",
             f"  fitted on {len(cal.fitted_deployments)} deployments ({cal.fitted_rows} rows), starting from the "
             f"{cal.start} defaults:"]
    lines += [f"    {d}" for d in cal.fitted_deployments]
    lines.append("  factors: " + ", ".join(f"{k}={v:.4g}" for k, v in cal.efficiency.to_dict().items()))
    if cal.held_out_deployments:
        lines.append(f"  held out {len(cal.held_out_deployments)} deployments ({cal.held_out_rows} rows), "
                     "never fitted on:")
        lines += [f"    {d}" for d in cal.held_out_deployments]
        med, p90 = cal.held_out_error["median_abs_pct_error"], cal.held_out_error["p90_abs_pct_error"]
        lines.append("  held-out |error|: " + "; ".join(
            f"{m} median {_num(med[m])} %, p90 {_num(p90[m])} %" for m in METRICS))
    else:
        lines.append("  nothing held out (one deployment): the fit is unscored; measure another layout to score it")
    if done.fit_unpredicted:
        lines.append(f"  {len(done.fit_unpredicted)} rows of the fit set could not be planned and were not fitted on")
    print("\n".join(lines))
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"
