"""The tidy results table: its columns, and the checks every loader's numbers go through.

Each loader turns one file into *partial rows*: plain dicts keyed by the column names below, holding only
what that file records (plus ``gpus``, a :class:`~pdtune.results.gpus.GpuCounts` when the file names its
GPU counts, and ``where``, the row's place in the file for error messages). :func:`finish_rows` then fills
the GPU counts, derives the per-GPU and per-user columns and builds the frame. A column a format does not
record stays NaN (numbers) or None (text): nothing is invented.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from pdtune.errors import InputError

#: design.md's tidy schema, then ``output_tps_per_decode_gpu`` and ``modeled``.
TIDY_COLUMNS: tuple[str, ...] = (
    "source", "path", "model", "mode", "topology", "prefill_topology", "decode_topology",
    "n_prefill_workers", "n_decode_workers", "gpus_prefill", "gpus_decode", "gpus_total", "mtp_tokens",
    "isl", "osl", "concurrency", "total_tps", "output_tps", "ttft_ms_p50", "ttft_ms_p99",
    "tpot_ms_p50", "tpot_ms_mean", "tpot_ms_p99", "tps_per_gpu", "tps_per_user", "accuracy",
    "output_tps_per_decode_gpu", "modeled",
)

TEXT_COLUMNS = ("source", "path", "model", "mode", "topology", "prefill_topology", "decode_topology")
#: Always present once a row is finished.
INT_COLUMNS = ("gpus_prefill", "gpus_decode", "gpus_total", "concurrency")
#: Whole numbers a format may not record: float so that "absent" is NaN.
COUNT_COLUMNS = ("n_prefill_workers", "n_decode_workers", "mtp_tokens", "isl", "osl")
FLOAT_COLUMNS = (
    "total_tps", "output_tps", "ttft_ms_p50", "ttft_ms_p99", "tpot_ms_p50", "tpot_ms_mean", "tpot_ms_p99",
    "tps_per_gpu", "tps_per_user", "accuracy", "output_tps_per_decode_gpu",
)

MODES = ("prefill", "decode", "agg", "disagg")

#: Text columns some formats add after :data:`TIDY_COLUMNS` (only when a loaded row has one of them):
#: the serving backend, the GPU, how the weights were quantized, and where the row came from.
EXTRA_COLUMNS: tuple[str, ...] = (
    "backend", "backend_version", "gpu", "system", "precision", "gemm_quant_mode", "moe_quant_mode",
    "source_id", "provenance",
)

#: Keys a result file may carry to name its deployment (our performance model writes them; a reader may
#: add them by hand to a real result).
DEPLOYMENT_KEYS = (
    "topology", "prefill_topology", "decode_topology", "n_prefill_workers", "n_decode_workers",
    "mtp_tokens", "mode", "accuracy",
)

Row = dict[str, Any]


def number(value: Any, source: str, field: str, *, required: bool = False, positive: bool = False) -> float | None:
    """A finite, non-negative number from a file, or None when absent; anything else is an InputError."""
    if value is None or (isinstance(value, str) and not value.strip()):
        if required:
            raise InputError(source, field, "missing")
        return None
    if isinstance(value, bool):
        raise InputError(source, field, f"expected a number, got {value!r}")
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise InputError(source, field, f"expected a number, got {value.strip()[:40]!r}") from None
    if not isinstance(value, (int, float)):
        raise InputError(source, field, f"expected a number, got {type(value).__name__}")
    value = float(value)
    if math.isnan(value):
        raise InputError(source, field, "is NaN")
    if math.isinf(value):
        raise InputError(source, field, "is infinite")
    if value < 0:
        raise InputError(source, field, f"must not be negative, got {value:g}")
    if positive and value == 0:
        raise InputError(source, field, "must be positive, got 0")
    return value


def whole(value: Any, source: str, field: str, *, required: bool = False, positive: bool = True) -> int | None:
    """A whole number (``64`` and ``64.0`` both read as 64)."""
    x = number(value, source, field, required=required, positive=positive)
    if x is None:
        return None
    if x != int(x):
        raise InputError(source, field, f"expected a whole number, got {x:g}")
    return int(x)


def as_dict(value: Any) -> dict[str, Any]:
    """A JSON object, or an empty one for anything else (a missing or malformed optional section)."""
    return value if isinstance(value, dict) else {}


def text(value: Any) -> str | None:
    if value is None:
        return None
    s = str(value).strip()
    return s or None


def deployment_fields(record: dict[str, Any], source: str) -> Row:
    """The optional deployment keys of :data:`DEPLOYMENT_KEYS`, checked, plus ``modeled``."""
    out: Row = {}
    for key in ("topology", "prefill_topology", "decode_topology"):
        if record.get(key) is not None:
            out[key] = text(record[key])
    for key in ("n_prefill_workers", "n_decode_workers"):
        if record.get(key) is not None:
            out[key] = whole(record[key], source, key)
    if record.get("mtp_tokens") is not None:
        out["mtp_tokens"] = whole(record["mtp_tokens"], source, "mtp_tokens", positive=False)
    if record.get("accuracy") is not None:
        out["accuracy"] = number(record["accuracy"], source, "accuracy")
    if record.get("mode") is not None:
        mode = str(record["mode"]).strip().lower()
        if mode not in MODES:
            raise InputError(source, "mode", f"must be one of {', '.join(MODES)}, got {record['mode']!r}")
        out["mode"] = mode
    modeled = record.get("modeled", False)
    if not isinstance(modeled, bool):
        raise InputError(source, "modeled", f"must be true or false, got {modeled!r}")
    out["modeled"] = modeled
    return out


def frame(rows: list[Row]) -> pd.DataFrame:
    """Finished rows to a frame with :data:`TIDY_COLUMNS` in order and stable dtypes (then any
    :data:`EXTRA_COLUMNS` a row carries)."""
    data: dict[str, Any] = {}
    for col in TIDY_COLUMNS:
        values = [row.get(col) for row in rows]
        if col in TEXT_COLUMNS:
            data[col] = pd.Series(values, dtype=object)
        elif col in INT_COLUMNS:
            data[col] = pd.Series(values, dtype=np.int64)
        elif col == "modeled":
            data[col] = pd.Series([bool(v) for v in values], dtype=bool)
        else:
            data[col] = pd.Series([np.nan if v is None else float(v) for v in values], dtype=np.float64)
    extras = [c for c in EXTRA_COLUMNS if any(row.get(c) is not None for row in rows)]
    for col in extras:
        data[col] = pd.Series([row.get(col) for row in rows], dtype=object)
    return pd.DataFrame(data, columns=[*TIDY_COLUMNS, *extras])


def empty_frame(columns: Sequence[str]) -> pd.DataFrame:
    """A frame with these columns and no rows: what an analysis returns for a sweep that is not there."""
    return pd.DataFrame({c: pd.Series(dtype=object) for c in columns})
