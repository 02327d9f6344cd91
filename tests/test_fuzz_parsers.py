"""Property tests for every reader of outside input (issue 14): whatever the bytes, a reader returns a value or
raises one :class:`~pdtune.errors.InputError` whose text is a single bounded line; nothing else escapes.

The readers: the guarded JSON, YAML and CSV parsers, the streamed line reader (checked against a plain split),
unit conversion, ``config.json`` reading, the result loaders, the workbook's parameters, vLLM start-up logs
and the command line's numeric flags.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from pdtune import guarded
from pdtune.cli import main
from pdtune.errors import MAX_FIELD, MAX_MESSAGE, MAX_SOURCE, InputError
from pdtune.limits import MAX_BYTES
from pdtune.model import spec_from_config
from pdtune.paths import models_dir
from pdtune.results import load_results
from pdtune.scenario import Scenario
from pdtune.units import GiB, MiB, to_bytes
from pdtune.vllm_log import parse_log_text

FIXTURES = Path(__file__).parent / "fixtures"
#: Examples per property; PDTUNE_FUZZ_EXAMPLES=5000 runs a longer campaign than make test's.
EXAMPLES = int(os.environ.get("PDTUNE_FUZZ_EXAMPLES", "150"))
FAST = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SLOW = settings(max_examples=max(10, EXAMPLES // 4), deadline=None, suppress_health_check=[HealthCheck.too_slow])

#: JSON-like values of any shape, nested up to a depth past the reader's bound.
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=30,
)
YAML_ALPHABET = "ab01 :-[]{},&*!?|>#'\"\n\t.%@`~="


def one_line(exc: InputError) -> None:
    text = str(exc)
    assert "\n" not in text and "\r" not in text
    assert len(text) <= MAX_SOURCE + MAX_FIELD + MAX_MESSAGE + 10


def reads(fn: Any, *args: Any) -> Any:
    """``fn(*args)``, which may raise only a one-line InputError."""
    try:
        return fn(*args)
    except InputError as exc:
        one_line(exc)
        return exc


# ------------------------------------------------------------------------------------------ guarded parsers


@FAST
@given(st.text(max_size=300))
def test_json_text(text: str) -> None:
    reads(guarded.parse_json, text, "f.json")


@FAST
@given(json_values, st.integers(min_value=0, max_value=90))
def test_json_structures_round_trip_or_are_refused(value: Any, depth: int) -> None:
    text = "[" * depth + json.dumps(value) + "]" * depth
    got = reads(guarded.parse_json, text, "f.json")
    if not isinstance(got, InputError):
        assert json.dumps(got, sort_keys=True) == json.dumps(json.loads(text), sort_keys=True)


@FAST
@given(st.integers(min_value=1, max_value=6000))
def test_json_numbers_of_any_length(digits: int) -> None:
    got = reads(guarded.parse_json, '{"n": ' + "7" * digits + "}", "f.json")
    assert isinstance(got, InputError) == (digits > guarded.MAX_NUMBER_CHARS)


@FAST
@given(st.text(alphabet=YAML_ALPHABET, max_size=200))
def test_yaml_text(text: str) -> None:
    reads(guarded.parse_yaml, text, "f.yaml")


@SLOW
@given(st.integers(min_value=1, max_value=12), st.integers(min_value=1, max_value=12))
def test_yaml_aliases_are_bounded(levels: int, width: int) -> None:
    parts = ["&a0 [" + ", ".join(["x"] * width) + "]"]
    parts += [f"&a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels)]
    got = reads(guarded.parse_yaml, "v: [" + ", ".join(parts) + "]", "f.yaml")
    expanded = sum(width ** (i + 1) for i in range(levels))
    if expanded > 2 * guarded.MAX_YAML_VALUES:
        assert isinstance(got, InputError)


@FAST
@given(st.text(alphabet='ab1,"\n\r# \x00', max_size=200))
def test_csv_text(text: str) -> None:
    reads(guarded.parse_csv, text, "f.csv")


@FAST
@given(st.text(alphabet=st.characters(blacklist_characters="\x00"), max_size=400), st.integers(1, 40),
       st.integers(1, 17))
def test_streamed_lines_match_a_plain_split(text: str, max_line: int, chunk: int) -> None:
    """:func:`guarded.iter_lines` yields what splitting on newlines and cutting each line would, for any
    chunking (multi-byte characters split across reads included)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "x.log"
        path.write_bytes(text.encode("utf-8", errors="surrogatepass").replace(b"\xed", b"?"))
        data = path.read_bytes().decode("utf-8", errors="replace")
        data = data[1:] if data.startswith("\ufeff") else data
        pieces = data.split("\n")
        expected = [p + "\n" for p in pieces[:-1]] + ([pieces[-1]] if pieces[-1] else [])
        expected = [line[:max_line] for line in expected]
        assert list(guarded.iter_lines(path, max_line=max_line, chunk=chunk)) == expected


# ------------------------------------------------------------------------------------------ units


@FAST
@given(st.floats(allow_nan=True, allow_infinity=True) | st.integers(min_value=-(10**400), max_value=10**400),
       st.sampled_from([GiB, MiB]))
def test_unit_conversion_checks_the_scaled_value(value: Any, unit: int) -> None:
    got = reads(to_bytes, value, unit, "--flag", "field")
    if not isinstance(got, InputError):
        assert isinstance(got, int) and 0 <= got <= MAX_BYTES
        assert got > 0 or value == 0
        assert math.isfinite(float(value))


