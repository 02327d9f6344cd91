"""``pdtune log`` stays linear in the file's size and in its number of processes, and streams (issue 14, cause 9).

Logs are written from the real 0.33 TP=2 start-up log in ``tests/fixtures/logs``:

* a *restart loop*: the start-up repeated with new pids every time, as a crash-looping server writes it
  (about 3,500 bytes and 4 new processes per restart);
* a *long-running server*: one start-up, then request lines (``POST /v1/completions``) up to the size.

Checks, each on the ``pdtune log`` command run as its own process (wall clock, best of three; peak resident
memory of that process from ``wait4``):

1. linear in size and processes: the 40 MB restart loop (four times the bytes and the processes of the 10 MB
   one) costs at most 1.5x the time *per MB* of the 10 MB one, i.e. at most 6x its time (quadratic in
   processes, as before the fix, costs 16x: 5.4 s at 10 MB, 131 s at 40 MB). The same with ``--model``,
   whose cross-check walks every engine. The ratio of the two times is printed as well;
2. linear in processes at a fixed size: the same 40 MB of lines with new pids every fourth, every second and
   every restart (7,000, 14,000 and 28,000 processes). Each process costs its records and its rows of the
   report, so the time grows with the processes; linear growth adds the same time for the second 14,000 as
   for the 7,000 before them (ratio of the two increments 2 for 2x the processes, 1 per process), quadratic
   growth four times as much per process. Target: the increment per process from 14,000 to 28,000 at most
   1.5x the one from 7,000 to 14,000 (the first version of this check asked the 28,000 to cost at most 1.5x
   the 7,000 in total, which a linear per-process cost cannot promise: it measured x1.99);
3. streamed: a 200 MB log peaks below 300 MB of resident memory, whichever kind, and however often its pids
   come back: new pids per restart, one set of pids at every restart, or two sets in turn (before issue 22 a
   pid that came back kept every earlier copy of its growing records: 566 MB for 20 MB).

Prints the measurements; exits 1 when a target is missed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "tests" / "fixtures" / "logs" / "v0.33_tp2_qwen3-32b_fp8kv.log"
MODEL = ROOT / "tests" / "fixtures" / "logs" / "models" / "qwen3-32b"
PDTUNE = Path(sys.executable).parent / "pdtune"
MB = 10**6
PER_MB_GROWTH = 1.5  # time per MB at 40 MB over time per MB at 10 MB
PROCESS_COST = 1.5  # time per process added, 14,000 -> 28,000 over 7,000 -> 14,000
PEAK_RSS = 300 << 20


def restart_loop(path: Path, size: int, *, every: int = 1, cycle: int = 0) -> int:
    """Write a crash-loop log of about ``size`` bytes, new pids every ``every`` restarts, or (``cycle`` > 0) pids
    taken again from ``cycle`` sets in turn, as a container's restarts reuse them; returns the restarts."""
    lines = SOURCE.read_text(encoding="utf-8").splitlines(keepends=True)
    pid = re.compile(r"pid=(\d+)")
    written = restarts = 0
    with path.open("w", encoding="utf-8") as fh:
        while written < size:
            restarts += 1
            k = restarts % cycle if cycle else restarts // every
            block = "".join(pid.sub(lambda m: f"pid={int(m.group(1)) * 100000 + k}", ln) for ln in lines)
            fh.write(block)
            written += len(block)
    return restarts


def long_running(path: Path, size: int) -> None:
    """One start-up, then request lines up to about ``size`` bytes."""
    head = SOURCE.read_text(encoding="utf-8")
    line = ("(APIServer pid=1880) INFO 10-14 20:07:{s:02d} [loggers.py:123] 10.0.0.{n}:52{n:03d} - "
            '"POST /v1/completions HTTP/1.1" 200 OK\n')
    with path.open("w", encoding="utf-8") as fh:
        fh.write(head)
        written = len(head)
        block = "".join(line.format(s=i % 60, n=i % 250) for i in range(1000))
        while written < size:
            fh.write(block)
            written += len(block)


def run(args: list[str]) -> tuple[float, int]:
    """Wall-clock seconds and peak resident bytes of one ``pdtune log`` process."""
    started = time.perf_counter()
    proc = subprocess.Popen([str(PDTUNE), "log", *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _pid, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - started
    err = proc.stderr.read().decode() if proc.stderr else ""
    proc.stderr and proc.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"pdtune log {' '.join(args)} failed: {err[-500:]}")
    return seconds, usage.ru_maxrss << 10


def best(args: list[str], repeats: int = 3) -> tuple[float, int]:
    times, peaks = zip(*(run(args) for _ in range(repeats)), strict=True)
    return min(times), max(peaks)


def main() -> int:
    failed = False
    with tempfile.TemporaryDirectory(prefix="pdtune-bench-log-") as tmp:
        folder = Path(tmp)
        loops = {}
        for mb in (10, 40):
            loops[mb] = folder / f"loop-{mb}.log"
            restarts = restart_loop(loops[mb], mb * MB)
            print(f"restart loop {mb} MB: {restarts:,} restarts, {4 * restarts:,} processes")
        fewer = {}
        for every in (2, 4):
            fewer[every] = folder / f"loop-40-every-{every}.log"
            restart_loop(fewer[every], 40 * MB, every=every)

        for label, extra in (("", []), (" --model", ["--model", str(MODEL)])):
            t10, _ = best([str(loops[10]), *extra])
            t40, _ = best([str(loops[40]), *extra])
            growth = (t40 / 40) / (t10 / 10)
            ok = growth <= PER_MB_GROWTH
            failed |= not ok
            print(f"pdtune log{label}: 10 MB {t10:.2f} s, 40 MB {t40:.2f} s: {t40 / t10:.2f}x the time for 4x the "
                  f"bytes and processes; per MB x{growth:.2f} (target <= {PER_MB_GROWTH}) {'ok' if ok else 'SLOW'}")
        t28, _ = best([str(loops[40])])
        t14, _ = best([str(fewer[2])])
        t7, _ = best([str(fewer[4])])
        # per process: the 14,000 added last against the 7,000 added before them
        ratio = ((t28 - t14) / 14_000) / max((t14 - t7) / 7_000, 1e-9)
        ok = ratio <= PROCESS_COST
        failed |= not ok
        print(f"40 MB of the same lines: 7,000 processes {t7:.2f} s, 14,000 {t14:.2f} s, 28,000 {t28:.2f} s: "
              f"{(t14 - t7) / 7:.3f} then {(t28 - t14) / 14:.3f} ms per process, x{ratio:.2f} (linear 1, quadratic 4; "
              f"target <= {PROCESS_COST}) {'ok' if ok else 'SLOW'}")
        for path in (*loops.values(), *fewer.values()):
            path.unlink()

        kinds = (("restart loop", restart_loop), ("long-running server", long_running),
                 ("restart loop reusing one set of pids", lambda p, n: restart_loop(p, n, cycle=1)),
                 ("restart loop reusing two sets of pids in turn", lambda p, n: restart_loop(p, n, cycle=2)))
        for kind, write in kinds:
            big = folder / "big.log"
            write(big, 200 * MB)
            seconds, peak = run([str(big)])
            ok = peak <= PEAK_RSS
            failed |= not ok
            print(f"200 MB {kind}: {seconds:.1f} s, peak RSS {peak / 2**20:.0f} MB (target <= "
                  f"{PEAK_RSS >> 20} MB) {'ok' if ok else 'TOO MUCH'}")
            big.unlink()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
