"""Chapters 5 and 6: isolated prefill and decode sweeps, one curve per topology.

Every chart here reads a :class:`pdtune.sweep.Sweep` and works in the static page: clicking a topology
in the legend isolates it (an Altair point selection bound to the legend; shift-click adds more, a double
click clears), every point's tooltip names its deployment, concurrency and file, and the y axis says what
is divided by what. Modeled sweeps say so in the subtitle. An empty sweep (a scenario without that kind of
results) draws a short note instead of a chart, so a chapter never needs an ``if``.

Colours follow the sweep's topologies in order of GPU count, the same in every chart of one sweep.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import altair as alt
import pandas as pd

from pdtune.charts.style import (
    column_title,
    measured_title,
    modeled_title,
    ratio_title,
    tooltips,
)
from pdtune.paths import REPO_ROOT
from pdtune.sweep import Sweep

#: Plot area of the curve charts: the legend sits to the right, and both fit the book's column.
CURVE_WIDTH = 400
CURVE_HEIGHT = 230
#: Name of the legend-bound selection in every chart of this module.
LEGEND_NAME = "pick"
MODEL_HOW = "pdtune.perfmodel roofline model"
FADED = 0.12
#: Tableau 10 and 20's light half: enough distinct colours for a sweep of many layouts.
PALETTE = ("#4c78a8", "#f58518", "#e45756", "#72b7b2", "#54a24b", "#eeca3b", "#b279a2", "#ff9da6", "#9d755d",
           "#bab0ac", "#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#17becf", "#bcbd22")
SWEEP_Y_TITLE = ratio_title("total tokens/s (input + output)", "all GPUs of the deployment")


def relative_path(path: object) -> str:
    """A result file's path relative to the repository when it lies inside it (shorter tooltips)."""
    if not isinstance(path, str) or not path:
        return ""
    p = Path(path)
    try:
        return p.resolve().relative_to(REPO_ROOT).as_posix()
    except (ValueError, OSError):
        return p.as_posix()


def heading(text: str, frame: pd.DataFrame, *, source: str = "",
            extra: Sequence[str] = ()) -> alt.TitleParams:
    """The chart title with a subtitle saying modeled (and by what) or measured (and where from)."""
    modeled = "modeled" in frame.columns and bool(frame["modeled"].fillna(False).astype(bool).any())
    if modeled:
        title = modeled_title(text, how=MODEL_HOW)
    else:
        recorded = frame["source"].dropna() if "source" in frame.columns else pd.Series(dtype=object)
        sources = source or ", ".join(sorted({str(s) for s in recorded}))
        title = measured_title(text, source=sources or "benchmark results")
    subtitle = list(title.subtitle) + list(extra)
    return alt.TitleParams(text=text, subtitle=subtitle, anchor="start")


def note_chart(note: str, *, title: str = "Nothing to draw") -> alt.Chart:
    """A small chart that only says why there is nothing to draw (an empty sweep)."""
    lines, line = [], ""
    for word in note.split():
        if line and len(line) + len(word) > 70:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    lines.append(line)
    data = pd.DataFrame({"line": lines, "row": range(len(lines))})
    return alt.Chart(data, title=alt.TitleParams(title, anchor="start")).mark_text(
        align="left", baseline="top", fontSize=13, color="#555").encode(
        x=alt.value(0), y=alt.Y("row:O", axis=None), text="line:N",
    ).properties(width=CURVE_WIDTH, height=18 * len(lines))


def palette(domain: Sequence[str]) -> alt.Scale:
    """A colour scale fixed to ``domain``, so that a layout keeps its colour in every chart."""
    colours = [PALETTE[i % len(PALETTE)] for i in range(len(domain))]
    return alt.Scale(domain=list(domain), range=colours)


def layout_order(sweep: Sweep) -> list[str]:
    """The sweep's layouts, fewest GPUs first: the colour order of every chart of it."""
    f = sweep.frame.sort_values("gpus_total", kind="stable")
    return list(dict.fromkeys(f["layout"]))


def points(sweep: Sweep) -> pd.DataFrame:
    """The columns a chart draws or shows in its tooltips, paths relative to the repository."""
    f = sweep.frame
    keep = ["deployment", "layout", "mtp", "concurrency", "tps_per_gpu", "tps_per_user", "ttft_ms_p50",
            "tpot_ms_p50", "gpus_total", "source", "path", "modeled"]
    data = f[[c for c in keep if c in f.columns]].copy()
    data["mtp_label"] = data["mtp"].map({True: "with MTP", False: "without MTP"})
    data["path"] = data["path"].map(relative_path)
    for c in ("concurrency", "gpus_total"):
        data[c] = data[c].astype(int)
    return data


