"""Benchmark outputs of the tools readers already use, read as they are, into one tidy table.

Formats: AIPerf ``profile_export_aiperf.json`` (both layouts), ``vllm bench serve --save-result`` JSON,
SGLang ``bench_serving`` JSON lines, srt-slurm output trees and rollups, the InferenceX CSV export (one
module per format). :func:`load_results` walks folders, recognises each file and returns one row per
deployment x concurrency with the columns :data:`TIDY_COLUMNS`:

- ``tps_per_gpu`` = total (input + output) tokens/s over **all** GPUs of the deployment;
- ``output_tps_per_decode_gpu`` = output tokens/s over the **decode** GPUs (all GPUs when aggregated);
- ``tps_per_user`` = ``1000 / tpot_ms_p50``: interactivity from median TPOT, never from chunk ITL;
- ``modeled`` is True for files that say ``"modeled": true`` (our performance model's output).

GPU counts come from the files where they record them, else from ``--gpus`` or a
:data:`~pdtune.results.gpus.SIDECAR_NAME` file; otherwise loading stops with an error.

The loader and the table (pandas) are imported when first used, so that reading a GPU-count sidecar, or
building the ``pdtune`` command line, does not pay for pandas.
"""

from __future__ import annotations

from typing import Any

from pdtune.results.gpus import SIDECAR_NAME, GpuCounts, parse_gpus

__all__ = [
    "SIDECAR_NAME",
    "TIDY_COLUMNS",
    "GpuCounts",
    "load_results",
    "parse_gpus",
]

_LAZY = {"load_results": "pdtune.results.loader", "TIDY_COLUMNS": "pdtune.results.schema"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'pdtune.results' has no attribute {name!r}")
