"""Chapter 2's chart: one GPU's memory as a waterfall from the box to the KV cache, with a slider.

Each panel has its own slider, an Altair parameter (``gpu_memory_utilization_1``, ``_2``, ...; see
:func:`slider_name`) bound to a range input that starts at that scenario's own utilization, so it works in
the static book: the chart recomputes every bar in Vega expressions. Only the reserve depends on the
utilization (``total x (1 - u)``); the steps below it shift, and the KV cache bar grows or shrinks by
exactly what the reserve gives back. A checkbox subtracts the CUDA context a second time, as the
article's prose does, to show why its 248 GiB is not what vLLM computes.

The input is :func:`pdtune.chapters.memory.waterfall_frame` (one row per bar, in order, per scenario) built with
``Accounting.ARTICLE_PROSE`` so that the CUDA-context row exists for the checkbox to switch on.
"""

from __future__ import annotations

import altair as alt
import pandas as pd

from pdtune.charts.state import named_tooltips
from pdtune.charts.style import MEASURED_PREFIX, MODELED_PREFIX

SLIDER = "gpu_memory_utilization"
PROSE_TOGGLE = "subtract_cuda_context"

#: Bar colours by role: levels grey, the reserve amber, what vLLM measures blue, weights dark blue.
ROLE_COLORS: dict[str, str] = {
    "what is left": "#9e9e9e",
    "driver and unexplained": "#c7c7c7",
    "reserve (1 - utilization)": "#f0a202",
    "CUDA context (prose only)": "#d62728",
    "measured overhead": "#6baed6",
    "weights": "#08519c",
    "KV cache": "#2ca02c",
    "KV cache < 0: will not start": "#b10026",
}

_REQUIRED = {"scenario", "scenario_order", "order", "key", "label", "kind", "delta_gib", "start_gib", "total_gib",
             "utilization", "mib_per_request", "provenance"}


def _role_expr() -> str:
    return (
        "datum.kind === 'kv' ? (datum.left_gib < 0 ? 'KV cache < 0: will not start' : 'KV cache') : "
        "datum.kind === 'level' ? 'what is left' : "
        "datum.kind === 'reserve' ? 'reserve (1 - utilization)' : "
        "datum.key === 'cuda_context' ? 'CUDA context (prose only)' : "
        "datum.key === 'weights' ? 'weights' : "
        "(datum.key === 'driver' || datum.key === 'unexplained') ? 'driver and unexplained' : 'measured overhead'"
    )


def kv_left_gib(frame: pd.DataFrame, scenario: str) -> float:
    """The KV cache a scenario's rows leave at their own utilization (what the chart shows before a slide)."""
    rows = frame[(frame["scenario"] == scenario) & (frame["key"] != "cuda_context")]  # the toggle starts off
    return float(rows["start_gib"].iloc[0] - rows["delta_gib"].sum())


def slider_name(panel: int) -> str:
    """The utilization parameter of the ``panel``-th waterfall (0-based): one slider per scenario."""
    return f"{SLIDER}_{panel + 1}"


def default_title(frame: pd.DataFrame, scenario: str | None = None) -> str:
    """What is left for the KV cache in ``scenario`` (default: the first) at its own utilization."""
    first = scenario or frame.sort_values("scenario_order")["scenario"].iloc[0]
    rows = frame[frame["scenario"] == first]
    return (f"{kv_left_gib(frame, first):,.2f} of {rows['total_gib'].iloc[0]:,.2f} GiB is left for the KV cache "
            f"at utilization {rows['utilization'].iloc[0]:g}")


