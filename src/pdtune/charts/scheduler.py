"""What the scheduler does to latency (chapter 8): simulated timelines, and a measured sweep beside its predictions.

* :func:`timeline_chart`: one simulated run over time, requests running and waiting above, the KV cache's use
  below (modeled, :mod:`pdtune.sim`);
* :func:`sweep_chart`: a measured sweep's TTFT and TPOT against concurrency (points) with pdtune's two
  predictions of it (lines: the scheduler simulation and the steady-state model), one panel each; its subtitle
  says which marks are measured and which modeled.
"""

from __future__ import annotations

import altair as alt
import pandas as pd

from pdtune.charts.style import MEASURED_PREFIX, MODELED_PREFIX, PANEL_WIDTH, WIDTH, column_title, modeled_title

REQUESTS = {"running": "running", "waiting": "waiting"}
MODELS = {"simulated": "simulated (pdtune.sim)", "steady-state": "steady-state model"}


def timeline_chart(frame: pd.DataFrame, *, title: str, how: str) -> alt.TopLevelMixin:
    """``frame`` (:func:`pdtune.chapters.scheduler.timeline`): requests and KV use against time."""
    requests = frame.melt(id_vars=["t_s"], value_vars=list(REQUESTS), var_name="queue", value_name="requests")
    x = alt.X("t_s:Q", title="time since the first request (s)")
    top = alt.Chart(requests).mark_line(interpolate="step-after").encode(
        x=x, y=alt.Y("requests:Q", title="requests (mean per slice)"),
        color=alt.Color("queue:N", title="vLLM's queue", sort=list(REQUESTS)),
        tooltip=[alt.Tooltip("t_s:Q", title="time (s)", format=".2f"), alt.Tooltip("queue:N"),
                 alt.Tooltip("requests:Q", format=".1f")],
    ).properties(width=WIDTH, height=150)
    kv = alt.Chart(frame).mark_area(opacity=0.35, color="#6a51a3", interpolate="step-after").encode(
        x=x, y=alt.Y("kv_used_pct:Q", title="KV cache used (%)", scale=alt.Scale(domain=[0, 100])),
        tooltip=[alt.Tooltip("t_s:Q", title="time (s)", format=".2f"),
                 alt.Tooltip("kv_used_pct:Q", title="KV used (%)", format=".0f")],
    ).properties(width=WIDTH, height=90)
    return alt.vconcat(top, kv).properties(title=modeled_title(title, how=how)).resolve_scale(color="independent")


def sweep_chart(frame: pd.DataFrame, *, title: str, source: str, how: str) -> alt.TopLevelMixin:
    """``frame`` (:func:`pdtune.chapters.scheduler.measured_sweep`): measured points, both predictions as lines."""
    panels = []
    for metric in ("ttft_ms_p50", "tpot_ms_p50"):
        measured = frame[["concurrency", f"measured_{metric}"]].rename(columns={f"measured_{metric}": "ms"})
        modeled = pd.concat([frame[["concurrency", f"{m}_{metric}"]].rename(columns={f"{m}_{metric}": "ms"})
                             .assign(model=label) for m, label in MODELS.items()], ignore_index=True)
        x = alt.X("concurrency:Q", title=column_title("concurrency"), scale=alt.Scale(type="log", base=2))
        y = alt.Y("ms:Q", title=column_title(metric), scale=alt.Scale(type="log"))
        lines = alt.Chart(modeled).mark_line(strokeDash=[5, 3], point=True).encode(
            x=x, y=y, color=alt.Color("model:N", title="modeled by"),
            tooltip=[alt.Tooltip("model:N"), alt.Tooltip("concurrency:Q"), alt.Tooltip("ms:Q", format=",.4~g")])
        dots = alt.Chart(measured).mark_circle(size=70, color="black").encode(
            x=x, y=y, tooltip=[alt.Tooltip("concurrency:Q"),
                               alt.Tooltip("ms:Q", title=f"measured {column_title(metric)}", format=",.4~g")])
        panels.append(alt.layer(lines, dots).properties(width=PANEL_WIDTH, height=PANEL_WIDTH,
                                                        title=column_title(metric)))
    return alt.hconcat(*panels).properties(title=alt.TitleParams(text=title, anchor="start", subtitle=[
        f"{MEASURED_PREFIX} — black dots: {source}",
        f"{MODELED_PREFIX} — dashed lines: {how}; not a measurement",
    ]))
