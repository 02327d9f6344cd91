"""The one step that turns a searched row into a reported one: its latencies, their tails, their source.

The search ranks every rate-matched (and aggregated) deployment by the steady-state model, which is fast enough
to price tens of thousands of rows. The rows a plan *reports* (the frontier, each SLA's pick, its runner-up,
the best of each serving mode) and every SLA check pass through :func:`evaluate_rows` first; its answer is
what the table, the picks and the JSON say. Today that is the steady-state model itself, labelled so in a
column of every row (``latency_model``); a scheduler simulation replaces this one function, and nothing
else in the plan changes.

What the steady-state model can and cannot say, and so what :func:`evaluate_rows` writes:

* ``ttft_ms_p50``: the modeled TTFT (rate matching's prefill point plus the KV transfer, or the aggregated
  server's), with no queueing spread: ``ttft_ms_p90 = ttft_ms_p99 = ttft_ms_p50``.
* ``tpot_ms_p50``: the modeled TPOT. Its tail is the :class:`~pdtune.plan.inputs.TpotP90` rule: a measured
  decode sweep's own p99 where one was given, else the TPOT times the measured p99/median ratio of the
  bundled InferenceX points. That ratio is a p99's, so it bounds the p90 from above:
  ``tpot_ms_p90 = tpot_ms_p99 = max(that value, tpot_ms_p50)``. Every row holds p99 >= p90 >= p50.
* ``tps_per_user = 1000 / tpot_ms_p50``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np
import pandas as pd

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
    time, best first, until its pick is found)."""

    name: str
    evaluate: Callable[[pd.DataFrame], pd.DataFrame]
    batch: int | None = None

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
