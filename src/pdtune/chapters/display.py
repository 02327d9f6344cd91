"""How a chapter shows its numbers: styled tables, numbers glued into the prose, formatted values.

A number the prose of a chapter states is glued from a code cell (MyST-NB's ``glue``) and written with the
``{glue:text}`` role, so it is recomputed on every build and follows the model of the parameters cell.
:func:`plain`, :func:`frame_numbers`, :func:`glue_numbers` and :func:`glue_frame` gather those numbers as
plain Python values and hand them to MyST-NB under ``<prefix>-<key>``; :func:`number` and :data:`MISSING`
format a value that may not exist.

:func:`styled` is how every table reaches the page, in the book's house style: headers in words
(:data:`HEADERS`, else the column name with its unit suffix spelled out), counts as integers, throughput
to four significant figures (:func:`significant`), yes/no for flags. :func:`table_or_note` shows a
sentence instead of a table with no rows; :func:`note` and :func:`defaults_note` put a computed sentence
or list on the page, so a chapter says only what holds for its parameters.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd


#: Stands in for a number the data does not give.
MISSING = "—"


#: Column headers in words, for the column names the chapters' frames use (units in brackets).
HEADERS: dict[str, str] = {
    "tp": "TP", "dp": "DP", "pp": "PP", "mtp": "MTP", "gpus": "GPUs", "run": "run",
    "tps_per_gpu": "tokens/s per GPU", "tps_per_user": "tokens/s per user",
    "runner_up_tps_per_gpu": "runner-up tokens/s per GPU",
    "best_tps_per_gpu": "best tokens/s per GPU", "ceiling_tps_per_gpu": "ceiling tokens/s per GPU",
    "roofline_tps_per_gpu": "roofline tokens/s per GPU", "modeled_tps_per_gpu": "modeled tokens/s per GPU",
    "measured_tps_per_gpu": "measured tokens/s per GPU", "predicted_tps_per_gpu": "predicted tokens/s per GPU",
    "measured_tps_per_user": "measured tokens/s per user", "predicted_tps_per_user": "predicted tokens/s per user",
    "ttft_ms_p50": "TTFT p50 (ms)", "tpot_ms_p50": "TPOT p50 (ms)", "predicted_ttft_ms": "predicted TTFT (ms)",
    "measured_ttft_ms": "measured TTFT (ms)",
    "mib_per_request_rank": "MiB per request, one rank", "mib_per_request_all_ranks": "MiB per request, all ranks",
    "mib_per_request": "MiB per request",
    "all_ranks_vs_tp1": "all ranks ÷ TP1", "vs_first": "÷ first row", "plan": "plan", "attention_bytes_per_token": "attention B per token",
    "recurrent_state_bytes": "recurrent state B", "block_tokens": "block (tokens)",
    "pool_blocks_per_request": "pool blocks per request",
    "prefill_block_tokens": "prefill block", "decode_block_tokens": "decode block",
    "own_block_tokens": "own block", "block_size_to_set": "--block-size to set",
    "mib_per_request_rank_own": "MiB per request, own block", "mib_per_request_rank_set": "MiB per request, set block",
    "extra_pct": "extra (%)", "expert_shards": "expert shards",
    "experts_mean": "experts per GPU, mean", "experts_busiest": "experts, busiest GPU",
    "extra_percent": "busiest over mean (%)",
    "kv_cache_gib": "KV cache (GiB)", "weights_gib": "weights (GiB)", "minus_gib": "minus (GiB)",
    "published_kv_cache_gib": "KV cache, published (GiB)", "kv_cache_prose_gib": "KV cache, the prose's way (GiB)",
    "published_weights_gib": "weights, published (GiB)", "residual_gib": "published − config (GiB)",
    "requests_article": "requests, the article's way", "published_requests_per_engine": "requests, published",
    "requests_vllm": "requests per engine (vLLM)", "requests_vllm_per_gpu": "requests per GPU (vLLM)",
    "requests_article_per_gpu": "requests per GPU, the article's way",
    "requests_per_engine": "requests per engine", "requests_per_deployment": "requests per deployment",
    "requests_per_gpu": "requests per GPU", "gpus_per_engine": "GPUs per engine",
    "kv_cache_tokens": "KV cache tokens (log line)", "num_blocks": "pool blocks", "group_size": "layers per group",
    "max_concurrency": "max concurrency", "tokens_formula": "'GPU KV cache size' is",
    "requests_by_bytes": "requests by bytes", "vllm": "vLLM", "vllm_vs_article": "vLLM ÷ article",
    "num_speculative_tokens": "MTP tokens", "mtp_tokens": "MTP tokens",
    "max_num_seqs": "max-num-seqs", "max_num_batched_tokens": "max-num-batched-tokens",
    "max_num_batched_tokens_rule": "max-num-batched-tokens by the rule", "rule_holds": "rule holds",
    "max_capture_size": "largest capture size", "smallest_graph": "smallest graph",
    "graphs_full_decode_only": "graphs, FULL_DECODE_ONLY", "graphs_full_and_piecewise": "graphs, FULL_AND_PIECEWISE",
    "published_graphs": "graphs, published", "reserved_gib": "reserved (GiB)", "actual_gib": "used (GiB)",
    "unused_gib": "unused (GiB)", "published_unused_gib": "unused, published (GiB)",
    "unused_pct": "unused ÷ used (%)", "published_unused_pct": "unused ÷ used, published (%)",
    "max_increment_mib": "largest increment (MiB)", "activation_peak_gib": "activation peak (GiB)",
    "cudagraph_estimate_gib": "graph estimate (GiB)", "non_torch_gib": "non-torch (GiB)",
    "cuda_context_gib": "CUDA context (GiB)", "pct_of_gpu": "share of the GPU (%)",
    "reserve_gib": "reserve (GiB)", "graph_overrun_gib": "graph overrun (GiB)",
    "reserve_left_gib": "reserve left (GiB)", "max_utilization": "highest utilization",
    "gpu_memory_utilization": "gpu_memory_utilization", "capacity_gib": "capacity (GiB)",
    "driver_gib": "driver (GiB)", "left_gib": "left (GiB)", "torch_total_gib": "torch total (GiB)",
    "left_minus_torch_total_gib": "left − torch total (GiB)",
    "not_weights_nor_kv_gib": "neither weights nor KV (GiB)", "not_weights_nor_kv_pct": "neither, share (%)",
    "measured_parts_gib": "measured parts (GiB)", "measured_parts_pct": "measured parts, share (%)",
    "published_overhead_gib": "published (GiB)", "published_overhead_pct": "published (%)",
    "requests_article_unused": "requests, the article's way",
    "requests_vllm_rank": "requests, one rank (vLLM)",
    "article_claim": "the article", "computed_best": "best in this sweep", "runner_up": "runner-up",
    "from_concurrency": "from concurrency", "to_concurrency": "to concurrency",
    "busy_at_1": "busy at 1", "busy_at_2": "busy at 2", "busy_at_4": "busy at 4",
    "requests_per_s": "requests/s", "requests_per_s_per_gpu": "requests/s per GPU",
    "delivered_requests_per_s": "delivered requests/s", "engines": "engines",
    "room": "requests held", "room_per_gpu": "requests held per GPU",
    "room_at_workload": "requests held at the workload", "first_swept_above_room": "first concurrency above",
    "flattens_at": "curve flat from", "holds_all": "holds all", "won_at": "wins at",
    "room_with_mtp": "requests held with MTP", "wins_below": "MTP ahead, held", "wins_above": "MTP ahead, waiting",
    "median_gain_below": "median gain, held", "median_gain_above": "median gain, waiting",
    "below": "held: concurrencies", "above": "waiting: concurrencies",
    "experts_touched": "experts touched", "tokens_per_step": "tokens per step",
    "expert_gib_per_step": "expert GiB read per step", "expert_mib_per_token": "expert MiB per token",
    "decode_concurrency": "decode concurrency", "decode_room": "decode room", "in_sweep": "swept",
    "bottleneck": "bound by", "this_data": "this data", "fraction_of_best": "share of the best",
    "logged_kv_cache_tokens": "KV tokens, logged", "predicted_kv_cache_tokens": "KV tokens, pdtune",
    "logged_max_concurrency": "concurrency, logged", "predicted_max_concurrency": "concurrency, pdtune",
    "available_kv_cache_gib": "KV cache, logged (GiB)", "tps_per_gpu_error": "error, tokens/s per GPU",
    "tps_per_user_error": "error, tokens/s per user", "accuracy": "accuracy", "points": "points",
    "same_point": "runs of the same", "runs_apart_median_pct": "runs apart, median (%)",
    "runs_apart_p90_pct": "runs apart, p90 (%)", "uncalibrated_median_pct": "uncalibrated, median (%)",
    "uncalibrated_p90_pct": "uncalibrated, p90 (%)", "calibrated_median_pct": "calibrated, median (%)",
    "calibrated_p90_pct": "calibrated, p90 (%)",
}

_UNITS = (("_gib", " (GiB)"), ("_mib", " (MiB)"), ("_pct", " (%)"), ("_ms", " (ms)"), ("_bytes", " (B)"))

#: Column names whose values count things: shown as integers.
_COUNT_WORDS = ("concurrency", "gpus", "graphs", "run", "tp", "dp", "pp", "engines", "points", "layers", "slots",
                "seqs", "blocks", "tokens", "bytes", "group", "pages", "shards", "experts", "size", "graph",
                "workers", "room", "above_room", "flattens_at")


def header(column: Any) -> Any:
    """A column's header in words: :data:`HEADERS`, else the name with ``_`` as spaces and its unit spelled."""
    if not isinstance(column, str):
        return column
    if column in HEADERS:
        return HEADERS[column]
    if "_" not in column:
        return column
    name = column
    for suffix, unit in _UNITS:
        if name.endswith(suffix):
            return name[: -len(suffix)].replace("_", " ") + unit
    return name.replace("_", " ")


