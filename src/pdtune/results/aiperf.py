"""AIPerf's summary export, ``profile_export_aiperf.json``, in both of its layouts.

- **records** (AIPerf <= 0.1.x): every metric under ``records``, some with short tags (``ttft``), and the
  run's settings under ``input_config`` (``loadgen.concurrency``, ``input.prompt.{input,output}_tokens.mean``).
- **top level** (later releases): each metric is a top-level key (``time_to_first_token``,
  ``inter_token_latency``, ...); newer files add ``schema_version``, ``total_token_throughput`` and
  ``run_info`` with the sweep point (``variation_values``, e.g. ``{"phases.profiling.concurrency": 40}``)
  and the ``cli_command``.

Concurrency, ISL and OSL are looked up in that order: the input config, the variation values, the CLI
command, the folder names (AIPerf names its artifact folder ``<model>-openai-chat-concurrency64``). ISL and
OSL fall back to the measured mean sequence lengths, which AIPerf always reports.

AIPerf's ``inter_token_latency`` is vLLM's TPOT (time per output token after the first), so it is the
column interactivity comes from; ``inter_chunk_latency`` is chunk timing and is never used.
``output_token_throughput_per_user`` is a mean of reciprocals and is not used either.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pdtune.errors import InputError
from pdtune.results.schema import Row, as_dict, deployment_fields, number, text, whole

SOURCE = "aiperf"

_METRICS: dict[str, tuple[str, ...]] = {
    "ttft": ("time_to_first_token", "ttft"),
    "tpot": ("inter_token_latency", "itl"),
    "output_tps": ("output_token_throughput",),
    "total_tps": ("total_token_throughput",),
    "isl": ("input_sequence_length",),
    "osl": ("output_sequence_length",),
    "total_isl": ("total_isl",),
    "total_osl": ("total_osl",),
    "duration": ("benchmark_duration",),
}

_MS_PER = {"ms": 1.0, "s": 1e3, "sec": 1e3, "secs": 1e3, "seconds": 1e3, "ns": 1e-6, "us": 1e-3, "µs": 1e-3}

_CLI = {
    "concurrency": re.compile(r"(?:^|\s)--concurrency(?:=|\s+)[\"']?(\d+)"),
    "isl": re.compile(
        r"(?:^|\s)--(?:isl|synthetic-input-tokens-mean|prompt-input-tokens-mean|input-tokens-mean)(?:=|\s+)[\"']?(\d+)"
    ),
    "osl": re.compile(
        r"(?:^|\s)--(?:osl|output-tokens-mean|prompt-output-tokens-mean|synthetic-output-tokens-mean)"
        r"(?:=|\s+)[\"']?(\d+)"
    ),
    "model": re.compile(r"(?:^|\s)(?:-m|--model|--model-names?)(?:=|\s+)[\"']?([^\"'\s]+)"),
}
_DIR = {
    "concurrency": re.compile(r"concurrency[_-]?(\d+)", re.IGNORECASE),
    "isl": re.compile(r"(?:^|[_-])isl[_-]?(\d+)", re.IGNORECASE),
    "osl": re.compile(r"(?:^|[_-])osl[_-]?(\d+)", re.IGNORECASE),
}
_VARIATION_SUFFIXES = {
    "concurrency": ("concurrency",),
    "isl": ("isl", "input_tokens.mean", "input_tokens_mean", "input_sequence_length"),
    "osl": ("osl", "output_tokens.mean", "output_tokens_mean", "output_sequence_length"),
}


def is_aiperf(record: dict[str, Any]) -> bool:
    nested = record.get("records")
    if isinstance(nested, dict) and any(isinstance(v, dict) and "unit" in v for v in nested.values()):
        return True
    if "aiperf_version" in record:
        return True
    return any(
        isinstance(record.get(k), dict) and "unit" in record[k]
        for k in ("inter_token_latency", "time_to_first_token", "request_throughput", "output_token_throughput")
    )


class _Metrics:
    def __init__(self, record: dict[str, Any], source: str) -> None:
        nested = record.get("records")
        self.old = isinstance(nested, dict)
        self.table: dict[str, Any] = nested if self.old else record  # type: ignore[assignment]
        self.prefix = "records." if self.old else ""
        self.source = source

    def find(self, name: str) -> tuple[str, dict[str, Any]] | None:
        for key in _METRICS[name]:
            entry = self.table.get(key)
            if isinstance(entry, dict):
                return key, entry
            if entry is not None:
                raise InputError(self.source, self.prefix + key, "expected an object with unit and statistics")
        return None

    def field(self, name: str, stat: str) -> str:
        """The file's name for one statistic of a metric, for error messages."""
        found = self.find(name)
        return f"{self.prefix}{found[0] if found else _METRICS[name][0]}.{stat}"

    def stat(self, name: str, stat: str, *, to_ms: bool = False, to_s: bool = False) -> float | None:
        found = self.find(name)
        if found is None:
            return None
        key, entry = found
        field = f"{self.prefix}{key}.{stat}"
        value = number(entry.get(stat), self.source, field)
        if value is None or not (to_ms or to_s):
            return value
        unit = str(entry.get("unit", "ms")).strip().lower()
        if unit not in _MS_PER:
            raise InputError(self.source, f"{self.prefix}{key}.unit", f"unknown time unit {unit!r}")
        ms = value * _MS_PER[unit]
        return ms / 1e3 if to_s else ms


