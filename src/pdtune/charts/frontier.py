"""Chapter 7: disaggregated configurations, their upper envelope, predicted against measured, the SLA pick.

Axes are the frontier's: tokens/s per user (``1000 / TPOT p50``) across, total tokens/s over all GPUs (prefill
+ decode) up. Every chart works in the static page:

* :func:`curves_chart`: one curve per configuration (a concurrency sweep of one deployment); a click on a
  legend entry isolates it; the upper envelope is drawn as a staircase of labelled points, never a line
  between two deployments (:func:`pdtune.frontier.envelope_steps`);
* :func:`sla_chart`: the envelope with a slider on the minimum tokens/s per user; the ring and the label
  show the configuration :func:`pdtune.frontier.sla_pick` would choose for the slider's value, computed in
  the page by the same rule (the envelope point with the most throughput among those at or above the floor);
* :func:`predicted_chart`: each measured configuration beside its rate-matched prediction (dashed staircase).

Tooltips name every point's deployment, concurrency and file. Modeled data says so in the subtitle.
"""

from __future__ import annotations

from collections.abc import Sequence

import altair as alt
import pandas as pd

from pdtune.chapters.frontier import Prediction
from pdtune.charts.style import column_title, tooltips
from pdtune.charts.sweeps import FADED, heading, note_chart, palette, relative_path
from pdtune.frontier import envelope_steps, upper_envelope
from pdtune.sweep import canonical_topologies, label

WIDTH = 400
HEIGHT = 320
LEGEND_NAME = "deployment_pick"
SLIDER = "min_tps_per_user"
X_TITLE = column_title("tps_per_user")
Y_TITLE = column_title("tps_per_gpu")
PICK_COLOUR = "#d62728"


def _frame(df: pd.DataFrame) -> pd.DataFrame:
    keep = ["deployment", "concurrency", "tps_per_user", "tps_per_gpu", "gpus_total", "ttft_ms_p50",
            "tpot_ms_p50", "accuracy", "source", "path", "modeled"]
    data = df[[c for c in keep if c in df.columns]].copy()
    data["deployment"] = data["deployment"].astype(str)
    if "path" in data.columns:
        data["path"] = data["path"].map(relative_path)
    if "source" in data.columns:
        data["source"] = data["source"].astype(str)
    return data


def deployment_order(df: pd.DataFrame) -> list[str]:
    """Deployments fewest GPUs first, then by label: the colour order of every chart of one sweep."""
    if len(df) == 0:
        return []
    f = df.assign(deployment=df["deployment"].astype(str))
    f = f.sort_values(["gpus_total", "deployment"], kind="stable")
    return list(dict.fromkeys(f["deployment"]))


def _legend() -> alt.Legend:
    return alt.Legend(titleLimit=320, labelLimit=220, symbolType="stroke", orient="bottom", columns=2)


def _x(domain: Sequence[float] | None = None) -> alt.X:
    scale = alt.Scale(zero=True) if domain is None else alt.Scale(domain=list(domain), nice=False)
    return alt.X("tps_per_user:Q", title=X_TITLE, scale=scale)


def _y() -> alt.Y:
    return alt.Y("tps_per_gpu:Q", title=Y_TITLE, scale=alt.Scale(zero=True))


def _point_tips(data: pd.DataFrame) -> list[alt.Tooltip]:
    return tooltips("deployment:N", "concurrency:Q", "tps_per_user:Q", "tps_per_gpu:Q", "gpus_total:Q",
                    "ttft_ms_p50:Q", "tpot_ms_p50:Q", columns=data.columns)


def _envelope_layers(env: pd.DataFrame) -> list[alt.Chart]:
    """The staircase and its labelled points."""
    steps = envelope_steps(env)
    pts = _frame(env).assign(on="upper envelope")
    line = alt.Chart(steps).mark_line(color="#111", strokeWidth=2.2, interpolate="linear").encode(
        x=_x(), y=_y(), order="order:Q",
        tooltip=[alt.Tooltip("deployment:N", title="level reached by"),
                 alt.Tooltip("concurrency:Q", title="at concurrency", format=",d"),
                 alt.Tooltip("tps_per_gpu:Q", title=Y_TITLE, format=",.4~g")])
    marks = alt.Chart(pts).mark_point(shape="diamond", size=60, filled=True, color="#111").encode(
        x=_x(), y=_y(), tooltip=tooltips("on:N", *[str(t.shorthand) for t in _point_tips(pts)],
                                         columns=pts.columns))
    return [line, marks]


