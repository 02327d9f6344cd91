"""How long aiconfigurator 0.12's `cli default` search takes: DeepSeek-V3, 72 GB200 GPUs, ISL 8192, OSL 1024.

A later benchmarks/bench_plan.py compares `pdtune plan` against this number. Runs aiconfigurator in its own venv
(.peers/, made by `make bench-peers`; never imported here), once per backend (vLLM, then its default TensorRT-LLM),
and prints the wall-clock seconds and the tail of its output. Skips when the peer venv is missing.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PEER_PYTHON = REPO / ".peers" / "bin" / "python"
PEER_SCRIPT = REPO / "benchmarks" / "peer_aiconfigurator.py"


def main() -> int:
    if not PEER_PYTHON.is_file():
        print("peer_timing: skipped, aiconfigurator is not installed: run `make bench-peers`")
        return 0
    for backend in ("vllm", "trtllm"):
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "timing.json"
            subprocess.run([str(PEER_PYTHON), str(PEER_SCRIPT), "time-default", str(out), "--backend", backend],
                           check=True, cwd=tmp, timeout=4000)
            data = json.loads(out.read_text(encoding="utf-8"))
        status = "ok" if data["returncode"] == 0 else f"exit {data['returncode']}"
        print(f"aiconfigurator {data['command']}: {data['seconds']:.1f} s ({status})")
        tail = [line for line in data["stdout_tail"].splitlines() if line.strip()][-12:]
        for line in tail:
            print(f"    {line}")
        if data["returncode"]:
            print("    stderr: " + data["stderr_tail"].strip().splitlines()[-1][:200])
    return 0


if __name__ == "__main__":
    sys.exit(main())
