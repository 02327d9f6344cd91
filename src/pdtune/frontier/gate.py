"""The accuracy gate: deployments whose measured accuracy falls below a threshold leave the frontier.

Accuracy is a fraction in [0, 1] (GSM8K 95 % is ``0.95``); the article gates on GSM8K at 0.95. A
deployment is judged by the lowest accuracy recorded for it; one with no accuracy recorded is kept, and
listed, so the book can say which points were never checked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from pdtune.errors import InputError
from pdtune.frontier.labels import with_deployment
from pdtune.frontier.pareto import row_source


@dataclass(frozen=True, eq=False)
class GateResult:
    """What the accuracy gate kept and why.

    ``kept``: rows of deployments at or above the threshold plus those with no accuracy recorded;
    ``excluded``: one row per failing deployment (``deployment, accuracy, rows``), accuracy being the
    lowest recorded for it; ``unmeasured``: deployments kept without an accuracy, listed so the book can
    say so.
    """

    threshold: float
    kept: pd.DataFrame
    excluded: pd.DataFrame
    unmeasured: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "threshold": self.threshold,
            "excluded": [{"deployment": r.deployment, "accuracy": float(r.accuracy), "rows": int(r.rows)}
                         for r in self.excluded.itertuples(index=False)],
            "unmeasured": list(self.unmeasured),
            "kept_rows": len(self.kept),
        }


def accuracy_gate(df: pd.DataFrame, threshold: float) -> GateResult:
    """Drop every deployment whose accuracy (a fraction; the lowest recorded per deployment) is below
    ``threshold``; the article gates on GSM8K at 0.95. Deployments without any accuracy are kept and
    listed in ``unmeasured``."""
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float, np.floating)) \
            or not 0 < float(threshold) <= 1:
        raise InputError("accuracy_gate", "threshold",
                         f"expected a fraction in (0, 1] (0.95 for 95 %), got {threshold!r}")
    threshold = float(threshold)
    labelled = with_deployment(df)
    if "accuracy" in labelled.columns:
        acc = pd.to_numeric(labelled["accuracy"], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    else:
        acc = np.full(len(labelled), np.nan)
    bad = np.flatnonzero(~np.isnan(acc) & ~((acc >= 0) & (acc <= 1)))
    if bad.size:
        i = int(bad[0])
        raise InputError(row_source(labelled, i), "accuracy",
                         f"expected a fraction in [0, 1], got {acc[i]!r} (a percentage?)")
    per_deployment = pd.DataFrame({"deployment": labelled["deployment"].to_numpy(dtype=object), "accuracy": acc})
    summary = per_deployment.groupby("deployment", sort=True).agg(
        accuracy=("accuracy", "min"), rows=("accuracy", "size"))
    failing = summary[summary["accuracy"] < threshold]
    unmeasured = tuple(summary.index[summary["accuracy"].isna()])
    kept = labelled[~labelled["deployment"].isin(failing.index)]
    excluded = failing.reset_index()[["deployment", "accuracy", "rows"]]
    return GateResult(threshold, kept, excluded, unmeasured)
