"""Speed targets of pdtune.perfmodel; prints its measurements, exits 1 when a target is missed.

1. Generating the whole default dataset (9 prefill + 10 decode + 7 disaggregated sweeps x 20 concurrencies)
   takes at most 15 s: a reader regenerates it after changing a calibration factor.
2. One disaggregated point (the rate balance, a bisection over the decode batch) takes at most 50 ms on
   average: a chapter sweeps a few hundred of them interactively.
Times are the best of a few repeats, so a busy neighbour on the machine does not fail the target.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from _timing import best_time

from pdtune.dataset import generate_dataset
from pdtune.gpus import load_gpu
from pdtune.model import load_model
from pdtune.perfmodel import predict_disagg
from pdtune.topology import parse_deployment

DATASET_TARGET_S = 15.0
DISAGG_POINT_TARGET_S = 0.05


def main() -> int:
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        t = best_time(lambda: generate_dataset(Path(tmp) / "ds"), repeats=3)
    print(f"generate the default dataset: {t:.2f} s (target <= {DATASET_TARGET_S} s)")
    failures += t > DATASET_TARGET_S

    spec, gpu = load_model("qwen3.8-2.4t"), load_gpu("gb300")
    dep = parse_deployment("4xTP2DP4+EP:1xTP4DP4+EP")
    grid = [1, 4, 16, 64, 256, 1024, 2048, 2560]
    t = best_time(lambda: predict_disagg(spec, gpu, dep, grid), repeats=3) / len(grid)
    print(f"one disaggregated point: {t * 1e3:.1f} ms (target <= {DISAGG_POINT_TARGET_S * 1e3:.0f} ms)")
    failures += t > DISAGG_POINT_TARGET_S
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
