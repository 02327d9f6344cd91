"""Frames for chapters 5-7: isolated prefill and decode sweeps, their findings, KV room, and the frontier.

The article's method is to measure prefill alone and decode alone for each topology, pick the best of
each, sweep the disaggregated configurations and take the upper envelope. :mod:`pdtune.frontier` holds the
mathematics (frontier, envelope, best per concurrency, rate matching, SLA pick); this module turns a
scenario's result folders into the small frames the chapters print and chart, so the notebooks stay free of
logic:

* :func:`load_sweep` reads one kind of results (``prefill``, ``decode`` or ``disagg``) into a
  :class:`Sweep`; a scenario without that kind gets an empty sweep whose :attr:`Sweep.note` says so, and
  every function below accepts it and returns an empty frame (with its columns) instead of failing;
* :func:`best_table`, :func:`winner_runs` and :func:`findings` compute who wins where and set it beside
  the article's claims (:data:`PREFILL_CLAIMS`, :data:`DECODE_CLAIMS`) with a verdict;
* :func:`kv_room`, :func:`mtp_effect`, :func:`experts_touched` and :func:`decode_roofline` explain the
  decode winners (chapter 6);
* :func:`prefill_capacity` and :func:`prefill_ceiling` give prefill's rate and its roofline (chapter 5);
* :func:`gate_summary`, :func:`frontier_ends`, :func:`envelope_steps`, :func:`predict` (rate matching beside
  the disaggregated sweep), :func:`reverse_sla` and :func:`inferencex_points` serve chapter 7.

Topology names are compared as layouts (:func:`pdtune.topology.parse_topology`), so ``TP8+EP`` and
``TEP8`` are the same engine. Interactivity is ``1000 / TPOT p50`` and throughput per GPU is total tokens/s
over all GPUs, as in the tidy results schema.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pdtune import tables
from pdtune.errors import InputError
from pdtune.frontier import (  # noqa: F401  (envelope_steps, frontier_matches_brute_force, reverse_sla, sla: moved)
    accuracy_gate,
    best_per_concurrency,
    envelope_steps,
    frontier_matches_brute_force,
    predicted_vs_measured,
    rate_match,
    reverse_sla,
    sla,
    upper_envelope,
    winner_runs as frontier_runs,
    with_deployment,
)
from pdtune.gpus import GpuSpec
from pdtune.model import ModelSpec
from pdtune.perfmodel.calibration import DEFAULT_EFFICIENCY
from pdtune.perfmodel.costs import model_costs
from pdtune.perfmodel.engine import Batch, EngineConfig, build_engine
from pdtune.results import TIDY_COLUMNS, load_results, parse_gpus
from pdtune.scenario import RESULT_KINDS, Scenario
from pdtune.topology import Topology, parse_topology
from pdtune.units import GiB

_KIND_WORDS = {
    "prefill": "prefill-only",
    "decode": "decode-only",
    "disagg": "disaggregated",
}

#: Columns every sweep frame carries beyond the tidy schema: the deployment label, its layout without
#: ``+MTP`` (what a chart colours by) and whether it ran MTP.
SWEEP_COLUMNS: tuple[str, ...] = (*TIDY_COLUMNS, "deployment", "layout", "mtp")

#: Stands in for a number the data does not give.
MISSING = "—"


# ------------------------------------------------------------------------------------------ loading


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
        text = (f"{len(self.frame)} points from {len(self.deployments)} {_KIND_WORDS[self.kind]} "
                f"deployments, ISL/OSL {workload}, concurrency {_span(self.frame['concurrency'])}: {origin}.")
        if self.listed_not_swept:
            text += f" Listed in the parameters but not in the results: {', '.join(self.listed_not_swept)}."
        if self.swept_not_listed:
            text += f" In the results but not listed, so left out: {', '.join(self.swept_not_listed)}."
        return text


def _span(values: pd.Series) -> str:
    lo, hi = int(values.min()), int(values.max())
    return f"{lo:,}" if lo == hi else f"{lo:,} to {hi:,}"


def empty_frame(columns: Sequence[str] = SWEEP_COLUMNS) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=object) for c in columns})


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
        note = (f"This scenario has no {_KIND_WORDS[kind]} sweep (`{kind}_results` is empty), so this "
                "analysis is skipped.")
        return Sweep(kind, (), empty_frame(), note)
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


def sweep_summary(sweep: Sweep) -> pd.DataFrame:
    """One row per deployment: its GPUs, the concurrencies swept and its best total tokens/s per GPU."""
    columns = ["deployment", "gpus", "points", "concurrency", "best_tps_per_gpu", "at_concurrency"]
    if not sweep.available:
        return empty_frame(columns)
    rows = []
    for dep in sweep.deployments:
        g = sweep.frame[sweep.frame["deployment"] == dep]
        top = g.loc[g["tps_per_gpu"].astype(float).idxmax()]
        rows.append({"deployment": dep, "gpus": int(g["gpus_total"].iloc[0]), "points": len(g),
                     "concurrency": _span(g["concurrency"]), "best_tps_per_gpu": float(top["tps_per_gpu"]),
                     "at_concurrency": int(top["concurrency"])})
    return pd.DataFrame(rows, columns=columns)


# ------------------------------------------------------------------------------------------ who wins where


def best_table(sweep: Sweep, metric: str = "tps_per_gpu") -> pd.DataFrame:
    """One row per concurrency: the best deployment (:func:`pdtune.frontier.best_per_concurrency`), the
    runner-up and the best's margin over it (``best / runner_up - 1``)."""
    columns = ["concurrency", "best", metric, "runner_up", f"runner_up_{metric}", "margin"]
    if not sweep.available:
        return empty_frame(columns)
    best = best_per_concurrency(sweep.frame, metric)
    rows = []
    for row in best.itertuples(index=False):
        c = row.concurrency
        f = sweep.frame
        others = f[(f["concurrency"] == c) & (f["deployment"] != row.deployment)]
        second = others.sort_values(metric, ascending=False, kind="stable").head(1)
        value = float(getattr(row, metric))
        runner, runner_value = (second["deployment"].iloc[0], float(second[metric].iloc[0])) if len(second) \
            else (None, math.nan)
        rows.append({"concurrency": int(c), "best": row.deployment, metric: value, "runner_up": runner,
                     f"runner_up_{metric}": runner_value,
                     "margin": value / runner_value - 1 if runner_value > 0 else math.nan})
    return pd.DataFrame(rows, columns=columns)


def winner_runs(best: pd.DataFrame) -> pd.DataFrame:
    """Consecutive concurrencies won by the same deployment, merged: one line per run of wins."""
    return frontier_runs(best, "best")


