"""A sweep: one kind of benchmark results of a scenario (prefill-only, decode-only or disaggregated), labelled.

Chapters 5-7, the chart builders and the KV-room and roofline comparisons all read a scenario's results
through :func:`load_sweep`, which returns a :class:`Sweep`: the tidy rows of :mod:`pdtune.results`, only
the topologies the parameters list, each row labelled with its ``deployment`` (as
:func:`pdtune.frontier.with_deployment` names it), its ``layout`` without ``+MTP`` (what a chart colours
by) and whether it ran MTP. A scenario without that kind of results gets an empty sweep whose
:attr:`Sweep.note` says so; every analysis downstream accepts it and returns an empty frame (with its
columns) instead of failing.

Topology names are compared as layouts (:func:`pdtune.topology.parse_topology`), so ``TP8+EP`` and
``TEP8`` are the same engine. Interactivity is ``1000 / TPOT p50`` and throughput per GPU is total tokens/s
over all GPUs, as in the tidy results schema.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from pdtune.errors import InputError
from pdtune.frontier import with_deployment
from pdtune.results import TIDY_COLUMNS, load_results, parse_gpus
from pdtune.results.schema import empty_frame
from pdtune.scenario import RESULT_KINDS, Scenario
from pdtune.topology import parse_topology

#: How the prose names each kind of sweep.
KIND_WORDS = {
    "prefill": "prefill-only",
    "decode": "decode-only",
    "disagg": "disaggregated",
}


#: Columns every sweep frame carries beyond the tidy schema: the deployment label, its layout without
#: ``+MTP`` (what a chart colours by) and whether it ran MTP.
SWEEP_COLUMNS: tuple[str, ...] = (*TIDY_COLUMNS, "deployment", "layout", "mtp")


@dataclass(frozen=True, eq=False)
class Sweep:
    """One kind of benchmark results of a scenario, labelled; empty (with a :attr:`note`) when not given."""

    kind: str
    paths: tuple[str, ...]
    frame: pd.DataFrame
    note: str = ""
    listed_not_swept: tuple[str, ...] = ()  # topologies the parameters list that the results lack
    swept_not_listed: tuple[str, ...] = ()  # topologies the results hold that the parameters leave out

    @property
    def available(self) -> bool:
        return len(self.frame) > 0

    @property
    def modeled(self) -> bool:
        """True when any row comes from pdtune's performance model (its files say ``"modeled": true``)."""
        return bool(self.available and self.frame["modeled"].fillna(False).astype(bool).any())

    @property
    def workload(self) -> tuple[int, int] | None:
        """The sweep's ISL/OSL when every row records the same pair."""
        if not self.available:
            return None
        pairs = self.frame[["isl", "osl"]].dropna().drop_duplicates()
        if len(pairs) != 1:
            return None
        isl, osl = pairs.iloc[0]
        return int(isl), int(osl)

    def workload_or(self, isl: int, osl: int) -> tuple[int, int]:
        """The sweep's ISL/OSL, or the given pair when the sweep does not record one (or is empty)."""
        return self.workload or (isl, osl)

    @property
    def deployments(self) -> list[str]:
        """Deployment labels, fewest GPUs first (then as first met)."""
        if not self.available:
            return []
        order = self.frame.drop_duplicates("deployment").sort_values("gpus_total", kind="stable")
        return list(order["deployment"])

    @property
    def sources(self) -> str:
        """Where the rows come from, for a chart subtitle."""
        if not self.available:
            return ""
        return ", ".join(sorted({str(s) for s in self.frame["source"].dropna()}))

    def describe(self) -> str:
        """One line: how many points, from what, which workload, modeled or measured; or why it is empty."""
        if not self.available:
            return self.note
        workload = "/".join(map(str, self.workload)) if self.workload else "not recorded"
        origin = ("MODELED by pdtune's performance model, not measured" if self.modeled
                  else f"measured ({self.sources})")
        text = (f"{len(self.frame)} points from {len(self.deployments)} {KIND_WORDS[self.kind]} "
                f"deployments, ISL/OSL {workload}, concurrency {_span(self.frame['concurrency'])}: {origin}.")
        if self.listed_not_swept:
            text += f" Listed in the parameters but not in the results: {', '.join(self.listed_not_swept)}."
        if self.swept_not_listed:
            text += f" In the results but not listed, so left out: {', '.join(self.swept_not_listed)}."
        return text


