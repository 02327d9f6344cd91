"""The upper envelope across deployments, read as a staircase, and the best deployment per concurrency.

The frontier of the union of every deployment's points is the *upper envelope*. Each of its points is
reachable only by the deployment that measured it, at the concurrency it was measured at, so the envelope
is a staircase of labelled points, never a line drawn between two deployments. An envelope, like the best
deployment per concurrency of an isolated sweep, compares one workload: frames with several ISL/OSL pairs
are refused.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from pdtune.errors import InputError
from pdtune.frontier.labels import as_number, with_deployment
from pdtune.frontier.pareto import X_AXIS, Y_AXIS, column_values, row_source, tie_order, frontier
from pdtune.results.schema import empty_frame


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
    fx = column_values(envelope, X_AXIS)
    fy = column_values(envelope, Y_AXIS)
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
    values = column_values(labelled, metric)
    column_values(labelled, "concurrency")
    if len(labelled) == 0:
        return labelled
    ranked = labelled.assign(_metric=values).iloc[tie_order(labelled)]
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
        raise InputError(row_source(df, odd), "/".join(keys),
                         f"{what} needs one workload, got {pairs}; select one ISL/OSL first")


def _as_int(value: Any) -> Any:
    number = as_number(value)
    return int(number) if number is not None and number.is_integer() else value


def envelope_steps(env: pd.DataFrame, *, from_zero: bool = True) -> pd.DataFrame:
    """The vertices of the envelope's staircase, for drawing it with straight segments.

    Between two envelope points ``(x_i, y_i)`` and ``(x_{i+1}, y_{i+1})`` (``x`` tokens/s per user rising,
    ``y`` throughput falling) the best reachable throughput is ``y_{i+1}``: whoever asks for more than
    ``x_i`` must run the deployment of point ``i+1``. So the line drops at ``x_i`` to ``y_{i+1}`` and runs
    flat to the next point; left of the first point it is flat at ``y_0`` from ``x = 0`` (unless
    ``from_zero`` is False). Nothing is drawn
    right of the last point, because nothing there is reachable. Each vertex carries the deployment and
    concurrency that deliver its level (``kind`` is ``point`` or ``corner``).
    """
    columns = ["order", "tps_per_user", "tps_per_gpu", "deployment", "concurrency", "kind"]
    if len(env) == 0:
        return empty_frame(columns)
    pts = env.sort_values("tps_per_user", kind="stable").reset_index(drop=True)
    first = {"tps_per_user": 0.0, "tps_per_gpu": float(pts.at[0, "tps_per_gpu"]),
             "deployment": pts.at[0, "deployment"], "concurrency": pts.at[0, "concurrency"], "kind": "corner"}
    rows = [first] if from_zero else []
    for i in range(len(pts)):
        x, y = float(pts.at[i, "tps_per_user"]), float(pts.at[i, "tps_per_gpu"])
        rows.append({"tps_per_user": x, "tps_per_gpu": y, "deployment": pts.at[i, "deployment"],
                     "concurrency": pts.at[i, "concurrency"], "kind": "point"})
        if i + 1 < len(pts):
            nxt = pts.iloc[i + 1]
            rows.append({"tps_per_user": x, "tps_per_gpu": float(nxt["tps_per_gpu"]),
                         "deployment": nxt["deployment"], "concurrency": nxt["concurrency"],
                         "kind": "corner"})
    out = pd.DataFrame(rows)
    out.insert(0, "order", range(len(out)))
    return out[columns]
