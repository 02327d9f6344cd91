"""Charts for the book: shared style, the offline renderer, and (in ``<topic>.py`` modules) the builders.

Importing this package makes Altair render through :func:`pdtune.charts.render.show`'s offline path and
applies the book's theme, so even a chart left as a cell's last expression works without a network.

    from pdtune.charts import show
    show(chart, "kv-per-request")
"""

from __future__ import annotations

from pdtune.charts.render import (
    STATIC_BUILD_ENV,
    chart_html,
    enable_renderer,
    is_static_build,
    live_explorer,
    show,
)
from pdtune.charts.style import (
    HEIGHT,
    PANEL_WIDTH,
    WIDTH,
    column_title,
    enable_theme,
    measured_title,
    modeled_title,
    ratio_title,
    tooltips,
)

enable_renderer()
enable_theme()

__all__ = [
    "HEIGHT",
    "PANEL_WIDTH",
    "STATIC_BUILD_ENV",
    "WIDTH",
    "chart_html",
    "column_title",
    "is_static_build",
    "live_explorer",
    "measured_title",
    "modeled_title",
    "ratio_title",
    "show",
    "tooltips",
]
