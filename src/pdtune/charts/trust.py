"""Measured beside modeled: the performance model's predictions drawn against real vLLM measurements.

* :func:`parity_chart` (chapter 8): every scored row, the prediction (up) against the measurement (across), log
  scales, the line of perfect prediction and a band of ±20 %;
* :func:`sweep_compare_chart` (chapters 5 and 6): one measured sweep (a model on a GPU at one ISL/OSL, picked
  from a menu) against concurrency, one colour per topology: measured points, the model's prediction dashed.

Both carry two subtitle lines, one saying which marks are measured and where from, one saying which are
modeled and by what, so that neither kind can pass for the other.
"""

from __future__ import annotations

import altair as alt
import pandas as pd

from pdtune.charts.style import MEASURED_PREFIX, MODELED_PREFIX, PANEL_WIDTH, column_title
from pdtune.charts.sweeps import FADED, PALETTE

MEASURED_SOURCE = "aiconfigurator's silicon runs of vLLM (aggregated serving)"
MODELED_HOW = "pdtune.perfmodel with default factors fitted without the row's model"


def _title(text: str, measured: str, modeled: str) -> alt.TitleParams:
    return alt.TitleParams(text=text, anchor="start", subtitle=[
        f"{MEASURED_PREFIX} — {measured}: {MEASURED_SOURCE}",
        f"{MODELED_PREFIX} — {modeled}: {MODELED_HOW}; not a measurement",
    ])


def parity_chart(points: pd.DataFrame, *, title: str | None = None) -> alt.TopLevelMixin:
    """Predicted against measured TTFT and TPOT, one panel each, one colour per model."""
    panels = []
    for metric in ("ttft_ms_p50", "tpot_ms_p50"):
        data = points[points["predicted"]][["model_key", "gpu_name", "topology", "concurrency", "isl", "osl",
                                            f"measured_{metric}", f"predicted_{metric}", "source_id"]]
        data = data.rename(columns={f"measured_{metric}": "measured", f"predicted_{metric}": "modeled"})
        data = data.dropna(subset=["measured", "modeled"])
        lo = float(min(data["measured"].min(), data["modeled"].min())) * 0.8
        hi = float(max(data["measured"].max(), data["modeled"].max())) * 1.25
        name = column_title(metric)
        scale = alt.Scale(type="log", domain=[lo, hi], nice=False)
        x = alt.X("measured:Q", title=f"measured {name}", scale=scale)
        y = alt.Y("modeled:Q", title=f"modeled {name}", scale=scale)
        line = pd.DataFrame({"measured": [lo, hi], "modeled": [lo, hi], "band_lo": [lo / 1.2, hi / 1.2],
                             "band_hi": [lo * 1.2, hi * 1.2]})
        band = alt.Chart(line).mark_area(opacity=0.12, color="#888").encode(
            x=x, y=alt.Y("band_lo:Q", scale=scale), y2="band_hi:Q")
        diagonal = alt.Chart(line).mark_line(color="#555", strokeDash=[4, 3]).encode(x=x, y=y)
        dots = alt.Chart(data).mark_circle(size=22, opacity=0.55).encode(
            x=x, y=y, color=alt.Color("model_key:N", title="model", legend=alt.Legend(labelLimit=200)),
            tooltip=[alt.Tooltip("model_key:N", title="model"), alt.Tooltip("gpu_name:N", title="GPU"),
                     alt.Tooltip("topology:N"), alt.Tooltip("concurrency:Q", format=",d"),
                     alt.Tooltip("isl:Q", title="ISL"), alt.Tooltip("osl:Q", title="OSL"),
                     alt.Tooltip("measured:Q", title=f"measured {name}", format=",.4~g"),
                     alt.Tooltip("modeled:Q", title=f"modeled {name}", format=",.4~g"),
                     alt.Tooltip("source_id:N", title="silicon row id")])
        panels.append(alt.layer(band, diagonal, dots).properties(width=PANEL_WIDTH, height=PANEL_WIDTH,
                                                                 title=name))
    text = title or "Every row: the model's prediction against the measurement"
    sub = "Grey band: within ±20 %; dashed: a perfect prediction."
    heading = _title(text, "across", "up")
    heading.subtitle = [*heading.subtitle, sub]
    return alt.hconcat(*panels, title=heading).resolve_scale(color="shared")


