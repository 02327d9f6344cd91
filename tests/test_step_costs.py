"""The step model's per-kind fractions, expert kernel families and fixed costs (what no roofline term sees)."""

from __future__ import annotations

import pytest

from pdtune.errors import InputError
from pdtune.gpus import load_gpu
from pdtune.model import load_model
from pdtune.perfmodel import Batch, Efficiency, EngineConfig, build_engine
from pdtune.perfmodel.defaults import architecture_of
from pdtune.perfmodel.engine import fixed_seconds
from pdtune.precision import expert_kernel, served_weights
from pdtune.topology import parse_topology

EFF = Efficiency(compute=0.5, hbm=0.8, link=0.8, collective_latency_s=10e-6, step_overhead_s=0.5e-3,
                 layer_overhead_s=40e-6)


def test_expert_kernel_families() -> None:
    # vLLM runs FP4 experts natively only on GPUs with FP4 tensor cores; on Hopper MXFP4 (gpt-oss) and INT4
    # (Kimi-K2.5's compressed-tensors) weights are dequantized to BF16 inside the kernel (Marlin, triton
    # w4a16: vllm/model_executor/layers/fused_moe/fused_marlin_moe.py).
    gpt, kimi, minimax = load_model("gpt-oss-120b"), load_model("kimi-k2.5"), load_model("minimax-m2.5")
    assert expert_kernel(gpt.weights, native_fp4=False) == "w4a16"
    assert expert_kernel(gpt.weights, native_fp4=True) == "fp4"
    assert expert_kernel(kimi.weights, native_fp4=True) == "w4a16"
    assert expert_kernel(minimax.weights, native_fp4=True) == "fp8"
    nvfp4, _ = served_weights(kimi, "nvfp4", "nvfp4")
    assert expert_kernel(nvfp4.weights, native_fp4=True) == "fp4"
    assert build_engine(gpt, load_gpu("h200"), parse_topology("TP1"), isl=1024, osl=1024).expert_kernel == "w4a16"
    assert build_engine(gpt, load_gpu("b200"), parse_topology("TP1"), isl=1024, osl=1024).expert_kernel == "fp4"
    assert build_engine(load_model("qwen3-32b"), load_gpu("h100"), parse_topology("TP2"), isl=1024,
                        osl=1024).expert_kernel == ""


def test_fractions_fall_back_to_the_generic_ones() -> None:
    eff = Efficiency(compute=0.5, hbm=0.8, expert_compute=0.3, expert_hbm=0.7)
    assert eff.fractions("dense") == (0.5, 0.8)
    assert eff.fractions("attention") == (0.5, 0.8)  # attention_hbm unset: hbm
    assert eff.fractions("experts", "fp8") == (0.3, 0.7)  # kernel unset: expert_compute / expert_hbm
    tuned = Efficiency(compute=0.5, hbm=0.8, expert_compute=0.3, expert_compute_fp8=0.45, attention_hbm=0.6)
    assert tuned.fractions("experts", "fp8") == (0.45, 0.8)
    assert tuned.fractions("experts", "fp4") == (0.3, 0.8)
    assert tuned.fractions("attention") == (0.5, 0.6)
    # Unset optional fractions stay out of a calibration file, so the article's factors read back as written.
    assert "attention_hbm" not in Efficiency().to_dict() and "expert_hbm_fp4" not in Efficiency().to_dict()
    with pytest.raises(InputError):
        Efficiency(expert_hbm_fp4=1.5)


def test_capture_limit_follows_vllm_defaults() -> None:
    # VllmConfig._set_cudagraph_sizes (vllm/config/vllm.py): min(2 x max_num_seqs x decode query length,
    # 512), 1024 on compute capability 10.x from vLLM 0.28, never above max_num_batched_tokens.
    llama = load_model("llama-3.1-70b")

    def limit(gpu: str, **config: object) -> int:
        return build_engine(llama, load_gpu(gpu), parse_topology("TP4"), isl=1024, osl=1024,
                            config=EngineConfig(**config)).capture_limit  # type: ignore[arg-type]

    assert limit("h200", vllm="0.33", max_num_seqs=1024) == 512
    assert limit("b200", vllm="0.19.0", max_num_seqs=1024) == 512
    assert limit("b200", vllm="0.28.0", max_num_seqs=1024) == 1024
    assert limit("b200", vllm="0.28.0", max_num_seqs=64) == 128
    assert limit("h200", vllm="0.33", max_num_seqs=1024, max_num_batched_tokens=256) == 256
    assert limit("h200", vllm="0.33", max_capture_size=64) == 64


def test_fixed_costs_count_layers_expert_slots_sequences_and_eager_layers() -> None:
    # MiniMax-M2.5: 62 layers, every one MoE with 256 routed experts; TEP4 holds 64 of them per GPU.
    spec, gpu = load_model("minimax-m2.5"), load_gpu("h200")
    engine = build_engine(spec, gpu, parse_topology("TEP4"), isl=1024, osl=1024,
                          config=EngineConfig(max_num_seqs=256, kv_cache_dtype="auto"))
    assert engine.capture_limit == 512
    layers, experts = spec.num_layers, spec.moe.num_experts  # type: ignore[union-attr]
    eff = Efficiency(step_overhead_s=1e-3, layer_overhead_s=10e-6, expert_overhead_s=1e-7, seq_overhead_s=5e-6,
                     eager_layer_overhead_s=30e-6)
    small, big = Batch(tokens=64, seqs=64), Batch(tokens=2048, seqs=8, prefill_tokens=2048)
    slots = layers * experts / 4
    graphs = 1e-3 + layers * 10e-6 + slots * 1e-7 + 64 * 5e-6
    assert engine.step_time(small, eff).parts["overhead"] == pytest.approx(graphs)
    eager = 1e-3 + layers * (10e-6 + 30e-6) + slots * 1e-7 + 8 * 5e-6
    assert engine.step_time(big, eff).parts["overhead"] == pytest.approx(eager)
    # The linear terms the fits use agree with the step model.
    for batch in (small, big):
        assert engine.step_terms(batch).seconds(eff) == pytest.approx(engine.step_time(batch, eff).total)
    # The article's factors leave every new fixed cost at zero: only the step and layer overheads remain.
    assert fixed_seconds(Efficiency(), layers, slots, 64, layers) == pytest.approx(Efficiency().step_overhead_s)


def test_pipeline_stages_each_pay_the_step_overhead() -> None:
    # Aggregated serving runs PP stages one after the other; each is its own forward pass on its own GPUs.
    engine = build_engine(load_model("llama-3.1-70b"), load_gpu("h200"), parse_topology("TP2PP2"), isl=1024,
                          osl=1024, config=EngineConfig(max_num_seqs=256, kv_cache_dtype="auto"))
    batch = Batch(tokens=32, seqs=32, attn_pairs=32 * 1024, kv_tokens_read=32 * 1024, logits=32, ep_tokens=32)
    terms = engine.step_terms(batch)
    assert terms.stages == 2
    assert terms.seconds(EFF) == pytest.approx(sum(s.total for s in engine.stage_times(batch, EFF)))


def test_gpus_of_one_architecture_share_their_defaults_fit() -> None:
    assert architecture_of("h100") == architecture_of("h200") == ("h100", "h200")
    assert architecture_of("b300") == ("b200", "b300")
    assert architecture_of("gb300") == ("gb300",)
