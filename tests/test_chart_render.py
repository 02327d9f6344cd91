"""The offline chart renderer and the shared chart style (pdtune.site.render, pdtune.charts.style)."""

from __future__ import annotations

import json
import re

import altair as alt
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

import pdtune.charts  # noqa: F401 - importing the package enables the renderer and the theme
from pdtune.charts import style
from pdtune.site import render, vendor
from pdtune.site.render import STATIC_BUILD_ENV


def reset_page() -> None:
    """Forget the ids and the inline bundle of the session, as a new kernel starts."""
    render.new_page()


def chart_html(chart, chart_id: str) -> str:  # type: ignore[no-untyped-def]
    """The static-page HTML of ``chart`` (no bundle): what :func:`render.show` displays in the static build."""
    render._check_chart_id(chart_id)
    return render.spec_html(chart.to_dict(), render.ID_PREFIX + chart_id)


@pytest.fixture(autouse=True)
def fresh_page(monkeypatch: pytest.MonkeyPatch):
    """Each test starts a new 'page' and never pays for (or depends on) the real 900 kB bundle."""
    reset_page()
    monkeypatch.setattr(vendor, "vega_bundle_js", lambda: "/* stand-in bundle */ window.vegaEmbed = 1;")
    monkeypatch.delenv(STATIC_BUILD_ENV, raising=False)
    yield
    reset_page()


