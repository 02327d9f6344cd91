"""The log parser never fails with a traceback: any text gives a parsed log or one InputError."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pdtune.errors import InputError
from pdtune.units import from_gib
from pdtune.vllm_log import VllmLog, parse_log, parse_log_text

LOGS = Path(__file__).parent / "fixtures" / "logs"
FIXTURE_TEXTS = [p.read_text(encoding="utf-8") for p in sorted(LOGS.glob("*.log"))]

# Fragments of real lines: random recombinations reach the number parsers with odd values.
FRAGMENTS = [
    "(Worker_TP1 pid=12) ", "(EngineCore_DP0 pid=7) ", "INFO 10-14 09:12:41 [gpu_worker.py:298] ",
    "DEBUG 10-14 09:12:41 [gpu_worker.py:393] ", "Available KV cache memory: ", "GPU KV cache size: ",
    " tokens", ", Maximum concurrency for ", " tokens per request: ", "x", "Model loading took ", " GiB memory and ",
    " seconds", "Free memory on device (", "/", " GiB) on startup. Desired GPU memory utilization is (", ", ",
    " GiB). Actual usage is ", " GiB for weight, ", " GiB for peak activation, ", "Estimated CUDA graph memory: ",
    " GiB total", "Profiling CUDA graph memory: ", "FULL=", " (largest=", ")", "non-default args: {", "}",
    "'gpu_memory_utilization': ", "Initializing a V1 LLM engine (v", ") with config: model='", "'",
    "max_seq_len=", "1e999", "-0.5", "1,234", "12.34", "0", "nan", "inf", "\n", "\r", "\x1b[0;36m", "█ version ",
]


def _exercise(log: VllmLog) -> None:
    """Everything a caller does with a parsed log also ends in a value or an InputError."""
    log.to_dict()
    for w in log.workers:
        log.engine_of(w)
        log.config_for(w)
        try:
            log.waterfall(w.name, total=from_gib(80), gpu_memory_utilization=0.9)
        except InputError:
            pass
    for e in log.engines:
        log.workers_of(e)


def _parse(text: str) -> None:
    try:
        log = parse_log_text(text)
    except InputError:
        return
    _exercise(log)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=2000))
def test_random_text(text: str) -> None:
    _parse(text)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=60))
def test_recombined_fragments(parts: list[str]) -> None:
    _parse("".join(parts))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(FIXTURE_TEXTS), st.data())
def test_truncated_and_damaged_fixtures(text: str, data: st.DataObject) -> None:
    cut = data.draw(st.integers(0, len(text)))
    damaged = text[:cut]
    if damaged and data.draw(st.booleans()):
        i = data.draw(st.integers(0, len(damaged) - 1))
        damaged = damaged[:i] + data.draw(st.sampled_from(["", "9", ",", ".", "-", "\n", "x"])) + damaged[i + 1:]
    _parse(damaged)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=3000))
def test_random_bytes_file(blob: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "vllm.log"
        path.write_bytes(blob)
        try:
            log = parse_log(path)
        except InputError as exc:
            assert exc.source == str(path)
            return
        _exercise(log)
