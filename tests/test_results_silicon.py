"""aiconfigurator's silicon CSV: every row loads, pinned rows read as the file says, bad files fail in one line."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from pdtune.cli import main
from pdtune.paths import clusters_dir
from pdtune.results import TIDY_COLUMNS, load_results
from pdtune.results.aic_silicon import REQUIRED, little_tps

SILICON = clusters_dir() / "aiconfigurator-silicon" / "silicon_sample.csv"


@pytest.fixture(scope="module")
def silicon():
    return load_results(SILICON)


def _raw_rows() -> tuple[list[str], list[dict[str, str]]]:
    with SILICON.open(encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        return list(reader.fieldnames or []), list(reader)


def _write(tmp_path: Path, header: list[str], rows: list[dict[str, str]], name: str = "bad.csv") -> Path:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=header, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    path = tmp_path / name
    path.write_text(buf.getvalue(), encoding="utf-8")
    return path


def test_every_row_loads_with_layout_gpus_and_latencies(silicon) -> None:
    assert len(silicon) == 5221
    assert list(silicon.columns[: len(TIDY_COLUMNS)]) == list(TIDY_COLUMNS)
    for col in ("gpus_total", "topology", "ttft_ms_p50", "tpot_ms_p50", "backend", "gpu", "source_id"):
        assert silicon[col].notna().all(), col
    counts = silicon.groupby(["backend", "mode"]).size().to_dict()
    assert counts == {
        ("sglang", "agg"): 953, ("sglang", "disagg"): 534, ("trtllm", "agg"): 1338,
        ("trtllm", "disagg"): 1051, ("vllm", "agg"): 1328, ("vllm", "disagg"): 17,
    }
    disagg = silicon[silicon["mode"] == "disagg"]
    assert disagg["prefill_topology"].notna().all() and disagg["decode_topology"].notna().all()
    assert not silicon["modeled"].any()


def test_an_aggregated_row_as_the_file_says(silicon) -> None:
    # minimaxm2_5_b300_vllm_fp8_agg_8192x1024_c128_cfg733: tp 4, moe_tp 4, moe_ep 1, batch 128.
    row = silicon.set_index("source_id").loc["minimaxm2_5_b300_vllm_fp8_agg_8192x1024_c128_cfg733"]
    assert (row["topology"], row["gpus_total"], row["concurrency"]) == ("TP4", 4, 128)
    assert (row["isl"], row["osl"], row["gpu"], row["backend_version"]) == (8192, 1024, "b300", "0.19.0")
    assert row["ttft_ms_p50"] == pytest.approx(972.3109823355117)
    assert row["tpot_ms_p50"] == pytest.approx(33.442908754168066)
    # Little's law over the closed loop: 128 clients x 9216 tokens per (972.3 + 1023 x 33.44) ms.
    assert row["total_tps"] == pytest.approx(128 * 9216 / (0.9723109823355117 + 1023 * 0.033442908754168066))
    assert row["tps_per_gpu"] == pytest.approx(row["total_tps"] / 4)
    assert "config_id=733" in row["provenance"] and "v0.19.0" in row["provenance"]


def test_attention_dp_and_expert_parallel_rows(silicon) -> None:
    by_id = silicon.set_index("source_id")
    # tp 2, attention DP 2, moe_ep 4: the experts cover all four GPUs; batch_size 2 per rank.
    row = by_id.loc["minimaxm2_5_b200_vllm_fp8_agg_1024x1024_c4_cfg690"]
    assert (row["topology"], row["gpus_total"], row["concurrency"]) == ("TP2DP2+EP", 4, 4)
    # vLLM Qwen3-235B: tp 1, attention DP unset, moe_tp 2: two DP ranks with sliced experts.
    qwen = silicon[(silicon["model"] == "Qwen/Qwen3-235B-A22B-FP8") & (silicon["backend"] == "vllm")]
    assert "DP2" in set(qwen["topology"]) and (qwen.loc[qwen["topology"] == "DP2", "gpus_total"] == 2).all()
    # MoE-TP x MoE-EP (SGLang, TensorRT-LLM): tp 16 with moe_tp 4 x moe_ep 4.
    assert (silicon.loc[silicon["topology"] == "TP16+EP4", "gpus_total"] == 16).all()


def test_a_disaggregated_row_and_its_workers(silicon) -> None:
    row = silicon.set_index("source_id").loc["kimik2_5_gb200_vllm_fp4_disagg_1024x1024_c256_cfg697"]
    assert (row["prefill_topology"], row["decode_topology"], row["topology"]) == ("TEP4", "TEP16", "1xTEP4:1xTEP16")
    assert (row["gpus_prefill"], row["gpus_decode"], row["gpus_total"]) == (4, 16, 20)
    assert (row["n_prefill_workers"], row["n_decode_workers"], row["concurrency"]) == (1, 1, 256)
    # Rows without worker counts: one engine a side is a floor, so no per-GPU throughput.
    unknown = silicon[silicon["topology"].str.startswith("?x", na=False)]
    assert len(unknown) == 1328 and unknown["tps_per_gpu"].isna().all() and unknown["n_decode_workers"].isna().all()


def test_little_law_is_the_closed_loop() -> None:
    # 4 clients, 1000 + 1000 tokens, first token after 100 ms then 999 tokens 10 ms apart: 10.09 s a request.
    assert little_tps(4, 1000, 1000, 100.0, 10.0) == pytest.approx(4 * 2000 / 10.09)


def test_results_cli_json_carries_every_row(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["results", str(SILICON), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 5221
    assert all(r["gpus_total"] and r["topology"] and r["ttft_ms_p50"] and r["tpot_ms_p50"] for r in rows)
    assert {"backend", "gpu", "precision", "provenance"} <= set(rows[0])


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ("drop-column", "silicon_tpot_ms"),
        ("unknown-system", "system"),
        ("moe-mismatch", "moe_ep_size"),
        ("bad-mode", "mode"),
    ],
)
def test_bad_silicon_files_fail_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: str, field: str
) -> None:
    header, rows = _raw_rows()
    rows = [dict(r) for r in rows[:3]]
    if change == "drop-column":
        header = [h for h in header if h != "silicon_tpot_ms"]
    elif change == "unknown-system":
        rows[1]["system"] = "a800_sxm"
    elif change == "moe-mismatch":
        rows[2].update(tp_size="4", attention_dp_size="1", moe_tp_size="1", moe_ep_size="8")
    else:
        rows[0]["mode"] = "static"
    path = _write(tmp_path, header, rows)
    assert main(["results", str(path), "--json"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(path) in err and f": {field}:" in err, err


def test_required_columns_are_the_files_header() -> None:
    header, _ = _raw_rows()
    assert set(REQUIRED) == set(header)