def _title_curves(data: pd.DataFrame, env: pd.DataFrame | None) -> str:
    n = data["deployment"].nunique()
    if env is None or len(env) == 0:
        return f"{n} configurations, each a sweep of concurrency"
    k = env["deployment"].astype(str).nunique()
    return f"{n} configurations; the upper envelope takes its {len(env)} points from {k} of them"


def curves_chart(
    df: pd.DataFrame,
    env: pd.DataFrame | None = None,
    *,
    title: str | None = None,
    source: str = "",
    note: str = "No disaggregated sweep.",
) -> alt.TopLevelMixin:
    """One curve per configuration (points joined in order of concurrency), the envelope on top."""
    if len(df) == 0:
        return note_chart(note, title="No disaggregated sweep")
    data = _frame(df)
    order = deployment_order(df)
    pick = alt.selection_point(fields=["deployment"], bind="legend", name=LEGEND_NAME)
    curves = alt.Chart(data).mark_line(point=alt.OverlayMarkDef(size=30), strokeWidth=1.6).encode(
        x=_x(), y=_y(), order="concurrency:Q",
        color=alt.Color("deployment:N", scale=palette(order), title="configuration (click to isolate)",
                        legend=_legend()),
        opacity=alt.condition(pick, alt.value(1.0), alt.value(FADED)),
        tooltip=_point_tips(data),
    ).add_params(pick)
    layers = [curves] + (_envelope_layers(env) if env is not None and len(env) else [])
    extra = ["Black staircase: the upper envelope; each step belongs to the deployment named on it."]
    return alt.layer(*layers, title=heading(title or _title_curves(data, env), data, source=source,
                                            extra=extra)).properties(width=WIDTH + 160, height=HEIGHT)


def sla_chart(
    df: pd.DataFrame,
    env: pd.DataFrame,
    *,
    min_tps_per_user: float,
    title: str | None = None,
    source: str = "",
    note: str = "No disaggregated sweep.",
) -> alt.TopLevelMixin:
    """The envelope with a slider on the minimum tokens/s per user; the ring marks the configuration that
    delivers the most tokens/s per GPU at or above the slider (what :func:`pdtune.frontier.sla_pick` picks).
    """
    if len(df) == 0 or len(env) == 0:
        return note_chart(note, title="No disaggregated sweep")
    data = _frame(df)
    pts = _frame(env)
    lo = 0.0
    hi = float(max(data["tps_per_user"].max(), min_tps_per_user)) * 1.05
    step = 1.0 if hi > 50 else 0.1
    floor = alt.param(name=SLIDER, value=float(min_tps_per_user),
                      bind=alt.binding_range(min=lo, max=round(hi), step=step,
                                             name="minimum output tokens/s per user "))
    background = alt.Chart(data).mark_line(strokeWidth=1, color="#bbb").encode(
        x=_x(), y=_y(), detail="deployment:N", order="concurrency:Q", tooltip=_point_tips(data))
    layers = [background, *_envelope_layers(env)]
    rule = alt.Chart(pd.DataFrame({"at": [0]})).transform_calculate(floor=SLIDER).mark_rule(
        color=PICK_COLOUR, strokeDash=[4, 3]).encode(x=alt.X("floor:Q"))
    chosen = (alt.Chart(pts)
              .transform_filter(f"datum.tps_per_user >= {SLIDER}")
              .transform_joinaggregate(best="max(tps_per_gpu)")
              .transform_filter("datum.tps_per_gpu == datum.best")
              .transform_calculate(picked="'the SLA pick'"))
    ring = chosen.mark_point(size=420, filled=False, strokeWidth=3, color=PICK_COLOUR).encode(
        x=_x(), y=_y(), tooltip=tooltips("picked:N", *[str(t.shorthand) for t in _point_tips(pts)],
                                         columns=[*pts.columns, "picked"]))
    label = chosen.transform_calculate(
        text=(f"'≥ ' + format({SLIDER}, ',.0f') + ' tok/s/user → ' + datum.deployment"
              " + ', concurrency ' + format(datum.concurrency, ',d')"
              " + ': ' + format(datum.tps_per_gpu, ',.0f') + ' tok/s/GPU'")
    ).mark_text(align="right", baseline="top", fontSize=12, fontWeight="bold", color=PICK_COLOUR).encode(
        x=alt.value(WIDTH + 160 - 4), y=alt.value(4), text="text:N")
    nothing = (alt.Chart(pts)
               .transform_joinaggregate(most="max(tps_per_user)")
               .transform_filter(f"datum.tps_per_user == datum.most && datum.most < {SLIDER}")
               .transform_calculate(text=("'nothing reaches ' + format(" + SLIDER + ", ',.0f') + "
                                          "' tok/s/user (best: ' + format(datum.most, ',.1f') + ')'"))
               .mark_text(align="right", baseline="top", fontSize=12, fontWeight="bold", color=PICK_COLOUR)
               .encode(x=alt.value(WIDTH + 160 - 4), y=alt.value(4), text="text:N"))
    layers += [rule, ring, label, nothing]
    text = title or "The SLA pick: slide the floor on tokens/s per user"
    extra = ["Grey: each configuration; black: the envelope; red: the floor and the pick (ring)."]
    chart = alt.layer(*layers, title=heading(text, data, source=source, extra=extra)).add_params(floor)
    return chart.properties(width=WIDTH + 160, height=HEIGHT)


