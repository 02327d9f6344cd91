"""The one step that turns a searched row into a reported one: its latencies, their tails, their source.

Two evaluators: the steady-state model (:func:`steady_state`, the default) and the scheduler simulation of
issue 23 (:func:`simulated`, ``pdtune plan --latency-model simulated``), which runs each reported row as its
benchmark would run and reports the simulated medians and tails, queueing included.

The search ranks every rate-matched (and aggregated) deployment by the steady-state model, which is fast enough
to price tens of thousands of rows. The rows a plan *reports* (the frontier, each SLA's pick, its runner-up,
the best of each serving mode) and every SLA check pass through :func:`evaluate_rows` first; its answer is
what the table, the picks and the JSON say, labelled in a column of every row (``latency_model``). Swapping
the evaluator changes nothing else in the plan.

What the steady-state model can and cannot say, and so what :func:`evaluate_rows` writes (the simulation writes
the same columns from its simulated requests):

* ``ttft_ms_p50``: the modeled TTFT (rate matching's prefill point plus the KV transfer, or the aggregated
  server's), with no queueing spread: ``ttft_ms_p90 = ttft_ms_p99 = ttft_ms_p50``.
* ``tpot_ms_p50``: the modeled TPOT. Its tail is the :class:`~pdtune.plan.inputs.TpotP90` rule: a measured
  decode sweep's own p99 where one was given, else the TPOT times the measured p99/median ratio of the
  bundled InferenceX points. That ratio is a p99's, so it bounds the p90 from above:
  ``tpot_ms_p90 = tpot_ms_p99 = max(that value, tpot_ms_p50)``. Every row holds p99 >= p90 >= p50.
* ``tps_per_user = 1000 / tpot_ms_p50``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import pandas as pd

from pdtune.harnesses import HARNESSES
from pdtune.plan.inputs import TpotP90

#: What every row's latencies come from until the scheduler simulation lands.
LATENCY_MODEL = "steady-state"
LATENCY_NOTE = ("steady-state model (pdtune.perfmodel, no queueing spread): TTFT p90 and p99 equal the median; "
                "TPOT p90 and p99 are the median times the stated p99/median factor, or a measured sweep's p99")


@dataclass(frozen=True)
class Evaluator:
    """How reported rows are evaluated: a name for the ``latency_model`` column, the function that turns rows
    into reported rows (the columns :func:`evaluate_rows` writes), and how many rows one call should take
    (None: all at once; a slow evaluator, such as a simulation, takes the candidates of an SLA a batch at a
    time, best first, until its pick is found, and at most ``limit`` of them)."""

    name: str
    evaluate: Callable[[pd.DataFrame], pd.DataFrame]
    batch: int | None = None
    limit: int | None = None  # the most candidates one SLA's search evaluates (None: until its pick is found)

    def __call__(self, rows: pd.DataFrame) -> pd.DataFrame:
        return self.evaluate(rows)


def steady_state(tpot_p90: TpotP90) -> Evaluator:
    """The evaluation step until the scheduler simulation lands: the steady-state model's own numbers."""
    return Evaluator(LATENCY_MODEL, partial(evaluate_rows, tpot_p90=tpot_p90))


def evaluate_rows(rows: pd.DataFrame, tpot_p90: TpotP90) -> pd.DataFrame:
    """``rows`` with their reported latencies (see the module docstring): TTFT and TPOT p50/p90/p99,
    ``tpot_p90_basis``, ``tps_per_user`` and ``latency_model``. The search's own columns are kept."""
    tpot = rows["tpot_ms_p50"].to_numpy(dtype=float)
    ttft = rows["ttft_ms_p50"].to_numpy(dtype=float)
    measured_p99 = rows["measured_tpot_ms_p99"].to_numpy(dtype=float) if "measured_tpot_ms_p99" in rows else \
        np.full(len(rows), np.nan)
    decode_source = rows["decode_source"].astype(str).to_numpy() if "decode_source" in rows else \
        np.full(len(rows), "modeled")
    has_p99 = np.char.startswith(decode_source.astype(str), "measured") & np.isfinite(measured_p99)
    tail = np.maximum(np.where(has_p99, measured_p99, tpot * tpot_p90.factor), tpot)
    scaled = f"TPOT x {tpot_p90.factor:.2f}"
    basis = np.where(has_p99, "measured p99 TPOT of the decode sweep (bounds the p90)",
                     np.where(np.char.startswith(decode_source.astype(str), "modeled"), f"modeled {scaled}",
                              f"measured median {scaled}"))
    return rows.assign(
        ttft_ms_p90=ttft, ttft_ms_p99=ttft, tpot_ms_p90=tail, tpot_ms_p99=tail, tpot_p90_basis=basis,
        tps_per_user=1000.0 / tpot, latency_model=LATENCY_MODEL,
    )


