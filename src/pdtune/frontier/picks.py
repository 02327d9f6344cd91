"""The SLA pick: the best point under one service-level floor, and the reverse question.

With a floor on tokens/s per user, the most throughput per GPU; with a floor on throughput per GPU, the
most tokens/s per user. The chosen point always lies on the upper envelope; when nothing meets the floor
that is a result (``met=False``), not an error.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from pdtune.errors import InputError
from pdtune.frontier.envelope import upper_envelope
from pdtune.frontier.labels import as_number, is_present
from pdtune.frontier.pareto import X_AXIS, Y_AXIS, column_values
from pdtune.results.schema import empty_frame


@dataclass(frozen=True)
class SlaPick:
    """The best point under one service-level floor.

    ``met`` is False when no point reaches ``minimum`` (then the point fields are None and
    ``best_available`` says how close the data gets); this is a result, not an error, so a chapter can
    print "nothing meets it".
    """

    constraint: str  # the floored column: "tps_per_user" or "tps_per_gpu"
    minimum: float
    objective: str  # the column maximized under the floor
    met: bool
    candidates: int  # rows meeting the floor
    best_available: float  # the largest value of ``constraint`` in the data (NaN for no data)
    deployment: str | None = None
    concurrency: float | None = None
    tps_per_gpu: float | None = None
    tps_per_user: float | None = None
    modeled: bool | None = None
    source: str | None = None
    path: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in self.__dict__.items()}


def sla_pick(df: pd.DataFrame, min_tps_per_user: float | None = None,
             min_tps_per_gpu: float | None = None) -> SlaPick:
    """Give exactly one floor: the most throughput per GPU with at least ``min_tps_per_user``, or the most
    tokens/s per user with at least ``min_tps_per_gpu``. Ties resolve as on the frontier (fewest GPUs
    first); the chosen point always lies on :func:`upper_envelope`. No qualifying point: ``met=False``."""
    if (min_tps_per_user is None) == (min_tps_per_gpu is None):
        raise InputError("sla_pick", "min_tps_per_user/min_tps_per_gpu", "give exactly one of the two floors")
    if min_tps_per_user is not None:
        constraint, objective, minimum = X_AXIS, Y_AXIS, min_tps_per_user
    else:
        constraint, objective, minimum = Y_AXIS, X_AXIS, min_tps_per_gpu
    assert minimum is not None
    if isinstance(minimum, bool) or not math.isfinite(float(minimum)):
        raise InputError("sla_pick", f"min_{constraint}", f"expected a finite number, got {minimum!r}")
    minimum = float(minimum)
    envelope = upper_envelope(df)
    all_values = column_values(df, constraint)
    best_available = float(all_values.max()) if all_values.size else math.nan
    candidates = int((all_values >= minimum).sum())
    qualified = envelope[envelope[constraint].to_numpy(dtype=np.float64) >= minimum]
    if qualified.empty:
        return SlaPick(constraint, minimum, objective, False, candidates, best_available)
    # On a frontier the objective falls as the constraint rises, so the best qualifying point is the one
    # with the smallest qualifying constraint value.
    row = qualified.iloc[0] if constraint == X_AXIS else qualified.iloc[-1]
    return SlaPick(
        constraint, minimum, objective, True, candidates, best_available,
        deployment=str(row["deployment"]),
        concurrency=as_number(row.get("concurrency")),
        tps_per_gpu=float(row[Y_AXIS]),
        tps_per_user=float(row[X_AXIS]),
        modeled=bool(row["modeled"]) if "modeled" in row.index and is_present(row["modeled"]) else None,
        source=str(row["source"]) if "source" in row.index and is_present(row["source"]) else None,
        path=str(row["path"]) if "path" in row.index and is_present(row["path"]) else None,
    )


def sla(df: pd.DataFrame, min_tps_per_user: float) -> SlaPick | None:
    """:func:`pdtune.frontier.sla_pick` with a floor on tokens/s per user; None without data."""
    return sla_pick(df, min_tps_per_user=min_tps_per_user) if len(df) else None


def reverse_sla(df: pd.DataFrame, fractions: Sequence[float] = (1.0, 0.75, 0.5, 0.25)) -> pd.DataFrame:
    """The reverse question: keeping at least a fraction of the best throughput per GPU, the most
    interactive point (:func:`pdtune.frontier.sla_pick` with ``min_tps_per_gpu``)."""
    columns = ["fraction_of_best", "min_tps_per_gpu", "deployment", "concurrency", "tps_per_gpu",
               "tps_per_user"]
    if len(df) == 0:
        return empty_frame(columns)
    top = float(df["tps_per_gpu"].max())
    rows = []
    for f in fractions:
        pick = sla_pick(df, min_tps_per_gpu=f * top)
        rows.append({"fraction_of_best": f, "min_tps_per_gpu": f * top, "deployment": pick.deployment,
                     "concurrency": pick.concurrency, "tps_per_gpu": pick.tps_per_gpu,
                     "tps_per_user": pick.tps_per_user})
    return pd.DataFrame(rows, columns=columns)