def predicted_chart(prediction: Prediction, measured: pd.DataFrame, *, title: str | None = None,
                    source: str = "") -> alt.TopLevelMixin:
    """Each measured configuration (solid, points) beside the staircase rate matching predicts for it
    from the isolated sweeps (dashed). The legend isolates a configuration."""
    if not prediction.available or len(prediction.same) == 0:
        return note_chart(prediction.note or "Nothing to compare.", title="No prediction")
    shown = set(prediction.same["deployment"].astype(str))
    meas = label(canonical_topologies(measured))
    meas = _frame(meas[meas["deployment"].isin(shown)]).assign(kind="disaggregated sweep")
    steps = [envelope_steps(upper_envelope(rows), from_zero=False).assign(deployment=str(dep))
             for dep, rows in prediction.same.groupby("deployment", sort=False, observed=True)]
    pred = pd.concat(steps, ignore_index=True).assign(
        kind="predicted by rate matching", source="pdtune.frontier.rate_match of the isolated sweeps")
    order = deployment_order(meas)
    order += sorted(shown - set(order))
    pick = alt.selection_point(fields=["deployment"], bind="legend", name=LEGEND_NAME)
    color = alt.Color("deployment:N", scale=palette(order), title="configuration (click to isolate)",
                      legend=_legend())
    dash = alt.StrokeDash("kind:N", legend=None, scale=alt.Scale(
        domain=["disaggregated sweep", "predicted by rate matching"], range=[[1, 0], [5, 3]]))
    opacity = alt.condition(pick, alt.value(1.0), alt.value(FADED))
    solid = alt.Chart(meas).mark_line(point=alt.OverlayMarkDef(size=30), strokeWidth=1.6).encode(
        x=_x(), y=_y(), order="concurrency:Q", color=color, strokeDash=dash, opacity=opacity,
        tooltip=tooltips("kind:N", *[str(t.shorthand) for t in _point_tips(meas)], columns=meas.columns),
    ).add_params(pick)
    dashed = alt.Chart(pred).mark_line(strokeWidth=1.6).encode(
        x=_x(), y=_y(), order="order:Q", detail="deployment:N", color=color, strokeDash=dash, opacity=opacity,
        tooltip=[alt.Tooltip("kind:N", title="line"), alt.Tooltip("deployment:N", title="deployment"),
                 alt.Tooltip("concurrency:Q", title="predicted concurrency (Little's law)", format=",.1f"),
                 alt.Tooltip("tps_per_user:Q", title=X_TITLE, format=",.4~g"),
                 alt.Tooltip("tps_per_gpu:Q", title=Y_TITLE, format=",.4~g"),
                 alt.Tooltip("source:N", title="source")])
    text = title or "Rate matching from the isolated sweeps, against the sweep"
    extra = ["Solid with points: the disaggregated sweep; dashed: rate matching's prediction."]
    return alt.layer(solid, dashed, title=heading(text, meas, source=source, extra=extra)).properties(
        width=WIDTH + 160, height=HEIGHT)
