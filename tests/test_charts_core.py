"""Chapters 1-4's chart builders: valid Vega-Lite, titles that state the message, provenance in tooltips,
a working utilization slider, and a width that fits the book's column.

Each spec is compiled by vl-convert (the same Vega-Lite the book's bundle carries) and, where the chart
computes something in Vega expressions, rendered to SVG and read back.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest
import vl_convert as vlc
from hypothesis import given, settings
from hypothesis import strategies as st

import pdtune.charts  # noqa: F401  (registers the theme the book uses)
from pdtune import article
from pdtune.capacity import scenario_waterfall, topology_capacity
from pdtune.chapters import concurrency as ch4, graphs as ch3, memory as ch2, state as ch1
from pdtune.charts.concurrency import requests_chart, topology_capacity_chart
from pdtune.charts.graphs import activation_peak_chart, graph_memory_chart
from pdtune.charts.memory import PROSE_TOGGLE, kv_left_gib, slider_name, waterfall_chart
from pdtune.charts.state import state_breakdown_chart
from pdtune.memory import Accounting
from pdtune.model import load_model
from pdtune.units import GiB

QWEN = load_model(article.MODEL)
LEN = article.ISL + article.OSL
#: The book's text column is about 704 px; vega-embed adds its action button beside the chart.
MAX_WIDTH = 680


def _spec(chart: Any) -> dict[str, Any]:
    return chart.to_dict()


def _svg(spec: dict[str, Any]) -> str:
    return vlc.vegalite_to_svg(spec)


def _width(svg: str) -> float:
    match = re.search(r'<svg[^>]*\swidth="([\d.]+)"', svg)
    assert match, "no width on the svg"
    return float(match.group(1))


def _title(spec: dict[str, Any]) -> tuple[str, list[str]]:
    title = spec["title"]
    subtitle = title.get("subtitle", [])
    return title["text"], [subtitle] if isinstance(subtitle, str) else list(subtitle)


def _encodings(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Every encoding block in a (possibly layered or concatenated) spec."""
    found = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if "encoding" in node:
                found.append(node["encoding"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(spec)
    return found


def _tooltip_fields(spec: dict[str, Any]) -> set[str]:
    return {t["field"] for enc in _encodings(spec) for t in enc.get("tooltip", []) if "field" in t}


def _data_rows(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [row for rows in spec.get("datasets", {}).values() for row in rows]


# --- builders -------------------------------------------------------------------------------------------


def _charts() -> dict[str, Any]:
    by_version = ch1.version_plans(QWEN, max_model_len=LEN, kv_cache_dtype="fp8", vllm="0.26.1",
                                      num_speculative_tokens=3)
    capacity = topology_capacity(
        QWEN, ["TP2DP4+EP", "TP4DP8+EP", "TEP8", "TEP16", "TP4DP4+EP"], gpu_memory_gib=276.62,
        gpu_memory_utilization=0.92, non_torch_gib=2.90, activation_peak_gib=1.83, cudagraph_estimate_gib=8.29,
        max_model_len=LEN, kv_cache_dtype="fp8", vllm="0.26.1", num_speculative_tokens=3)
    return {
        "state": state_breakdown_chart(ch1.state_breakdowns(by_version)),
        "waterfall": waterfall_chart(_waterfall_frame(), measured="article table 3, run 7", modeled="weights"),
        "activation": activation_peak_chart(ch3.table1_checked()),
        "graphs": graph_memory_chart(ch3.table2_bounds()),
        "requests": requests_chart(ch4.requests_comparison()),
        "topologies": topology_capacity_chart(capacity, model=QWEN.name),
    }


def _waterfall_frame():
    modeled = scenario_waterfall(
        QWEN, topology="TP4DP4+EP", gpu_memory_gib=276.62, gpu_memory_utilization=0.92, non_torch_gib=2.90,
        activation_peak_gib=1.83, cudagraph_estimate_gib=8.29, mtp=False, vllm="0.26.1")
    ws = {"run 7": article.article_waterfall(7), "modeled": modeled}
    per = {"run 7": article.article_plan().bytes_per_request, "modeled": article.article_plan().bytes_per_request}
    return ch2.waterfall_frame(ws, accounting=Accounting.ARTICLE_PROSE, bytes_per_request=per)


CHARTS = _charts()


@pytest.mark.parametrize("name", sorted(CHARTS))
def test_valid_vega_lite_with_message_title_and_provenance(name: str) -> None:
    spec = _spec(CHARTS[name])
    vega = vlc.vegalite_to_vega(spec)  # raises on an invalid Vega-Lite spec
    assert vega["$schema"].startswith("https://vega.github.io/schema/vega/")
    text, subtitle = _title(spec)
    assert len(text) > 20, "the title states the chart's message"
    assert any(line.startswith(("Modeled", "Measured")) for line in subtitle), "modeled or measured, says which"
    assert "provenance" in _tooltip_fields(spec)


@pytest.mark.parametrize("name", sorted(CHARTS))
def test_fits_the_book_column(name: str) -> None:
    assert _width(_svg(_spec(CHARTS[name]))) <= MAX_WIDTH


def test_state_chart_fields_and_totals() -> None:
    spec = _spec(CHARTS["state"])
    fields = {enc["x"]["field"] for enc in _encodings(spec) if "x" in enc}
    assert {"mib", "mib_per_request"} <= fields
    rows = _data_rows(spec)
    by_scenario: dict[str, float] = {}
    for r in rows:
        by_scenario[r["scenario"]] = by_scenario.get(r["scenario"], 0.0) + r["mib"]
    totals = {r["scenario"]: r["mib_per_request"] for r in rows}
    assert by_scenario == pytest.approx(totals)
    assert "759 to 2,346 MiB per request" in _title(spec)[0]


def test_state_chart_rejects_a_frame_without_parts() -> None:
    import pandas as pd

    with pytest.raises(ValueError, match="lacks columns"):
        state_breakdown_chart(pd.DataFrame({"scenario": ["x"]}))


# --- the waterfall's slider -----------------------------------------------------------------------------


def _with_params(spec: dict[str, Any], **values: Any) -> dict[str, Any]:
    out = copy.deepcopy(spec)
    for param in out.get("params", []):
        if param["name"] in values:
            param["value"] = values[param["name"]]
    return out


def _kv_labels(svg: str) -> list[float]:
    # The KV cache bar's label: "133.96 GiB  ≈ 180.7 requests"
    return [float(v.replace(",", "")) for v in re.findall(r"([\d,]+\.\d\d) GiB  ≈", svg)]


def test_slider_parameter_is_bound_to_a_range_input() -> None:
    spec = _spec(CHARTS["waterfall"])
    params = {p["name"]: p for p in spec["params"]}
    slider = slider_name(0)
    assert params[slider]["value"] == 0.92
    assert params[slider]["bind"]["input"] == "range"
    assert 0.5 <= params[slider]["bind"]["min"] < params[slider]["bind"]["max"] <= 1.0
    assert params[PROSE_TOGGLE]["bind"]["input"] == "checkbox"
    # the reserve is recomputed from the parameter in a Vega expression
    assert slider in json.dumps(spec["vconcat"][0])


def test_each_panel_slider_starts_at_its_own_utilization() -> None:
    """A reader's 0.9 next to the article's 0.92: each panel's bar and the sentence under it agree."""
    modeled = scenario_waterfall(
        QWEN, topology="TP4DP4+EP", gpu_memory_gib=139.81, gpu_memory_utilization=0.9, non_torch_gib=2.90,
        activation_peak_gib=1.83, cudagraph_estimate_gib=8.29, mtp=False, vllm="0.33")
    ws = {"run 7": article.article_waterfall(7), "yours": modeled}
    per = {name: article.article_plan().bytes_per_request for name in ws}
    frame = ch2.waterfall_frame(ws, accounting=Accounting.ARTICLE_PROSE, bytes_per_request=per)
    spec = _spec(waterfall_chart(frame, focus="yours", measured="table 3", modeled="weights"))
    params = {p["name"]: p["value"] for p in spec["params"]}
    assert params[slider_name(0)] == 0.92 and params[slider_name(1)] == 0.9
    labels = set(_kv_labels(_svg(spec)))
    assert round(modeled.kv_cache() / GiB, 2) in labels
    assert f"{modeled.kv_cache() / GiB:,.2f} of 139.81 GiB" in _title(spec)[0]


def test_waterfall_at_the_default_matches_table_3() -> None:
    svg = _svg(_spec(CHARTS["waterfall"]))
    run7 = article.article_waterfall(7).kv_cache() / GiB
    assert round(run7, 2) in set(_kv_labels(svg))
    assert kv_left_gib(_waterfall_frame(), "run 7") == pytest.approx(run7)


@settings(max_examples=6, deadline=None)
@given(u=st.sampled_from([0.5, 0.8, 0.85, 0.9, 0.95, 0.99]))
def test_slider_moves_the_kv_cache_exactly_as_the_waterfall_does(u: float) -> None:
    """The Vega expression and pdtune.memory agree for any utilization on the slider."""
    svg = _svg(_with_params(_spec(CHARTS["waterfall"]), **{slider_name(0): u}))
    expected = article.article_waterfall(7, utilization=u).kv_cache() / GiB
    # labels print two decimals; the chart computes in GiB, pdtune in bytes
    assert any(abs(v - expected) <= 0.006 for v in _kv_labels(svg))


def test_prose_toggle_subtracts_the_cuda_context_again() -> None:
    svg = _svg(_with_params(_spec(CHARTS["waterfall"]), **{PROSE_TOGGLE: True}))
    prose = article.article_waterfall(7).kv_cache(Accounting.ARTICLE_PROSE) / GiB
    assert any(abs(v - prose) <= 0.01 for v in _kv_labels(svg))
    assert "CUDA context" in svg


# --- graphs and concurrency -----------------------------------------------------------------------------


def test_graph_chart_names_the_underestimated_runs() -> None:
    spec = _spec(CHARTS["graphs"])
    assert _title(spec)[0].endswith("runs 3 and 6")
    assert "6 of 8 runs" in _title(spec)[0]
    provenances = {r["provenance"] for r in _data_rows(spec)}
    assert "article table 2, run 6" in provenances


def test_requests_chart_compares_both_counts_per_run() -> None:
    spec = _spec(CHARTS["requests"])
    rows = _data_rows(spec)
    assert len(rows) == 16
    assert {r["measure"] for r in rows} == {"article: one GPU's KV cache ÷ 759 MiB",
                                            "vLLM 0.26.1: one engine's requests ÷ its GPUs"}
    # like with like: both bars are per GPU, so run 7 (TP4, no MTP: perfectly sharded) is the same height
    run7 = {r["measure"]: r["requests"] for r in rows if r["run"] == 7}
    assert len(set(round(v, 1) for v in run7.values())) == 1
    assert _title(spec)[0].startswith("Per GPU, vLLM holds")
    assert "÷" in spec["encoding"]["x"]["title"]  # the axis says what is divided by what


def test_topology_chart_title_names_the_best_layout() -> None:
    spec = _spec(CHARTS["topologies"])
    rows = _data_rows(spec)
    best = max(rows, key=lambda r: r["requests_per_gpu"])
    assert best["topology"] in _title(spec)[0]
