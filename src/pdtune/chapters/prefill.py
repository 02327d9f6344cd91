"""Chapter 5, prefill isolation: who wins where, the article's claims checked, prefill's rate.

The way of reading an isolated sweep that chapter 6 reuses for decode starts here: the best deployment at
each concurrency with its runner-up and margin (:func:`best_table`), runs of wins (:func:`winner_runs`),
and each of the article's findings beside what the sweep computes, with a verdict (:func:`findings`).
Then prefill's own: the requests/s each deployment delivers (the ``P`` of rate matching), the share of its
GPUs busy at low concurrency, and the engines a target rate needs. The rules are in
:mod:`pdtune.frontier` (best per concurrency) and :mod:`pdtune.perfmodel.roofline` (the ceiling).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from pdtune.chapters.display import MISSING, concurrency_list
from pdtune.errors import InputError
from pdtune.frontier import best_per_concurrency
from pdtune.frontier import winner_runs as frontier_runs
from pdtune.results.schema import empty_frame
from pdtune.sweep import KIND_WORDS, Sweep
from pdtune.topology import deployment_layout


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


FINDING_COLUMNS = ("article_claim", "claimed", "concurrencies", "computed_best", "wins", "verdict")


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


def findings(sweep: Sweep, claims: Sequence[Claim], best: pd.DataFrame | None = None) -> pd.DataFrame:
    """Each claim beside what this sweep computes, with a verdict.

    ``computed_best`` lists the winners in the claim's concurrencies; ``verdict`` is ``agrees`` (the
    claimed deployment wins every one of them), ``partly`` (some), ``disagrees`` (none), ``not swept``
    (the claimed deployment, or the claim's concurrencies, are not in the data) or ``no data``.
    """
    best = best_table(sweep) if best is None else best
    rows = []
    swept = sorted(int(c) for c in best["concurrency"]) if len(best) else []
    keys = {label: deployment_layout(label) for label in sweep.deployments}
    for claim in claims:
        row: dict[str, Any] = {"article_claim": claim.text, "claimed": claim.deployment}
        if not sweep.available:
            rows.append({**row, "concurrencies": MISSING, "computed_best": MISSING, "wins": MISSING,
                         "verdict": "no data"})
            continue
        region = _region(claim, swept)
        wanted = deployment_layout(claim.deployment)
        in_data = [label for label, key in keys.items() if key is not None and key == wanted]
        winners = best.set_index("concurrency").loc[region, "best"] if region else pd.Series(dtype=object)
        described = "; ".join(
            f"{w} at {concurrency_list([int(c) for c in winners.index[winners == w]], swept)}"
            for w in dict.fromkeys(winners))
        row.update(concurrencies=concurrency_list(region, swept), computed_best=described or MISSING)
        if not region or not in_data:
            row.update(wins=MISSING, verdict="not swept")
        else:
            wins = int(winners.isin(in_data).sum())
            verdict = "agrees" if wins == len(region) else "partly" if wins else "disagrees"
            row.update(wins=f"{wins} of {len(region)}", verdict=verdict)
        rows.append(row)
    return pd.DataFrame(rows, columns=list(FINDING_COLUMNS))


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


def busy_share(sweep: Sweep, concurrencies: Sequence[int] = (1, 2, 4),
               topologies: Sequence[str] = ()) -> pd.DataFrame:
    """Share of a deployment's GPUs that have a request to work on when ``C`` requests run at once.

    An engine of ``DP`` data-parallel ranks and ``PP`` pipeline stages has ``DP x PP`` independent slots
    (a rank's batch, a stage's micro-batch); a TP group works on one slot together. With fewer requests than
    slots the rest idle: ``min(C, DP x PP) / (DP x PP)``. This is why wide TP wins a prefill sweep's lowest
    concurrencies and DP wins once every rank has a request. Without a sweep, the ``topologies`` it would
    compare are used: the share needs only their layout.
    """
    columns = ["deployment", "tp", "dp", "pp", "gpus", *[f"busy_at_{c}" for c in concurrencies]]
    names = sweep.deployments if sweep.available else list(topologies)  # no sweep: the layouts it would have
    if not names:
        return empty_frame(columns)
    rows = []
    for dep in names:
        key = deployment_layout(dep)
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


# --- the dense example the chapter opens on ---------------------------------------------------------------

#: The plain dense model chapter 5 starts from, as aiconfigurator measured it with vLLM (FP8 weights).
DENSE_MODEL, DENSE_GPU, DENSE_WORKLOAD = "llama-3.1-70b", "h200", (8192, 1024)


def dense_example(cases: pd.DataFrame | None = None) -> pd.DataFrame:
    """Llama-3.1-70B (FP8) on H200 at ISL/OSL 8192/1024 and the lowest concurrency measured: one row per
    tensor-parallel width with its measured median TTFT and TPOT (aiconfigurator's silicon runs of vLLM, as
    chapter 8 reads them)."""
    from pdtune.chapters.trust import sweep_cases

    cases = sweep_cases() if cases is None else cases
    isl, osl = DENSE_WORKLOAD
    mine = cases[(cases["model"] == DENSE_MODEL) & (cases["gpu"] == DENSE_GPU)
                 & cases["case"].str.endswith(f"ISL/OSL {isl}/{osl}")]
    low = mine[mine["concurrency"] == mine["concurrency"].min()]
    out = low.rename(columns={"gpus_total": "gpus", "measured_ttft_ms_p50": "ttft_ms_p50",
                              "measured_tpot_ms_p50": "tpot_ms_p50"})
    return out[["topology", "gpus", "concurrency", "ttft_ms_p50", "tpot_ms_p50"]].sort_values(
        "gpus", kind="stable").reset_index(drop=True)


def dense_ceiling(isl: int = DENSE_WORKLOAD[0]) -> Any:
    """The FP8 prefill ceiling of the dense example (:func:`pdtune.perfmodel.roofline.prefill_ceiling`)."""
    from pdtune.gpus import load_gpu
    from pdtune.model import load_model
    from pdtune.perfmodel.roofline import prefill_ceiling
    from pdtune.precision import parse_weights_dtype

    return prefill_ceiling(parse_weights_dtype("fp8", load_model(DENSE_MODEL)), load_gpu(DENSE_GPU), isl)


def measured_case(cases: pd.DataFrame, model: str, gpu: str, isl: int | None = None,
                  osl: int | None = None) -> tuple[str, bool]:
    """The measured sweep a chapter's chart opens on: this model on this GPU (or on any GPU) when
    aiconfigurator measured it (True), at the scenario's ISL (and OSL) when it was measured there, else the
    dense example's own sweep (False)."""
    from pdtune.chapters.trust import default_case

    case, own = default_case(cases, model, gpu)
    if own:
        lead = case.rsplit(", ISL/OSL ", 1)[0] + f", ISL/OSL {isl}/" + (str(osl) if osl else "")
        same = cases.loc[cases["case"].str.startswith(lead), "case"].value_counts()
        return (str(same.index[0]) if isl and len(same) else case), True
    isl, osl = DENSE_WORKLOAD
    return f"{DENSE_MODEL} on {DENSE_GPU.upper()}, ISL/OSL {isl}/{osl}", False


# --- the sentences whose wording depends on the scenario ---------------------------------------------------


def data_note(sweep: Sweep, *, article_data: bool, figure: str = "figure 1") -> str:
    """What the sweep holds and where it comes from (:meth:`pdtune.sweep.Sweep.describe`), and for the
    article's modeled data why it matches the article; without a sweep, what the page still computes."""
    if not sweep.available:
        return (f"{sweep.note} The tables and charts of the sweep stay empty; what needs no sweep is computed "
                "for your layouts.")
    if article_data:
        return (f"{sweep.describe()} The article shows its {figure} without numbers: this is pdtune's model of "
                "the sweep, tuned on the article's headline numbers and findings, so it matches them by construction.")
    return sweep.describe()


def findings_text(found: pd.DataFrame, *, article_data: bool, kind: str = "prefill") -> str:
    """The article's findings beside the sweep's winners, one short sentence each, or why they are not."""
    if not article_data:
        return f"This is not the article's {kind} sweep, so its findings are not compared with it."
    phrase = {"agrees": "agrees", "partly": "agrees in part", "disagrees": "disagrees", "not swept": "cannot say",
              "no data": "cannot say"}
    return " ".join(f"{r['article_claim']}: the model has {r['computed_best']}, so it {phrase[r['verdict']]} "
                    f"({r['wins']} concurrencies)." for r in found.to_dict("records"))


def ceiling_share(ceiling: Any) -> str:
    """How close the sweep's best gets to the ceiling, or that there is no sweep to compare."""
    if ceiling.best_tps_per_gpu is None or ceiling.best_tps_per_gpu != ceiling.best_tps_per_gpu:
        return "There is no prefill sweep to set beside it."
    return (f"The sweep's best reaches {ceiling.best_tps_per_gpu:,.0f} tokens/s per GPU, "
            f"{ceiling.share:.0%} of it.")


def measured_note(model: str, case: str, own: bool, what: str) -> str:
    """Whether real vLLM runs of this model exist, and which measured sweep the folded chart opens on."""
    if own:
        return (f"Real vLLM measurements of this model exist: the chart opens on {case}, measured {what} "
                "beside the model's prediction.")
    return f"There are no real vLLM measurements of {model}: the chart opens on {case}."


def worst_miss(cases: pd.DataFrame, case: str, metric: str) -> str:
    """Where the performance model misses one measured sweep most (``metric`` is ``ttft_ms_p50`` or
    ``tpot_ms_p50``), and which way: a measured latency far above the model's is a queue the model has none of."""
    sel = cases[cases["case"] == case].dropna(subset=[f"measured_{metric}", f"modeled_{metric}"])
    if not len(sel):
        return ""
    ratio = sel[f"modeled_{metric}"] / sel[f"measured_{metric}"]
    row = sel.loc[(ratio - 1).abs().idxmax()]
    measured, modeled = float(row[f"measured_{metric}"]), float(row[f"modeled_{metric}"])
    text = (f"Its worst miss is {row['topology']} at {int(row['concurrency']):,} requests: {measured:,.0f} ms "
            f"measured against {modeled:,.0f} ms modeled")
    if measured > 2 * modeled:
        return text + ": requests waiting in a queue, which the steady-state model does not have."
    return text + "."


def busy_sentence(share: pd.DataFrame) -> str:
    """What the busy share of the listed layouts says at one request: which leaves most GPUs idle, or that
    none has data-parallel ranks or pipeline stages to leave idle."""
    if len(share) == 0:
        return "No listed layout can run this model."
    if (share["busy_at_1"] == 1).all():
        return ("With one request every listed layout keeps all its GPUs busy: none has data-parallel ranks or "
                "pipeline stages to leave idle.")
    least = share.sort_values("busy_at_1", kind="stable").iloc[0]
    full = ", ".join(share.loc[share["busy_at_1"] == 1, "deployment"]) or "none"
    return (f"With one request {least['deployment']} keeps only {least['busy_at_1']:.0%} of its GPUs busy; the "
            f"layouts that keep all of them busy: {full}.")


def empty_note(sweep: Sweep) -> str:
    """What a table or chart of a scenario without this sweep shows instead."""
    return f"No {KIND_WORDS[sweep.kind]} sweep in this scenario: nothing to show here."