# ------------------------------------------------------------------------------------------ the simulation

#: ``latency_model`` of rows the scheduler simulation evaluated.
SIMULATED = "simulated (pdtune.sim)"
SIMULATED_NOTE = ("pdtune.sim, vLLM 0.33's scheduler stepped on pdtune's step costs: the measured run of an "
                  "sa-bench closed loop at the row's concurrency as srt-slurm 0.3.0 starts it (10 prompts per "
                  "client, all clients at once on idle engines after the warm-up run has drained, lengths exactly "
                  "the plan's), TTFT and TPOT medians and tails of the simulated requests, queueing included")
#: Prompts per client of the measured run: srt-slurm 0.3.0's sa-bench sends ``concurrency x NUM_PROMPTS_MULT``
#: (default 10, srtctl/benchmarks/scripts/sa-bench/bench.sh) after a warm-up run of ``2 x concurrency`` that
#: ends before the measured run starts. Its first round is a burst of every client at once on idle engines, and
#: its share of the requests sets the tails: with two rounds (this plan until 2026-12-07) it was half of them,
#: and DeepSeek-V3's 2,000-client row on 72 GB200 had a median TTFT of 9.7 s; over ten rounds, 0.75 s.
SIM_ROUNDS = HARNESSES["sa-bench"].prompts


def sim_workload(concurrency: int, isl: int, osl: int, rounds: int = SIM_ROUNDS) -> Any:
    """The measured run of the benchmark a recipe starts (sa-bench, ``random_range_ratio`` 1.0) at
    ``concurrency`` clients. The warm-up run is left out: it drains before the measured run, and with prefix
    caching off nothing of it stays in a simulated engine but the draws of speculative acceptance."""
    from pdtune.sim import closed_loop

    return closed_loop(concurrency, isl, osl, num_prompts=rounds * concurrency, warmups=0, harness="sa-bench",
                       range_ratio=1.0)


#: Candidates one call of the simulated evaluator takes (best first) while an SLA's pick is sought.
SIM_BATCH = 4
#: The most candidates an SLA's search simulates. The steady-state ranking puts high concurrencies first, and the
#: simulation can put every one of them above the TTFT ceiling (queues the steady-state model does not see):
#: without a bound the search would simulate hundreds of rows (DeepSeek-V3 on 72 GB200: 36 rows, 34 CPU-minutes,
#: and still searching). A pick found this way is flagged as above the ceiling, with the count searched.
SIM_CANDIDATES = 12


def row_clients(r: dict[str, Any]) -> int:
    """The clients a row's simulated benchmark runs: one server's for an aggregated row (its replicas are alike),
    the whole deployment's for a disaggregated one."""
    return int(r["server_concurrency"] if r["mode"] == "agg" else r["concurrency"])


