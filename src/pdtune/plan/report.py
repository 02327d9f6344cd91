"""What a plan reports: the rows the evaluation step re-evaluates, each SLA's pick with its runner-up and the best
row of each serving mode, the TTFT ceiling's preference, and the sentences that say them, numbers rounded the
way they are compared."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import pandas as pd

from pdtune.errors import InputError
from pdtune.frontier import upper_envelope
from pdtune.gpus import gpu_count
from pdtune.plan.aggregated import bottleneck_words
from pdtune.plan.evaluate import SIMULATED, Evaluator
from pdtune.plan.inputs import ROW_COLUMNS, PlanSettings, Sla, TtftCeiling


class PlanView(Protocol):
    """What the sentences read of a plan (:class:`pdtune.plan.search.Plan` is one): its settings, its TTFT
    ceiling and its rows by number."""

    settings: PlanSettings
    ceiling: TtftCeiling | None
    no_disagg: str | None  # why no disaggregated row exists at all (the budget's refusal), else None

    def row(self, k: int) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Pick:
    """The best row for one SLA, or how close the rows get; the runner-up, and aggregated against xPyD."""

    sla: Sla
    met: bool
    row: int | None  # row number in the plan's table (None when nothing meets it)
    closest_row: int | None  # when not met: the row with the smallest shortfall
    shortfall: float | None  # relative miss of the closest row (0.1 = 10 % short)
    candidates: int  # rows meeting the SLA
    runner_up: int | None = None  # the next best row meeting it, of another layout (:func:`_layouts`)
    best_agg: int | None = None  # the best aggregated and the best disaggregated row meeting it
    best_disagg: int | None = None
    above_ceiling: bool = False  # the pick's TTFT is above the plan's TTFT ceiling (no row meeting it is below)
    faster_above_ceiling: int | None = None  # a row meeting the SLA with more tokens/s per GPU, above the ceiling
    searched: int | None = None  # candidates evaluated when the evaluator's limit cut the search short, else None

    def to_dict(self) -> dict[str, Any]:
        return {"sla": self.sla.to_dict(), "describe": self.sla.describe(), "met": self.met, "row": self.row,
                "closest_row": self.closest_row, "shortfall": self.shortfall, "candidates": self.candidates,
                "runner_up_row": self.runner_up, "best_agg_row": self.best_agg, "best_disagg_row": self.best_disagg,
                "above_ttft_ceiling": self.above_ceiling, "faster_above_ttft_ceiling_row": self.faster_above_ceiling,
                "search_cut_after": self.searched}


def _layouts(rows: pd.DataFrame) -> np.ndarray:
    """Each row's layout: its aggregated topology, or its pair of prefill and decode topologies, on its GPUs. A
    runner-up is of another layout, never another worker ratio of the pick's own: that one is no alternative, and
    the staircase (:mod:`pdtune.plan.staircase`) keeps only the ratios no other of the pair dominates."""
    cols = ("mode", "topology", "prefill_topology", "decode_topology", "prefill_gpu", "decode_gpu")
    parts = [rows[c].tolist() if c in rows.columns else [""] * len(rows) for c in cols]
    return np.array(["|".join(map(str, p)) for p in zip(*parts, strict=True)], dtype=object)


def _ranked(rows: pd.DataFrame, mask: np.ndarray) -> list[Any]:
    """Labels of the rows in ``mask``, best first: most tokens/s per GPU, then fewest GPUs, then the most
    tokens/s per user (the frontier's tie rule), then the label. Of rows with the same deployment, concurrency
    and tokens/s per GPU only the first: a prefill-bound row of two decode points runs the same rate at the
    same paced concurrency (pdtune.frontier.xpyd.rate_match), and the lighter point's bounds its TPOT lower."""
    sub = rows[mask]
    deployment = sub["deployment"].astype(str).to_numpy()
    order = np.lexsort((deployment, -sub["tps_per_user"].to_numpy(dtype=float),
                        sub["gpus_total"].to_numpy(dtype=float), -sub["tps_per_gpu"].to_numpy(dtype=float)))
    keys = pd.DataFrame({"d": deployment, "c": sub["concurrency"].to_numpy(),
                         "t": sub["tps_per_gpu"].to_numpy(dtype=float)}).iloc[order]
    return list(sub.index[order[~keys.duplicated().to_numpy()]])


@dataclass
class _Choice:
    """What one SLA's search through the evaluated candidates found (index labels of ``rows``)."""

    sla: Sla
    candidates: int
    pick: Any = None
    runner_up: Any = None
    best: dict[str, Any] = field(default_factory=dict)  # mode -> label
    above_ceiling: bool = False
    faster_above: Any = None
    closest: Any = None
    shortfall: float | None = None
    searched: int | None = None  # the evaluator's limit stopped the search after this many candidates


def report_table(rows: pd.DataFrame, slas: Sequence[Sla], evaluator: Evaluator, ceiling: TtftCeiling, *,
                 require_sla: bool, meeting: Callable[[Sla], int] | None = None,
                 curves: Callable[[set[str]], pd.DataFrame] | None = None) -> tuple[pd.DataFrame, list[Pick]]:
    """The table the plan reports and its picks, every reported row evaluated by ``evaluator``.

    The steady-state rows rank the candidates; the evaluator re-evaluates them best first (all at once, or a
    batch at a time) and every SLA is checked on the evaluated numbers. Per SLA: the pick is the best
    evaluated row that meets it with a TTFT within the ceiling, else the best that meets it (flagged above the
    ceiling); the runner-up the next best meeting it of another deployment; and the best aggregated and the
    best disaggregated row meeting it (same ceiling rule as the pick). The table holds the steady-state
    frontier and all of these, evaluated; ``on_frontier`` marks the table's rows on the frontier of their evaluated
    numbers.

    An evaluator with a ``limit`` evaluates at most that many candidates per SLA; a search it cut short says
    so in its pick (``searched``).

    ``rows`` may stand for more rows than it holds (the disaggregated staircase of :mod:`pdtune.plan.staircase`,
    which holds every row a pick can be): ``meeting`` then counts the disaggregated rows of the whole search
    that meet an SLA, and ``curves`` gives a disaggregated deployment's whole curve; aggregated rows are all
    in ``rows``."""
    front = upper_envelope(rows)
    done: list[pd.DataFrame] = []
    seen: set[Any] = set()

    def evaluate(labels: Sequence[Any]) -> None:
        todo = [lab for lab in dict.fromkeys(labels) if lab not in seen]
        if todo:
            out = evaluator(rows.loc[todo])
            done.append(out)
            seen.update(todo)

    def evaluated(labels: Sequence[Any]) -> pd.DataFrame:
        frame = pd.concat(done) if len(done) > 1 else done[0]
        if len(done) > 1:
            done[:] = [frame]
        return frame.loc[list(labels)]

    choices = []
    mode_of_row = rows["mode"].astype(str)  # every row's mode, read once for all SLAs
    agg = (mode_of_row == "agg").to_numpy()
    for sla in slas:
        mask = sla.meets(rows)
        ranked = _ranked(rows, mask)
        choice = _Choice(sla, int(mask.sum()) if meeting is None else meeting(sla) + int((mask & agg).sum()))
        batch = evaluator.batch or max(len(ranked), 1)
        within: dict[str, Any] = {}  # "pick" and each mode: the first evaluated row meeting it under the ceiling
        anywhere: dict[str, Any] = {}
        order: list[Any] = []  # evaluated rows meeting the SLA, best first
        under_of: dict[Any, bool] = {}
        dep_of: dict[Any, str] = {}
        mode_of: dict[Any, str] = {}
        limit = len(ranked) if evaluator.limit is None else min(evaluator.limit, len(ranked))
        finished = False
        queue = ranked[:limit]
        while queue:
            if "pick" in within and len({dep_of[lab] for lab in order}) > 1:
                # A pick under the ceiling and a row of another layout (a runner-up) are found: of the rest,
                # only the best row of a mode not yet seen is still wanted, so the candidates of the modes found
                # are not evaluated (they would cost a slow evaluator minutes and could only be the runner-up).
                seen_modes = set(within) | set(anywhere)
                queue = [lab for lab in queue if mode_of_row[lab] not in seen_modes]
                if not queue:
                    break
            chunk, queue = queue[:batch], queue[batch:]
            evaluate(chunk)
            sub = evaluated(chunk)
            ok = sla.meets(sub)
            under = sub["ttft_ms_p50"].to_numpy(dtype=float) <= ceiling.ms
            modes = sub["mode"].astype(str).to_numpy()
            deps = _layouts(sub)
            for i in np.flatnonzero(ok):
                lab = chunk[i]
                order.append(lab)
                under_of[lab], dep_of[lab], mode_of[lab] = bool(under[i]), deps[i], str(modes[i])
                for key in ("pick", modes[i]):
                    anywhere.setdefault(key, lab)
                    if under[i]:
                        within.setdefault(key, lab)
            if "pick" in within and {"agg", "disagg"} <= set(within) | set(anywhere) and len(order) > 1:
                finished = True
                break
        if not finished and limit < len(ranked):
            choice.searched = limit
        if order:  # the evaluated numbers decide among the candidates evaluated (the ranking only ordered them)
            tps = evaluated(order)["tps_per_gpu"].to_numpy(dtype=float)
            order = [order[i] for i in np.lexsort((np.arange(len(order)), -tps))]
            within, anywhere = {}, {}
            for lab in order:
                for key in ("pick", mode_of[lab]):
                    anywhere.setdefault(key, lab)
                    if under_of[lab]:
                        within.setdefault(key, lab)
        chosen = within if "pick" in within else anywhere
        if "pick" in chosen:
            choice.pick = chosen["pick"]
            choice.above_ceiling = "pick" not in within
            if anywhere["pick"] != choice.pick:
                choice.faster_above = anywhere["pick"]
            for mode in ("agg", "disagg"):
                label = within.get(mode, anywhere.get(mode)) if "pick" in within else anywhere.get(mode)
                if label is not None:
                    choice.best[mode] = label
            others = [lab for lab in order if dep_of[lab] != dep_of[choice.pick]]
            preferred = [lab for lab in others if under_of[lab]] if not choice.above_ceiling else []
            choice.runner_up = (preferred or others or [None])[0]
        else:
            miss = sla.shortfall(rows)
            best = np.lexsort((-rows["tps_per_gpu"].to_numpy(dtype=float), miss))[0]
            choice.closest, choice.shortfall = rows.index[best], float(miss[best])
            evaluate([choice.closest])
            if require_sla:
                r = evaluated([choice.closest]).iloc[0]
                p90 = (f" (p90 {ceil_to(r['tpot_ms_p90'], 1):.1f} ms: {r['tpot_p90_basis']})"
                       if sla.max_tpot_ms_p90 is not None else "")
                flags = "/".join(flag for flag, value in (("--min-tps-per-user", sla.min_tps_per_user),
                                                          ("--max-ttft-ms", sla.max_ttft_ms),
                                                          ("--max-tpot-ms-p90", sla.max_tpot_ms_p90))
                                 if value is not None)
                raise InputError(flags or "SLA", sla.describe(),
                                 f"no deployment within the budget meets it; the closest is {r['deployment']} at "
                                 f"concurrency {int(r['concurrency'])}: {floor_to(r['tps_per_user'], 1):.1f} "
                                 f"tokens/s per user, TTFT {ceil_to(r['ttft_ms_p50']):,.0f} ms, TPOT "
                                 f"{ceil_to(r['tpot_ms_p50'], 1):.1f} ms{p90}, {r['tps_per_gpu']:,.0f} tokens/s "
                                 f"per GPU ({choice.shortfall:.0%} short)")
        choices.append(choice)
    labels = list(front.index)
    for c in choices:
        labels += [lab for lab in (c.pick, c.runner_up, c.faster_above, *c.best.values(), c.closest)
                   if lab is not None]
    labels = list(dict.fromkeys(labels))
    evaluate(labels)
    table = evaluated(labels).copy()
    # The rows the table marks as on the frontier are those of its evaluated numbers: a simulation can put a pick
    # the steady-state model ranked below the frontier above a frontier row. With the steady-state evaluator these
    # are the search's frontier rows (every row off it is below one of them).
    on_front = set(upper_envelope(table).index)
    table["on_frontier"] = [lab in on_front for lab in labels]
    table = table.sort_values(["tps_per_user", "tps_per_gpu"], kind="stable")
    row_of = {lab: k for k, lab in enumerate(table.index)}
    table.insert(0, "row", np.arange(len(table)))
    picked: dict[Any, list[str]] = {}
    picks = []
    for c in choices:
        if c.pick is not None:
            picked.setdefault(c.pick, []).append(c.sla.describe())
        picks.append(Pick(c.sla, c.pick is not None, row_of.get(c.pick), row_of.get(c.closest), c.shortfall,
                          c.candidates, row_of.get(c.runner_up), row_of.get(c.best.get("agg")),
                          row_of.get(c.best.get("disagg")), c.above_ceiling, row_of.get(c.faster_above),
                          c.searched))
    table["picked_for"] = ["; ".join(picked.get(lab, [])) for lab in table.index]
    met = np.column_stack([sla.meets(table) for sla in slas]) if slas else np.zeros((len(table), 0), dtype=bool)
    table["meets_sla"] = [[bool(v) for v in row] for row in met]
    table["within_ttft_ceiling"] = table["ttft_ms_p50"].to_numpy(dtype=float) <= ceiling.ms
    table["bottleneck_words"] = [bottleneck_words(r) for r in table.to_dict("records")]
    whole = rows
    if curves is not None:
        named = set(table["deployment"].astype(str))
        disagg = set(table.loc[table["mode"].astype(str) == "disagg", "deployment"].astype(str))
        whole = pd.concat([rows[rows["deployment"].astype(str).isin(named - disagg)], curves(disagg)],
                          ignore_index=True) if disagg else rows
    table["curve_concurrencies"] = _curves(whole, table)
    loads = [c for c in ("prefill_concurrency", "decode_concurrency", "server_concurrency") if c in whole.columns]
    heaviest = whole[whole["deployment"].isin(set(table["deployment"]))].groupby("deployment")[loads].max()
    for col, key in (("curve_prefill_concurrency_max", "prefill_concurrency"),
                     ("curve_decode_concurrency_max", "decode_concurrency"),
                     ("curve_server_concurrency_max", "server_concurrency")):
        if key in heaviest.columns:
            table[col] = table["deployment"].map(heaviest[key]).fillna(0).astype(int)
    table = table.reset_index(drop=True)
    return table[[c for c in ROW_COLUMNS if c in table.columns]], picks


def floor_to(value: float, digits: int = 0) -> float:
    """``value`` rounded down at ``digits`` decimals: how a number compared against a floor (>=) is shown,
    so that 19.98 against >= 20 reads 19.9, never 20.0."""
    scale = 10 ** digits
    return math.floor(float(value) * scale + 1e-9) / scale


def ceil_to(value: float, digits: int = 0) -> float:
    """``value`` rounded up at ``digits`` decimals: how a number compared against a limit (<=) is shown."""
    scale = 10 ** digits
    return math.ceil(float(value) * scale - 1e-9) / scale


def _curves(rows: pd.DataFrame, table: pd.DataFrame, points: int = 8) -> list[list[int]]:
    """Per table row, concurrencies spanning its deployment's predicted curve (at most ``points``, spread
    evenly in log scale, its own concurrency included): what the deployment's benchmark sweeps."""
    wanted = set(table["deployment"])
    mine = rows[rows["deployment"].isin(wanted)]
    curve = {dep: np.unique(group["concurrency"].to_numpy()) for dep, group in mine.groupby("deployment")}
    out = []
    for dep, own in zip(table["deployment"], table["concurrency"], strict=True):
        values = curve[dep]
        if values.size > points:
            targets = np.geomspace(values[0], values[-1], points)
            values = np.unique(values[np.abs(np.log(values[None, :]) - np.log(targets[:, None])).argmin(axis=1)])
        out.append(sorted({int(v) for v in values} | {int(own)}))
    return out


MODE_WORDS = {"agg": "aggregated", "disagg": "disaggregated"}


def _row_brief(r: dict[str, Any]) -> str:
    return f"{r['deployment']} ({MODE_WORDS.get(str(r['mode']), r['mode'])}, {gpu_count(r['gpus_total'])})"


def picks_sentence(p: PlanView, pick: Pick) -> str:
    """One pick in words: the row, its numbers rounded the way they are compared, what limits it, the
    runner-up."""
    if not pick.met:
        assert pick.closest_row is not None
        r = p.row(pick.closest_row)
        return (f"{pick.sla.describe()}: nothing meets it within {gpu_count(p.settings.max_gpus)}; the closest is row "
                f"{pick.closest_row}, {_row_brief(r)} ({floor_to(r['tps_per_user'], 1):.1f} tokens/s per user, "
                f"TTFT {ceil_to(r['ttft_ms_p50']):,.0f} ms)")
    assert pick.row is not None
    r = p.row(pick.row)
    p90 = (f", TPOT p90 {ceil_to(r['tpot_ms_p90'], 1):.1f} ms ({r['tpot_p90_basis']})"
           if pick.sla.max_tpot_ms_p90 is not None else "")
    kv = f" ({r['kv_transfer_share']:.1%} of it KV transfer)" if r["mode"] == "disagg" else ""
    # A simulated row has tails of its own (the benchmark's first round is every client at once): say the p90
    # beside the median the ceiling is checked on; the steady-state model's p90 is its median.
    tail = (f", TTFT p90 {ceil_to(r['ttft_ms_p90']):,.0f} ms"
            if r.get("latency_model") == SIMULATED and r.get("ttft_ms_p90") is not None else "")
    text = (f"{pick.sla.describe()}: row {pick.row}, {_row_brief(r)} at concurrency {r['concurrency']}: "
            f"{r['tps_per_gpu']:,.0f} tokens/s per GPU, {floor_to(r['tps_per_user'], 1):.1f} tokens/s per user, "
            f"TTFT {ceil_to(r['ttft_ms_p50']):,.0f} ms{kv}{tail}{p90}; bottleneck: {r['bottleneck_words']}")
    above = pick.faster_above_ceiling is not None and p.ceiling is not None
    if pick.runner_up is None:
        text += "; no other deployment meets it"
    elif not (above and pick.runner_up == pick.faster_above_ceiling):  # else the clause below names it
        u = p.row(pick.runner_up)
        gap = 1 - u["tps_per_gpu"] / r["tps_per_gpu"] if r["tps_per_gpu"] else 0.0
        than = f"{gap:.1%} less" if gap >= 0 else f"{-gap:.1%} more"  # more: a faster row above the ceiling
        text += (f"; runner-up row {pick.runner_up}, {_row_brief(u)}, {u['tps_per_gpu']:,.0f} tokens/s per GPU "
                 f"({than})")
    if above:
        f = p.row(pick.faster_above_ceiling)
        role = "runner-up " if pick.runner_up == pick.faster_above_ceiling else ""
        text += (f"; {role}row {pick.faster_above_ceiling}, {f['deployment']}, would give "
                 f"{f['tps_per_gpu']:,.0f} tokens/s per GPU at a TTFT of {ceil_to(f['ttft_ms_p50']):,.0f} ms, "
                 f"above the {p.ceiling.ms:,.0f} ms ceiling (--ttft-ceiling-ms moves it)")
    return text


def comparison_sentence(p: PlanView, pick: Pick) -> str:
    """Aggregated against disaggregated for one SLA, in one sentence."""
    what = pick.sla.describe()
    if not p.settings.aggregated:
        return f"{what}: aggregated serving was not planned (--no-aggregated)."
    if pick.best_agg is None and pick.best_disagg is None:
        return f"{what}: neither aggregated nor disaggregated serving meets it within {gpu_count(p.settings.max_gpus)}."
    if pick.best_agg is None or pick.best_disagg is None:
        only, other = ("agg", "disagg") if pick.best_agg is not None else ("disagg", "agg")
        r = p.row(pick.best_agg if only == "agg" else pick.best_disagg)  # type: ignore[arg-type]
        none = (f"fits {gpu_count(p.settings.max_gpus)}" if only == "agg" and p.no_disagg else "does")
        return (f"{what}: only {MODE_WORDS[only]} serving meets it ({r['deployment']}, row {r['row']}, "
                f"{r['tps_per_gpu']:,.0f} tokens/s per GPU); no {MODE_WORDS[other]} deployment {none}.")
    a, d = p.row(pick.best_agg), p.row(pick.best_disagg)
    ceiling = p.ceiling.ms if p.ceiling is not None else math.inf
    a_in, d_in = a["ttft_ms_p50"] <= ceiling, d["ttft_ms_p50"] <= ceiling
    if a_in != d_in:  # compare like with like: the mode within the ceiling wins, the other is said as it is
        win, lose = (a, d) if a_in else (d, a)
        ratio = lose["tps_per_gpu"] / win["tps_per_gpu"] if win["tps_per_gpu"] else math.inf
        return (f"{what}: {MODE_WORDS[str(win['mode'])]} wins within the {ceiling:,.0f} ms TTFT ceiling, "
                f"{win['deployment']} (row {win['row']}) at {win['tps_per_gpu']:,.0f} tokens/s per GPU; the best "
                f"{MODE_WORDS[str(lose['mode'])]} deployment, {lose['deployment']} (row {lose['row']}), gives "
                f"{ratio:.2f}x that but at a TTFT of {ceil_to(lose['ttft_ms_p50']):,.0f} ms, above the ceiling.")
    win, lose = (a, d) if a["tps_per_gpu"] > d["tps_per_gpu"] else (d, a)
    ratio = win["tps_per_gpu"] / lose["tps_per_gpu"] if lose["tps_per_gpu"] else math.inf
    return (f"{what}: {MODE_WORDS[str(win['mode'])]} wins, {win['deployment']} (row {win['row']}) at "
            f"{win['tps_per_gpu']:,.0f} tokens/s per GPU is {ratio:.2f}x the best {MODE_WORDS[str(lose['mode'])]} "
            f"deployment, {lose['deployment']} (row {lose['row']}) at {lose['tps_per_gpu']:,.0f}.")
