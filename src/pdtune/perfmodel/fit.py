"""Fitting the model's global factors to measured sweeps, with whole deployments held out.

A **deployment** is one model served on one GPU type with one layout and one weight precision
(``mode``, ``topology``, quant modes); its rows are the sweep over concurrency and ISL/OSL. Calibration never
splits the group it holds out: :func:`split_deployments` sends each group (a deployment, or with ``--holdout-by``
one ISL or concurrency across deployments: :func:`holdout_key`), with all its rows, either to the fit or to the
held-out set, and :func:`fit_efficiency` only ever sees the first. Callers fold a measurement repeated under
another id to one row first (:mod:`pdtune.perfmodel.repeats`), so it weighs once.

The fit (``scipy.optimize.least_squares``) minimises the robust (soft-L1) misfit of the log-ratio of predicted to
measured TTFT and TPOT over the aggregated rows it is given, plus a Gaussian pull of every factor towards where it
starts (:class:`Objective`); how much of each fitted value the rows decide, and how much the pull, is
:mod:`pdtune.perfmodel.sensitivity`'s question. The time-like factors enter every prediction
linearly through the step terms of :mod:`pdtune.perfmodel.engine`, so they are fitted on precomputed
matrices (:class:`TermMatrix`); ``arrival_clustering`` changes which steps a point is made of, so it is searched
in an outer one-dimensional loop (``scipy.optimize.minimize_scalar``), each trial value re-planning the points.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from pdtune.errors import InputError
from pdtune.gpus import GpuSpec
from pdtune.model import ModelSpec
from pdtune.perfmodel.aggregated import agg_plan
from pdtune.perfmodel.efficiency import EXPERT_KERNELS, KERNEL_FACTORS, Efficiency
from pdtune.perfmodel.engine import KINDS
from pdtune.perfmodel.simulated import LATENCY_MODELS, SIMULATED, simulate_point
from pdtune.perfmodel.validation import (
    CompiledPoint,
    RowSetup,
    EngineCache,
    cached_engine,
    compile_agg,
    deployment_key,
    row_harness,
    row_setup,
    row_statistic,
    sim_config,
)

#: The factors a fit moves (``arrival_clustering`` separately), with their bounds: physically plausible ranges.
#: The routed experts' per-kernel fractions (``expert_*_<kernel>``) are fitted too, for the kernels the rows use.
FIT_FACTORS: tuple[str, ...] = (
    "compute", "expert_compute", "hbm", "expert_hbm", "link", "collective_latency_s", "step_overhead_s",
    "layer_overhead_s", "request_overhead_s", "attention_hbm", "expert_overhead_s", "seq_overhead_s",
    "eager_layer_overhead_s",
)
BOUNDS: dict[str, tuple[float, float]] = {
    "compute": (0.05, 1.0),
    "expert_compute": (0.05, 1.0),
    "expert_hbm": (0.1, 1.0),
    **{f"expert_compute_{k}": (0.05, 1.0) for k in EXPERT_KERNELS},
    **{f"expert_hbm_{k}": (0.1, 1.0) for k in EXPERT_KERNELS},
    "attention_hbm": (0.1, 1.0),
    "expert_overhead_s": (0.0, 2e-6),  # per routed expert per MoE layer: a fraction of a microsecond
    "seq_overhead_s": (0.0, 200e-6),  # vLLM's per-request work in one step: tens of microseconds
    "eager_layer_overhead_s": (0.0, 3e-3),  # launches one by one: tenths of a millisecond a layer (perfmodel.prior)
    "hbm": (0.2, 1.0),
    "link": (0.3, 1.0),  # NCCL and vLLM's custom all-reduce reach well over a third of NVLink on large messages
    "collective_latency_s": (2e-6, 50e-6),  # one NVLink all-reduce launch and handshake
    "step_overhead_s": (0.0, 20e-3),
    "layer_overhead_s": (0.0, 300e-6),
    "request_overhead_s": (0.0, 0.3),
    "arrival_clustering": (0.0, 1.0),
}
#: How far a fit may wander from where it starts before the data must pay for it: one "sigma" of the prior that
#: keeps few deployments from moving factors the data cannot tell apart (a per-step and a per-layer overhead, say).
PRIOR_SIGMA = {"compute": 0.15, "expert_compute": 0.15, "hbm": 0.15, "expert_hbm": 0.2, "link": 0.25,
               "collective_latency_s": 10e-6, "step_overhead_s": 0.5e-3, "layer_overhead_s": 20e-6,
               "request_overhead_s": 0.02, "attention_hbm": 0.2, "expert_overhead_s": 0.1e-6,
               "seq_overhead_s": 10e-6, "eager_layer_overhead_s": 170e-6,  # half its low-confidence prior
               **{f"expert_compute_{k}": 0.15 for k in EXPERT_KERNELS},
               **{f"expert_hbm_{k}": 0.2 for k in EXPERT_KERNELS}}
#: Whether fits add the per-kernel expert fractions of the kernels their rows use.
FIT_KERNELS = True
#: A kernel's fractions are pulled towards the generic expert fractions, not towards where the fit started: a
#: kernel family the rows do not show keeps the average of those they do.
TIED = {**{f"expert_compute_{k}": "expert_compute" for k in EXPERT_KERNELS},
        **{f"expert_hbm_{k}": "expert_hbm" for k in EXPERT_KERNELS}}
#: A one-sigma departure costs what a 7 % error on every row of one model x GPU costs.
PRIOR_WEIGHT = 0.07

FIT_SCALE = {"compute": 0.1, "expert_compute": 0.1, "hbm": 0.1, "expert_hbm": 0.1, "link": 0.1,
          "attention_hbm": 0.1, "expert_overhead_s": 1e-7, "seq_overhead_s": 1e-5,
          "eager_layer_overhead_s": 1e-5, **{n: 0.1 for n in TIED},
          "collective_latency_s": 1e-5, "step_overhead_s": 1e-3,
          "layer_overhead_s": 1e-5, "request_overhead_s": 1e-2}


@dataclass(frozen=True)
class Problem:
    """Measured rows of one model on one GPU type (already selected), to fit on or to score."""

    spec: ModelSpec
    gpu: GpuSpec
    rows: pd.DataFrame


#: What ``pdtune calibrate --holdout-by`` holds out whole: deployments (the default), ISLs or concurrencies.
HOLDOUT_BY = ("deployment", "isl", "concurrency")


def holdout_key(row: pd.Series | dict[str, Any], by: str = "deployment") -> str:
    """The group a row is held out with: its deployment, or one ISL (or concurrency) across every deployment,
    so that a user with one deployment can still fit on part of a sweep and score the rest."""
    if by == "deployment":
        return deployment_key(row)
    if by not in HOLDOUT_BY:
        raise InputError("--holdout-by", "holdout_by", f"must be one of {', '.join(HOLDOUT_BY)}, got {by!r}")
    value = row.get(by)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return f"{by} not recorded"
    return f"{by} {int(value)}"


def split_deployments(keys: Sequence[str], holdout_fraction: float = 0.25) -> tuple[list[str], list[str]]:
    """(fit, held out): whole groups (deployments, or the :func:`holdout_key` of another ``--holdout-by``), chosen
    by a stable hash of the key so every run splits the same way.

    At least one deployment is held out when there are two or more; a single deployment is all fit (and the
    caller has nothing to score it on).
    """
    unique = sorted(set(keys))
    if not 0 <= holdout_fraction < 1:
        raise InputError("--holdout", "holdout", f"must be a fraction in [0, 1), got {holdout_fraction}")
    if len(unique) < 2 or holdout_fraction == 0:
        return unique, []
    ranked = sorted(unique, key=lambda k: hashlib.sha256(k.encode()).hexdigest())
    n_held = min(len(unique) - 1, max(1, round(holdout_fraction * len(unique))))
    held = sorted(ranked[:n_held])
    return [k for k in unique if k not in held], held


# ------------------------------------------------------------------------------------------- compiling


#: The columns of the experts' kernel index: generic first, then each family.
_KERNELS = ("", *EXPERT_KERNELS)


@dataclass
class TermMatrix:
    """Every step of every point as arrays, and how each point's TTFT and TPOT weigh them."""

    compute: np.ndarray  # steps x KINDS, seconds at the compute peak
    memory: np.ndarray  # steps x KINDS, seconds at the HBM peak
    kernel: np.ndarray  # steps: index of the routed experts' kernel family in _KERNELS
    link: np.ndarray  # steps
    calls: np.ndarray
    network: np.ndarray
    layers: np.ndarray
    expert_slots: np.ndarray
    seqs: np.ndarray
    eager_layers: np.ndarray
    stages: np.ndarray
    w_ttft: np.ndarray  # points x steps
    w_tpot: np.ndarray
    ttft_overhead: np.ndarray  # points
    measured_ttft: np.ndarray  # points, seconds
    measured_tpot: np.ndarray
    weight: np.ndarray  # points: 1 / sqrt(rows of the point's problem), so each model x GPU counts alike
    index: list[Any]  # (problem number, row index) of each point

    @property
    def kernels(self) -> set[str]:
        """The expert kernel families whose grouped GEMMs these steps run."""
        used = self.kernel[(self.compute[:, _EXPERTS] > 0) | (self.memory[:, _EXPERTS] > 0)]
        return {_KERNELS[int(i)] for i in np.unique(used)} - {""}

    def times(self, eff: Efficiency) -> tuple[np.ndarray, np.ndarray]:
        fractions = [eff.fractions(kind) for kind in KINDS]
        work = np.maximum(self.compute / np.array([c for c, _ in fractions]),
                          self.memory / np.array([m for _, m in fractions]))
        by_kernel = np.array([eff.expert_fractions(k) for k in _KERNELS])[self.kernel]
        work[:, _EXPERTS] = np.maximum(self.compute[:, _EXPERTS] / by_kernel[:, 0],
                                       self.memory[:, _EXPERTS] / by_kernel[:, 1])
        step = (work.sum(axis=1) + self.link / eff.link + self.calls * eff.collective_latency_s + self.network
                + self.stages * eff.step_overhead_s + self.layers * eff.layer_overhead_s
                + self.expert_slots * eff.expert_overhead_s + self.seqs * eff.seq_overhead_s
                + self.eager_layers * eff.eager_layer_overhead_s)
        return self.w_ttft @ step + self.ttft_overhead * eff.request_overhead_s, self.w_tpot @ step