@pytest.fixture
def displayed(monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    """Capture what show()/live_explorer() hand to IPython's display()."""
    shown: list[dict] = []
    monkeypatch.setattr("IPython.display.display", lambda obj, **kw: shown.append(obj))
    return shown


def _chart(values: list[object] | None = None) -> alt.Chart:
    data = pd.DataFrame({"concurrency": [1, 64, 256], "tps_per_gpu": values or [310.0, 2950.0, 4990.0]})
    return alt.Chart(data).mark_line().encode(x="concurrency:Q", y="tps_per_gpu:Q")


def _spec_in(html: str, element_id: str) -> dict:
    match = re.search(rf'<script type="application/json" id="{element_id}-spec">(.*?)</script>', html, re.S)
    assert match, f"no inlined spec for {element_id}"
    return json.loads(match.group(1))


def test_chart_html_has_the_stable_id_and_the_chart_spec() -> None:
    chart = _chart()
    html = chart_html(chart, "tps-per-gpu")
    assert '<div id="pdtune-tps-per-gpu" class="pdtune-chart"></div>' in html
    assert _spec_in(html, "pdtune-tps-per-gpu") == chart.to_dict()
    assert "window.vegaEmbed(el, spec" in html


def test_chart_html_references_nothing_remote() -> None:
    html = chart_html(_chart(), "c")
    assert "<script src" not in html and "<link" not in html
    # The only URL is the spec's $schema string, which vega-embed reads as a version and never fetches.
    urls = set(re.findall(r"https?://[^\"'\s]+", html))
    assert urls == {_spec_in(html, "pdtune-c")["$schema"]}


def test_data_cannot_close_the_script_element() -> None:
    chart = _chart().encode(tooltip="label:N").transform_calculate(label="'</script><b>x</b>'")
    html = chart_html(chart, "escaped")
    assert html.count("</script>") == 2  # the spec's own and the embed script's
    assert _spec_in(html, "pdtune-escaped") == chart.to_dict()


@pytest.mark.parametrize("bad", ["", "Upper", "two words", "under_score", "-lead", "trail-", "a--b", 7])
def test_chart_ids_are_checked(bad: object) -> None:
    with pytest.raises(ValueError, match="chart_id"):
        chart_html(_chart(), bad)  # type: ignore[arg-type]


def test_static_build_output_leaves_the_bundle_to_the_page(monkeypatch, displayed) -> None:
    monkeypatch.setenv(STATIC_BUILD_ENV, "1")
    render.show(_chart(), "first")
    render.show(_chart(), "second")
    assert all("stand-in bundle" not in d["text/html"] for d in displayed)
    assert displayed[0]["text/plain"] == "<chart pdtune-first: untitled>"


def test_live_session_sends_the_bundle_once(displayed) -> None:
    render.show(_chart(), "first")
    render.show(_chart(), "second")
    assert "stand-in bundle" in displayed[0]["text/html"]
    assert "stand-in bundle" not in displayed[1]["text/html"]


def test_a_repeated_id_is_an_error_in_the_static_build(monkeypatch, displayed) -> None:
    monkeypatch.setenv(STATIC_BUILD_ENV, "1")
    render.show(_chart(), "same")
    with pytest.raises(ValueError, match="used twice"):
        render.show(_chart(), "same")


def test_a_repeated_id_is_renumbered_in_a_live_session(displayed) -> None:
    render.show(_chart(), "same")
    render.show(_chart(), "same")
    assert 'id="pdtune-same-2"' in displayed[1]["text/html"]


def test_altair_default_renderer_is_the_offline_one() -> None:
    assert alt.renderers.active == render.RENDERER_NAME
    chart = _chart()
    bundle = chart._repr_mimebundle_()
    bundle = bundle[0] if isinstance(bundle, tuple) else bundle
    expected_id = "pdtune-" + render.auto_chart_id(chart.to_dict())
    assert f'<div id="{expected_id}" class="pdtune-chart">' in bundle["text/html"]


def test_auto_ids_depend_on_the_spec_only() -> None:
    a, b = _chart().to_dict(), _chart().to_dict()
    c = _chart([1.0, 2.0, 3.0]).to_dict()
    assert render.auto_chart_id(a) == render.auto_chart_id(b) != render.auto_chart_id(c)
    assert re.fullmatch(r"auto-[0-9a-f]{10}", render.auto_chart_id(a))


def test_live_explorer_prints_a_note_in_the_static_build(monkeypatch, displayed) -> None:
    monkeypatch.setenv(STATIC_BUILD_ENV, "1")
    assert render.live_explorer(lambda n: n, name="KV what-if", n=(1, 10)) is None
    assert "runs in a live notebook" in displayed[0]["text/plain"]
    assert 'class="pdtune-live-note"' in displayed[0]["text/html"]


def test_live_explorer_needs_a_kernel(displayed) -> None:
    # pytest is not a Jupyter kernel, so even without the static flag there is nobody to move a slider.
    assert render.live_explorer(lambda n: n, name="x", n=(1, 2)) is None
    assert len(displayed) == 1


def test_live_explorer_in_a_kernel_shows_one_widget_unless_batch(monkeypatch, displayed) -> None:
    monkeypatch.setattr(render, "_in_live_kernel", lambda: True)
    monkeypatch.delenv(render.STATIC_BUILD_ENV, raising=False)
    monkeypatch.delenv(render.NO_WIDGETS_ENV, raising=False)
    import ipywidgets

    assert render.live_explorer(lambda n: n * 10, name="x", n=(1, 5, 1, 3)) is None  # nothing displayed twice
    widgets = [d for d in displayed if isinstance(d, ipywidgets.interactive)]
    assert len(widgets) == 1 and not any("runs in a live notebook" in str(d) for d in displayed)
    # the slider starts at the chapter's value, and what the function returns is shown under it
    assert widgets[0].children[0].value == 3 and 30 in displayed
    before = len(displayed)
    monkeypatch.setenv(render.NO_WIDGETS_ENV, "1")  # the workbook's papermill kernels
    render.live_explorer(lambda n: n, name="x", n=(1, 2))
    assert "runs in a live notebook" in displayed[before]["text/plain"]


def test_ratio_title_names_both_sides() -> None:
    assert style.ratio_title("total tokens/s", "all GPUs") == "total tokens/s ÷ all GPUs"
    assert style.ratio_title("KV cache", "request", unit="MiB") == "KV cache ÷ request (MiB)"
    with pytest.raises(ValueError):
        style.ratio_title("output tokens/s", " ")


@given(st.text(min_size=1).filter(str.strip), st.text(min_size=1).filter(str.strip))
def test_ratio_title_always_shows_numerator_then_denominator(numerator: str, denominator: str) -> None:
    title = style.ratio_title(numerator, denominator)
    assert title.startswith(numerator.strip()) and title.endswith(denominator.strip())
    assert " ÷ " in title[len(numerator.strip()) - 1 : len(title) - len(denominator.strip()) + 1]


def test_tps_per_gpu_title_says_which_tokens_and_which_gpus() -> None:
    title = style.column_title("tps_per_gpu")
    assert "total tokens/s" in title and "all GPUs" in title and "÷" in title


def test_modeled_title_marks_the_chart() -> None:
    title = style.modeled_title("Prefill throughput", how="roofline model").to_dict()
    assert title["subtitle"] == ["Modeled — roofline model; not a measurement"]


def test_tooltips_add_provenance_that_the_data_has() -> None:
    tips = style.tooltips("tps_per_gpu:Q", "topology:N", columns=["tps_per_gpu", "topology", "source"])
    fields = [t.to_dict()["field"] for t in tips]
    assert fields == ["tps_per_gpu", "topology", "source"]
    assert tips[0].to_dict()["format"] == ",.4~g"
    assert tips[0].to_dict()["title"] == style.column_title("tps_per_gpu")


def test_book_theme_is_active_and_sizes_charts() -> None:
    assert alt.theme.active == style.THEME_NAME
    config = alt.theme.get()()["config"]
    assert config["view"]["continuousWidth"] == style.WIDTH
    assert "sans-serif" in config["font"]
