"""Chapter 8, section "What the scheduler does to latency": two scheduler effects simulated, and measured rows.

Two cases on a plain dense model (Llama-3.1-8B on one H100 with a deliberately small KV cache, the cases
``tests/test_sim_effects.py`` pins), each a closed loop of ``vllm bench serve`` clients run in :mod:`pdtune.sim`
(vLLM 0.33's scheduler stepped on pdtune's step costs, the H100's shipped factors): **KV-limited admission**
(:func:`kv_limited`), where more clients than the KV cache holds wait in vLLM's waiting queue, and **cohorts**
(:func:`cohorts`), where requests admitted together decode in lockstep and finish together. Every number of the
cases is **modeled**. Beside them, :func:`measured_sweep` reads InferenceX's held-out MiniMax-M2.5 sweep on 8x
H200 (measured) with both of pdtune's predictions of it from ``data/perfmodel/validation/inferencex_heldout.csv``
(``benchmarks/bench_heldout.py --csv``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache

import numpy as np
import pandas as pd

from pdtune.gpus import load_gpu
from pdtune.model import load_model
from pdtune.paths import data_dir
from pdtune.perfmodel.aggregated import agg_plan, agg_prediction
from pdtune.perfmodel.defaults import gpu_defaults
from pdtune.perfmodel.efficiency import Efficiency
from pdtune.perfmodel.engine import Engine, EngineConfig, build_engine
from pdtune.sim import SimConfig, SimResult, closed_loop, simulate
from pdtune.topology import parse_topology

MODEL, GPU, TOPOLOGY, ISL, OSL = "llama-3.1-8b", "h100", "TP1", 1024, 128
#: The simulation's label on every chart and table of this page.
HOW = "pdtune.sim (vLLM 0.33's scheduler on pdtune's step costs, H100 default factors)"
#: The label of the held-out sweep's two predictions.
HELDOUT_HOW = "pdtune.sim and the steady-state model, H200 shipped default factors, no calibration"
#: The held-out table: both latency models beside InferenceX's measurements.
HELDOUT_CSV = "perfmodel/validation/inferencex_heldout.csv"
MEASURED_SOURCE = ("InferenceX's vLLM runs of MiniMax-M2.5 TEP8 on 8x H200 (SemiAnalysis, Apache-2.0; "
                   "held out of every fit)")
MEASURED_DEPLOYMENT = "MiniMax-M2.5 TEP8"


@dataclass(frozen=True)
class Case:
    """One simulated case: the engine's memory share and token budget, the front end's spread."""

    name: str
    gpu_memory_utilization: float
    max_num_batched_tokens: int
    request_overhead_s: float | None = None  # None: the shipped factor
    overhead_cv: float = 0.0


#: About 14 requests of 1,024 + 128 tokens fit its KV cache; a budget of 2,048 tokens a step.
KV_LIMITED = Case("KV-limited", 0.24, 2048)
#: About 7 requests fit; seven prompts fit one 8,192-token step; the front end spreads arrivals (CV 1).
COHORTS = Case("cohorts", 0.227, 8192, request_overhead_s=0.1, overhead_cv=1.0)


@cache
def engine(case: Case) -> Engine:
    config = EngineConfig(vllm="0.33", max_num_batched_tokens=case.max_num_batched_tokens, max_num_seqs=256,
                          gpu_memory_utilization=case.gpu_memory_utilization, kv_cache_dtype="auto",
                          overheads_gib=(1.0, 0.5, 0.5))
    return build_engine(load_model(MODEL), load_gpu(GPU), parse_topology(TOPOLOGY), isl=ISL, osl=OSL,
                        config=config)


@cache
def run(case: Case, concurrency: int, rounds: int = 6) -> SimResult:
    """``concurrency`` clients, ``rounds`` requests each, on the case's engine (modeled)."""
    eff = _efficiency(case)
    load = closed_loop(concurrency, ISL, OSL, num_prompts=rounds * concurrency)
    return simulate(engine(case), load, efficiency=eff, config=SimConfig(overhead_cv=case.overhead_cv))


def _efficiency(case: Case) -> Efficiency:
    eff = gpu_defaults(GPU, "simulated").efficiency
    return eff if case.request_overhead_s is None else replace(eff, request_overhead_s=case.request_overhead_s)