@dataclass(frozen=True)
class Claim:
    """One of the article's findings about an isolated sweep.

    ``where`` names the concurrencies the claim is about: ``low`` (the two lowest swept), ``rising`` (every
    swept concurrency above those two), ``high`` (the two highest swept) or ``at`` (exactly ``at``).
    """

    kind: str
    text: str
    deployment: str  # e.g. "TP4DP2+EP", "TEP8+MTP"
    where: str
    at: tuple[int, ...] = ()


#: The article's prefill findings (figure 1: total tokens/s per GPU against concurrency, ISL/OSL 8192/2).
PREFILL_CLAIMS: tuple[Claim, ...] = (
    Claim("prefill", "TP4DP2+EP is best at low concurrency", "TP4DP2+EP", "low"),
    Claim("prefill", "TP2DP4+EP takes over as concurrency rises", "TP2DP4+EP", "rising"),
)

#: The article's decode findings (figure 2, ISL/OSL 1/1000, MTP with 3 speculative tokens).
DECODE_CLAIMS: tuple[Claim, ...] = (
    Claim("decode", "TEP8 with MTP is best at low concurrency", "TEP8+MTP", "low"),
    Claim("decode", "TEP8 (without MTP) is best at 512 and 1024", "TEP8", "at", (512, 1024)),
    Claim("decode", "TP4DP4+EP is best at high concurrency", "TP4DP4+EP", "high"),
)

FINDING_COLUMNS = ("article_claim", "claimed", "concurrencies", "computed_best", "wins", "verdict")


def _layout_key(label: str) -> tuple[Topology, bool] | None:
    """(layout, MTP) of a single-engine deployment label, or None when it is not a topology name."""
    text = str(label).strip()
    mtp = text.upper().endswith("+MTP")
    if mtp:
        text = text[: -len("+MTP")]
    try:
        return parse_topology(text), mtp
    except InputError:
        return None


def _region(claim: Claim, swept: list[int]) -> list[int]:
    if claim.where == "low":
        return swept[:2]
    if claim.where == "rising":
        return swept[2:]
    if claim.where == "high":
        return swept[-2:]
    if claim.where == "at":
        return [c for c in swept if c in claim.at]
    raise InputError("findings", "where", f"unknown region {claim.where!r}")


def _concurrency_list(values: Sequence[int], grid: Sequence[int] | None = None) -> str:
    """``1, 2`` or ``4–32, 512, 1,024–1,536``: runs of consecutive points of ``grid`` (the swept
    concurrencies, default ``values`` itself) joined by an en dash."""
    if not values:
        return MISSING
    order = sorted(set(grid if grid is not None else values))
    position = {c: i for i, c in enumerate(order)}
    chosen = sorted(set(values), key=lambda c: position.get(c, -1))
    runs: list[list[int]] = []
    for c in chosen:
        if runs and position.get(c) == position.get(runs[-1][-1], -2) + 1:
            runs[-1].append(c)
        else:
            runs.append([c])
    parts = []
    for run in runs:
        if len(run) == 1:
            parts.append(f"{run[0]:,}")
        elif len(run) == 2:
            parts.append(f"{run[0]:,}, {run[1]:,}")
        else:
            parts.append(f"{run[0]:,}–{run[-1]:,}")
    return ", ".join(parts)


def findings(sweep: Sweep, claims: Sequence[Claim], best: pd.DataFrame | None = None) -> pd.DataFrame:
    """Each claim beside what this sweep computes, with a verdict.

    ``computed_best`` lists the winners in the claim's concurrencies; ``verdict`` is ``agrees`` (the
    claimed deployment wins every one of them), ``partly`` (some), ``disagrees`` (none), ``not swept``
    (the claimed deployment, or the claim's concurrencies, are not in the data) or ``no data``.
    """
    best = best_table(sweep) if best is None else best
    rows = []
    swept = sorted(int(c) for c in best["concurrency"]) if len(best) else []
    keys = {label: _layout_key(label) for label in sweep.deployments}
    for claim in claims:
        row: dict[str, Any] = {"article_claim": claim.text, "claimed": claim.deployment}
        if not sweep.available:
            rows.append({**row, "concurrencies": MISSING, "computed_best": MISSING, "wins": MISSING,
                         "verdict": "no data"})
            continue
        region = _region(claim, swept)
        wanted = _layout_key(claim.deployment)
        in_data = [label for label, key in keys.items() if key is not None and key == wanted]
        winners = best.set_index("concurrency").loc[region, "best"] if region else pd.Series(dtype=object)
        described = "; ".join(
            f"{w} at {_concurrency_list([int(c) for c in winners.index[winners == w]], swept)}"
            for w in dict.fromkeys(winners))
        row.update(concurrencies=_concurrency_list(region, swept), computed_best=described or MISSING)
        if not region or not in_data:
            row.update(wins=MISSING, verdict="not swept")
        else:
            wins = int(winners.isin(in_data).sum())
            verdict = "agrees" if wins == len(region) else "partly" if wins else "disagrees"
            row.update(wins=f"{wins} of {len(region)}", verdict=verdict)
        rows.append(row)
    return pd.DataFrame(rows, columns=list(FINDING_COLUMNS))


def finding_sentence(row: pd.Series | dict[str, Any]) -> str:
    """The article's claim and this sweep's answer in one sentence, for the prose."""
    get = row.get
    verdict = get("verdict")
    if verdict == "no data":
        return f"The article: {get('article_claim')}. This scenario has no such sweep to check it against."
    if verdict == "not swept":
        return (f"The article: {get('article_claim')}. This sweep cannot say: {get('claimed')} or those "
                f"concurrencies are not in it (best there: {get('computed_best')}).")
    phrase = {"agrees": "agrees", "partly": "agrees only in part", "disagrees": "disagrees"}[verdict]
    return (f"The article: {get('article_claim')}. This sweep: {get('computed_best')}; "
            f"the data {phrase} ({get('wins')} concurrencies).")


def findings_sentences(table: pd.DataFrame) -> list[str]:
    return [finding_sentence(r) for r in table.to_dict("records")]


# ------------------------------------------------------------------------------------------ prefill


def prefill_capacity(sweep: Sweep) -> pd.DataFrame:
    """Requests/s each prefill deployment delivers at each concurrency: ``B * 1000 / TTFT p50``.

    This is the ``P`` that :func:`pdtune.frontier.rate_match` multiplies by the number of prefill workers.
    Columns: deployment, gpus, concurrency, ttft_ms_p50, requests_per_s, requests_per_s_per_gpu.
    """
    columns = ["deployment", "gpus", "concurrency", "ttft_ms_p50", "requests_per_s", "requests_per_s_per_gpu"]
    if not sweep.available:
        return empty_frame(columns)
    f = sweep.frame
    rate = f["concurrency"].astype(float) * 1000.0 / f["ttft_ms_p50"].astype(float)
    return pd.DataFrame({
        "deployment": f["deployment"], "gpus": f["gpus_total"].astype(int), "concurrency": f["concurrency"],
        "ttft_ms_p50": f["ttft_ms_p50"], "requests_per_s": rate,
        "requests_per_s_per_gpu": rate / f["gpus_total"].astype(float),
    })[columns]


