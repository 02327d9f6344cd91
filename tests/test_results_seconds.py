"""vLLM-bench-shaped JSON that keeps latencies in seconds under keys without ``_ms`` (issue 23, item 3): the unit
comes from the key names, never from the values; the topology from the folder name or InferenceX's ``tp``.
The fixtures under tests/fixtures/results/vllm_bench_seconds/ are written here (make_results.py) from the public
format of SemiAnalysisAI/InferenceX's utils/process_result.py: synthetic, not measurements."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pdtune.cli import main
from pdtune.errors import InputError
from pdtune.results import GpuCounts, load_results

FIXTURES = Path(__file__).parent / "fixtures" / "results"
SECONDS = FIXTURES / "vllm_bench_seconds"


def test_seconds_keys_read_as_milliseconds_and_the_folder_names_the_topology() -> None:
    path = SECONDS / "TP4" / "qwen3-32b-c16.json"
    record = json.loads(path.read_text())
    assert "median_ttft" in record and not any(k.endswith("_ms") for k in record)
    row = load_results(path, gpus=GpuCounts.aggregated(4)).iloc[0]
    assert row["ttft_ms_p50"] == pytest.approx(record["median_ttft"] * 1000)
    assert row["tpot_ms_p50"] == pytest.approx(record["median_tpot"] * 1000)
    assert row["tpot_ms_p99"] == pytest.approx(record["p99_tpot"] * 1000)
    assert row["tpot_ms_mean"] == pytest.approx(record["mean_tpot"] * 1000)
    assert row["topology"] == "TP4" and row["concurrency"] == 16 and not row["modeled"]
    assert row["isl"] == round(record["total_input_tokens"] / record["completed"])


def test_inferencex_agg_json_gives_its_gpus_and_topology() -> None:
    """process_result.py divides the throughputs by TP and records tp, ep and conc."""
    path = SECONDS / "inferencex-agg" / "agg_qwen3-32b_tp8_conc64.json"
    record = json.loads(path.read_text())
    row = load_results(path).iloc[0]
    assert row["gpus_total"] == 8 and row["topology"] == "TP8" and row["concurrency"] == 64
    assert row["total_tps"] == pytest.approx(record["tput_per_gpu"] * 8)
    assert row["tps_per_gpu"] == pytest.approx(record["tput_per_gpu"])
    assert row["ttft_ms_p50"] == pytest.approx(record["median_ttft"] * 1000)
    assert row["tps_per_user"] == pytest.approx(record["median_intvty"], rel=1e-9)


def test_the_unit_comes_from_the_key_not_the_magnitude(tmp_path: Path) -> None:
    """A seconds key holding a value that looks like milliseconds is still seconds (6 s TTFT here): no guessing."""
    record = json.loads((SECONDS / "TP4" / "qwen3-32b-c16.json").read_text())
    record.update(median_ttft=6.0, mean_ttft=6.1, p90_ttft=6.5, p99_ttft=7.0)
    path = tmp_path / "TP4" / "run.json"
    path.parent.mkdir()
    path.write_text(json.dumps(record))
    assert load_results(path, gpus=GpuCounts.aggregated(4)).iloc[0]["ttft_ms_p50"] == 6000.0


def test_a_file_that_names_no_unit_is_refused_in_one_line(capsys) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InputError, match="ttft: names no unit"):
        load_results(FIXTURES / "bad" / "seconds-no-unit.json", gpus=GpuCounts.aggregated(4))
    assert main(["results", str(FIXTURES / "bad" / "seconds-no-unit.json"), "--gpus", "4"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "seconds-no-unit.json" in err


def test_two_spellings_that_disagree_are_refused() -> None:
    with pytest.raises(InputError, match="median_ttft: says"):
        load_results(FIXTURES / "bad" / "seconds-and-ms-disagree.json", gpus=GpuCounts.aggregated(4))