class SimProgress:
    """One status line while a plan's rows are simulated (the CLI writes it to a terminal's stderr, never to a
    pipe): the rows simulated so far, the time since the first began, and the last row's deployment."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.rows = 0
        self.start = time.perf_counter()

    def row(self, r: dict[str, Any]) -> None:
        self.rows += 1
        clients = row_clients(r)
        self.stream.write(f"\r\x1b[K  simulated {self.rows} row{'s' if self.rows != 1 else ''} in "
                          f"{time.perf_counter() - self.start:.0f} s; last: {r['deployment']} at {clients:,} "
                          f"client{'s' if clients != 1 else ''}")
        self.stream.flush()

    def close(self) -> None:
        """Clear the line (the plan's report follows)."""
        if self.rows:
            self.stream.write("\r\x1b[K")
            self.stream.flush()


def simulated(spec: Any, gpus: dict[str, Any], settings: Any, factors: dict[str, Any], tpot_p90: TpotP90,
              *, rounds: int = SIM_ROUNDS, progress: SimProgress | None = None) -> Evaluator:
    """The evaluation step run by the scheduler simulation (:mod:`pdtune.sim`): every row is simulated as the
    benchmark its recipe runs (sa-bench at the row's concurrency, ``random_range_ratio`` 1.0), aggregated rows
    as one of their servers (the replicas are alike), disaggregated rows as their ``x`` prefill and ``y``
    decode engines with the KV transfer; the engines are those the recipes start (``max-num-seqs`` at the row's
    load per DP rank, the decode token budget of the article's rule, prefix caching off). ``gpus`` maps
    ``prefill``/``decode`` to the pools' :class:`~pdtune.gpus.GpuSpec`, ``factors`` to their
    :class:`~pdtune.plan.pools.Factors`.
    Costs CPU time in proportion to the requests and steps simulated (tens of seconds a row at thousands of
    requests in flight), which is why the plan's default is the steady-state model."""
    return Evaluator(SIMULATED, partial(_simulate_rows, spec=spec, gpus=gpus, settings=settings, factors=factors,
                                        tpot_p90=tpot_p90, rounds=rounds, cache={}, progress=progress),
                     SIM_BATCH, SIM_CANDIDATES)


def _sim_engine(spec: Any, gpu: Any, s: Any, role: str, topology: str, mtp: int, load: int, cache: dict) -> Any:
    import math

    from pdtune.memory import default_max_num_batched_tokens
    from pdtune.perfmodel import build_engine
    from pdtune.topology import parse_topology

    topo = parse_topology(topology)
    seqs = max(1, math.ceil(load / topo.dp))
    base = s.engine_config("decode" if role == "decode" else "prefill")
    if role == "decode":
        batched = default_max_num_batched_tokens(seqs, mtp)
    elif role == "prefill":
        batched = base.max_num_batched_tokens
        seqs = min(max(8, 1 << (2 * seqs - 1).bit_length()), batched)
    else:
        batched = max(base.max_num_batched_tokens, seqs)
    key = (role, gpu.name, topo.canonical, mtp, seqs, batched)
    if key not in cache:
        from dataclasses import replace

        config = replace(base, max_num_seqs=seqs, max_num_batched_tokens=batched)
        cache[key] = build_engine(spec, gpu, topo, isl=s.isl, osl=s.osl, mtp_tokens=mtp, config=config)
    return cache[key]


#: Request-tokens (simulated requests x output length, over a batch) above which a batch's rows are simulated in
#: parallel processes: below it (a small plan, a test) starting the workers would cost more than it saves.
SIM_PARALLEL_WORK = 1_000_000
#: The statistics a simulated row reports.
_SIM_KEYS = ("ttft_ms_p50", "ttft_ms_p90", "ttft_ms_p99", "tpot_ms_p50", "tpot_ms_p90", "tpot_ms_p99", "tps_per_gpu",
             "total_tps")


def sim_jobs(rows: int, work: int) -> int:
    """Processes that simulate a batch of ``rows`` rows of ``work`` request-tokens: one per row up to the CPUs
    (``PDTUNE_JOBS`` overrides the CPU count; 1 keeps everything in this process), one below
    :data:`SIM_PARALLEL_WORK`. Each row is a deterministic simulation, so the answer does not depend on it."""
    from pdtune.perfmodel.simulated import simulation_jobs

    if work < SIM_PARALLEL_WORK or rows < 2:
        return 1
    return max(1, min(rows, simulation_jobs()))


def _simulate_one(r: dict[str, Any], *, spec: Any, gpus: dict[str, Any], settings: Any, factors: dict[str, Any],
                  rounds: int, cache: dict | None = None) -> dict[str, float]:
    """One reported row's benchmark, simulated (see :func:`simulated`): its statistics, ``total_tps`` for the
    whole deployment."""
    from pdtune.sim import SimConfig, simulate, simulate_disagg

    s = settings
    cache = _WORKER_ENGINES if cache is None else cache
    # Prefix caching off, as the recipes start every engine (pdtune.recipe: no-enable-prefix-caching).
    config = SimConfig(record_timeline=False, acceptance=s.acceptance, enable_prefix_caching=False)
    if r["mode"] == "agg":
        gpu = gpus["decode"] if r.get("prefill_gpu") == gpus["decode"].name and \
            r.get("prefill_gpu") != gpus["prefill"].name else gpus["prefill"]
        role = "prefill" if gpu is gpus["prefill"] else "decode"
        c = int(r["server_concurrency"])
        engine = _sim_engine(spec, gpu, s, "agg", r["topology"], 0, c, cache)
        wl = sim_workload(c, s.isl, s.osl, rounds)
        st = simulate(engine, wl, efficiency=factors[role].efficiency, config=config).stats(itl=False)
        total = st["total_tps"] * int(r["agg_replicas"])
    else:
        c = int(r["concurrency"])
        p = _sim_engine(spec, gpus["prefill"], s, "prefill", r["prefill_topology"], 0,
                        int(r["prefill_concurrency"]), cache)
        d = _sim_engine(spec, gpus["decode"], s, "decode", r["decode_topology"], int(r["mtp_tokens"]),
                        int(r["decode_concurrency"]), cache)
        wl = sim_workload(c, s.isl, s.osl, rounds)
        st = simulate_disagg(p, d, int(r["n_prefill_workers"]), int(r["n_decode_workers"]), wl,
                             efficiency=factors["decode"].efficiency, config=config).stats(itl=False)
        total = st["total_tps"]
    return {k: float(total if k == "total_tps" else st[k]) for k in _SIM_KEYS}


#: A worker process's engines (built once per worker and layout).
_WORKER_ENGINES: dict = {}


def _simulate_rows(rows: pd.DataFrame, *, spec: Any, gpus: dict[str, Any], settings: Any, factors: dict[str, Any],
                   tpot_p90: TpotP90, rounds: int, cache: dict, progress: SimProgress | None = None) -> pd.DataFrame:
    out = evaluate_rows(rows, tpot_p90)  # the search's own columns; the latencies are replaced below
    records = rows.to_dict("records")
    each = [rounds * row_clients(r) * settings.osl for r in records]
    one = partial(_simulate_one, spec=spec, gpus=gpus, settings=settings, factors=factors, rounds=rounds)
    jobs = sim_jobs(len(records), sum(each))
    if jobs == 1:
        stats = []
        for r in records:
            stats.append(one(r, cache=cache))
            if progress is not None:
                progress.row(r)
    else:
        from pdtune.signals import map_in_workers

        # Most request-tokens first, so that the last row a worker takes is a short one; the answers go back to
        # the rows' order (each row's simulation is seeded: where it ran changes nothing).
        order = sorted(range(len(records)), key=lambda i: -each[i])
        stats = [{}] * len(records)
        done = None if progress is None else (lambda k, _st: progress.row(records[order[k]]))
        for i, st in zip(order, map_in_workers(one, [records[i] for i in order], jobs, done), strict=True):
            stats[i] = st
    values = {k: [st[k] for st in stats] for k in _SIM_KEYS}
    v = {k: np.asarray(x, dtype=float) for k, x in values.items()}
    ttft = v["ttft_ms_p50"]
    return out.assign(
        ttft_ms_p50=ttft, ttft_ms_p90=np.maximum(v["ttft_ms_p90"], ttft),
        ttft_ms_p99=np.maximum.reduce([v["ttft_ms_p99"], v["ttft_ms_p90"], ttft]),
        tpot_ms_p50=v["tpot_ms_p50"], tpot_ms_p90=np.maximum(v["tpot_ms_p90"], v["tpot_ms_p50"]),
        tpot_ms_p99=np.maximum.reduce([v["tpot_ms_p99"], v["tpot_ms_p90"], v["tpot_ms_p50"]]),
        tpot_p90_basis="simulated p90 TPOT (pdtune.sim)", tps_per_user=1000.0 / v["tpot_ms_p50"],
        tps_per_gpu=v["tps_per_gpu"], total_tps=v["total_tps"],
        kv_transfer_share=out["kv_transfer_ms"].to_numpy(dtype=float) / ttft, latency_model=SIMULATED,
    )
