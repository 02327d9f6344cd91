"""One KV-transfer rule: `pdtune predict --mode disagg`, the dataset generator and `pdtune plan` charge the same
`kv_transfer_ms` for the same deployment, because all three call pdtune.transfer."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from pdtune.cli import main
from pdtune.gpus import load_gpu
from pdtune.model import load_model
from pdtune.paths import clusters_dir
from pdtune.perfmodel import DEFAULT_EFFICIENCY, EngineConfig, predict_disagg
from pdtune.perfmodel.calibrate import Calibration
from pdtune.perfmodel.sweeps import kv_transfer
from pdtune.plan import PlanSettings, plan
from pdtune.topology import parse_deployment, parse_topology
from pdtune.transfer import SCALE_OUT, pool_link, request_transfer


def _plan_ms(p, prefill: str, decode: str, mtp: int, gpus_total: int) -> float:
    rows = p.rows[(p.rows["prefill_topology"] == parse_topology(prefill).canonical)
                  & (p.rows["decode_topology"] == parse_topology(decode).canonical)
                  & (p.rows["mtp_tokens"] == mtp) & (p.rows["gpus_total"] == gpus_total)]
    assert len(rows), (prefill, decode, mtp, gpus_total)
    values = set(rows["kv_transfer_ms"])
    assert len(values) == 1
    return values.pop()


def _predict_ms(argv: list[str], capsys: pytest.CaptureFixture[str]) -> float:
    assert main(["predict", *argv, "--json"]) == 0
    preds = json.loads(capsys.readouterr().out)["predictions"]
    values = {p["kv_transfer_ms"] for p in preds}
    assert len(values) == 1 and values.pop() > 0
    return preds[0]["kv_transfer_ms"]


def test_the_committed_article_dataset_predict_and_plan_agree(capsys: pytest.CaptureFixture[str]) -> None:
    """1xTP2DP4+EP : 1xTEP8 with MTP 3 on GB300 (24 GPUs, one NVL72 rack: NVLink), TP 2 -> 8: the hybrid
    block-size fix and re-sharding, the same bytes and link everywhere (GB300's defaults are the article's
    factors, which the committed dataset was generated with)."""
    job = clusters_dir() / "gb300-qwen3.8-modeled" / "disagg" / "outputs" / "3003"
    files = sorted(job.rglob("results_*.json"))
    assert json.loads((job / "3003.json").read_text(encoding="utf-8"))["name"] == \
        "disaggregated 1xTP2DP4+EP:1xTEP8 MTP3"
    dataset = {json.loads(f.read_text(encoding="utf-8"))["pdtune"]["kv_transfer_ms"] for f in files}
    assert len(dataset) == 1
    predicted = _predict_ms(["qwen3.8-2.4t", "--gpu", "gb300", "--topology", "1xTP2DP4+EP:1xTEP8", "--mtp", "3",
                             "--concurrency", "8,256"], capsys)
    p = plan(PlanSettings(model="qwen3.8-2.4t", gpu="gb300", max_gpus=72, isl=8192, osl=1024,
                          prefill_topologies=("TP2DP4+EP",), decode_topologies=("TEP8",)))
    planned = _plan_ms(p, "TP2DP4+EP", "TEP8", 3, 24)
    assert dataset.pop() == pytest.approx(predicted, rel=1e-6)  # the files keep 7 significant digits
    assert predicted == pytest.approx(planned, rel=1e-12)
    # ... and it is pdtune.transfer's number: 1 decode rank x its share over NVLink at the article's link factor.
    spec, gpu = load_model("qwen3.8-2.4t"), load_gpu("gb300")
    t = request_transfer(spec, parse_topology("TP2DP4+EP"), parse_topology("TEP8"), pool_link(gpu, gpu, 24),
                         isl=8192, osl=1024, kv_cache_dtype="fp8", vllm="0.33.0", num_speculative_tokens=3,
                         efficiency=DEFAULT_EFFICIENCY.link)
    assert t.blocks.to_set is not None and t.ms == pytest.approx(planned, rel=1e-12)


def test_across_hgx_nodes_all_three_agree_with_one_calibration(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """2xTP2 : 1xTEP8 of Qwen3-Next on H200 is 12 GPUs: two HGX nodes, so the transfer crosses ConnectX-7;
    the three commands read the same calibration file (its link factor sets the achieved bandwidth)."""
    eff = replace(DEFAULT_EFFICIENCY, link=0.6)
    cal = tmp_path / "cal.yaml"
    cal.write_text(Calibration("qwen3-next-80b-a3b", "h200", eff).to_yaml(), encoding="utf-8")
    out = tmp_path / "ds"
    assert main(["dataset", "generate", "--model", "qwen3-next-80b-a3b", "--gpu", "h200", "--prefill-topologies",
                 "TP2", "--decode-topologies", "TEP8", "--disagg", "2xTP2:1xTEP8", "--concurrency", "1,64",
                 "--calibration", str(cal), "--out", str(out)]) == 0
    capsys.readouterr()
    dataset = {json.loads(f.read_text(encoding="utf-8"))["pdtune"]["kv_transfer_ms"]
               for f in (out / "disagg").rglob("results_*.json")}
    predicted = _predict_ms(["qwen3-next-80b-a3b", "--gpu", "h200", "--topology", "2xTP2:1xTEP8", "--concurrency",
                             "1,64", "--calibration", str(cal)], capsys)
    p = plan(PlanSettings(model="qwen3-next-80b-a3b", gpu="h200", max_gpus=16, isl=8192, osl=1024,
                          prefill_topologies=("TP2",), decode_topologies=("TEP8",), calibration=(str(cal),)))
    planned = _plan_ms(p, "TP2", "TEP8", 0, 12)
    assert len(dataset) == 1 and dataset.pop() == pytest.approx(predicted, rel=1e-6)
    assert predicted == pytest.approx(planned, rel=1e-12)
    gpu = load_gpu("h200")
    link = pool_link(gpu, gpu, 12)
    assert link.scope == SCALE_OUT and link.bandwidth == gpu.network_bandwidth
    t = kv_transfer(load_model("qwen3-next-80b-a3b"), gpu, parse_deployment("2xTP2:1xTEP8"), isl=8192, osl=1024,
                    mtp_tokens=0, config=EngineConfig(vllm="0.33.0"), efficiency=eff)
    assert 1000 * t.seconds == pytest.approx(planned, rel=1e-12)
    assert t.seconds == pytest.approx(t.bottleneck_bytes / (gpu.network_bandwidth * 0.6) + link.latency_s)


def test_the_transfer_is_a_term_of_the_disaggregated_ttft() -> None:
    """Halving the link factor adds exactly the extra transfer time to TTFT (the rest of the prediction has no
    link-bound term at a concurrency of one on one-GPU engines)."""
    spec, gpu, dep = load_model("qwen3-32b"), load_gpu("h200"), parse_deployment("1xTP1:1xTP1")
    full, half = (predict_disagg(spec, gpu, dep, [1], efficiency=replace(DEFAULT_EFFICIENCY, link=f))[0]
                  for f in (0.8, 0.4))
    assert half.kv_transfer_ms > full.kv_transfer_ms > 0
    assert half.ttft_ms - full.ttft_ms == pytest.approx(half.kv_transfer_ms - full.kv_transfer_ms)
    assert half.tpot_ms == full.tpot_ms
