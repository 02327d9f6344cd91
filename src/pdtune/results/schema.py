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

from pdtune.errors import InputError, brief
from pdtune.limits import (
    MAX_CONCURRENCY,
    MAX_EXACT_INT,
    MAX_MEASURE,
    MAX_MODEL_LEN,
    MAX_PARALLEL,
    MAX_SPECULATIVE_TOKENS,
    MIN_MEASURE,
    bound,
)

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
    """A finite, non-negative number from a file, 0 or from :data:`~pdtune.limits.MIN_MEASURE` to
    :data:`~pdtune.limits.MAX_MEASURE`, or None when absent; anything else is an InputError."""
    if value is None or (isinstance(value, str) and not value.strip()):
        if required:
            raise InputError(source, field, "missing")
        return None
    if isinstance(value, bool):
        raise InputError(source, field, f"expected a number, got {value!r}")
    if isinstance(value, str):
        if len(value) > 64:
            raise InputError(source, field, f"expected a number, got {len(value):,} characters")
        try:
            value = float(value.strip())
        except ValueError:
            raise InputError(source, field, f"expected a number, got {brief(value.strip())}") from None
    if not isinstance(value, (int, float)):
        raise InputError(source, field, f"expected a number, got {type(value).__name__}")
    if isinstance(value, int) and abs(value) > MAX_MEASURE:
        raise InputError(source, field, f"{_digits(value)} is more than the {MAX_MEASURE:g} pdtune accepts")
    value = float(value)
    if math.isnan(value):
        raise InputError(source, field, "is NaN")
    if math.isinf(value):
        raise InputError(source, field, "is infinite")
    if value < 0:
        raise InputError(source, field, f"must not be negative, got {value:g}")
    if value > MAX_MEASURE:
        raise InputError(source, field, f"{value:g} is more than the {MAX_MEASURE:g} pdtune accepts")
    if 0 < value < MIN_MEASURE:
        raise InputError(source, field, f"{value:g} is below the {MIN_MEASURE:g} pdtune accepts for a measured "
                                        "quantity (0, or at least that)")
    if positive and value == 0:
        raise InputError(source, field, "must be positive, got 0")
    return value


def whole(value: Any, source: str, field: str, *, required: bool = False, positive: bool = True) -> int | None:
    """A whole number (``64`` and ``64.0`` both read as 64), exact in a float64 and in int64."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_EXACT_INT:
        raise InputError(source, field, f"{_digits(value)} is more than the {MAX_EXACT_INT:,} pdtune accepts")
    x = number(value, source, field, required=required, positive=positive)
    if x is None:
        return None
    if x != int(x):
        raise InputError(source, field, f"expected a whole number, got {x:g}")
    return int(x)


def _digits(value: int) -> str:
    return f"{value:,}" if abs(value) < 10**30 else f"a number with {len(str(abs(value))):,} digits"


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


#: Slack of the order checks (total >= output throughput, p99 >= median): files round what they print (the
#: InferenceX export keeps a few digits, pdtune's modeled files seven significant ones).
ORDER_TOLERANCE = 0.005
#: Slack of output throughput against output tokens / duration. vLLM bench, SGLang and AIPerf compute the
#: throughput as exactly that quotient (checked on every real file in tests/fixtures and /work/shared/samples:
#: agreement to 1e-9), so 2% leaves room for rounding only; a file off by more mixes up runs or units.
THROUGHPUT_TOLERANCE = 0.02

#: The bounds every finished row's counts stay within (see :mod:`pdtune.limits`).
_COUNT_BOUNDS = {"isl": MAX_MODEL_LEN, "osl": MAX_MODEL_LEN, "n_prefill_workers": MAX_PARALLEL,
                 "n_decode_workers": MAX_PARALLEL, "mtp_tokens": MAX_SPECULATIVE_TOKENS}


def check_measured(row: Row, label: str, fields: dict[str, str]) -> None:
    """What every result row must satisfy, whatever its format; a violation names the file's field.

    All are refusals (not warnings): a record that breaks one cannot be placed on a chart honestly.

    * concurrency is a whole number from 1 to :data:`~pdtune.limits.MAX_CONCURRENCY`; ISL, OSL, worker counts
      and MTP tokens within their bounds;
    * total throughput >= output throughput (total counts input tokens too), within :data:`ORDER_TOLERANCE`;
    * p99 >= median, for TTFT and TPOT, within :data:`ORDER_TOLERANCE`;
    * output throughput = output tokens / duration within :data:`THROUGHPUT_TOLERANCE`, where the file
      records both.
    """
    name = fields.get
    concurrency = row.get("concurrency")
    if concurrency is not None:
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise InputError(label, name("concurrency", "concurrency"), f"must be at least 1, got {brief(concurrency)}")
        bound(concurrency, MAX_CONCURRENCY, label, name("concurrency", "concurrency"))
    for key, maximum in _COUNT_BOUNDS.items():
        value = row.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value:
            bound(int(value), maximum, label, name(key, key))
    total, output = row.get("total_tps"), row.get("output_tps")
    if total is not None and output is not None and total < output * (1 - ORDER_TOLERANCE):
        raise InputError(label, name("total_tps", "total_tps"),
                         f"{total:g} tok/s is below the output throughput {output:g} ({name('output_tps', 'output_tps')}): "
                         "total counts input and output tokens")
    for metric in ("ttft", "tpot"):
        p50, p99 = row.get(f"{metric}_ms_p50"), row.get(f"{metric}_ms_p99")
        if p50 is not None and p99 is not None and p99 < p50 * (1 - ORDER_TOLERANCE):
            raise InputError(label, name(f"{metric}_ms_p99", f"{metric}_ms_p99"),
                             f"{p99:g} ms is below the median {p50:g} ms ({name(f'{metric}_ms_p50', metric + ' p50')})")
    tokens, seconds = row.get("_output_tokens"), row.get("_duration_s")
    if output is not None and tokens is not None and seconds:
        expected = tokens / seconds
        if abs(output - expected) > THROUGHPUT_TOLERANCE * max(expected, output):
            raise InputError(label, name("output_tps", "output_throughput"),
                             f"{output:g} tok/s but {name('output_tokens', 'total_output_tokens')} / "
                             f"{name('duration', 'duration')} = {tokens:g} / {seconds:g} s = {expected:g} tok/s "
                             f"(more than {THROUGHPUT_TOLERANCE:.0%} apart)")


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