_EXPERTS = KINDS.index("experts")


@dataclass(frozen=True)
class Compiled:
    matrix: TermMatrix | None
    unpredicted: dict[Any, str] = field(default_factory=dict)  # (problem, row) -> reason


#: Planned points by everything a plan depends on (the served model, layout, vLLM line, KV dtype, workload,
#: concurrency, clustering), kept between fits: a plan is a pure function of those, and the held-out benchmarks
#: re-plan the same rows for dozens of fits. One engine cache per GPU object (held here, so its id stays unique).
_PLANS: dict[tuple[Any, ...], CompiledPoint | InputError] = {}
_ENGINES: dict[int, tuple[GpuSpec, EngineCache]] = {}


def _engine_cache(gpu: GpuSpec) -> EngineCache:
    if id(gpu) not in _ENGINES or _ENGINES[id(gpu)][0] is not gpu:
        _ENGINES[id(gpu)] = (gpu, EngineCache())
    return _ENGINES[id(gpu)][1]


def _planned(cache: EngineCache, setup: RowSetup, gpu: GpuSpec, isl: int, osl: int, c: int,
             clustering: float) -> CompiledPoint:
    key = (id(gpu), setup.spec, setup.topology, setup.vllm, setup.kv_cache_dtype, setup.flags, isl, osl, c, clustering)
    if key not in _PLANS:
        try:
            engine = cached_engine(cache, setup, gpu, isl, osl)
            _PLANS[key] = compile_agg(engine, agg_plan(engine, c, isl, osl, clustering), None, isl, osl)
        except InputError as exc:
            _PLANS[key] = exc
    found = _PLANS[key]
    if isinstance(found, InputError):
        raise found
    return found


