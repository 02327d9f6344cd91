"""Accuracy of pdtune's performance model on real vLLM measurements, scored only on data it was not fitted on.

The rows: every vLLM aggregated row of aiconfigurator's public silicon sample (data/clusters/aiconfigurator-silicon/)
of every model the defaults are fitted on (gpt-oss-120b, Llama-3.1-70B, Qwen3-32B, Qwen3-235B-A22B-FP8, MiniMax-M2.5,
Kimi-K2.5: ``pdtune.scorecard.MODELS``), on every GPU each was measured on, each measurement once (a row repeating
another row's measurement under another id is folded, and the folded rows are counted per model x GPU).

* **uncalibrated (leave-one-model-out)**: the shipped defaults are fitted on these public rows, so each model is
  scored with defaults refitted without it (pdtune.perfmodel.heldout);
* **calibrated (held-out deployments)**: factors fitted on the other deployments of the same model and GPU (four
  folds by deployment, starting from the leave-one-model-out defaults); every row is predicted by a fit that never
  saw its deployment.

Targets: per model x GPU (issue 15) uncalibrated median |error| <= 10 % TPOT and <= 25 % TTFT, calibrated held-out
<= 6 % TPOT and <= 15 % TTFT; over all rows (issue 23) uncalibrated median TTFT <= 15 %, TPOT <= 8 %, p90 TTFT
<= 35 %, calibrated TTFT <= 10 %, TPOT <= 5 %. Prints every number; exits 1 when a target is missed (the numbers are
reported either way). ``--json OUT`` writes the per-row table for bench_accuracy.py and the book. The real runs no
part of pdtune was fitted on are scored by the sibling ``bench_heldout.py``.

``--latency-model simulated`` predicts the leave-one-model-out column by running every row's benchmark in pdtune.sim
(sa-bench's clients as InferenceX runs its grid, compared by their means: an assumption, the file records no
harness; pdtune.perfmodel.simulated.SILICON_HARNESS names the sources) with the
shipped leave-one-model-out factors (``data/perfmodel/validation/lomo_models.csv``, not refitted; ``--lomo-factors
lomo_models_simulated.csv`` takes those fitted through the simulation, ``python -m pdtune.scorecard --fit-simulated``), a
deployment per worker job, most work first, each model x GPU timed as its last job ends (issue 23: ``validate`` over
every silicon row <= 3 min); the calibrated
column stays empty (the folds are not fitted through the simulator here), so only the uncalibrated targets are
checked.
``--csv OUT`` writes the per-row table as CSV (data/perfmodel/validation/heldout_simulated.csv is made so).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import pandas as pd

from pdtune.perfmodel.defaults import silicon_file, silicon_problems, silicon_repeats
from pdtune.perfmodel.fit import Problem
from pdtune.perfmodel.heldout import NO_SIMULATED_FIT, heldout_rows, heldout_summary, heldout_table
from pdtune.perfmodel.replicates import replicate_table
from pdtune.perfmodel.simulated import LATENCY_MODELS, SIMULATED, STEADY_STATE
from pdtune.perfmodel.validation import deployment_key, error_percentiles
from pdtune.results import load_results
from pdtune.scorecard import MODELS, lomo_factors, lomo_models

ROOT = Path(__file__).resolve().parents[1]
TARGETS = {"lomo": {"tpot_ms_p50": 10.0, "ttft_ms_p50": 25.0}, "calibrated": {"tpot_ms_p50": 6.0, "ttft_ms_p50": 15.0}}
#: Over all rows (issue 23): (prediction, metric, statistic) -> the most |error| in %.
OVERALL = {("lomo", "ttft_ms_p50", "median"): 15.0, ("lomo", "tpot_ms_p50", "median"): 8.0,
           ("lomo", "ttft_ms_p50", "p90"): 35.0, ("calibrated", "ttft_ms_p50", "median"): 10.0,
           ("calibrated", "tpot_ms_p50", "median"): 5.0}


def _f(x: float | None) -> str:
    return "    -" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:5.1f}"


def _simulate_group(problem, model: str, gpu: str, folds: int, fit: bool,
                    factors: str | None = None) -> tuple[pd.DataFrame, float]:
    """One model x GPU group's rows simulated (a worker's job): the table and its CPU seconds."""
    c0 = time.process_time()
    frame = heldout_rows(problem, model, gpu, lomo_factors(model, gpu, factors), folds=folds,
                         latency_model=SIMULATED, fit_simulated=fit)
    return frame, time.process_time() - c0


def _jobs(problems: dict, keys: list, fit: bool) -> list[tuple[tuple[str, str], object, float]]:
    """The worker jobs, most work first (longest first: the last to end is a short one): a whole group when its
    folds are calibrated through the simulator (a fold fits on the others), else one deployment of a group (its
    leave-one-model-out rows need nothing but their own factors). Work is what each row simulates: clients x OSL."""
    jobs = []
    for key in keys:
        problem = problems[key]
        rows = problem.rows
        work = (rows["concurrency"] * rows["osl"]).astype(float)
        if fit:
            jobs.append((key, problem, float(work.sum())))
            continue
        for _, index in rows.groupby(rows.apply(deployment_key, axis=1), sort=False).groups.items():
            jobs.append((key, Problem(problem.spec, problem.gpu, rows.loc[index]), float(work.loc[index].sum())))
    return sorted(jobs, key=lambda j: -j[2])


def simulated_lomo(problems: dict, folds: int, csv: str | None, *, fit: bool = False,
                   only: list[str] | None = None, jobs: int = 1,
                   factors: str | None = None) -> tuple[pd.DataFrame, dict]:
    """Every model x GPU's rows simulated with the shipped leave-one-model-out factors (``lomo_models.csv``, the
    factors the scorecard's fits found, or those of the file ``factors`` names: ``lomo_models_simulated.csv`` holds
    the fits through the simulator; not refitted here), in ``jobs`` worker processes, a deployment per job (a whole
    group with ``fit``), most work first; each group printed with its time when its last job ends and the table so
    far written to ``csv`` in the groups' order (fewest requests first), each group's rows in their order."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    keys = sorted((k for k in problems if k[0] in MODELS and (only is None or f"{k[0]}/{k[1]}" in only)),
                  key=lambda k: float((problems[k].rows["concurrency"] * problems[k].rows["osl"]).sum()))
    used = {k: str(lomo_models(factors).set_index(["model_key", "gpu_name"]).loc[k, "fitted_on"]).split() for k in keys}
    work = _jobs(problems, keys, fit)
    left = {k: sum(1 for j in work if j[0] == k) for k in keys}
    parts: dict[tuple[str, str], list[pd.DataFrame]] = {k: [] for k in keys}
    cpu: dict[tuple[str, str], float] = dict.fromkeys(keys, 0.0)
    done: dict[tuple[str, str], pd.DataFrame] = {}
    t0 = time.perf_counter()

    def report(key: tuple[str, str], frame: pd.DataFrame, seconds: float) -> None:
        parts[key].append(frame)
        cpu[key] += seconds
        left[key] -= 1
        if left[key]:
            return
        order = problems[key].rows.index
        frame = pd.concat(parts[key], ignore_index=True).set_index("row").loc[order].reset_index()
        done[key] = frame
        (tm, _), (pm, _) = error_percentiles(frame["lomo_ttft_ms_p50_error"]), error_percentiles(frame["lomo_tpot_ms_p50_error"])
        if fit:
            (ct, _), (cp, _) = (error_percentiles(frame["calibrated_ttft_ms_p50_error"]),
                                error_percentiles(frame["calibrated_tpot_ms_p50_error"]))
            print(f"  calibrated through the simulation {key[0]}/{key[1]}: TTFT {_f(ct)} %, TPOT {_f(cp)} %", flush=True)
        print(f"  simulated {key[0]}/{key[1]}: {len(frame)} rows, TTFT {_f(tm)} %, TPOT {_f(pm)} %, "
              f"{cpu[key]:.0f} s CPU, ended at {time.perf_counter() - t0:.0f} s wall", flush=True)
        if csv:
            _write_csv(pd.concat([done[k] for k in keys if k in done], ignore_index=True), csv)

    if jobs <= 1:
        for key, problem, _ in work:
            report(key, *_simulate_group(problem, *key, folds, fit, factors))
    else:
        with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = {pool.submit(_simulate_group, problem, *key, folds, fit, factors): key
                       for key, problem, _ in work}
            for future in as_completed(futures):
                report(futures[future], *future.result())
    return pd.concat([done[k] for k in keys], ignore_index=True), used


