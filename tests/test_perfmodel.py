"""The performance model's pieces, pinned to numbers worked out by hand."""

from __future__ import annotations

import math

import pytest

from pdtune.errors import InputError
from pdtune.gpus import load_gpu
from pdtune.model import load_model
from pdtune.perfmodel import (
    ROOFLINE,
    Batch,
    Efficiency,
    EngineConfig,
    build_engine,
    model_costs,
    predict_decode,
    predict_disagg,
    predict_prefill,
    to_frame,
)
from pdtune.perfmodel.costs import pp_partition, stage_layers
from pdtune.perfmodel.expert_load import busiest_rank
from pdtune.topology import parse_deployment, parse_topology
from pdtune.units import GiB


@pytest.fixture(scope="module")
def qwen():
    return load_model("qwen3.8-2.4t")


@pytest.fixture(scope="module")
def gb300():
    return load_gpu("gb300")


def test_costs_of_the_articles_model(qwen) -> None:
    c = model_costs(qwen)
    assert c.expert_params == 3 * 8704 * 1920 == 50_135_040
    assert c.expert_bytes == 50_135_040 * 9 // 16  # NVFP4 with its block scales
    assert (c.num_experts, c.experts_per_token) == (512, 10)
    assert c.lm_head_params == 248_320 * 8704
    assert (c.dense_dtype, c.expert_dtype) == ("bf16", "fp4")
    assert (c.attention_layers, c.recurrent_layers, c.num_moe_layers) == (23, 69, 92)
    # Attention pair term: QK^T and PV over 64 heads of 256.
    assert c.attn_pair_flops_prefill == 4 * 64 * 256
    # GDN decode: 6 dk dv per value head plus the causal conv's share, 128 value heads.
    conv = 2 * 4 * (128 * 16 * 2 + 128 * 128) // 128
    assert c.recurrent_flops_decode == 128 * (6 * 128 * 128 + conv)
    # Dense layers hold every non-expert matmul weight except the vocabulary.
    assert sum(layer.dense_params for layer in c.layers) == 44_644_464_640


def test_pipeline_stages_follow_vllm(qwen) -> None:
    assert pp_partition(92, 8) == [11, 11, 11, 12, 12, 12, 12, 11]
    assert pp_partition(92, 6) == [15, 15, 15, 16, 16, 15]
    assert pp_partition(61, 1) == [61]
    assert [len(s) for s in stage_layers(92, 4)] == [23, 23, 23, 23]


def test_engine_memory_and_kv_room(qwen, gb300) -> None:
    tep8 = build_engine(qwen, gb300, parse_topology("TEP8"), isl=8192, osl=1024, mtp_tokens=3)
    assert tep8.weights_per_gpu / GiB == pytest.approx(168.65, abs=0.01)  # article table 3: 169.28
    assert tep8.overheads.source.startswith("article table 3, run 4")
    # vLLM's TP-sharded accounting: 1 KV head per rank (4 heads over TP8 replicate), 16 of 128 GDN heads.
    assert tep8.kv_bytes_per_token == 1 * 256 * 2 * 1
    assert tep8.capacity == 281  # close to the max-num-seqs 272 the article ran TEP8+MTP with
    tp4dp4 = build_engine(qwen, gb300, parse_topology("TP4DP4+EP"), isl=8192, osl=1024)
    assert (tp4dp4.capacity_per_rank, tp4dp4.capacity) == (753, 3012)  # room for the 2560 of the sweep
    pp8 = build_engine(qwen, gb300, parse_topology("TP1PP8+EP"), isl=8192, osl=2)
    assert pp8.weights_per_gpu / GiB == pytest.approx(172.21, abs=0.01)  # a 12-layer stage with the lm_head


def test_a_layout_that_does_not_fit_is_an_input_error(qwen, gb300) -> None:
    with pytest.raises(InputError) as err:
        build_engine(qwen, gb300, parse_topology("TP2"), isl=8192, osl=1024)
    assert err.value.field == "kv_cache" and "does not fit" in err.value.message
    with pytest.raises(InputError):
        build_engine(qwen, gb300, parse_topology("TP3+EP"), isl=1, osl=10)
    with pytest.raises(InputError):
        build_engine(load_model("llama-3.1-70b"), gb300, parse_topology("TP8"), isl=1, osl=10, mtp_tokens=2)


