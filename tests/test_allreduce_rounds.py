"""vLLM's custom all-reduce runs one-shot for small messages and two-shot above a size that depends on the group:
each round pays the collective latency once (pdtune.perfmodel.network.allreduce_rounds)."""

from __future__ import annotations

import pytest

from pdtune.gpus import load_gpu
from pdtune.model import load_model
from pdtune.perfmodel import Batch, build_engine
from pdtune.memory import graph_tokens
from pdtune.perfmodel.network import allreduce_rounds
from pdtune.topology import parse_topology


@pytest.mark.parametrize(("group", "message", "rounds"), [
    # csrc/custom_all_reduce.cuh, CustomAllreduce::allreduce: two GPUs always cross_device_reduce_1stage; else
    # 1stage when (world_size <= 4 and bytes < 512 KiB) or (world_size <= 8 and bytes < 256 KiB), else 2stage.
    (2, 64 << 20, 1),
    (4, (512 << 10) - 1, 1), (4, 512 << 10, 2),
    (8, (256 << 10) - 1, 1), (8, 256 << 10, 2),
    (6, (256 << 10) - 1, 1), (6, 256 << 10, 2),
])
def test_one_shot_below_the_size_vllm_switches_at(group: int, message: int, rounds: int) -> None:
    assert allreduce_rounds(group, message) == rounds


def test_llama_70b_decode_at_tp8_turns_two_shot_at_16_sequences() -> None:
    # Llama-3.1-70B: hidden 8192, bf16 activations: a decode step of n tokens all-reduces n x 8192 x 2 B twice a
    # layer. At 15 sequences the CUDA graph pads to 16 (capture sizes 1, 2, 4, 8, 16, ...): 16 x 16 KiB = 256 KiB,
    # not below 256 KiB, so two-shot; at 8 sequences, 128 KiB, one-shot. 80 layers x 2 all-reduces = 160 calls,
    # 320 when two-shot (plus the one lm_head gather the step adds alike).
    engine = build_engine(load_model("llama-3.1-70b"), load_gpu("h100"), parse_topology("TP8"), isl=1024, osl=1024)
    limit, budget = engine.capture_limit, engine.config.max_num_batched_tokens
    assert graph_tokens(15, limit, budget) == 16 and graph_tokens(7.2, limit, budget) == 8
    assert graph_tokens(limit + 1, limit, budget) == limit + 1  # above the largest capture size: eager, unpadded
    calls = {n: sum(s.calls for s in engine.stage_terms(Batch(tokens=n, seqs=n, kv_tokens_read=1024.0 * n)))
             for n in (8, 15)}
    assert calls[15] - calls[8] == 160
    # At TP2 the message never leaves one-shot (H200: TP2 fits there).
    tp2 = build_engine(load_model("llama-3.1-70b"), load_gpu("h200"), parse_topology("TP2"), isl=1024, osl=1024)
    calls2 = {n: sum(s.calls for s in tp2.stage_terms(Batch(tokens=n, seqs=n, kv_tokens_read=1024.0 * n)))
              for n in (8, 64)}
    assert calls2[64] == calls2[8]
