"""Charts for the book: the shared style, and (in ``<topic>.py`` modules) the chart builders.

The renderer lives in :mod:`pdtune.site.render`; this package re-exports :func:`show` and
:func:`live_explorer` from it so a chapter imports what it draws from one place. Importing the package
makes Altair render through that offline path and applies the book's theme, so even a chart left as a
cell's last expression works without a network.

    from pdtune.charts import show
    show(chart, "kv-per-request")
"""

from __future__ import annotations

from pdtune.site.render import (
    STATIC_BUILD_ENV,
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
    "column_title",
    "is_static_build",
    "live_explorer",
    "measured_title",
    "modeled_title",
    "ratio_title",
    "show",
    "tooltips",
]
