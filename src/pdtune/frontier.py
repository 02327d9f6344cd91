"""Pareto frontiers of serving sweeps, the envelope across deployments, xPyD rate matching, the SLA pick.

Every point of a sweep is one deployment at one concurrency, scored on two axes that both want to be
large: tokens/s per GPU (what the GPUs cost) and tokens/s per user (how interactive it feels). A point is
*dominated* when another point is at least as good on both axes and better on one; the *frontier* is what
is left.

Across deployments the frontier of the union is the *upper envelope*. Each of its points is reachable only
by the deployment that measured it, at the concurrency it was measured at, so the envelope is a staircase
of labelled points, never a line drawn between two deployments.

Conventions used throughout (chapters 5-7 rely on them):

* Rows follow the tidy results schema of ``design.md``; ``tps_per_gpu`` is total tokens/s over all GPUs,
  ``tps_per_user`` is ``1000 / tpot_ms_p50``.
* Rows are labelled by :func:`deployment_label`, unless the frame already carries a complete
  ``deployment`` column (rate-matched frames do), which is then used as is.
* Exactly equal points: the frontier keeps one, the row with the fewest GPUs, then the smallest
  deployment label, concurrency, source and path, so the answer does not depend on row order.
* NaN or infinite values on an axis are bad input: :class:`~pdtune.errors.InputError` naming the row's file.
* Accuracy is a fraction in [0, 1] (GSM8K 95 % is ``0.95``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from pdtune.errors import InputError

X_AXIS = "tps_per_user"
Y_AXIS = "tps_per_gpu"

#: Columns of a rate-matched frame, in order: the tidy schema (with ``output_tps_per_decode_gpu`` and
#: ``modeled``, as :mod:`pdtune.results` loads it), then the deployment label and the provenance that only a
#: prediction has (which isolated points were combined, and which side limits the rate).
RATE_MATCH_COLUMNS: tuple[str, ...] = (
    "source", "path", "model", "mode", "topology", "prefill_topology", "decode_topology",
    "n_prefill_workers", "n_decode_workers", "gpus_prefill", "gpus_decode", "gpus_total", "mtp_tokens",
    "isl", "osl", "concurrency", "total_tps", "output_tps", "ttft_ms_p50", "ttft_ms_p99",
    "tpot_ms_p50", "tpot_ms_mean", "tpot_ms_p99", "tps_per_gpu", "tps_per_user", "accuracy",
    "output_tps_per_decode_gpu", "modeled", "deployment", "prefill_concurrency", "decode_concurrency", "bottleneck",
)

# Exactly equal points are resolved by these columns, in this order (those present are used).
_TIE_BREAK = ("gpus_total", "deployment", "concurrency", "source", "path")


# --------------------------------------------------------------------------------------------------
# The 2-D frontier
# --------------------------------------------------------------------------------------------------


def pareto_frontier(x: Iterable[float] | np.ndarray, y: Iterable[float] | np.ndarray) -> np.ndarray:
    """Indices of the points not dominated when both ``x`` and ``y`` are maximized.

    The indices come in order of increasing ``x`` (hence decreasing ``y``). Of several exactly equal
    frontier points only the lowest index is returned. One stable sort and linear passes: O(n log n).
    Raises :class:`InputError` on NaN or infinite values, or arrays of different lengths.
    """
    xs = _finite_array(x, "x")
    ys = _finite_array(y, "y")
    if xs.shape != ys.shape:
        raise InputError("pareto_frontier", "y", f"has {ys.size} values but x has {xs.size}")
    n = xs.size
    if n == 0:
        return np.empty(0, dtype=np.intp)

    order = np.argsort(xs, kind="stable")  # equal x keep index order: this is what makes ties deterministic
    xs_sorted = xs[order]
    ys_sorted = ys[order]
    starts = np.flatnonzero(np.r_[True, xs_sorted[1:] != xs_sorted[:-1]])
    group_best = np.maximum.reduceat(ys_sorted, starts)
    # A group of equal x survives only if its best y beats every y at a strictly larger x.
    best_to_right = np.maximum.accumulate(group_best[::-1])[::-1]
    beyond = np.r_[best_to_right[1:], -np.inf]
    group_kept = group_best > beyond
    group_of = np.repeat(np.arange(starts.size), np.diff(np.r_[starts, n]))
    candidate = np.flatnonzero(group_kept[group_of] & (ys_sorted == group_best[group_of]))
    # Several exactly equal points: the first in stable order, i.e. the lowest index.
    first = np.r_[True, group_of[candidate[1:]] != group_of[candidate[:-1]]]
    return order[candidate[first]]


def _finite_array(values: Iterable[float] | np.ndarray, name: str) -> np.ndarray:
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError("pareto_frontier", name, "expected numbers") from None
    if arr.ndim != 1:
        raise InputError("pareto_frontier", name, f"expected a 1-D sequence, got {arr.ndim}-D")
    bad = np.flatnonzero(~np.isfinite(arr))
    if bad.size:
        raise InputError("pareto_frontier", name, f"value {arr[bad[0]]} at index {bad[0]} is not finite")
    return arr


def frontier(df: pd.DataFrame, x: str = X_AXIS, y: str = Y_AXIS) -> pd.DataFrame:
    """The rows of ``df`` on the Pareto frontier of columns ``x`` and ``y`` (both maximized).

    All columns and the original index are kept; rows come in order of increasing ``x``. Exactly equal
    points keep one row, chosen by the tie rule in the module docstring.
    """
    xs = _column_values(df, x)
    ys = _column_values(df, y)
    picked = pareto_frontier(xs, ys)  # one row per distinct frontier point, increasing x
    if picked.size == 0:
        return df.iloc[picked]
    # Rows exactly equal to a frontier point ("twins") are few; only they need the tie rule.
    fx, fy = xs[picked], ys[picked]
    slot = np.minimum(np.searchsorted(fx, xs), fx.size - 1)
    twins = np.flatnonzero((fx[slot] == xs) & (fy[slot] == ys))
    if twins.size == picked.size:
        return df.iloc[picked]
    by_rule = twins[_tie_order(df.iloc[twins])]
    by_rule = by_rule[np.argsort(slot[by_rule], kind="stable")]
    first = np.r_[True, slot[by_rule][1:] != slot[by_rule][:-1]]
    return df.iloc[by_rule[first]]


def _tie_order(df: pd.DataFrame) -> np.ndarray:
    """Row positions sorted by the tie-break columns (stable, so fully equal rows keep their order)."""
    keys = [c for c in _TIE_BREAK if c in df.columns]
    if not keys:
        return np.arange(len(df))
    frame = df[keys].reset_index(drop=True)
    for key in keys:
        if not pd.api.types.is_numeric_dtype(frame[key]):
            frame[key] = frame[key].astype("string")  # mixed str/None sort without a TypeError
    return frame.sort_values(keys, kind="stable", na_position="last").index.to_numpy()


def _column_values(df: pd.DataFrame, column: str, *, positive: bool = False) -> np.ndarray:
    """A numeric column as float64; NaN, inf (or, when asked, values <= 0) raise naming the row's file."""
    if column not in df.columns:
        raise InputError(_first_source(df), column, "column missing")
    values = pd.to_numeric(df[column], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    bad = ~np.isfinite(values)
    if positive:
        bad |= values <= 0
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        need = "a finite number > 0" if positive else "a finite number"
        raise InputError(_row_source(df, i), column,
                         f"expected {need} at concurrency {_row_concurrency(df, i)}, got {df[column].iloc[i]!r}")
    return values


def _row_source(df: pd.DataFrame, i: int) -> str:
    if "path" in df.columns and isinstance(df["path"].iloc[i], str) and df["path"].iloc[i]:
        return df["path"].iloc[i]
    return "results"


def _first_source(df: pd.DataFrame) -> str:
    return _row_source(df, 0) if len(df) else "results"


def _row_concurrency(df: pd.DataFrame, i: int) -> str:
    return str(df["concurrency"].iloc[i]) if "concurrency" in df.columns else "?"


# --------------------------------------------------------------------------------------------------
# Deployment labels
# --------------------------------------------------------------------------------------------------


def deployment_label(df: pd.DataFrame) -> pd.Series:
    """A readable label per row naming the deployment it measured.

    Disaggregated rows (``mode == "disagg"``, or no mode but both role topologies):
    ``"{n_prefill_workers}x{prefill_topology} : {n_decode_workers}x{decode_topology}"``, e.g.
    ``3xTP2DP4+EP : 1xTEP8``; other rows: ``topology``. ``+MTP`` is appended when ``mtp_tokens > 0``
    (speculative decoding belongs to the decode side, so it ends the label). A role whose topology is
    missing is named by its GPU count (``8 GPUs``); a row with neither raises :class:`InputError`.
    """
    labels = [_row_label(row, i, df) for i, row in enumerate(df.to_dict("records"))]
    return pd.Series(labels, index=df.index, name="deployment", dtype=object)


def _row_label(row: dict[str, Any], i: int, df: pd.DataFrame) -> str:
    mtp = _number(row.get("mtp_tokens"))
    suffix = "+MTP" if mtp is not None and mtp > 0 else ""
    mode = row.get("mode")
    disagg = mode == "disagg" if _present(mode) else (
        _present(row.get("prefill_topology")) and _present(row.get("decode_topology")))
    if not disagg:
        return _role(row, "topology", "gpus_total", None, i, df) + suffix
    prefill = _role(row, "prefill_topology", "gpus_prefill", "n_prefill_workers", i, df)
    decode = _role(row, "decode_topology", "gpus_decode", "n_decode_workers", i, df)
    return f"{prefill} : {decode}{suffix}"


def _disagg_label(n_prefill: int, prefill: str, n_decode: int, decode: str, suffix: str) -> str:
    """The label of ``n_prefill`` workers of topology ``prefill`` with ``n_decode`` of ``decode``."""
    return f"{n_prefill}x{prefill} : {n_decode}x{decode}{suffix}"


def _role(row: dict[str, Any], topo_key: str, gpus_key: str, workers_key: str | None, i: int,
          df: pd.DataFrame) -> str:
    """One side of a label: ``3xTP2DP4+EP``; without a topology, GPUs per worker (``2x8 GPUs``) or, when
    the workers are unknown, the side's GPUs (``16 GPUs``)."""
    workers = _number(row.get(workers_key)) if workers_key else None
    topo = row.get(topo_key)
    if _present(topo) and str(topo).strip():
        name = str(topo).strip()
        return name if workers is None else f"{int(workers)}x{name}"
    gpus = _number(row.get(gpus_key))
    if gpus is None or gpus <= 0:
        raise InputError(_row_source(df, i), topo_key, "cannot label the deployment: no topology and no GPU count")
    if workers is not None and workers > 0 and gpus % workers == 0:
        return f"{int(workers)}x{int(gpus // workers)} GPUs"
    return f"{int(gpus)} GPUs"


def _present(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value)) and value is not pd.NA