def _span(values: pd.Series) -> str:
    lo, hi = int(values.min()), int(values.max())
    return f"{lo:,}" if lo == hi else f"{lo:,} to {hi:,}"


def load_sweep(
    kind: str,
    paths: Iterable[str] | str,
    *,
    gpus: str = "",
    topologies: Iterable[str] | None = None,
    canonical: bool = False,
) -> Sweep:
    """Read a scenario's ``{kind}_results`` (paths relative to the repository or absolute) into a Sweep.

    ``topologies`` keeps only the listed layouts (compared as layouts; rows that record no topology are
    kept). ``canonical`` renames every topology to its canonical name (``TP8+EP`` -> ``TEP8``) so that
    labels from different sweeps of the same engine agree, as rate matching needs.
    """
    if kind not in RESULT_KINDS:
        raise InputError("load_sweep", "kind", f"expected one of {', '.join(RESULT_KINDS)}, got {kind!r}")
    listed = [paths] if isinstance(paths, str) else list(paths)
    if not listed:
        note = (f"This scenario has no {KIND_WORDS[kind]} sweep (its {kind}_results list is empty), so this "
                "analysis is skipped.")
        return Sweep(kind, (), empty_frame(SWEEP_COLUMNS), note)
    resolved = [Scenario().resolve(p) for p in listed]
    counts = parse_gpus(gpus, "gpus") if gpus.strip() else None
    df = load_results(resolved, gpus=counts, single_workload=True)
    if canonical:
        df = canonical_topologies(df)
    listed_not_swept: tuple[str, ...] = ()
    swept_not_listed: tuple[str, ...] = ()
    if topologies is not None and kind != "disagg":
        wanted = {parse_topology(t, f"{kind}_topologies"): t for t in topologies}
        layouts = df["topology"].map(
            lambda t: parse_topology(t) if isinstance(t, str) and t.strip() else None)
        keep = layouts.isna() | layouts.isin(list(wanted))
        present = set(layouts.dropna())
        listed_not_swept = tuple(name for layout, name in wanted.items() if layout not in present)
        swept_not_listed = tuple(dict.fromkeys(df.loc[~keep, "topology"]))
        df = df[keep.to_numpy()]
    frame = label(df)
    note = "" if len(frame) else (f"None of the listed {kind} topologies is in the results, so this analysis "
                                  "is skipped.")
    return Sweep(kind, tuple(str(p) for p in resolved), frame.reset_index(drop=True), note,
                 listed_not_swept, swept_not_listed)


def label(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with ``deployment`` (:func:`pdtune.frontier.with_deployment`), ``layout`` and ``mtp``."""
    if len(df) == 0:
        return empty_frame(list(dict.fromkeys([*df.columns, *SWEEP_COLUMNS])))
    out = with_deployment(df)
    mtp = pd.to_numeric(out["mtp_tokens"], errors="coerce").fillna(0).to_numpy() > 0
    deployment = out["deployment"].astype(str)
    layout = np.where(mtp & deployment.str.endswith("+MTP").to_numpy(),
                      deployment.str.removesuffix("+MTP"), deployment)
    return out.assign(deployment=deployment.to_numpy(dtype=object), layout=layout, mtp=mtp)


def canonical_topologies(df: pd.DataFrame) -> pd.DataFrame:
    """Every topology column renamed to the layout's canonical name (``TP8+EP`` -> ``TEP8``)."""
    out = df.copy()
    for column in ("topology", "prefill_topology", "decode_topology"):
        if column in out.columns:
            out[column] = out[column].map(
                lambda t: parse_topology(t).canonical if isinstance(t, str) and t.strip() else t)
    if "deployment" in out.columns:
        out = out.drop(columns="deployment")
    return out