def test_experts_touched_by_one_token_are_k(qwen, gb300) -> None:
    # Without EP every GPU holds a 1/8 slice of every expert, so it reads the mean: k experts' bytes / 8.
    e = build_engine(qwen, gb300, parse_topology("TP8"), isl=1, osl=1000)
    c = e.costs
    assert e._experts_work(1).bytes == pytest.approx(10 * c.expert_bytes / 8)
    # Many tokens touch every expert once: E (1 - (1 - k/E)^T) -> E.
    assert e._experts_work(100_000).bytes == pytest.approx(512 * c.expert_bytes / 8)
    touched_64 = 512 * (1 - (1 - 10 / 512) ** 64)
    assert e._experts_work(64).bytes == pytest.approx(touched_64 * c.expert_bytes / 8)


def test_expert_parallel_layers_wait_for_the_busiest_rank(qwen, gb300) -> None:
    # TEP8: 64 whole experts per GPU; the step reads the busiest GPU's touched experts (expert_load.busiest_rank),
    # more than the mean at few tokens, the same once every expert is touched.
    e = build_engine(qwen, gb300, parse_topology("TEP8"), isl=1, osl=1000)
    c = e.costs
    for tokens in (1, 64):
        mean = 512 * (1 - (1 - 10 / 512) ** tokens) / 8
        assert e._experts_work(tokens).bytes == pytest.approx(busiest_rank(512, 10, tokens, 8) * c.expert_bytes)
        assert e._experts_work(tokens).bytes > 1.1 * mean * c.expert_bytes
    assert e._experts_work(100_000).bytes == pytest.approx(64 * c.expert_bytes)
    assert e._experts_work(64).flops == build_engine(qwen, gb300, parse_topology("TP8"), isl=1,
                                                     osl=1000)._experts_work(64).flops


def test_tp_all_reduce_bytes(qwen, gb300) -> None:
    e = build_engine(qwen, gb300, parse_topology("TEP8"), isl=1, osl=1000)
    eff = Efficiency(link=0.5, collective_latency_s=0.0, step_overhead_s=0.0)
    step = e.step_time(Batch(tokens=100, seqs=100, ep_tokens=100), eff)
    # Two ring all-reduces per layer of 100 x 8704 bf16 activations, 2 (t-1)/t of them per GPU.
    expected = 92 * 2 * (2 * 7 / 8 * 100 * 8704 * 2) / (900e9 * 0.5)
    assert step.parts["tp_comm"] == pytest.approx(expected)
    assert "ep_comm" not in step.parts  # DP = 1: the experts reduce with the same all-reduce


def test_ep_all_gather_reduce_scatter_bytes(qwen, gb300) -> None:
    e = build_engine(qwen, gb300, parse_topology("DP16+EP"), isl=1, osl=1000)
    eff = Efficiency(link=1.0, collective_latency_s=0.0, step_overhead_s=0.0)
    step = e.step_time(Batch(tokens=10, seqs=10, ep_tokens=160), eff)
    # All-gather of NVFP4 activations (9/16 B) and reduce-scatter in bf16 over the 16-GPU EP group.
    expected = 92 * 15 / 16 * 160 * 8704 * (9 / 16 + 2) / 900e9
    assert step.parts["ep_comm"] == pytest.approx(expected)
    assert "tp_comm" not in step.parts


def test_roofline_is_a_lower_bound_of_every_step(qwen, gb300) -> None:
    e = build_engine(qwen, gb300, parse_topology("TP2DP4+EP"), isl=8192, osl=2)
    for batch in (
        Batch(tokens=8192, seqs=1, prefill_tokens=8192, attn_pairs=8192 * 4096, logits=1, ep_tokens=32768),
        Batch(tokens=64, seqs=64, kv_tokens_read=64 * 500, attn_pairs=64 * 500, logits=64, ep_tokens=256),
    ):
        assert e.roofline_time(batch) <= e.step_time(batch, ROOFLINE).total <= e.step_time(batch).total


def test_efficiency_factors_are_checked() -> None:
    for bad in ({"compute": 0.0}, {"hbm": 1.2}, {"link": float("nan")}, {"step_overhead_s": -1.0}):
        with pytest.raises(InputError):
            Efficiency(**bad)