def _simulated(cache: EngineCache, setup: RowSetup, gpu: GpuSpec, row: pd.Series, eff: Efficiency) -> CompiledPoint:
    """The row's benchmark simulated at ``eff`` and written as the linear form of the statistic its measurement
    reports (pdtune.perfmodel.simulated.linear_form); the engine's step-cost cache is kept, so the next simulation
    of the same engine re-times cached terms. The whole benchmark is simulated, warm-ups and every measured request:
    a shorter run is not the same benchmark (4 rounds after 1 of warm-up put the mean TTFT of 16 sa-bench clients
    on Llama-3.1-70B TP8 at 242 ms, the full 10 after 2 at 161 ms: the start's cohort weighs more in fewer)."""
    isl, osl, c = int(row["isl"]), int(row["osl"]), int(row["concurrency"])
    engine = cached_engine(cache, setup, gpu, isl, osl)
    key = ("fit", id(engine))
    point, cache.costs[key] = simulate_point(
        engine, isl, osl, c, eff, harness=row_harness(row), cost=cache.costs.get(key), linearize=True,
        statistic=row_statistic(row), config=sim_config(setup))
    assert point.linear is not None
    return point.linear


def compile_problems(problems: Sequence[Problem], clustering: float, *,
                     simulate_at: Efficiency | None = None) -> Compiled:
    """Plan every aggregated row of every problem at ``clustering``; rows that cannot be planned are listed.
    With ``simulate_at`` each row is simulated at those factors instead and compiled as its linear form (the
    scheduler's decisions held fixed), so a fit on the result is a fit through the simulator."""
    steps: list[Any] = []
    step_index: dict[int, int] = {}
    rows_ttft: list[list[tuple[int, float]]] = []
    rows_tpot: list[list[tuple[int, float]]] = []
    overhead, meas_ttft, meas_tpot, index = [], [], [], []
    unpredicted: dict[Any, str] = {}

    def slot(term: Any) -> int:
        key = id(term)
        if key not in step_index:
            step_index[key] = len(steps)
            steps.append(term)
        return step_index[key]

    for p_no, problem in enumerate(problems):
        cache = _engine_cache(problem.gpu)
        for r_index, row in problem.rows.iterrows():
            setup = row_setup(row, problem.spec)
            where = (p_no, r_index)
            if setup.mode != "agg":
                unpredicted[where] = f"{setup.mode} rows are scored, not fitted"
                continue
            if setup.reason is not None:
                unpredicted[where] = setup.reason
                continue
            isl, osl, c = int(row["isl"]), int(row["osl"]), int(row["concurrency"])
            try:
                point = (_planned(cache, setup, problem.gpu, isl, osl, c, clustering) if simulate_at is None
                         else _simulated(cache, setup, problem.gpu, row, simulate_at))
            except InputError as exc:
                unpredicted[where] = f"{exc.field}: {exc.message}"
                continue
            rows_ttft.append([(slot(t), w) for t, w in point.ttft])
            rows_tpot.append([(slot(t), w) for t, w in point.tpot])
            overhead.append(point.ttft_overhead)
            meas_ttft.append(float(row["ttft_ms_p50"]) / 1000)
            meas_tpot.append(float(row["tpot_ms_p50"]) / 1000)
            index.append(where)
    if not index:
        return Compiled(None, unpredicted)
    per_problem: dict[int, int] = {}
    for p_no, _ in index:
        per_problem[p_no] = per_problem.get(p_no, 0) + 1
    compute = np.zeros((len(steps), len(KINDS)))
    memory = np.zeros((len(steps), len(KINDS)))
    for i, t in enumerate(steps):
        for kind, c, m in zip(t.kinds, t.compute_s, t.memory_s, strict=True):
            compute[i, KINDS.index(kind)] += c
            memory[i, KINDS.index(kind)] += m
    w_ttft = np.zeros((len(index), len(steps)))
    w_tpot = np.zeros((len(index), len(steps)))
    for i, (a, b) in enumerate(zip(rows_ttft, rows_tpot, strict=True)):
        for j, w in a:
            w_ttft[i, j] += w
        for j, w in b:
            w_tpot[i, j] += w
    matrix = TermMatrix(
        compute=compute,
        memory=memory,
        kernel=np.array([_KERNELS.index(t.kernel) for t in steps], dtype=int),
        link=np.array([t.link_s for t in steps]),
        calls=np.array([t.calls for t in steps]),
        network=np.array([t.network_s for t in steps]),
        layers=np.array([float(t.layers) for t in steps]),
        expert_slots=np.array([float(t.expert_slots) for t in steps]),
        seqs=np.array([float(t.seqs) for t in steps]),
        eager_layers=np.array([float(t.eager_layers) for t in steps]),
        stages=np.array([float(t.stages) for t in steps]),
        w_ttft=w_ttft,
        w_tpot=w_tpot,
        ttft_overhead=np.array(overhead),
        measured_ttft=np.array(meas_ttft),
        measured_tpot=np.array(meas_tpot),
        weight=np.array([1 / math.sqrt(per_problem[p_no]) for p_no, _ in index]),
        index=index,
    )
    return Compiled(matrix, unpredicted)