def _write_csv(table: pd.DataFrame, csv: str) -> None:
    out = Path(csv)
    out.parent.mkdir(parents=True, exist_ok=True)
    rel = table.assign(path=[os.path.relpath(str(x), ROOT) for x in table["path"]])  # the repository's paths
    rel.drop(columns=["row"], errors="ignore").to_csv(out, index=False, float_format="%.6g")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", metavar="OUT", help="write the per-row held-out table here")
    parser.add_argument("--folds", type=int, default=4)
    parser.add_argument("--latency-model", choices=LATENCY_MODELS, default=STEADY_STATE)
    parser.add_argument("--csv", metavar="OUT", help="write the per-row table here as CSV")
    parser.add_argument("--fit-simulated", action="store_true",
                        help="with --latency-model simulated: calibrate each fold through the simulator too")
    parser.add_argument("--lomo-factors", metavar="CSV",
                        help="with --latency-model simulated: the leave-one-model-out factors to simulate with "
                             "(default data/perfmodel/validation/lomo_models.csv; lomo_models_simulated.csv holds "
                             "those fitted through the simulator)")
    parser.add_argument("--groups", metavar="MODEL/GPU,...", help="only these model x GPU groups")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="with --latency-model simulated: groups simulated at once (default: the CPUs)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    df = load_results(silicon_file())
    problems = silicon_problems(df)
    missing = [m for m in MODELS if not any(k == m for k, _ in problems)]
    if args.latency_model == STEADY_STATE:
        held = heldout_table(problems, folds=args.folds, models=MODELS)
        table, lomo_used = held.table, held.lomo_models
    else:
        table, lomo_used = simulated_lomo(problems, args.folds, args.csv, fit=args.fit_simulated,
                                          only=args.groups.split(",") if args.groups else None, jobs=args.jobs,
                                          factors=args.lomo_factors)
    summary = heldout_summary(table)
    print(f"pdtune ({args.latency_model} latency model) on aiconfigurator's vLLM aggregated rows (MEASURED rows; "
          "predictions MODELED); |error| in %")
    print(f"{'model':<14} {'gpu':<5} {'rows':>5} {'pred':>5}   uncalibrated (LOMO)          calibrated (held-out)")
    print(f"{'':<14} {'':<5} {'':>5} {'':>5}   TTFT med  p90  TPOT med  p90   TTFT med  p90  TPOT med  p90")
    failures = []
    for _, r in summary.iterrows():
        print(
            f"{r['model_key']:<14} {r['gpu_name']:<5} {r['rows']:>5} {r['predicted']:>5}   "
            f"{_f(r['lomo_ttft_ms_p50_median'])} {_f(r['lomo_ttft_ms_p50_p90'])}  "
            f"{_f(r['lomo_tpot_ms_p50_median'])} {_f(r['lomo_tpot_ms_p50_p90'])}   "
            f"{_f(r['calibrated_ttft_ms_p50_median'])} {_f(r['calibrated_ttft_ms_p50_p90'])}  "
            f"{_f(r['calibrated_tpot_ms_p50_median'])} {_f(r['calibrated_tpot_ms_p50_p90'])}"
        )
        if r["model_key"] == "all":
            for (kind, metric, stat), goal in OVERALL.items():
                if kind == "calibrated" and args.latency_model != STEADY_STATE and not args.fit_simulated:
                    continue
                value = r[f"{kind}_{metric}_{stat}"]
                if value is None or (isinstance(value, float) and math.isnan(value)) or value > goal:
                    failures.append(f"all rows {kind} {metric} {stat} {_f(value).strip()} % > {goal:g} %")
            continue
        for kind, goals in TARGETS.items():
            if kind == "calibrated" and args.latency_model != STEADY_STATE and not args.fit_simulated:
                continue
            for metric, goal in goals.items():
                value = r[f"{kind}_{metric}_median"]
                if value is None or (isinstance(value, float) and math.isnan(value)) or value > goal:
                    failures.append(f"{r['model_key']}/{r['gpu_name']} {kind} {metric} median {_f(value).strip()} "
                                    f"% > {goal:g} %")
    unpredicted = table[~table["predicted"]] if len(table) else table
    print(f"\n{len(unpredicted)} rows the model could not predict (counted, kept):")
    for (model, gpu, reason), n in (unpredicted.groupby(["model_key", "gpu_name", "reason"]).size().items()
                                    if len(unpredicted) else []):
        print(f"  {model} / {gpu}: {n} x {reason}")
    for m in missing:
        print(f"  {m}: not bundled in data/models/, every one of its rows is unpredictable")
    folded = silicon_repeats(silicon_problems(df, fold=False))
    print(f"\n{len(folded)} rows repeat another row's measurement under another id, counted once:")
    for (model, gpu), n in folded.groupby(["model_key", "gpu_name"]).size().items():
        print(f"  {model} / {gpu}: {n}")
    floor = replicate_table(table, predictions=("lomo", "calibrated"))
    print("\nDistinct runs of one point, each predicted by the median of the others (pdtune.perfmodel.replicates: the "
          "data's own spread), beside pdtune on the same rows; |error| in %")
    print(f"{'same point =':<28} {'rows':>5} {'points':>6}   runs apart: TTFT med  p90  TPOT med  p90   "
          "pdtune LOMO: TTFT med  p90  TPOT med  p90")
    for _, r in floor.iterrows():
        print(f"{r['level']:<28} {r['rows']:>5} {r['points']:>6}   {'':>12}{_f(r['ttft_replicate_median'])} "
              f"{_f(r['ttft_replicate_p90'])}  {_f(r['tpot_replicate_median'])} {_f(r['tpot_replicate_p90'])}   "
              f"{'':>13}{_f(r['ttft_lomo_median'])} {_f(r['ttft_lomo_p90'])}  {_f(r['tpot_lomo_median'])} "
              f"{_f(r['tpot_lomo_p90'])}")
    print("\nLOMO defaults were fitted on:")
    for (model, gpu), names in sorted(lomo_used.items()):
        print(f"  {model} / {gpu}: {' '.join(names)}")
    if args.latency_model != STEADY_STATE and not args.fit_simulated:
        print(f"\ncalibrated column not scored: {NO_SIMULATED_FIT}")
    print(f"\n{len(failures)} targets missed" + (":" if failures else ""))
    for f in failures:
        print(f"  {f}")
    if args.csv:
        out = Path(args.csv)
        out.parent.mkdir(parents=True, exist_ok=True)
        _write_csv(table, args.csv)
        print(f"wrote {out}")
    if args.json:
        out = Path(args.json)
        out.parent.mkdir(parents=True, exist_ok=True)
        records = json.loads(table.to_json(orient="records"))
        out.write_text(json.dumps({"rows": records, "summary": json.loads(summary.to_json(orient="records")),
                                   "lomo_models": {f"{m}/{g}": v for (m, g), v in lomo_used.items()}},
                                  indent=1) + "\n", encoding="utf-8")
        print(f"wrote {out}")
    print(f"({time.perf_counter() - start:.0f} s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