def _number(value: Any) -> float | None:
    if not _present(value):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def with_deployment(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with a ``deployment`` column: labels already there are kept, missing ones come from
    :func:`deployment_label` (so measured rows concatenated with rate-matched ones get labelled)."""
    if "deployment" not in df.columns:
        return df.assign(deployment=deployment_label(df))
    missing = df["deployment"].isna().to_numpy()
    if not missing.any():
        return df
    out = df.assign(deployment=df["deployment"].astype(object))
    out.loc[missing, "deployment"] = deployment_label(df[missing]).to_numpy()
    return out


# --------------------------------------------------------------------------------------------------
# Envelope, best per concurrency
# --------------------------------------------------------------------------------------------------


def upper_envelope(df: pd.DataFrame) -> pd.DataFrame:
    """The step envelope of all deployments in ``df``: its Pareto frontier with provenance first.

    Columns ``deployment, concurrency, tps_per_user, tps_per_gpu`` lead, the rest of the row follows;
    rows are ordered by increasing tokens/s per user. Between two envelope points the best reachable
    throughput is that of the next point to the right (see :func:`envelope_at`), not a blend of two
    deployments. ``df`` must hold one workload (one ISL/OSL pair).
    """
    _require_one_workload(df, "upper_envelope")
    front = frontier(with_deployment(df))
    lead = ["deployment", "concurrency", X_AXIS, Y_AXIS]
    return front[[c for c in lead if c in front.columns] + [c for c in front.columns if c not in lead]]


def envelope_at(envelope: pd.DataFrame, tps_per_user: Iterable[float] | np.ndarray) -> np.ndarray:
    """Best tokens/s per GPU reachable at *at least* each given tokens/s per user (NaN where none is).

    ``envelope`` is a frontier (as from :func:`upper_envelope`): the answer is the throughput of the
    first envelope point at or right of each query, which is what makes the envelope a staircase.
    """
    fx = _column_values(envelope, X_AXIS)
    fy = _column_values(envelope, Y_AXIS)
    queries = np.asarray(tps_per_user, dtype=np.float64)
    order = np.argsort(fx, kind="stable")
    fx, fy = fx[order], fy[order]
    # Best y among points with x >= q: a suffix maximum, so any frame (not only a frontier) answers right.
    best_from = np.maximum.accumulate(fy[::-1])[::-1] if fy.size else fy
    pos = np.searchsorted(fx, queries, side="left")
    out = np.full(queries.shape, np.nan)
    inside = pos < fx.size
    out[inside] = best_from[pos[inside]]
    return out


def best_per_concurrency(df: pd.DataFrame, metric: str = Y_AXIS) -> pd.DataFrame:
    """For each concurrency of an isolated sweep, the deployment with the largest ``metric``.

    One row per concurrency, in increasing order, all columns kept plus ``deployment``. Ties go to the
    deployment with fewer GPUs, then the smaller label. ``df`` must hold one workload.
    """
    _require_one_workload(df, "best_per_concurrency")
    labelled = with_deployment(df)
    values = _column_values(labelled, metric)
    _column_values(labelled, "concurrency")
    if len(labelled) == 0:
        return labelled
    ranked = labelled.assign(_metric=values).iloc[_tie_order(labelled)]
    # Stable sort on -metric after the tie order: the first row per concurrency is the winner.
    ranked = ranked.sort_values("_metric", ascending=False, kind="stable")
    best = ranked.drop_duplicates("concurrency", keep="first").sort_values("concurrency", kind="stable")
    return best.drop(columns="_metric")


def winner_runs(best: pd.DataFrame, column: str = "deployment") -> pd.DataFrame:
    """Consecutive concurrencies won by the same ``column`` value, merged: who wins where, one row each.

    ``best`` is :func:`best_per_concurrency`'s frame (or any frame with ``concurrency`` and ``column``, in
    concurrency order); the result has ``column``, ``from_concurrency``, ``to_concurrency`` and ``points``.
    """
    runs: list[dict[str, Any]] = []
    for winner, concurrency in zip(best[column], best["concurrency"], strict=True):
        if runs and runs[-1][column] == winner:
            runs[-1]["to_concurrency"] = concurrency
            runs[-1]["points"] += 1
        else:
            runs.append({column: winner, "from_concurrency": concurrency, "to_concurrency": concurrency, "points": 1})
    return pd.DataFrame(runs, columns=[column, "from_concurrency", "to_concurrency", "points"])


def _require_one_workload(df: pd.DataFrame, what: str) -> None:
    """A frontier across different ISL/OSL compares different work: refuse it."""
    keys = [c for c in ("isl", "osl") if c in df.columns]
    if not keys or len(df) == 0:
        return
    workloads = df[keys].dropna().drop_duplicates()
    if len(workloads) > 1:
        pairs = ", ".join("/".join(str(_as_int(v)) for v in row) for row in workloads.itertuples(index=False))
        first = workloads.iloc[0]
        known = df[keys].notna().all(axis=1)
        odd = int(np.flatnonzero((known & ~(df[keys] == first).all(axis=1)).to_numpy())[0])
        raise InputError(_row_source(df, odd), "/".join(keys),
                         f"{what} needs one workload, got {pairs}; select one ISL/OSL first")


def _as_int(value: Any) -> Any:
    number = _number(value)
    return int(number) if number is not None and number.is_integer() else value


# --------------------------------------------------------------------------------------------------
# Rate matching: predicted xPyD curves from isolated prefill and decode sweeps
# --------------------------------------------------------------------------------------------------


def rate_match(prefill_df: pd.DataFrame, decode_df: pd.DataFrame, osl: int, max_workers: int = 32, *,
               isl: int | None = None) -> pd.DataFrame:
    """Predict disaggregated deployments ``x`` prefill : ``y`` decode workers from isolated sweeps.

    For a prefill point at concurrency ``B_p`` and a decode point at ``B_d`` (requests/s):

    * prefill capacity ``P = B_p * 1000 / TTFT_p``; decode capacity ``D = B_d * 1000 / (TPOT * (OSL - 1))``;
    * system rate ``R = min(x * P, y * D)``; tokens/s ``R * (ISL + OSL)`` over ``x * g_p + y * g_d`` GPUs;
    * tokens/s per user ``1000 / TPOT``; concurrency by Little's law ``R * (TTFT_p + TPOT * (OSL - 1)) / 1000``.

    Every ``x, y`` in ``1..max_workers`` is evaluated for every pair of prefill and decode deployments
    (an isolated deployment is a ``topology``, with ``mtp_tokens`` on the decode side).
    Within one prefill deployment all its points share GPUs and tokens/s per user, so for each decode point
    only the best rate can reach any frontier: the row kept uses the lightest prefill point (lowest TTFT)
    that still delivers ``R``; the others are dominated. Hence one row per (prefill deployment, decode
    deployment, x, y, decode point), ordered so. ``k*x : k*y`` is computed from ``x : y`` so that its
    per-GPU numbers are bit-identical (the frontier then keeps the smaller deployment).

    The rows are modeled (``modeled=True``, ``mode="disagg"``); ``source`` names the isolated sweeps;
    ``prefill_concurrency``/``decode_concurrency`` name the isolated points combined and ``bottleneck``
    the side that limits ``R`` (``prefill``, ``decode`` or ``balanced``). Not modeled: KV transfer time,
    and the context length of the isolated runs (decode sweeps run at a short ISL). ``isl`` defaults to
    the prefill sweep's ISL. Text columns are pandas categoricals (categories sorted), to keep a large
    frame small and fast.
    """
    if isinstance(osl, bool) or not isinstance(osl, (int, np.integer)) or osl < 2:
        raise InputError("rate_match", "osl",
                         f"expected a whole number >= 2 (decode makes OSL - 1 steps), got {osl!r}")
    if isinstance(max_workers, bool) or not isinstance(max_workers, (int, np.integer)) or max_workers < 1:
        raise InputError("rate_match", "max_workers", f"expected a whole number >= 1, got {max_workers!r}")
    osl, max_workers = int(osl), int(max_workers)
    isl = _target_isl(prefill_df, isl)
    prefills = _isolated_groups(prefill_df, "ttft_ms_p50", role="prefill")
    decodes = _isolated_groups(decode_df, "tpot_ms_p50", role="decode")
    for p in prefills:
        p.capacity = p.concurrency * 1000.0 / p.latency
    for d in decodes:
        d.capacity = d.concurrency * 1000.0 / (d.latency * (osl - 1))
    ratios = _Ratios(max_workers)
    pairs = [(p, d) for p in prefills for d in decodes]
    n_rows = sum(ratios.count * d.capacity.size for _, d in pairs)  # type: ignore[union-attr]

    # One preallocated buffer per dtype, filled pair by pair: no concatenation, no block consolidation.
    floats = np.empty((len(_RM_FLOAT), n_rows))
    ints = np.empty((len(_RM_INT), n_rows), dtype=np.int64)
    pair_of = np.empty(n_rows, dtype=np.int64)
    ratio_of = np.empty(n_rows, dtype=np.int64)
    bottleneck = np.empty(n_rows, dtype=np.int8)
    start = 0
    for k, (p, d) in enumerate(pairs):
        stop = start + ratios.count * d.capacity.size  # type: ignore[union-attr]
        _match_pair(p, d, ratios, isl, osl, floats[:, start:stop], ints[:, start:stop],
                    ratio_of[start:stop], bottleneck[start:stop])
        pair_of[start:stop] = k
        start = stop

    frame = pd.DataFrame(floats.T, columns=list(_RM_FLOAT), copy=False)
    models = [" / ".join(sorted({m for m in (p.model, d.model) if m})) or None for p, d in pairs]
    mtp = ["+MTP" if d.mtp_tokens > 0 else "" for _, d in pairs]
    labels = [_disagg_label(x, p.topology, y, d.topology, suffix) for (p, d), suffix in zip(pairs, mtp)
              for x, y in ratios.xy]
    text = {
        "source": _categorical(pair_of, [f"predicted by rate matching: prefill sweep [{p.source or p.path}] "
                                         f"+ decode sweep [{d.source or d.path}]" for p, d in pairs]),
        "path": _categorical(pair_of, [" + ".join(s for s in (p.path, d.path) if s) or None for p, d in pairs]),
        "model": _categorical(pair_of, models),
        "mode": _categorical(np.zeros(n_rows, dtype=np.int64), ["disagg"]),
        "topology": _categorical(np.zeros(n_rows, dtype=np.int64), [None]),
        "prefill_topology": _categorical(pair_of, [p.topology for p, _ in pairs]),
        "decode_topology": _categorical(pair_of, [d.topology for _, d in pairs]),
        "deployment": _categorical(pair_of * ratios.count + ratio_of, labels),
        "bottleneck": _categorical(bottleneck.astype(np.int64), list(_BOTTLENECK)),
    }
    columns: dict[str, Any] = {**text, **dict(zip(_RM_INT, ints)),
                               "modeled": np.ones(n_rows, dtype=bool)}
    for position, name in enumerate(RATE_MATCH_COLUMNS):
        if name not in frame.columns:
            frame.insert(position, name, columns[name])
    return frame


# Column groups of a rate-matched frame by dtype (each group filled as one buffer).
_RM_FLOAT = tuple(c for c in RATE_MATCH_COLUMNS if c in (
    "mtp_tokens", "concurrency", "total_tps", "output_tps", "ttft_ms_p50", "ttft_ms_p99", "tpot_ms_p50",
    "tpot_ms_mean", "tpot_ms_p99", "tps_per_gpu", "tps_per_user", "accuracy", "output_tps_per_decode_gpu",
    "prefill_concurrency", "decode_concurrency"))
_RM_INT = ("n_prefill_workers", "n_decode_workers", "gpus_prefill", "gpus_decode", "gpus_total", "isl", "osl")
_BOTTLENECK = ("prefill", "decode", "balanced")


def _categorical(codes: np.ndarray, values: list[str | None]) -> pd.Categorical:
    """Rows pointing into ``values`` by ``codes`` as a categorical whose categories sort like strings."""
    present = sorted({v for v in values if v is not None})
    lookup = {v: i for i, v in enumerate(present)}
    code_of = np.array([lookup[v] if v is not None else -1 for v in values], dtype=np.int64)
    return pd.Categorical.from_codes(code_of[codes], categories=pd.Index(present, dtype=object))


class _Ratios:
    """Every x : y with x, y in 1..max_workers, each with its reduced form x/g : y/g and g = gcd(x, y)."""

    def __init__(self, max_workers: int) -> None:
        grid = np.arange(1, max_workers + 1)
        x, y = (a.ravel() for a in np.meshgrid(grid, grid, indexing="ij"))
        g = np.gcd(x, y)
        self.xy: list[tuple[int, int]] = list(zip(x.tolist(), y.tolist()))
        self.count = x.size
        self.x, self.y, self.scale = x, y, g
        self.reduced, inverse = np.unique(np.column_stack([x // g, y // g]), axis=0, return_inverse=True)
        self.base = inverse.ravel()
        self._rows: dict[int, _RatioRows] = {}

    def rows(self, n_points: int) -> _RatioRows:
        """Per-row indices for ``n_points`` decode points under every ratio (cached: pairs share them)."""
        if n_points not in self._rows:
            ratio = np.repeat(np.arange(self.count), n_points)
            point = np.tile(np.arange(n_points), self.count)
            self._rows[n_points] = _RatioRows(
                ratio=ratio, point=point, flat_base_point=self.base[ratio] * n_points + point,
                scale=self.scale[ratio].astype(np.float64), x=self.x[ratio], y=self.y[ratio])
        return self._rows[n_points]


@dataclass(frozen=True)
class _RatioRows:
    ratio: np.ndarray  # row -> index of x : y
    point: np.ndarray  # row -> decode point
    flat_base_point: np.ndarray  # row -> flat index into (reduced ratio, decode point) arrays
    scale: np.ndarray  # row -> gcd(x, y)
    x: np.ndarray
    y: np.ndarray


@dataclass
class _Sweep:
    """One isolated deployment's points (arrays in row order) with what rate matching needs."""

    topology: str
    gpus: int
    mtp_tokens: float
    concurrency: np.ndarray
    latency: np.ndarray  # TTFT for prefill, TPOT for decode (ms)
    extra: dict[str, np.ndarray]
    source: str
    path: str
    model: str | None
    capacity: np.ndarray | None = None  # requests/s of one worker at each point


