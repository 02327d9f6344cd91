"""Parse time of hostile vLLM log lines: linear in the line's length (no regex backtracks far).

Each hostile line (unclosed process prefixes, a 200,000-digit number, a long run before a keyword, numbers that
never end) is parsed at two lengths; the longer must take at most 3x the shorter's time per character ratio
(a quadratic pattern would take ~10x for a 10x longer line) and at most 1 s. Prints the measurements; exits 1
when a target is missed.
"""

from __future__ import annotations

import sys

from _timing import best_time

from pdtune.errors import InputError
from pdtune.vllm_log import parse_log_text

HEAD = "INFO 11-02 10:00:00 [x.py:1] "
HOSTILE = {
    "unclosed prefixes": lambda n: "(x pid=1" * n,
    "huge number": lambda n: "1" * (10 * n) + " GiB",
    "run before keyword": lambda n: "x " * (5 * n) + "KV cache size: 1 tokens",
    "endless number": lambda n: HEAD + "Free memory on device (" + "9," * (3 * n),
    "graph groups": lambda n: HEAD + "Profiling CUDA graph memory: " + "FULL=1 (largest=" * n,
}
TARGET_S = 1.0
MAX_GROWTH = 30.0  # 10x the text; linear is ~10x, quadratic ~100x


def parse(text: str) -> None:
    try:
        parse_log_text(text)
    except InputError:
        pass


def main() -> int:
    failed = False
    for name, make in HOSTILE.items():
        short, long = make(2_000), make(20_000)
        t_short = best_time(lambda s=short: parse(s), 3)
        t_long = best_time(lambda s=long: parse(s), 3)
        growth = t_long / max(t_short, 1e-6)
        ok = t_long <= TARGET_S and growth <= MAX_GROWTH
        failed |= not ok
        print(f"{name:<20} {len(long):>9,} chars {t_long * 1000:8.1f} ms  x{growth:5.1f} for 10x  {'ok' if ok else 'SLOW'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
