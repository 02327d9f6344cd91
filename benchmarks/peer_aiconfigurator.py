"""Runs INSIDE the peer venv (.peers/, made by `make bench-peers`): aiconfigurator 0.12's estimates for given rows.

    .peers/bin/python benchmarks/peer_aiconfigurator.py estimate ROWS.json OUT.json
    .peers/bin/python benchmarks/peer_aiconfigurator.py time-default OUT.json [--backend B]

pdtune never imports aiconfigurator: bench_accuracy.py and peer_timing.py call this script in aiconfigurator's own
venv and read its JSON. ``estimate`` calls ``aiconfigurator.cli.api.cli_estimate`` (the Python form of
``aiconfigurator cli estimate``) for each row with the row's model, system, layout, batch size (per attention-DP
rank), ISL/OSL and quant modes; when aiconfigurator has no table for a quant mode on that system it retries with
that mode auto-inferred (``None``), and records what it used. Its database holds vLLM 0.24.0 only, so every row
is estimated at that version. ``time-default`` times ``aiconfigurator cli default`` (the search over agg and disagg
deployments) for DeepSeek-V3 on 72 GB200 GPUs at ISL 8192 / OSL 1024.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
from contextlib import redirect_stderr, redirect_stdout


def _estimate(row: dict) -> dict:
    from aiconfigurator.cli.api import cli_estimate

    base = dict(
        mode="agg",
        backend_name="vllm",
        backend_version=None,
        isl=int(row["isl"]),
        osl=int(row["osl"]),
        batch_size=int(row["batch_size"]),
        tp_size=int(row["tp_size"]),
        pp_size=int(row.get("pp_size") or 1),
        attention_dp_size=int(row.get("attention_dp_size") or 1),
    )
    for key in ("moe_tp_size", "moe_ep_size"):
        if row.get(key):
            base[key] = int(row[key])
    tries = [(row.get("gemm_quant_mode"), row.get("moe_quant_mode")), (None, row.get("moe_quant_mode")),
             (None, None)]
    out = {"id": row["id"], "status": "error", "ttft_ms": None, "tpot_ms": None}
    errors = []
    for model in [m for m in (row["model_path"], row.get("local_config")) if m]:
        for gemm, moe in dict.fromkeys(tries):
            try:
                with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
                    r = cli_estimate(model, row["system"], gemm_quant_mode=gemm, moe_quant_mode=moe, **base)
            except Exception as exc:  # every failure is recorded, none stops the run
                errors.append(f"{type(exc).__name__}: {str(exc)[:160]}")
                if "Download" in type(exc).__name__:
                    break  # this model path cannot be read offline: try the next one
                continue
            out.update(status="ok", ttft_ms=float(r.ttft), tpot_ms=float(r.tpot), model_used=model,
                       quant_used=[gemm, moe], version_used=getattr(r, "backend_version", None))
            return out
    out["error"] = errors[-1] if errors else "no attempt"
    return out


def estimate(rows_path: str, out_path: str) -> None:
    with open(rows_path, encoding="utf-8") as fh:
        rows = json.load(fh)
    start = time.perf_counter()
    results = [_estimate(r) for r in rows]
    with open(out_path, "w", encoding="utf-8") as fh:
        json.dump({"results": results, "seconds": time.perf_counter() - start}, fh)


def time_default(out_path: str, backend: str) -> None:
    cmd = [sys.executable, "-m", "aiconfigurator.main", "cli", "default", "--model-path", "deepseek-ai/DeepSeek-V3",
           "--total-gpus", "72", "--system", "gb200", "--isl", "8192", "--osl", "1024", "--backend", backend,
           "--log-level", "ERROR"]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    seconds = time.perf_counter() - start
    with open(out_path, "w", encoding="utf-8") as fh:
        json.dump({"command": " ".join(cmd[2:]), "seconds": seconds, "returncode": proc.returncode,
                   "stdout_tail": proc.stdout[-4000:], "stderr_tail": proc.stderr[-2000:]}, fh)


if __name__ == "__main__":
    if sys.argv[1] == "estimate":
        estimate(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "time-default":
        time_default(sys.argv[2], sys.argv[4] if len(sys.argv) > 4 and sys.argv[3] == "--backend" else "vllm")
    else:
        raise SystemExit(f"unknown action {sys.argv[1]!r}")
