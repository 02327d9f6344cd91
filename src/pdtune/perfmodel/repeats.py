"""A measurement repeated under another id counts once, in fits and in scores.

A results table can hold the same run twice: aiconfigurator's silicon sample exports some runs from two source
files (``2026-03-25.csv`` and ``2026-04-06.csv``) under two ids, once with the vLLM version recorded and once
without. Counting both would weigh those runs twice in a fit and twice in a median, so a row is a **repeat** of
another when it has the same deployment (:func:`pdtune.perfmodel.validation.deployment_key`), the same ISL, OSL and
concurrency, and the same measured median TTFT and TPOT to :data:`DIGITS` significant digits (the two exports
of one run differ only beyond the twelfth digit, from printing floats; two distinct runs never agree to six).

A **rounded copy** is a repeat too: the sample's ``kimi-k2.5-gap-analysis.csv`` prints the medians of runs that
the database dump also holds to two decimals (169.94 ms for 169.940709). Such a row agrees with the full-precision
row to every decimal it prints (:func:`_within_print`; both medians at the decimals of the one printing more),
keeping at least :data:`ROUNDED_MIN_DIGITS` significant digits of each, on the same workload, model, GPU, mode and
precision. It is folded even when its layout label differs: one run cannot have been measured on two layouts, and
15 of those copies name TEP4 (4 GPUs) where the database row they copy names TP4DP4+EP (16 GPUs). The row kept is
the original, with the most digits, so the original's label stands; ``kind`` in the listing says which case a
folded row was.

:func:`fold_repeats` keeps one row of each such group and lists the others with the id of the row they repeat;
nothing is dropped silently: callers report the folded rows and their count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pandas as pd

#: Significant digits of TTFT and TPOT at which two rows are the same measurement.
DIGITS = 6

#: Decimals at or below which a row reads as a rounded print (measured floats print ten or more).
ROUNDED_PLACES = 4

#: Significant digits a rounded copy must still print of each median to be matched by them.
ROUNDED_MIN_DIGITS = 3

#: The columns :func:`fold_repeats` lists the folded rows with; ``kind`` is :data:`SAME_DIGITS`,
#: :data:`ROUNDED` or :data:`ROUNDED_OTHER_LAYOUT`.
REPEAT_COLUMNS = ("source_id", "repeat_of", "deployment", "isl", "osl", "concurrency", "kind")
SAME_DIGITS = f"same to {DIGITS} digits"
ROUNDED = "rounded copy"
ROUNDED_OTHER_LAYOUT = "rounded copy, another layout label"


def _digits(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return f"{float(value):.{DIGITS}g}"


def _int_text(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return str(int(value))


def decimals(value: float) -> int:
    """Digits after the point in the shortest text of ``value`` (169.94: 2; 8.36143: 5; 170.0: 0)."""
    exponent = Decimal(repr(float(value))).normalize().as_tuple().exponent
    return max(0, -exponent) if isinstance(exponent, int) else 0


def _within_print(coarse: float, fine: float, places: int) -> bool:
    """Whether ``fine`` rounds to ``coarse`` printed with ``places`` decimals, and ``coarse`` so printed keeps at
    least :data:`ROUNDED_MIN_DIGITS` significant digits (170 ms and 8.4 ms match too much to mean one run)."""
    if not (math.isfinite(coarse) and math.isfinite(fine)) or coarse <= 0:
        return False
    if math.floor(math.log10(coarse)) + 1 + places < ROUNDED_MIN_DIGITS:
        return False
    return abs(fine - coarse) <= 0.5 * 10.0 ** -places * (1 + 1e-9)


def _number(value: Any) -> float:
    """A measured median as a float; NaN when the row has none (None, text)."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _printed(row: pd.Series | dict[str, Any]) -> tuple[int, int]:
    """The decimals a row prints its TTFT and TPOT with (0 for a missing one)."""
    return decimals(_number(row.get("ttft_ms_p50"))), decimals(_number(row.get("tpot_ms_p50")))


