"""``pdtune validate``: the performance model's prediction beside every matching measured row, with its error."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

import pandas as pd

from pdtune.commands._common import emit_json, shared_flag, whole_flag
from pdtune.errors import InputError
from pdtune.gpus import GpuSpec, load_gpu
from pdtune.limits import MAX_GPUS
from pdtune.io import plain
from pdtune.model import ModelSpec, load_model
from pdtune.perfmodel.calibrate import Calibration, load_calibration
from pdtune.perfmodel.efficiency import Efficiency
from pdtune.perfmodel.defaults import fitted_measurements, gpu_defaults, measurement_digest
from pdtune.perfmodel.fit import holdout_key
from pdtune.perfmodel.launch_flags import DEFAULT_SERVER, launched_by
from pdtune.perfmodel.repeats import fold_repeats
from pdtune.perfmodel.replicates import LEVELS, replicate_table
from pdtune.perfmodel.simulated import SIMULATED, simulation_jobs
from pdtune.perfmodel.validation import METRICS, Selection, deployment_key, error_summary, select_rows, validate_rows
from pdtune.results import GpuCounts, load_results
from pdtune.topology import is_deployment, parse_deployment, parse_topology

EPILOG = """\
Each matching row is predicted at its own topology, concurrency, ISL/OSL, mode, vLLM version and weight precision,
with the calibration file's factors or the GPU's defaults (data/perfmodel/defaults.csv). Predictions are MODELED;
the rows are measurements. error = predicted / measured - 1; the summary gives the median and the 90th percentile
of |error| in percent over the rows the factors were not fitted on (each row is marked in-sample when its
measurement is one the calibration, or the GPU's shipped defaults, were fitted on: data/perfmodel/fitted_rows.csv;
with a calibration, rows of the groups it fitted are not scored either). A row repeating another row's measurement
under another id counts once. Rows the model cannot predict are listed with the reason, never dropped.
--latency-model simulated runs each aggregated and disaggregated row's benchmark in pdtune.sim (vLLM 0.33's
scheduler stepped on pdtune's step costs) with the clients of the harness its results' format implies (--harness
to say another): medians and tails of the simulated requests, queues and cohorts included (means where the
measurement reports means, as aiconfigurator's silicon file does: column statistic); prefill-only and decode-only
rows keep the steady-state model. Every row names its model (column latency_model). The factors are the same
either way: the defaults' or the calibration file's (which `calibrate --latency-model simulated` fits through the
simulation).
Examples:
  pdtune validate data/clusters/aiconfigurator-silicon --model gpt-oss-120b --gpu h200
  pdtune validate results/ --model llama-3.1-70b --gpu h100 --gpus 8 --topology TP8 --json
  pdtune validate data/clusters/inferencex-h200-isl-sweep/qwen3.5 --model qwen3.5-397b-a17b --gpu h200 \
      --topology TP8 --latency-model simulated --harness inferencex
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "validate",
        help="modeled vs measured: predict every matching result row and report the error",
        description="Predict every measured row of MODEL on GPU and print predicted beside measured.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_selection_arguments(p)
    p.add_argument("--calibration", metavar="CAL", help="a calibration file from `pdtune calibrate`")
    shared_flag(p, "--latency-model")
    shared_flag(p, "--harness", help="with --latency-model simulated: the harness whose clients are simulated "
                "(default: the one the results' format implies: sa-bench for aiconfigurator's silicon file, whose rows "
                "sit on InferenceX's grid, and for srt-slurm, aiperf for AIPerf, vllm-bench otherwise)")
    shared_flag(p, "--json")
    p.set_defaults(func=run)


def add_selection_arguments(p: argparse.ArgumentParser) -> None:
    """RESULTS..., --model, --gpu, --gpus, --topology: shared with ``pdtune calibrate``."""
    p.add_argument("results", nargs="+", metavar="RESULTS", help="result files or folders (any format pdtune reads)")
    shared_flag(p, "--model", required=True)
    p.add_argument("--gpu", required=True, help="the GPU the rows were measured on (data/gpus/gpus.csv lists them)")
    p.add_argument("--gpus", type=whole_flag(MAX_GPUS, "GPUs"), metavar="N",
                   help="only rows of N GPUs (and the count of results that do not record one)")
    p.add_argument("--topology", metavar="T",
                   help="only rows of this topology (and the topology of rows without one)")
    p.add_argument("--backend", default="vllm", metavar="NAME",
                   help="only rows served by NAME where the results say (default vllm; 'all' for every backend)")


def model_name(text: str) -> str:
    """The name rows are matched against: a bundled name as given, a folder's name, a config file's folder."""
    path = Path(text)
    if path.suffix == ".json":
        return path.parent.name
    return path.name or text


def load_selection(args: argparse.Namespace) -> tuple[ModelSpec, GpuSpec, Selection, str]:
    """Read the results, keep the rows of --model on --gpu (and --gpus, --topology)."""
    if args.topology is not None:
        layout = parse_deployment(args.topology) if is_deployment(args.topology) else parse_topology(args.topology)
        gpus = layout.gpus_total if is_deployment(args.topology) else layout.gpus  # type: ignore[union-attr]
        if args.gpus is not None and gpus != args.gpus:
            raise InputError("--topology", "topology", f"{args.topology} is {gpus} GPUs but --gpus says {args.gpus}")
    spec = load_model(args.model)
    gpu = load_gpu(args.gpu)
    counts = GpuCounts.aggregated(args.gpus) if args.gpus is not None else None
    df = load_results(args.results, gpus=counts)
    if args.topology is not None:
        df = df.assign(topology=df["topology"].where(df["topology"].notna(), args.topology))
    name = model_name(args.model)
    selection = select_rows(df, name, gpu.name, gpus=args.gpus, topology=args.topology, backend=args.backend)
    if not selection.used:
        why = "; ".join(f"{n} {reason}" for reason, n in selection.skipped.items()) or "no rows"
        raise InputError(", ".join(args.results), "model", f"no rows of {name} on {gpu.name} ({why})")
    return spec, gpu, selection, name


def run(args: argparse.Namespace) -> int:
    spec, gpu, selection, name = load_selection(args)
    calibration: Calibration | None = None
    if args.calibration:
        calibration = load_calibration(args.calibration, model=name, gpu=gpu.name)
        eff, source = calibration.efficiency, f"calibration {args.calibration}"
    else:
        defaults = gpu_defaults(gpu.name, args.latency_model)
        eff, source = defaults.efficiency, f"defaults for {gpu.name} ({defaults.source}: {defaults.note})"
    if args.harness is not None and args.latency_model != SIMULATED:
        raise InputError("--harness", "harness", "names the clients --latency-model simulated runs; give both")
    jobs = simulation_jobs() if args.latency_model == SIMULATED else 1
    points = validate_rows(selection.rows, spec, gpu, eff, latency_model=args.latency_model, harness=args.harness,
                           jobs=jobs)
    points = mark_fitted(points, selection.rows, calibration, gpu.name)
    points = points.assign(launch=points["row"].map(launched_by(selection.rows)))
    summary = error_summary(points[points["scored"]])
    in_sample = error_summary(points[points["predicted"] & points["in_sample"] & points["repeat_of"].isna()])
    runs = replicates(points)
    if args.json:
        emit_json(report(points, selection, summary, eff, source, name, gpu.name, in_sample) | {"replicates": runs})
    else:
        print(render(points, selection, summary, source, name, gpu.name, in_sample)
              + "".join(f"\n{line}" for line in replicate_lines(runs)))
    return 0


def launch_line(points: pd.DataFrame) -> str:
    """The servers the rows were predicted on, in words: how many rows by how many launch-script versions."""
    scripts = points.loc[points["launch"] != DEFAULT_SERVER, "launch"]
    defaults = int((points["launch"] == DEFAULT_SERVER).sum())
    return (f"  servers as launched: {len(scripts)} rows by {scripts.nunique()} versions of their launch scripts "
            f"(data/clusters/aiconfigurator-silicon/launch_flags.csv), {defaults} on vLLM's defaults")


def replicates(points: pd.DataFrame) -> list[dict[str, Any]]:
    """Distinct runs of one deployment point (:mod:`pdtune.perfmodel.replicates`; a repeat of another row's
    measurement is not a run): how far apart they are, each against the median of the others, beside the model's
    |error| on those of them that are scored (``predicted_rows``); per level, deployment, deployment with its
    vLLM version, and deployment launched by one version of its script (``launch``), the medians and p90s in %."""
    rows = points[points["predicted"] & points["repeat_of"].isna()]
    if "vllm" not in rows.columns:
        rows = rows.assign(vllm=None)
    scored = rows["scored"].astype(bool)
    rows = rows.assign(**{f"predicted_{m}": rows[f"predicted_{m}"].where(scored) for m in METRICS})
    levels = {k: v for k, v in LEVELS.items() if k != "layout"}  # one model and GPU: the layout adds nothing
    table = replicate_table(rows, tuple(METRICS), predictions=("predicted",), levels=levels)
    return [{k: plain(v) for k, v in r.items()} for r in table.to_dict("records")]


def replicate_lines(runs: list[dict[str, Any]]) -> list[str]:
    """The replicate table in words, a line per level that has runs."""
    lines = []
    for r in runs:
        if not r["rows"]:
            continue
        lines.append(
            f"  runs of one point ({r['level']}): {r['rows']} rows of {r['points']} points measured more than once; "
            f"each against the median of the others TTFT {_num(r['ttft_replicate_median'])} % median, "
            f"{_num(r['ttft_replicate_p90'])} % p90, TPOT {_num(r['tpot_replicate_median'])} % / "
            f"{_num(r['tpot_replicate_p90'])} %; "
            + (f"the model on the {r['predicted_rows']} of them scored: TTFT {_num(r.get('ttft_predicted_median'))} % / "
               f"{_num(r.get('ttft_predicted_p90'))} %, TPOT {_num(r.get('tpot_predicted_median'))} % / "
               f"{_num(r.get('tpot_predicted_p90'))} %" if r["predicted_rows"]
               else "none of them is scored (the factors were fitted on them)"))
    return lines


def mark_fitted(
    points: pd.DataFrame, rows: pd.DataFrame, calibration: Calibration | None, gpu: str | None = None
) -> pd.DataFrame:
    """Per row: ``repeat_of`` (the id of the row whose measurement it repeats, counted once), ``fitted`` (the
    factors were fitted on this measurement: the calibration's, or the GPU's shipped defaults'), ``start_fitted``
    (the defaults a calibration started from, and was pulled towards, were fitted on it), ``in_sample`` (either)
    and ``scored`` (predicted, not in-sample, not in a group the calibration fitted, not a repeat)."""
    out = points.copy()
    if not len(out):
        for column in ("deployment", "repeat_of", "fitted", "start_fitted", "in_sample", "scored"):
            out[column] = []
        return out
    keys = rows.apply(deployment_key, axis=1)
    digests = rows.apply(measurement_digest, axis=1)
    twin = fold_repeats(rows).repeat_of
    out["deployment"] = [keys.get(i, "") for i in out["row"]]
    out["repeat_of"] = [twin.get(i) for i in out["row"]]
    if calibration is not None:
        measured = set(calibration.fitted_measurements)
        groups = rows.apply(lambda r: holdout_key(r, calibration.holdout_by), axis=1)
        in_group = [groups.get(i, "") in set(calibration.fitted_groups) for i in out["row"]]
        # A file without measurement digests (written before them) knows only its groups.
        fitted = [digests.get(i) in measured if measured else g for i, g in zip(out["row"], in_group, strict=True)]
        start = set(fitted_measurements(gpu)) if gpu and calibration.start.startswith("silicon") else set()
        start_fitted = [digests.get(i) in start for i in out["row"]]
    else:
        measured = set(fitted_measurements(gpu)) if gpu else set()
        fitted = [digests.get(i) in measured for i in out["row"]]
        in_group = fitted
        start_fitted = [False] * len(out)
    out["fitted"] = fitted
    out["start_fitted"] = start_fitted
    out["in_sample"] = out["fitted"] | out["start_fitted"]
    out["scored"] = (out["predicted"] & ~out["in_sample"] & ~pd.Series(in_group, index=out.index)
                     & out["repeat_of"].isna())
    return out


def report(
    points: pd.DataFrame,
    selection: Selection,
    summary: dict[str, Any],
    eff: Efficiency,
    source: str,
    model: str,
    gpu: str,
    in_sample: dict[str, Any] | None = None,
) -> dict[str, Any]:
    cols = [c for c in points.columns if c != "row"]
    records = [{k: plain(v) for k, v in r.items()} for r in points[cols].to_dict("records")]
    scored = [r for r in records if r["scored"]]
    predicted = points["predicted"] & points["repeat_of"].isna()
    fitted = int((predicted & points["fitted"]).sum())
    in_sample_rows = int((predicted & points["in_sample"]).sum())
    return {
        "modeled_vs_measured": True,
        "model": model,
        "gpu": gpu,
        "efficiency": eff.to_dict(),
        "efficiency_source": source,
        "latency_models": {str(k): int(v) for k, v in points["latency_model"].value_counts().items()},
        "rows_used": int(len(points)),
        "rows_skipped": selection.skipped,
        "rows_predicted": int(points["predicted"].sum()),
        "servers": {str(k): int(v) for k, v in points["launch"].value_counts().items()} if "launch" in points else {},
        "rows_repeated": int(points["repeat_of"].notna().sum()),
        "rows_fitted_on": fitted,
        "rows_start_fitted_on": int((predicted & points["start_fitted"] & ~points["fitted"]).sum()),
        "rows_scored": len(scored),
        "in_sample_share": in_sample_rows / int(predicted.sum()) if int(predicted.sum()) else None,
        "points": scored,
        "fitted_on": [r for r in records if r["predicted"] and r["in_sample"]],
        "in_sample_median_abs_pct_error": (in_sample or {}).get("median_abs_pct_error"),
        "unpredicted": [
            {k: r[k] for k in ("source", "path", "source_id", "mode", "topology", "isl", "osl", "concurrency",
                               "latency_model", "reason")}
            for r in records if not r["predicted"]
        ],
        "median_abs_pct_error": summary["median_abs_pct_error"],
        "p90_abs_pct_error": summary["p90_abs_pct_error"],
        "by_model_gpu_mode": summary["by_model_gpu_mode"],
    }


def render(
    points: pd.DataFrame, selection: Selection, summary: dict[str, Any], source: str, model: str, gpu: str,
    in_sample: dict[str, Any] | None = None,
) -> str:
    predicted = points["predicted"] & points["repeat_of"].isna()
    fitted = int((predicted & points["in_sample"]).sum())
    lines = [
        f"MODELED predictions beside MEASURED rows: {model} on {gpu}; factors: {source}",
        f"  {len(points)} rows used, {int(points['predicted'].sum())} predicted, {int(points['scored'].sum())} "
        "scored (not fitted on)",
    ]
    repeats = int(points["repeat_of"].notna().sum())
    if repeats:
        lines.append(f"  {repeats} rows repeat another row's measurement under another id: counted once")
    if int(predicted.sum()):
        start = int((predicted & points["start_fitted"] & ~points["fitted"]).sum())
        lines.append(f"  in-sample: {fitted} of {int(predicted.sum())} predicted measurements "
                     f"({100 * fitted / int(predicted.sum()):.0f} %) were fitted on by these factors (not scored)"
                     + (f", {start} of them by the defaults the calibration started from" if start else ""))
    for reason, n in selection.skipped.items():
        lines.append(f"  skipped {n} rows: {reason}")
    if "launch" in points.columns:
        lines.append(launch_line(points))
    models = points.loc[points["predicted"], "latency_model"].value_counts()
    lines.append("  latency model: " + (", ".join(f"{name} ({n} rows)" for name, n in models.items()) or "-")
                 + (f"; simulated harness: {', '.join(sorted(set(points['harness'].dropna())))}"
                    if points["harness"].notna().any() else ""))
    lines.append(
        f"  {'mode':<6} {'topology':<16} {'ISL/OSL':>10} {'conc':>5}  {'TTFT ms meas':>12} {'pred':>8} {'p99':>8} "
        f"{'err':>6}  {'TPOT ms meas':>12} {'pred':>7} {'p99':>7} {'err':>6}  {'latency':<12} source"
    )
    for _, p in points[points["predicted"]].iterrows():
        repeat = p["repeat_of"] if isinstance(p["repeat_of"], str) else None
        mark = (" (fitted on)" if p["in_sample"] else " (in a fitted group)" if not p["scored"] and repeat is None
                else "") + (f" (repeat of {repeat})" if repeat is not None else "")
        where = f"{p['path']}" + (f"#{p['source_id']}" if p["source_id"] else "")
        lines.append(
            f"  {p['mode']:<6} {str(p['topology']):<16} {p['isl']:>5}/{p['osl']:<4} {p['concurrency']:>5}  "
            f"{p['measured_ttft_ms_p50']:>12.1f} {p['predicted_ttft_ms_p50']:>8.1f} {p['predicted_ttft_ms_p99']:>8.1f} "
            f"{_pct(p['ttft_ms_p50_error'])}  "
            f"{p['measured_tpot_ms_p50']:>12.2f} {p['predicted_tpot_ms_p50']:>7.2f} {p['predicted_tpot_ms_p99']:>7.2f} "
            f"{_pct(p['tpot_ms_p50_error'])}  {p['latency_model']:<12} "
            f"{where}{mark}"
        )
    unpredicted = points[~points["predicted"]]
    if len(unpredicted):
        lines.append(f"  {len(unpredicted)} rows the model cannot predict (kept, not scored):")
        for reason, n in unpredicted["reason"].value_counts().items():
            lines.append(f"    {n} x {reason}")
    med, p90 = summary["median_abs_pct_error"], summary["p90_abs_pct_error"]
    lines.append(f"  |error| over the {int(points['scored'].sum())} scored rows: " + "; ".join(
        f"{m}: median {_num(med[m])} %, p90 {_num(p90[m])} %" for m in METRICS))
    if fitted and in_sample is not None:
        lines.append("  in-sample residual (rows fitted on; a fit's residual, not a score): " + "; ".join(
            f"{m}: median {_num(in_sample['median_abs_pct_error'][m])} %" for m in METRICS))
    if fitted and not int(points["scored"].sum()):
        lines.append("  every predicted row was fitted on: see data/perfmodel/validation/ (python -m pdtune.scorecard) "
                     "for the leave-one-model-out score")
    for g in summary["by_model_gpu_mode"]:
        lines.append(
            f"    {g['model']} / {g['gpu']} / {g['mode']} ({g['points']} rows): "
            + ", ".join(f"{m} {_num(g['median_abs_pct_error'][m])} %" for m in METRICS)
        )
    lines.append("  tps_per_gpu: total tokens/s over all GPUs (derived by Little's law for rows that record none)")
    return "\n".join(lines)


def _pct(x: float) -> str:
    return "     -" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:+5.0f}%"


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"
