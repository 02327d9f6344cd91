"""``pdtune calibrate``: fit the model's global factors on some measured deployments, score the others."""

from __future__ import annotations

import argparse
import sys

from pdtune.commands._common import emit_json, fraction_or_zero, shared_flag
from pdtune.commands.validate import add_selection_arguments, load_selection
from pdtune.io import output_file
from pdtune.perfmodel.calibrate import calibrate, write_calibration
from pdtune.perfmodel.fit import HOLDOUT_BY
from pdtune.perfmodel.validation import METRICS

EPILOG = """\
Whole groups are held out, never single points: by default deployments (one layout and weight precision, every
concurrency and ISL/OSL of it); with --holdout-by isl (or concurrency) every row of one ISL (or concurrency), across
all deployments, so one deployment's sweep can be split too. About --holdout of the groups (at least one when there
are two) are held out, chosen by a stable hash of their names; a measurement repeated under another id counts once.
The factors are fitted on the other groups only, starting from the GPU's defaults; the held-out error is of exactly
the factors written. `pdtune predict`, `pdtune validate` and `pdtune dataset generate` accept the file with
--calibration (validate marks the rows it was fitted on and scores only the held-out groups).
With --latency-model simulated the factors are fitted through the scheduler simulation: every fitted row's
benchmark is run in pdtune.sim with its harness's clients, the factors fitted on those runs, and the runs
repeated at the new factors until no factor moves by 1 % (three rounds at most); the held-out rows are scored by
the simulation too. Minutes where the steady-state fit takes seconds.
Examples:
  pdtune calibrate data/clusters/aiconfigurator-silicon --model gpt-oss-120b --gpu h200 --out gpt-oss-h200.yaml
  pdtune calibrate my-sweep/ --model gpt-oss-120b --gpu h200 --topology TP2 --holdout-by isl --out cal.yaml
  pdtune calibrate my-sweeps/ --model llama-3.1-70b --gpu h100 --latency-model simulated --out cal.yaml
Each factor is pulled towards the GPU's default as it is fitted (a one-sigma move costs what a 7 % error on
every row does), which keeps a few deployments from moving factors they cannot tell apart. A deployment far from
the ones the defaults were fitted on needs --no-prior, and rows enough to place every factor: a whole sweep.
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
                   help="fraction of the groups to hold out (default 0.25)")
    p.add_argument("--holdout-by", choices=HOLDOUT_BY, default="deployment",
                   help="what is held out whole: deployments (default), ISLs or concurrencies")
    shared_flag(p, "--latency-model", help="what the factors are fitted through: steady-state (default; seconds) "
                "or simulated (each fitted row's benchmark run in pdtune.sim, refitted until the factors settle; "
                "minutes) - the held-out rows are scored by the same model")
    p.add_argument("--no-prior", dest="prior", action="store_false",
                   help="place every factor by the rows alone, within its bounds: no pull towards the GPU's "
                   "defaults (for a deployment unlike the ones they were fitted on, with rows enough to place "
                   "each factor)")
    shared_flag(p, "--json", help="machine-readable summary")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    output_file(args.out, "--out")  # a path that cannot be written is refused before the fit, not after it
    spec, gpu, selection, name = load_selection(args)
    done = calibrate(selection.rows, spec, gpu, model=name, holdout_fraction=args.holdout, results=args.results,
                     holdout_by=args.holdout_by, latency_model=args.latency_model, prior=args.prior)
    cal = done.calibration
    write_calibration(args.out, cal)
    if args.json:
        emit_json({"calibration": args.out, "model": cal.model, "gpu": cal.gpu, "factors": cal.efficiency.to_dict(),
                   "holdout_by": cal.holdout_by, "repeats_folded": cal.repeats_folded,
                   "latency_model": cal.latency_model, "prior": cal.prior,
                   "fitted_on": {"deployments": list(cal.fitted_deployments), "groups": list(cal.fitted_groups),
                                 "rows": cal.fitted_rows},
                   "held_out": {"deployments": list(cal.held_out_deployments), "groups": list(cal.held_out_groups),
                                "rows": cal.held_out_rows, **cal.held_out_error},
                   "rows_skipped": selection.skipped})
        return 0
    what = "deployments" if cal.holdout_by == "deployment" else f"{cal.holdout_by} groups"
    lines = [f"calibration of {cal.model} on {cal.gpu}: {args.out}",
             f"  fitted on {len(cal.fitted_groups)} {what} ({cal.fitted_rows} rows), starting from the "
             f"{cal.start} defaults" + ("" if cal.prior else " (no pull towards them)")
             + f", through the {cal.latency_model} model:"]
    lines += [f"    {d}" for d in cal.fitted_groups]
    if cal.repeats_folded:
        lines.append(f"  {cal.repeats_folded} rows repeat another row's measurement under another id: counted once")
    lines.append("  factors: " + ", ".join(f"{k}={v:.4g}" for k, v in cal.efficiency.to_dict().items()))
    if cal.held_out_groups:
        lines.append(f"  held out {len(cal.held_out_groups)} {what} ({cal.held_out_rows} rows), never fitted on:")
        lines += [f"    {d}" for d in cal.held_out_groups]
        med, p90 = cal.held_out_error["median_abs_pct_error"], cal.held_out_error["p90_abs_pct_error"]
        lines.append("  held-out |error|: " + "; ".join(
            f"{m} median {_num(med[m])} %, p90 {_num(p90[m])} %" for m in METRICS))
    else:
        lines.append(f"  nothing held out (one {cal.holdout_by} group): the fit is unscored; measure another layout, "
                     "or hold out part of the sweep with --holdout-by isl or concurrency")
    if done.fit_unpredicted:
        lines.append(f"  {len(done.fit_unpredicted)} rows of the fit set could not be planned and were not fitted on")
    print("\n".join(lines))
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"
