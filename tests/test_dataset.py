"""The committed modeled dataset: reproducible, labelled as modeled, and telling the article's story."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from pdtune.cli import main
from pdtune.dataset import (
    DECODE_TOPOLOGIES,
    DEFAULT_DATASET,
    DISAGG_CONFIGS,
    GRID,
    PREFILL_TOPOLOGIES,
    DatasetSpec,
    generate_dataset,
    generated_files,
)
from pdtune.frontier import pareto_frontier
from pdtune.paths import clusters_dir
from pdtune.perfmodel.inferencex import inferencex_check, inferencex_file

DATASET = clusters_dir() / DEFAULT_DATASET
SHARED_SAMPLE = Path("/work/shared/samples/InferenceX_DeepSeek-R1-0528_interactivity_gb200.csv")


def _records(mode: str) -> list[dict]:
    out = []
    for path in sorted((DATASET / mode).rglob("results_concurrency_*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        record["_path"] = str(path)
        record["_gpus"] = record["gpus_prefill"] + record["gpus_decode"]
        record["_tps_per_gpu"] = record["total_token_throughput"] / record["_gpus"]
        out.append(record)
    return out


def _curves(mode: str) -> dict[str, dict[int, float]]:
    """Deployment label -> {concurrency: total tokens/s per GPU}."""
    curves: dict[str, dict[int, float]] = {}
    for r in _records(mode):
        label = r["topology"] or f"{r['prefill_topology']}:{r['decode_topology']}"
        label += "+MTP" if r["mtp_tokens"] else ""
        curves.setdefault(label, {})[r["max_concurrency"]] = r["_tps_per_gpu"]
    return curves


def _best(curves: dict[str, dict[int, float]], concurrency: int) -> str:
    return max(curves, key=lambda k: curves[k][concurrency])


def test_regenerating_reproduces_the_committed_files(tmp_path: Path) -> None:
    out = generate_dataset(tmp_path / "ds")
    committed = generated_files(DATASET)
    assert generated_files(out) == committed
    assert (
        len(committed)
        == 1
        + len(GRID) * (len(PREFILL_TOPOLOGIES) + 2 * len(DECODE_TOPOLOGIES) + len(DISAGG_CONFIGS))
        + 9
        + 10
        + 7
    )  # + job metadata
    for rel in committed:
        assert (out / rel).read_bytes() == (DATASET / rel).read_bytes(), rel


def test_regenerating_keeps_files_it_does_not_own(tmp_path: Path) -> None:
    target = tmp_path / "ds"
    target.mkdir()
    (target / "README.md").write_text("mine\n", encoding="utf-8")
    (target / "prefill").mkdir()
    (target / "prefill" / "stale.json").write_text("{}", encoding="utf-8")
    code = main(["dataset", "generate", "--out", str(target)])
    assert code == 0
    assert (target / "README.md").read_text(encoding="utf-8") == "mine\n"
    assert not (target / "prefill" / "stale.json").exists()  # generated folders are replaced whole
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging folders left


def test_every_file_is_marked_modeled() -> None:
    for mode in ("prefill", "decode", "disagg"):
        records = _records(mode)
        assert records
        for r in records:
            assert r["modeled"] is True and r["mode"] == mode, r["_path"]
            assert r["date"] == "modeled"
        for meta in (DATASET / mode / "outputs").glob("*/*.json"):
            assert json.loads(meta.read_text(encoding="utf-8"))["modeled"] is True
    disagg = _records("disagg")
    assert {r["accuracy"] for r in disagg} == {0.95}  # the article's GSM8K, noted as not modeled
    assert all("not modeled" in r["accuracy_note"] for r in disagg)
    manifest = json.loads((DATASET / "pdtune-dataset.json").read_text(encoding="utf-8"))
    assert manifest["modeled"] is True and manifest["concurrencies"] == list(GRID)


def test_prefill_finding() -> None:
    """TP4DP2+EP leads at low concurrency, TP2DP4+EP once concurrency rises (article, figure 1)."""
    curves = _curves("prefill")
    assert set(curves) == set(PREFILL_TOPOLOGIES)
    assert _best(curves, 2) == "TP4DP2+EP"
    for c in GRID:
        if c >= 4:
            assert _best(curves, c) == "TP2DP4+EP", c
    # A single request finishes soonest on the widest TP group; the article does not publish its lowest point.
    assert _best(curves, 1) == "TP8+EP"


def test_decode_finding() -> None:
    """TEP8+MTP at low concurrency, TEP8 at 512 and 1024, TP4DP4+EP at the highest (article, figure 2)."""
    curves = _curves("decode")
    assert len(curves) == 2 * len(DECODE_TOPOLOGIES)
    for c in (1, 2):
        assert _best(curves, c) == "TEP8+MTP", c
    for c in (512, 1024):
        assert _best(curves, c) == "TEP8", c
    assert _best(curves, GRID[-1]) == "TP4DP4+EP"
    # MTP helps while the KV cache has room: TEP8+MTP flattens where its KV room (454 requests) runs out.
    mtp = curves["TEP8+MTP"]
    assert mtp[512] == pytest.approx(mtp[2560])
    assert mtp[256] < mtp[384] < mtp[512]


def test_disaggregated_frontier_ends() -> None:
    """The frontier's two ends land within 10 % of the article's 5000 tok/s/GPU and 180 tok/s/user."""
    records = _records("disagg")
    assert len({(r["prefill_topology"], r["n_prefill_workers"], r["decode_topology"]) for r in records}) == 7
    x = np.array([1000 / r["median_tpot_ms"] for r in records])
    y = np.array([r["_tps_per_gpu"] for r in records])
    front = pareto_frontier(x, y)
    throughput_end, latency_end = y[front].max(), x[front].max()
    assert throughput_end == pytest.approx(5000, rel=0.10)
    assert latency_end == pytest.approx(180, rel=0.10)


def test_dataset_loads_through_the_results_loader() -> None:
    results = pytest.importorskip("pdtune.results")
    for mode, count in (("prefill", 9), ("decode", 10), ("disagg", 7)):
        df = results.load_results(DATASET / mode)
        assert len(df) == count * len(GRID)
        assert df["modeled"].all() and set(df["mode"]) == {mode}
        records = {(r["_path"]): r for r in _records(mode)}
        for _, row in df.iterrows():
            r = records[row["path"]]
            assert row["gpus_total"] == r["_gpus"]
            assert row["tps_per_gpu"] == pytest.approx(r["_tps_per_gpu"])


def test_inferencex_points_are_shipped_unchanged() -> None:
    shipped = inferencex_file()
    text = shipped.read_text(encoding="utf-8")
    assert text.startswith("# Licensed under Apache License 2.0")
    assert "Attribution to InferenceX is required" in text
    if SHARED_SAMPLE.is_file():
        assert shipped.read_bytes() == SHARED_SAMPLE.read_bytes()


def test_inferencex_prediction_errors(record_property: pytest.RecordProperty) -> None:
    """Predicted vs measured for the nine GB200 DeepSeek-R1 points: computed and finite. The size of the
    errors is recorded (``-rP`` or the junit report), not asserted: nothing was fitted to these points."""
    table = inferencex_check()
    assert len(table) == 9
    assert list(table["concurrency"]) == [4301, 180, 4, 8, 12, 24, 48, 2253, 16130]
    for col in ("tps_per_gpu_error", "tps_per_user_error", "ttft_ms_error"):
        assert table[col].map(math.isfinite).all(), col
    assert (table["predicted_tps_per_gpu"] > 0).all()
    record_property(
        "inferencex_errors",
        table[["concurrency", "deployment", "tps_per_gpu_error", "tps_per_user_error", "ttft_ms_error"]]
        .round(3)
        .to_dict("records"),
    )
    print(table.round(3).to_string(index=False))


def test_inferencex_cli(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dataset", "inferencex", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["modeled_vs_measured"]) == 9


def test_another_model_gets_its_own_precision_node_size_and_no_borrowed_accuracy(tmp_path: Path) -> None:
    spec = DatasetSpec(
        model="qwen3-next-80b-a3b",
        gpu="h200",
        grid=(1, 64),
        prefill_topologies=("TP4",),
        decode_topologies=("TP4",),
        disagg_configs=(("1xTP4:1xTP4", True),),
        accuracy=None,
    )
    out = generate_dataset(tmp_path / "h200", spec)
    meta = json.loads(next((out / "disagg" / "outputs").glob("*/*.json")).read_text(encoding="utf-8"))
    assert meta["model"]["precision"] == "bfloat16" and meta["resources"]["gpus_per_node"] == 8
    results = list((out / "disagg").rglob("results_concurrency_*.json"))
    assert len(results) == 2
    for path in results:
        record = json.loads(path.read_text(encoding="utf-8"))
        assert record["modeled"] is True and "accuracy" not in record
    manifest = json.loads((out / "pdtune-dataset.json").read_text(encoding="utf-8"))
    assert manifest["accuracy"]["value"] is None and manifest["model"] == "qwen3-next-80b-a3b"
