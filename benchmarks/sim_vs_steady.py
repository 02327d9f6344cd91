"""Where the simulation's TTFT parts from the steady-state model's, read from the shipped scorecards (seconds).

Both ``data/perfmodel/validation/heldout.csv`` (the steady-state model) and ``heldout_simulated.csv`` (the scheduler
simulation) predict every silicon row with the same leave-one-model-out factors (``lomo_models.csv``), so their
ratio isolates what the simulation does differently. Prints, per concurrency band and per GPU, the median of
simulated / steady-state TTFT and TPOT, the median of measured / steady-state TTFT, and each model's signed median
TTFT error. Nothing is fitted or simulated here; every number is MODELED over MEASURED.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

VALIDATION = Path(__file__).resolve().parents[1] / "data" / "perfmodel" / "validation"
BANDS = ((4, "4"), (8, "8"), (16, "16"), (32, "32"), (64, "64"), (np.inf, "above 64"))


def band(c: float) -> str:
    return next(name for top, name in BANDS if c <= top)


def table() -> pd.DataFrame:
    sim = pd.read_csv(VALIDATION / "heldout_simulated.csv")
    steady = pd.read_csv(VALIDATION / "heldout.csv")
    sim = sim[sim["predicted"].astype(bool)]
    both = sim.merge(steady[["source_id", "lomo_ttft_ms_p50", "lomo_tpot_ms_p50"]], on="source_id",
                     suffixes=("_sim", "_steady"))
    return both.assign(
        ttft_ratio=both["lomo_ttft_ms_p50_sim"] / both["lomo_ttft_ms_p50_steady"],
        tpot_ratio=both["lomo_tpot_ms_p50_sim"] / both["lomo_tpot_ms_p50_steady"],
        measured_ratio=both["measured_ttft_ms_p50"] / both["lomo_ttft_ms_p50_steady"],
        band=[band(c) for c in both["concurrency"]],
        sim_error=both["lomo_ttft_ms_p50_sim"] / both["measured_ttft_ms_p50"] - 1,
        steady_error=both["lomo_ttft_ms_p50_steady"] / both["measured_ttft_ms_p50"] - 1,
    ).dropna(subset=["ttft_ratio"])


def main() -> int:
    t = table()
    cols = {"ttft_ratio": "simulated / steady TTFT", "tpot_ratio": "simulated / steady TPOT",
            "measured_ratio": "measured / steady TTFT", "source_id": "rows"}
    agg = {"ttft_ratio": "median", "tpot_ratio": "median", "measured_ratio": "median", "source_id": "count"}
    order = [name for _, name in BANDS]
    by_band = t.groupby("band").agg(agg).reindex(order).rename(columns=cols)
    print(f"{len(t):,} rows predicted by both (same leave-one-model-out factors), medians:")
    print(by_band.round(2).to_string())
    print()
    by_gpu = t.groupby("gpu").agg({**agg, "sim_error": "median", "steady_error": "median"}).rename(
        columns={**cols, "sim_error": "simulated signed TTFT error", "steady_error": "steady signed TTFT error"})
    print(by_gpu.round(3).to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main())