def peak_capacity(sweep: Sweep) -> pd.DataFrame:
    """Each prefill deployment's largest requests/s over its sweep, and where it gets there."""
    capacity = prefill_capacity(sweep)
    columns = ["deployment", "gpus", "concurrency", "requests_per_s", "requests_per_s_per_gpu", "ttft_ms_p50"]
    if len(capacity) == 0:
        return empty_frame(columns)
    idx = capacity.groupby("deployment", sort=False)["requests_per_s"].idxmax()
    out = capacity.loc[idx, columns].sort_values("requests_per_s_per_gpu", ascending=False, kind="stable")
    return out.reset_index(drop=True)


def busy_share(sweep: Sweep, concurrencies: Sequence[int] = (1, 2, 4)) -> pd.DataFrame:
    """Share of a deployment's GPUs that have a request to work on when ``C`` requests run at once.

    An engine of ``DP`` data-parallel ranks and ``PP`` pipeline stages has ``DP x PP`` independent slots
    (a rank's batch, a stage's micro-batch); a TP group works on one slot together. With fewer requests than
    slots the rest idle: ``min(C, DP x PP) / (DP x PP)``. This is why wide TP wins a prefill sweep's lowest
    concurrencies and DP wins once every rank has a request.
    """
    columns = ["deployment", "tp", "dp", "pp", "gpus", *[f"busy_at_{c}" for c in concurrencies]]
    if not sweep.available:
        return empty_frame(columns)
    rows = []
    for dep in sweep.deployments:
        key = _layout_key(dep)
        if key is None:
            continue
        t = key[0]
        slots = t.dp * t.pp
        rows.append({"deployment": dep, "tp": t.tp, "dp": t.dp, "pp": t.pp, "gpus": t.gpus,
                     **{f"busy_at_{c}": min(c, slots) / slots for c in concurrencies}})
    return pd.DataFrame(rows, columns=columns)


def engines_needed(peak: pd.DataFrame, requests_per_s: float) -> pd.DataFrame:
    """Prefill engines of each deployment that deliver ``requests_per_s``: ``x = ceil(R / P)`` with ``P``
    the deployment's peak rate (:func:`peak_capacity`), and the GPUs that takes."""
    columns = ["deployment", "requests_per_s", "engines", "gpus", "delivered_requests_per_s"]
    if len(peak) == 0:
        return empty_frame(columns)
    engines = np.ceil(requests_per_s / peak["requests_per_s"].astype(float)).astype(int)
    out = pd.DataFrame({"deployment": peak["deployment"], "requests_per_s": peak["requests_per_s"],
                        "engines": engines, "gpus": engines * peak["gpus"].astype(int),
                        "delivered_requests_per_s": engines * peak["requests_per_s"].astype(float)})
    return out.sort_values(["gpus", "engines"], kind="stable").reset_index(drop=True)[columns]


def first_row(frame: pd.DataFrame) -> dict[str, Any]:
    """The first row of ``frame`` as a dict, or an empty dict: what a chapter glues from a ranking."""
    return frame.iloc[0].to_dict() if len(frame) else {}


@dataclass(frozen=True)
class PrefillCeiling:
    """The compute roofline of prefill: no layout can push more tokens/s through one GPU than this."""

    model: str
    gpu: str
    isl: int
    seconds_per_token: dict[str, float]  # per kind of work, at the GPU's dense peak
    best_tps_per_gpu: float | None  # the sweep's best total tokens/s per GPU (None without a sweep)

    @property
    def ceiling_tps_per_gpu(self) -> float:
        return 1.0 / sum(self.seconds_per_token.values())

    @property
    def share(self) -> float | None:
        """The sweep's best as a fraction of the ceiling."""
        return None if self.best_tps_per_gpu is None else self.best_tps_per_gpu / self.ceiling_tps_per_gpu

    def frame(self) -> pd.DataFrame:
        total = sum(self.seconds_per_token.values())
        return pd.DataFrame([{"work": k, "us_per_token": v * 1e6, "share": v / total}
                             for k, v in self.seconds_per_token.items()])


def prefill_ceiling(spec: ModelSpec, gpu: GpuSpec, isl: int, sweep: Sweep | None = None) -> PrefillCeiling:
    """Seconds of one GPU's dense peak per prompt token, by kind of matmul; the ceiling is their inverse.

    A prompt token multiplies through the dense layers (``2 N_dense`` FLOPs), ``k`` experts in each MoE
    layer (``2 k N_expert``) and attends on average to ``ISL / 2`` earlier tokens in every attention layer;
    the lm_head runs once per request. Each kind runs at the peak of its math format
    (:meth:`pdtune.gpus.GpuSpec.peak_flops`): experts in NVFP4 on a Blackwell, the rest in BF16.
    """
    c = model_costs(spec)
    moe_layers = c.num_moe_layers
    bf16 = gpu.peak_flops("bf16")
    experts = moe_layers * c.experts_per_token * c.expert_params if c.num_experts else 0
    parts = {
        "dense layers": 2 * c.dense_params / gpu.peak_flops(c.dense_dtype),
        "routed experts": 2 * experts / gpu.peak_flops(c.expert_dtype),
        "attention (pairs)": c.attention_layers * c.attn_pair_flops_prefill * (isl + 1) / 2 / bf16,
        "lm_head (once per prompt)": 2 * c.lm_head_params / isl / bf16,
    }
    if c.recurrent_layers:
        parts["linear attention (GDN/Mamba)"] = c.recurrent_layers * c.recurrent_flops_prefill / bf16
    parts = {k: v for k, v in parts.items() if v > 0}
    best = None
    if sweep is not None and sweep.available:
        best = float(sweep.frame["tps_per_gpu"].max())
    return PrefillCeiling(spec.name, gpu.name, isl, parts, best)


# ------------------------------------------------------------------------------------------ decode


def flattens_at(concurrency: Sequence[float], tps: Sequence[float], tolerance: float = 0.01) -> float:
    """The first swept concurrency after which a curve gains less than ``tolerance`` (NaN if it never
    flattens inside the sweep): where requests start to wait instead of running."""
    points = sorted(zip(concurrency, tps, strict=True))
    for i, (c, y) in enumerate(points[:-1]):
        later = max(v for _, v in points[i + 1:])
        if later <= y * (1 + tolerance):
            return float(c)
    return math.nan


