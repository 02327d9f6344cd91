"""Calibration on a user's own sweeps: fit on some deployments, score on the others, write the file.

:func:`calibrate` takes the measured rows of one model on one GPU, counts a measurement repeated under another id
once (:func:`pdtune.perfmodel.repeats.fold_repeats`), splits them into whole groups
(:func:`pdtune.perfmodel.fit.split_deployments` over :func:`pdtune.perfmodel.fit.holdout_key`: whole deployments by
default, never single points; or, with ``holdout_by="isl"`` or ``"concurrency"``, whole ISLs or concurrencies
across every deployment, so that a sweep of one deployment can be split too), fits the global factors on the fit
set only (:func:`pdtune.perfmodel.fit.fit_efficiency`, starting from the GPU's defaults), predicts the held-out
groups with the fitted factors and reports their error. The :class:`Calibration` it returns is what
``pdtune calibrate --out CAL.yaml`` writes and what ``pdtune predict``, ``pdtune validate`` and
``pdtune dataset generate`` read back with :func:`load_calibration`::

    pdtune_calibration: 1
    model: gpt-oss-120b            # the model key (last path component of the results' model id)
    gpu: h200
    vllm: ["0.18.0"]               # vLLM versions of the rows fitted on
    factors: {compute: 0.61, ...}  # an Efficiency
    start: silicon                 # the defaults the fit started from
    holdout_by: deployment         # deployment | isl | concurrency
    fitted_on: {deployments: [...], groups: [...], rows: 56, measurements: [...], results: [...]}
    held_out: {deployments: [...], groups: [...], rows: 19, median_abs_pct_error: {...}, p90_abs_pct_error: {...}}

``measurements`` names each row fitted on by a digest of its deployment, workload and measured values
(:func:`pdtune.perfmodel.defaults.measurement_digest`), so ``pdtune validate`` can mark exactly those rows as
in-sample; a file without ``holdout_by`` (written before it existed) held out deployments.

A file for another model or GPU than the one it is used with is rejected naming the file and the field.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from pdtune import __version__, limits
from pdtune.errors import InputError, brief
from pdtune.guarded import read_yaml
from pdtune.gpus import GpuSpec
from pdtune.io import atomic_write_text
from pdtune.model import ModelSpec
from pdtune.perfmodel.efficiency import FACTORS, KERNEL_FACTORS, Efficiency
from pdtune.perfmodel.defaults import gpu_defaults, measurement_digest
from pdtune.perfmodel.fit import FIT_FACTORS, HOLDOUT_BY, Problem, fit_efficiency, holdout_key, split_deployments
from pdtune.perfmodel.repeats import fold_repeats
from pdtune.perfmodel.simulated import LATENCY_MODELS
from pdtune.perfmodel.validation import deployment_key, error_summary, model_key, validate_rows

FORMAT_VERSION = 1


@dataclass(frozen=True)
class Calibration:
    model: str
    gpu: str
    efficiency: Efficiency
    vllm: tuple[str, ...] = ()
    start: str = ""
    fitted_deployments: tuple[str, ...] = ()
    fitted_rows: int = 0
    held_out_deployments: tuple[str, ...] = ()
    held_out_rows: int = 0
    held_out_error: dict[str, Any] = field(default_factory=dict)  # median/p90 |error| % per metric
    results: tuple[str, ...] = ()
    source: str = ""  # the file it was read from
    holdout_by: str = "deployment"
    fitted_groups: tuple[str, ...] = ()  # holdout_key of the groups fitted on (deployments by default)
    held_out_groups: tuple[str, ...] = ()
    fitted_measurements: tuple[str, ...] = ()  # measurement_digest of every row fitted on
    repeats_folded: int = 0  # rows that repeated another row's measurement, counted once
    latency_model: str = "steady-state"  # what the factors were fitted through (and the held-out rows scored by)
    prior: bool = True  # each factor pulled towards its start (fit.PRIOR_WEIGHT); False: the rows alone place them

    def to_yaml(self) -> str:
        doc = {
            "pdtune_calibration": FORMAT_VERSION,
            "model": self.model,
            "gpu": self.gpu,
            "vllm": list(self.vllm),
            "factors": {k: float(v) for k, v in self.efficiency.to_dict().items()},
            "start": self.start,
            "holdout_by": self.holdout_by,
            "latency_model": self.latency_model,
            "prior": self.prior,
            "fitted_on": {"deployments": list(self.fitted_deployments), "groups": list(self.fitted_groups),
                          "rows": self.fitted_rows, "repeats_folded": self.repeats_folded,
                          "measurements": list(self.fitted_measurements), "results": list(self.results)},
            "held_out": {"deployments": list(self.held_out_deployments), "groups": list(self.held_out_groups),
                         "rows": self.held_out_rows, **self.held_out_error},
            "created_by": f"pdtune {__version__}",
        }
        head = ("# pdtune calibration: factors fitted on measured sweeps by `pdtune calibrate`; the held-out\n"
                f"# error is measured on rows of groups ({self.holdout_by}) the fit never saw.\n")
        return head + yaml.safe_dump(doc, sort_keys=False)

    def check(self, model: str | None = None, gpu: str | None = None) -> Calibration:
        """This calibration, if it is for ``model`` and ``gpu``; else a one-line InputError naming the field.

        ``model`` is what a command was given: a bundled name, a folder, its ``config.json`` (the folder's
        name), or a results' model id (its last path component); every command passes it as given."""
        where = self.source or "calibration"
        key = model_key(Path(model).parent.name if model is not None and str(model).endswith(".json") else model)
        if model is not None and key != self.model:
            raise InputError(where, "model", f"calibrated for {self.model}, not {key}")
        if gpu is not None and gpu.strip().lower() != self.gpu:
            raise InputError(where, "gpu", f"calibrated for {self.gpu}, not {gpu.strip().lower()}")
        return self


