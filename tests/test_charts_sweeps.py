"""Chapters 5-7's chart builders (pdtune.charts.sweeps and pdtune.charts.frontier): valid Vega-Lite that
vl-convert renders, a legend that isolates, tooltips naming deployment and concurrency with provenance, axis
titles that say what is divided by what, modeled or measured in the subtitle, a width that fits the book,
and an SLA slider whose in-page pick is exactly :func:`pdtune.frontier.sla_pick`'s.
"""

from __future__ import annotations

import copy
import html
import json
import re
from typing import Any

import pandas as pd
import pytest
import vl_convert as vlc

import pdtune.charts  # noqa: F401  (the book's theme)
from pdtune.capacity import kv_room
from pdtune.chapters import frontier as ch7, prefill as ch5
from pdtune.charts.frontier import SLIDER, curves_chart, predicted_chart, sla_chart
from pdtune.charts.sweeps import LEGEND_NAME, note_chart, sweep_chart
from pdtune.frontier import sla_pick
from pdtune.model import load_model
from pdtune.scenario import Scenario
from pdtune.sweep import load_sweep

S = Scenario()
MAX_WIDTH = 680  # the book's text column, with vega-embed's action button beside the chart


@pytest.fixture(scope="module")
def data() -> dict[str, Any]:
    prefill = load_sweep("prefill", S.prefill_results, topologies=S.prefill_topologies)
    decode = load_sweep("decode", S.decode_results, topologies=S.decode_topologies)
    disagg = load_sweep("disagg", S.disagg_results, canonical=True)
    room = kv_room(
        decode, load_model(S.model), gpu_memory_gib=S.gpu_memory_gib, gpu_memory_utilization=S.gpu_memory_utilization,
        non_torch_gib=S.non_torch_gib, activation_peak_gib=S.activation_peak_gib,
        cudagraph_estimate_gib=S.cudagraph_estimate_gib, kv_cache_dtype=S.kv_cache_dtype, vllm=S.vllm,
        num_speculative_tokens=S.num_speculative_tokens, isl=S.isl, osl=S.osl)
    env = ch7.envelope(disagg.frame)
    return {"prefill": prefill, "decode": decode, "disagg": disagg, "room": room, "env": env,
            "pred": ch7.predict(prefill, decode, disagg.frame, osl=S.osl, isl=S.isl, room=room),
            "real": ch7.inferencex_points()}


def _charts(d: dict[str, Any]) -> dict[str, Any]:
    best_p, best_d = ch5.best_table(d["prefill"]), ch5.best_table(d["decode"])
    real = d["real"]
    return {
        "prefill": sweep_chart(d["prefill"], best_p),
        "decode": sweep_chart(d["decode"], best_d, log_y=True),
        "curves": curves_chart(d["disagg"].frame, d["env"]),
        "sla": sla_chart(d["disagg"].frame, d["env"], min_tps_per_user=50.0),
        "predicted": predicted_chart(d["pred"], d["disagg"].frame),
        "real-curves": curves_chart(real.sweep.frame, real.envelope, source=real.source),
        "real-sla": sla_chart(real.sweep.frame, real.envelope, min_tps_per_user=50.0, source=real.source),
    }