def _places(row: pd.Series | dict[str, Any]) -> int:
    """The decimals a row prints its medians with: the more of its two (a float drops trailing zeros, so a copy
    printed to two decimals reads 16.0 for 16.00)."""
    return max(_printed(row))


#: What a rounded copy shares with its original: all but the layout label.
_SAME = ("model", "gpu", "mode", "precision", "gemm_quant_mode", "moe_quant_mode", "isl", "osl", "concurrency")


def rounded_copy(a: pd.Series | dict[str, Any], b: pd.Series | dict[str, Any]) -> bool:
    """Whether one of two rows prints the other's medians rounded (both TTFT and TPOT, same workload, model, GPU,
    mode and precision; the layout may differ)."""
    if any(_text(a.get(k)) != _text(b.get(k)) for k in _SAME):
        return False
    # A missing median (NaN) never matches: _within_print wants both finite.
    pairs = [(_number(a.get(m)), _number(b.get(m))) for m in ("ttft_ms_p50", "tpot_ms_p50")]
    places_a, places_b = _places(a), _places(b)
    if places_a <= places_b:
        return all(_within_print(x, y, places_a) for x, y in pairs)
    return all(_within_print(y, x, places_b) for x, y in pairs)


def _text(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


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
    prediction uses it), then one printed as measured over a rounded one, else the first in the table's order; of
    a rounded copy and its original, the one printing the most digits (a rounded copy is never the original)."""
    from pdtune.perfmodel.validation import deployment_key

    twin = pd.Series([None] * len(rows), index=rows.index, dtype=object)
    if not len(rows):
        return Folded(rows, pd.DataFrame(columns=list(REPEAT_COLUMNS)), twin)
    keys = rows.apply(measurement_key, axis=1)
    version = rows["backend_version"] if "backend_version" in rows.columns else pd.Series(None, index=rows.index)
    missing = (version.isna() | (version.astype(str).str.strip() == "")).to_numpy()
    records = rows.to_dict("records")
    printed = [_printed(row) for row in records]
    # A recorded version first, then a row printed as measured before a rounded one (ROUNDED_PLACES), then the
    # table's order; matching rounded copies, the most digits before the order.
    rank = [(bool(missing[i]), max(printed[i]) <= ROUNDED_PLACES, i) for i in range(len(rows))]
    rounded_rank = [(bool(missing[i]), -sum(printed[i]), i) for i in range(len(rows))]
    listing = []

    def fold(index: Any, kept: Any, kind: str) -> None:
        twin[index] = _row_id(rows, kept)
        row = rows.loc[index]
        listing.append({"source_id": _row_id(rows, index), "repeat_of": twin[index],
                        "deployment": deployment_key(row), "isl": row.get("isl"), "osl": row.get("osl"),
                        "concurrency": row.get("concurrency"), "kind": kind})

    # The same digits: within a group, a recorded version first, then the table's order.
    kept_at: dict[str, Any] = {}
    for i in sorted(range(len(rows)), key=lambda i: (keys.iloc[i], rank[i])):
        index, key = rows.index[i], keys.iloc[i]
        if key not in kept_at:
            kept_at[key] = index
        else:
            fold(index, kept_at[key], SAME_DIGITS)
    # Rounded copies, among the rows kept so far, the originals (most digits) first.
    originals: dict[tuple[str, ...], list[int]] = {}
    for i in sorted((i for i in range(len(rows)) if twin.iloc[i] is None), key=lambda i: rounded_rank[i]):
        row = records[i]
        group = originals.setdefault(tuple(_text(row.get(k)) for k in _SAME), [])
        match = next((k for k in group if rounded_copy(records[k], row)), None)
        if match is None:
            group.append(i)
            continue
        same_layout = deployment_key(records[match]) == deployment_key(row)
        fold(rows.index[i], rows.index[match], ROUNDED if same_layout else ROUNDED_OTHER_LAYOUT)
    return Folded(rows[twin.isna().to_numpy()], pd.DataFrame(listing, columns=list(REPEAT_COLUMNS)), twin)
