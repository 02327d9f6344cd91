"""``pdtune log``: what a vLLM start-up log says, per worker, and (with --model) what pdtune predicts."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from pdtune.commands._common import json_default
from pdtune.commands._common import gib_flag, shared_flag, whole_flag
from pdtune.errors import InputError
from pdtune.limits import MAX_MODEL_LEN, MAX_PARALLEL
from pdtune.units import GiB, from_gib
from pdtune.vllm_log import VllmLog, WorkerLog, cross_check, parse_log


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "log",
        help="read a vLLM start-up log: memory per worker, KV cache size, graphs; cross-check with --model",
        description=(
            "Reads vLLM 0.11-0.33 start-up logs; TP ranks and DP engines are kept apart by their (Name pid=N) "
            "prefixes. With --model, pdtune's state module predicts each engine's KV cache tokens and maximum "
            "concurrency from the available memory the log reports, next to the logged values, and the token "
            "range the printed memory's rounding (+-0.005 GiB) allows. Settings the log lacks come from the flags "
            "below, else vLLM's defaults (listed as assumed). For a development build or a line pdtune does not "
            "follow, the log's own numbers decide which 'KV cache size' formula it used."
        ),
    )
    p.add_argument("file", metavar="VLLM_LOG")
    shared_flag(p, "--model", help="config.json, its folder, or a bundled model name: adds the cross-check")
    shared_flag(p, "--vllm", help="vLLM line for the cross-check (default: the log's version)")
    shared_flag(p, "--vllm-env")
    p.add_argument("--tp", type=whole_flag(MAX_PARALLEL, "ranks"), help="tensor-parallel size, if the log does not say it")
    shared_flag(p, "--kv-cache-dtype", help="KV cache dtype, if the log does not say it (vLLM's default: auto)")
    shared_flag(p, "--num-speculative-tokens", default=None,
                help="speculative tokens, if the log does not say them")
    p.add_argument("--max-model-len", type=whole_flag(MAX_MODEL_LEN, "tokens"),
                   help="max_model_len, if the log does not say it")
    shared_flag(p, "--speculative-model")
    shared_flag(p, "--decode-context-parallel-size", default=None, help="DCP size, if the log does not say it")
    p.add_argument("--total-gib", type=gib_flag, metavar="G",
                   help="GPU total memory for the waterfall when the log does not print it (before 0.26)")
    shared_flag(p, "--gpu-memory-utilization", metavar="U",
                   help="for the waterfall when the log does not say it")
    shared_flag(p, "--json")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    log = parse_log(args.file)
    total = from_gib(args.total_gib, "--total-gib", "total_gib") if args.total_gib else None

    def waterfalls() -> Iterator[tuple[str, Any]]:
        # one at a time: a crash-loop log has a process per restart, and output is streamed, not held
        for w in log.memory_workers:
            try:
                yield w.name, log.waterfall(w.name, total=total, gpu_memory_utilization=args.gpu_memory_utilization)
            except InputError as exc:
                yield w.name, exc

    checks = []
    if args.model:
        checks = cross_check(log, args.model, vllm=args.vllm, tp=args.tp, kv_cache_dtype=args.kv_cache_dtype,
                             num_speculative_tokens=args.num_speculative_tokens, max_model_len=args.max_model_len,
                             speculative_model=args.speculative_model,
                             decode_context_parallel_size=args.decode_context_parallel_size)
    if args.json:
        _stream_json(log, waterfalls(), checks)
        return 0
    print(_header(log))
    _print_table(_worker_rows(log))
    for name, wf in waterfalls():
        if isinstance(wf, InputError):
            print(f"waterfall {name}: not available ({wf.field}: {wf.message})")
            continue
        parts = ", ".join(f"{s.key} {s.bytes / GiB:.2f}" for s in wf.steps())
        print(f"waterfall {name} (GiB): total {wf.total / GiB:.2f}, {parts}, KV cache {wf.kv_cache() / GiB:.2f}")
        note = wf.source.split(": ", 1)[-1]
        print(f"  {note}")
    if checks:
        print()
        print(f"cross-check with {args.model} (predicted from the smallest available memory of each engine's ranks):")
        rows = [("engine", "rank", "avail GiB", "tokens logged", "tokens predicted", "diff",
                 "range for avail +-0.005 GiB", "inside", "max conc. logged", "max conc. predicted")]
        for c in checks:
            inside = {True: "yes", False: "NO", None: ""}[c.tokens_inside]
            rows.append((
                c.engine, c.worker, f"{c.available_kv_cache / GiB:.2f}",
                _fmt_int(c.logged_kv_cache_tokens), _fmt_int(c.predicted_kv_cache_tokens),
                _fmt_int(c.tokens_difference), f"{c.tokens_range[0]:,}-{c.tokens_range[1]:,}", inside,
                "" if c.logged_max_concurrency is None else f"{c.logged_max_concurrency:.2f}x",
                f"{c.predicted_max_concurrency:.2f}x",
            ))
        _print_table(rows)
        settings = {**checks[0].settings, **checks[0].settings_extra}
        print("  settings: " + ", ".join(f"{k}={v}" for k, v in settings.items()))
        if checks[0].given:
            print("  given by flag: " + ", ".join(checks[0].given))
        for assumed in checks[0].assumed:
            print(f"  assumed: {assumed}")
        for c in checks:
            for note in c.notes:
                print(f"  {c.engine}: {note}")
    return 0


def _header(log: VllmLog) -> str:
    c = log.config
    bits = [f"vLLM {c.version or '?'}", c.model or "model ?"]
    for label, value in (("TP", c.tensor_parallel_size), ("DP", c.data_parallel_size),
                         ("PP", c.pipeline_parallel_size), ("max_model_len", c.max_model_len),
                         ("kv_cache_dtype", c.kv_cache_dtype), ("speculative tokens", c.num_speculative_tokens),
                         ("gpu_memory_utilization", c.gpu_memory_utilization), ("block size", c.block_size)):
        if value is not None:
            bits.append(f"{label} {value}")
    if c.enable_prefix_caching is not None:
        bits.append(f"prefix caching {'on' if c.enable_prefix_caching else 'off'}")
    return f"{log.path}: " + " | ".join(bits)


def _gib(value: int | None) -> str:
    return "" if value is None else f"{value / GiB:.2f}"


def _fmt_int(value: int | None) -> str:
    return "" if value is None else f"{value:,}"


def _worker_row(w: WorkerLog) -> tuple[str, ...]:
    graphs = ", ".join(f"{g.mode}={g.count}" for g in w.cudagraph_groups)
    pool = ""
    if w.cudagraph_pool_actual is not None:
        pool = f"{_gib(w.cudagraph_pool_actual)}/{_gib(w.cudagraph_pool_estimated)}"
    block = "" if w.attention_block_size is None else str(w.attention_block_size)
    if w.mamba_padding_pct is not None:
        block += f" (+{w.mamba_padding_pct:.2f}%)"
    return (
        w.name, _gib(w.weights), graphs, _gib(w.cudagraph_estimate), _gib(w.available_kv_cache),
        _fmt_int(w.kv_cache_tokens), "" if w.max_concurrency is None else f"{w.max_concurrency:.2f}x",
        _gib(w.graph_capture_memory), pool, "" if w.init_seconds is None else f"{w.init_seconds:.1f}", block,
    )


_WORKER_HEADER = ("process", "weights GiB", "graphs", "graph est. GiB", "avail KV GiB", "KV tokens", "max conc.",
                  "capture GiB", "pool act/est GiB", "init s", "attn block")


def _worker_rows(log: VllmLog) -> Callable[[], Iterator[tuple[str, ...]]]:
    """The workers table's rows, made afresh on each call (the table is printed in two passes)."""
    def rows() -> Iterator[tuple[str, ...]]:
        yield _WORKER_HEADER
        for w in log.workers:
            row = _worker_row(w)
            if any(row[1:]):
                yield row

    return rows


