"""Speed targets of pdtune.frontier; prints its measurements, exits 1 when a target is missed.

1. The Pareto frontier of 10^6 random points takes at most 2x the time of ``numpy.lexsort`` on them.
2. Rate matching 200 prefill points with 200 decode points over every x, y <= 32 takes at most 2 s.
Times are the best of a few repeats, so a busy neighbour on the machine does not fail the target.
"""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd

from _timing import best_time

from pdtune.frontier import pareto_frontier, rate_match

N_POINTS = 1_000_000
FRONTIER_RATIO_TARGET = 2.0
RATE_MATCH_TARGET_S = 2.0


def isolated_sweep(rng: np.random.Generator, role: str, topologies: list[tuple[str, int]], per: int) -> pd.DataFrame:
    """``per`` concurrencies for each topology, latencies rising with concurrency like a real sweep."""
    concurrency = np.unique(np.geomspace(1, 4096, per).round()).astype(int)
    concurrency = np.r_[concurrency, np.arange(1, per - concurrency.size + 1) * 5000][:per]
    rows = []
    for name, gpus in topologies:
        base = rng.uniform(5, 50)
        for c in concurrency:
            latency = base * (1 + c / rng.uniform(50, 500)) * rng.uniform(0.95, 1.05)
            rows.append({"topology": name, "gpus_total": gpus, "concurrency": int(c), "isl": 8192,
                         "mtp_tokens": 3 if role == "decode" and "MTP" in name else 0,
                         "ttft_ms_p50" if role == "prefill" else "tpot_ms_p50": latency * (40 if role == "prefill" else 1),
                         "source": f"synthetic-{role}", "path": f"{role}.json"})
    return pd.DataFrame(rows)


def main() -> int:
    rng = np.random.default_rng(0)
    x = rng.random(N_POINTS)
    y = rng.random(N_POINTS)
    pareto_frontier(x, y)  # warm-up
    t_lexsort = best_time(lambda: np.lexsort((y, x)), repeats=5)
    t_frontier = best_time(lambda: pareto_frontier(x, y), repeats=5)
    ratio = t_frontier / t_lexsort
    print(f"pareto_frontier of {N_POINTS:,} random points: {t_frontier * 1e3:.1f} ms; "
          f"numpy.lexsort: {t_lexsort * 1e3:.1f} ms; ratio {ratio:.2f} (target <= {FRONTIER_RATIO_TARGET})")

    prefill = isolated_sweep(rng, "prefill", [(f"TP{t}DP{8 // t}+EP", 8) for t in (1, 2, 4, 8)] * 2, per=25)
    prefill["topology"] = [f"{t}#{i // 25}" for i, t in enumerate(prefill["topology"])]  # 8 distinct deployments
    decode = isolated_sweep(rng, "decode", [("TEP8", 8), ("TEP8+MTP", 8), ("TP4DP4+EP", 16), ("TEP16", 16)] * 2,
                            per=25)
    decode["topology"] = [f"{t}#{i // 25}" for i, t in enumerate(decode["topology"])]
    assert len(prefill) == 200 and len(decode) == 200
    rows = 0

    def run() -> None:
        nonlocal rows
        rows = len(rate_match(prefill, decode, osl=1024, max_workers=32))

    t_match = best_time(run, repeats=3)
    print(f"rate_match 200 prefill x 200 decode points, x, y <= 32: {t_match:.2f} s for {rows:,} predicted rows "
          f"(target <= {RATE_MATCH_TARGET_S} s)")

    failed = []
    if ratio > FRONTIER_RATIO_TARGET:
        failed.append("pareto_frontier is slower than 2x numpy.lexsort")
    if t_match > RATE_MATCH_TARGET_S:
        failed.append("rate_match is slower than 2 s")
    for message in failed:
        print(f"MISSED: {message}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