def waterfall_chart(
    frame: pd.DataFrame,
    *,
    title: str | None = None,
    focus: str | None = None,
    measured: str | None = None,
    modeled: str | None = None,
    slider_min: float = 0.5,
    slider_max: float = 0.99,
) -> alt.VConcatChart:
    """One waterfall per scenario, stacked vertically, each with its own utilization slider.

    Every slider starts at its scenario's utilization, so each panel first shows what its scenario gives.
    The title states the KV cache of ``focus`` (default: the first scenario). ``measured`` and ``modeled``
    describe where the scenarios' numbers come from; they become the subtitle lines ("Measured — ...",
    "Modeled — ...; not a measurement").
    """
    missing = _REQUIRED - set(frame.columns)
    if missing:
        raise ValueError(f"waterfall frame lacks columns: {', '.join(sorted(missing))}")
    prose = alt.param(
        name=PROSE_TOGGLE,
        value=False,
        bind=alt.binding_checkbox(name="subtract the CUDA context again, as the article's prose does "),
    )
    scenarios = list(dict.fromkeys(frame.sort_values("scenario_order")["scenario"]))
    x_max = float(frame["start_gib"].max()) * 1.05
    panels = []
    for i, scenario in enumerate(scenarios):
        data = frame[frame["scenario"] == scenario]
        name = slider_name(i)
        u = alt.param(
            name=name,
            value=float(data["utilization"].iloc[0]),
            bind=alt.binding_range(min=slider_min, max=slider_max, step=0.01,
                                   name=f"gpu_memory_utilization, panel {i + 1} "),
        )
        base = (
            alt.Chart(data, title=alt.TitleParams(scenario, fontSize=13, anchor="start"))
            .transform_filter(f"datum.key !== 'cuda_context' || {PROSE_TOGGLE}")
            .transform_calculate(
                # The reserve is the only step the slider moves: total x (1 - u), in GiB like the rest.
                step_gib=f"datum.kind === 'reserve' ? datum.total_gib * (1 - {name}) : datum.delta_gib"
            )
            .transform_window(taken_gib="sum(step_gib)", sort=[alt.SortField("order")], frame=[None, 0])
            .transform_calculate(left_gib="datum.start_gib - datum.taken_gib")
            .transform_calculate(
                x0="datum.kind === 'level' || datum.kind === 'kv' ? 0 : datum.left_gib",
                x1=("datum.kind === 'level' || datum.kind === 'kv' ? datum.left_gib "
                    ": datum.left_gib + datum.step_gib"),
                shown_gib="datum.kind === 'level' || datum.kind === 'kv' ? datum.left_gib : datum.step_gib",
                requests=("datum.kind === 'kv' && datum.mib_per_request > 0 ? "
                          "datum.left_gib * 1024 / datum.mib_per_request : null"),
                role=_role_expr(),
            )
            .transform_calculate(
                value_text=("format(datum.shown_gib, ',.2f') + ' GiB' + "
                            "(datum.requests !== null ? "
                            "'  ≈ ' + format(datum.requests, ',.1f') + ' requests' : '')")
            )
        )
        y = alt.Y("label:N", sort=alt.SortField("order"), title=None, axis=alt.Axis(labelLimit=220))
        bars = base.mark_bar().encode(
            y=y,
            x=alt.X("x0:Q", title="GiB of one GPU's memory" if i == len(scenarios) - 1 else None,
                    scale=alt.Scale(domain=[0, x_max], clamp=False)),
            x2="x1:Q",
            # The y labels already name every bar; colour only groups them, so no legend.
            color=alt.Color("role:N", scale=alt.Scale(domain=list(ROLE_COLORS), range=list(ROLE_COLORS.values())),
                            legend=None),
            tooltip=named_tooltips(
                "label:N", "shown_gib:Q", "left_gib:Q", "requests:Q",
                names={"label": "bar", "shown_gib": "GiB", "left_gib": "GiB left after this bar",
                       "requests": "requests (KV cache ÷ MiB per request)"},
            ),
        )
        text = base.mark_text(align="left", dx=4, fontSize=11).encode(
            y=y,
            x=alt.X("x1:Q"),
            text="value_text:N",
        )
        layer = alt.layer(bars, text).properties(width=250, height=alt.Step(20))
        panels.append(layer.add_params(u, prose) if i == 0 else layer.add_params(u))
    subtitle = []
    if measured:
        subtitle.append(f"{MEASURED_PREFIX} — {measured}")
    if modeled:
        subtitle.append(f"{MODELED_PREFIX} — {modeled}; not a measurement")
    subtitle.append("Slide (one slider per panel, each starting at its own utilization): only the reserve "
                    "moves; the KV cache takes up the difference.")
    heading = alt.TitleParams(title or default_title(frame, focus), subtitle=subtitle, anchor="start")
    return alt.vconcat(*panels, title=heading).resolve_scale(
        color="shared", x="shared")