# ---------------------------------------------------------------------------------------------- fitting


@dataclass(frozen=True)
class FitResult:
    efficiency: Efficiency
    points: int  # aggregated rows fitted on
    cost: float  # the robust loss at the optimum
    unpredicted: dict[Any, str]


def _residuals(matrix: TermMatrix, eff: Efficiency) -> np.ndarray:
    ttft, tpot = matrix.times(eff)
    floor = 1e-9
    w = matrix.weight
    return np.concatenate([w * np.log(np.maximum(ttft, floor) / matrix.measured_ttft),
                           w * np.log(np.maximum(tpot, floor) / matrix.measured_tpot)])


def factor_value(eff: Efficiency, name: str) -> float:
    """A factor's value with its fallbacks resolved (an unset kernel fraction is the generic one)."""
    if name in TIED:
        side, kernel = name.removeprefix("expert_").split("_", 1)
        compute, hbm = eff.expert_fractions(kernel)
        return compute if side == "compute" else hbm
    resolved = {"expert_compute": eff.experts, "expert_hbm": eff.experts_hbm,
                "attention_hbm": eff.fractions("attention")[1]}
    return float(resolved[name]) if name in resolved else float(getattr(eff, name))


def _values(eff: Efficiency, names: Sequence[str]) -> np.ndarray:
    return np.array([factor_value(eff, n) for n in names], dtype=float)