def sweep(case: Case, concurrencies: tuple[int, ...]) -> pd.DataFrame:
    """Per concurrency (modeled): the simulated TTFT and TPOT (p50, p90) and mean running and waiting requests,
    and the steady-state model's TTFT and TPOT of the same engine (``steady_*``: the queue by Little's law)."""
    rows = []
    eff = _efficiency(case)
    for c in concurrencies:
        r = run(case, c)
        s, line = r.stats(), r.summary()["timeline"]["engine"]
        steady = agg_prediction(engine(case), agg_plan(engine(case), c, ISL, OSL, eff.arrival_clustering), ISL,
                                OSL, eff)
        rows.append({"concurrency": c, "ttft_ms_p50": s["ttft_ms_p50"], "ttft_ms_p90": s["ttft_ms_p90"],
                     "tpot_ms_p50": s["tpot_ms_p50"], "tpot_ms_p90": s["tpot_ms_p90"],
                     "running": line["running_mean"], "waiting": line["waiting_mean"],
                     "steady_ttft_ms": steady.ttft_ms, "steady_tpot_ms": steady.tpot_ms, "modeled": True})
    return pd.DataFrame(rows)


#: The columns a sweep shows on the page, with their headers.
SHOWN = {"concurrency": "clients", "ttft_ms_p50": "TTFT p50 (ms)", "tpot_ms_p50": "TPOT p50 (ms)",
         "running": "running (mean)", "waiting": "waiting (mean)", "steady_ttft_ms": "steady-state TTFT (ms)",
         "steady_tpot_ms": "steady-state TPOT (ms)"}


def shown(frame: pd.DataFrame) -> pd.DataFrame:
    """A sweep's columns for the page (every value modeled: simulated, then the steady-state model's)."""
    return frame[list(SHOWN)].rename(columns=SHOWN)


def kv_room(case: Case) -> int:
    """Requests of ISL + OSL tokens the case's KV cache holds at once (vLLM's count, pdtune.state)."""
    return int(engine(case).capacity)


def timeline(case: Case, concurrency: int, *, bins: int = 240) -> pd.DataFrame:
    """The run's running and waiting requests and KV use (% of the blocks) over time, averaged in ``bins``
    equal slices of the run (a step is milliseconds; the chart needs hundreds of points, not thousands)."""
    r = run(case, concurrency)
    frame = r.timeline_frame()
    blocks = r.summary()["timeline"]["engine"]["kv_blocks"] or int(frame["kv_blocks_used"].max())
    edges = np.linspace(0.0, float(frame["t_s"].max()), bins + 1)
    frame = frame.assign(slice=np.clip(np.searchsorted(edges, frame["t_s"], side="right") - 1, 0, bins - 1))
    out = frame.groupby("slice").agg(t_s=("t_s", "max"), running=("running", "mean"), waiting=("waiting", "mean"),
                                     kv_blocks_used=("kv_blocks_used", "mean"),
                                     prefill_tokens=("prefill_tokens", "sum")).reset_index(drop=True)
    return out.assign(kv_used_pct=100.0 * out["kv_blocks_used"] / blocks, case=case.name, modeled=True)


def queueing_slope_ms(case: Case, concurrencies: tuple[int, ...]) -> tuple[float, float]:
    """(simulated, Little's law) TTFT added by one more client above the KV limit, ms: the simulated sweep's
    slope, and one request's time in the batch over the requests the batch holds (E2E / N)."""
    frame = sweep(case, concurrencies)
    slope = float(np.polyfit(frame["concurrency"], frame["ttft_ms_p50"], 1)[0])
    top = run(case, concurrencies[-1]).stats()
    running = float(frame["running"].iloc[-1])
    in_batch_ms = top["e2e_ms_p50"] - top["ttft_ms_p50"] + top["tpot_ms_p50"]  # decode, plus its prefill step
    return slope, in_batch_ms / running


def measured_sweep(isl: int) -> pd.DataFrame:
    """InferenceX's MiniMax-M2.5 TEP8 rows (measured) at the swept ISL nearest ``isl`` among those with five or
    more concurrencies, with pdtune's two predictions of each (modeled: steady-state and simulated)."""
    table = pd.read_csv(data_dir() / HELDOUT_CSV)  # shipped data, written by the benchmark
    rows = table[(table["deployment"] == MEASURED_DEPLOYMENT) & table["predicted"].astype(bool)]
    counts = rows[rows["scored_by"] == "simulated"].groupby("isl")["concurrency"].nunique()
    swept = counts[counts >= 5].index.to_numpy()
    chosen = int(swept[np.argmin(np.abs(swept - isl))])
    rows = rows[rows["isl"] == chosen]
    cols = ["concurrency", "isl", "osl", "measured_ttft_ms_p50", "measured_tpot_ms_p50"]
    measured = rows[rows["scored_by"] == "simulated"][cols].sort_values("concurrency")
    for model in ("simulated", "steady-state"):
        part = rows[rows["scored_by"] == model].set_index("concurrency")
        measured[f"{model}_ttft_ms_p50"] = measured["concurrency"].map(part["predicted_ttft_ms_p50"])
        measured[f"{model}_tpot_ms_p50"] = measured["concurrency"].map(part["predicted_tpot_ms_p50"])
    return measured.reset_index(drop=True)