@pytest.fixture(scope="module")
def specs(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {k: c.to_dict() for k, c in _charts(data).items()}


@pytest.fixture(scope="module")
def svgs(specs: dict[str, dict[str, Any]]) -> dict[str, str]:
    return {k: vlc.vegalite_to_svg(s) for k, s in specs.items()}


def _walk(node: Any, key: str) -> list[Any]:
    found = []
    if isinstance(node, dict):
        for k, v in node.items():
            if k == key:
                found.append(v)
            found += _walk(v, key)
    elif isinstance(node, list):
        for v in node:
            found += _walk(v, key)
    return found


def _tooltip_fields(spec: dict[str, Any]) -> set[str]:
    return {t["field"] for tips in _walk(spec, "tooltip") if isinstance(tips, list) for t in tips if "field" in t}


def _titles(spec: dict[str, Any]) -> list[str]:
    return [t for enc in _walk(spec, "encoding") for ch in ("x", "y") if isinstance(enc.get(ch), dict)
            for t in [enc[ch].get("title")] if isinstance(t, str)]


def test_every_chart_renders_and_fits_the_column(svgs: dict[str, str]) -> None:
    for name, svg in svgs.items():
        width = float(re.search(r'<svg[^>]*\swidth="([\d.]+)"', svg).group(1))
        assert width <= MAX_WIDTH, (name, width)


@pytest.mark.parametrize("name", ["prefill", "decode", "curves", "predicted", "real-curves"])
def test_a_legend_isolates(specs: dict[str, dict[str, Any]], name: str) -> None:
    params = [p for p in _walk(specs[name], "params") for p in p]
    bound = [p for p in params if p.get("bind") == "legend"]
    assert bound, name
    # the selection drives the opacity of the marks it belongs to
    conditions = json.dumps(_walk(specs[name], "opacity"))
    assert bound[0]["name"] in conditions


@pytest.mark.parametrize("name", ["prefill", "decode", "curves", "sla", "predicted", "real-curves"])
def test_tooltips_name_deployment_concurrency_and_file(specs: dict[str, dict[str, Any]], name: str) -> None:
    fields = _tooltip_fields(specs[name])
    assert {"deployment", "concurrency"} <= fields, (name, fields)
    assert "source" in fields, name


def test_axis_titles_say_what_is_divided_by_what(specs: dict[str, dict[str, Any]]) -> None:
    for name in ("prefill", "decode", "curves", "sla", "predicted", "real-curves"):
        titles = _titles(specs[name])
        assert any("÷" in t for t in titles), (name, titles)
    assert any("all GPUs (prefill + decode)" in t for t in _titles(specs["curves"]))
    assert any("1000 / TPOT" in t for t in _titles(specs["curves"]))


def test_modeled_and_measured_are_marked(specs: dict[str, dict[str, Any]]) -> None:
    for name in ("prefill", "decode", "curves", "sla", "predicted"):
        subtitle = " ".join(specs[name]["title"]["subtitle"])
        assert subtitle.startswith("Modeled") and "not a measurement" in subtitle, name
    for name in ("real-curves", "real-sla"):
        subtitle = " ".join(specs[name]["title"]["subtitle"])
        assert subtitle.startswith("Measured — InferenceX") and "Modeled" not in subtitle, name


def test_the_envelope_is_drawn_as_a_staircase(specs: dict[str, dict[str, Any]], data: dict[str, Any]) -> None:
    datasets = specs["curves"]["datasets"]
    steps = next(pd.DataFrame(rows) for rows in datasets.values() if rows and "kind" in rows[0]
                 and "order" in rows[0])
    xy = steps.sort_values("order")[["tps_per_user", "tps_per_gpu"]].to_numpy()
    moves = xy[1:] - xy[:-1]
    assert ((moves[:, 0] == 0) | (moves[:, 1] == 0)).all()  # no diagonal: never between two deployments
    assert len(steps[steps["kind"] == "point"]) == len(data["env"])


def test_the_rings_mark_the_winners(specs: dict[str, dict[str, Any]], data: dict[str, Any]) -> None:
    rings = next(pd.DataFrame(rows) for rows in specs["prefill"]["datasets"].values() if rows and "ring" in rows[0])
    best = ch5.best_table(data["prefill"])
    assert list(rings["deployment"]) == list(best["best"])


def _label_text(svg: str) -> str:
    texts = [html.unescape(t) for t in re.findall(r"<text[^>]*>([^<]*)</text>", svg)]
    found = [t for t in texts if "tok/s/user" in t]
    assert len(found) == 1, found
    return found[0]


@pytest.mark.parametrize("which", ["sla", "real-sla"])
@pytest.mark.parametrize("floor", [0.0, 20.0, 50.0, 100.0, 150.0, 250.0, 400.0])
def test_the_slider_picks_what_sla_pick_picks(specs, data, which: str, floor: float) -> None:
    spec = copy.deepcopy(specs[which])
    params = [p for p in spec["params"] if p["name"] == SLIDER]
    assert params and params[0]["bind"]["input"] == "range"
    params[0]["value"] = floor
    text = _label_text(vlc.vegalite_to_svg(spec))
    frame = data["disagg"].frame if which == "sla" else data["real"].sweep.frame
    pick = sla_pick(frame, min_tps_per_user=floor)
    if pick.met:
        assert f"→ {pick.deployment}, concurrency {pick.concurrency:,.0f}: {pick.tps_per_gpu:,.0f} tok/s/GPU" in text
    else:
        assert text.startswith(f"nothing reaches {floor:,.0f} tok/s/user")


def test_the_slider_starts_at_the_parameter(specs) -> None:
    params = {p["name"]: p for p in specs["sla"]["params"]}
    assert params[SLIDER]["value"] == 50.0
    assert params[SLIDER]["bind"]["min"] == 0 and params[SLIDER]["bind"]["max"] >= 180


def test_empty_sweeps_draw_a_note() -> None:
    empty = load_sweep("decode", [])
    expected = {
        "decode_results": [sweep_chart(empty), note_chart(empty.note)],
        "No disaggregated sweep": [curves_chart(empty.frame), sla_chart(empty.frame, empty.frame, min_tps_per_user=5)],
        "rate matching": [predicted_chart(ch7.predict(empty, empty, empty.frame, osl=2), empty.frame)],
    }
    for words, charts in expected.items():
        for chart in charts:
            svg = html.unescape(vlc.vegalite_to_svg(chart.to_dict()))
            assert words in svg, words


def test_legend_names_are_stable(specs) -> None:
    names = {p["name"] for p in _walk(specs["prefill"], "params") for p in p if p.get("bind") == "legend"}
    assert names == {LEGEND_NAME}
