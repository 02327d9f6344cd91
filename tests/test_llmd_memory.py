"""llm-d-planner's measured vLLM memory table, read as the document prints it."""

from __future__ import annotations

from pathlib import Path

import pytest

from pdtune.errors import InputError
from pdtune.paths import clusters_dir
from pdtune.perfmodel.validation import MEASURED_OVERHEADS_GIB
from pdtune.results.llmd_memory import read_memory_table

DOC = clusters_dir() / "llm-d-vllm-memory" / "empirical-vllm-memory-results.md"


def test_every_run_of_the_summary() -> None:
    df = read_memory_table(DOC)
    assert len(df) == 8 and set(df["gpu"]) == {"h100"} and (df["gpu_total_gib"] == 79.18).all()
    row = df[df["model"] == "gpt-oss-120b (MoE)"].iloc[0]
    assert (row["weights_gib"], row["activation_peak_gib"], row["non_torch_gib"]) == (64.38, 7.38, 0.13)
    assert (row["cudagraph_gib"], row["kv_cache_gib"], row["tp"], row["max_model_len"]) == (1.03, 3.33, 1, 16000)
    qwen = df[df["model"] == "Qwen3-32B"].set_index("tp")
    assert qwen.loc[2, "kv_cache_gib"] == 34.49 and qwen.loc[1, "weights_gib"] == 61.03
    assert df["cudagraph_gib"].min() == -0.88  # memory freed during capture is printed negative


def test_the_measured_overheads_come_from_it() -> None:
    df = read_memory_table(DOC)
    assert MEASURED_OVERHEADS_GIB[0] == pytest.approx(df["activation_peak_gib"].median(), abs=0.05)
    assert MEASURED_OVERHEADS_GIB[1] == df.loc[df["tp"] == 2, "non_torch_gib"].max()


def test_a_table_without_its_column_names_it(tmp_path: Path) -> None:
    bad = tmp_path / "bad.md"
    bad.write_text(DOC.read_text().replace("| Activation |", "| Act |"))
    with pytest.raises(InputError) as err:
        read_memory_table(bad)
    assert err.value.field == "Activation"