def load_calibration(path: str | Path, *, model: str | None = None, gpu: str | None = None) -> Calibration:
    """Read a calibration file (checked against ``model`` and ``gpu`` when given)."""
    source = Path(path)
    raw = read_yaml(source)  # the guarded reader: file type, size, UTF-8, depth, aliases, duplicate keys
    if not isinstance(raw, dict) or "pdtune_calibration" not in raw:
        raise InputError(source, "pdtune_calibration", "missing: not a pdtune calibration file")
    version = raw["pdtune_calibration"]
    if type(version) is not int or version != FORMAT_VERSION:
        # a format pdtune does not write may mean anything by the same keys: never read as this one
        raise InputError(source, "pdtune_calibration", f"format {brief(version)}; pdtune {__version__} reads and "
                                                       f"writes format {FORMAT_VERSION} (`pdtune calibrate` again)")
    for key in ("model", "gpu", "factors"):
        if key not in raw:
            raise InputError(source, key, "missing")
    factors = raw["factors"]
    if not isinstance(factors, dict):
        raise InputError(source, "factors", "expected a mapping of factor names to numbers")
    unknown = sorted(set(factors) - set(FACTORS))
    if unknown:
        raise InputError(source, f"factors.{unknown[0]}", f"unknown factor; known: {', '.join(FACTORS)}")
    values: dict[str, float] = {}
    for name, value in factors.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise InputError(source, f"factors.{name}", f"expected a finite number, got {brief(value)}")
        values[name] = float(value)
    try:
        eff = Efficiency(**values)
    except InputError as exc:
        raise InputError(source, f"factors.{exc.field}", exc.message) from None
    fitted = raw.get("fitted_on") or {}
    held = raw.get("held_out") or {}
    for key in ("model", "gpu"):
        if not isinstance(raw[key], str) or not raw[key].strip():
            raise InputError(source, key, f"expected a name, got {brief(raw[key])}")
    for key, section in (("fitted_on", fitted), ("held_out", held)):
        if not isinstance(section, dict):
            raise InputError(source, key, f"expected a mapping, got {brief(section)}")
        rows = section.get("rows")
        if rows is not None:
            limits.whole_number(rows, str(source), f"{key}.rows", minimum=0)
        for item in ("deployments", "results", "groups", "measurements"):
            if section.get(item) is not None and not isinstance(section[item], list):
                raise InputError(source, f"{key}.{item}", f"expected a list, got {brief(section[item])}")
        if section.get("repeats_folded") is not None:
            limits.whole_number(section["repeats_folded"], str(source), f"{key}.repeats_folded", minimum=0)
    holdout_by = raw.get("holdout_by", "deployment")
    if holdout_by not in HOLDOUT_BY:
        raise InputError(source, "holdout_by", f"must be one of {', '.join(HOLDOUT_BY)}, got {brief(holdout_by)}")
    latency_model = raw.get("latency_model", "steady-state")  # files written before it existed: steady-state
    if latency_model not in LATENCY_MODELS:
        raise InputError(source, "latency_model",
                         f"must be one of {', '.join(LATENCY_MODELS)}, got {brief(latency_model)}")
    prior = raw.get("prior", True)  # files written before it existed: pulled
    if not isinstance(prior, bool):
        raise InputError(source, "prior", f"expected true or false, got {brief(prior)}")
    if raw.get("vllm") is not None and not isinstance(raw["vllm"], list):
        raise InputError(source, "vllm", f"expected a list of versions, got {brief(raw['vllm'])}")
    cal = Calibration(
        model=model_key(raw["model"]),
        gpu=str(raw["gpu"]).strip().lower(),
        efficiency=eff,
        vllm=tuple(str(v) for v in raw.get("vllm") or ()),
        start=str(raw.get("start") or ""),
        fitted_deployments=tuple(str(d) for d in fitted.get("deployments") or ()),
        fitted_rows=int(fitted.get("rows") or 0),
        held_out_deployments=tuple(str(d) for d in held.get("deployments") or ()),
        held_out_rows=int(held.get("rows") or 0),
        held_out_error={k: held[k] for k in ("median_abs_pct_error", "p90_abs_pct_error") if k in held},
        results=tuple(str(r) for r in fitted.get("results") or ()),
        source=str(source),
        holdout_by=holdout_by,
        # A file written before groups existed held out deployments: its groups are its deployments.
        fitted_groups=tuple(str(g) for g in fitted.get("groups") or fitted.get("deployments") or ()),
        held_out_groups=tuple(str(g) for g in held.get("groups") or held.get("deployments") or ()),
        fitted_measurements=tuple(str(m) for m in fitted.get("measurements") or ()),
        repeats_folded=int(fitted.get("repeats_folded") or 0),
        latency_model=latency_model,
        prior=prior,
    )
    return cal.check(model, gpu)


