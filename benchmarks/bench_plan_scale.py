"""``pdtune plan`` at cluster scale: time and memory per doubling of ``--max-gpus`` (issue 22, cause 1).

The case: ``pdtune plan qwen3-32b --gpu h100 --isl 1024 --osl 128 --max-gpus N`` for N = 64, 128, ... 2^20
(the documented bound), each run as a user runs it: its own process (start-up, imports, the search, the
report), wall clock, peak resident memory of that process from ``wait4``. Before the staircase search the
rows grew with N^2: 512 GPUs took 12 s and 2.1 GB, 1,024 died of a MemoryError at 3.1 GB, 10^6 asked for
1.8 TiB.

Targets: N = 1,024 within 10 s and 8,192 within 30 s, both under 500 MB; N = 2^20 answers (exit 0) or refuses
in one line (exit 2, one line on stderr), within 60 s and 1 GB. Printed per budget: seconds, peak MB, and
both as a ratio to the budget half its size (the growth per doubling: 1 is flat, 2 linear, 4 quadratic); the
budgets with a target run three times (best time, largest peak). Exits 1 when a target is missed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PDTUNE = Path(sys.executable).parent / "pdtune"
CASE = ["plan", "qwen3-32b", "--gpu", "h100", "--isl", "1024", "--osl", "128"]
BUDGETS = [2**k for k in range(6, 21)]
MB = 1 << 20
#: budget -> (seconds, resident bytes) at most, and whether a one-line refusal also passes
TARGETS = {1024: (10.0, 500 * MB, False), 8192: (30.0, 500 * MB, False), 2**20: (60.0, 1024 * MB, True)}


def run(budget: int) -> tuple[float, int, int, str, str]:
    """Seconds, peak resident bytes, exit status, stdout and stderr of one ``pdtune plan`` process."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        proc = subprocess.Popen([str(PDTUNE), *CASE, "--max-gpus", str(budget)], stdout=out, stderr=err)
        _pid, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return (seconds, usage.ru_maxrss << 10, proc.returncode, out.read().decode(errors="replace"),
                err.read().decode(errors="replace"))


def main() -> int:
    failed = False
    previous: tuple[float, int] | None = None
    print(f"pdtune {' '.join(CASE)} --max-gpus N")
    for budget in BUDGETS:
        # the budgets with a target: best of three (a busy neighbour only adds time), the largest peak
        runs = [run(budget) for _ in range(3 if budget in TARGETS else 1)]
        seconds = min(r[0] for r in runs)
        peak = max(r[1] for r in runs)
        _, _, code, out, err = runs[-1]
        lines = [ln for ln in err.splitlines() if ln.strip()]
        if code == 0:
            answer = next((ln.strip() for ln in out.splitlines() if "rate-matched deployments" in ln), "answered")
        elif code == 2 and len(lines) == 1:
            answer = f"refused: {lines[0]}"
        else:
            answer = f"FAILED (exit {code}): {err.strip()[-300:]}"
            failed = True
        growth = (f" (x{seconds / previous[0]:.2f} time, x{peak / previous[1]:.2f} memory per doubling)"
                  if previous else "")
        verdict = ""
        if budget in TARGETS:
            limit_s, limit_rss, refusal_ok = TARGETS[budget]
            ok = seconds <= limit_s and peak <= limit_rss and (code == 0 or (refusal_ok and code == 2
                                                                             and len(lines) == 1))
            failed |= not ok
            verdict = (f"; target {limit_s:.0f} s, {limit_rss // MB} MB, "
                       f"{'answer or one-line refusal' if refusal_ok else 'an answer'}: {'ok' if ok else 'MISSED'}")
        print(f"  N = {budget:>9,}: {seconds:6.2f} s, peak {peak / MB:6.0f} MB{growth}{verdict}")
        print(f"      {answer[:160]}")
        previous = (seconds, peak)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
