"""Benchmark outputs into the tidy table: every format and variant, the real samples, GPU counts."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pdtune.cli import main
from pdtune.errors import InputError
from pdtune.paths import clusters_dir
from pdtune.results import SIDECAR_NAME, TIDY_COLUMNS, GpuCounts, load_results

FIXTURES = Path(__file__).parent / "fixtures" / "results"
#: The project brief's real tool outputs (read only). The InferenceX CSV may also sit under data/clusters/.
SAMPLES = Path(os.environ.get("PDTUNE_SAMPLES", "/work/shared/samples"))
INFERENCEX_NAME = "InferenceX_DeepSeek-R1-0528_interactivity_gb200.csv"
AIPERF_SAMPLE = "aiperf-v0.1-profile_export_aiperf.json"

DESIGN_COLUMNS = (
    "source", "path", "model", "mode", "topology", "prefill_topology", "decode_topology", "n_prefill_workers",
    "n_decode_workers", "gpus_prefill", "gpus_decode", "gpus_total", "mtp_tokens", "isl", "osl", "concurrency",
    "total_tps", "output_tps", "ttft_ms_p50", "ttft_ms_p99", "tpot_ms_p50", "tpot_ms_mean", "tpot_ms_p99",
    "tps_per_gpu", "tps_per_user", "accuracy",
)


def real_inferencex() -> Path:
    for candidate in [*sorted(clusters_dir().rglob(INFERENCEX_NAME)), SAMPLES / INFERENCEX_NAME]:
        if candidate.is_file():
            return candidate
    pytest.skip(f"{INFERENCEX_NAME} is neither under data/clusters/ nor in {SAMPLES}")


def real_aiperf() -> Path:
    path = SAMPLES / AIPERF_SAMPLE
    if not path.is_file():
        pytest.skip(f"{path} not present")
    return path


def one(df: pd.DataFrame, **where: object) -> pd.Series:
    mask = np.ones(len(df), dtype=bool)
    for key, value in where.items():
        mask &= (df[key] == value).to_numpy()
    assert mask.sum() == 1, f"{mask.sum()} rows match {where}"
    return df[mask].iloc[0]


# ------------------------------------------------------------------------------------ schema


def test_columns_are_the_design_schema_then_the_two_additions() -> None:
    assert TIDY_COLUMNS == (*DESIGN_COLUMNS, "output_tps_per_decode_gpu", "modeled")


def test_frame_dtypes_are_stable() -> None:
    df = load_results(FIXTURES / "srt_slurm")
    assert list(df.columns) == list(TIDY_COLUMNS)
    for col in ("gpus_prefill", "gpus_decode", "gpus_total", "concurrency"):
        assert df[col].dtype == np.int64
    for col in ("isl", "osl", "tps_per_gpu", "accuracy", "mtp_tokens"):
        assert df[col].dtype == np.float64
    assert df["modeled"].dtype == bool
    assert df["topology"].dtype == object and df["topology"].isna().all()


# ------------------------------------------------------------------------------------ real samples


def test_real_inferencex_row_at_concurrency_4301() -> None:
    df = load_results(real_inferencex())
    assert len(df) == 9
    row = one(df, concurrency=4301)
    assert row["source"] == "inferencex" and row["mode"] == "disagg" and row["model"] == "DeepSeek-R1-0528"
    assert (row["gpus_prefill"], row["gpus_decode"], row["gpus_total"]) == (8, 16, 24)
    assert row["tpot_ms_p50"] == pytest.approx(23.097709350120555)  # the file says 0.0231: seconds
    assert row["tps_per_user"] == pytest.approx(43.29, abs=0.005)
    assert row["tps_per_gpu"] == pytest.approx(12659.66, abs=0.005)
    assert row["output_tps_per_decode_gpu"] == pytest.approx(9491.458521289718)
    assert row["ttft_ms_p50"] == pytest.approx(2406.20447602123)
    assert row["ttft_ms_p99"] == pytest.approx(22675.474807494318)
    assert (row["isl"], row["osl"]) == (1024, 1024)
    assert np.isnan(row["mtp_tokens"])  # "mtp" names the method, not how many tokens
    assert not row["modeled"]
    # EP 16 with DP attention over 16 decode GPUs: one DP16+EP engine; the prefill layout is not recorded
    assert (row["decode_topology"], row["n_decode_workers"]) == ("DP16+EP", 1)
    assert row["prefill_topology"] is None


def test_inferencex_decode_layouts_tell_equal_gpu_counts_apart() -> None:
    df = load_results(real_inferencex())
    same_gpus = df[(df["gpus_prefill"] == 4) & (df["gpus_decode"] == 32)]
    # EP 8 without DP attention (concurrency 4-48) versus EP 32 with it (concurrency 180)
    assert set(same_gpus["decode_topology"]) == {"TEP8", "DP32+EP"}
    assert set(same_gpus.loc[same_gpus["decode_topology"] == "TEP8", "n_decode_workers"]) == {4}


def test_real_inferencex_quirks_hold_on_every_row() -> None:
    df = load_results(real_inferencex())
    raw = pd.read_csv(real_inferencex(), comment="#")
    assert (df["gpus_prefill"] + df["gpus_decode"] == df["gpus_total"]).all()
    merged = df.merge(raw, left_on="concurrency", right_on="Concurrency")
    # interactivity from median TPOT agrees with the file's own median interactivity
    assert np.allclose(merged["tps_per_user"], merged["Median Interactivity (tok/s/user)"], rtol=2e-3)
    assert np.allclose(merged["tps_per_gpu"], merged["Throughput/GPU (tok/s)"], rtol=1e-12)
    assert np.allclose(merged["output_tps"], merged["Output Throughput/GPU (tok/s)"] * merged["Num Decode GPUs"])
    assert np.allclose(merged["total_tps"] - merged["output_tps"],
                       merged["Input Throughput/GPU (tok/s)"] * merged["Num Prefill GPUs"], rtol=1e-3)


def test_real_aiperf_sample_records_layout() -> None:
    df = load_results(real_aiperf(), gpus=GpuCounts.aggregated(1))
    row = df.iloc[0]
    assert row["source"] == "aiperf" and row["model"] == "openai/gpt-oss-20b"
    assert row["concurrency"] == 100  # input_config.loadgen
    assert row["osl"] == 250  # input_config.input.prompt.output_tokens.mean
    assert row["isl"] == 550  # not configured: the measured mean, AIPerf's default
    assert row["tpot_ms_p50"] == pytest.approx(27.615130366666666)
    assert row["tps_per_user"] == pytest.approx(1000 / 27.615130366666666)
    # never chunk ITL (22.67 ms p50 here) and never the per-user mean of reciprocals (36.68)
    assert row["tps_per_user"] == pytest.approx(36.2120, abs=1e-4)
    assert row["ttft_ms_p50"] == pytest.approx(2369.317693)
    assert row["output_tps"] == pytest.approx(2320.7222350404572)
    assert row["total_tps"] == pytest.approx(2320.7222350404572 + 48950.0 / 9.317788951)


# ------------------------------------------------------------------------------------ AIPerf


@pytest.mark.parametrize(
    ("folder", "concurrency", "isl", "osl", "model"),
    [
        ("records-layout", 64, 1024, 1024, "Qwen/Qwen3-32B"),  # input_config
        ("top-level-layout", 32, 8192, 1024, "Qwen/Qwen3-32B"),  # cli_command only
        ("schema-1.3", 40, 8192, 1024, "Qwen/Qwen3-32B"),  # run_info.variation_values + cli_command
        ("artifacts/Qwen_Qwen3-32B-openai-chat-concurrency128", 128, 2048, 512, None),  # folder name, measured
    ],
)
def test_aiperf_layouts_find_concurrency_isl_osl(folder: str, concurrency: int, isl: int, osl: int,
                                                  model: str | None) -> None:
    path = FIXTURES / "aiperf" / folder / "profile_export_aiperf.json"
    row = one(load_results(FIXTURES / "aiperf"), path=str(path))
    raw = json.loads(path.read_text())
    metrics = raw.get("records", raw)
    assert (row["concurrency"], row["isl"], row["osl"]) == (concurrency, isl, osl)
    assert row["model"] == model
    assert row["tpot_ms_p50"] == metrics["inter_token_latency"]["p50"]
    assert row["tps_per_user"] == pytest.approx(1000 / metrics["inter_token_latency"]["p50"])
    ttft = metrics.get("time_to_first_token") or metrics["ttft"]
    assert (row["ttft_ms_p50"], row["ttft_ms_p99"]) == (ttft["p50"], ttft["p99"])
    assert (row["gpus_total"], row["mode"]) == (8, "agg")  # from aiperf/pdtune-gpus.yaml


def test_aiperf_total_throughput_from_input_tokens_and_duration() -> None:
    path = FIXTURES / "aiperf/records-layout/profile_export_aiperf.json"
    rec = json.loads(path.read_text())["records"]
    row = load_results(path, gpus=GpuCounts.aggregated(8)).iloc[0]
    expected = rec["output_token_throughput"]["avg"] + rec["total_isl"]["avg"] / rec["benchmark_duration"]["avg"]
    assert row["total_tps"] == pytest.approx(expected)
    assert row["total_tps"] == pytest.approx(5379.101204, rel=1e-9)


def test_aiperf_newer_layout_reads_total_token_throughput() -> None:
    path = FIXTURES / "aiperf/schema-1.3/profile_export_aiperf.json"
    raw = json.loads(path.read_text())
    row = load_results(path, gpus=GpuCounts.aggregated(8)).iloc[0]
    assert row["total_tps"] == raw["total_token_throughput"]["avg"]
    assert row["tps_per_gpu"] == pytest.approx(raw["total_token_throughput"]["avg"] / 8)


# ------------------------------------------------------------------------------------ vLLM bench serve


def test_vllm_bench_with_percentile_keys_and_metadata_lengths() -> None:
    path = FIXTURES / "vllm_bench/qwen3-32b-c16-percentiles.json"
    raw = json.loads(path.read_text())
    row = load_results(path, gpus=GpuCounts.disaggregated(1, 1)).iloc[0]
    assert row["source"] == "vllm-bench" and row["mode"] == "disagg"
    assert (row["isl"], row["osl"]) == (8192, 1024)  # --metadata isl=8192 osl=1024 (strings)
    assert row["ttft_ms_p99"] == raw["p99_ttft_ms"] and row["tpot_ms_p99"] == raw["p99_tpot_ms"]
    assert row["tps_per_gpu"] == pytest.approx(raw["total_token_throughput"] / 2)
    assert row["output_tps_per_decode_gpu"] == pytest.approx(raw["output_throughput"] / 1)
    assert row["tpot_ms_p50"] == pytest.approx(14.172299, rel=1e-6)


def test_vllm_bench_without_p99_keys_uses_the_per_request_arrays() -> None:
    path = FIXTURES / "vllm_bench/qwen3-32b-c4-detailed.json"
    raw = json.loads(path.read_text())
    assert "p99_ttft_ms" not in raw and "ttfts" in raw
    row = load_results(path, gpus=GpuCounts.aggregated(2)).iloc[0]
    ttft = np.asarray(raw["ttfts"])
    lat, out = np.asarray(raw["latencies"]), np.asarray(raw["output_lens"])
    tpot = (lat - ttft) / (out - 1)
    assert row["ttft_ms_p99"] == pytest.approx(np.percentile(ttft, 99) * 1e3)
    assert row["tpot_ms_p99"] == pytest.approx(np.percentile(tpot, 99) * 1e3)
    assert row["tpot_ms_p50"] == raw["median_tpot_ms"] == pytest.approx(np.median(tpot) * 1e3)
    assert (row["isl"], row["osl"]) == (1000, 48)  # total tokens / completed requests


def test_vllm_bench_without_percentiles_or_arrays_leaves_p99_empty() -> None:
    row = load_results(FIXTURES / "vllm_bench/qwen3-32b-c64-no-percentiles.json", gpus=GpuCounts.aggregated(4)).iloc[0]
    assert np.isnan(row["ttft_ms_p99"]) and np.isnan(row["tpot_ms_p99"])
    assert (row["concurrency"], row["isl"], row["osl"]) == (64, 1024, 256)
    assert row["tps_per_gpu"] == pytest.approx(11168.984396 / 4, rel=1e-9)


# ------------------------------------------------------------------------------------ SGLang


def test_sglang_jsonl_gives_one_row_per_run() -> None:
    df = load_results(FIXTURES / "sglang")
    assert (df["source"] == "sglang").all() and len(df) == 5
    newer = [json.loads(line) for line in (FIXTURES / "sglang/bench_serving.jsonl").read_text().splitlines()]
    older = [json.loads(line) for line in (FIXTURES / "sglang/old/bench_serving.jsonl").read_text().splitlines()]
    for rec in newer:
        row = one(df, concurrency=rec["max_concurrency"], isl=4096.0)
        assert row["total_tps"] == rec["total_throughput"]
        assert row["tpot_ms_p50"] == rec["median_tpot_ms"] and row["ttft_ms_p99"] == rec["p99_ttft_ms"]
    for rec in older:
        assert "total_throughput" not in rec
        row = one(df, concurrency=rec["max_concurrency"], isl=1024.0)
        assert row["total_tps"] == pytest.approx(rec["input_throughput"] + rec["output_throughput"])
    # the measured "concurrency" key (mean requests in flight) is not the setting
    assert set(df["concurrency"]) == {1, 16, 64, 8, 32}
    # sglang/pdtune-gpus.yaml serves the old/ subfolder too
    assert (df["gpus_prefill"] == 8).all() and (df["gpus_decode"] == 16).all() and (df["mode"] == "disagg").all()


# ------------------------------------------------------------------------------------ srt-slurm


def test_srt_slurm_disaggregated_tree() -> None:
    df = load_results(FIXTURES / "srt_slurm/disagg")
    assert len(df) == 3 and (df["source"] == "srt-slurm").all()  # the rollup beside them is not double-counted
    row = one(df, concurrency=64)
    assert (row["gpus_prefill"], row["gpus_decode"], row["gpus_total"]) == (8, 16, 24)
    assert (row["n_prefill_workers"], row["n_decode_workers"]) == (1, 2)  # <job_id>.json
    assert (row["isl"], row["osl"], row["mode"]) == (8192, 1024, "disagg")
    assert row["model"] == "deepseek-ai/DeepSeek-R1-0528"
    assert row["tps_per_gpu"] == pytest.approx(30215.454491 / 24, rel=1e-9)
    assert row["output_tps_per_decode_gpu"] == pytest.approx(3357.272721 / 16, rel=1e-9)


def test_srt_slurm_rollup_agrees_with_the_result_files() -> None:
    tree = load_results(FIXTURES / "srt_slurm/disagg")
    rollup = load_results(FIXTURES / "srt_slurm/disagg/outputs/4411203/logs/benchmark-rollup.csv")
    assert (rollup["source"] == "srt-slurm-rollup").all()
    merged = tree.merge(rollup, on="concurrency", suffixes=("", "_rollup"))
    assert len(merged) == 3
    for col in ("total_tps", "output_tps", "tpot_ms_p50", "ttft_ms_p50", "tps_per_gpu"):
        assert np.allclose(merged[col], merged[f"{col}_rollup"], atol=1e-3), col  # the CSV keeps 3 decimals
    assert (merged["gpus_total_rollup"] == 24).all() and (merged["isl_rollup"] == 8192).all()


def test_srt_slurm_aggregated_tree() -> None:
    df = load_results(FIXTURES / "srt_slurm/agg")
    assert list(df["concurrency"]) == [8, 32]
    assert (df["mode"] == "agg").all()
    assert (df["gpus_prefill"] == 0).all() and (df["gpus_decode"] == 8).all() and (df["gpus_total"] == 8).all()
    assert np.allclose(df["output_tps_per_decode_gpu"], df["output_tps"] / 8)


def test_srt_slurm_older_layouts() -> None:
    vllm = load_results(FIXTURES / "srt_slurm/old-vllm")
    row = one(vllm, concurrency=256)
    raw = json.loads((FIXTURES / "srt_slurm/old-vllm/outputs/3900112/logs/vllm_isl_1024_osl_1024/"
                               "concurrency_256.json").read_text())
    assert row["ttft_ms_p99"] == raw["percentiles_ttft_ms"][0][1]  # legacy [p, value] list
    assert (row["gpus_prefill"], row["gpus_decode"], row["isl"]) == (4, 4, 1024)
    sglang = load_results(FIXTURES / "srt_slurm/old-sglang")
    assert (sglang["source"] == "srt-slurm").all() and list(sglang["concurrency"]) == [32, 128]
    assert (sglang["n_prefill_workers"] == 2).all() and (sglang["gpus_total"] == 16).all()


def test_srt_slurm_rollup_alone() -> None:
    df = load_results(FIXTURES / "srt_slurm/rollup-only")
    assert (df["source"] == "srt-slurm-rollup").all() and list(df["concurrency"]) == [128, 512, 1024]
    assert (df["isl"] == 8192).all() and (df["osl"] == 1024).all()  # benchmark-rollup.json
    assert (df["gpus_prefill"] == 24).all() and (df["gpus_decode"] == 8).all()
    assert df["tpot_ms_p50"].tolist() == [18.169, 31.431, 44.852]
    assert df["tpot_ms_p99"].isna().all() and df["tpot_ms_mean"].isna().all()  # not in a rollup


def test_modeled_tree_keeps_its_tool_name_and_deployment() -> None:
    df = load_results(FIXTURES / "srt_slurm/modeled")
    assert (df["source"] == "srt-slurm").all() and df["modeled"].all()
    row = one(df, concurrency=64)
    assert (row["prefill_topology"], row["decode_topology"]) == ("TP4DP2+EP", "TP4DP4+EP")
    assert (row["n_prefill_workers"], row["n_decode_workers"], row["mtp_tokens"]) == (1, 1, 3)
    assert row["accuracy"] == pytest.approx(0.953)
    measured = load_results(FIXTURES / "srt_slurm/disagg")
    assert not measured["modeled"].any()


# ------------------------------------------------------------------------------------ InferenceX


def test_inferencex_fixture_modes_and_units() -> None:
    df = load_results(FIXTURES / "inferencex")
    secs = df[df["path"].str.endswith("gb200.csv")]
    agg = one(secs, mode="agg")
    assert (agg["gpus_prefill"], agg["gpus_decode"], agg["gpus_total"]) == (0, 8, 8)
    assert agg["mtp_tokens"] == 0  # Spec Decoding "none"
    ms = df[df["path"].str.endswith("ms_units.csv")].iloc[0]
    same = one(secs, concurrency=64)
    for col in ("tpot_ms_p50", "ttft_ms_p99", "tps_per_user", "tps_per_gpu"):
        assert ms[col] == pytest.approx(same[col]), col


# ------------------------------------------------------------------------------------ GPU counts


def test_file_counts_win_over_the_flag() -> None:
    df = load_results(FIXTURES / "srt_slurm/disagg", gpus=GpuCounts.aggregated(99))
    assert (df["gpus_total"] == 24).all()


def test_no_counts_anywhere_is_an_error_naming_the_file(tmp_path: Path) -> None:
    src = FIXTURES / "vllm_bench/qwen3-32b-c64-no-percentiles.json"
    with pytest.raises(InputError) as err:
        load_results(src)
    assert err.value.source == str(src) and err.value.field == "gpus"


def test_sidecar_serves_its_folder_and_must_agree_with_the_flag(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(FIXTURES / "vllm_bench/qwen3-32b-c64-no-percentiles.json", run / "result.json")
    (tmp_path / SIDECAR_NAME).write_text("prefill: 2\ndecode: 6\n")
    df = load_results(tmp_path)
    assert (df.loc[0, "gpus_prefill"], df.loc[0, "gpus_decode"], df.loc[0, "mode"]) == (2, 6, "disagg")
    assert load_results(tmp_path, gpus=GpuCounts.disaggregated(2, 6)).loc[0, "gpus_total"] == 8
    with pytest.raises(InputError, match="--gpus says total=8"):
        load_results(tmp_path, gpus=GpuCounts.aggregated(8))
    # a sidecar above the folder the user named is not consulted
    with pytest.raises(InputError, match="does not record GPU counts"):
        load_results(run)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [("24", (0, 24, 24)), ("total=24", (0, 24, 24)), ("prefill=8,decode=16", (8, 16, 24)),
     (" prefill=8, decode=16, total=24 ", (8, 16, 24))],
)
def test_gpus_flag_forms(spec: str, expected: tuple[int, int, int]) -> None:
    from pdtune.results import parse_gpus

    counts = parse_gpus(spec)
    assert (counts.prefill, counts.decode, counts.total) == expected


@pytest.mark.parametrize("spec", ["0", "prefill=8", "prefill=0,decode=0", "prefill=8,decode=16,total=20", "x", "gpus=8",
                                  "prefill=-1,decode=2"])
def test_gpus_flag_rejects(spec: str) -> None:
    from pdtune.results import parse_gpus

    with pytest.raises(InputError):
        parse_gpus(spec)


def test_prefill_only_sweep_puts_an_unsplit_count_on_the_prefill_side(tmp_path: Path) -> None:
    rec = json.loads((FIXTURES / "vllm_bench/qwen3-32b-c64-no-percentiles.json").read_text())
    rec.update(mode="prefill", modeled=True)
    path = tmp_path / "prefill.json"
    path.write_text(json.dumps(rec))
    row = load_results(path, gpus=GpuCounts.aggregated(8)).iloc[0]
    assert (row["mode"], row["gpus_prefill"], row["gpus_decode"]) == ("prefill", 8, 0)
    assert np.isnan(row["output_tps_per_decode_gpu"]) and row["modeled"]


# ------------------------------------------------------------------------------------ walking and workloads


def test_whole_fixture_tree_loads(tmp_path: Path) -> None:
    shutil.copytree(FIXTURES / "vllm_bench", tmp_path / "vllm_bench")
    (tmp_path / "vllm_bench" / SIDECAR_NAME).write_text("total: 4\n")
    df = load_results([FIXTURES / "aiperf", FIXTURES / "sglang", FIXTURES / "srt_slurm", FIXTURES / "inferencex",
                       tmp_path / "vllm_bench"])
    assert set(df["source"]) == {"aiperf", "sglang", "srt-slurm", "srt-slurm-rollup", "inferencex", "vllm-bench"}
    assert len(df) == 4 + 5 + 14 + 4 + 3
    assert np.allclose(df["tps_per_user"], 1000 / df["tpot_ms_p50"])
    assert np.allclose(df["tps_per_gpu"], df["total_tps"] / df["gpus_total"])
    # a sweep stays together and in concurrency order
    agg = df[df["path"].str.contains("4411377")]
    assert agg["concurrency"].tolist() == [8, 32] and agg.index.tolist() == [agg.index[0], agg.index[0] + 1]


def test_single_workload_is_enforced_when_asked() -> None:
    ok = load_results(FIXTURES / "srt_slurm/disagg", single_workload=True)
    assert set(zip(ok["isl"], ok["osl"])) == {(8192, 1024)}
    with pytest.raises(InputError, match="one workload"):
        load_results(FIXTURES / "vllm_bench", gpus=GpuCounts.aggregated(1), single_workload=True)


# ------------------------------------------------------------------------------------ CLI


def test_cli_csv_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["results", str(FIXTURES / "srt_slurm/agg"), "--csv"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split(",") == list(TIDY_COLUMNS) and len(lines) == 3
    assert main(["results", str(FIXTURES / "srt_slurm/agg"), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["concurrency"] for r in rows] == [8, 32] and rows[0]["topology"] is None and rows[0]["mtp_tokens"] is None


def test_cli_table_and_out_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["results", str(FIXTURES / "vllm_bench"), "--gpus", "prefill=1,decode=3"]) == 0
    text = capsys.readouterr().out
    assert "tps_per_user" in text and "3 rows" in text
    out = tmp_path / "sub" / "table.csv"
    assert main(["results", str(FIXTURES / "srt_slurm/agg"), "--csv", "-o", str(out)]) == 0
    assert pd.read_csv(out)["gpus_total"].tolist() == [8, 8]


def test_inferencex_ep_that_does_not_split_the_decode_gpus(tmp_path: Path) -> None:
    lines = real_inferencex().read_text(encoding="utf-8").splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("Model,"))
    columns = lines[header].split(",")
    row = lines[header + 1].split(",")
    row[columns.index("EP")] = "5"  # 16 decode GPUs cannot form engines of 5
    bad = tmp_path / "bad.csv"
    bad.write_text("\n".join([*lines[: header + 1], ",".join(row)]) + "\n", encoding="utf-8")
    with pytest.raises(InputError, match="EP"):
        load_results(bad)