@dataclass(frozen=True)
class CalibrationRun:
    calibration: Calibration
    held_out_points: pd.DataFrame  # the held-out rows predicted with the fitted factors
    fit_unpredicted: dict[Any, str]


def calibrate(
    rows: pd.DataFrame,
    spec: ModelSpec,
    gpu: GpuSpec,
    *,
    model: str,
    holdout_fraction: float = 0.25,
    start: Efficiency | None = None,
    results: Sequence[str] = (),
    holdout_by: str = "deployment",
    latency_model: str = "steady-state",
    prior: bool = True,
) -> CalibrationRun:
    """Fit on some groups of ``rows`` (one model, one GPU; deployments unless ``holdout_by`` says ``isl`` or
    ``concurrency``), score the others, return the calibration. Each measurement counts once. ``latency_model``
    ``"simulated"`` fits through the scheduler simulation and scores the held-out rows by it. Without ``prior``
    no factor is pulled towards the GPU's defaults: for a deployment unlike those they were fitted on, with
    enough rows to place every factor (InferenceX's TEP8 sweep: the held-out TTFT falls from 49.7 % to 15.2 %)."""
    if not len(rows):
        raise InputError("calibrate", "rows", "no measured rows of this model on this GPU")
    folded = fold_repeats(rows)
    rows = folded.rows
    keys = rows.apply(lambda r: holdout_key(r, holdout_by), axis=1)
    fit_keys, held_keys = split_deployments(list(keys), holdout_fraction)
    fit_rows = rows[keys.isin(fit_keys)]
    held_rows = rows[keys.isin(held_keys)]
    assert not set(fit_rows.index) & set(held_rows.index)
    deployments = rows.apply(deployment_key, axis=1)
    defaults = gpu_defaults(gpu.name, latency_model)
    begin = start or defaults.efficiency
    # Without the prior nothing is pulled: the routed experts' per-kernel fractions too (the defaults set them, so
    # they would lean on the defaults' values, not on the generic fractions being fitted).
    unpulled = frozenset() if prior else frozenset((*FIT_FACTORS, *KERNEL_FACTORS))
    result = fit_efficiency([Problem(spec, gpu, fit_rows)], start=begin, latency_model=latency_model,
                            unpulled=unpulled)
    held_points = (validate_rows(held_rows, spec, gpu, result.efficiency, latency_model=latency_model)
                   if len(held_rows) else pd.DataFrame())
    summary = error_summary(held_points) if len(held_points) else {}
    versions = sorted({str(v) for v in fit_rows.get("backend_version", pd.Series(dtype=object)).dropna()})
    cal = Calibration(
        model=model_key(model),
        gpu=gpu.name,
        efficiency=result.efficiency,
        vllm=tuple(versions),
        start=defaults.source if start is None else "given",
        fitted_deployments=tuple(sorted(set(deployments[fit_rows.index]))),
        fitted_rows=result.points,
        held_out_deployments=tuple(sorted(set(deployments[held_rows.index]))),
        held_out_rows=int(held_points["predicted"].sum()) if len(held_points) else 0,
        held_out_error={k: summary[k] for k in ("median_abs_pct_error", "p90_abs_pct_error") if k in summary},
        results=tuple(str(r) for r in results),
        holdout_by=holdout_by,
        fitted_groups=tuple(fit_keys),
        held_out_groups=tuple(held_keys),
        fitted_measurements=tuple(sorted({measurement_digest(r) for _, r in fit_rows.iterrows()})),
        repeats_folded=folded.folded,
        latency_model=latency_model,
        prior=prior,
    )
    return CalibrationRun(cal, held_points, result.unpredicted)


def write_calibration(path: str | Path, cal: Calibration) -> None:
    atomic_write_text(path, cal.to_yaml(), "--out")