@dataclass(frozen=True)
class Objective:
    """What one fit minimises, spelt out so the fit and its sensitivity (:mod:`pdtune.perfmodel.sensitivity`)
    use the same terms: the robust data misfit plus a Gaussian pull of each factor towards where it starts."""

    matrix: TermMatrix
    start: Efficiency
    names: tuple[str, ...]
    lo: np.ndarray
    hi: np.ndarray
    x0: np.ndarray  # where the fit starts, and what it is pulled towards
    sigma: np.ndarray  # one "sigma" of the pull per factor (PRIOR_SIGMA)
    weight: float  # the pull's weight: PRIOR_WEIGHT x sqrt(2 x problems)
    tied: tuple[tuple[int, int], ...]  # (kernel fraction, generic fraction) pulled towards each other
    free: np.ndarray  # factors pulled towards x0 (the tied and the unpulled ones are not)
    f_scale: float  # the robust loss's scale: residuals beyond it count linearly

    def make(self, x: np.ndarray) -> Efficiency:
        return replace(self.start, **{n: float(v) for n, v in zip(self.names, x, strict=True)})

    def data(self, x: np.ndarray) -> np.ndarray:
        """The data residuals after the robust loss: their squares sum to soft-L1's cost of the log-ratios."""
        r = _residuals(self.matrix, self.make(x))
        f = self.f_scale
        return np.sign(r) * np.sqrt(2 * f * f * (np.sqrt(1 + (r / f) ** 2) - 1))

    def prior(self, x: np.ndarray) -> np.ndarray:
        out = np.where(self.free, x - self.x0, 0.0)
        for i, j in self.tied:
            out[i] = x[i] - x[j]
        return self.weight * out / self.sigma

    def residuals(self, x: np.ndarray) -> np.ndarray:
        return np.concatenate([self.data(x), self.prior(x)])


