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
from pdtune.sweep import Sweep
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


def finding_sentence(row: pd.Series | dict[str, Any], *, modeled: bool = False) -> str:
    """The article's claim and this sweep's answer in one sentence, for the prose. A ``modeled`` sweep is
    what the performance model predicts, and the sentence says so: it is no check of the article."""
    get = row.get
    verdict = get("verdict")
    if verdict == "no data":
        return f"The article: {get('article_claim')}. This scenario has no such sweep to check it against."
    if verdict == "not swept":
        return (f"The article: {get('article_claim')}. This sweep cannot say: {get('claimed')} or those "
                f"concurrencies are not in it (best there: {get('computed_best')}).")
    phrase = {"agrees": "agrees", "partly": "agrees only in part", "disagrees": "disagrees"}[verdict]
    if modeled:
        return (f"The article: {get('article_claim')}. The model predicts {get('computed_best')}; "
                f"the prediction {phrase} with the article ({get('wins')} concurrencies).")
    return (f"The article: {get('article_claim')}. This sweep: {get('computed_best')}; "
            f"the sweep {phrase} ({get('wins')} concurrencies).")


def findings_sentences(table: pd.DataFrame, *, modeled: bool = False) -> list[str]:
    return [finding_sentence(r, modeled=modeled) for r in table.to_dict("records")]


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


# --- what the chapter says, for its data or for none ---------------------------------------------------


def data_note(sweep: Sweep, *, article_data: bool, figure: str = "figure 1") -> str:
    """Where the sweep comes from, in one or two sentences: the article's modeled data, yours, or none."""
    if not sweep.available:
        return (f"{sweep.note} The method below still applies: with results listed in "
                f"`{sweep.kind}_results` every table and chart of this section fills in, and the parts that "
                "need no sweep (the busy share of each layout, the roofline) are computed for your layouts.")
    if article_data:
        return (f"This is the article's sweep as pdtune models it: the article publishes its {figure} without "
                "numbers, so `pdtune.perfmodel` predicted it (see `data/clusters/gb300-qwen3.8-modeled/"
                "README.md`). That model's default factors were tuned on the article's two headline numbers and "
                "its findings, so where the curves match the article they match by construction, not as a check. "
                "Every chart says modeled; replace the folder with your own measurements and the chapter reads "
                "them the same way.")
    if sweep.modeled:
        return (f"The data is modeled by pdtune's performance model, not measured: {sweep.sources}. The model's "
                "default factors were tuned on the article's two headline numbers and findings (or fitted on public "
                "measurements, per GPU: data/perfmodel/defaults.csv); every chart says modeled.")
    return f"The data is measured: {sweep.sources}. Every chart says which."


def findings_text(found: pd.DataFrame, *, article_data: bool, kind: str = "prefill") -> str:
    """The article's findings beside the sweep's, when the sweep is the article's; else why they are not."""
    if not article_data:
        return (f"The article's findings are about its own {kind} sweep of Qwen3.8-2.4T on GB300; this "
                f"scenario's data is not that sweep, so they are not compared with it.")
    # The article's sweep is modeled (its figures publish no numbers), so its findings meet a prediction.
    text = " ".join(findings_sentences(found, modeled=True))
    if kind == "prefill" and (found["verdict"] != "agrees").any():
        text += (" Where a claim and the sweep disagree at the lowest concurrencies, the busy-share table above "
                 "says why: a single request runs fastest on the widest TP group, and the article does not "
                 "publish which concurrencies it swept.")
    return text


def empty_note(sweep: Sweep) -> str:
    """What a table or chart of a scenario without this sweep shows instead (the first mention is fuller)."""
    return f"No {sweep.kind}-only sweep in this scenario: nothing to show here." if sweep.kind != "disagg" \
        else "No disaggregated sweep in this scenario: nothing to show here."


def ceiling_sentence(ceiling: Any) -> str:
    """The prefill ceiling on this GPU, and how close the sweep's best gets to it (when there is a sweep)."""
    text = f"On a {ceiling.gpu.upper()}, the ceiling is {ceiling.ceiling_tps_per_gpu:,.0f} tokens/s per GPU"
    if ceiling.best_tps_per_gpu is None or ceiling.best_tps_per_gpu != ceiling.best_tps_per_gpu:
        return text + "; without a prefill sweep there is nothing to set beside it."
    return (text + f"; the sweep's best reaches {ceiling.best_tps_per_gpu:,.0f}, that is {ceiling.share:.0%} "
            "of it.")


def capacity_sentence(peak: pd.DataFrame) -> str:
    """Which prefill deployment delivers the most requests per second per GPU, and how many."""
    if len(peak) == 0:
        return "Without a prefill sweep there is no TTFT to compute a request rate from."
    top = peak.iloc[0]
    return (f"Per GPU, {top['deployment']} delivers the most: {top['requests_per_s']:,.3g} requests per second "
            f"per engine, {top['requests_per_s_per_gpu']:,.3g} per GPU.")


def without_winner(best: pd.DataFrame, topologies: Sequence[str], load: Any) -> tuple[str, pd.DataFrame]:
    """The sweep's winner at its highest concurrency, and the winners' runs once it is left out of
    ``topologies`` (``load(topologies)`` reads the sweep again for them)."""
    if len(best) == 0:
        return "", empty_frame(["best", "from_concurrency", "to_concurrency", "points"])
    top = str(best["best"].iloc[-1])
    wanted = deployment_layout(top)
    others = [t for t in topologies if deployment_layout(t) != wanted]
    return top, winner_runs(best_table(load(others)))
