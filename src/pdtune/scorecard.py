"""The performance model's scorecard on real vLLM measurements, written once to ``data/perfmodel/validation/``.

Scoring the model honestly means refitting it: every row of aiconfigurator's public vLLM aggregated sweeps
(``data/clusters/aiconfigurator-silicon/``) whose model enters a fit of the defaults (every bundled model the file
measures) is predicted with default factors fitted without its model (leave-one-model-out) and with factors
calibrated on the other deployments of its model and GPU (:func:`pdtune.perfmodel.heldout.heldout_table`). A
measurement repeated under another id is scored (and fitted) once: ``repeats.csv`` lists the rows folded away and
the row each repeats (:mod:`pdtune.perfmodel.repeats`). That takes minutes, too long for a book build, so this
module writes the per-row table to a CSV that the book reads, and regenerates it with one command:

    .venv/bin/python -m pdtune.scorecard        # or: make validation

Writing it says what moved against the shipped file; ``--check`` recomputes and compares without writing (exit
1 when anything moved). The test suite recomputes one model x GPU and one fold of it (:func:`check_fold`,
seconds), so a change to ``pdtune.perfmodel`` that moves a prediction fails there until the file is regenerated.

The readers here (:func:`load_scorecard`, :func:`scored`, :func:`peer_estimates`) are what chapters 5, 6 and 8
use; nothing in them fits anything.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, fields
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd

from pdtune.paths import data_dir
from pdtune.perfmodel.efficiency import Efficiency

#: The bundled models of the public sweeps that the scorecard covers: every model whose rows enter a fit of the
#: defaults (``silicon_problems``), so none is fitted on and left unscored.
MODELS = ("gpt-oss-120b", "llama-3.1-70b", "qwen3-32b", "qwen3-235b-a22b-fp8", "minimax-m2.5", "kimi-k2.5")
FOLDS = 4
COMMAND = "python -m pdtune.scorecard"

#: The columns written per row: where it came from, its deployment, measured and both held-out predictions.
COLUMNS = (
    "source_id", "model_key", "gpu_name", "topology", "gpus_total", "isl", "osl", "concurrency", "vllm", "weights",
    "deployment", "fold", "predicted", "reason",
    "measured_ttft_ms_p50", "measured_tpot_ms_p50", "measured_tps_per_gpu",
    "lomo_ttft_ms_p50", "lomo_tpot_ms_p50", "lomo_tps_per_gpu",
    "calibrated_ttft_ms_p50", "calibrated_tpot_ms_p50", "calibrated_tps_per_gpu", "calibrated_reason",
)
FLOAT_FORMAT = "%.6g"


def scorecard_dir() -> Path:
    return data_dir() / "perfmodel" / "validation"


def scorecard_file() -> Path:
    return scorecard_dir() / "heldout.csv"


def lomo_file() -> Path:
    return scorecard_dir() / "lomo_models.csv"


def lomo_simulated_file() -> Path:
    """The leave-one-model-out factors fitted through the scheduler simulation (``--fit-simulated``)."""
    return scorecard_dir() / "lomo_models_simulated.csv"


def repeats_file() -> Path:
    return scorecard_dir() / "repeats.csv"


def peer_file() -> Path:
    return data_dir() / "peers" / "aiconfigurator-0.12.0" / "silicon-vllm-estimates.json"


def compute(
    folds: int = FOLDS, models: Sequence[str] = MODELS
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(per-row table, which models every leave-one-model-out fit used, the repeated rows folded away): minutes
    of fitting."""
    from pdtune.perfmodel.defaults import silicon_file, silicon_problems, silicon_repeats
    from pdtune.perfmodel.heldout import heldout_table
    from pdtune.results import load_results

    df = load_results(silicon_file())
    problems = silicon_problems(df)
    fitted = sorted({m for m, _ in problems})
    if sorted(models) != fitted:  # a model fitted on but never scored (or scored but never fitted) is a gap
        raise ValueError(f"the scorecard's models {sorted(models)} are not the models the defaults fit: {fitted}")
    held = heldout_table(problems, folds=folds, models=list(models))
    repeats = silicon_repeats(silicon_problems(df, fold=False))
    repeats = repeats[repeats["model_key"].isin(models)].reset_index(drop=True)
    return _shipped_columns(held.table), _fits_frame(held.lomo_models, held.lomo_factors), repeats