def _target_isl(prefill_df: pd.DataFrame, isl: int | None) -> int:
    if isl is not None:
        if isinstance(isl, bool) or not isinstance(isl, (int, np.integer)) or isl < 1:
            raise InputError("rate_match", "isl", f"expected a whole number >= 1, got {isl!r}")
        return int(isl)
    if "isl" not in prefill_df.columns or prefill_df["isl"].dropna().nunique() != 1:
        raise InputError(_first_source(prefill_df), "isl",
                         "the prefill sweep does not have exactly one ISL; pass isl= explicitly")
    return int(prefill_df["isl"].dropna().iloc[0])


def _isolated_groups(df: pd.DataFrame, latency_col: str, *, role: str) -> list[_Sweep]:
    if len(df) == 0:
        return []
    conc = _column_values(df, "concurrency", positive=True)
    latency = _column_values(df, latency_col, positive=True)
    gpus = _column_values(df, "gpus_total", positive=True)
    whole = np.flatnonzero(gpus != np.round(gpus))
    if whole.size:
        raise InputError(_row_source(df, int(whole[0])), "gpus_total", f"expected whole GPUs, got {gpus[whole[0]]}")
    if "topology" not in df.columns:
        raise InputError(_first_source(df), "topology", f"rate matching needs the {role} sweep's topology")
    topo = df["topology"].to_numpy(dtype=object)
    for i, t in enumerate(topo):
        if not (_present(t) and str(t).strip()):
            raise InputError(_row_source(df, i), "topology", f"rate matching needs the {role} sweep's topology")
    mtp = np.zeros(len(df))
    if role == "decode" and "mtp_tokens" in df.columns:
        mtp = pd.to_numeric(df["mtp_tokens"], errors="coerce").fillna(0).to_numpy(dtype=np.float64)
    extra_cols = ("ttft_ms_p99",) if role == "prefill" else ("tpot_ms_mean", "tpot_ms_p99")
    extras = {c: (pd.to_numeric(df[c], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
                  if c in df.columns else np.full(len(df), np.nan)) for c in extra_cols}
    keys = pd.DataFrame({"topology": [str(t).strip() for t in topo], "mtp": mtp})
    groups: list[_Sweep] = []
    for (name, mtp_tokens), rows in sorted(keys.groupby(["topology", "mtp"]).indices.items()):
        rows = np.sort(rows)
        if np.unique(gpus[rows]).size != 1:
            raise InputError(_row_source(df, int(rows[0])), "gpus_total",
                             f"{role} deployment {name} has several GPU counts {sorted(set(gpus[rows]))}")
        groups.append(_Sweep(
            topology=name, gpus=int(gpus[rows[0]]), mtp_tokens=float(mtp_tokens),
            concurrency=conc[rows], latency=latency[rows], extra={c: v[rows] for c, v in extras.items()},
            source=_joined(df, "source", rows), path=_joined(df, "path", rows),
            model=_joined(df, "model", rows) or None,
        ))
    return groups


def _joined(df: pd.DataFrame, column: str, rows: np.ndarray) -> str:
    if column not in df.columns:
        return ""
    values = sorted({str(v) for v in df[column].to_numpy(dtype=object)[rows] if _present(v)})
    return ", ".join(values)


def _match_pair(p: _Sweep, d: _Sweep, ratios: _Ratios, isl: int, osl: int, floats: np.ndarray,
                ints: np.ndarray, ratio_of: np.ndarray, bottleneck: np.ndarray) -> None:
    """Fill one (prefill deployment, decode deployment) block: rows ordered by (x, y, decode point)."""
    assert p.capacity is not None and d.capacity is not None
    # Prefill points by capacity; for each position the lightest point (lowest TTFT, then concurrency,
    # then row) among it and all with more capacity, i.e. among those that can keep up with a given rate.
    n_p = p.capacity.size
    by_capacity = np.lexsort((np.arange(n_p), p.concurrency, p.latency, p.capacity))
    capacity_sorted = p.capacity[by_capacity]
    lightness = np.empty(n_p, dtype=np.int64)
    lightness[np.lexsort((np.arange(n_p), p.concurrency, p.latency))] = np.arange(n_p)
    lightest_from = np.minimum.accumulate(lightness[by_capacity][::-1])[::-1]
    row_of_lightness = np.argsort(lightness)

    # Everything on the reduced ratio x/g : y/g, then scaled by g: per-GPU numbers equal for multiples.
    xr = ratios.reduced[:, 0:1]
    yr = ratios.reduced[:, 1:2]
    prefill_rate = xr * capacity_sorted[-1]  # (m, 1) requests/s
    decode_rate = yr * d.capacity  # (m, n_d)
    rate_r = np.minimum(prefill_rate, decode_rate)
    chosen = np.empty(rate_r.shape, dtype=np.int64)
    for x_val in np.unique(ratios.reduced[:, 0]):
        sel = ratios.reduced[:, 0] == x_val
        # the first prefill position whose x * P reaches the rate (x * P_max always does)
        pos = np.searchsorted(x_val * capacity_sorted, rate_r[sel], side="left")
        chosen[sel] = row_of_lightness[lightest_from[pos]]
    limit = np.where(prefill_rate < decode_rate, 0, np.where(prefill_rate > decode_rate, 1, 2))
    tokens = float(isl + osl)
    per_gpu_r = rate_r * tokens / (xr * p.gpus + yr * d.gpus)

    rows = ratios.rows(d.capacity.size)
    flat = rows.flat_base_point
    point = rows.point
    pp = chosen.ravel()[flat]
    rate = rate_r.ravel()[flat] * rows.scale
    tpot = d.latency[point]
    ttft = p.latency[pp]
    values = {
        "mtp_tokens": d.mtp_tokens,
        "concurrency": rate * (ttft + tpot * (osl - 1)) / 1000.0,
        "total_tps": rate * tokens,
        "output_tps": rate * osl,
        "ttft_ms_p50": ttft,
        "ttft_ms_p99": p.extra["ttft_ms_p99"][pp],
        "tpot_ms_p50": tpot,
        "tpot_ms_mean": d.extra["tpot_ms_mean"][point],
        "tpot_ms_p99": d.extra["tpot_ms_p99"][point],
        "tps_per_gpu": per_gpu_r.ravel()[flat],
        "tps_per_user": 1000.0 / tpot,
        "accuracy": np.nan,
        "output_tps_per_decode_gpu": rate * osl / (rows.y * d.gpus),
        "prefill_concurrency": p.concurrency[pp],
        "decode_concurrency": d.concurrency[point],
    }
    for j, name in enumerate(_RM_FLOAT):
        floats[j] = values[name]
    x, y = rows.x, rows.y
    whole = {"n_prefill_workers": x, "n_decode_workers": y, "gpus_prefill": x * p.gpus,
             "gpus_decode": y * d.gpus, "gpus_total": x * p.gpus + y * d.gpus, "isl": isl, "osl": osl}
    for j, name in enumerate(_RM_INT):
        ints[j] = whole[name]
    ratio_of[:] = rows.ratio
    bottleneck[:] = limit.ravel()[flat]


def predicted_vs_measured(predicted: pd.DataFrame, measured: pd.DataFrame, *,
                          same_deployment: bool = True) -> pd.DataFrame:
    """Each measured point beside the predicted throughput at its tokens/s per user.

    The prediction is read off the predicted staircase (:func:`envelope_at`) of the same deployment label
    (``same_deployment=True``) or of all predicted deployments. Columns: ``deployment, concurrency,
    tps_per_user, tps_per_gpu`` (measured), ``predicted_tps_per_gpu`` (NaN where the prediction never
    reaches that interactivity or the deployment was not predicted) and ``predicted_over_measured``.
    """
    meas = with_deployment(measured)
    pred = with_deployment(predicted)
    mx = _column_values(meas, X_AXIS)
    my = _column_values(meas, Y_AXIS)
    _column_values(pred, X_AXIS)
    _column_values(pred, Y_AXIS)
    out = pd.DataFrame({
        "deployment": meas["deployment"].to_numpy(dtype=object),
        "concurrency": meas["concurrency"].to_numpy() if "concurrency" in meas.columns else np.nan,
        X_AXIS: mx,
        Y_AXIS: my,
    }, index=meas.index)
    predicted_y = np.full(len(meas), np.nan)
    if same_deployment:
        for label, rows in meas.groupby("deployment", sort=True).indices.items():
            mine = pred[pred["deployment"] == label]
            if len(mine):
                predicted_y[rows] = envelope_at(mine, mx[rows])
    elif len(pred):
        predicted_y = envelope_at(pred, mx)
    out["predicted_tps_per_gpu"] = predicted_y
    out["predicted_over_measured"] = predicted_y / my
    return out


# --------------------------------------------------------------------------------------------------
# The SLA pick
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SlaPick:
    """The best point under one service-level floor.

    ``met`` is False when no point reaches ``minimum`` (then the point fields are None and
    ``best_available`` says how close the data gets); this is a result, not an error, so a chapter can
    print "nothing meets it".
    """

    constraint: str  # the floored column: "tps_per_user" or "tps_per_gpu"
    minimum: float
    objective: str  # the column maximized under the floor
    met: bool
    candidates: int  # rows meeting the floor
    best_available: float  # the largest value of ``constraint`` in the data (NaN for no data)
    deployment: str | None = None
    concurrency: float | None = None
    tps_per_gpu: float | None = None
    tps_per_user: float | None = None
    modeled: bool | None = None
    source: str | None = None
    path: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in self.__dict__.items()}