# ------------------------------------------------------------------------------------------ configs, results, parameters

_CONFIGS = {p.parent.name: json.loads(p.read_text()) for p in sorted(models_dir().glob("*/config.json"))}


@SLOW
@given(st.sampled_from(sorted(_CONFIGS)), st.data())
def test_config_with_any_values(name: str, data: st.DataObject) -> None:
    raw = dict(_CONFIGS[name])
    for key in data.draw(st.lists(st.sampled_from(sorted(raw)), min_size=1, max_size=4, unique=True)):
        raw[key] = data.draw(json_values)
    reads(lambda: spec_from_config(raw, source="config.json", name=name))


_RECORD = json.loads((FIXTURES / "results" / "vllm_bench" / "qwen3-32b-c16-percentiles.json").read_text())


@SLOW
@given(st.data())
def test_result_record_with_any_values(data: st.DataObject) -> None:
    record = dict(_RECORD)
    for key in data.draw(st.lists(st.sampled_from(sorted(record)), min_size=1, max_size=4, unique=True)):
        record[key] = data.draw(json_values)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "run.json"
        path.write_text(json.dumps(record), encoding="utf-8")
        got = reads(load_results, path)
        if not isinstance(got, InputError):
            assert len(got) == 1


@SLOW
@given(st.dictionaries(st.sampled_from(Scenario.field_names()), json_values, max_size=4))
def test_scenario_with_any_values(values: dict[str, Any]) -> None:
    reads(lambda: Scenario.from_mapping(values, source="params.yaml"))


# ------------------------------------------------------------------------------------------ logs

_HEAD = st.sampled_from(["(EngineCore_DP0 pid=1) INFO 10-14 09:12:41 [x.py:1] ", "INFO 10-14 09:12:41 [x.py:1] ",
                         "(Worker_TP1 pid=22) DEBUG 10-14 09:12:41 [x.py:1] ", ""])
_NUMBER = st.one_of(st.floats().map(str), st.integers(-(10**30), 10**30).map(str), st.text("0123456789.,-e", max_size=30))
_MESSAGE = st.one_of(
    st.builds("Model loading took {} GiB and {} seconds".format, _NUMBER, _NUMBER),
    st.builds("Available KV cache memory: {} GiB".format, _NUMBER),
    st.builds("GPU KV cache size: {} tokens, Maximum concurrency for {} tokens per request: {}x".format, _NUMBER,
              _NUMBER, _NUMBER),
    st.builds("Profiling CUDA graph memory: {}".format, st.text("FULL=1 (largest=PIECEWISE,)", max_size=60)),
    st.builds("Free memory on device ({}/{} GiB) on startup. Desired GPU memory utilization is ({}, {} GiB). "
              "Actual usage is {} GiB for weight, {} GiB for peak activation".format, *[_NUMBER] * 6),
    st.builds("non-default args: {}".format, st.text("{}':,0123abc[]", max_size=60)),
    st.builds("Initializing a V1 LLM engine (v{}) with config: model='m', max_seq_len={}".format, _NUMBER, _NUMBER),
    st.text(max_size=80),
)


@FAST
@given(st.lists(st.builds(str.__add__, _HEAD, _MESSAGE), max_size=12))
def test_log_lines_of_any_content(lines: list[str]) -> None:
    reads(parse_log_text, "\n".join(lines), "x.log")


# ------------------------------------------------------------------------------------------ command-line numbers

_FLAG_VALUES = st.one_of(_NUMBER, st.sampled_from(["nan", "inf", "-inf", "1e308", "1e-320", "٣", "²", "0x10", "+5",
                                                   " 7 ", "1_000", ""]), st.text(max_size=12))
_COMMANDS = [
    (["state", "qwen3-32b", "--isl", "1024", "--osl", "128", "--kv-cache-gib"], "state --kv-cache-gib"),
    (["state", "qwen3-32b", "--max-model-len"], "state --max-model-len"),
    (["state", "qwen3-32b", "--isl", "1024", "--osl", "128", "--tp"], "state --tp"),
    (["memory", "--total-gib", "80", "--weights-gib"], "memory --weights-gib"),
    (["memory", "--total-gib", "80", "--weights-gib", "10", "--per-request-mib"], "memory --per-request-mib"),
    (["graphs", "--max-num-seqs"], "graphs --max-num-seqs"),
    (["graphs", "--max-num-seqs", "8", "--first-graph-mib"], "graphs --first-graph-mib"),
    (["predict", "qwen3-32b", "--topology", "TP4", "--mode", "decode", "--gpu", "h100", "--concurrency"],
     "predict --concurrency"),
]


@pytest.mark.parametrize(("argv", "label"), _COMMANDS, ids=[c[1] for c in _COMMANDS])
@settings(max_examples=max(5, EXAMPLES // 6), deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(value=_FLAG_VALUES)
def test_numeric_flags(argv: list[str], label: str, value: str) -> None:
    assume(not value.startswith("-") or value.lstrip("-")[:1].isdigit())  # "-x" would read as a flag
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        try:
            code = main([*argv, value])
        except SystemExit as exc:
            code = exc.code
    assert code in (0, 2), f"{label} {value!r}: exit {code}: {err.getvalue()[-500:]}"
    if code == 2:
        lines = err.getvalue().strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in err.getvalue(), err.getvalue()[-500:]
