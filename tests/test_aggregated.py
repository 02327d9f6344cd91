"""Aggregated serving (pdtune.perfmodel.aggregated): hand-counted steps of vLLM's closed loop, and its edges."""

from __future__ import annotations

import math

import pytest

from pdtune.gpus import load_gpu
from pdtune.model import load_model
from pdtune.perfmodel import Batch, Efficiency, EngineConfig, build_engine
from pdtune.perfmodel.aggregated import agg_plan, agg_prediction, serving_defaults
from pdtune.topology import parse_topology

#: Round factors so that the arithmetic below is the only thing tested.
EFF = Efficiency(compute=0.5, hbm=0.8, link=0.8, collective_latency_s=10e-6, step_overhead_s=1e-3,
                 layer_overhead_s=20e-6, request_overhead_s=0.03, arrival_clustering=0.0)


@pytest.fixture(scope="module")
def engine():
    config = EngineConfig(gpu_memory_utilization=0.9, kv_cache_dtype="auto", vllm="0.18.0",
                          max_num_batched_tokens=8192, max_num_seqs=1024, overheads_gib=(5.6, 0.55, 0.0))
    return build_engine(load_model("llama-3.1-8b"), load_gpu("h200"), parse_topology("TP1"), isl=1024, osl=1024,
                        config=config)


def _t(engine, **batch) -> float:
    return engine.step_time(Batch(**batch), EFF).total


def test_one_client_prefills_alone_then_decodes_alone(engine) -> None:
    # C = 1, ISL = OSL = 1024: the prompt is one 1024-token step with nothing else in it (the engine was idle, so no
    # wait), then 1023 decode steps of one request that reads 1024 + 512 cached tokens on average.
    [p] = [agg_prediction(engine, agg_plan(engine, 1, 1024, 1024, EFF.arrival_clustering), 1024, 1024, EFF)]
    prefill = _t(engine, tokens=1024, seqs=1, prefill_tokens=1024, attn_pairs=1024 * 1025 / 2, logits=1,
                 ep_tokens=1024)
    decode = _t(engine, tokens=1, seqs=1, attn_pairs=1536, decode_pairs=1536, kv_tokens_read=1536, logits=1,
                ep_tokens=1)
    assert p.ttft_ms == pytest.approx(1000 * (prefill + 0.03))
    assert p.tpot_ms == pytest.approx(1000 * decode)
    assert p.request_rate == pytest.approx(1 / (prefill + 0.03 + 1023 * decode))
    assert p.tps_per_gpu == pytest.approx(p.request_rate * 2048)


def test_sixteen_clients_interleave_prefills_with_the_others_decodes(engine) -> None:
    # C = 16, ISL 1024, OSL 128, every prompt alone (arrival_clustering 0): 16 cohorts of 1, each prompt one step
    # (1024 tokens fit the 8192 - 15 left by the others' decode tokens). A life is 1 wait + 1 prefill + 127 decode
    # steps = 129 steps, 16 of which carry a prompt next to 15 decode tokens. A request's 127 decode steps meet the
    # other 15 prompts; the 113 decode-only steps carry the 16 x 127 - 15 x 16 = 1792 remaining decode tokens.
    plan = agg_plan(engine, 16, 1024, 128, 0.0)
    assert plan.regime == "sparse" and not plan.kv_limited
    mixed = _t(engine, tokens=15 + 1024, seqs=16, prefill_tokens=1024, attn_pairs=15 * 1088 + 1024 * 1025 / 2,
               decode_pairs=15 * 1088, kv_tokens_read=15 * 1088, logits=16, ep_tokens=15 + 1024)
    per_step = 1792 / 113
    decode = _t(engine, tokens=per_step, seqs=per_step, attn_pairs=per_step * 1088, decode_pairs=per_step * 1088,
                kv_tokens_read=per_step * 1088, logits=per_step, ep_tokens=per_step)
    ttft, tpot = plan.evaluate(engine, EFF)
    assert tpot == pytest.approx((15 * mixed + 112 * decode) / 127)
    assert ttft == pytest.approx((16 * mixed + 113 * decode) / 129 + mixed + 0.03)