def sla_pick(df: pd.DataFrame, min_tps_per_user: float | None = None,
             min_tps_per_gpu: float | None = None) -> SlaPick:
    """Give exactly one floor: the most throughput per GPU with at least ``min_tps_per_user``, or the most
    tokens/s per user with at least ``min_tps_per_gpu``. Ties resolve as on the frontier (fewest GPUs
    first); the chosen point always lies on :func:`upper_envelope`. No qualifying point: ``met=False``."""
    if (min_tps_per_user is None) == (min_tps_per_gpu is None):
        raise InputError("sla_pick", "min_tps_per_user/min_tps_per_gpu", "give exactly one of the two floors")
    if min_tps_per_user is not None:
        constraint, objective, minimum = X_AXIS, Y_AXIS, min_tps_per_user
    else:
        constraint, objective, minimum = Y_AXIS, X_AXIS, min_tps_per_gpu
    assert minimum is not None
    if isinstance(minimum, bool) or not math.isfinite(float(minimum)):
        raise InputError("sla_pick", f"min_{constraint}", f"expected a finite number, got {minimum!r}")
    minimum = float(minimum)
    envelope = upper_envelope(df)
    all_values = _column_values(df, constraint)
    best_available = float(all_values.max()) if all_values.size else math.nan
    candidates = int((all_values >= minimum).sum())
    qualified = envelope[envelope[constraint].to_numpy(dtype=np.float64) >= minimum]
    if qualified.empty:
        return SlaPick(constraint, minimum, objective, False, candidates, best_available)
    # On a frontier the objective falls as the constraint rises, so the best qualifying point is the one
    # with the smallest qualifying constraint value.
    row = qualified.iloc[0] if constraint == X_AXIS else qualified.iloc[-1]
    return SlaPick(
        constraint, minimum, objective, True, candidates, best_available,
        deployment=str(row["deployment"]),
        concurrency=_number(row.get("concurrency")),
        tps_per_gpu=float(row[Y_AXIS]),
        tps_per_user=float(row[X_AXIS]),
        modeled=bool(row["modeled"]) if "modeled" in row.index and _present(row["modeled"]) else None,
        source=str(row["source"]) if "source" in row.index and _present(row["source"]) else None,
        path=str(row["path"]) if "path" in row.index and _present(row["path"]) else None,
    )


