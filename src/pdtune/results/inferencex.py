"""The InferenceX (formerly InferenceMAX) CSV export.

The file starts with ``#`` lines carrying its licence and attribution, then one row per measured point.
Its quirks, from the published file (recipes/.../InferenceX_DeepSeek-R1-0528_interactivity_gb200.csv):

- columns headed ``(ms)`` hold **seconds** (``Median TPOT (ms)`` = 0.0231 for 23.1 ms);
- ``TP`` is the deployment's total GPU count, ``Num Prefill GPUs + Num Decode GPUs``;
- ``Throughput/GPU`` divides total tokens/s by all GPUs, ``Output Throughput/GPU`` output tokens/s by the
  decode GPUs and ``Input Throughput/GPU`` input tokens/s by the prefill GPUs.

The unit of the ``(ms)`` columns is checked per row against the file's own ``Median Interactivity``
(= 1 / median TPOT): if a later export fixes the unit, the loader notices instead of scaling twice.
``Spec Decoding`` names the method but not the number of tokens, so ``mtp_tokens`` is 0 for ``none`` and
unknown otherwise. ``EP`` and ``DP Attention`` name the decode engines: ``DP<EP>+EP`` with DP attention,
``TEP<EP>`` without, ``decode GPUs / EP`` of them. Without them two deployments with the same GPU counts
(the file's EP32 point and its EP8 points) would be indistinguishable. The prefill layout is not recorded.
"""

from __future__ import annotations

from pathlib import Path

from pdtune.errors import InputError
from pdtune.results._read import read_csv
from pdtune.results.gpus import GpuCounts
from pdtune.results.schema import Row, number, text, whole

SOURCE = "inferencex"

REQUIRED = (
    "Model", "ISL", "OSL", "TP", "Concurrency", "Throughput/GPU (tok/s)", "Output Throughput/GPU (tok/s)",
    "Median TPOT (ms)",
)


def is_inferencex_header(header: list[str]) -> bool:
    return "Throughput/GPU (tok/s)" in header and "Median TPOT (ms)" in header


def rows(path: Path) -> list[Row]:
    header, table = read_csv(path)
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise InputError(path, missing[0], "column missing from the InferenceX header")
    out: list[Row] = []
    for lineno, values in table:
        label = f"{path} (line {lineno})"
        total = whole(values["TP"], label, "TP", required=True)
        disagg = str(values.get("Disaggregated", "")).strip().lower() == "true"
        if disagg:
            prefill = whole(values.get("Num Prefill GPUs"), label, "Num Prefill GPUs", required=True)
            decode = whole(values.get("Num Decode GPUs"), label, "Num Decode GPUs", required=True)
            if prefill + decode != total:  # type: ignore[operator]
                raise InputError(label, "TP", f"is {total} but prefill {prefill} + decode {decode} GPUs differ")
            gpus = GpuCounts.disaggregated(prefill, decode)  # type: ignore[arg-type]
        else:
            gpus = GpuCounts.aggregated(total)  # type: ignore[arg-type]
        to_ms = _ms_scale(values, label)
        ms = {name: _ms(values, label, name, to_ms) for name in
              ("Median TTFT (ms)", "P99 TTFT (ms)", "Median TPOT (ms)", "Mean TPOT (ms)", "P99 TPOT (ms)")}
        per_gpu = number(values.get("Throughput/GPU (tok/s)"), label, "Throughput/GPU (tok/s)", required=True)
        out_per_decode_gpu = number(values.get("Output Throughput/GPU (tok/s)"), label, "Output Throughput/GPU (tok/s)")
        spec = str(values.get("Spec Decoding", "")).strip().lower()
        out.append({
            "source": SOURCE,
            "path": str(path),
            "model": text(values.get("Model")),
            "mode": "disagg" if disagg else "agg",
            "isl": whole(values.get("ISL"), label, "ISL"),
            "osl": whole(values.get("OSL"), label, "OSL"),
            "concurrency": whole(values.get("Concurrency"), label, "Concurrency", required=True),
            "total_tps": per_gpu * gpus.total,  # type: ignore[operator]
            "output_tps": None if out_per_decode_gpu is None else out_per_decode_gpu * gpus.decode,
            "ttft_ms_p50": ms["Median TTFT (ms)"],
            "ttft_ms_p99": ms["P99 TTFT (ms)"],
            "tpot_ms_p50": ms["Median TPOT (ms)"],
            "tpot_ms_mean": ms["Mean TPOT (ms)"],
            "tpot_ms_p99": ms["P99 TPOT (ms)"],
            "mtp_tokens": 0 if spec in ("none", "no", "false") else None,
            **(_decode_layout(values, label, gpus.decode) if disagg else {}),
            "gpus": gpus,
            "modeled": False,
            "_label": label,
            "_fields": {"tpot_ms_p50": "Median TPOT (ms)", "throughput": "Throughput/GPU (tok/s)",
                        "total_tps": "Throughput/GPU (tok/s)", "output_tps": "Output Throughput/GPU (tok/s)",
                        "ttft_ms_p50": "Median TTFT (ms)", "ttft_ms_p99": "P99 TTFT (ms)",
                        "tpot_ms_p99": "P99 TPOT (ms)"},
        })
    if not out:
        raise InputError(path, "rows", "the CSV has a header but no rows")
    return out


def _decode_layout(values: dict[str, str], label: str, decode_gpus: int) -> dict[str, object]:
    ep = whole(values.get("EP"), label, "EP")
    if ep is None:
        return {}
    if ep <= 0 or decode_gpus % ep:
        raise InputError(label, "EP", f"{decode_gpus} decode GPUs do not split into engines of {ep}")
    dp_attention = str(values.get("DP Attention", "")).strip().lower() == "true"
    return {"decode_topology": f"DP{ep}+EP" if dp_attention else f"TEP{ep}", "n_decode_workers": decode_gpus // ep}


def _ms(values: dict[str, str], label: str, name: str, to_ms: float) -> float | None:
    x = number(values.get(name), label, name)
    return None if x is None else x * to_ms


def _ms_scale(values: dict[str, str], label: str) -> float:
    """1000 when the ``(ms)`` columns hold seconds (the published quirk), 1 when they hold milliseconds."""
    tpot = number(values.get("Median TPOT (ms)"), label, "Median TPOT (ms)", required=True, positive=True)
    interactivity = number(values.get("Median Interactivity (tok/s/user)"), label, "Median Interactivity (tok/s/user)")
    if interactivity is None:
        return 1e3
    product = tpot * interactivity  # type: ignore[operator]
    if abs(product - 1.0) < 0.05:
        return 1e3
    if abs(product - 1e3) < 50:
        return 1.0
    raise InputError(label, "Median TPOT (ms)",
                     f"{tpot:g} does not match Median Interactivity {interactivity:g} in seconds or in milliseconds")
