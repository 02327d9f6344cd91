"""A measurement repeated under another id counts once, in fits and in scores.

A results table can hold the same run twice: aiconfigurator's silicon sample exports some runs from two source
files (``2026-03-25.csv`` and ``2026-04-06.csv``) under two ids, once with the vLLM version recorded and once
without. Counting both would weigh those runs twice in a fit and twice in a median, so a row is a **repeat** of
another when it has the same deployment (:func:`pdtune.perfmodel.validation.deployment_key`), the same ISL, OSL and
concurrency, and the same measured median TTFT and TPOT to :data:`DIGITS` significant digits (the two exports
of one run differ only beyond the twelfth digit, from printing floats; two distinct runs never agree to six).

:func:`fold_repeats` keeps one row of each such group and lists the others with the id of the row they repeat;
nothing is dropped silently: callers report the folded rows and their count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pandas as pd

#: Significant digits of TTFT and TPOT at which two rows are the same measurement.
DIGITS = 6

#: The columns :func:`fold_repeats` lists the folded rows with.
REPEAT_COLUMNS = ("source_id", "repeat_of", "deployment", "isl", "osl", "concurrency")


def _digits(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return f"{float(value):.{DIGITS}g}"


def _int_text(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return str(int(value))


def measurement_key(row: pd.Series | dict[str, Any]) -> str:
    """What one measurement is: its deployment, its workload and its two measured medians."""
    from pdtune.perfmodel.validation import deployment_key

    get = row.get
    return " | ".join([deployment_key(row), _int_text(get("isl")), _int_text(get("osl")),
                       _int_text(get("concurrency")), _digits(get("ttft_ms_p50")), _digits(get("tpot_ms_p50"))])


@dataclass(frozen=True)
class Folded:
    rows: pd.DataFrame  # one row per measurement (the input's index and columns, in its order)
    repeats: pd.DataFrame  # the rows left out (REPEAT_COLUMNS), each with the id of the row it repeats
    repeat_of: pd.Series  # over the input's index: the id of the kept twin, None for a kept row

    @property
    def folded(self) -> int:
        return len(self.repeats)


def _row_id(rows: pd.DataFrame, index: Any) -> str:
    if "source_id" in rows.columns:
        value = rows.at[index, "source_id"]
        if isinstance(value, str) and value:
            return value
    return f"row {index}"


def fold_repeats(rows: pd.DataFrame) -> Folded:
    """One row per measurement. Of a group of repeats the row that records the vLLM version is kept (the
    prediction uses it), else the first in the table's order."""
    from pdtune.perfmodel.validation import deployment_key

    twin = pd.Series([None] * len(rows), index=rows.index, dtype=object)
    if not len(rows):
        return Folded(rows, pd.DataFrame(columns=list(REPEAT_COLUMNS)), twin)
    keys = rows.apply(measurement_key, axis=1)
    version = rows["backend_version"] if "backend_version" in rows.columns else pd.Series(None, index=rows.index)
    missing = (version.isna() | (version.astype(str).str.strip() == "")).to_numpy()
    # Within a group: a recorded version first, then the table's order (the sort is stable).
    order = sorted(range(len(rows)), key=lambda i: (keys.iloc[i], bool(missing[i]), i))
    kept_at: dict[str, Any] = {}
    listing = []
    for i in order:
        index, key = rows.index[i], keys.iloc[i]
        if key not in kept_at:
            kept_at[key] = index
            continue
        twin[index] = _row_id(rows, kept_at[key])
        row = rows.loc[index]
        listing.append({"source_id": _row_id(rows, index), "repeat_of": twin[index],
                        "deployment": deployment_key(row), "isl": row.get("isl"), "osl": row.get("osl"),
                        "concurrency": row.get("concurrency")})
    return Folded(rows[twin.isna().to_numpy()], pd.DataFrame(listing, columns=list(REPEAT_COLUMNS)), twin)
