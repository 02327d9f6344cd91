"""The 2-D Pareto frontier of a sweep: the points no other point beats on both axes.

A point is one deployment at one concurrency, scored on tokens/s per GPU (what the GPUs cost) and tokens/s
per user (how interactive it feels), both to be maximized. A point is *dominated* when another is at least
as good on both and better on one; the *frontier* is what is left. Exactly equal points keep one row, the
one with the fewest GPUs, then the smallest deployment label, concurrency, source and path, so the answer
does not depend on row order. NaN or infinite values on an axis are bad input: :class:`InputError` naming
the row's file.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from pdtune.errors import InputError

X_AXIS = "tps_per_user"
Y_AXIS = "tps_per_gpu"

# Exactly equal points are resolved by these columns, in this order (those present are used).
_TIE_BREAK = ("gpus_total", "deployment", "concurrency", "source", "path")


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
    xs = column_values(df, x)
    ys = column_values(df, y)
    picked = pareto_frontier(xs, ys)  # one row per distinct frontier point, increasing x
    if picked.size == 0:
        return df.iloc[picked]
    # Rows exactly equal to a frontier point ("twins") are few; only they need the tie rule.
    fx, fy = xs[picked], ys[picked]
    slot = np.minimum(np.searchsorted(fx, xs), fx.size - 1)
    twins = np.flatnonzero((fx[slot] == xs) & (fy[slot] == ys))
    if twins.size == picked.size:
        return df.iloc[picked]
    by_rule = twins[tie_order(df.iloc[twins])]
    by_rule = by_rule[np.argsort(slot[by_rule], kind="stable")]
    first = np.r_[True, slot[by_rule][1:] != slot[by_rule][:-1]]
    return df.iloc[by_rule[first]]


def tie_order(df: pd.DataFrame) -> np.ndarray:
    """Row positions sorted by the tie-break columns (stable, so fully equal rows keep their order)."""
    keys = [c for c in _TIE_BREAK if c in df.columns]
    if not keys:
        return np.arange(len(df))
    frame = df[keys].reset_index(drop=True)
    for key in keys:
        if not pd.api.types.is_numeric_dtype(frame[key]):
            frame[key] = frame[key].astype("string")  # mixed str/None sort without a TypeError
    return frame.sort_values(keys, kind="stable", na_position="last").index.to_numpy()


def column_values(df: pd.DataFrame, column: str, *, positive: bool = False) -> np.ndarray:
    """A numeric column as float64; NaN, inf (or, when asked, values <= 0) raise naming the row's file."""
    if column not in df.columns:
        raise InputError(first_source(df), column, "column missing")
    values = pd.to_numeric(df[column], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    bad = ~np.isfinite(values)
    if positive:
        bad |= values <= 0
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        need = "a finite number > 0" if positive else "a finite number"
        raise InputError(row_source(df, i), column,
                         f"expected {need} at concurrency {_row_concurrency(df, i)}, got {df[column].iloc[i]!r}")
    return values


def row_source(df: pd.DataFrame, i: int) -> str:
    if "path" in df.columns and isinstance(df["path"].iloc[i], str) and df["path"].iloc[i]:
        return df["path"].iloc[i]
    return "results"


def first_source(df: pd.DataFrame) -> str:
    return row_source(df, 0) if len(df) else "results"


def _row_concurrency(df: pd.DataFrame, i: int) -> str:
    return str(df["concurrency"].iloc[i]) if "concurrency" in df.columns else "?"


def frontier_matches_brute_force(df: pd.DataFrame) -> bool:
    """Whether the O(n log n) frontier of ``df`` is the set of points no other point dominates (checked
    pair by pair, O(n^2): fine for the few hundred points of a sweep)."""
    if len(df) == 0:
        return True
    x = df["tps_per_user"].to_numpy(dtype=float)
    y = df["tps_per_gpu"].to_numpy(dtype=float)
    fast = {(x[i], y[i]) for i in pareto_frontier(x, y)}
    dominated = ((x[None, :] >= x[:, None]) & (y[None, :] >= y[:, None])
                 & ((x[None, :] > x[:, None]) | (y[None, :] > y[:, None]))).any(axis=1)
    brute = {(x[i], y[i]) for i in np.flatnonzero(~dominated)}
    front = frontier(df)
    return fast == brute and len(front) == len(brute)
