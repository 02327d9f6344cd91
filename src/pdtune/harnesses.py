"""Which model produced a latency, and the benchmark harnesses the simulated one runs.

pdtune predicts a latency either with the steady-state model (:mod:`pdtune.perfmodel.aggregated`) or by running
the benchmark in :mod:`pdtune.sim` (:mod:`pdtune.perfmodel.simulated`); every output names which
(:data:`LATENCY_MODELS`). A benchmark is a harness's clients: :data:`HARNESSES` says how each one starts them,
read from its source. This module imports nothing heavy, so that the command line can offer the choices
without loading the performance model.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Which model produced a latency.
LATENCY_MODELS = ("simulated", "steady-state")
SIMULATED, STEADY_STATE = LATENCY_MODELS


@dataclass(frozen=True)
class Harness:
    """How a benchmark harness starts its clients: warm-up and measured requests per client (``x C``)."""

    name: str
    kind: str  # pdtune.sim.closed_loop's harness: aiperf | vllm-bench | sa-bench
    warmups: int  # warm-up requests, in multiples of the concurrency
    prompts: int  # measured requests, in multiples of the concurrency
    ready_check: bool
    source: str


#: The harnesses pdtune simulates, read from their sources (:mod:`pdtune.sim.workload` has the rules).
HARNESSES = {
    "aiperf": Harness(
        "aiperf", "aiperf", 2, 20, False,
        "AIPerf's concurrency mode as aiconfigurator's generated benchmark runs it (bench_run.sh.j2, "
        "ai-dynamo/aiconfigurator 095f58a: --concurrency C --warmup-request-count 2C --num-requests 20C, fixed "
        "ISL/OSL, ignore_eos, streaming)"),
    "inferencex": Harness(
        "inferencex", "vllm-bench", 2, 10, False,
        "InferenceX's benchmark_serving_random.py (SemiAnalysisAI/InferenceX 5969d0a, "
        "experimental/token_position_decode_slo): 2C warm-ups copying the first prompt, then 10C prompts at "
        "--request-rate inf under --max-concurrency C, fixed ISL/OSL, ignore_eos"),
    "sa-bench": Harness(
        "sa-bench", "sa-bench", 2, 10, True,
        "srt-slurm 0.3.0's sa-bench (a 2C warm-up run, then 10C prompts, --random-range-ratio 0.8)"),
    "vllm-bench": Harness(
        "vllm-bench", "vllm-bench", 0, 10, True,
        "vllm bench serve --max-concurrency C --num-prompts 10C (vLLM 0.33, vllm/benchmarks/serve.py)"),
}