def kv_room(
    sweep: Sweep,
    spec: ModelSpec,
    *,
    gpu_memory_gib: float,
    gpu_memory_utilization: float,
    non_torch_gib: float,
    activation_peak_gib: float,
    cudagraph_estimate_gib: float,
    kv_cache_dtype: str,
    vllm: str,
    num_speculative_tokens: int,
    isl: int,
    osl: int,
) -> pd.DataFrame:
    """Requests each swept decode deployment holds, from :func:`pdtune.tables.topology_capacity` (chapter
    4's accounting), beside where its curve flattens.

    ``room`` is vLLM's max concurrency of one engine times its DP engines at the sweep's own workload
    (its ISL + OSL tokens per request); ``room_at_workload`` the same at ``isl + osl`` (the disaggregated
    workload). ``first_swept_above_room`` is the smallest swept concurrency the KV cache cannot hold.
    """
    columns = ["deployment", "layout", "mtp", "gpus", "kv_cache_gib", "mib_per_request_rank", "room",
               "room_per_gpu", "room_at_workload", "first_swept_above_room", "flattens_at", "note"]
    if not sweep.available:
        return empty_frame(columns)
    sweep_isl, sweep_osl = sweep.workload or (isl, osl)
    layouts = list(dict.fromkeys(sweep.frame["layout"]))
    common = dict(gpu_memory_gib=gpu_memory_gib, gpu_memory_utilization=gpu_memory_utilization,
                  non_torch_gib=non_torch_gib, activation_peak_gib=activation_peak_gib,
                  cudagraph_estimate_gib=cudagraph_estimate_gib, kv_cache_dtype=kv_cache_dtype, vllm=vllm)
    rows = []
    for (layout, mtp), group in sweep.frame.groupby(["layout", "mtp"], sort=False):
        k = int(pd.to_numeric(group["mtp_tokens"], errors="coerce").fillna(0).max()) if mtp else 0
        k = k or (num_speculative_tokens if mtp else 0)
        row: dict[str, Any] = {"deployment": group["deployment"].iloc[0], "layout": layout, "mtp": bool(mtp),
                               "gpus": int(group["gpus_total"].iloc[0])}
        try:
            here, there = (tables.topology_capacity(spec, [layout], max_model_len=n, num_speculative_tokens=k,
                                                    **common)
                           for n in (sweep_isl + sweep_osl, isl + osl))
        except InputError as err:
            rows.append({**row, "note": err.message})
            continue
        mine, theirs = (t[t["mtp"] == bool(k)].iloc[0] for t in (here, there))
        curve = group.sort_values("concurrency")
        room = mine.get("requests_per_deployment", math.nan)
        swept = curve["concurrency"]
        above = swept[swept > room] if pd.notna(room) else swept[:0]
        rows.append({
            **row, "kv_cache_gib": mine.get("kv_cache_gib", math.nan),
            "mib_per_request_rank": mine.get("mib_per_request_rank", math.nan), "room": room,
            "room_per_gpu": mine.get("requests_per_gpu", math.nan),
            "room_at_workload": theirs.get("requests_per_deployment", math.nan),
            "first_swept_above_room": float(above.iloc[0]) if len(above) else math.nan,
            "flattens_at": flattens_at(swept.astype(float), curve["tps_per_gpu"].astype(float)),
            "note": mine.get("note", "") or "",
        })
    out = pd.DataFrame(rows, columns=columns)
    rank = out["layout"].map({name: i for i, name in enumerate(layouts)}) * 2 + out["mtp"].astype(int)
    return out.iloc[np.argsort(rank.to_numpy(), kind="stable")].reset_index(drop=True)


def high_end(sweep: Sweep, room: pd.DataFrame, best: pd.DataFrame) -> pd.DataFrame:
    """Every deployment at the highest swept concurrency, fastest first, with its KV room: who holds all
    the requests and who makes them wait. ``won_at`` lists the concurrencies it wins anywhere in the sweep."""
    columns = ["deployment", "concurrency", "tps_per_gpu", "room", "holds_all", "flattens_at", "won_at"]
    if not sweep.available or len(best) == 0:
        return empty_frame(columns)
    top = int(best["concurrency"].max())
    at = sweep.frame[sweep.frame["concurrency"] == top][["deployment", "concurrency", "tps_per_gpu"]]
    merged = at.merge(room[["deployment", "room", "flattens_at"]], on="deployment", how="left") if len(room) \
        else at.assign(room=math.nan, flattens_at=math.nan)
    grid = [int(c) for c in best["concurrency"]]
    won = best.groupby("best")["concurrency"].apply(lambda c: _concurrency_list([int(v) for v in c], grid))
    merged["holds_all"] = merged["room"] >= top
    merged["won_at"] = merged["deployment"].map(won).fillna(MISSING)
    merged = merged.sort_values("tps_per_gpu", ascending=False, kind="stable").reset_index(drop=True)
    return merged[columns]


def high_end_sentence(table: pd.DataFrame) -> str:
    """Chapter 6's "why": the high-concurrency winner's room beside the earlier winners that run out of it."""
    if len(table) == 0:
        return "There is no decode sweep to explain."
    win = table.iloc[0]
    c = int(win["concurrency"])
    room = "an unknown number of" if pd.isna(win["room"]) else f"{win['room']:,.0f}"
    text = (f"At concurrency {c:,} the best is {win['deployment']} ({win['tps_per_gpu']:,.0f} tokens/s "
            f"per GPU); its KV cache holds {room} requests")
    text += ", so none of them waits." if win["holds_all"] else ", fewer than that: some requests wait."
    starved = table[(table.index > 0) & (table["won_at"] != MISSING) & ~table["holds_all"].astype(bool)]
    for row in starved.itertuples(index=False):
        flat = ("" if pd.isna(row.flattens_at)
                else f" and its curve is flat from concurrency {row.flattens_at:,.0f} on")
        text += (f" {row.deployment}, best at {row.won_at}, holds only {row.room:,.0f} requests{flat}, "
                 f"so it ends at {row.tps_per_gpu:,.0f}.")
    return text


def room_change(before: pd.DataFrame, after: pd.DataFrame, column: str = "room_at_workload") -> pd.DataFrame:
    """Two :func:`kv_room` frames of one sweep side by side: requests held before and after a change."""
    columns = ["deployment", "before", "after", "gained"]
    if len(before) == 0:
        return empty_frame(columns)
    merged = before[["deployment", column]].merge(after[["deployment", column]], on="deployment",
                                                   suffixes=("_before", "_after"))
    out = pd.DataFrame({"deployment": merged["deployment"], "before": merged[f"{column}_before"],
                        "after": merged[f"{column}_after"]})
    return out.assign(gained=out["after"] - out["before"])[columns]