def concurrency_axis(values: pd.Series) -> alt.X:
    """Concurrency on a log-2 scale over the swept range, ticks at powers of 4."""
    lo, hi = int(values.min()), int(values.max())
    ticks = [4**i for i in range(0, 16) if lo <= 4**i <= hi]
    return alt.X("concurrency:Q", title=column_title("concurrency"),
                 scale=alt.Scale(type="log", base=2, domain=[lo, hi], nice=False),
                 axis=alt.Axis(values=ticks, format=",d"))


def _message(best: pd.DataFrame | None, sweep: Sweep) -> str:
    """The chart's message from who wins where."""
    if best is None or len(best) == 0:
        return f"{len(sweep.deployments)} deployments against concurrency"
    counts = best["best"].value_counts()
    top, n = counts.index[0], int(counts.iloc[0])
    text = f"{top} is best at {n} of {len(best)} concurrencies"
    others = [d for d in dict.fromkeys(best["best"]) if d != top]
    if len(others) == 1:
        text += f", {others[0]} at the other"
    elif len(others) == 2:
        text += f"; {others[0]} and {others[1]} share the rest"
    elif others:
        text += f"; {len(others)} others share the rest"
    return text


def legend_pick() -> alt.Parameter:
    """The selection a click on a legend entry makes (shift-click adds, double-click clears)."""
    return alt.selection_point(fields=["layout"], bind="legend", name=LEGEND_NAME)


def _curves(data: pd.DataFrame, order: list[str], y: alt.Y, *, dashed: bool,
            pick: alt.Parameter | None = None) -> alt.Chart:
    """One line per deployment, coloured by layout, MTP dashed; the legend isolates layouts."""
    pick = pick or legend_pick()
    encoding = dict(
        x=concurrency_axis(data["concurrency"]), y=y,
        color=alt.Color("layout:N", scale=palette(order), title="topology (click to isolate)",
                        legend=alt.Legend(titleLimit=320, labelLimit=160, symbolType="stroke", orient="right",
                                          values=[lay for lay in order if lay in set(data["layout"])])),
        detail="deployment:N",
        opacity=alt.condition(pick, alt.value(1.0), alt.value(FADED)),
        tooltip=tooltips("deployment:N", "concurrency:Q", "tps_per_gpu:Q", "tps_per_user:Q", "ttft_ms_p50:Q",
                         "tpot_ms_p50:Q", "gpus_total:Q", columns=data.columns),
    )
    if dashed:
        encoding["strokeDash"] = alt.StrokeDash(
            "mtp_label:N", title=None, legend=alt.Legend(symbolType="stroke", orient="right"),
            scale=alt.Scale(domain=["without MTP", "with MTP"], range=[[1, 0], [5, 3]]))
    return alt.Chart(data).mark_line(point=alt.OverlayMarkDef(size=26), strokeWidth=1.8).encode(
        **encoding).add_params(pick)


def sweep_chart(
    sweep: Sweep,
    best: pd.DataFrame | None = None,
    *,
    title: str | None = None,
    log_y: bool = False,
) -> alt.TopLevelMixin:
    """Total tokens/s per GPU against concurrency (log scale), one colour per topology, MTP dashed.

    ``best`` (:func:`pdtune.chapters.prefill.best_table`) rings the winner at each concurrency. The legend
    isolates topologies; ``log_y`` spreads a decode sweep's small low-concurrency numbers.
    """
    if not sweep.available:
        return note_chart(sweep.note, title=f"No {sweep.kind} sweep")
    data = points(sweep)
    order = layout_order(sweep)
    y = alt.Y("tps_per_gpu:Q", title=SWEEP_Y_TITLE,
              scale=alt.Scale(type="log", nice=False) if log_y else alt.Scale(zero=True))
    layers: list[alt.Chart] = [_curves(data, order, y, dashed=bool(data["mtp"].any()))]
    if best is not None and len(best):
        winners = best.rename(columns={"best": "deployment"})[["concurrency", "deployment", "tps_per_gpu"]]
        winners = winners.merge(data[["deployment", "concurrency", "path", "source"]],
                                on=["deployment", "concurrency"], how="left")
        winners = winners.assign(ring="best at this concurrency")
        rings = alt.Chart(winners).mark_point(size=170, filled=False, color="#222", strokeWidth=1.4)
        layers.append(rings.encode(
            x=concurrency_axis(data["concurrency"]), y=y,
            tooltip=tooltips("ring:N", "deployment:N", "concurrency:Q", "tps_per_gpu:Q",
                             columns=winners.columns)))
    extra = ["Rings: the best topology at each concurrency. Click the legend to isolate one."]
    return alt.layer(*layers, title=heading(title or _message(best, sweep), data, source=sweep.sources,
                                            extra=extra)).properties(width=CURVE_WIDTH, height=CURVE_HEIGHT)