def objective(matrix: TermMatrix, start: Efficiency, factors: Sequence[str], problems: int,
              unpulled: frozenset[str] = frozenset()) -> Objective:
    """The fit's terms; the factors in ``unpulled`` feel no pull: the rows alone place them within their bounds
    (``benchmarks/bench_prior.py`` fits the defaults so with the hand-set factors,
    :data:`pdtune.perfmodel.prior.HAND_SET`)."""
    names = list(factors)
    if FIT_KERNELS:
        names += [n for n in KERNEL_FACTORS if n not in names and _kernel_of(n) in matrix.kernels]
    lo = np.array([BOUNDS[n][0] for n in names])
    hi = np.array([BOUNDS[n][1] for n in names])
    # A kernel's fraction that the start leaves unset is pulled towards the generic fraction's current value
    # (when that is fitted too); one the start sets (a calibration starting from fitted defaults), towards it.
    tied = tuple((i, names.index(TIED[n])) for i, n in enumerate(names)
                 if n in TIED and TIED[n] in names and getattr(start, n) is None)
    free = np.array([n not in unpulled for n in names], dtype=bool)
    for i, _ in tied:
        free[i] = False
    return Objective(matrix, start, tuple(names), lo, hi, np.clip(_values(start, names), lo, hi),
                     np.array([PRIOR_SIGMA[n] for n in names]), PRIOR_WEIGHT * math.sqrt(2 * problems), tied, free,
                     0.1 * float(matrix.weight.mean()))


def _fit_times(
    matrix: TermMatrix, start: Efficiency, factors: Sequence[str], problems: int,
    unpulled: frozenset[str] = frozenset(),
) -> tuple[Efficiency, float]:
    from scipy.optimize import least_squares  # here, not at the top: 0.6 s of import that only a fit needs

    goal = objective(matrix, start, factors, problems, unpulled)
    # The robust loss is applied to the data residuals only (Objective.data), never to the pull: a robust pull
    # would be an L1 penalty that pins every factor the data does not push hard to exactly where it started.
    result = least_squares(goal.residuals, goal.x0, bounds=(goal.lo, goal.hi), loss="linear",
                           x_scale=np.array([FIT_SCALE[n] for n in goal.names]), max_nfev=400)
    return goal.make(result.x), float(result.cost)


def _kernel_of(name: str) -> str:
    return name.rsplit("_", 1)[-1]


#: Rounds of a fit through the simulator (simulate at the factors, fit the linear forms, again), at most: the
#: scheduler's decisions move little once the factors do (a round ends the fit when no factor moves by more than
#: :data:`SIM_FIT_TOLERANCE` of its value).
SIM_FIT_ROUNDS = 3
SIM_FIT_TOLERANCE = 0.01