def _shipped_columns(table: pd.DataFrame) -> pd.DataFrame:
    out = table[[c for c in COLUMNS if c in table.columns]].copy()
    return out.sort_values(["model_key", "gpu_name", "source_id"], kind="stable").reset_index(drop=True)


def _fits_frame(fits: dict[tuple[str, str], list[str]], factors: dict[tuple[str, str], Efficiency]) -> pd.DataFrame:
    """One row per model x GPU: the models its leave-one-model-out fit used, and the factors it found (an unset
    one empty), so that one fold can be recomputed without refitting them (:func:`check_fold`)."""
    return pd.DataFrame([{"model_key": m, "gpu_name": g, "fitted_on": " ".join(names),
                          **{f"factor_{k}": (math.nan if v is None else v) for k, v in asdict(factors[(m, g)]).items()}}
                         for (m, g), names in sorted(fits.items())])


def lomo_factors(model: str, gpu: str, path: str | Path | None = None) -> Efficiency:
    """The shipped leave-one-model-out factors of ``model`` on ``gpu`` (``lomo_models.csv``, or the file ``path``
    names: :func:`lomo_simulated_file` holds those fitted through the simulation)."""
    table = lomo_models(path)
    row = table[(table["model_key"] == model) & (table["gpu_name"] == gpu)]
    if len(row) != 1:
        raise KeyError(f"{model} on {gpu} is not in {path or lomo_file()}")
    # A factor added after the file was written (no column) keeps its default.
    values = {f.name: row[f"factor_{f.name}"].iloc[0] for f in fields(Efficiency) if f"factor_{f.name}" in row}
    return Efficiency(**{k: (None if isinstance(v, float) and math.isnan(v) else float(v)) for k, v in values.items()})


def check_fold(model: str, gpu: str, fold: int) -> list[str]:
    """One model x GPU recomputed, with one fold of its calibration, beside the shipped rows (empty when they
    agree): every row predicted with the shipped leave-one-model-out factors, and the rows of ``fold`` with
    factors calibrated on the model x GPU's other folds. Seconds, where :func:`check` (every model, every fold,
    the leave-one-model-out fits too) takes many minutes: the test suite runs this one to catch a change that
    moves the scorecard, ``make validation`` the whole."""
    from pdtune.perfmodel.defaults import silicon_file, silicon_problems
    from pdtune.perfmodel.heldout import heldout_rows
    from pdtune.results import load_results

    problems = silicon_problems(load_results(silicon_file()))
    lomo = lomo_factors(model, gpu)
    fresh = _reread(_shipped_columns(heldout_rows(problems[(model, gpu)], model, gpu, lomo, folds=FOLDS,
                                                  only_folds=[fold])))
    shipped = pd.read_csv(scorecard_file())
    shipped = shipped[(shipped["model_key"] == model) & (shipped["gpu_name"] == gpu)].reset_index(drop=True)
    calibrated = [c for c in shipped.columns if c.startswith("calibrated_")]
    found = differences(fresh.drop(columns=calibrated), shipped.drop(columns=calibrated))
    if not found:
        mine = (fresh["fold"] == fold).to_numpy()
        found = differences(fresh.loc[mine, calibrated].reset_index(drop=True),
                            shipped.loc[mine, calibrated].reset_index(drop=True))
    return found


def _csv(frame: pd.DataFrame) -> str:
    return frame.to_csv(index=False, float_format=FLOAT_FORMAT, lineterminator="\n")


def write(out_dir: Path | None = None,
          computed: tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame] | None = None) -> tuple[Path, Path, Path]:
    table, lomo, repeats = computed if computed is not None else compute()
    folder = Path(out_dir) if out_dir is not None else scorecard_dir()
    folder.mkdir(parents=True, exist_ok=True)
    rows, models, folded = folder / scorecard_file().name, folder / lomo_file().name, folder / repeats_file().name
    rows.write_text(_csv(table), encoding="utf-8")
    models.write_text(_csv(lomo), encoding="utf-8")
    folded.write_text(_csv(repeats), encoding="utf-8")
    return rows, models, folded