def sweep_compare_chart(cases: pd.DataFrame, metric: str, *, case: str, title: str | None = None
                        ) -> alt.TopLevelMixin:
    """``metric`` (``ttft_ms_p50`` or ``tpot_ms_p50``) against concurrency for the case picked in the menu
    (``case`` first): measured points and lines, the model's prediction dashed, one colour per topology."""
    keep = ["case", "topology", "gpus_total", "concurrency", f"measured_{metric}", f"modeled_{metric}", "source_id"]
    data = cases[keep].rename(columns={f"measured_{metric}": "measured", f"modeled_{metric}": "modeled"})
    order = list(dict.fromkeys(data.sort_values(["gpus_total", "topology"], kind="stable")["topology"]))
    menu = alt.param(name="case_pick", value=case,
                     bind=alt.binding_select(options=list(dict.fromkeys(sorted(data["case"]))),
                                             name="measured sweep "))
    name = column_title(metric)
    x = alt.X("concurrency:Q", title=column_title("concurrency"), scale=alt.Scale(type="log", base=2),
              axis=alt.Axis(format=",d"))
    y = alt.Y("value:Q", title=name, scale=alt.Scale(type="log"))
    # The domain comes from the picked sweep's rows (no fixed domain), so the legend lists only the
    # topologies the menu's sweep has a line for.
    color = alt.Color("topology:N", scale=alt.Scale(range=list(PALETTE)), sort=order,
                      title="topology (click to isolate)")
    dash = alt.StrokeDash("kind:N", title="line", scale=alt.Scale(
        domain=["measured", "modeled"], range=[[1, 0], [5, 3]]))
    base = alt.Chart(data).transform_filter("datum.case == case_pick").transform_fold(
        ["measured", "modeled"], as_=["kind", "value"])
    tips = [alt.Tooltip("kind:N", title="line"), alt.Tooltip("topology:N"),
            alt.Tooltip("concurrency:Q", format=",d"), alt.Tooltip("value:Q", title=name, format=",.4~g"),
            alt.Tooltip("source_id:N", title="silicon row id")]
    pick = alt.selection_point(fields=["topology"], bind="legend", name="topology_pick")
    opacity = alt.condition(pick, alt.value(1.0), alt.value(FADED))
    lines = base.mark_line(strokeWidth=1.6).encode(x=x, y=y, color=color, strokeDash=dash, detail="topology:N",
                                                    opacity=opacity, tooltip=tips).add_params(pick)
    dots = base.transform_filter("datum.kind == 'measured'").mark_point(size=36, filled=True).encode(
        x=x, y=y, color=color, opacity=opacity, tooltip=tips)
    text = title or f"{name} against concurrency, measured and modeled"
    heading = _title(text, "solid lines with points", "dashed lines")
    heading.subtitle = [*heading.subtitle, "Pick another measured sweep in the menu under the chart; click the "
                        "legend to isolate a topology."]
    return alt.layer(lines, dots, title=heading).add_params(menu).properties(width=400, height=240)


def frontier_compare_chart(points: pd.DataFrame, frontier: pd.DataFrame, predicted: pd.DataFrame, *,
                           title: str | None = None) -> alt.TopLevelMixin:
    """A measured disaggregated frontier (solid) beside the frontier of the model's predictions of the same runs
    (dashed), for the case picked in the menu; every measured run in grey behind them."""

    def frame(df: pd.DataFrame, kind: str, prefix: str) -> pd.DataFrame:
        f = df.copy()
        f["case"] = (f["model"] + " on " + f["gpu"].str.upper() + ", ISL/OSL " + f["isl"].astype(int).astype(str)
                     + "/" + f["osl"].astype(int).astype(str))
        f["tps_per_user"] = 1000 / f[f"{prefix}_tpot_ms_p50"]
        f["tps_per_gpu"] = f[f"{prefix}_tps_per_gpu"]
        f["kind"] = kind
        return f[["case", "kind", "topology", "concurrency", "tps_per_user", "tps_per_gpu"]].dropna()

    runs = frame(points, "measured run", "measured")
    data = pd.concat([frame(frontier, "measured frontier", "measured"),
                      frame(predicted, "modeled frontier", "predicted")], ignore_index=True)
    cases = sorted(set(data["case"]))
    first = max(cases, key=lambda c: int((data["case"] == c).sum()))
    menu = alt.param(name="frontier_case", value=first,
                     bind=alt.binding_select(options=cases, name="measured runs "))
    x = alt.X("tps_per_user:Q", title=column_title("tps_per_user"))
    y = alt.Y("tps_per_gpu:Q", title=column_title("tps_per_gpu"))
    tips = [alt.Tooltip("kind:N", title="line"), alt.Tooltip("topology:N", title="deployment"),
            alt.Tooltip("concurrency:Q", format=",d"), alt.Tooltip("tps_per_user:Q", format=",.4~g"),
            alt.Tooltip("tps_per_gpu:Q", format=",.4~g")]
    grey = alt.Chart(runs).transform_filter("datum.case == frontier_case").mark_point(
        color="#aaa", size=30).encode(x=x, y=y, tooltip=tips)
    kind = alt.Color("kind:N", title="line", scale=alt.Scale(domain=["measured frontier", "modeled frontier"],
                                                            range=["#4c78a8", "#e45756"]))
    dash = alt.StrokeDash("kind:N", title="line", scale=alt.Scale(
        domain=["measured frontier", "modeled frontier"], range=[[1, 0], [5, 3]]))
    lines = alt.Chart(data).transform_filter("datum.case == frontier_case").mark_line(
        point=alt.OverlayMarkDef(size=40), strokeWidth=1.8).encode(
        x=x, y=y, color=kind, strokeDash=dash, order="tps_per_user:Q", tooltip=tips)
    heading = alt.TitleParams(text=title or "A measured frontier and the model's frontier of the same runs",
                              anchor="start", subtitle=[
                                  f"{MEASURED_PREFIX} — grey points and the solid line: aiconfigurator's silicon "
                                  "runs of vLLM (disaggregated)",
                                  f"{MODELED_PREFIX} — dashed line: pdtune.perfmodel's prediction of each run at "
                                  "its own deployment; not a measurement"])
    return alt.layer(grey, lines, title=heading).add_params(menu).properties(width=400, height=300)