# --------------------------------------------------------------------------------------------------
# The accuracy gate
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class GateResult:
    """What the accuracy gate kept and why.

    ``kept``: rows of deployments at or above the threshold plus those with no accuracy recorded;
    ``excluded``: one row per failing deployment (``deployment, accuracy, rows``), accuracy being the
    lowest recorded for it; ``unmeasured``: deployments kept without an accuracy, listed so the book can
    say so.
    """

    threshold: float
    kept: pd.DataFrame
    excluded: pd.DataFrame
    unmeasured: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "threshold": self.threshold,
            "excluded": [{"deployment": r.deployment, "accuracy": float(r.accuracy), "rows": int(r.rows)}
                         for r in self.excluded.itertuples(index=False)],
            "unmeasured": list(self.unmeasured),
            "kept_rows": len(self.kept),
        }


def accuracy_gate(df: pd.DataFrame, threshold: float) -> GateResult:
    """Drop every deployment whose accuracy (a fraction; the lowest recorded per deployment) is below
    ``threshold``; the article gates on GSM8K at 0.95. Deployments without any accuracy are kept and
    listed in ``unmeasured``."""
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float, np.floating)) \
            or not 0 < float(threshold) <= 1:
        raise InputError("accuracy_gate", "threshold",
                         f"expected a fraction in (0, 1] (0.95 for 95 %), got {threshold!r}")
    threshold = float(threshold)
    labelled = with_deployment(df)
    if "accuracy" in labelled.columns:
        acc = pd.to_numeric(labelled["accuracy"], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    else:
        acc = np.full(len(labelled), np.nan)
    bad = np.flatnonzero(~np.isnan(acc) & ~((acc >= 0) & (acc <= 1)))
    if bad.size:
        i = int(bad[0])
        raise InputError(_row_source(labelled, i), "accuracy",
                         f"expected a fraction in [0, 1], got {acc[i]!r} (a percentage?)")
    per_deployment = pd.DataFrame({"deployment": labelled["deployment"].to_numpy(dtype=object), "accuracy": acc})
    summary = per_deployment.groupby("deployment", sort=True).agg(
        accuracy=("accuracy", "min"), rows=("accuracy", "size"))
    failing = summary[summary["accuracy"] < threshold]
    unmeasured = tuple(summary.index[summary["accuracy"].isna()])
    kept = labelled[~labelled["deployment"].isin(failing.index)]
    excluded = failing.reset_index()[["deployment", "accuracy", "rows"]]
    return GateResult(threshold, kept, excluded, unmeasured)