def significant(value: Any, digits: int = 4) -> str:
    """``value`` to ``digits`` significant figures, no more decimals than that needs: 4,962; 12.35; 0.1234."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return MISSING
    x = float(value)
    if x == 0 or not math.isfinite(x):
        return format(x, ",.0f") if x == 0 else str(x)
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(x))))
    return format(round(x, decimals), f",.{decimals}f")


def _is_count(name: str, values: pd.Series) -> bool:
    if pd.api.types.is_bool_dtype(values) or not pd.api.types.is_numeric_dtype(values):
        return False
    if pd.api.types.is_integer_dtype(values):
        return True
    if name.startswith("room") and "per_gpu" not in name:
        return True  # requests a KV cache holds: whole requests
    last = name.rsplit("_", 1)[-1] if "_" in name else name
    return (name in _COUNT_WORDS or last in _COUNT_WORDS or name.endswith(_COUNT_WORDS)) and not name.endswith(
        ("_gib", "_mib", "_pct", "_s", "_ms"))


def _no_negative_zero(text: str) -> str:
    """``-0.0`` (a small negative rounded away) written as ``0.0``: a sign with nothing behind it misleads."""
    return text[1:] if text.startswith("-") and not text.strip("-0.,") else text


def _formatter(name: str, values: pd.Series, precision: int) -> Any:
    """How the cells of one column are written: flags, counts, throughput, or ``precision`` decimals."""
    def missing(f: Any) -> Any:
        return lambda v: MISSING if v is None or (isinstance(v, float) and math.isnan(v)) else _no_negative_zero(f(v))

    if pd.api.types.is_bool_dtype(values) or (values.dropna().map(type).eq(bool).all() and len(values.dropna())):
        return missing(lambda v: "yes" if v else "no")
    if not pd.api.types.is_numeric_dtype(values):
        return missing(lambda v: f"{v:,d}" if isinstance(v, int) and not isinstance(v, bool)
                       else f"{v:,.{precision}f}" if isinstance(v, float) else str(v))
    if "tps" in name or name.startswith("requests_per_s"):
        return missing(significant)
    if name.endswith("max_concurrency"):
        return missing(lambda v: f"{v:,.2f}")  # as vLLM's "Maximum concurrency ...: 722.90x" prints it
    if _is_count(name, values):
        return missing(lambda v: f"{math.floor(v + 1e-9):,d}" if name.startswith("room") or name.endswith("room")
                       else f"{round(v):,d}")
    if name.endswith("_pct"):
        return missing(lambda v: f"{v:,.1f}")
    if "requests" in name and "requests_per_s" not in name:
        return missing(lambda v: f"{v:,.1f}")  # vLLM's "Maximum concurrency" and the article print one or two
    return missing(lambda v: f"{v:,.{precision}f}")


def styled(frame: pd.DataFrame, *, precision: int = 2, index: bool = False,
           formats: dict[str, Any] | None = None) -> Any:
    """A frame for the page: headers in words, counts as integers, throughput to 4 significant figures,
    ``precision`` decimals otherwise, flags as yes/no, empty cells as a dash.

    ``formats`` overrides a column's format (a format spec such as ``",.1f"`` or a function). Requests a
    KV cache *holds* (``room*`` columns) are rounded down: a fraction of a request does not run.
    """
    out = frame.copy()
    formatters = {c: _formatter(str(c[-1] if isinstance(c, tuple) else c), out[c], precision)
                  for c in out.columns}
    for column, spec in (formats or {}).items():
        formatters[column] = spec if callable(spec) else (lambda s: lambda v: MISSING if v is None or (
            isinstance(v, float) and math.isnan(v)) else format(v, s))(spec)
    style = out.style.format(formatters, na_rep=MISSING, precision=precision, thousands=",")
    style = style.format_index(header, axis=1)
    if index:
        style = style.format_index(lambda v: header(v) if isinstance(v, str) else f"{v:.2f}"
                                   if isinstance(v, float) else v, axis=0)
    return style if index else style.hide(axis="index")


def table_or_note(frame: pd.DataFrame, empty: str, **options: Any) -> Any:
    """:func:`styled` ``frame``, or the sentence ``empty`` when it has no rows (no empty table on a page)."""
    if len(frame) == 0:
        return note(empty)
    return styled(frame, **options)


class _Html:
    """Rich output for a notebook cell: an HTML fragment, with its text for papermill and plain viewers."""

    def __init__(self, markup: str, text: str) -> None:
        self.markup, self.text = markup, text

    def _repr_html_(self) -> str:
        return self.markup

    def __repr__(self) -> str:
        return self.text


def note(text: str, *, kind: str = "") -> _Html:
    """One computed sentence as a paragraph of the page (``kind`` "important" or "attention" boxes it); its
    ```code``` spans become code."""
    from pdtune.site.render import code_spans

    body = f'<p class="pdtune-note">{code_spans(text)}</p>'
    if kind:
        body = f'<div class="admonition {kind} pdtune-note-box">{body}</div>'
    return _Html(body, text)


def defaults_note(lines: Sequence[str], chapter: str) -> _Html | None:
    """The values this chapter is the first to use that the parameters file did not give, as a list.

    ``lines`` are :attr:`pdtune.scenario.Scenario.defaults_used`; a chapter lists those of the parameters
    its own cell declares that no earlier chapter declares (:func:`pdtune.workbook.first_chapter_of`).
    ``None`` (nothing shown) when there is none, as in the book, whose parameters are all the article's.
    """
    import html

    from pdtune.site.render import code_spans

    if not lines:
        return None
    from pdtune.scenario import carried_over, default_name
    from pdtune.workbook.chapter import first_chapter_of

    mine = [line for line in lines if first_chapter_of(default_name(line)) == chapter]
    if not mine:
        return None
    carried, n = sum(map(carried_over, mine)), len(mine)
    if carried == 0:
        share = "none"
    elif carried < n:
        share = f"{carried} of them"
    else:
        share = "all" if n > 1 else ""  # "1 value, carried over"
    title = (f"Not from your parameters file: {n} value{'s' if n != 1 else ''}, "
             f"{share + ' ' if share else ''}carried over from the article's setup")
    items = "".join(f"<li><code>{html.escape(default_name(line))}</code> = "
                    f"{code_spans(line.split(' = ', 1)[1])}</li>" for line in mine)
    markup = (f'<div class="admonition attention pdtune-defaults"><p class="admonition-title">'
              f"{html.escape(title)}</p><ul>{items}</ul></div>")
    return _Html(markup, title + ":\n" + "\n".join(f"- {line}" for line in mine))


def plain(value: Any) -> Any:
    """A numpy or pandas scalar as the Python value it holds; ``None`` and NaN as ``float("nan")``.

    MyST-NB stores a glued value as its ``repr`` and reads it back with ``ast.literal_eval``: ``2112`` and
    ``189.75`` survive that, ``np.int64(2112)`` does not, and ``nan`` formats as "nan" instead of failing.
    """
    if value is None:
        return float("nan")
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and value != value:
        return float("nan")
    if isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def glue_markdown(key: str, text: str) -> None:
    """Glue a generated sentence as Markdown (not displayed), for ``{glue:md}`key` ``: its ```code``` spans
    and links render as such. A sentence glued with ``{glue:text}`` is shown as plain text, backticks and
    all, so a sentence holding code must come through here."""
    from IPython.display import Markdown
    from myst_nb import glue

    glue(key, Markdown(text), display=False)


def glue_numbers(prefix: str, numbers: Mapping[str, Any]) -> None:
    """Glue every value as ``<prefix>-<key>`` (not displayed), for ``{glue:text}`<prefix>-<key>:.2f` ``."""
    from myst_nb import glue

    for key, value in numbers.items():
        glue(f"{prefix}-{key}", plain(value), display=False)


def frame_numbers(
    frame: pd.DataFrame,
    columns: Sequence[str] | None = None,
    *,
    key: str | Sequence[str] | None = None,
    labels: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Cells of ``frame`` as ``<row>-<column>``, and each numeric column's ``min-``/``max-<column>``.

    ``columns`` limits the cells to those the prose quotes (all columns when None). A row is named by
    ``labels`` (one per row), else by the ``key`` column(s) joined with "-" in lower case (``run`` gives
    "7", ``["topology", "mtp"]`` gives "tp4dp4-true"), else by its index. Missing cells are left out, so a
    sentence that quotes one fails the build instead of printing a dash.
    """
    if labels is not None:
        names = [str(label) for label in labels]
        if len(names) != len(frame):
            raise ValueError(f"{len(names)} labels for {len(frame)} rows")
    elif key is not None:
        key_columns = [key] if isinstance(key, str) else list(key)
        rows = frame[key_columns].itertuples(index=False)
        names = ["-".join(str(plain(v)).lower() for v in row) for row in rows]
    else:
        names = [str(i) for i in frame.index]
    if columns is not None:
        missing = [c for c in columns if c not in frame.columns]
        if missing:
            raise KeyError(f"no column {', '.join(missing)} in the frame")
        frame = frame[list(columns)]
    numbers: dict[str, Any] = {}
    for name, (_, row) in zip(names, frame.iterrows(), strict=True):
        for column, value in row.items():
            if value is None or (isinstance(value, float) and value != value):
                continue
            numbers[f"{name}-{column}"] = plain(value)
    for column in frame.columns:
        values = frame[column]
        numeric = pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values)
        if numeric and values.notna().any():
            numbers[f"min-{column}"] = plain(values.min())
            numbers[f"max-{column}"] = plain(values.max())
    return numbers


