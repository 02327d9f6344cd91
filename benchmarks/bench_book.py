"""Clean build time of the book: every chapter executed plus the HTML, as ``make book`` builds it.

Target: at most 60 s on 2 cores. "Clean" means a fresh output folder (no doctrees, a wiped execution cache)
and ``--all``: the parallel execution step (``pdtune.site.bookexec``) runs every notebook, then
``jupyter-book build -W -n`` writes the HTML; the sum is the number. The vendored JavaScript (``make
assets``) is a cached dependency and is timed separately. Prints the measurements and the machine's load;
exits 1 when the build fails or misses the target, 2 when a file listed in ``_toc.yml`` does not exist yet.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pdtune.errors import InputError
from pdtune.paths import REPO_ROOT
from pdtune.site.bookbuild import check_toc
from pdtune.site.render import STATIC_BUILD_ENV
from pdtune.site.vendor import write_vendor

TARGET_S = 60.0
BIN = Path(sys.executable).parent


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main() -> int:
    try:
        pages = check_toc(REPO_ROOT)
    except InputError as exc:
        print(f"bench_book: cannot measure, {exc}")
        return 2
    start = time.perf_counter()
    write_vendor()
    assets_s = time.perf_counter() - start

    env = dict(os.environ, **{STATIC_BUILD_ENV: "1", "JUPYTER_PREFER_ENV_PATH": "1"})
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench-book-") as tmp:
        out = Path(tmp)
        config = out / "_config.executed.yml"
        execute = [sys.executable, "-m", "pdtune.site.bookexec", str(REPO_ROOT)]
        execute += ["--cache", str(out / "_build" / ".jupyter_cache"), "--config-out", str(config)]
        build = [str(BIN / "jupyter-book"), "build", str(REPO_ROOT), "--config", str(config)]
        build += ["--path-output", str(out), "-W", "-n", "--keep-going", "--all"]
        seconds = []
        for step in (execute, build):
            start = time.perf_counter()
            done = subprocess.run(step, cwd=REPO_ROOT, env=env, capture_output=True, text=True)
            seconds.append(time.perf_counter() - start)
            if done.returncode != 0:
                print((done.stdout + done.stderr)[-4000:])
                print(f"bench_book: {' '.join(step[:3])} failed (exit {done.returncode})")
                return 1
    execute_s, html_s = seconds
    total_s = execute_s + html_s

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"machine: {cores} cores ({_cpu_model()}), Python {platform.python_version()}, "
          f"load average {load_before:.1f} before / {os.getloadavg()[0]:.1f} after")
    print(f"assets (vendor step, cached when current): {assets_s:.1f} s")
    print(f"clean book build, {pages} pages: execute {execute_s:.1f} s + HTML {html_s:.1f} s "
          f"= {total_s:.1f} s (target <= {TARGET_S:.0f} s)")
    return 0 if total_s <= TARGET_S else 1


if __name__ == "__main__":
    raise SystemExit(main())
