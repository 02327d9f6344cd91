"""Offline rendering of Altair charts, and ipywidgets explorers that know when no kernel is listening.

A chart becomes a ``<div id="pdtune-<chart_id>">``, its Vega-Lite spec inlined as JSON, and a short script
that calls ``vegaEmbed``. Where ``vegaEmbed`` comes from depends on where the output will be seen:

* the static book (``PDTUNE_STATIC_BUILD=1``, set by ``make book`` and by :mod:`pdtune.site.bookbuild`):
  the page loads the vega bundle from ``_static/``, so each output is only the spec;
* a live notebook (Jupyter, papermill, the workbook's HTML): the first chart of the kernel session carries
  the bundle inline, later charts reuse it.

Either way no URL outside the page is ever referenced. The element id is stable (it is the ``chart_id``
the chapter passes, or a hash of the spec for a chart shown as a cell's last expression), so the browser
check and readers' links can find a chart build after build.
"""

from __future__ import annotations

import hashlib
import html
import json
import os
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # altair costs 0.8 s to import; every CLI call builds a parser that reaches this module
    import altair as alt


STATIC_BUILD_ENV = "PDTUNE_STATIC_BUILD"
#: Set for kernels nobody will interact with (the workbook's papermill runs): explorers print their note,
#: while charts still inline the vega bundle so the executed notebooks stand alone.
NO_WIDGETS_ENV = "PDTUNE_NO_WIDGETS"
ID_PREFIX = "pdtune-"
CHART_CLASS = "pdtune-chart"
LIVE_NOTE_CLASS = "pdtune-live-note"
RENDERER_NAME = "pdtune"

_CHART_ID = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")

# Per kernel session: ids already on this page, and whether the bundle has been sent inline.
_shown_ids: dict[str, int] = {}
_bundle_sent = False


def new_page() -> None:
    """Forget the ids shown and the bundle sent: the next output starts another page (a workbook's kernel
    runs one chapter after another)."""
    global _bundle_sent
    _shown_ids.clear()
    _bundle_sent = False


# vega-embed's "Open in Vega Editor" action links to a website; export (SVG/PNG download) stays local.
_EMBED_OPTIONS = {
    "renderer": "svg",
    "actions": {"export": True, "source": False, "compiled": False, "editor": False},
}

_EMBED_SCRIPT = """<script>
(function () {
  var id = %(id)s;
  function draw() {
    var el = document.getElementById(id);
    if (!el || el.dataset.pdtuneDrawn) { return; }
    el.dataset.pdtuneDrawn = "1";
    if (typeof window.vegaEmbed !== "function") {
      el.textContent = "This chart needs the vega bundle, which did not load. " +
        "In a notebook, restart the kernel and run all cells.";
      el.classList.add("pdtune-chart-error");
      return;
    }
    var spec = JSON.parse(document.getElementById(id + "-spec").textContent);
    window.vegaEmbed(el, spec, %(options)s).catch(function (err) {
      el.textContent = "Chart failed to render: " + err;
      el.classList.add("pdtune-chart-error");
    });
  }
  if (typeof window.vegaEmbed === "function" || document.readyState === "complete") { draw(); }
  else { window.addEventListener("load", draw); }
})();
</script>"""


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


def is_static_build() -> bool:
    """True while the static book is being built (the only place explorers cannot run)."""
    return _flag(STATIC_BUILD_ENV)


def _spec_json(spec: dict[str, Any]) -> str:
    # Sorted keys make the page byte-stable build after build; "</" must not end the script element early.
    return json.dumps(spec, sort_keys=True, separators=(",", ":"), ensure_ascii=False).replace("</", "<\\/")


def _check_chart_id(chart_id: str) -> None:
    if not isinstance(chart_id, str) or not _CHART_ID.fullmatch(chart_id):
        raise ValueError(
            f"chart_id must be lower-case letters, digits and single hyphens (e.g. 'kv-per-request'), "
            f"got {chart_id!r}"
        )


def _claim_id(chart_id: str, *, explicit: bool) -> str:
    """Reserve ``chart_id`` on this page; repeats get ``-2``, ``-3``… unless they are a chapter bug."""
    seen = _shown_ids.get(chart_id, 0)
    _shown_ids[chart_id] = seen + 1
    if seen == 0:
        return chart_id
    if explicit and is_static_build():
        # Each chapter executes in a fresh kernel, so a repeat here is two charts given one id.
        raise ValueError(f"chart_id {chart_id!r} is used twice on this page; give each chart its own id")
    return f"{chart_id}-{seen + 1}"


def auto_chart_id(spec: dict[str, Any]) -> str:
    """The id of a chart displayed without :func:`show`: a hash of its spec, stable across builds."""
    return "auto-" + hashlib.sha1(_spec_json(spec).encode("utf-8")).hexdigest()[:10]


