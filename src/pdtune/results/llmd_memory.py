"""llm-d-planner's measured vLLM memory table (``docs/empirical-vllm-memory-results.md``): the waterfall, measured.

The document profiles vLLM start-up on one H100 (``VLLM_LOGGING_LEVEL=DEBUG``) for several models and TP sizes and
summarises each run in a Markdown table: weights, activation peak, non-torch memory, CUDA-graph memory and the KV
cache left, in GiB, with TP, ``--gpu-memory-utilization`` and ``--max-model-len``. :func:`read_memory_table` reads
that table as it is (its header names every column; a missing one is an error naming it) and the GPU's total from
the line ``Test environment: H100 GPU (79.18 GiB)``. These are **measured** numbers of another project; the copy
in ``data/clusters/llm-d-vllm-memory/`` says where it came from.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd

from pdtune.errors import InputError
from pdtune.limits import MAX_MEASURE
from pdtune.results._read import read_text
from pdtune.results.schema import number, whole

SOURCE = "llm-d-planner"

#: The summary table's headers -> columns.
COLUMNS = {
    "Model": "model",
    "Weights": "weights_gib",
    "Activation": "activation_peak_gib",
    "Non-torch": "non_torch_gib",
    "CUDA Graph": "cudagraph_gib",
    "KV Cache": "kv_cache_gib",
    "TP": "tp",
    "Util": "gpu_memory_utilization",
    "max-model-len": "max_model_len",
}

_ENV = re.compile(r"Test environment:\s*(?P<gpu>[A-Za-z0-9]+) GPU \((?P<gib>[\d.]+) GiB\)")


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def read_memory_table(path: str | Path) -> pd.DataFrame:
    """One row per profiled run: the summary table's numbers, the GPU and its total memory, the source file."""
    source = Path(path)
    text = read_text(source)
    env = _ENV.search(text)
    if env is None:
        raise InputError(source, "Test environment", "missing: the GPU and its memory are not stated")
    lines = text.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip().startswith("| Model") and "Weights" in line)
    except StopIteration:
        raise InputError(source, "Summary", "no table with a 'Model' and a 'Weights' column") from None
    header = _cells(lines[start])
    missing = [h for h in COLUMNS if h not in header]
    if missing:
        raise InputError(source, missing[0], "column missing from the summary table")
    rows = []
    for offset, line in enumerate(lines[start + 2 :], start=start + 3):
        if not line.strip().startswith("|"):
            break
        values = dict(zip(header, _cells(line), strict=False))
        where = f"{source} (line {offset})"
        row: dict[str, object] = {"source": SOURCE, "path": str(source), "model": values["Model"],
                                  "gpu": env.group("gpu").lower(), "gpu_total_gib": float(env.group("gib"))}
        for head, col in COLUMNS.items():
            if col == "model":
                continue
            cell = values.get(head, "")
            if col in ("tp", "max_model_len"):
                row[col] = whole(cell, where, head, required=True)
            elif col == "cudagraph_gib":  # the table says negative values mean memory freed during capture
                try:
                    row[col] = float(cell)
                except ValueError:
                    raise InputError(where, head, f"expected a number, got {cell[:40]!r}") from None
                if not math.isfinite(row[col]) or abs(row[col]) > MAX_MEASURE:  # type: ignore[arg-type]
                    raise InputError(where, head, f"expected a finite number, got {cell[:40]!r}")
            else:
                row[col] = number(cell, where, head, required=True)
        rows.append(row)
    if not rows:
        raise InputError(source, "Summary", "the table has no rows")
    return pd.DataFrame(rows)