def test_long_prompts_fill_the_budget(engine) -> None:
    # C = 64 prompts of 8192 with OSL 2: far more prompt tokens than budget, so every step carries 8192 tokens,
    # 8192 x 1 / 8193 of them decode tokens; a life is 64 x 8193 / 8192 steps, the first token after all but one.
    plan = agg_plan(engine, 64, 8192, 2, 0.0)
    assert plan.regime == "full"
    decodes = 8192 / 8193
    prefill = 8192 - decodes
    context = 8192 + 1
    full = _t(engine, tokens=8192, seqs=decodes + prefill / 8192, prefill_tokens=prefill,
              attn_pairs=decodes * context + prefill * 8193 / 2, decode_pairs=decodes * context,
              kv_tokens_read=decodes * context, logits=decodes + prefill / 8192, ep_tokens=8192)
    ttft, tpot = plan.evaluate(engine, EFF)
    assert tpot == pytest.approx(full)
    assert ttft == pytest.approx((64 * 8193 / 8192 - 1) * full + 0.03)


def test_cohorts_make_the_first_token_wait_for_the_others(engine) -> None:
    # With every client's prompt arriving together (clustering 1) the median prompt waits for half the cohort.
    alone = agg_plan(engine, 16, 1024, 1024, 0.0).evaluate(engine, EFF)[0]
    together = agg_plan(engine, 16, 1024, 1024, 1.0).evaluate(engine, EFF)[0]
    assert together > 2 * alone


def test_beyond_the_kv_room_requests_queue() -> None:
    # Llama-3.1-70B in BF16 on two H200s holds few 8192 + 1024-token requests. Past the room R a waiting prompt is
    # not admitted until its blocks fit (Scheduler.schedule, vllm/v1/core/sched/scheduler.py: the waiting loop
    # breaks when allocate_slots returns None), so R requests decode at R's pace (TPOT flat) and the k clients
    # queue: by Little's law TTFT = TTFT_R + (k / R - 1) x (TTFT_R + 1023 x TPOT_R), linear in k.
    engine = build_engine(load_model("llama-3.1-70b"), load_gpu("h200"), parse_topology("TP2"), isl=8192, osl=1024,
                          config=EngineConfig(kv_cache_dtype="auto", overheads_gib=(5.6, 0.55, 0.0)))
    small, large = agg_plan(engine, 8, 8192, 1024), agg_plan(engine, 512, 8192, 1024)
    assert not small.kv_limited and large.kv_limited
    room = large.running
    assert room < 64  # far below the 512 clients
    ttft_r, tpot_r = agg_plan(engine, math.floor(room), 8192, 1024).evaluate(engine, EFF)
    ttft, tpot = large.evaluate(engine, EFF)
    assert tpot == pytest.approx(tpot_r, rel=0.05)
    assert ttft == pytest.approx(ttft_r + (512 / room - 1) * (ttft_r + 1023 * tpot_r), rel=0.05)
    # Twice the clients beyond the room: twice the queue, the same TPOT.
    ttft_2, tpot_2 = agg_plan(engine, 1024, 8192, 1024).evaluate(engine, EFF)
    assert tpot_2 == pytest.approx(tpot, rel=1e-9)
    assert ttft_2 - ttft_r == pytest.approx((1024 / room - 1) / (512 / room - 1) * (ttft - ttft_r), rel=0.01)


def test_beyond_max_num_seqs_requests_queue() -> None:
    # Beyond max_num_seqs S no prompt is admitted (Scheduler.schedule stops at max_num_running_reqs): the S
    # admitted ones decode at S's pace and, by Little's law, a client waits (k / S - 1) x (TTFT_S + (OSL - 1)
    # x TPOT_S) before its prompt starts.
    spec, gpu, topo = load_model("llama-3.1-70b"), load_gpu("h200"), parse_topology("TP4")
    engine = build_engine(spec, gpu, topo, isl=1024, osl=256,
                          config=EngineConfig(kv_cache_dtype="auto", max_num_seqs=16))
    at_limit, beyond = agg_plan(engine, 16, 1024, 256), agg_plan(engine, 64, 1024, 256)
    assert beyond.kv_limited and not at_limit.kv_limited
    ttft_s, tpot_s = at_limit.evaluate(engine, EFF)
    ttft, tpot = beyond.evaluate(engine, EFF)
    assert tpot == pytest.approx(tpot_s, rel=1e-9)
    assert ttft == pytest.approx(ttft_s + 3 * (ttft_s + 255 * tpot_s), rel=1e-9)


