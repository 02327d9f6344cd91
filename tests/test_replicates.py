"""Distinct runs of one point predicted by the median of the others (pdtune.perfmodel.replicates)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdtune.perfmodel.replicates import LEVELS, replicate_error, replicate_errors, replicate_table
from pdtune.scorecard import load_scorecard


def test_three_runs_by_hand() -> None:
    # Runs of 100, 110 and 150 ms: 100 against median(110, 150) = 130 is 30/130 = 0.2308 off; 110 against
    # median(100, 150) = 125 is 0.12; 150 against median(100, 110) = 105 is 45/105 = 0.4286.
    frame = pd.DataFrame({"k": ["a", "a", "a", "b"], "x": [100.0, 110.0, 150.0, 70.0]})
    errors = replicate_errors(frame, ["k"], "x")
    assert errors[:3].tolist() == pytest.approx([30 / 130, 0.12, 45 / 105])
    assert math.isnan(errors[3])  # a point measured once has no other run to be predicted by


def test_a_run_without_a_value_is_not_another_run() -> None:
    frame = pd.DataFrame({"k": ["a", "a", "a"], "x": [100.0, float("nan"), 120.0]})
    errors = replicate_errors(frame, ["k"], "x")
    # 100 against 120 alone: 20/120; 120 against 100: 0.2. The empty run is neither predicted nor a predictor.
    assert errors[0] == pytest.approx(20 / 120) and math.isnan(errors[1]) and errors[2] == pytest.approx(0.2)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(min_value=1.0, max_value=1e4), min_size=2, max_size=8),
       st.floats(min_value=0.01, max_value=100.0))
def test_the_floor_is_scale_free_and_zero_for_equal_runs(values: list[float], scale: float) -> None:
    frame = pd.DataFrame({"k": ["p"] * len(values), "x": values})
    errors = replicate_errors(frame, ["k"], "x")
    scaled = replicate_errors(frame.assign(x=frame["x"] * scale), ["k"], "x")
    assert np.allclose(errors, scaled, rtol=1e-9, atol=1e-12)
    assert all(replicate_error(v, [v] * (len(values) - 1)) == 0 for v in values)


def _frame() -> pd.DataFrame:
    base = {"model_key": "m", "gpu_name": "g", "topology": "TP4", "isl": 1024, "osl": 1024, "concurrency": 4}
    rows = [
        {**base, "deployment": "m | fp8", "vllm": "0.19.0", "measured_ttft_ms_p50": 60.0, "lomo_ttft_ms_p50": 66.0},
        {**base, "deployment": "m | fp8", "vllm": "0.19.0", "measured_ttft_ms_p50": 62.0, "lomo_ttft_ms_p50": 66.0},
        {**base, "deployment": "m | fp8", "vllm": "0.17.0", "measured_ttft_ms_p50": 150.0,
         "lomo_ttft_ms_p50": float("nan")},
        {**base, "deployment": "m | fp4", "vllm": "0.19.0", "measured_ttft_ms_p50": 45.0, "lomo_ttft_ms_p50": 40.0},
    ]
    return pd.DataFrame(rows)


def test_levels_nest_and_predictions_are_counted() -> None:
    table = replicate_table(_frame(), ("ttft_ms_p50",), predictions=("lomo", "absent")).set_index("level")
    # layout: all four runs are one point; deployment: the three fp8 runs; with the version: the two 0.19.0 runs.
    assert table["rows"].tolist() == [4, 3, 2] and table["points"].tolist() == [1, 1, 1]
    # The unpredicted 0.17.0 run stays in the rows and is counted out of the prediction's rows.
    assert table.loc["deployment", "lomo_rows"] == 2
    # Within the version the two runs are 60 and 62: |60/62 - 1| = 3.23 %, |62/60 - 1| = 3.33 %, median 3.28 %.
    assert table.loc["deployment and vLLM version", "ttft_replicate_median"] == pytest.approx(
        (2 / 62 + 2 / 60) / 2 * 100)
    assert "ttft_absent_median" not in table.columns  # a prediction without a column is left out


def test_shipped_scorecard_levels_nest() -> None:
    from pdtune.chapters.trust import _replicates, scorecard

    # Without a launch column the script level is left out; with it (the chapter's table) every level is there.
    assert "deployment and launch script" not in set(replicate_table(load_scorecard())["level"])
    table = _replicates(scorecard()).set_index("level")
    assert list(table.index) == list(LEVELS)
    rows = table["rows"]
    # each level's points split the coarser level's
    assert rows["layout"] >= rows["deployment"] >= rows["deployment and vLLM version"] > 0
    assert rows["deployment"] >= rows["deployment and launch script"] > 0
    # Same deployment on one vLLM version: its runs agree far better than the layout's do.
    assert table.loc["deployment and vLLM version", "ttft_replicate_p90"] < table.loc["layout", "ttft_replicate_p90"]


def test_the_pages_claims_hold_on_the_shipped_scorecard() -> None:
    # notebooks/08_trust_regimes.md's takeaway: runs of one deployment agree closely at the median (a median miss
    # well above it is the model's: under half of it here) and their p90 goes mostly with how the server was
    # launched (within one vLLM version under half of it, within one script version less again).
    from pdtune.chapters.trust import _replicates, scorecard

    table = _replicates(scorecard()).set_index("level")
    deployment, version = table.loc["deployment"], table.loc["deployment and vLLM version"]
    script = table.loc["deployment and launch script"]
    assert deployment["ttft_replicate_median"] < 0.5 * deployment["ttft_lomo_median"]
    assert version["ttft_replicate_p90"] < 0.5 * deployment["ttft_replicate_p90"]
    assert script["ttft_replicate_p90"] < version["ttft_replicate_p90"]


def test_the_worked_runs_in_words() -> None:
    from pdtune.chapters.trust import _version_key, replicate_sentence

    # The first run against the median of the other three (910.975 ms): 3383.98 / 910.975 - 1 = 271 %; the last,
    # 915.061 ms, against the median of 3383.98, 831.198 and 910.975 (910.975 ms): 0.45 %.
    runs = {"label": "m fp8 on TP2 of B200", "isl": 8192, "osl": 1024, "concurrency": 64,
            "ttft_ms": [3383.98, 831.198, 910.975, 915.061], "vllm": ["0.17.0", "0.19.0", "0.19.0", "0.19.0"]}
    text = replicate_sentence(runs)
    assert "3,384 ms on vLLM 0.17.0 and 831-915 ms over 3 runs on vLLM 0.19.0" in text
    assert "the 3,384 ms run is 271 % off and the 915 ms one 0.4 %" in text
    assert _version_key("0.9.2") < _version_key("0.17.0") < _version_key(None)  # numbers, not strings