def rows(path: Path, record: dict[str, Any]) -> list[Row]:
    source = str(path)
    m = _Metrics(record, source)
    config = as_dict(record.get("input_config"))
    run_info = as_dict(record.get("run_info"))
    variations = as_dict(run_info.get("variation_values"))
    cli = next(
        (c for c in (config.get("cli_command"), run_info.get("cli_command"), record.get("cli_command"))
         if isinstance(c, str)),
        "",
    )

    def lookup(name: str, from_config: Any) -> int | None:
        if from_config is not None:
            return whole(from_config, source, f"input_config ({name})")
        for key, value in variations.items():
            if any(str(key).lower().endswith(sfx) for sfx in _VARIATION_SUFFIXES[name]):
                return whole(value, source, f"run_info.variation_values.{key}")
        hit = _CLI[name].search(cli)
        if hit:
            return whole(hit.group(1), source, f"cli_command (--{name})")
        for folder in list(path.parents)[:3]:
            hit = _DIR[name].search(folder.name)
            if hit:
                return whole(hit.group(1), f"{folder} (folder name)", name)
        return None

    concurrency = lookup("concurrency", _config_concurrency(config))
    if concurrency is None:
        raise InputError(
            path, "concurrency",
            "not found in input_config, run_info.variation_values, cli_command or the folder name",
        )
    prompt = _dig(config, "input", "prompt") or {}
    isl = lookup("isl", _dig(prompt, "input_tokens", "mean"))
    osl = lookup("osl", _dig(prompt, "output_tokens", "mean"))
    if isl is None and (mean := m.stat("isl", "avg")) is not None:
        isl = round(mean)  # measured mean input length: AIPerf's synthetic default when nothing was set
    if osl is None and (mean := m.stat("osl", "avg")) is not None:
        osl = round(mean)

    output_tps = m.stat("output_tps", "avg")
    total_tps = m.stat("total_tps", "avg")
    if total_tps is None and output_tps is not None:
        total_isl = m.stat("total_isl", "avg")
        duration = m.stat("duration", "avg", to_s=True)
        if total_isl is not None and duration:
            total_tps = output_tps + total_isl / duration

    row: Row = {
        "source": SOURCE,
        "path": source,
        "model": _model(config, cli),
        "isl": isl,
        "osl": osl,
        "concurrency": concurrency,
        "total_tps": total_tps,
        "output_tps": output_tps,
        "ttft_ms_p50": m.stat("ttft", "p50", to_ms=True),
        "ttft_ms_p99": m.stat("ttft", "p99", to_ms=True),
        "tpot_ms_p50": m.stat("tpot", "p50", to_ms=True),
        "tpot_ms_mean": m.stat("tpot", "avg", to_ms=True),
        "tpot_ms_p99": m.stat("tpot", "p99", to_ms=True),
        "_label": source,
        "_fields": {
            "tpot_ms_p50": f"{m.prefix}inter_token_latency.p50",
            "throughput": f"{m.prefix}output_token_throughput.avg",
            "total_tps": m.field("total_tps", "avg"), "output_tps": m.field("output_tps", "avg"),
            "ttft_ms_p50": m.field("ttft", "p50"), "ttft_ms_p99": m.field("ttft", "p99"),
            "tpot_ms_p99": m.field("tpot", "p99"), "output_tokens": m.field("total_osl", "avg"),
            "duration": m.field("duration", "avg"),
        },
        "_output_tokens": m.stat("total_osl", "avg"),
        "_duration_s": m.stat("duration", "avg", to_s=True),
    }
    row.update(deployment_fields(record, source))
    return [row]


def _dig(obj: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def _config_concurrency(config: dict[str, Any]) -> Any:
    value = _dig(config, "loadgen", "concurrency")
    if value is not None:
        return value
    phases = config.get("phases")
    if isinstance(phases, dict):
        phases = [dict(v, name=k) for k, v in phases.items() if isinstance(v, dict)]
    if isinstance(phases, list):
        for phase in phases:
            if (isinstance(phase, dict) and phase.get("name", "profiling") == "profiling"
                    and phase.get("concurrency") is not None):
                return phase["concurrency"]
    return None


def _model(config: dict[str, Any], cli: str) -> str | None:
    names = _dig(config, "endpoint", "model_names") or config.get("models")
    if isinstance(names, list) and names:
        first = names[0]
        return text(first.get("name") if isinstance(first, dict) else first)
    hit = _CLI["model"].search(cli)
    return hit.group(1) if hit else None
