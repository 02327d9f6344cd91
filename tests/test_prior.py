"""The prior of the defaults' fit (pdtune.perfmodel.prior): each value derived by hand from the published numbers
it names, the ones without a source marked hand-set, and the fit's option to leave factors unpulled."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from scipy.optimize import curve_fit

from pdtune.gpus import load_gpu
from pdtune.perfmodel.fit import FIT_FACTORS, PRIOR_SIGMA, objective
from pdtune.perfmodel.prior import HAND_SET, PRIOR, PRIOR_VALUES


def test_every_fitted_factor_has_a_prior_entry_and_the_prior_is_its_values():
    assert set(PRIOR_VALUES) == set(FIT_FACTORS)
    for name, p in PRIOR_VALUES.items():
        assert getattr(PRIOR, name) == p.value
        assert p.numbers, name  # what the value rests on, or why nothing was found
        if p.source:
            assert p.confidence in {"high", "medium", "low"}, name
        else:
            assert p.confidence == "" and name in HAND_SET and "set by hand" in p.numbers


def test_link_and_collective_latency_from_vllms_all_reduce_benchmark():
    # vLLM PR #42324, the all-reduce table for SM 9.0 at world size 8, symmetric-memory multimem kernel (the one
    # vLLM picks at TP8 on Hopper): message size -> time. pdtune's all-reduce (perfmodel/engine.py) moves
    # 2(t-1)/t x bytes per GPU over NVLink at nvlink_gb_s x link, plus collective_latency_s per call.
    mib = 1 << 20
    sizes = np.array([0.5, 4, 8, 32, 128]) * mib
    times = np.array([0.011, 0.027, 0.046, 0.165, 0.631]) * 1e-3
    nvlink = load_gpu("h100").nvlink_bandwidth  # 450 GB/s one way
    t = 8

    def model(size: np.ndarray, link: float, latency: float) -> np.ndarray:
        return 2 * (t - 1) / t * size / (nvlink * link) + latency

    (link, latency), _ = curve_fit(model, sizes, times, p0=(0.8, 10e-6), sigma=times)  # relative errors
    assert link == pytest.approx(PRIOR_VALUES["link"].value, abs=0.03)
    assert latency == pytest.approx(PRIOR_VALUES["collective_latency_s"].value, abs=1.5e-6)
    # By hand at 128 MiB: 2 x 7/8 x 134.2 MB / (450 GB/s x 0.85) + 9 us = 0.614 + 0.009 = 0.623 ms (0.631 measured).
    assert model(np.array([128 * mib]), 0.85, 9e-6)[0] == pytest.approx(0.623e-3, rel=0.01)


def test_expert_fractions_from_vllms_fused_moe_microbenchmark():
    # vLLM PR #44818: vLLM's Triton fused_moe, BF16 on H200, 128 experts, top 8, N=704 (intermediate), K=2816.
    experts, top_k, n, k = 128, 8, 704, 2816
    peak = load_gpu("h200").peak_flops("bf16")  # 989.5 TFLOPS dense
    # 4096 tokens in 1189.6 us: 2 x 4096 x 8 x (3 x 704 x 2816) = 389.8 GFLOP -> 0.33 of peak.
    flops = 2 * 4096 * top_k * 3 * n * k
    assert flops == pytest.approx(389.8e9, rel=1e-3)
    assert flops / 1189.6e-6 / peak == pytest.approx(0.331, abs=0.005)
    assert PRIOR_VALUES["expert_compute"].value == pytest.approx(0.35, abs=0.05)
    # 32 tokens in 324.9 us touch 128 x (1 - (1 - 8/128)^32) = 111.8 experts of 3 x 704 x 2816 x 2 B = 11.9 MB:
    # 1.33 GB / 324.9 us = 4.10 TB/s, 0.85 of H200's 4.8 TB/s (pdtune's routed-expert bytes, perfmodel/engine.py).
    touched = experts * (1 - (1 - top_k / experts) ** 32)
    assert touched == pytest.approx(111.8, abs=0.1)
    fraction = touched * 3 * n * k * 2 / 324.9e-6 / load_gpu("h200").hbm_bandwidth
    assert fraction == pytest.approx(0.85, abs=0.01)
    # The B200 run of Megatron-LM PR #6454 (0.52-0.66) and DeepGEMM's masked layout (0.61) sit below it: 0.7.
    assert 0.52 < PRIOR_VALUES["expert_hbm"].value < 0.85


def test_attention_hbm_from_flashmla_decode():
    # FlashMLA decode on H100 (deepseek-ai/FlashMLA issue #19): 2649-2826 GB/s of 3.35 TB/s -> 0.79-0.84.
    hbm = load_gpu("h100").hbm_bandwidth / 1e9
    assert 2649 / hbm == pytest.approx(0.79, abs=0.005) and 2826 / hbm == pytest.approx(0.84, abs=0.005)
    assert 2649 / hbm <= PRIOR_VALUES["attention_hbm"].value <= 2826 / hbm


def test_an_unpulled_factor_feels_no_pull():
    from pdtune.perfmodel.defaults import silicon_file, silicon_problems
    from pdtune.perfmodel.fit import compile_problems
    from pdtune.results import load_results

    problems = silicon_problems(load_results(silicon_file()))
    dense = [problems[("qwen3-32b", "h100")]]
    compiled = compile_problems(dense, 0.15)
    assert compiled.matrix is not None
    start = replace(PRIOR, arrival_clustering=0.15)
    goal = objective(compiled.matrix, start, ("compute", "step_overhead_s"), 1, unpulled=HAND_SET)
    moved = goal.x0.copy()
    moved[:] += np.array([0.1, 1e-3])
    pull = goal.prior(moved)
    # step_overhead_s left unpulled: no pull however far it moves; compute is pulled by weight x 0.1 / sigma.
    assert "step_overhead_s" in HAND_SET and pull[1] == 0.0
    assert pull[0] == pytest.approx(goal.weight * 0.1 / PRIOR_SIGMA["compute"])


def test_the_eager_cost_from_a_published_eager_and_graph_pair_and_its_measured_collective_part():
    """perfmodel.prior's eager_layer_overhead_s: vLLM-omni issue #7960 (2026-09-22 comment, vLLM 0.29) times
    Qwen2.5-Omni-7B's thinker, a Qwen2.5-7B of 28 layers, on A800: 22-23 ms a token with enforce_eager, 13 ms with
    CUDA graphs. By hand: (22 - 13) / 28 = 0.32 ms and (23 - 13) / 28 = 0.36 ms a layer; the prior takes 0.34 ms.
    Of it, the part that is measured here: aiconfigurator 0.12.0's microbenchmarks of vLLM 0.24.0's custom
    all-reduce (data/perfmodel/allreduce/), bf16, eagerly and in a CUDA graph. By hand from the file, H100, 8 GPUs,
    1 KiB: 23.755 us eager - 4.649 us in a graph = 19.1 us a call; the median over 128 B-64 KiB is 18.0 us. A TP
    layer runs two all-reduces, so an eager step pays 2 x 13.8-18.0 = 27.7-35.9 us a layer for them on
    H100/H200/B200/B300, a tenth of the whole. The sentence the book prints says the same numbers."""
    layers, graph = 28, 13e-3
    per_layer = [(eager - graph) / layers for eager in (22e-3, 23e-3)]
    assert [round(x * 1e6) for x in per_layer] == [321, 357]
    assert per_layer[0] <= PRIOR_VALUES["eager_layer_overhead_s"].value <= per_layer[1]
    assert PRIOR_VALUES["eager_layer_overhead_s"].confidence == "low"
    assert "0.32-0.36 ms a layer" in PRIOR_VALUES["eager_layer_overhead_s"].numbers
    import pandas as pd

    from pdtune.paths import data_dir

    table = pd.read_csv(data_dir() / "perfmodel" / "allreduce" / "vllm_custom_allreduce.csv")
    assert set(table["vllm"].astype(str)) == {"0.24.0"} and set(table["allreduce_dtype"]) == {"bfloat16"}
    one = table[(table.gpu == "h100") & (table.num_gpus == 8) & (table.message_bytes == 1024)]
    by = dict(zip(one.backend, one.latency_us, strict=True))
    assert by["eager"] - by["graph"] == pytest.approx(19.106, abs=0.001)
    small = table[(table.num_gpus == 8) & (table.message_bytes <= 64 * 1024)]
    wide = small.pivot_table(index=["gpu", "message_bytes"], columns="backend", values="latency_us")
    delta = (wide["eager"] - wide["graph"]).groupby(level="gpu").median()
    assert delta.round(1).to_dict() == {"b200": 13.8, "b300": 14.3, "h100": 18.0, "h200": 16.4}
    per_layer_us = 2 * delta
    assert f"{per_layer_us.min():.1f}-{per_layer_us.max():.1f} us a layer" == "27.7-35.9 us a layer"
    assert "27.7-35.9 us a layer" in PRIOR_VALUES["eager_layer_overhead_s"].numbers
    assert per_layer_us.max() * 1e-6 < PRIOR_VALUES["eager_layer_overhead_s"].value
    text = PRIOR_VALUES["eager_layer_overhead_s"].numbers
    said = ", ".join(f"{g.upper()} {delta[g]:.1f}" for g in ("h100", "h200", "b200", "b300")) + " us"
    assert said == "H100 18.0, H200 16.4, B200 13.8, B300 14.3 us" and said in text
