"""How a chapter shows its numbers: styled tables, numbers glued into the prose, formatted values.

A number the prose of a chapter states is glued from a code cell (MyST-NB's ``glue``) and written with the
``{glue:text}`` role, so it is recomputed on every build and follows the model of the parameters cell.
:func:`plain`, :func:`frame_numbers`, :func:`glue_numbers` and :func:`glue_frame` gather those numbers as
plain Python values and hand them to MyST-NB under ``<prefix>-<key>``; :func:`styled` is how every table
reaches the page; :func:`number` and :data:`MISSING` format a value that may not exist.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd


#: Stands in for a number the data does not give.
MISSING = "—"


def styled(frame: pd.DataFrame, *, precision: int = 2, index: bool = False) -> Any:
    """A frame for the page: thousands separators, ``precision`` decimals, empty cells as a dash."""
    style = frame.style.format(precision=precision, thousands=",", na_rep="—")
    return style if index else style.hide(axis="index")


def plain(value: Any) -> Any:
    """A numpy or pandas scalar as the Python value it holds; ``None`` and NaN as ``float("nan")``.

    MyST-NB stores a glued value as its ``repr`` and reads it back with ``ast.literal_eval``: ``2112`` and
    ``189.75`` survive that, ``np.int64(2112)`` does not, and ``nan`` formats as "nan" instead of failing.
    """
    if value is None:
        return float("nan")
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and value != value:
        return float("nan")
    if isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def glue_numbers(prefix: str, numbers: Mapping[str, Any]) -> None:
    """Glue every value as ``<prefix>-<key>`` (not displayed), for ``{glue:text}`<prefix>-<key>:.2f` ``."""
    from myst_nb import glue

    for key, value in numbers.items():
        glue(f"{prefix}-{key}", plain(value), display=False)


def frame_numbers(
    frame: pd.DataFrame,
    columns: Sequence[str] | None = None,
    *,
    key: str | Sequence[str] | None = None,
    labels: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Cells of ``frame`` as ``<row>-<column>``, and each numeric column's ``min-``/``max-<column>``.

    ``columns`` limits the cells to those the prose quotes (all columns when None). A row is named by
    ``labels`` (one per row), else by the ``key`` column(s) joined with "-" in lower case (``run`` gives
    "7", ``["topology", "mtp"]`` gives "tp4dp4-true"), else by its index. Missing cells are left out, so a
    sentence that quotes one fails the build instead of printing a dash.
    """
    if labels is not None:
        names = [str(label) for label in labels]
        if len(names) != len(frame):
            raise ValueError(f"{len(names)} labels for {len(frame)} rows")
    elif key is not None:
        key_columns = [key] if isinstance(key, str) else list(key)
        rows = frame[key_columns].itertuples(index=False)
        names = ["-".join(str(plain(v)).lower() for v in row) for row in rows]
    else:
        names = [str(i) for i in frame.index]
    if columns is not None:
        missing = [c for c in columns if c not in frame.columns]
        if missing:
            raise KeyError(f"no column {', '.join(missing)} in the frame")
        frame = frame[list(columns)]
    numbers: dict[str, Any] = {}
    for name, (_, row) in zip(names, frame.iterrows(), strict=True):
        for column, value in row.items():
            if value is None or (isinstance(value, float) and value != value):
                continue
            numbers[f"{name}-{column}"] = plain(value)
    for column in frame.columns:
        values = frame[column]
        numeric = pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values)
        if numeric and values.notna().any():
            numbers[f"min-{column}"] = plain(values.min())
            numbers[f"max-{column}"] = plain(values.max())
    return numbers


def glue_frame(
    prefix: str,
    frame: pd.DataFrame,
    columns: Sequence[str] | None = None,
    *,
    key: str | Sequence[str] | None = None,
    labels: Sequence[str] | None = None,
) -> None:
    """Glue cells of a frame the chapter shows (:func:`frame_numbers`) under ``prefix``."""
    glue_numbers(prefix, frame_numbers(frame, columns, key=key, labels=labels))


def number(value: Any, spec: str = ",.0f", *, missing: str = MISSING) -> str:
    """``value`` formatted for the prose, or ``missing`` for None/NaN (a glued value always exists)."""
    if value is None:
        return missing
    try:
        if isinstance(value, float) and math.isnan(value):
            return missing
        return format(value, spec)
    except (TypeError, ValueError):
        return str(value)


def first_row(frame: pd.DataFrame) -> dict[str, Any]:
    """The first row of ``frame`` as a dict, or an empty dict: what a chapter glues from a ranking."""
    return frame.iloc[0].to_dict() if len(frame) else {}


def _concurrency_list(values: Sequence[int], grid: Sequence[int] | None = None) -> str:
    """``1, 2`` or ``4–32, 512, 1,024–1,536``: runs of consecutive points of ``grid`` (the swept
    concurrencies, default ``values`` itself) joined by an en dash."""
    if not values:
        return MISSING
    order = sorted(set(grid if grid is not None else values))
    position = {c: i for i, c in enumerate(order)}
    chosen = sorted(set(values), key=lambda c: position.get(c, -1))
    runs: list[list[int]] = []
    for c in chosen:
        if runs and position.get(c) == position.get(runs[-1][-1], -2) + 1:
            runs[-1].append(c)
        else:
            runs.append([c])
    parts = []
    for run in runs:
        if len(run) == 1:
            parts.append(f"{run[0]:,}")
        elif len(run) == 2:
            parts.append(f"{run[0]:,}, {run[1]:,}")
        else:
            parts.append(f"{run[0]:,}–{run[-1]:,}")
    return ", ".join(parts)
