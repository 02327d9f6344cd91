"""Deployment labels: which deployment measured a row, as a short readable name.

``3xTP2DP4+EP : 1xTEP8+MTP`` for a disaggregated deployment (workers x topology per side, ``+MTP`` at the
end, since speculative decoding belongs to the decode side); the topology for an isolated one. Frontiers,
envelopes and picks name their points by these labels.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from pdtune.errors import InputError
from pdtune.frontier.pareto import row_source


def deployment_label(df: pd.DataFrame) -> pd.Series:
    """A readable label per row naming the deployment it measured.

    Disaggregated rows (``mode == "disagg"``, or no mode but both role topologies):
    ``"{n_prefill_workers}x{prefill_topology} : {n_decode_workers}x{decode_topology}"``, e.g.
    ``3xTP2DP4+EP : 1xTEP8``; other rows: ``topology``. ``+MTP`` is appended when ``mtp_tokens > 0``
    (speculative decoding belongs to the decode side, so it ends the label). A role whose topology is
    missing is named by its GPU count (``8 GPUs``; ``8 prefill GPUs`` on one side of a disaggregated
    label); a row with neither raises :class:`InputError`.
    """
    labels = [_row_label(row, i, df) for i, row in enumerate(df.to_dict("records"))]
    return pd.Series(labels, index=df.index, name="deployment", dtype=object)


def _row_label(row: dict[str, Any], i: int, df: pd.DataFrame) -> str:
    mtp = as_number(row.get("mtp_tokens"))
    suffix = "+MTP" if mtp is not None and mtp > 0 else ""
    mode = row.get("mode")
    disagg = mode == "disagg" if is_present(mode) else (
        is_present(row.get("prefill_topology")) and is_present(row.get("decode_topology")))
    if not disagg:
        return _role(row, "topology", "gpus_total", None, i, df) + suffix
    prefill = _role(row, "prefill_topology", "gpus_prefill", "n_prefill_workers", i, df, "prefill ")
    decode = _role(row, "decode_topology", "gpus_decode", "n_decode_workers", i, df, "decode ")
    return f"{prefill} : {decode}{suffix}"


def disagg_label(n_prefill: int, prefill: str, n_decode: int, decode: str, suffix: str) -> str:
    """The label of ``n_prefill`` workers of topology ``prefill`` with ``n_decode`` of ``decode``."""
    return f"{n_prefill}x{prefill} : {n_decode}x{decode}{suffix}"


def _role(row: dict[str, Any], topo_key: str, gpus_key: str, workers_key: str | None, i: int,
          df: pd.DataFrame, role: str = "") -> str:
    """One side of a label: ``3xTP2DP4+EP``; without a topology, GPUs per worker (``2x8 prefill GPUs``) or,
    when the workers are unknown, the side's GPUs (``16 prefill GPUs``; the role named, since a bare count beside
    the other side's topology does not say which side it is)."""
    workers = as_number(row.get(workers_key)) if workers_key else None
    topo = row.get(topo_key)
    if is_present(topo) and str(topo).strip():
        name = str(topo).strip()
        return name if workers is None else f"{int(workers)}x{name}"
    gpus = as_number(row.get(gpus_key))
    if gpus is None or gpus <= 0:
        raise InputError(row_source(df, i), topo_key, "cannot label the deployment: no topology and no GPU count")
    if workers is not None and workers > 0 and gpus % workers == 0:
        return f"{int(workers)}x{int(gpus // workers)} {role}GPUs"
    return f"{int(gpus)} {role}GPUs"


def is_present(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value)) and value is not pd.NA


def as_number(value: Any) -> float | None:
    if not is_present(value):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def with_deployment(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with a ``deployment`` column: labels already there are kept, missing ones come from
    :func:`deployment_label` (so measured rows concatenated with rate-matched ones get labelled)."""
    if "deployment" not in df.columns:
        return df.assign(deployment=deployment_label(df))
    missing = df["deployment"].isna().to_numpy()
    if not missing.any():
        return df
    out = df.assign(deployment=df["deployment"].astype(object))
    out.loc[missing, "deployment"] = deployment_label(df[missing]).to_numpy()
    return out