def glue_frame(
    prefix: str,
    frame: pd.DataFrame,
    columns: Sequence[str] | None = None,
    *,
    key: str | Sequence[str] | None = None,
    labels: Sequence[str] | None = None,
) -> None:
    """Glue cells of a frame the chapter shows (:func:`frame_numbers`) under ``prefix``."""
    glue_numbers(prefix, frame_numbers(frame, columns, key=key, labels=labels))


def number(value: Any, spec: str = ",.0f", *, missing: str = MISSING) -> str:
    """``value`` formatted for the prose, or ``missing`` for None/NaN (a glued value always exists)."""
    if value is None:
        return missing
    try:
        if isinstance(value, float) and math.isnan(value):
            return missing
        return format(value, spec)
    except (TypeError, ValueError):
        return str(value)


def concurrency_list(values: Sequence[int], grid: Sequence[int] | None = None) -> str:
    """``1, 2`` or ``4–32, 512, 1,024–1,536``: runs of consecutive points of ``grid`` (the swept
    concurrencies, default ``values`` itself) joined by an en dash."""
    if not values:
        return MISSING
    order = sorted(set(grid if grid is not None else values))
    position = {c: i for i, c in enumerate(order)}
    chosen = sorted(set(values), key=lambda c: position.get(c, -1))
    runs: list[list[int]] = []
    for c in chosen:
        if runs and position.get(c) == position.get(runs[-1][-1], -2) + 1:
            runs[-1].append(c)
        else:
            runs.append([c])
    parts = []
    for run in runs:
        if len(run) == 1:
            parts.append(f"{run[0]:,}")
        elif len(run) == 2:
            parts.append(f"{run[0]:,}, {run[1]:,}")
        else:
            parts.append(f"{run[0]:,}–{run[-1]:,}")
    return ", ".join(parts)
