"""What every chart in the book shares: size, theme, axis titles that say what is divided by what,
a subtitle that marks modeled data, and tooltips that carry each point's provenance.

Chart builders in ``pdtune.charts.<topic>`` use these so that a reader can compare charts across chapters
without re-reading their axes.
"""

from __future__ import annotations

from collections.abc import Iterable

import altair as alt

THEME_NAME = "pdtune"
WIDTH = 560
HEIGHT = 320
# Narrower panels for facets and side-by-side comparisons.
PANEL_WIDTH = 260
# System fonts only: a web font would be a network request the offline book cannot make.
FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif"
MODELED_PREFIX = "Modeled"
MEASURED_PREFIX = "Measured"

# Provenance columns of the tidy results table; tooltips show them whenever the data has them.
PROVENANCE = ("source", "path")


def ratio_title(numerator: str, denominator: str, *, unit: str | None = None) -> str:
    """An axis title that names both sides of a ratio: ``'total tokens/s ÷ all GPUs'``.

    Per-GPU throughput is ambiguous unless the reader knows which tokens and which GPUs; this makes the
    title say it.
    """
    if not numerator.strip() or not denominator.strip():
        raise ValueError("a ratio title needs both a numerator and a denominator")
    title = f"{numerator.strip()} ÷ {denominator.strip()}"
    return f"{title} ({unit})" if unit else title


# Titles for the tidy results schema (design.md); keyed by column name.
COLUMN_TITLES: dict[str, str] = {
    "tps_per_gpu": ratio_title("total tokens/s (input + output)", "all GPUs (prefill + decode)"),
    "tps_per_user": ratio_title("output tokens/s", "user", unit="= 1000 / TPOT p50 ms"),
    "output_tps_per_decode_gpu": ratio_title("output tokens/s", "decode GPUs"),
    "total_tps": "total tokens/s (input + output)",
    "output_tps": "output tokens/s",
    "concurrency": "concurrent requests",
    "ttft_ms_p50": "TTFT p50 (ms)",
    "ttft_ms_p99": "TTFT p99 (ms)",
    "tpot_ms_p50": "TPOT p50 (ms)",
    "tpot_ms_mean": "TPOT mean (ms)",
    "tpot_ms_p99": "TPOT p99 (ms)",
    "gpus_total": "GPUs (prefill + decode)",
    "gpus_prefill": "prefill GPUs",
    "gpus_decode": "decode GPUs",
    "isl": "input tokens per request",
    "osl": "output tokens per request",
    "mtp_tokens": "MTP speculative tokens",
    "topology": "topology",
    "mode": "mode",
    "source": "source",
    "path": "file",
}


def column_title(column: str) -> str:
    """The book's title for a tidy-schema column (or the column name itself if it has none)."""
    return COLUMN_TITLES.get(column, column.replace("_", " "))


def modeled_title(text: str, *, how: str) -> alt.TitleParams:
    """Chart title whose subtitle marks the data as modeled and says by what: required on modeled charts."""
    subtitle = f"{MODELED_PREFIX} — {how}; not a measurement"
    return alt.TitleParams(text=text, subtitle=[subtitle], anchor="start")


def measured_title(text: str, *, source: str) -> alt.TitleParams:
    """Chart title whose subtitle names where the measured points come from."""
    return alt.TitleParams(text=text, subtitle=[f"{MEASURED_PREFIX} — {source}"], anchor="start")


def tooltips(
    *fields: str, provenance: Iterable[str] = PROVENANCE, columns: Iterable[str] | None = None
) -> list[alt.Tooltip]:
    """Tooltips for ``fields`` (Altair shorthand such as ``'tps_per_gpu:Q'``), then the provenance columns.

    Pass the data's ``columns`` to show only provenance columns that exist in it. Quantitative fields are
    formatted to four significant digits, enough to compare with the article's tables.
    """
    present = None if columns is None else set(columns)
    wanted = list(fields)
    names = {f.split(":", 1)[0] for f in wanted}
    for column in provenance:
        if column not in names and (present is None or column in present):
            wanted.append(f"{column}:N")
    result = []
    for shorthand in wanted:
        name, _, kind = shorthand.partition(":")
        if kind == "Q":
            result.append(alt.Tooltip(shorthand, title=column_title(name), format=",.4~g"))
        else:
            result.append(alt.Tooltip(shorthand, title=column_title(name)))
    return result


def _theme() -> alt.theme.ThemeConfig:
    return alt.theme.ThemeConfig(
        config={
            "view": {"continuousWidth": WIDTH, "continuousHeight": HEIGHT, "stroke": None},
            "font": FONT,
            "title": {"anchor": "start", "fontSize": 15, "subtitleFontSize": 12, "subtitleColor": "#555"},
            "axis": {"labelFontSize": 12, "titleFontSize": 12, "titleFontWeight": "normal", "grid": True},
            "legend": {"labelFontSize": 12, "titleFontSize": 12, "orient": "right"},
            "range": {"category": {"scheme": "tableau10"}},
        }
    )


def enable_theme() -> None:
    alt.theme.register(THEME_NAME, enable=True)(_theme)