def mtp_room_sentence(room: pd.DataFrame, layouts: Sequence[str]) -> str:
    """What MTP costs in KV room for each of ``layouts``: MiB per request on one rank, requests held."""
    parts = []
    for layout in layouts:
        both = room[room["layout"] == layout].dropna(subset=["room"]) if len(room) else room
        if len(both) != 2:
            continue
        off, on = both[~both["mtp"].astype(bool)].iloc[0], both[both["mtp"].astype(bool)].iloc[0]
        parts.append(f"{layout} needs {on['mib_per_request_rank']:,.1f} MiB per request on one rank with MTP "
                     f"instead of {off['mib_per_request_rank']:,.1f}, so it holds {on['room']:,.0f} requests "
                     f"instead of {off['room']:,.0f}")
    if not parts:
        return "No layout was swept both with and without MTP."
    return "; ".join(parts) + "."


def mtp_effect(sweep: Sweep, room: pd.DataFrame) -> pd.DataFrame:
    """Per layout swept with and without MTP: MTP's gain (``tps with / tps without``) while the MTP
    variant's KV room holds every request, and once it does not.

    Columns: layout, room_with_mtp, below (concurrencies <= that room), wins_below ("k of n" where MTP is
    ahead), median_gain_below, above, wins_above, median_gain_above.
    """
    columns = ["layout", "room_with_mtp", "below", "wins_below", "median_gain_below", "above", "wins_above",
               "median_gain_above"]
    if not sweep.available:
        return empty_frame(columns)
    rows = []
    for layout, group in sweep.frame.groupby("layout", sort=False):
        if group["mtp"].nunique() < 2:
            continue
        wide = group.pivot_table(index="concurrency", columns="mtp", values="tps_per_gpu").dropna()
        gain = wide[True] / wide[False]
        mine = room[(room["layout"] == layout) & room["mtp"]] if len(room) else room
        cap = float(mine["room"].iloc[0]) if len(mine) and pd.notna(mine["room"].iloc[0]) else math.inf
        below, above = gain[gain.index <= cap], gain[gain.index > cap]

        grid = [int(c) for c in gain.index]

        def part(g: pd.Series) -> tuple[str, str, float]:
            if len(g) == 0:
                return MISSING, MISSING, math.nan
            return (_concurrency_list([int(c) for c in g.index], grid), f"{int((g > 1).sum())} of {len(g)}",
                    float(g.median()))

        b, wb, gb = part(below)
        a, wa, ga = part(above)
        rows.append({"layout": layout, "room_with_mtp": cap if math.isfinite(cap) else math.nan, "below": b,
                     "wins_below": wb, "median_gain_below": gb, "above": a, "wins_above": wa,
                     "median_gain_above": ga})
    return pd.DataFrame(rows, columns=columns)


def mtp_verdict(effect: pd.DataFrame) -> str:
    """Does the data say "MTP helps a lot while the KV cache has room"? One sentence with the medians."""
    if len(effect) == 0:
        return "No layout was swept both with and without MTP, so the data cannot say whether MTP helps."
    below = effect["median_gain_below"].dropna()
    above = effect["median_gain_above"].dropna()
    parts = []
    if len(below):
        parts.append(f"while the KV cache holds every request, MTP multiplies throughput per GPU by a median "
                     f"{statistics.median(below):.2f} across the {len(below)} layouts")
    if len(above):
        parts.append(f"once requests wait for KV room, by {statistics.median(above):.2f}")
    helps = bool(len(below)) and statistics.median(below) > 1
    if len(above):
        helps = helps and statistics.median(above) < statistics.median(below)
    verdict = "agrees with the article" if helps else "does not show the article's pattern"
    return "In this sweep, " + "; ".join(parts) + f": the data {verdict}."


def experts_touched(spec: ModelSpec, batch_sizes: Iterable[int]) -> pd.DataFrame:
    """Experts a step of ``B`` tokens touches in one MoE layer, ``E (1 - (1 - k/E)^B)`` (each token picks
    ``k`` of ``E`` uniformly at random), and the bytes of routed experts one step streams from HBM."""
    columns = ["tokens", "experts_touched", "share", "expert_gib_per_step", "expert_mib_per_token"]
    c = model_costs(spec)
    if not c.num_experts:
        return empty_frame(columns)
    e, k = c.num_experts, c.experts_per_token
    rows = []
    for b in batch_sizes:
        touched = e * -math.expm1(b * math.log1p(-k / e))
        gib = touched * c.expert_bytes * c.num_moe_layers / GiB
        rows.append({"tokens": int(b), "experts_touched": touched, "share": touched / e,
                     "expert_gib_per_step": gib, "expert_mib_per_token": gib * 1024 / b})
    return pd.DataFrame(rows, columns=columns)


def tokens_to_touch(spec: ModelSpec, share: float) -> int | None:
    """The fewest tokens in one step that touch ``share`` of a MoE layer's experts on average:
    ``ceil(ln(1 - share) / ln(1 - k/E))``. None for a model without routed experts."""
    c = model_costs(spec)
    if not c.num_experts or not 0 < share < 1:
        return None
    return math.ceil(math.log1p(-share) / math.log1p(-c.experts_per_token / c.num_experts))


def winners(best: pd.DataFrame) -> list[str]:
    """The deployments that win somewhere in a best table, in order of first win."""
    return list(dict.fromkeys(best["best"])) if len(best) else []


def end_layouts(best: pd.DataFrame, topologies: Sequence[str]) -> list[str]:
    """The layouts (without ``+MTP``) that win the lowest and the highest concurrency; without a sweep, the
    reference layout of :func:`pdtune.tables.reference_topology`."""
    if len(best) == 0:
        return [tables.reference_topology(list(topologies))]
    ends = [best["best"].iloc[0], best["best"].iloc[-1]]
    return list(dict.fromkeys(str(e).removesuffix("+MTP") for e in ends))


