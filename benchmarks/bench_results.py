"""Loading speed of srt-slurm result trees: 5,000 result files must load in at most 5 s on 2 cores.

Writes 25 jobs x 200 concurrencies (each a ``results_concurrency_<C>_gpus_<T>_ctx_<P>_gen_<D>.json`` in vLLM's
``--save-result`` format, plus the job's ``<job_id>.json``) into a temporary folder, then times
``pdtune.results.load_results`` on the whole tree. Prints the measurement; exits 1 when the target is missed.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

from pdtune.results import load_results

FILES = 5_000
JOBS = 25
TARGET_SECONDS = 5.0


def record(concurrency: int) -> dict[str, object]:
    duration = 600.0 + concurrency * 0.05
    completed = concurrency * 10
    total_in, total_out = completed * 8192, completed * 1024
    tpot = 8.0 + concurrency * 0.01
    return {
        "date": "20260211-031455", "endpoint_type": "openai-chat", "backend": "openai-chat", "label": None,
        "model_id": "deepseek-ai/DeepSeek-R1-0528", "tokenizer_id": "deepseek-ai/DeepSeek-R1-0528",
        "num_prompts": completed, "request_rate": "inf", "burstiness": 1.0, "max_concurrency": concurrency,
        "duration": duration, "completed": completed, "failed": 0, "total_input_tokens": total_in,
        "total_output_tokens": total_out, "request_throughput": completed / duration, "request_goodput": None,
        "output_throughput": total_out / duration, "total_token_throughput": (total_in + total_out) / duration,
        "max_output_tokens_per_s": total_out / duration * 1.2, "max_concurrent_requests": concurrency,
        **{f"{stat}_{metric}_ms": base * scale
           for metric, base in (("ttft", 600.0), ("tpot", tpot), ("itl", tpot * 0.98), ("e2el", 600 + tpot * 1023))
           for stat, scale in (("mean", 1.0), ("median", 0.98), ("std", 0.1), ("p99", 1.4))},
    }


def write_tree(root: Path) -> None:
    per_job = FILES // JOBS
    for j in range(JOBS):
        job_id = str(5_000_000 + j)
        job = root / "outputs" / job_id
        bench = job / "logs" / "sa-bench_isl_8192_osl_1024"
        bench.mkdir(parents=True)
        (job / f"{job_id}.json").write_text(json.dumps({
            "job_id": job_id, "job_name": f"sweep-{j}",
            "resources": {"gpus_per_node": 4, "prefill_workers": 1, "decode_workers": 2, "gpus_per_prefill": 8,
                          "gpus_per_decode": 8},
            "benchmark": {"type": "sa-bench", "isl": 8192, "osl": 1024},
        }))
        for i in range(per_job):
            c = 1 + i * 4
            (bench / f"results_concurrency_{c}_gpus_24_ctx_8_gen_16.json").write_text(json.dumps(record(c), indent=2))


def main() -> int:
    if hasattr(os, "sched_setaffinity"):
        cpus = sorted(os.sched_getaffinity(0))[:2]
        os.sched_setaffinity(0, cpus)  # the CI machine has 2 cores
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_tree(root)
        start = time.perf_counter()
        df = load_results(root)
        elapsed = time.perf_counter() - start
    if len(df) != FILES:
        print(f"bench_results: expected {FILES} rows, got {len(df)}")
        return 1
    ok = elapsed <= TARGET_SECONDS
    print(f"bench_results: loaded {FILES} srt-slurm result files in {elapsed:.2f} s "
          f"({FILES / elapsed:,.0f} files/s; target <= {TARGET_SECONDS:.0f} s) {'OK' if ok else 'TOO SLOW'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
