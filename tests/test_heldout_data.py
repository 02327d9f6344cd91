"""The held-out real runs (data/clusters/inferencex-h200-isl-sweep/) load as they are and never enter a fit."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from pdtune.errors import InputError
from pdtune.gpus import load_gpu
from pdtune.guarded import read_csv
from pdtune.model import load_model
from pdtune.perfmodel.defaults import (
    HELD_OUT_CLUSTERS,
    fit_gpu_defaults,
    fitted_rows_file,
    held_out_folders,
    is_held_out,
    measurement_digest,
    silicon_file,
)
from pdtune.perfmodel.fit import Problem
from pdtune.perfmodel.validation import select_rows
from pdtune.results import load_results

FOLDER = held_out_folders()[0]


@pytest.fixture(scope="module")
def heldout() -> pd.DataFrame:
    return load_results([str(FOLDER)])


def test_every_file_loads_in_milliseconds_from_its_seconds_keys(heldout: pd.DataFrame) -> None:
    files = sorted(FOLDER.glob("*/results/*.json"))
    assert len(files) == len(heldout) == 117
    # the unit comes from the key: median_ttft (no _ms) is seconds in this format
    one = FOLDER / "minimax-m2.5" / "results" / "minimax_m25_vllm_dep8_isl1024_osl128_conc4.json"
    record = json.loads(one.read_text())
    row = heldout[heldout["path"] == str(one)].iloc[0]
    assert row["ttft_ms_p50"] == pytest.approx(record["median_ttft"] * 1000)
    assert row["tpot_ms_p50"] == pytest.approx(0.01580887369254208 * 1000)
    assert row["ttft_ms_p99"] == pytest.approx(record["p99_ttft"] * 1000)
    assert (row["isl"], row["osl"], row["concurrency"], row["gpus_total"]) == (1024, 128, 4, 8)


def test_the_folder_is_held_out_and_a_fit_refuses_its_rows(heldout: pd.DataFrame) -> None:
    assert FOLDER.name in HELD_OUT_CLUSTERS and FOLDER.is_dir()
    assert all(is_held_out(p) for p in heldout["path"])
    assert not is_held_out(silicon_file())
    rows = select_rows(heldout.assign(topology="TEP8"), "minimax-m2.5", "h200").rows
    problem = Problem(load_model("minimax-m2.5"), load_gpu("h200"), rows)
    with pytest.raises(InputError) as err:
        fit_gpu_defaults({("minimax-m2.5", "h200"): problem}, "h200")
    assert err.value.field == "path" and "held-out" in err.value.message


def test_none_of_its_measurements_is_among_the_rows_the_defaults_were_fitted_on(heldout: pd.DataFrame) -> None:
    _header, rows = read_csv(fitted_rows_file())
    fitted = [(row["gpu"], row["source_id"], row["measurement"]) for _, row in rows]
    assert fitted  # written by data/perfmodel/fit_defaults.py
    silicon_ids = set(load_results(silicon_file())["source_id"])
    assert {s for _, s, _ in fitted} <= silicon_ids  # every fitted row is a silicon row ...
    digests = {d for _, _, d in fitted}
    mine = {measurement_digest(r) for _, r in heldout.assign(gpu="h200").iterrows()}
    assert not mine & digests  # ... and none of the held-out runs


def test_the_fit_script_reads_only_the_silicon_file() -> None:
    script = Path(__file__).resolve().parents[1] / "data" / "perfmodel" / "fit_defaults.py"
    text = script.read_text(encoding="utf-8")
    assert "load_results(silicon_file())" in text and "clusters_dir" not in text


def test_the_same_model_measured_elsewhere_is_several_times_faster() -> None:
    """pdtune.chapters.scheduler.same_model_elsewhere: InferenceX's MiniMax-M2.5 TEP8 runs beside aiconfigurator's
    silicon TP8 runs on the same H200s, both measured. By hand at ISL 8,192 and 4 clients: InferenceX's median
    TTFT 1,434.63 ms (minimax_m25_vllm_tep8_isl8192_osl128_conc4.json, median_ttft 1.43463 s); the silicon file's
    two TP8 runs 196.975 and 197.946 ms, median 197.46; 1,434.63 / 197.46 = 7.27. Every one of the ten points is
    at least 2.5 times slower to the first token and 1.5 times per output token: the gap is the deployment's."""
    from pdtune.chapters.scheduler import same_model_elsewhere

    frame = same_model_elsewhere().set_index(["isl", "concurrency"])
    assert len(frame) == 10 and set(frame.index.get_level_values("isl")) == {1024, 8192}
    point = frame.loc[(8192, 4)]
    assert point["measured_ttft_ms_p50_silicon"] == pytest.approx((196.975 + 197.946) / 2, abs=0.01)
    assert point["ttft_times"] == pytest.approx(1434.63 / 197.4605, rel=1e-4)
    assert (frame["ttft_times"] > 2.5).all() and (frame["tpot_times"] > 1.5).all()


def test_the_measured_sweep_is_described_as_it_is_at_every_length() -> None:
    """Chapter 8's scheduler section reads InferenceX's sweep at the input length nearest the parameters'. At ISL
    8,192 the measured TTFT climbs 290 ms per client (a queue) and the simulated one falls; at ISL 1,024 the
    measured one moves 2 ms per client, so the page must not call it the first case's queue, nor a fall growth."""
    from pdtune.chapters import scheduler as sched

    long, short = sched.measured_sweep(8192), sched.measured_sweep(1024)
    grow = sched.measured_slope_ms(long, "measured_ttft_ms_p50")
    assert sched.slope_words(grow) == "grows by 290 ms per client"
    assert sched.measured_shape(grow) == "the queueing shape of the first case"
    assert sched.slope_words(sched.measured_slope_ms(long, "simulated_ttft_ms_p50")).startswith("falls by ")
    small = sched.measured_slope_ms(short, "measured_ttft_ms_p50")
    assert small < sched.QUEUE_SLOPE_MS and "no queue" in sched.measured_shape(small)
    assert "grows" not in sched.sweep_title(small)
    assert [sched.slope_words(x) for x in (0.4, -0.4, 1.6, -3.2)] == [
        "stays flat", "stays flat", "grows by 2 ms per client", "falls by 3 ms per client"]


def test_the_fit_script_refuses_an_unknown_flag_and_writes_nothing(tmp_path: Path) -> None:
    # It once took any first argument for the output file: `fit_defaults.py --help` ran the fit and wrote a file
    # named "--help" beside fitted_rows.csv and prior_sensitivity.csv.
    script = Path(__file__).resolve().parents[1] / "data" / "perfmodel" / "fit_defaults.py"
    done = subprocess.run([sys.executable, str(script), "--bogus"], cwd=tmp_path, capture_output=True, text=True,
                          check=False, timeout=120)
    assert done.returncode == 2 and "unrecognized arguments: --bogus" in done.stderr
    assert list(tmp_path.iterdir()) == []
