"""What the prior of the defaults' fit does to the honest score: leave-one-model-out, with the hand-set factors
pulled (as shipped) and not pulled.

``pdtune.perfmodel.prior`` takes each factor's prior from a published kernel or library benchmark; four have no
such source (``HAND_SET``) and keep a hand-set value. The other honest choice is not to pull those at all, so that
the rows alone fit them, and each leave-one-model-out fit does so without the model it scores. This benchmark
scores both on every silicon row of the scorecard (``pdtune.scorecard.MODELS``, repeats folded): per model x GPU
and over all rows, median and p90 |error| of TTFT and TPOT, uncalibrated. Every prediction is modeled; the
measurements are aiconfigurator's. No target: it prints the numbers that chose the shipped form (a few minutes of
fitting per variant on two cores).

    .venv/bin/python benchmarks/bench_prior.py [--only shipped|unpulled] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import pandas as pd

from pdtune.perfmodel.defaults import architecture_of, fit_architectures, silicon_file, silicon_problems
from pdtune.perfmodel.prior import HAND_SET
from pdtune.perfmodel.validation import error_percentiles, validate_rows
from pdtune.results import load_results
from pdtune.scorecard import MODELS

VARIANTS = {"shipped": frozenset(), "unpulled": HAND_SET}


def lomo_scores(unpulled: frozenset[str]) -> pd.DataFrame:
    """One row per model x GPU and one for all rows: the leave-one-model-out median and p90 |error| (%)."""
    problems = silicon_problems(load_results(silicon_file()))
    fits: dict = {}
    cache: dict = {}
    frames = []
    for model, gpu in sorted(problems):
        if model not in MODELS:
            continue
        if model not in fits:  # as the scorecard's folds: one fit per architecture, the kernels carried
            fits[model] = fit_architectures(problems, exclude=[model], cache=cache, unpulled=unpulled)
        problem = problems[(model, gpu)]
        rows = validate_rows(problem.rows, problem.spec, problem.gpu, fits[model][architecture_of(gpu)][0])
        frames.append(rows.assign(model_key=model, gpu_name=gpu))
    table = pd.concat(frames, ignore_index=True)
    out = []
    for (model, gpu), frame in [*table.groupby(["model_key", "gpu_name"]), (("all", ""), table)]:
        rec = {"model": model, "gpu": gpu, "rows": len(frame), "predicted": int(frame["predicted"].sum())}
        for m in ("ttft", "tpot"):
            rec[f"{m}_median"], rec[f"{m}_p90"] = error_percentiles(frame[f"{m}_ms_p50_error"])
        out.append(rec)
    return pd.DataFrame(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=sorted(VARIANTS))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    results = {}
    for name, unpulled in VARIANTS.items():
        if args.only and name != args.only:
            continue
        start = time.perf_counter()
        table = lomo_scores(unpulled)
        print(f"== {name}: hand-set factors {'not pulled' if unpulled else 'pulled'} "
              f"({' '.join(sorted(HAND_SET))}); {time.perf_counter() - start:.0f} s")
        print(table.to_string(index=False, float_format=lambda x: f"{x:.1f}"))
        results[name] = table.to_dict(orient="records")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
