"""Shared by the benchmark scripts: the best of several wall-clock runs (a noisy machine only adds time)."""

from __future__ import annotations

import time
from collections.abc import Callable


def best_time(fn: Callable[[], object], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best