def differences(fresh: pd.DataFrame, shipped: pd.DataFrame, rtol: float = 1e-4) -> list[str]:
    """What differs between a recomputed table and the shipped one (numbers to ``rtol``, text exactly)."""
    problems = []
    if list(fresh.columns) != list(shipped.columns):
        return [f"columns differ: {list(fresh.columns)} vs {list(shipped.columns)}"]
    if len(fresh) != len(shipped):
        return [f"{len(fresh)} rows recomputed, {len(shipped)} shipped"]
    for column in fresh.columns:
        a, b = fresh[column], shipped[column]
        if pd.api.types.is_numeric_dtype(a) and pd.api.types.is_numeric_dtype(b) and not pd.api.types.is_bool_dtype(a):
            x, y = a.to_numpy(dtype=float), b.to_numpy(dtype=float)
            bad = ~(np.isclose(x, y, rtol=rtol, atol=0, equal_nan=True))
        else:  # text: an empty cell is empty on both sides (NaN never equals NaN)
            bad = (a.astype(object).where(a.notna(), "").astype(str)
                   != b.astype(object).where(b.notna(), "").astype(str)).to_numpy()
        if bad.any():
            i = int(np.argmax(bad))
            problems.append(f"{column}: {int(bad.sum())} rows differ (first: row {i}, {a.iloc[i]!r} vs {b.iloc[i]!r})")
    return problems


def _reread(frame: pd.DataFrame) -> pd.DataFrame:
    """A frame as the CSV round trip gives it back (the same rounding as the shipped file)."""
    from io import StringIO

    return pd.read_csv(StringIO(_csv(frame)))


def check(computed: tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame] | None = None) -> list[str]:
    """What a recomputation (``computed``, else one made now) changes in the shipped files."""
    table, lomo, repeats = computed if computed is not None else compute()
    problems = differences(_reread(table), pd.read_csv(scorecard_file()))
    problems += [f"lomo_models.csv: {p}" for p in differences(_reread(lomo), pd.read_csv(lomo_file()))]
    problems += [f"repeats.csv: {p}" for p in differences(_reread(repeats), pd.read_csv(repeats_file()))]
    return problems


# ------------------------------------------------------------------------------------------------ readers


@cache
def _load(path: str) -> pd.DataFrame:
    frame = pd.read_csv(path)
    frame["predicted"] = frame["predicted"].astype(bool)
    return frame


def load_scorecard(path: str | Path | None = None) -> pd.DataFrame:
    """The shipped per-row table (a copy), with the ``*_error`` columns (``predicted / measured - 1``)."""
    frame = _load(str(path or scorecard_file())).copy()
    for kind in ("lomo", "calibrated"):
        for metric in ("ttft_ms_p50", "tpot_ms_p50", "tps_per_gpu"):
            frame[f"{kind}_{metric}_error"] = frame[f"{kind}_{metric}"] / frame[f"measured_{metric}"] - 1
    return frame


def simulated_scorecard_file() -> Path:
    """Every row leave one model out by the simulation, with factors fitted through it (``lomo_simulated.csv``)."""
    return scorecard_dir() / "lomo_simulated.csv"


def load_simulated_scorecard(path: str | Path | None = None) -> pd.DataFrame:
    """``lomo_simulated.csv``: its ``lomo_*_error`` columns are ``predicted / measured - 1`` of the simulated means."""
    return _load(str(path or simulated_scorecard_file())).copy()


def lomo_models(path: str | Path | None = None) -> pd.DataFrame:
    return pd.read_csv(path or lomo_file())


def repeats(path: str | Path | None = None) -> pd.DataFrame:
    """The rows the scorecard folded as repeats of another row's measurement (``repeat_of``), per model x GPU."""
    return pd.read_csv(path or repeats_file())


