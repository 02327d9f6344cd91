"""SGLang ``bench_serving --output-file``: JSON lines, one line per run (runs append to the same file).

Keys per line: ``backend``, ``dataset_name``, ``max_concurrency``, ``random_input_len``,
``random_output_len``, ``completed``, ``output_throughput``, ``total_throughput`` (newer releases; older
ones only ``input_throughput`` + ``output_throughput``), ``{mean,median,std,p99}_{ttft,tpot,itl}_ms``.
SGLang also writes ``concurrency``: the *measured* mean number of requests in flight, not the setting, so
``max_concurrency`` is the one used. ISL/OSL are the random-dataset lengths when the dataset is random,
else the caller's hints, else the measured means.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pdtune.results.schema import Row, deployment_fields, number, text, whole
from pdtune.results.vllm_bench import PerRequest, completed_and_concurrency, name_hints, workload_from_totals

SOURCE = "sglang"


def rows(path: Path, record: dict[str, Any], hints: dict[str, int] | None = None, where: str = "") -> list[Row]:
    source = str(path)
    label = f"{source}{where}"
    hints = name_hints(path) if hints is None else hints
    completed, concurrency = completed_and_concurrency(record, label, hints)

    isl = osl = None
    if str(record.get("dataset_name", "random")).startswith("random"):
        isl = whole(record.get("random_input_len"), label, "random_input_len")
        osl = whole(record.get("random_output_len"), label, "random_output_len")
    isl = isl if isl is not None else hints.get("isl")
    osl = osl if osl is not None else hints.get("osl")
    total_in = number(record.get("total_input_tokens"), label, "total_input_tokens")
    isl, osl = workload_from_totals(record, label, isl, osl, completed)

    output_tps = number(record.get("output_throughput"), label, "output_throughput")
    total_tps = number(record.get("total_throughput"), label, "total_throughput")
    if total_tps is None:
        input_tps = number(record.get("input_throughput"), label, "input_throughput")
        if input_tps is not None and output_tps is not None:
            total_tps = input_tps + output_tps

    detail = PerRequest(record, label)
    ttft_p99 = number(record.get("p99_ttft_ms"), label, "p99_ttft_ms")
    row: Row = {
        "source": SOURCE,
        "path": source,
        "model": text(record.get("model_id")),
        "isl": isl,
        "osl": osl,
        "concurrency": concurrency,
        "total_tps": total_tps,
        "output_tps": output_tps,
        "ttft_ms_p50": number(record.get("median_ttft_ms"), label, "median_ttft_ms"),
        "ttft_ms_p99": ttft_p99 if ttft_p99 is not None else detail.ms("ttft", 99),
        "tpot_ms_p50": number(record.get("median_tpot_ms"), label, "median_tpot_ms"),
        "tpot_ms_mean": number(record.get("mean_tpot_ms"), label, "mean_tpot_ms"),
        "tpot_ms_p99": number(record.get("p99_tpot_ms"), label, "p99_tpot_ms"),
        "_label": label,
        "_fields": {"tpot_ms_p50": "median_tpot_ms", "throughput": "output_throughput",
                    "total_tps": "total_throughput", "output_tps": "output_throughput",
                    "ttft_ms_p50": "median_ttft_ms", "ttft_ms_p99": "p99_ttft_ms", "tpot_ms_p99": "p99_tpot_ms"},
        "_output_tokens": number(record.get("total_output_tokens"), label, "total_output_tokens"),
        "_duration_s": number(record.get("duration"), label, "duration"),
    }
    row.update(deployment_fields(record, label))
    return [row]
