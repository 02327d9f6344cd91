"""Scoring the model only on data it was not fitted on: leave one model out, hold out whole deployments.

Two scores for every measured aggregated row of a bundled model (aiconfigurator's public vLLM sweeps, or any
results table; the problems come with repeated measurements already folded to one row,
:func:`pdtune.perfmodel.defaults.silicon_problems`, so no measurement is scored twice or fitted on twice):

* **uncalibrated, leave-one-model-out**: the row is predicted with default factors for its GPU refitted on
  every *other* model measured on a GPU of its architecture (:func:`pdtune.perfmodel.defaults.fit_gpu_defaults`
  with the row's model excluded on every GPU), the honest score of the shipped defaults, which were fitted on
  every model;
* **calibrated, held-out deployments**: the model x GPU's deployments are split into ``folds`` groups by a stable
  hash; each group is predicted with factors fitted (starting from the leave-one-model-out defaults) on the other
  groups only, so no fit that predicts a row has seen that row, its deployment, or its model's other data through
  the defaults.

:func:`heldout_table` returns one row per measured row with both predictions beside the measurement and the
deployment and fold it belonged to; :func:`heldout_summary` the median and p90 |error| per model x GPU.

With ``latency_model="simulated"`` the leave-one-model-out predictions come from the scheduler simulation
(:mod:`pdtune.perfmodel.simulated`, every row run as its benchmark) with the factors given; the calibrated column
is left empty, each row saying why (:data:`NO_SIMULATED_FIT`), unless the folds are fitted through the simulator
too (``fit_simulated``, minutes a fold). Factors fitted on the steady-state model's form are not the simulation's:
that form stands in for the queues with a cohort factor. :func:`lomo_fits_simulated` refits the
leave-one-model-out factors through the simulation itself, on the rows :func:`sim_fit_rows` keeps
(``python -m pdtune.scorecard --fit-simulated`` writes them to ``lomo_models_simulated.csv``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

import pandas as pd

from pdtune.perfmodel.efficiency import Efficiency
from pdtune.perfmodel.defaults import (
    SILICON_GPUS,
    FitKey,
    architecture_of,
    fit_architectures,
    fit_gpu_defaults,
    fit_key,
)
from pdtune.perfmodel.fit import Problem, fit_efficiency
from pdtune.perfmodel.validation import METRICS, deployment_key, error_percentiles, validate_rows


#: Why a simulated held-out table has no calibrated prediction.
NO_SIMULATED_FIT = ("the scorecard's folds are not fitted through the simulator (calibrate --latency-model simulated "
                    "fits one); calibrated factors are the steady-state model's")


#: The rows a leave-one-model-out fit through the simulator is fitted on: those of at most 64 clients and 1,024
#: output tokens (InferenceX's 1k/1k and 8k/1k points). A row's simulation costs CPU in proportion to its clients
#: times its output length, and a fit simulates every row up to three times per held-out model: the 8k-output
#: and 128-2,048-client rows are about 80 % of that cost (the rest took about 390 of the 1,800 CPU-seconds one
#: simulation of every silicon row takes here). Every row is still scored.
SIM_FIT_MAX_CONCURRENCY = 64
SIM_FIT_MAX_OSL = 1024


def sim_fit_rows(rows: pd.DataFrame) -> pd.Series:
    """Which of ``rows`` a fit through the simulator uses (:data:`SIM_FIT_MAX_CONCURRENCY`, :data:`SIM_FIT_MAX_OSL`)."""
    return (rows["concurrency"] <= SIM_FIT_MAX_CONCURRENCY) & (rows["osl"] <= SIM_FIT_MAX_OSL)


def _lomo_fit_simulated(problems: dict[tuple[str, str], Problem],
                        fold: tuple[tuple[tuple[str, ...], str], str]) -> tuple[Efficiency, list[str]]:
    (_, model), gpu = fold
    return fit_gpu_defaults(problems, gpu, exclude=[model], latency_model="simulated", rows=sim_fit_rows)


def lomo_fits_simulated(problems: dict[tuple[str, str], Problem], models: Sequence[str], *,
                        jobs: int = 1) -> dict[tuple[str, str], tuple[Efficiency, list[str]]]:
    """Leave-one-model-out factors fitted through the scheduler simulation (one fit per architecture for each
    held-out model, on :func:`sim_fit_rows` of the other models, the kernels carried between the architectures as
    :func:`~pdtune.perfmodel.defaults.fit_architectures` does), per model x GPU with the models each fit used;
    ``jobs`` fits at a time in worker processes. The silicon sample's eleven distinct fits took 17 minutes on two
    cores (2026-12-07)."""
    # Every architecture for every held-out model (the kernels carry between them), each distinct fit once, in
    # parallel; fit_architectures then finds them all in the cache.
    folds: dict[FitKey, tuple[tuple[tuple[str, ...], str], str]] = {}
    held = sorted({m for m, _ in problems if m in models})
    for model in held:
        for gpu in SILICON_GPUS:
            folds.setdefault(fit_key(problems, gpu, [model]), ((architecture_of(gpu), model), gpu))
    one = partial(_lomo_fit_simulated, problems)
    if jobs <= 1:
        fitted = [one(f) for f in folds.values()]
    else:
        from pdtune.signals import map_in_workers

        fitted = map_in_workers(one, list(folds.values()), jobs)
    cache = dict(zip(folds, fitted, strict=True))
    per_model = {model: fit_architectures(problems, exclude=[model], cache=cache, latency_model="simulated",
                                          rows=sim_fit_rows) for model in held}
    return {(model, gpu): per_model[model][architecture_of(gpu)] for model, gpu in sorted(problems)
            if model in models}


def fold_of(key: str, folds: int) -> int:
    """A deployment's fold: a stable hash, so every run splits alike."""
    return int(hashlib.sha256(key.encode()).hexdigest(), 16) % folds