def spec_html(spec: dict[str, Any], element_id: str, *, include_bundle: bool = False) -> str:
    """The HTML for one chart: container, inlined spec, and the ``vegaEmbed`` call."""
    parts = []
    if include_bundle:
        from pdtune.site.vendor import vega_bundle_js

        # The bundle holds no "</script" today; escaping keeps a future version from closing the element.
        parts.append("<script>\n" + vega_bundle_js().replace("</script", "<\\/script") + "</script>")
    quoted_id = html.escape(element_id, quote=True)
    parts.append(f'<div id="{quoted_id}" class="{CHART_CLASS}"></div>')
    parts.append(f'<script type="application/json" id="{quoted_id}-spec">{_spec_json(spec)}</script>')
    parts.append(
        _EMBED_SCRIPT
        % {"id": json.dumps(element_id), "options": json.dumps(_EMBED_OPTIONS, sort_keys=True)}
    )
    return "\n".join(parts)


def _mimebundle(spec: dict[str, Any], chart_id: str, *, explicit: bool) -> dict[str, str]:
    global _bundle_sent
    element_id = ID_PREFIX + _claim_id(chart_id, explicit=explicit)
    include_bundle = not is_static_build() and not _bundle_sent
    body = spec_html(spec, element_id, include_bundle=include_bundle)
    _bundle_sent = _bundle_sent or include_bundle
    title = spec.get("title")
    if isinstance(title, dict):
        title = title.get("text")
    return {"text/html": body, "text/plain": f"<chart {element_id}: {title or 'untitled'}>"}


def show(chart: alt.TopLevelMixin, chart_id: str, *, when: bool = True, otherwise: str = "") -> None:
    """Display ``chart`` in a notebook as element ``pdtune-<chart_id>``, rendered offline.

    ``chart_id`` names the chart within its chapter (``'kv-per-request'``); give every chart its own.
    With ``when`` false (a scenario without the data the chart draws) the sentence ``otherwise`` takes its
    place, so a page never shows an empty chart.
    """
    from IPython.display import display

    _check_chart_id(chart_id)
    if not when:
        text = otherwise or "There is no data for this chart in this scenario."
        display({"text/html": f'<p class="pdtune-note">{html.escape(text)}</p>', "text/plain": text},
                raw=True)
        return
    display(_mimebundle(chart.to_dict(), chart_id, explicit=True), raw=True)


def _altair_renderer(spec: dict[str, Any], **_metadata: Any) -> dict[str, str]:
    """Altair renderer plugin: a chart left as a cell's last expression goes through the same path."""
    return _mimebundle(spec, auto_chart_id(spec), explicit=False)


def enable_renderer() -> None:
    import altair as alt

    alt.renderers.register(RENDERER_NAME, _altair_renderer)
    alt.renderers.enable(RENDERER_NAME)


def _in_live_kernel() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython is a dependency of ipykernel
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def code_spans(text: str) -> str:
    """``text`` as HTML, its ```code``` spans as ``<code>`` (a backtick must never reach the page as text)."""
    parts = html.escape(text).split("`")
    if len(parts) % 2 == 0:  # an odd backtick: no code span to close, keep the text as it is
        return html.escape(text).replace("`", "&#96;")
    return "".join(f"<code>{part}</code>" if i % 2 else part for i, part in enumerate(parts))


def live_note(name: str) -> str:
    """The sentence the static page shows where a live explorer would be."""
    return (
        f"Interactive explorer “{name}”: it runs in a live notebook. Start JupyterLab with `make lab` "
        "(see “Live in JupyterLab” on the Reproduce page), open this chapter and run it to move the sliders; "
        "the charts on this page keep their own sliders and selections."
    )


def live_explorer(function: Callable[..., Any], /, *, name: str, **controls: Any) -> Any:
    """Show an ipywidgets explorer of ``function`` over ``controls`` (as ``ipywidgets.interactive``).

    A control ``(min, max, step, start)`` is a slider that starts at ``start`` (the chapter's parameter), so
    the explorer first shows what the page shows; what ``function`` returns is displayed under it.

    In a live kernel it displays the widget. In the static build, in a batch run (``PDTUNE_NO_WIDGETS``) or
    outside Jupyter there is nobody to move a slider, so it shows a short note instead of a dead widget.
    It returns ``None`` either way, so a call left as a cell's last expression is not displayed twice.
    """
    from IPython.display import display

    if is_static_build() or _flag(NO_WIDGETS_ENV) or not _in_live_kernel():
        note = live_note(name)
        display(
            {
                "text/html": f'<p class="{LIVE_NOTE_CLASS}">{code_spans(note)}</p>',
                "text/plain": note,
            },
            raw=True,
        )
        return None
    import ipywidgets

    widgets = {name: _slider(control) for name, control in controls.items()}
    # interactive() alone shows only what the function prints; auto_display shows what it returns (a table).
    display(ipywidgets.interactive(function, {"auto_display": True}, **widgets))
    return None


def _slider(control: Any) -> Any:
    """``(min, max, step, start)`` as a slider that starts at ``start`` (ipywidgets would start mid-range);
    any other control as ipywidgets takes it."""
    import ipywidgets

    if isinstance(control, tuple) and len(control) == 4:
        lo, hi, step, start = control
        kind = ipywidgets.IntSlider if all(isinstance(v, int) for v in control) else ipywidgets.FloatSlider
        return kind(min=lo, max=hi, step=step, value=start)
    return control