def decode_roofline(
    spec: ModelSpec,
    gpu: GpuSpec,
    topologies: Sequence[str],
    requests: Iterable[int],
    *,
    isl: int,
    osl: int,
    mtp_tokens: int = 0,
    acceptance: float = 0.25,
    kv_cache_dtype: str = "fp8",
    vllm: str = "0.26.1",
    gpu_memory_utilization: float = 0.92,
) -> pd.DataFrame:
    """A sketch of one decode step of each topology (without and, when ``mtp_tokens`` > 0 and the model
    has an MTP module, with MTP) at ``B`` running requests per engine, spread over its DP ranks.

    From :class:`pdtune.perfmodel.engine.Engine`: the roofline step time (all FLOPs at peak or all bytes at
    full HBM bandwidth, whichever is longer), and the modeled step time (the calibrated efficiencies, the
    communication and a fixed overhead per step). A step runs ``B (1 + K)`` tokens and keeps
    ``B (1 + K A)``, which gives tokens/s per GPU. ``fits`` says whether ``B`` requests fit the engine's KV
    cache at ``isl + osl`` tokens. A topology the model does not fit on the GPU is left out.
    """
    columns = ["deployment", "requests", "tokens_per_step", "experts_touched", "roofline_ms", "modeled_ms",
               "roofline_tps_per_gpu", "modeled_tps_per_gpu", "fits"]
    ks = [0] + ([mtp_tokens] if mtp_tokens and spec.num_mtp_layers else [])
    config = EngineConfig(gpu_memory_utilization=gpu_memory_utilization, kv_cache_dtype=kv_cache_dtype,
                          vllm=vllm)
    context = isl + osl / 2
    counts = list(requests)
    rows = []
    for name in topologies:
        layout = parse_topology(name, "decode topology")
        for k in ks:
            try:
                engine = build_engine(spec, gpu, layout, isl=isl, osl=osl, mtp_tokens=k, config=config)
            except InputError:
                continue
            c = engine.costs
            q = 1 + k
            for n in counts:
                per_rank = n / layout.dp
                batch = Batch(tokens=per_rank * q, seqs=per_rank, attn_pairs=per_rank * q * context,
                              kv_tokens_read=per_rank * context, logits=per_rank * q, state_writes=q,
                              ep_tokens=n * q, draft_passes=k)
                roof = engine.roofline_time(batch)
                modeled = engine.step_time(batch, DEFAULT_EFFICIENCY).total
                kept = n * (1 + k * acceptance)
                share = math.log1p(-c.experts_per_token / c.num_experts) if c.num_experts else 0.0
                touched = c.num_experts * -math.expm1(n * q * share)
                rows.append({"deployment": name + ("+MTP" if k else ""), "requests": int(n),
                             "tokens_per_step": n * q, "experts_touched": touched, "roofline_ms": roof * 1e3,
                             "modeled_ms": modeled * 1e3, "roofline_tps_per_gpu": kept / roof / layout.gpus,
                             "modeled_tps_per_gpu": kept / modeled / layout.gpus,
                             "fits": n <= engine.capacity})
    return pd.DataFrame(rows, columns=columns)


def roofline_sentence(frame: pd.DataFrame) -> str:
    """The sketch in words: each deployment's roofline and modeled tokens/s per GPU at the fewest requests."""
    if len(frame) == 0:
        return "No decode layout of the parameters fits this model on this GPU."
    n = int(frame["requests"].min())
    at = frame[frame["requests"] == n]
    parts = [f"{r.deployment} at most {r.roofline_tps_per_gpu:,.1f} (modeled {r.modeled_tps_per_gpu:,.1f})"
             for r in at.itertuples(index=False)]
    what = "request" if n == 1 else "requests"
    return f"With {n:,} {what} per engine, tokens/s per GPU: " + "; ".join(parts) + "."


def room_sentence(room: pd.DataFrame, deployments: Sequence[str], tokens: int) -> str:
    """How many requests of ``tokens`` tokens each named decode deployment holds (chapter 7's workload)."""
    mine = room[room["deployment"].isin(list(deployments))].dropna(subset=["room_at_workload"]) if len(room) \
        else room
    if len(mine) == 0:
        return "There is no decode sweep whose KV room could be computed."
    parts = [f"{r.deployment} {r.room_at_workload:,.0f} ({r.room_at_workload / r.gpus:,.1f} per GPU)"
             for r in mine.itertuples(index=False)]
    return f"At {tokens:,} tokens per request the engines hold: " + "; ".join(parts) + "."


# ------------------------------------------------------------------------------------------ the frontier


@dataclass(frozen=True, eq=False)
class Gate:
    """The accuracy gate's outcome for the chapter: the rows kept and a sentence saying what happened."""

    kept: pd.DataFrame
    excluded: tuple[str, ...]
    unmeasured: tuple[str, ...]
    measured: tuple[str, ...]
    threshold: float
    sentence: str


def gate_summary(sweep: Sweep, threshold: float) -> Gate:
    """:func:`pdtune.frontier.accuracy_gate` on a disaggregated sweep, and the sentence the chapter prints."""
    if not sweep.available:
        return Gate(sweep.frame, (), (), (), threshold, sweep.note)
    result = accuracy_gate(sweep.frame, threshold)
    excluded = tuple(result.excluded["deployment"])
    unmeasured = tuple(result.unmeasured)
    measured = tuple(d for d in sweep.deployments if d not in unmeasured)
    pct = f"{threshold:.0%}"
    if excluded:
        lows = ", ".join(f"{r.deployment} ({r.accuracy:.1%})" for r in result.excluded.itertuples())
        text = f"The gate at {pct} excludes {len(excluded)} of {len(sweep.deployments)} deployments: {lows}."
    else:
        text = f"The gate at {pct} excludes none of the {len(sweep.deployments)} deployments."
    if measured and not excluded:
        text += f" All {len(measured)} with a recorded accuracy pass."
    if unmeasured:
        text += (f" {len(unmeasured)} record no accuracy and are kept unchecked: "
                 f"{', '.join(unmeasured)}.")
    kept = label(result.kept) if len(result.kept) else result.kept
    return Gate(kept, excluded, unmeasured, measured, threshold, text)


def accuracy_table(sweep: Sweep, threshold: float) -> pd.DataFrame:
    """Per deployment: its lowest recorded accuracy (NaN when none), its points, and the gate's verdict."""
    columns = ["deployment", "gpus", "points", "accuracy", "verdict"]
    if not sweep.available:
        return empty_frame(columns)
    f = sweep.frame
    acc = pd.to_numeric(f["accuracy"], errors="coerce")
    rows = []
    for dep in sweep.deployments:
        mine = acc[f["deployment"] == dep]
        low = float(mine.min()) if mine.notna().any() else math.nan
        verdict = "kept, not measured" if math.isnan(low) else "kept" if low >= threshold else "excluded"
        rows.append({"deployment": dep, "gpus": int(f.loc[f["deployment"] == dep, "gpus_total"].iloc[0]),
                     "points": int(len(mine)), "accuracy": low, "verdict": verdict})
    return pd.DataFrame(rows, columns=columns)


def envelope_with_status(pred_env: pd.DataFrame, measured: Sweep) -> pd.DataFrame:
    """The predicted envelope's points with whether their deployment was part of the disaggregated sweep."""
    columns = ["deployment", "concurrency", "tps_per_user", "tps_per_gpu", "bottleneck", "decode_concurrency",
               "decode_room", "in_sweep"]
    if len(pred_env) == 0:
        return empty_frame(columns)
    swept = set(measured.frame["deployment"].astype(str)) if measured.available else set()
    out = pred_env.assign(deployment=pred_env["deployment"].astype(str),
                          bottleneck=pred_env["bottleneck"].astype(str))
    out["in_sweep"] = out["deployment"].isin(swept)
    return out[[c for c in columns if c in out.columns]].reset_index(drop=True)


