"""pdtune and aiconfigurator 0.12 on the same held-out vLLM rows, side by side (run by `make bench-peers`).

The rows: every vLLM aggregated row of aiconfigurator's silicon sample for gpt-oss-120b, Llama-3.1-70B, Qwen3-32B,
MiniMax-M2.5 and Kimi-K2.5 (data/clusters/aiconfigurator-silicon/). pdtune predicts each one twice, never with factors
fitted on it (pdtune.perfmodel.heldout): uncalibrated with leave-one-model-out defaults, and calibrated on the other
deployments of the same model and GPU. aiconfigurator predicts each one with `cli_estimate` in its own venv
(benchmarks/peer_aiconfigurator.py; never imported here). aiconfigurator's per-operation tables were measured on
these systems and it regression-tests against this file: this is its home ground, and it is not held out for it.

Prints, per model x GPU and overall, both tools' median and p90 |error| for TTFT and TPOT on the rows both predicted,
every row either tool could not predict, and the model x GPU pairs where pdtune (calibrated) is at or below
aiconfigurator on both medians. Exits 1 when pdtune (calibrated) is above aiconfigurator on TTFT or TPOT overall,
or at or below it in fewer than 12 pairs (issue 23); the numbers are printed either way.

    .venv/bin/python benchmarks/bench_accuracy.py [--heldout _build/bench/heldout.json]
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from pdtune.perfmodel.validation import error_percentiles

REPO = Path(__file__).resolve().parents[1]
PEER_PYTHON = REPO / ".peers" / "bin" / "python"
PEER_SCRIPT = REPO / "benchmarks" / "peer_aiconfigurator.py"
SILICON = REPO / "data" / "clusters" / "aiconfigurator-silicon" / "silicon_sample.csv"
MODELS_DIR = REPO / "data" / "models"
#: Issue 23: pdtune calibrated at or below aiconfigurator on both medians in at least this many model x GPU pairs.
PAIRS_TARGET = 12


def _f(x: float | None) -> str:
    return "    -" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:5.1f}"


def heldout(path: str | None) -> pd.DataFrame:
    if path and Path(path).is_file():
        return pd.DataFrame(json.loads(Path(path).read_text(encoding="utf-8"))["rows"])
    sys.path.insert(0, str(REPO / "benchmarks"))
    from bench_validate import MODELS

    from pdtune.perfmodel.defaults import silicon_file, silicon_problems
    from pdtune.perfmodel.heldout import heldout_table
    from pdtune.results import load_results

    return heldout_table(silicon_problems(load_results(silicon_file())), models=MODELS).table


def peer_rows(ids: set[str]) -> list[dict]:
    """The raw CSV rows (aiconfigurator's own columns) of the scored rows, with pdtune's config as a fallback path."""
    out = []
    with SILICON.open(encoding="utf-8", newline="") as fh:
        for row in csv.DictReader(fh):
            if row["id"] not in ids:
                continue
            local = MODELS_DIR / row["model_path"].rsplit("/", 1)[-1].lower()
            out.append({
                "id": row["id"], "model_path": row["model_path"],
                "local_config": str(local) if (local / "config.json").is_file() else None,
                "system": row["system"], "isl": row["isl"], "osl": row["osl"], "batch_size": float(row["batch_size"]),
                **{k: float(row[k]) if row[k] else None for k in ("tp_size", "pp_size", "attention_dp_size",
                                                                  "moe_tp_size", "moe_ep_size")},
                "gemm_quant_mode": row["gemm_quant_mode"] or None, "moe_quant_mode": row["moe_quant_mode"] or None,
            })
    return out


#: aiconfigurator's estimates depend only on the rows and its own version: kept here between runs (in chunks, so an
#: interrupted run resumes); delete the file to estimate again.
PEER_CACHE = REPO / "_build" / "bench" / "aiconfigurator-0.12.0-estimates.json"


def run_peer(rows: list[dict], chunk: int = 100) -> tuple[dict[str, dict], float]:
    cache = json.loads(PEER_CACHE.read_text(encoding="utf-8")) if PEER_CACHE.is_file() else {"results": {},
                                                                                               "seconds": 0.0}
    todo = [r for r in rows if r["id"] not in cache["results"]]
    PEER_CACHE.parent.mkdir(parents=True, exist_ok=True)
    for start in range(0, len(todo), chunk):
        part = todo[start : start + chunk]
        with tempfile.TemporaryDirectory() as tmp:
            src, dst = Path(tmp) / "rows.json", Path(tmp) / "out.json"
            src.write_text(json.dumps(part), encoding="utf-8")
            subprocess.run([str(PEER_PYTHON), str(PEER_SCRIPT), "estimate", str(src), str(dst)], check=True,
                           timeout=4 * 3600, cwd=tmp)
            data = json.loads(dst.read_text(encoding="utf-8"))
        cache["results"].update({r["id"]: r for r in data["results"]})
        cache["seconds"] += float(data["seconds"])
        PEER_CACHE.write_text(json.dumps(cache), encoding="utf-8")
        print(f"  aiconfigurator: {min(start + chunk, len(todo))}/{len(todo)} rows estimated", flush=True)
    return {i: cache["results"][i] for i in (r["id"] for r in rows)}, float(cache["seconds"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--heldout", metavar="JSON", help="bench_validate.py --json output (else computed here)")
    args = parser.parse_args(argv)
    if not PEER_PYTHON.is_file():
        print("bench_accuracy: skipped, aiconfigurator is not installed: run `make bench-peers`")
        return 0
    start = time.perf_counter()
    table = heldout(args.heldout)
    table = table[table["source_id"].notna()]
    peer, peer_seconds = run_peer(peer_rows(set(table["source_id"])))
    table = table.assign(
        aic_status=[peer.get(i, {}).get("status", "missing") for i in table["source_id"]],
        aic_error_text=[peer.get(i, {}).get("error") for i in table["source_id"]],
        aic_quant=[str(peer.get(i, {}).get("quant_used")) for i in table["source_id"]],
        aic_ttft=[peer.get(i, {}).get("ttft_ms") for i in table["source_id"]],
        aic_tpot=[peer.get(i, {}).get("tpot_ms") for i in table["source_id"]],
    )
    for m, col in (("ttft_ms_p50", "aic_ttft"), ("tpot_ms_p50", "aic_tpot")):
        measured = table[f"measured_{m}"].astype(float)
        table[f"aic_{m}_error"] = table[col].astype(float) / measured - 1
    both = table["predicted"] & (table["aic_status"] == "ok") & table["calibrated_tpot_ms_p50_error"].notna()
    print("Same rows, both tools (MEASURED: aiconfigurator's silicon sample; predictions MODELED); |error| in %")
    print(f"{'model':<14} {'gpu':<5} {'rows':>5} {'both':>5}   pdtune calibrated        pdtune uncalibrated      "
          "aiconfigurator 0.12")
    print(f"{'':<26}{'':>5}   TTFT med p90 TPOT med p90  TTFT med p90 TPOT med p90  TTFT med p90 TPOT med p90")
    summary = []
    groups = list(table.groupby(["model_key", "gpu_name"], sort=True)) + [(("all", ""), table)]
    for (model, gpu), frame in groups:
        sel = frame[both.loc[frame.index]]
        rec = {"model": model, "gpu": gpu, "rows": len(frame), "both": len(sel)}
        cells = []
        for kind in ("calibrated", "lomo", "aic"):
            for m in ("ttft_ms_p50", "tpot_ms_p50"):
                med, p90 = error_percentiles(sel[f"{kind}_{m}_error"])
                rec[f"{kind}_{m}_median"], rec[f"{kind}_{m}_p90"] = med, p90
                cells.append(f"{_f(med)} {_f(p90)}")
        summary.append(rec)
        print(f"{model:<14} {gpu:<5} {len(frame):>5} {len(sel):>5}   " + "  ".join(
            f"{cells[i]} {cells[i + 1]}" for i in (0, 2, 4)))
    print("\nRows pdtune could not predict (calibrated or not), kept and counted:")
    pd_missing = table[~both & ~(table["predicted"] & table["calibrated_tpot_ms_p50_error"].notna())]
    for (model, gpu, reason), n in pd_missing.groupby(
            ["model_key", "gpu_name", pd_missing["reason"].fillna(pd_missing["calibrated_reason"]).fillna("?")]
    ).size().items():
        print(f"  {model} / {gpu}: {n} x {reason}")
    print("Rows aiconfigurator could not predict:")
    aic_missing = table[table["aic_status"] != "ok"]
    for (model, gpu, err), n in aic_missing.groupby(["model_key", "gpu_name", aic_missing["aic_error_text"]
                                                     .fillna("?").str.slice(0, 110)]).size().items():
        print(f"  {model} / {gpu}: {n} x {err}")
    fallback = table[(table["aic_status"] == "ok") & (table["aic_quant"].str.contains("None"))]
    print("aiconfigurator rows estimated with an auto-inferred quant mode (its tables lack the row's): "
          f"{len(fallback)}")
    overall = summary[-1]
    failures = [m for m in ("ttft_ms_p50", "tpot_ms_p50")
                if overall[f"calibrated_{m}_median"] is None or overall[f"aic_{m}_median"] is None
                or overall[f"calibrated_{m}_median"] > overall[f"aic_{m}_median"]]
    pairs = [r for r in summary[:-1] if r["both"]]
    above = {f"{r['model']} {r['gpu']}": [m[:4].upper() for m in ("ttft_ms_p50", "tpot_ms_p50")
                                         if r[f"calibrated_{m}_median"] > r[f"aic_{m}_median"]] for r in pairs}
    above = {pair: metrics for pair, metrics in above.items() if metrics}
    print(f"pairs (model x GPU, both tools predict) where pdtune calibrated is at or below aiconfigurator on both "
          f"medians: {len(pairs) - len(above)} of {len(pairs)} (issue 23: at least {PAIRS_TARGET}); above: "
          + ("; ".join(f"{pair} on {', '.join(m)}" for pair, m in above.items()) or "none"))
    if len(pairs) - len(above) < PAIRS_TARGET:
        failures.append(f"{len(above)} of {len(pairs)} pairs")
    print(f"\naiconfigurator: {peer_seconds:.0f} s for {len(peer)} estimates (cached in {PEER_CACHE.name}); "
          f"whole run {time.perf_counter() - start:.0f} s")
    out = REPO / "_build" / "bench" / "accuracy.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"summary": summary, "pairs": len(pairs), "pairs_above": sorted(above)}, indent=1)
                   + "\n", encoding="utf-8")
    print(f"wrote {out}")
    if failures:
        print("pdtune (calibrated) is above aiconfigurator on: " + ", ".join(failures))
        return 1
    print("pdtune (calibrated) is at or below aiconfigurator on TTFT and TPOT overall")
    return 0


if __name__ == "__main__":
    sys.exit(main())
