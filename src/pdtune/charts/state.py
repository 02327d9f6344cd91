"""Chapter 1's chart: what one request pins in the KV cache, by layer kind and state part.

The input is :func:`pdtune.chapters.state.state_breakdowns`: one row per (scenario, part) with bytes and MiB.
Every part keeps its colour across charts (attention blues, recurrent oranges, padding greys), so the
version comparison and the TP sweep read the same way.
"""

from __future__ import annotations

import altair as alt
import pandas as pd

from pdtune.chapters.state import STATE_PARTS
from pdtune.charts.style import modeled_title, ratio_title, tooltips

#: One colour per part of :data:`pdtune.chapters.state.STATE_PARTS`, in the same order.
PART_COLORS: tuple[str, ...] = ("#1f77b4", "#9ecae1", "#6a51a3", "#fdae6b", "#e6550d", "#bdbdbd", "#636363")

_HOW = "pdtune.state's reading of vLLM's KV cache planner"


def named_tooltips(
    *fields: str, names: dict[str, str], provenance: tuple[str, ...] = ("provenance",)
) -> list[alt.Tooltip]:
    """:func:`pdtune.charts.style.tooltips` with readable titles for this module's column names.

    The chapters' frames use short column names (``mib``, ``kv_cache_gib``); a tooltip should say
    "MiB" and "KV cache (GiB)". Fields not in ``names`` keep the shared titles.
    """
    tips = tooltips(*fields, provenance=provenance)
    for tip in tips:
        field = str(tip.shorthand).split(":", 1)[0]
        if field in names:
            tip.title = names[field]
    return tips


def _part_scale(frame: pd.DataFrame) -> alt.Scale:
    present = [p for p in STATE_PARTS if p in set(frame["part"])]
    colors = dict(zip(STATE_PARTS, PART_COLORS, strict=True))
    return alt.Scale(domain=present, range=[colors[p] for p in present])


def default_title(frame: pd.DataFrame) -> str:
    """The chart's message from its data: how far the bytes per request range across the scenarios."""
    totals = frame.groupby("scenario", sort=False)["mib_per_request"].first()
    model = frame["model"].iloc[0] if "model" in frame.columns else "one model"
    if len(totals) == 1 or totals.min() == totals.max():
        return f"{model}: {totals.iloc[0]:,.0f} MiB per request"
    return f"{model}: {totals.min():,.0f} to {totals.max():,.0f} MiB per request across these settings"


def state_breakdown_chart(
    frame: pd.DataFrame,
    *,
    title: str | None = None,
    scope: str = "one TP rank",
) -> alt.LayerChart:
    """Stacked bars, one per scenario: MiB one request holds, coloured by part.

    ``frame`` comes from :func:`pdtune.chapters.state.state_breakdowns`; ``scope`` says whose bytes these are
    (the axis title divides by the request and names the scope).
    """
    required = {"scenario", "scenario_order", "part", "layer_kind", "layers", "pages", "bytes", "mib",
                "mib_per_request", "provenance"}
    missing = required - set(frame.columns)
    if missing:
        raise ValueError(f"state breakdown frame lacks columns: {', '.join(sorted(missing))}")
    order = {p: i for i, p in enumerate(STATE_PARTS)}
    data = frame.assign(part_order=frame["part"].map(order))
    scenarios = list(dict.fromkeys(data.sort_values("scenario_order")["scenario"]))
    y = alt.Y("scenario:N", sort=scenarios, title=None, axis=alt.Axis(labelLimit=260))
    base = alt.Chart(data)
    bars = base.mark_bar().encode(
        y=y,
        x=alt.X("sum(mib):Q", title=ratio_title("MiB of KV cache", "request", unit=scope), stack="zero"),
        color=alt.Color("part:N", scale=_part_scale(data), title="state part",
                        legend=alt.Legend(orient="bottom", columns=2, labelLimit=260)),
        order=alt.Order("part_order:Q"),
        tooltip=named_tooltips("scenario:N", "part:N", "layer_kind:N", "layers:Q", "pages:Q", "mib:Q", "bytes:Q",
                               names={"layer_kind": "layer kind", "layers": "layers (slots)",
                                      "pages": "pages (layer x block)", "mib": "MiB", "bytes": "bytes"}),
    )
    totals = base.mark_text(align="left", dx=4, fontSize=11).encode(
        y=y,
        x=alt.X("max(mib_per_request):Q"),
        text=alt.Text("max(mib_per_request):Q", format=",.1f"),
    )
    return alt.layer(bars, totals, title=modeled_title(title or default_title(data), how=_HOW)).properties(
        width=330, height=alt.Step(30))


def state_vs_tokens_chart(frame: pd.DataFrame, *, title: str | None = None) -> alt.Chart:
    """MiB one request takes against its length, one line per model (log-log): attention-only models grow in
    proportion, a hybrid starts higher and grows slower. ``frame`` is :func:`pdtune.chapters.state.length_sweep`."""
    text = title or "Attention state grows with every token; a hybrid's recurrent part does not"
    return alt.Chart(frame, title=modeled_title(text, how=_HOW)).mark_line(point=True).encode(
        x=alt.X("tokens:Q", scale=alt.Scale(type="log", base=2), title="tokens per request (max_model_len)"),
        y=alt.Y("mib_per_request:Q", scale=alt.Scale(type="log"),
                title=ratio_title("MiB of KV cache", "request", unit="TP=1")),
        color=alt.Color("model:N", title="model", legend=alt.Legend(orient="bottom", labelLimit=260)),
        strokeDash=alt.StrokeDash("kind:N", title="layers"),
        tooltip=named_tooltips("model:N", "kind:N", "tokens:Q", "mib_per_request:Q",
                               names={"kind": "layers", "mib_per_request": "MiB per request"}),
    ).properties(width=460, height=260)