def envelope(df: pd.DataFrame) -> pd.DataFrame:
    """:func:`pdtune.frontier.upper_envelope` (columns with provenance first), or an empty frame."""
    if len(df) == 0:
        return empty_frame(["deployment", "concurrency", "tps_per_user", "tps_per_gpu"])
    return upper_envelope(df)


@dataclass(frozen=True)
class FrontierEnds:
    """The envelope's two ends beside the article's headline numbers."""

    throughput_deployment: str | None
    throughput_concurrency: float | None
    tps_per_gpu: float | None
    latency_deployment: str | None
    latency_concurrency: float | None
    tps_per_user: float | None
    article_tps_per_gpu: float
    article_tps_per_user: float

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame([
            {"end": "throughput: most total tokens/s per GPU", "article": self.article_tps_per_gpu,
             "this_data": self.tps_per_gpu, "deployment": self.throughput_deployment,
             "concurrency": self.throughput_concurrency},
            {"end": "latency: most output tokens/s per user", "article": self.article_tps_per_user,
             "this_data": self.tps_per_user, "deployment": self.latency_deployment,
             "concurrency": self.latency_concurrency},
        ])


def frontier_ends(env: pd.DataFrame) -> FrontierEnds:
    from pdtune import article

    c = article.constants()
    if len(env) == 0:
        return FrontierEnds(None, None, None, None, None, None,
                            c["headline_tps_per_gpu"], c["headline_tps_per_user"])
    top = env.loc[env["tps_per_gpu"].astype(float).idxmax()]
    fast = env.loc[env["tps_per_user"].astype(float).idxmax()]
    return FrontierEnds(str(top["deployment"]), float(top["concurrency"]), float(top["tps_per_gpu"]),
                        str(fast["deployment"]), float(fast["concurrency"]), float(fast["tps_per_user"]),
                        c["headline_tps_per_gpu"], c["headline_tps_per_user"])


def pick_sentence(pick: Any, unit: str = "tokens/s per user") -> str:
    """:class:`pdtune.frontier.SlaPick` as one sentence."""
    if pick is None:
        return "There is no disaggregated sweep to pick from."
    floor = f"{pick.minimum:,.0f}" if pick.minimum >= 10 else f"{pick.minimum:g}"
    if not pick.met:
        best = "no data" if math.isnan(pick.best_available) else f"{pick.best_available:,.1f}"
        return f"No point reaches {floor} {unit}; the best in the data is {best}."
    return (f"{pick.deployment} at concurrency {pick.concurrency:,.0f}: {pick.tps_per_gpu:,.0f} total "
            f"tokens/s per GPU at {pick.tps_per_user:,.1f} tokens/s per user.")


def reverse_sentence(table: pd.DataFrame, fraction: float = 0.5) -> str:
    """One row of :func:`reverse_sla` in words."""
    row = table[table["fraction_of_best"] == fraction]
    if len(row) == 0 or pd.isna(row["deployment"].iloc[0]):
        return "There is no disaggregated sweep to pick from."
    r = row.iloc[0]
    return (f"keeping at least {fraction:.0%} of the best throughput ({r['min_tps_per_gpu']:,.0f} tokens/s "
            f"per GPU), the fastest service is {r['deployment']} at concurrency {r['concurrency']:,.0f}: "
            f"{r['tps_per_user']:,.1f} tokens/s per user at {r['tps_per_gpu']:,.0f} tokens/s per GPU.")


@dataclass(frozen=True, eq=False)
class Prediction:
    """Rate matching from the isolated sweeps beside the disaggregated sweep (chapter 7)."""

    rows: pd.DataFrame  # every rate-matched x:y of every (prefill, decode) pair, with ``fits_kv``
    same: pd.DataFrame  # the rows of the deployments the disaggregated sweep measured
    comparison: pd.DataFrame  # predicted_vs_measured, one row per measured point
    summary: pd.DataFrame  # per measured deployment: points compared, median ratio, within 10 %
    envelope: pd.DataFrame  # the upper envelope of the rate-matched rows whose decode fits its KV room
    unchecked_envelope: pd.DataFrame  # the same without the KV-room check
    note: str = ""

    @property
    def available(self) -> bool:
        return len(self.rows) > 0

    @property
    def infeasible(self) -> int:
        """Rate-matched rows whose decode point runs more requests than its KV room at the real workload."""
        return int((~self.rows["fits_kv"]).sum()) if self.available else 0


def _decode_rooms(rows: pd.DataFrame, room: pd.DataFrame | None) -> np.ndarray:
    """Per rate-matched row, the KV room of its decode deployment at the disaggregated workload (NaN when
    unknown), looked up by layout and MTP so that ``TP8+EP`` finds ``TEP8``."""
    if room is None or len(room) == 0:
        return np.full(len(rows), np.nan)
    by_key = {_layout_key(d): r for d, r in zip(room["deployment"], room["room_at_workload"], strict=True)}
    keys = {}
    out = np.empty(len(rows))
    for i, (topo, mtp) in enumerate(zip(rows["decode_topology"].astype(str),
                                        pd.to_numeric(rows["mtp_tokens"]).fillna(0) > 0, strict=True)):
        if (topo, mtp) not in keys:
            layout = _layout_key(topo)
            keys[(topo, mtp)] = by_key.get((layout[0], bool(mtp)) if layout else None, np.nan)
        out[i] = keys[(topo, mtp)]
    return out