def measured_slope_ms(frame: pd.DataFrame, column: str, *, from_concurrency: int = 16) -> float:
    """TTFT added per client from ``from_concurrency`` up (least squares), ms."""
    part = frame[frame["concurrency"] >= from_concurrency]
    return float(np.polyfit(part["concurrency"], part[column], 1)[0])


def same_model_elsewhere() -> pd.DataFrame:
    """InferenceX's MiniMax-M2.5 TEP8 runs beside aiconfigurator's silicon runs of the same model on the same
    H200s (TP8) at the same input length and clients, both measured: each source's TTFT and TPOT, and how many
    times InferenceX's is the silicon one (two silicon runs of a point: their median)."""
    from pdtune.scorecard import scorecard_file

    held = pd.read_csv(data_dir() / HELDOUT_CSV)
    held = held[(held["deployment"] == MEASURED_DEPLOYMENT) & (held["scored_by"] == "simulated")]
    silicon = pd.read_csv(scorecard_file())
    silicon = silicon[(silicon["model_key"] == "minimax-m2.5") & (silicon["gpu_name"] == "h200")
                      & (silicon["topology"] == "TP8") & (silicon["osl"] == 1024)]
    keys = ["isl", "concurrency"]
    metrics = ["measured_ttft_ms_p50", "measured_tpot_ms_p50"]
    there = silicon.groupby(keys)[metrics].median()
    frame = held[keys + metrics].merge(there, left_on=keys, right_index=True, suffixes=("", "_silicon"))
    frame = frame.sort_values(keys).reset_index(drop=True)
    for metric in ("ttft", "tpot"):
        frame[f"{metric}_times"] = frame[f"measured_{metric}_ms_p50"] / frame[f"measured_{metric}_ms_p50_silicon"]
    return frame


#: A measured TTFT slope (ms per client, from 16 clients up) this page calls a queue. Below it the growth from 16 to
#: 64 clients stays under half a second, within these files' scatter: at ISL 1,024 the median TTFT goes from 450 ms
#: at 16 clients to 808 ms at 48 and back to 468 ms at 64.
QUEUE_SLOPE_MS = 10.0


def slope_words(ms_per_client: float) -> str:
    """A TTFT slope in words, whole milliseconds per client: a fall is not called growth."""
    whole = round(ms_per_client)
    if whole >= 1:
        return f"grows by {whole:,} ms per client"
    if whole <= -1:
        return f"falls by {-whole:,} ms per client"
    return "stays flat"


def measured_shape(ms_per_client: float) -> str:
    """What the measured slope shows: the first case's queue, or none at this input length."""
    if ms_per_client >= QUEUE_SLOPE_MS:
        return "the queueing shape of the first case"
    return "no queue that stands out from the runs' scatter at this input length"


def sweep_title(ms_per_client: float) -> str:
    """The measured sweep's chart title, true to its slope."""
    if ms_per_client >= QUEUE_SLOPE_MS:
        return "MiniMax-M2.5 TEP8: measured TTFT grows with clients, modeled barely"
    return "MiniMax-M2.5 TEP8: measured and modeled TTFT against clients"


def clients_under(case: Case, concurrencies: tuple[int, ...], ttft_ms: float) -> int:
    """The most clients of ``concurrencies`` whose simulated median TTFT stays under ``ttft_ms``."""
    frame = sweep(case, concurrencies)
    ok = frame[frame["ttft_ms_p50"] < ttft_ms]
    return int(ok["concurrency"].max()) if len(ok) else 0


def error_by_model() -> pd.DataFrame:
    """Median and p90 |error| (%) of TTFT and TPOT per held-out deployment and latency model (the shipped table)."""
    table = pd.read_csv(data_dir() / HELDOUT_CSV)
    rows = []
    for (deployment, model), frame in table.groupby(["deployment", "scored_by"], sort=False):
        done = frame[frame["predicted"].astype(bool)]
        rec = {"deployment": deployment, "latency model": model, "rows": len(frame), "predicted": len(done)}
        for metric, name in (("ttft_ms_p50", "TTFT"), ("tpot_ms_p50", "TPOT")):
            err = (done[f"{metric}_error"].abs() * 100).to_numpy()
            rec[f"{name} median %"] = float(np.median(err)) if len(err) else float("nan")
            rec[f"{name} p90 %"] = float(np.percentile(err, 90)) if len(err) else float("nan")
        rows.append(rec)
    return pd.DataFrame(rows)


def queued_ttft_ms(ttft_at_limit_ms: float, clients: int, room: int, batch_ms: float) -> float:
    """Little's law for a closed loop above a KV limit of ``room`` requests: each client past it waits one
    request's time in the batch (``batch_ms``) shared by the ``room`` requests the batch holds."""
    return ttft_at_limit_ms + max(0, clients - room) * batch_ms / room