def test_more_clients_never_lower_latency(engine) -> None:
    last = (0.0, 0.0)
    for c in (1, 2, 4, 8, 16, 32, 64, 128, 256):
        ttft, tpot = agg_plan(engine, c, 1024, 1024, 0.15).evaluate(engine, EFF)
        assert ttft >= last[0] * 0.999 and tpot >= last[1] * 0.999, c
        last = (ttft, tpot)


def test_vllm_serving_defaults_per_version_and_gpu() -> None:
    # EngineArgs.get_batch_defaults: 8192 on 70 GiB+ GPUs; from 0.28, 16384 on 160 GiB+ (B200 and up).
    assert serving_defaults("0.18.0", load_gpu("b200")) == (8192, 1024)
    assert serving_defaults("0.30.0", load_gpu("b200")) == (16384, 1024)
    assert serving_defaults("0.30.0", load_gpu("h100")) == (8192, 1024)


def test_step_terms_are_the_step_time() -> None:
    # The fit re-times steps from StepTerms; they must equal the engine's own step time for any factors.
    engine = build_engine(load_model("deepseek-v3"), load_gpu("h200"), parse_topology("TEP16"), isl=1024, osl=1024)
    batch = Batch(tokens=300.0, seqs=20.0, prefill_tokens=280.0, attn_pairs=5e5, decode_pairs=1e4,
                  kv_tokens_read=3e4, logits=20.0, ep_tokens=300.0)
    for eff in (EFF, Efficiency(compute=0.3, hbm=0.5, link=0.4, expert_compute=0.2, expert_hbm=0.6)):
        assert engine.step_terms(batch).seconds(eff) == pytest.approx(engine.step_time(batch, eff).total, rel=1e-12)


def test_groups_beyond_the_nvlink_domain_pay_the_network() -> None:
    # TEP16 on two 8-GPU HGX H200 boards: every all-reduce leaves the node (network bandwidth and latency), so one
    # user decodes slower than on TEP8, although each GPU reads half the weights.
    from pdtune.perfmodel import predict_decode

    spec, gpu = load_model("deepseek-v3"), load_gpu("h200")
    [tep8] = predict_decode(spec, gpu, parse_topology("TEP8"), [1], isl=1024, osl=1024)
    [tep16] = predict_decode(spec, gpu, parse_topology("TEP16"), [1], isl=1024, osl=1024)
    assert tep16.tpot_ms > tep8.tpot_ms
    # what the engine prices a collective with: NVLink inside the 8-GPU domain, the NIC (and its latency) beyond
    from pdtune.perfmodel.network import group_bandwidth, scale_out_latency

    assert not gpu.crosses_network(8) and gpu.crosses_network(16)
    assert group_bandwidth(gpu, 8, EFF) == pytest.approx(450e9 * 0.8)
    assert group_bandwidth(gpu, 16, EFF) == pytest.approx(50e9 * 0.8)
    assert scale_out_latency("h200") == pytest.approx(20e-6)


def test_the_scheduler_pages_kv_case_queues_in_both_models() -> None:
    """Chapter 8's KV-limited case (Llama-3.1-8B on one H100, room for 14 requests): above the room the
    steady-state model's TPOT stays flat and its TTFT grows linearly, as the simulation's ("puts the same queue
    in")."""
    from pdtune.chapters import scheduler as sched

    kv = sched.sweep(sched.KV_LIMITED, (32, 64, 96)).set_index("concurrency")
    steady_tpot, steady_ttft = kv["steady_tpot_ms"], kv["steady_ttft_ms"]
    assert steady_tpot[96] == pytest.approx(steady_tpot[32], rel=1e-9)
    assert steady_ttft[96] - steady_ttft[64] == pytest.approx(steady_ttft[64] - steady_ttft[32], rel=1e-6)
    assert steady_ttft[96] == pytest.approx(kv.loc[96, "ttft_ms_p50"], rel=0.25)
