"""Chapter 3's charts: CUDA-graph memory vLLM reserves against what the graphs used, and the activation peak.

Both draw the article's measurements (tables 1 and 2), so their subtitles say *Measured* and their
tooltips name the table and run of every point.
"""

from __future__ import annotations

import altair as alt
import pandas as pd

from pdtune.charts.state import named_tooltips
from pdtune.charts.style import measured_title

OVER = "estimate ≥ actual (KV cache lost)"
UNDER = "actual > estimate (reserve absorbs it)"


def _run_labels(frame: pd.DataFrame) -> pd.Series:
    return frame.apply(
        lambda r: (f"run {int(r['run'])} · {r['topology']}{' + MTP' if r['mtp'] else ''} · "
                   f"{int(r['graphs'])} graphs"),
        axis=1,
    )


def graph_memory_chart(frame: pd.DataFrame, *, title: str | None = None) -> alt.LayerChart:
    """Per run, a line from vLLM's estimate (reserved) to the graphs' actual memory.

    ``frame`` is :func:`pdtune.chapters.graphs.table2_bounds`. The line is green where the estimate covered the
    graphs (the difference is KV cache that was never used) and red where the graphs outgrew it.
    """
    required = {"run", "topology", "mtp", "graphs", "reserved_gib", "actual_gib", "estimate_covers_actual",
                "unused_gib", "unused_pct", "provenance"}
    missing = required - set(frame.columns)
    if missing:
        raise ValueError(f"table 2 frame lacks columns: {', '.join(sorted(missing))}")
    data = frame.assign(
        run_label=_run_labels(frame),
        verdict=frame["estimate_covers_actual"].map({True: OVER, False: UNDER}),
    )
    order = list(data.sort_values("run")["run_label"])
    under = [int(r) for r in data.loc[~data["estimate_covers_actual"], "run"]]
    if title is None:
        over_n = int(data["estimate_covers_actual"].sum())
        runs = " and ".join(str(r) for r in under) if under else "none"
        title = (f"The graph estimate over-reserves in {over_n} of {len(data)} runs, "
                 f"falls short in run{'s' if len(under) != 1 else ''} {runs}")
    y = alt.Y("run_label:N", sort=order, title=None, axis=alt.Axis(labelLimit=240))
    tips = named_tooltips(
        "run_label:N", "reserved_gib:Q", "actual_gib:Q", "unused_gib:Q", "unused_pct:Q", "verdict:N",
        names={"run_label": "run", "reserved_gib": "reserved = vLLM's estimate (GiB)",
               "actual_gib": "actual graph memory (GiB)", "unused_gib": "unused (GiB)",
               "unused_pct": "unused ÷ actual (%)", "verdict": "verdict"},
    )
    base = alt.Chart(data)
    rule = base.mark_rule(strokeWidth=3).encode(
        y=y,
        x=alt.X("reserved_gib:Q", title="GiB of CUDA-graph memory per engine (one GPU)"),
        x2="actual_gib:Q",
        color=alt.Color("verdict:N", title=None,
                        scale=alt.Scale(domain=[OVER, UNDER], range=["#2ca02c", "#d62728"]),
                        legend=alt.Legend(orient="bottom", columns=1, labelLimit=300)),
        tooltip=tips,
    )
    # One point per run and measure: the estimate vLLM reserved, and what capture actually took.
    long = pd.concat([
        data[["run_label", "run", "provenance", "unused_gib"]].assign(measure=name, gib=data[column])
        for name, column in (("reserved (vLLM's estimate)", "reserved_gib"),
                             ("actual (after capture)", "actual_gib"))
    ], ignore_index=True)
    points = alt.Chart(long).mark_point(filled=True, size=90).encode(
        y=y,
        x="gib:Q",
        shape=alt.Shape("measure:N", title=None, scale=alt.Scale(range=["diamond", "circle"]),
                        legend=alt.Legend(orient="bottom", columns=1, labelLimit=300)),
        fill=alt.value("#333"),
        tooltip=named_tooltips("run_label:N", "measure:N", "gib:Q", "unused_gib:Q",
                               names={"run_label": "run", "gib": "GiB", "unused_gib": "reserved - actual (GiB)"}),
    )
    return alt.layer(rule, points, title=measured_title(
        title, source="article table 2 (FULL_DECODE_ONLY graphs)",
    )).properties(width=360, height=alt.Step(28))


def activation_peak_chart(frame: pd.DataFrame, *, title: str | None = None) -> alt.Chart:
    """Table 1: activation peak per engine against ``max_num_batched_tokens``, by topology and MTP."""
    required = {"run", "topology", "mtp", "max_num_seqs", "max_num_batched_tokens", "activation_peak_gib",
                "provenance"}
    missing = required - set(frame.columns)
    if missing:
        raise ValueError(f"table 1 frame lacks columns: {', '.join(sorted(missing))}")
    data = frame.assign(mtp_label=frame["mtp"].map({True: "with MTP", False: "without MTP"}))
    if title is None:
        title = "The activation peak rises with max-num-batched-tokens, higher under TP4DP4"
    heading = measured_title(title, source="article table 1 (vLLM's profiling run)")
    return alt.Chart(data, title=heading).mark_point(
        filled=True, size=110
    ).encode(
        x=alt.X("max_num_batched_tokens:Q", title="max-num-batched-tokens (tokens in the profiling step)"),
        y=alt.Y("activation_peak_gib:Q", title="activation peak per engine (GiB, one GPU)"),
        color=alt.Color("topology:N", title="topology"),
        shape=alt.Shape("mtp_label:N", title="MTP"),
        tooltip=named_tooltips("run:Q", "topology:N", "mtp_label:N", "max_num_seqs:Q", "max_num_batched_tokens:Q",
                               "activation_peak_gib:Q",
                               names={"run": "run", "mtp_label": "MTP", "max_num_seqs": "max-num-seqs",
                                      "max_num_batched_tokens": "max-num-batched-tokens",
                                      "activation_peak_gib": "activation peak (GiB)"}),
    ).properties(width=420, height=240)
