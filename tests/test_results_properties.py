"""The loaders never fail with a traceback: damaged result files give a table or one InputError."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pdtune.errors import InputError
from pdtune.results import TIDY_COLUMNS, GpuCounts, load_results

FIXTURES = Path(__file__).parent / "fixtures" / "results"
GOOD = [p for p in sorted(FIXTURES.rglob("*")) if p.is_file() and p.suffix in {".json", ".jsonl", ".csv"}
        and "bad" not in p.relative_to(FIXTURES).parts]
NAMES = sorted({p.name for p in GOOD} | {"results_concurrency_64_gpus_8.json", "concurrency_32.json"})


def _load(path: Path) -> None:
    try:
        df = load_results(path, gpus=GpuCounts.aggregated(8))
    except InputError as exc:
        assert str(path.parent) in exc.source or exc.source.startswith(str(path))
        return
    assert isinstance(df, pd.DataFrame) and list(df.columns) == list(TIDY_COLUMNS) and len(df) > 0


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(GOOD), st.data())
def test_truncated_and_damaged_result_files(src: Path, data: st.DataObject) -> None:
    raw = src.read_bytes()
    cut = data.draw(st.integers(0, len(raw)))
    blob = raw[:cut]
    if blob and data.draw(st.booleans()):
        i = data.draw(st.integers(0, len(blob) - 1))
        blob = blob[:i] + data.draw(st.sampled_from([b"", b"N", b"-", b"9", b"\x00", b"\xff", b",", b"}"])) + blob[i + 1:]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / src.name
        path.write_bytes(blob)
        _load(path)


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(NAMES), st.binary(max_size=2000))
def test_random_bytes_under_result_names(name: str, blob: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        path.write_bytes(blob)
        _load(path)