def _fit_simulated(problems: Sequence[Problem], start: Efficiency, factors: Sequence[str],
                   unpulled: frozenset[str] = frozenset()) -> FitResult:
    """The fit through the simulator: every round simulates each row at the current factors, then fits the factors
    on those runs' linear forms, pulled towards ``start`` as the steady-state fit is (the cohort factor
    ``arrival_clustering`` is the steady-state model's stand-in for what the simulation does; it is not fitted)."""
    current = start
    compiled: Compiled | None = None
    cost = math.nan
    for _ in range(SIM_FIT_ROUNDS):
        compiled = compile_problems(problems, start.arrival_clustering, simulate_at=current)
        if compiled.matrix is None:
            raise InputError("calibrate", "rows", "no aggregated row could be simulated to fit on")
        fitted, cost = _fit_times(compiled.matrix, start, factors, len(problems), unpulled)
        before = {n: factor_value(current, n) for n in factors}
        moved = max((abs(factor_value(fitted, n) - v) / max(abs(v), 1e-12) for n, v in before.items()), default=0.0)
        current = fitted
        if moved <= SIM_FIT_TOLERANCE:
            break
    assert compiled is not None and compiled.matrix is not None
    return FitResult(current, len(compiled.matrix.index), cost, compiled.unpredicted)


def fit_efficiency(
    problems: Sequence[Problem],
    *,
    start: Efficiency,
    factors: Sequence[str] | None = None,
    fit_clustering: bool = True,
    latency_model: str = "steady-state",
    unpulled: frozenset[str] = frozenset(),
) -> FitResult:
    """The factors that best predict the aggregated rows of ``problems`` (and nothing else); ``factors`` default
    to :data:`FIT_FACTORS` (plus the kernel fractions of the expert kernels the rows use). Each is pulled towards
    its value in ``start`` but those in ``unpulled``. ``latency_model``
    ``"simulated"`` fits through the scheduler simulation (:func:`_fit_simulated`)."""
    factors = FIT_FACTORS if factors is None else factors
    if latency_model not in LATENCY_MODELS:
        raise InputError("--latency-model", "latency_model", f"must be one of {', '.join(LATENCY_MODELS)}")
    if latency_model == SIMULATED:
        return _fit_simulated(problems, start, factors, unpulled)
    cache: dict[float, tuple[Efficiency, float, Compiled]] = {}

    def solve(clustering: float) -> tuple[Efficiency, float, Compiled]:
        key = round(clustering, 4)
        if key not in cache:
            compiled = compile_problems(problems, key)
            if compiled.matrix is None:
                raise InputError("calibrate", "rows", "no aggregated row could be predicted to fit on")
            eff, cost = _fit_times(compiled.matrix, replace(start, arrival_clustering=key), factors,
                                   len(problems), unpulled)
            cache[key] = (eff, cost, compiled)
        return cache[key]

    if fit_clustering:
        # A coarse grid first (the loss is not convex in the cohort size), then a bounded refinement.
        grid = [0.0, 0.05, 0.1, 0.2, 0.35, 0.5, 0.75, 1.0]
        best = min(grid, key=lambda c: solve(c)[1])
        i = grid.index(best)
        lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
        if hi > lo:
            from scipy.optimize import minimize_scalar  # only a fit of the cohort size needs it

            found = minimize_scalar(lambda c: solve(float(c))[1], bounds=(lo, hi), method="bounded",
                                    options={"xatol": 0.01, "maxiter": 12})
            best = min([best, round(float(found.x), 4)], key=lambda c: solve(c)[1])
    else:
        best = start.arrival_clustering
    eff, cost, compiled = solve(best)
    assert compiled.matrix is not None
    return FitResult(eff, len(compiled.matrix.index), cost, compiled.unpredicted)