def test_decode_bends_where_kv_runs_out(qwen, gb300) -> None:
    preds = predict_decode(
        qwen, gb300, parse_topology("TEP8"), [256, 454, 512, 2048], mtp_tokens=3, acceptance=0.25
    )
    capacity = preds[0].kv_capacity
    assert capacity == 454
    assert [p.kv_limited for p in preds] == [False, False, True, True]
    # Past the KV room the throughput stops rising and the extra requests wait: TTFT grows, TPOT does not.
    assert preds[2].tps_per_gpu == pytest.approx(preds[1].tps_per_gpu)
    assert preds[3].tpot_ms == pytest.approx(preds[1].tpot_ms)
    assert preds[3].ttft_ms > 10 * preds[1].ttft_ms


def test_mtp_helps_at_low_concurrency(qwen, gb300) -> None:
    topo = parse_topology("TEP8")
    [plain] = predict_decode(qwen, gb300, topo, [1])
    [mtp] = predict_decode(qwen, gb300, topo, [1], mtp_tokens=3, acceptance=0.25)
    # A step keeps 1 + 3 x 0.25 = 1.75 tokens; its 4 tokens touch more experts, and on TEP8 the busiest GPU reads
    # 8.0 of its 64 against 3.0 for one token (expert_load.busiest_rank), so the step costs ~1.5x: a 15 % gain.
    assert mtp.tpot_ms < 0.9 * plain.tpot_ms


def test_pipeline_bubbles_at_low_concurrency(qwen, gb300) -> None:
    preds = predict_prefill(qwen, gb300, parse_topology("TP1PP8+EP"), [1, 2, 4, 8, 16])
    tps = [p.tps_per_gpu for p in preds]
    # One request keeps one of eight stages busy: throughput grows with requests until the pipeline is full.
    assert tps[1] == pytest.approx(2 * tps[0], rel=1e-6)
    assert tps[3] > 1.8 * tps[2]
    assert tps[4] == pytest.approx(tps[3])


def test_disaggregated_balance(qwen, gb300) -> None:
    dep = parse_deployment("1xTP2DP4+EP:1xTEP8")
    [p] = predict_disagg(qwen, gb300, dep, [64], mtp_tokens=3, acceptance=0.25)
    assert 0 < p.running < 64
    assert p.gpus_total == 16 and p.total_tps == pytest.approx(p.request_rate * (8192 + 1024))
    # Every request's life: TTFT (prefill, queue, KV transfer) then OSL - 1 decode tokens (Little's law).
    life_ms = p.ttft_ms + 1023 * p.tpot_ms
    assert 64 / p.request_rate * 1000 == pytest.approx(life_ms, rel=0.05)
    with pytest.raises(InputError):
        predict_disagg(qwen, gb300, dep, [1], osl=1)
    with pytest.raises(InputError):
        predict_disagg(qwen, gb300, dep, [1], acceptance=1.5)
    with pytest.raises(InputError):
        predict_disagg(qwen, gb300, dep, [0])


def test_frame_is_tidy_and_modeled(qwen, gb300) -> None:
    df = to_frame(predict_prefill(qwen, gb300, parse_topology("TP4DP2+EP"), [1, 2]))
    assert list(df["mode"]) == ["prefill", "prefill"] and df["modeled"].all()
    assert (df["tps_per_gpu"] == df["total_tps"] / 8).all()
    assert df["tps_per_user"].iloc[0] == pytest.approx(1000 / df["tpot_ms_p50"].iloc[0])


def test_config_changes_what_fits(qwen, gb300) -> None:
    small = EngineConfig(gpu_memory_utilization=0.85)
    a = build_engine(qwen, gb300, parse_topology("TEP8"), isl=8192, osl=1024)
    b = build_engine(qwen, gb300, parse_topology("TEP8"), isl=8192, osl=1024, config=small)
    assert b.kv_cache_per_gpu == pytest.approx(a.kv_cache_per_gpu - 0.07 * gb300.memory_total, abs=2)
    assert b.capacity < a.capacity
    capped = build_engine(
        qwen, gb300, parse_topology("TEP8"), isl=8192, osl=1024, config=EngineConfig(max_num_seqs=64)
    )
    assert capped.capacity == 64
    assert math.isfinite(capped.roofline_time(Batch(tokens=1, seqs=1, ep_tokens=1)))