@dataclass(frozen=True)
class HeldOut:
    table: pd.DataFrame  # one row per measured row
    lomo_factors: dict[tuple[str, str], Efficiency]
    lomo_models: dict[tuple[str, str], list[str]]  # the models each LOMO fit used


def heldout_table(
    problems: dict[tuple[str, str], Problem],
    *,
    folds: int = 4,
    models: Sequence[str] | None = None,
    latency_model: str = "steady-state",
) -> HeldOut:
    """Both held-out predictions for every row of the ``problems`` whose model is in ``models`` (all when None);
    ``latency_model`` predicts the leave-one-model-out column (see the module)."""
    frames = []
    factors: dict[tuple[str, str], Efficiency] = {}
    used: dict[tuple[str, str], list[str]] = {}
    lomo_fits: dict[str, dict[tuple[str, ...], tuple[Efficiency, list[str]]]] = {}
    cache: dict = {}
    for model, gpu in sorted(problems):
        if models is not None and model not in models:
            continue
        if model not in lomo_fits:  # one fit per architecture, the kernels carried between them
            lomo_fits[model] = fit_architectures(problems, exclude=[model], cache=cache)
        fit = lomo_fits[model][architecture_of(gpu)]
        factors[(model, gpu)], used[(model, gpu)] = fit
        frames.append(heldout_rows(problems[(model, gpu)], model, gpu, fit[0], folds=folds,
                                   latency_model=latency_model))
    table = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return HeldOut(table, factors, used)


def heldout_rows(problem: Problem, model: str, gpu: str, lomo: Efficiency, *, folds: int = 4,
                 only_folds: Sequence[int] | None = None, latency_model: str = "steady-state",
                 fit_simulated: bool = False) -> pd.DataFrame:
    """One model x GPU's rows: predicted with its leave-one-model-out factors ``lomo`` (by ``latency_model``), and
    each fold of its deployments with factors calibrated on the other folds (only the folds in ``only_folds`` when
    given; the others' calibrated columns stay empty). With the simulation the folds are calibrated only when
    ``fit_simulated`` asks for it, through the simulator (minutes a fold), and scored by it; else their columns
    stay empty (:data:`NO_SIMULATED_FIT`)."""
    rows = problem.rows
    keys = rows.apply(deployment_key, axis=1)
    uncal = validate_rows(rows, problem.spec, problem.gpu, lomo, latency_model=latency_model).set_index("row")
    out = uncal.rename(columns={f"predicted_{m}": f"lomo_{m}" for m in METRICS}
                       | {f"{m}_error": f"lomo_{m}_error" for m in METRICS})
    out["deployment"] = [keys[i] for i in out.index]
    out["fold"] = [fold_of(keys[i], folds) for i in out.index]
    deployments = sorted(set(keys))
    for m in METRICS:
        out[f"calibrated_{m}"] = float("nan")
        out[f"calibrated_{m}_error"] = float("nan")
    out["calibrated_reason"] = None
    if latency_model != "steady-state" and not fit_simulated:
        out["calibrated_reason"] = NO_SIMULATED_FIT
        only_folds = ()
    for k in range(folds) if only_folds is None else only_folds:
        held = [d for d in deployments if fold_of(d, folds) == k]
        train = [d for d in deployments if fold_of(d, folds) != k]
        if not held:
            continue
        if not train:
            out.loc[keys.isin(held).to_numpy(), "calibrated_reason"] = "no other deployment to fit on"
            continue
        train_rows = rows[keys.isin(train)]
        held_rows = rows[keys.isin(held)]
        assert not set(train_rows.index) & set(held_rows.index)
        fitted = fit_efficiency([Problem(problem.spec, problem.gpu, train_rows)], start=lomo,
                                latency_model=latency_model).efficiency
        pts = validate_rows(held_rows, problem.spec, problem.gpu, fitted, latency_model=latency_model).set_index("row")
        for m in METRICS:
            out.loc[pts.index, f"calibrated_{m}"] = pts[f"predicted_{m}"]
            out.loc[pts.index, f"calibrated_{m}_error"] = pts[f"{m}_error"]
    out["model_key"], out["gpu_name"] = model, gpu
    return out.reset_index()


def heldout_summary(table: pd.DataFrame, by: Sequence[str] = ("model_key", "gpu_name")) -> pd.DataFrame:
    """Median and p90 |error| (%) of both predictions for TTFT and TPOT, per group and over all rows."""
    rows = []
    groups = list(table.groupby(list(by), sort=True)) if len(table) else []
    for name, frame in [*groups, (("all",) * len(by), table)]:
        rec = dict(zip(by, name if isinstance(name, tuple) else (name,), strict=True))
        rec["rows"] = len(frame)
        rec["predicted"] = int(frame["predicted"].sum())
        for kind in ("lomo", "calibrated"):
            for m in ("ttft_ms_p50", "tpot_ms_p50"):
                med, p90 = error_percentiles(frame[f"{kind}_{m}_error"])
                rec[f"{kind}_{m}_median"], rec[f"{kind}_{m}_p90"] = med, p90
        rows.append(rec)
    return pd.DataFrame(rows)