def scored(frame: pd.DataFrame, kind: str = "lomo") -> pd.DataFrame:
    """The scorecard in :func:`pdtune.perfmodel.validation.validate_rows`' columns for one prediction
    (``lomo`` or ``calibrated``), so :func:`~pdtune.perfmodel.validation.error_table` reads it."""
    out = frame.copy()
    for metric in ("ttft_ms_p50", "tpot_ms_p50", "tps_per_gpu"):
        out[f"predicted_{metric}"] = out[f"{kind}_{metric}"]
        out[f"{metric}_error"] = out[f"{kind}_{metric}_error"]
    if kind == "calibrated":
        out["predicted"] = out["predicted"] & out["calibrated_tpot_ms_p50"].notna()
    out["model"], out["gpu"], out["mode"] = out["model_key"], out["gpu_name"], "agg"
    return out


def peer_estimates(path: str | Path | None = None) -> pd.DataFrame:
    """aiconfigurator 0.12.0's cached estimates (MODELED by aiconfigurator), one row per silicon ``id``."""
    data = json.loads(Path(path or peer_file()).read_text(encoding="utf-8"))
    rows = [{"source_id": key, "aic_status": value.get("status"), "aic_error_text": value.get("error"),
             "aic_ttft_ms_p50": value.get("ttft_ms"), "aic_tpot_ms_p50": value.get("tpot_ms")}
            for key, value in data["results"].items()]
    return pd.DataFrame(rows)


def with_peer(frame: pd.DataFrame, peer: pd.DataFrame | None = None) -> pd.DataFrame:
    """The scorecard with aiconfigurator's estimates beside it; rows it has no estimate for are ``missing``."""
    peer = peer_estimates() if peer is None else peer
    out = frame.merge(peer, on="source_id", how="left")
    missing = out["aic_status"].isna()
    out["aic_status"] = out["aic_status"].fillna("missing")
    out.loc[missing, "aic_error_text"] = "no cached estimate of this row (make bench-peers refreshes the cache)"
    for metric in ("ttft_ms_p50", "tpot_ms_p50"):
        value = pd.to_numeric(out[f"aic_{metric}"], errors="coerce").where(out["aic_status"] == "ok")
        out[f"aic_{metric}"] = value
        out[f"aic_{metric}_error"] = value / out[f"measured_{metric}"] - 1
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.splitlines()[0])
    parser.add_argument("--out", metavar="DIR", help=f"write here instead of {scorecard_dir()}")
    parser.add_argument("--check", action="store_true", help="recompute and compare with the shipped file")
    parser.add_argument("--fit-simulated", action="store_true",
                        help=f"fit the leave-one-model-out factors through the scheduler simulation instead and "
                             f"write only {lomo_simulated_file().name} (40 minutes on two cores)")
    parser.add_argument("--jobs", type=int, default=1, help="with --fit-simulated: fits run at once")
    parser.add_argument("--fold", nargs=3, metavar=("MODEL", "GPU", "K"),
                        help="recompute only fold K of MODEL on GPU (seconds) and compare with the shipped rows")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    if args.fold:
        model, gpu, fold = args.fold
        problems = check_fold(model, gpu, int(fold))
        for p in problems:
            print(p)
        print(f"fold {fold} of {model} on {gpu} {'differs from' if problems else 'matches'} {scorecard_file()} "
              f"({time.perf_counter() - start:.0f} s)")
        return 1 if problems else 0
    if args.fit_simulated:
        from pdtune.perfmodel.defaults import silicon_file, silicon_problems
        from pdtune.perfmodel.heldout import lomo_fits_simulated
        from pdtune.results import load_results

        fits = lomo_fits_simulated(silicon_problems(load_results(silicon_file())), MODELS, jobs=args.jobs)
        out = (Path(args.out) if args.out else scorecard_dir()) / lomo_simulated_file().name
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(_csv(_fits_frame({k: v[1] for k, v in fits.items()}, {k: v[0] for k, v in fits.items()})),
                       encoding="utf-8")
        print(f"wrote {out} ({time.perf_counter() - start:.0f} s)")
        return 0
    if args.check:
        problems = check()
        for p in problems:
            print(p)
        print(f"{'differs' if problems else 'matches'} {scorecard_file()} ({time.perf_counter() - start:.0f} s)")
        return 1 if problems else 0
    computed = compute()
    moved = check(computed)
    for p in moved:
        print(p)
    rows, models, folded = write(Path(args.out) if args.out else None, computed)
    said = "the same as before" if not moved else f"{len(moved)} columns moved"
    print(f"wrote {rows}, {models} and {folded}: {said} ({time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
