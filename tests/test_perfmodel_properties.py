"""Invariants of the performance model over models, GPUs, layouts and concurrencies."""

from __future__ import annotations

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from pdtune.errors import InputError
from pdtune.gpus import GpuSpec, bundled_gpus, load_gpu
from pdtune.model import ModelSpec, load_model
from pdtune.perfmodel import (
    Prediction,
    build_engine,
    model_costs,
    predict_decode,
    predict_disagg,
    predict_prefill,
)
from pdtune.topology import Deployment, Topology

MODELS = [
    "qwen3-next-80b-a3b",
    "deepseek-v3",
    "llama-3.1-70b",
    "gpt-oss-120b",
    "nemotron-nano-9b-v2",
    "qwen3.8-2.4t",
]
SETTINGS = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow]
)

topologies = st.builds(
    Topology,
    tp=st.sampled_from([1, 2, 4, 8]),
    dp=st.sampled_from([1, 2, 4]),
    pp=st.sampled_from([1, 1, 2]),
    expert_parallel=st.booleans(),
)
concurrency_lists = st.lists(st.integers(1, 3000), min_size=2, max_size=5, unique=True).map(sorted)


def _fits(spec: ModelSpec, gpu: GpuSpec, topo: Topology, isl: int, osl: int, mtp: int = 0) -> bool:
    try:
        build_engine(spec, gpu, topo, isl=isl, osl=osl, mtp_tokens=mtp)
    except InputError:
        return False
    return True


def _sweep(
    mode: str, spec: ModelSpec, gpu: GpuSpec, topo: Topology, cs: list[int], mtp: int, acceptance: float
) -> list[Prediction]:
    if mode == "prefill":
        return predict_prefill(spec, gpu, topo, cs)
    return predict_decode(spec, gpu, topo, cs, mtp_tokens=mtp, acceptance=acceptance)


def _peak_tokens_per_gpu(spec: ModelSpec, gpu: GpuSpec) -> float:
    """Tokens/s one GPU could push through the model's matmuls at peak: every token, input or output,
    multiplies through every dense layer and k experts per MoE layer."""
    c = model_costs(spec)
    dense = 2 * c.dense_params / gpu.peak_flops(c.dense_dtype)
    experts = 2 * c.num_moe_layers * c.experts_per_token * c.expert_params / gpu.peak_flops(c.expert_dtype)
    return 1 / (dense + experts)


@SETTINGS
@given(
    model=st.sampled_from(MODELS),
    gpu=st.sampled_from(bundled_gpus()),
    topo=topologies,
    mode=st.sampled_from(["prefill", "decode"]),
    cs=concurrency_lists,
    mtp=st.sampled_from([0, 1, 3]),
    acceptance=st.floats(0, 1),
)
def test_throughput_never_exceeds_the_roofline_and_rises_with_concurrency(
    model, gpu, topo, mode, cs, mtp, acceptance
) -> None:
    spec, g = load_model(model), load_gpu(gpu)
    mtp = mtp if mode == "decode" and spec.num_mtp_layers else 0
    isl, osl = (8192, 2) if mode == "prefill" else (1, 1000)
    assume(_fits(spec, g, topo, isl, osl, mtp))
    preds = _sweep(mode, spec, g, topo, cs, mtp, acceptance)
    peak = _peak_tokens_per_gpu(spec, g)
    for p in preds:
        assert p.total_tps <= p.roofline_tps * (1 + 1e-9)
        assert p.tps_per_gpu <= peak
        assert p.ttft_ms > 0 and p.tpot_ms > 0
    for a, b in zip(preds, preds[1:], strict=False):
        # Rises until the engine saturates or its KV cache is full, then stays flat.
        assert b.tps_per_gpu >= a.tps_per_gpu * (1 - 1e-9)


@SETTINGS
@given(
    model=st.sampled_from(MODELS),
    gpu=st.sampled_from(bundled_gpus()),
    topo=topologies,
    mode=st.sampled_from(["prefill", "decode"]),
    c=st.integers(1, 3000),
    grow=st.sampled_from(["tp", "dp"]),
)
def test_more_gpus_of_the_same_kind_never_lower_the_bound(model, gpu, topo, mode, c, grow) -> None:
    """More TP or DP ranks. Not PP: a pipeline's bound is its heaviest stage, and each micro-batch reads the
    last stage's lm_head again, so doubling PP can lower it a little (DeepSeek's 61 layers: PP2 is 31 + 30,
    PP4 has a 16-layer stage, 64 layer-slots for 61); test_pipeline_bubbles covers PP."""
    spec, g = load_model(model), load_gpu(gpu)
    isl, osl = (8192, 2) if mode == "prefill" else (1, 1000)
    sizes = {"tp": topo.tp, "dp": topo.dp, "pp": topo.pp, grow: 2 * getattr(topo, grow)}
    bigger = Topology(sizes["tp"], sizes["dp"], sizes["pp"], topo.expert_parallel)
    assume(_fits(spec, g, topo, isl, osl) and _fits(spec, g, bigger, isl, osl))
    [small] = _sweep(mode, spec, g, topo, [c], 0, 0.0)
    [large] = _sweep(mode, spec, g, bigger, [c], 0, 0.0)
    assert large.roofline_tps >= small.roofline_tps * (1 - 1e-9)


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow]
)
@given(
    model=st.sampled_from(["qwen3-next-80b-a3b", "deepseek-v3", "qwen3.8-2.4t"]),
    prefill=topologies,
    decode=topologies,
    x=st.integers(1, 3),
    y=st.integers(1, 2),
    cs=st.lists(st.integers(1, 2000), min_size=2, max_size=3, unique=True).map(sorted),
)
def test_disaggregated_never_exceeds_the_roofline_and_rises(model, prefill, decode, x, y, cs) -> None:
    spec, g = load_model(model), load_gpu("gb300")
    assume(_fits(spec, g, prefill, 8192, 1024) and _fits(spec, g, decode, 8192, 1024))
    preds = predict_disagg(spec, g, Deployment(prefill, x, decode, y), cs)
    peak = _peak_tokens_per_gpu(spec, g)
    for p in preds:
        assert p.total_tps <= p.roofline_tps * (1 + 1e-9)
        assert p.tps_per_gpu <= peak
        assert 0 <= p.running <= p.concurrency
    for a, b in zip(preds, preds[1:], strict=False):
        assert b.tps_per_gpu >= a.tps_per_gpu * (1 - 1e-6)