def _table(rows: Sequence[tuple[str, ...]]) -> str:
    keep = [i for i in range(len(rows[0])) if any(r[i] for r in rows[1:])]
    widths = [max(len(r[i]) for r in rows) for i in keep]
    return "\n".join("  ".join(r[i].ljust(w) for i, w in zip(keep, widths, strict=True)).rstrip() for r in rows)


def _print_table(rows: Sequence[tuple[str, ...]] | Callable[[], Iterator[tuple[str, ...]]]) -> None:
    """:func:`_table`, printed line by line: widths from a first pass over the rows, the lines from a second."""
    make = rows if callable(rows) else (lambda: iter(rows))
    widths: list[int] | None = None
    filled: list[bool] = []
    for i, row in enumerate(make()):
        if widths is None:
            widths, filled = [len(c) for c in row], [False] * len(row)
            continue
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
        filled = [f or bool(c) for f, c in zip(filled, row, strict=True)]
    if widths is None:
        return
    keep = [i for i, f in enumerate(filled) if f]
    for row in make():
        print("  ".join(row[i].ljust(widths[i]) for i in keep).rstrip())


def _stream_json(log: VllmLog, waterfalls: Iterator[tuple[str, Any]], checks: list[Any]) -> None:
    """``log.to_dict()`` plus the waterfalls and the cross-check, written one worker at a time."""
    out = sys.stdout
    head = log.to_dict(workers=False)
    out.write("{\n")
    for key, value in head.items():
        out.write(f"  {json.dumps(key)}: {_indented(value)},\n")

    def section(name: str, items: Iterator[tuple[str, Any]], last: bool = False) -> None:
        out.write(f"  {json.dumps(name)}: {{")
        sep = "\n"
        for key, value in items:
            out.write(f"{sep}    {json.dumps(key)}: {_indented(value, 4)}")
            sep = ",\n"
        out.write("\n  }" if sep == ",\n" else "}")
        out.write("\n" if last else ",\n")

    section("workers", ((w.name, w.to_dict()) for w in log.workers))
    section("waterfalls", ((k, v.to_dict() if not isinstance(v, InputError) else {"error": str(v)})
                           for k, v in waterfalls))
    out.write(f"  \"cross_check\": {_indented([c.to_dict() for c in checks])}\n}}\n")


def _indented(value: Any, level: int = 2) -> str:
    return json.dumps(value, indent=2, default=json_default).replace("\n", "\n" + " " * level)
