"""``vllm bench serve --save-result`` JSON (also what srt-slurm's sa-bench writes).

Keys: ``max_concurrency``, ``completed``, ``total_input_tokens``, ``output_throughput``,
``total_token_throughput`` and ``{mean,median,std}_{ttft,tpot,itl,e2el}_ms``; percentile keys
``p{N}_{metric}_ms`` only for the percentiles asked for (default ``99``; older sa-bench wrote a
``percentiles_{metric}_ms`` list of ``[p, value]`` pairs). With ``--save-detailed`` the per-request arrays
``ttfts``, ``latencies`` and ``output_lens`` (seconds, tokens) are kept, and a missing percentile is
computed from them the way vLLM does (TPOT per request = (latency - TTFT) / (output tokens - 1)).
vLLM does not store ISL/OSL; they come from the caller's hints (folder names), ``--metadata`` keys, or the
measured means ``total_input_tokens / completed``.

**Seconds under keys without ``_ms``.** Other copies keep the same statistics in seconds and drop the suffix:
``median_ttft``, ``p99_tpot``, ``median_e2el``. InferenceX's ``utils/process_result.py``
(SemiAnalysisAI/InferenceX) writes its ``agg_*.json`` so, from a ``vllm bench serve`` result (every ``*_ms`` key
renamed without ``_ms`` and divided by 1000), with ``conc``, ``tp``, ``ep``, ``tput_per_gpu`` and
``output_tput_per_gpu`` (the throughputs divided by TP). The unit is read from the key's name, never guessed from
its value: ``*_ms`` is milliseconds, ``*_s`` seconds, and vLLM bench's bare statistic names
(``{mean,median,std,p<N>}_{ttft,tpot,itl,e2el}``) seconds; a latency key that names no unit (``ttft``,
``mean_TTFT``, ``ttft_p99``) is refused, and so is a record carrying both spellings of one statistic with values
that disagree. Such files record no topology: it comes from the record's deployment keys, a topology in the file
or folder name (``.../TP4/...``, ``tp2dp4-ep``), or InferenceX's ``tp``/``ep``; the GPU counts from ``--gpus``, a
sidecar, or InferenceX's ``tp``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from pdtune.errors import InputError
from pdtune.results.schema import Row, deployment_fields, number, text, whole

SOURCE = "vllm-bench"

#: vLLM bench's statistic names without a unit suffix: seconds (see the module).
_BARE_STAT = re.compile(r"^(mean|median|std|p\d+(?:\.\d+)?)_(ttft|tpot|itl|e2el)$")
#: A key that holds a latency statistic, whatever its spelling.
_LATENCY_WORD = re.compile(r"(?i)(ttft|tpot|(?<![a-z])itl|e2el|e2e_latency)")
#: Latency keys whose unit is known without a suffix: the per-request arrays (seconds, vLLM's own).
_KNOWN_ARRAYS = {"ttfts", "itls"}
_NAME_TOPOLOGY = re.compile(r"(?i)(?<![a-z0-9])(tep\d+|tp\d+(?:dp\d+)?(?:pp\d+)?)(?:[-+_]?(ep))?(?![a-z0-9])")

_SGLANG_MARKERS = ("total_output_tokens_retokenized", "input_throughput", "median_e2e_latency_ms", "total_throughput")
_VLLM_MARKERS = ("total_token_throughput", "median_e2el_ms", "endpoint_type", "burstiness", "tokenizer_id")
_NAME_CONCURRENCY = re.compile(r"concurrency[_-]?(\d+)", re.IGNORECASE)
_NAME_ISL_OSL = re.compile(r"isl[_-]?(\d+)[_-]osl[_-]?(\d+)", re.IGNORECASE)


def kind(record: dict[str, Any]) -> str | None:
    """``"vllm"`` or ``"sglang"`` for a serving-benchmark record, else None."""
    if not any(k in record for k in ("median_tpot_ms", "median_ttft_ms", "output_throughput", "max_concurrency",
                                     "median_tpot", "median_ttft", "tput_per_gpu")):
        return None
    if any(k in record for k in _SGLANG_MARKERS) and not any(k in record for k in _VLLM_MARKERS):
        return "sglang"
    return "vllm"


def check_units(record: dict[str, Any], source: str) -> None:
    """Every latency key must name its unit (see the module); refuse the first that does not."""
    for key in record:
        if not isinstance(key, str) or not _LATENCY_WORD.search(key) or key in _KNOWN_ARRAYS:
            continue
        if key.endswith("_ms") or key.endswith("_s") or _BARE_STAT.match(key):
            continue
        raise InputError(source, key, "names no unit: a latency key ends in _ms or _s, or is vLLM bench's "
                                      "median_ttft-style name in seconds; pdtune does not guess a unit from values")


def stat_ms(record: dict[str, Any], stat: str, metric: str, source: str) -> tuple[float | None, str]:
    """One statistic in milliseconds and the key it came from: ``*_ms``, else ``*_s`` or the bare name (seconds).
    Two spellings of one statistic must agree (to 0.5 %)."""
    found: list[tuple[float, str]] = []
    for key, scale in ((f"{stat}_{metric}_ms", 1.0), (f"{stat}_{metric}_s", 1000.0), (f"{stat}_{metric}", 1000.0)):
        if key in record:
            value = number(record[key], source, key)
            if value is not None:
                found.append((value * scale, key))
    if not found:
        return None, f"{stat}_{metric}_ms"
    first, key = found[0]
    for other, other_key in found[1:]:
        if abs(other - first) > 0.005 * max(abs(first), abs(other)):
            raise InputError(source, other_key, f"says {other:g} ms but {key} says {first:g} ms")
    return first, key


def percentile(record: dict[str, Any], metric: str, p: int, source: str) -> float | None:
    value, _ = stat_ms(record, f"p{p}", metric, source)
    if value is not None:
        return value
    legacy = record.get(f"percentiles_{metric}_ms")
    if isinstance(legacy, list):
        for pair in legacy:
            if isinstance(pair, (list, tuple)) and len(pair) == 2 and pair[0] == p:
                return number(pair[1], source, f"percentiles_{metric}_ms[{p}]")
    return None


def name_hints(path: Path) -> dict[str, int]:
    """Concurrency, ISL and OSL written into the file or folder names, if any."""
    hints: dict[str, int] = {}
    for part in (path.name, path.parent.name):
        if "concurrency" not in hints and (hit := _NAME_CONCURRENCY.search(part)):
            hints["concurrency"] = int(hit.group(1))
        if "isl" not in hints and (hit := _NAME_ISL_OSL.search(part)):
            hints["isl"], hints["osl"] = int(hit.group(1)), int(hit.group(2))
    return hints


def name_topology(path: Path) -> str | None:
    """A topology written into the file or folder name (``TP4``, ``tp2dp4-ep``, ``TEP8``), canonical."""
    from pdtune.topology import parse_topology

    for part in (path.stem, path.parent.name):
        hit = _NAME_TOPOLOGY.search(part)
        if hit:
            text = hit.group(1).upper() + ("+EP" if hit.group(2) else "")
            try:
                return parse_topology(text, f"{path} (file or folder name)").canonical
            except InputError:
                return None
    return None


class PerRequest:
    """The ``--save-detailed`` arrays of successful requests, in seconds."""

    def __init__(self, record: dict[str, Any], source: str) -> None:
        self.ttft: np.ndarray | None = None
        self.tpot: np.ndarray | None = None
        ttfts, lens = record.get("ttfts"), record.get("output_lens")
        if not isinstance(ttfts, list) or not isinstance(lens, list):
            return
        if len(ttfts) != len(lens):
            raise InputError(source, "ttfts", f"has {len(ttfts)} entries, output_lens has {len(lens)}")
        errors = record.get("errors")
        failed = [bool(e) for e in errors] if isinstance(errors, list) and len(errors) == len(lens) else []
        try:
            ttft = np.asarray(ttfts, dtype=np.float64)
            out = np.asarray(lens, dtype=np.float64)
        except (TypeError, ValueError):
            raise InputError(source, "ttfts", "per-request arrays must hold numbers") from None
        if ttft.ndim != 1 or out.ndim != 1 or not (np.isfinite(ttft).all() and np.isfinite(out).all()):
            raise InputError(source, "ttfts", "per-request arrays hold NaN, infinite or nested values")
        ok = out > 0
        if failed:
            ok &= ~np.asarray(failed, dtype=bool)
        self.ttft = ttft[ok]
        latencies = record.get("latencies")
        if isinstance(latencies, list) and len(latencies) == len(lens):
            try:
                lat = np.asarray(latencies, dtype=np.float64)
            except (TypeError, ValueError):
                raise InputError(source, "latencies", "must hold numbers") from None
            if lat.ndim != 1 or not np.isfinite(lat).all():
                raise InputError(source, "latencies", "holds NaN, infinite or nested values")
            many = ok & (out > 1)
            self.tpot = (lat[many] - ttft[many]) / (out[many] - 1)

    def ms(self, which: str, q: float) -> float | None:
        values = self.ttft if which == "ttft" else self.tpot
        if values is None or values.size == 0:
            return None
        return float(np.percentile(values, q)) * 1e3


def completed_and_concurrency(record: dict[str, Any], label: str, hints: dict[str, int]) -> tuple[int | None, int]:
    """Requests completed and the concurrency a benchmark record (vLLM's or SGLang's) ran at.

    The record's ``max_concurrency`` wins; the file name (``..._concurrency_<C>...``) fills it in when the record
    has none, and the two must agree when both are there.
    """
    completed = whole(record.get("completed"), label, "completed", positive=False)
    if completed == 0:
        raise InputError(label, "completed", "no request completed")
    concurrency = whole(record.get("max_concurrency"), label, "max_concurrency")
    if concurrency is None:
        concurrency = hints.get("concurrency")
    elif "concurrency" in hints and hints["concurrency"] != concurrency:
        raise InputError(label, "max_concurrency",
                         f"is {concurrency} but the file name says concurrency {hints['concurrency']}")
    if concurrency is None:
        raise InputError(label, "max_concurrency", "missing (a request-rate run has no concurrency)")
    return completed, concurrency


def workload_from_totals(record: dict[str, Any], label: str, isl: int | None, osl: int | None,
                         completed: int | None) -> tuple[int | None, int | None]:
    """ISL and OSL where the record does not state them: total tokens over completed requests."""
    # Both totals are read (and checked) even when ISL and OSL are known: a malformed file is still an error.
    total_in = number(record.get("total_input_tokens"), label, "total_input_tokens")
    total_out = number(record.get("total_output_tokens"), label, "total_output_tokens")

    def per_request(total: float | None) -> int | None:
        return round(total / completed) if total is not None and completed else None

    return (isl if isl is not None else per_request(total_in), osl if osl is not None else per_request(total_out))


def rows(path: Path, record: dict[str, Any], hints: dict[str, int] | None = None, where: str = "") -> list[Row]:
    """One row from one result record; ``where`` names the record inside a multi-record file."""
    source = str(path)
    label = f"{source}{where}"
    hints = name_hints(path) if hints is None else hints
    check_units(record, label)
    if "max_concurrency" not in record and "conc" in record:
        return _inferencex_agg_rows(path, record, hints, label)
    completed, concurrency = completed_and_concurrency(record, label, hints)

    isl = _first_int(record, ("isl", "input_len", "random_input_len"), label) or hints.get("isl")
    osl = _first_int(record, ("osl", "output_len", "random_output_len"), label) or hints.get("osl")
    total_in = number(record.get("total_input_tokens"), label, "total_input_tokens")
    isl, osl = workload_from_totals(record, label, isl, osl, completed)

    output_tps = number(record.get("output_throughput"), label, "output_throughput")
    total_tps = number(record.get("total_token_throughput"), label, "total_token_throughput")
    duration = number(record.get("duration"), label, "duration")
    if total_tps is None and output_tps is not None and total_in is not None and duration:
        total_tps = output_tps + total_in / duration

    detail = PerRequest(record, label)
    ttft_p50, ttft_key = stat_ms(record, "median", "ttft", label)
    tpot_p50, tpot_key = stat_ms(record, "median", "tpot", label)
    tpot_mean, _ = stat_ms(record, "mean", "tpot", label)
    ttft_p99 = percentile(record, "ttft", 99, label)
    tpot_p99 = percentile(record, "tpot", 99, label)
    row: Row = {
        "source": SOURCE,
        "path": source,
        "model": text(record.get("model_id")),
        "isl": isl,
        "osl": osl,
        "concurrency": concurrency,
        "total_tps": total_tps,
        "output_tps": output_tps,
        "ttft_ms_p50": ttft_p50 if ttft_p50 is not None else detail.ms("ttft", 50),
        "ttft_ms_p99": ttft_p99 if ttft_p99 is not None else detail.ms("ttft", 99),
        "tpot_ms_p50": tpot_p50 if tpot_p50 is not None else detail.ms("tpot", 50),
        "tpot_ms_mean": tpot_mean,
        "tpot_ms_p99": tpot_p99 if tpot_p99 is not None else detail.ms("tpot", 99),
        "_label": label,
        "_fields": {"tpot_ms_p50": tpot_key, "throughput": "output_throughput",
                    "total_tps": "total_token_throughput", "output_tps": "output_throughput",
                    "ttft_ms_p50": ttft_key, "ttft_ms_p99": stat_ms(record, "p99", "ttft", label)[1],
                    "tpot_ms_p99": stat_ms(record, "p99", "tpot", label)[1]},
        "_output_tokens": number(record.get("total_output_tokens"), label, "total_output_tokens"),
        "_duration_s": duration,
    }
    row.update(deployment_fields(record, label))
    if row.get("topology") is None and row.get("prefill_topology") is None:
        row["topology"] = name_topology(path)
    return [row]


def _inferencex_agg_rows(path: Path, record: dict[str, Any], hints: dict[str, int], label: str) -> list[Row]:
    """InferenceX's ``agg_*.json`` (``utils/process_result.py``): seconds-keyed statistics, ``conc``, ``tp``,
    ``ep``, and throughputs per GPU (divided by TP)."""
    from pdtune.results.gpus import GpuCounts

    concurrency = whole(record.get("conc"), label, "conc")
    if "concurrency" in hints and hints["concurrency"] != concurrency:
        raise InputError(label, "conc", f"is {concurrency} but the file name says concurrency {hints['concurrency']}")
    tp = whole(record.get("tp"), label, "tp", required=True)
    ep = whole(record.get("ep"), label, "ep") or 1
    per_gpu_total = number(record.get("tput_per_gpu"), label, "tput_per_gpu")
    per_gpu_output = number(record.get("output_tput_per_gpu"), label, "output_tput_per_gpu")
    gpus = GpuCounts.aggregated(tp)
    p, d = record.get("num_prefill_gpu"), record.get("num_decode_gpu")
    disagg = str(record.get("disagg", "false")).lower() == "true"
    if disagg and p is not None and d is not None:
        gpus = GpuCounts.disaggregated(whole(p, label, "num_prefill_gpu"), whole(d, label, "num_decode_gpu"))
    ttft_p50, ttft_key = stat_ms(record, "median", "ttft", label)
    tpot_p50, tpot_key = stat_ms(record, "median", "tpot", label)
    dp_attention = str(record.get("dp_attention", "false")).lower() == "true"
    topology = name_topology(path)
    if topology is None and not disagg and not dp_attention:
        topology = f"TP{tp}" + ("+EP" if ep > 1 else "")
    isl = _first_int(record, ("isl",), label) or hints.get("isl")
    osl = _first_int(record, ("osl",), label) or hints.get("osl")
    row: Row = {
        "source": SOURCE,
        "path": str(path),
        "model": text(record.get("model")),
        "isl": isl,
        "osl": osl,
        "concurrency": concurrency,
        "total_tps": None if per_gpu_total is None else per_gpu_total * tp,
        "output_tps": None if per_gpu_output is None else per_gpu_output * tp,
        "ttft_ms_p50": ttft_p50,
        "ttft_ms_p99": percentile(record, "ttft", 99, label),
        "tpot_ms_p50": tpot_p50,
        "tpot_ms_mean": stat_ms(record, "mean", "tpot", label)[0],
        "tpot_ms_p99": percentile(record, "tpot", 99, label),
        "topology": topology,
        "mode": "disagg" if gpus.is_disaggregated else "agg",
        "gpus": gpus,
        "_label": label,
        "_fields": {"tpot_ms_p50": tpot_key, "throughput": "tput_per_gpu", "total_tps": "tput_per_gpu",
                    "output_tps": "output_tput_per_gpu", "ttft_ms_p50": ttft_key,
                    "ttft_ms_p99": "p99_ttft", "tpot_ms_p99": "p99_tpot"},
        "modeled": False,
    }
    return [row]


def _first_int(record: dict[str, Any], keys: tuple[str, ...], source: str) -> int | None:
    for key in keys:
        if record.get(key) is not None:
            return whole(record[key], source, key)
    return None