def predict(prefill: Sweep, decode: Sweep, measured: pd.DataFrame, *, osl: int, isl: int | None = None,
            max_workers: int = 4, room: pd.DataFrame | None = None) -> Prediction:
    """:func:`pdtune.frontier.rate_match` of the isolated sweeps (topologies named canonically), and
    :func:`pdtune.frontier.predicted_vs_measured` against ``measured`` (the gated disaggregated rows).

    ``room`` (a :func:`kv_room` frame) adds ``decode_room`` and ``fits_kv`` to every rate-matched row: a
    decode sweep run at a short ISL holds far more requests than the same engine can at the disaggregated
    workload, so a predicted point whose decode concurrency exceeds ``room_at_workload`` cannot be run, and
    the predicted envelope leaves it out (rows of unknown room are kept). Without a prefill-only or a
    decode-only sweep nothing is predicted and :attr:`Prediction.note` says why.
    """
    empty = empty_frame(["deployment", "concurrency", "tps_per_user", "tps_per_gpu"])
    summary_cols = ["deployment", "points", "predicted_points", "median_ratio", "within_10pct"]
    missing = [s for s in (prefill, decode) if not s.available]
    if missing:
        what = " and ".join(f"no {_KIND_WORDS[s.kind]} sweep" for s in missing)
        note = f"This scenario has {what}, so rate matching has nothing to combine and is skipped."
        rows = empty.assign(fits_kv=pd.Series(dtype=bool))
        return Prediction(rows, empty, empty, empty_frame(summary_cols), empty, empty, note)
    p = canonical_topologies(prefill.frame.drop(columns=["layout", "mtp"]))
    d = canonical_topologies(decode.frame.drop(columns=["layout", "mtp"]))
    rows = rate_match(p, d, osl, max_workers, isl=isl)
    decode_room = _decode_rooms(rows, room)
    rows = rows.assign(deployment=rows["deployment"].astype(str), decode_room=decode_room,
                       fits_kv=~(rows["decode_concurrency"].to_numpy() > decode_room))
    if len(measured):
        meas = label(canonical_topologies(measured))
        same = rows[rows["deployment"].isin(set(meas["deployment"]))]
        comparison = predicted_vs_measured(same, meas) if len(same) else empty
    else:
        same, comparison = rows.iloc[:0], empty
    summary = []
    if len(comparison):
        for dep, g in comparison.groupby("deployment", sort=False):
            ratio = g["predicted_over_measured"].dropna()
            summary.append({"deployment": dep, "points": len(g), "predicted_points": len(ratio),
                            "median_ratio": float(ratio.median()) if len(ratio) else math.nan,
                            "within_10pct": int(((ratio - 1).abs() <= 0.10).sum())})
    note = ""
    if len(measured) and not len(same):
        note = ("None of the measured deployments can be predicted: their prefill or decode layouts are not "
                "in the isolated sweeps.")
    feasible = rows[rows["fits_kv"]]
    return Prediction(rows, same, comparison, pd.DataFrame(summary, columns=summary_cols), envelope(feasible),
                      envelope(rows), note)


def prediction_sentence(pred: Prediction) -> str:
    """How close rate matching gets to the disaggregated sweep, in one sentence."""
    if not pred.available:
        return pred.note
    if len(pred.summary) == 0:
        return pred.note or "No measured configuration could be compared with its prediction."
    total = int(pred.summary["predicted_points"].sum())
    close = int(pred.summary["within_10pct"].sum())
    ratio = float(pred.comparison["predicted_over_measured"].median())
    return (f"Across {len(pred.summary)} configurations, the prediction is within 10 % of the measured "
            f"throughput per GPU at {close} of {total} points; the median ratio of predicted to measured is "
            f"{ratio:.3f}.")


def prediction_ends_sentence(pred: Prediction) -> str:
    """The predicted envelope's two ends, with and without the KV-room check."""
    if not pred.available or len(pred.envelope) == 0:
        return pred.note or "Nothing was predicted."
    top = pred.envelope.loc[pred.envelope["tps_per_gpu"].idxmax()]
    fast = pred.envelope.loc[pred.envelope["tps_per_user"].idxmax()]
    loose = pred.unchecked_envelope["tps_per_gpu"].max()
    text = (f"The predicted envelope reaches {top['tps_per_gpu']:,.0f} total tokens/s per GPU "
            f"({top['deployment']}) and {fast['tps_per_user']:,.1f} tokens/s per user "
            f"({fast['deployment']}).")
    if pred.infeasible:
        text += (f" The KV-room check removed {pred.infeasible:,} of {len(pred.rows):,} predicted points; "
                 f"without it the throughput end would be {loose:,.0f}.")
    return text


# ------------------------------------------------------------------------------------------ InferenceX


@dataclass(frozen=True, eq=False)
class RealData:
    """InferenceX's measured GB200 DeepSeek-R1 points, their envelope and the performance model's error."""

    sweep: Sweep
    envelope: pd.DataFrame
    check: pd.DataFrame  # inferencex_check, the columns the chapter prints
    brute_force_ok: bool
    source: str = field(default="")

    @property
    def frontier_sentence(self) -> str:
        """How many measured points lie on the frontier, and whether the fast frontier equals brute force."""
        check = "equals" if self.brute_force_ok else "differs from"
        return (f"{len(self.envelope)} of the {len(self.sweep.frame)} measured points are on the frontier; "
                f"the frontier pdtune computes {check} the set of points no other point dominates, checked "
                "pair by pair.")

    @property
    def trend_sentence(self) -> str:
        """The error on tokens/s per GPU in the lower and the upper half of the measured concurrencies."""
        c = self.check.sort_values("concurrency")
        if len(c) < 2:
            return ""
        half = len(c) // 2
        low, high = c.iloc[:half], c.iloc[half:]
        lo_err, hi_err = (float(p["tps_per_gpu_error"].abs().median()) for p in (low, high))
        return (f"Up to concurrency {int(low['concurrency'].max()):,} the median error on tokens/s per GPU "
                f"is {lo_err:.0%}; from {int(high['concurrency'].min()):,} on it is {hi_err:.0%}.")

    @property
    def median_abs_error(self) -> dict[str, float]:
        return {k: float(self.check[f"{k}_error"].abs().median()) for k in ("tps_per_gpu", "tps_per_user")}


INFERENCEX_SOURCE = "InferenceX (SemiAnalysis, Apache-2.0): DeepSeek-R1-0528, GB200 NVL72, Dynamo + TRT-LLM"


def inferencex_points(path: str | Path | None = None) -> RealData:
    """The bundled InferenceX file (or ``path``): loaded, labelled, its envelope, and
    :func:`pdtune.perfmodel.inferencex.inferencex_check` (nothing fitted to it)."""
    from pdtune.perfmodel.inferencex import inferencex_check, inferencex_file

    target = Path(path) if path is not None else inferencex_file()
    sweep = load_sweep("disagg", [str(target)])
    check = inferencex_check(target)
    cols = ["concurrency", "deployment", "measured_tps_per_gpu", "predicted_tps_per_gpu", "tps_per_gpu_error",
            "measured_tps_per_user", "predicted_tps_per_user", "tps_per_user_error", "measured_ttft_ms",
            "predicted_ttft_ms", "kv_limited"]
    check = check[cols].rename(columns={"deployment": "deployment_as_assumed"})
    return RealData(sweep, envelope(sweep.frame), check, frontier_matches_brute_force(sweep.frame),
                    INFERENCEX_SOURCE)


# ------------------------------------------------------------------------------------------ display


def number(value: Any, spec: str = ",.0f", *, missing: str = MISSING) -> str:
    """``value`` formatted for the prose, or ``missing`` for None/NaN (a glued value always exists)."""
    if value is None:
        return missing
    try:
        if isinstance(value, float) and math.isnan(value):
            return missing
        return format(value, spec)
    except (TypeError, ValueError):
        return str(value)
