"""Chapter 4's charts: requests per GPU under the article's arithmetic and under vLLM's accounting.

The article divides one GPU's KV cache by the whole model's unsharded request (759 MiB): requests per GPU,
though it calls them per engine. vLLM divides the same KV cache into blocks of one TP rank's shard, counts
blocks per request with MTP's extra states and draft layer, and admits that many requests per engine of
TP GPUs. The first chart sets the two side by side per run of table 3, both per GPU; the second shows the
reader's decode topologies, per GPU.
"""

from __future__ import annotations

import altair as alt
import pandas as pd

from pdtune.charts.state import named_tooltips
from pdtune.charts.style import MEASURED_PREFIX, MODELED_PREFIX, modeled_title, ratio_title


def requests_chart(frame: pd.DataFrame, *, title: str | None = None) -> alt.Chart:
    """Grouped bars per run, both per GPU: the article's column and vLLM's max concurrency over the engine's GPUs.

    ``frame`` is :func:`pdtune.chapters.concurrency.requests_comparison`.
    """
    required = {"run", "run_label", "measure", "requests", "mib_per_request", "provenance"}
    missing = required - set(frame.columns)
    if missing:
        raise ValueError(f"requests frame lacks columns: {', '.join(sorted(missing))}")
    measures = list(dict.fromkeys(frame["measure"]))
    wide = frame.pivot_table(index="run", columns="measure", values="requests", sort=False)
    ratio = (wide[measures[-1]] / wide[measures[0]]) if len(measures) > 1 else None
    if title is None and ratio is not None:
        title = (f"Per GPU, vLLM holds {ratio.min():.2f} to {ratio.max():.2f}x "
                 "the article's requests")
    order = list(dict.fromkeys(frame.sort_values("run")["run_label"]))
    subtitle = [
        f"{MEASURED_PREFIX} — KV cache per GPU and the article's column: article table 3",
        f"{MODELED_PREFIX} — vLLM's block accounting (pdtune.state); not a measurement",
    ]
    heading = alt.TitleParams(title or "Requests per GPU", subtitle=subtitle, anchor="start")
    return alt.Chart(frame, title=heading).mark_bar().encode(
        y=alt.Y("run_label:N", sort=order, title=None, axis=alt.Axis(labelLimit=200)),
        yOffset=alt.YOffset("measure:N", sort=measures),
        x=alt.X("requests:Q", title=ratio_title("concurrent requests", "GPU")),
        color=alt.Color("measure:N", sort=measures, title=None,
                        legend=alt.Legend(orient="bottom", columns=1, labelLimit=300),
                        scale=alt.Scale(range=["#9e9e9e", "#1f77b4"])),
        tooltip=named_tooltips("run_label:N", "measure:N", "requests:Q", "mib_per_request:Q",
                               names={"run_label": "run", "measure": "counted as",
                                      "requests": "requests per GPU",
                                      "mib_per_request": "MiB per request (divisor)"}),
    ).properties(width=460, height=alt.Step(16))


def topology_capacity_chart(frame: pd.DataFrame, *, model: str, title: str | None = None) -> alt.Chart:
    """Requests per GPU for each decode topology, with and without MTP
    (``pdtune.capacity.topology_capacity``)."""
    required = {"topology", "mtp", "requests_per_gpu", "requests_per_engine", "kv_cache_gib", "weights_gib",
                "engines", "gpus"}
    missing = required - set(frame.columns)
    if missing:
        raise ValueError(f"topology frame lacks columns: {', '.join(sorted(missing))}")
    data = frame.dropna(subset=["requests_per_gpu"]).assign(
        mtp_label=lambda f: f["mtp"].map({True: "with MTP", False: "without MTP"}),
        provenance=lambda f: [f"pdtune.capacity.topology_capacity, {model} {t}" for t in f["topology"]],
    )
    if title is None and not data.empty:
        best = data.loc[data["requests_per_gpu"].idxmax()]
        title = (f"{model}: most requests per GPU with {best['topology']} {best['mtp_label']} "
                 f"({best['requests_per_gpu']:,.1f})")
    order = list(dict.fromkeys(data["topology"]))
    return alt.Chart(data, title=modeled_title(
        title or f"{model}: no topology fits", how="weights from the config, other parts from the parameters"
    )).mark_bar().encode(
        y=alt.Y("topology:N", sort=order, title=None),
        yOffset=alt.YOffset("mtp_label:N"),
        x=alt.X("requests_per_gpu:Q", title=ratio_title("concurrent requests of the deployment", "its GPUs")),
        color=alt.Color("mtp_label:N", title=None, legend=alt.Legend(orient="bottom")),
        tooltip=named_tooltips(
            "topology:N", "mtp_label:N", "gpus:Q", "engines:Q", "weights_gib:Q", "kv_cache_gib:Q",
            "requests_per_engine:Q", "requests_per_gpu:Q",
            names={"mtp_label": "MTP", "gpus": "GPUs", "engines": "engines (DP)",
                   "weights_gib": "weights per GPU (GiB)",
                   "kv_cache_gib": "KV cache per GPU (GiB)", "requests_per_engine": "requests per engine (vLLM)",
                   "requests_per_gpu": "requests per GPU"},
        ),
    ).properties(width=440, height=alt.Step(18))
