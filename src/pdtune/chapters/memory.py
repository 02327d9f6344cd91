"""Chapter 2, the memory waterfall: the frames, sentences and glued numbers the chapter prints.

The article's "279 GB" read two ways, the prose's budget step by step, weights per GPU by topology, the
waterfall as chart rows, the 7 % neither weights nor KV cache, what another ``gpu_memory_utilization``
buys, and the reserve each run leaves. The rules are in :mod:`pdtune.memory` (the waterfall) and
:mod:`pdtune.capacity` (a topology's waterfall); the article's runs in :mod:`pdtune.article`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pandas as pd

from pdtune import article
from pdtune.errors import InputError
from pdtune.memory import Accounting, Waterfall, max_utilization, weights_per_gpu
from pdtune.model import ModelSpec
from pdtune.topology import parse_topology
from pdtune.units import GiB, MiB, from_gib


def weights_by_topology(spec: ModelSpec, topologies: Iterable[str], *, mtp: bool = False) -> pd.DataFrame:
    """Weight GiB one GPU holds under each topology, by component (``pdtune.memory.weights_per_gpu``).

    Pipeline-parallel layouts are left out: ``weights_per_gpu`` does not split layers into stages.
    """
    use_mtp = mtp and spec.num_mtp_layers > 0
    rows = []
    for name in topologies:
        layout = parse_topology(name, "decode_topologies")
        if layout.pp > 1:
            continue
        w = weights_per_gpu(spec, tp=layout.tp, ep=layout.expert_shards, mtp=use_mtp)
        # The total first (what the prose quotes), then its largest parts, and the rest as one column.
        row: dict[str, Any] = {"topology": name.strip(), "gpus": layout.gpus, "mtp": use_mtp,
                               "weights_gib": w.total / GiB}
        rows.append((row, w.gib()))
    if not rows:
        return pd.DataFrame(columns=["topology", "gpus", "mtp", "weights_gib"])
    sizes: dict[str, float] = {}
    for _, parts in rows:
        for k, v in parts.items():
            sizes[k] = sizes.get(k, 0.0) + v
    shown = [k for k, v in sorted(sizes.items(), key=lambda kv: -kv[1]) if v >= 0.005][:PARTS_SHOWN]
    out = []
    for row, parts in rows:
        row = dict(row) | {f"{k}_gib": parts.get(k, 0.0) for k in shown}
        rest = sum(v for k, v in parts.items() if k not in shown)
        if rest >= 0.005 or len(sizes) > len(shown):
            row["other_gib"] = rest
        out.append(row)
    return pd.DataFrame(out).fillna(0.0)


#: Weight components :func:`weights_by_topology` shows one by one (the rest become ``other_gib``), so the
#: table fits the page.
PARTS_SHOWN = 4


#: The plain dense model chapter 2 works by hand, and its layout: Llama-3.1-70B on four GPUs.
DENSE_MODEL = "llama-3.1-70b"
DENSE_TOPOLOGY = "TP4"


def parameters(spec: ModelSpec) -> int:
    """Every parameter of the model's main layers (no MTP draft layers), from its config."""
    import dataclasses

    from pdtune.paramcount import count_parameters

    return sum(dataclasses.astuple(count_parameters(spec).main))


def steps_table(waterfall: Waterfall, accounting: Accounting | str = Accounting.VLLM) -> pd.DataFrame:
    """The waterfall of one GPU as a table: each part, and what is left after it, down to the KV cache."""
    rows = [{"part": step.label, "minus_gib": step.bytes / GiB, "left_gib": step.remaining_after / GiB}
            for step in waterfall.steps(accounting)]
    rows.append({"part": "KV cache", "minus_gib": None, "left_gib": waterfall.kv_cache(accounting) / GiB})
    top = {"part": "torch total", "minus_gib": None, "left_gib": waterfall.total / GiB}
    return pd.DataFrame([top, *rows], columns=["part", "minus_gib", "left_gib"])


def capacity_readings() -> pd.DataFrame:
    """The article's "279 GB" read as GB and as GiB, each minus the 2.28 GiB driver, against 276.62 GiB."""
    c = article.constants()
    rows = []
    for reading, capacity_gib in (("279 read as GB (10^9 bytes)", c["box_capacity"] * 1e9 / GiB),
                                  ("279 read as GiB (2^30 bytes)", c["box_capacity"])):
        after = capacity_gib - c["driver_overhead"]
        rows.append({
            "reading": reading,
            "capacity_gib": capacity_gib,
            "driver_gib": c["driver_overhead"],
            "left_gib": after,
            "torch_total_gib": c["total_memory"],
            "left_minus_torch_total_gib": after - c["total_memory"],
        })
    return pd.DataFrame(rows)


def prose_budget() -> pd.DataFrame:
    """The prose's "276.62 x 0.92 - 3.13 - 2.90 = 248 GiB", step by step, beside its published figures.

    ``value`` is ours (recomputed where the step is arithmetic, the article's input where it is not);
    ``published`` is the figure the prose prints.
    """
    c = article.constants()
    w = Waterfall(total=from_gib(c["total_memory"]), gpu_memory_utilization=c["gpu_memory_utilization"],
                  weights=0, activation_peak=0, non_torch=from_gib(c["prose_non_torch"]), cudagraph_estimate=0,
                  cuda_context=from_gib(c["prose_cuda_context"]), source="article prose",
                  version=article.ARTICLE_VLLM)
    rows = [
        ("torch total", w.total / GiB, c["total_memory"], "GiB"),
        ("gpu_memory_utilization", w.gpu_memory_utilization, c["gpu_memory_utilization"], "fraction"),
        ("requested = total x utilization", w.requested / GiB, c["requested_per_engine"], "GiB"),
        ("... rounded, as the prose says 'about'", float(round(w.requested / GiB)), c["prose_after_reserve"],
         "GiB"),
        ("CUDA context (prose)", w.cuda_context / GiB, c["prose_cuda_context"], "GiB"),
        ("non-torch (prose)", w.non_torch / GiB, c["prose_non_torch"], "GiB"),
        ("before weights = requested - context - non-torch", w.kv_cache(Accounting.ARTICLE_PROSE) / GiB,
         c["prose_before_weights"], "GiB"),
    ]
    return pd.DataFrame(rows, columns=["step", "value", "published", "unit"])


_STEP_PROVENANCE = {
    "reserve": "gpu_memory_utilization",
    "cuda_context": "measured at start-up",
    "non_torch": "measured at start-up",
    "weights": "measured at start-up",
    "activation_peak": "measured in the profiling run",
    "cudagraph_estimate": "vLLM's estimate",
}


def waterfall_frame(
    waterfalls: Mapping[str, Waterfall],
    *,
    accounting: Accounting | str = Accounting.VLLM,
    bytes_per_request: Mapping[str, int] | None = None,
) -> pd.DataFrame:
    """Chart rows of one or more waterfalls, from :meth:`Waterfall.steps`.

    Each scenario starts with a *level* row (the box when ``capacity`` is known, else the torch total),
    takes its steps, and ends with the KV cache level. The driver step is split into the driver the
    article names and whatever is left unexplained. ``delta_gib`` is what a step takes; the reserve's is
    recomputed by the chart from the utilization slider, so the frame also carries ``total_gib``.
    ``mib_per_request`` (if given) lets the chart turn the KV cache into requests.
    """
    rows: list[dict[str, Any]] = []
    for s_order, (scenario, w) in enumerate(waterfalls.items()):
        steps = w.steps(accounting)
        start = w.capacity if w.capacity is not None and w.driver is not None else w.total
        per_request = (bytes_per_request or {}).get(scenario)
        base = {
            "scenario": scenario,
            "scenario_order": s_order,
            "start_gib": start / GiB,
            "total_gib": w.total / GiB,
            "utilization": w.gpu_memory_utilization,
            "mib_per_request": per_request / MiB if per_request else None,
            "source": w.source,
        }
        order = 0

        def add(key: str, label: str, kind: str, delta: int, provenance: str) -> None:
            nonlocal order
            rows.append({**base, "order": order, "key": key, "label": label, "kind": kind,
                         "delta_gib": delta / GiB, "provenance": provenance})
            order += 1

        if start != w.total:
            add("box", "on the box (279 read as GiB)", "level", 0, "article prose: the GB300 starts with 279 GB")
        for step in steps:
            if step.key == "driver":
                assert w.driver is not None
                add("driver", "driver (article: 2.28 GiB)", "step", w.driver, "article prose")
                rest = step.bytes - w.driver
                if rest:
                    add("unexplained", "unexplained (279 - 2.28 - 276.62)", "step", rest,
                        "arithmetic of the prose")
                continue
            if step.key == "reserve":
                add("total", "torch total (what vLLM sees)", "level", 0, f"total memory; {w.source}")
            if step.key == "cuda_context" and step.bytes == 0:
                continue  # a scenario with no measured context: nothing for the prose toggle to subtract
            kind = "reserve" if step.key == "reserve" else "step"
            # The reserve's size follows the chart's slider, so its label must not print today's value.
            label = "reserve (1 - utilization)" if step.key == "reserve" else step.label
            add(step.key, label, kind, step.bytes, f"{_STEP_PROVENANCE.get(step.key, step.key)}; {w.source}")
        add("kv_cache", "KV cache", "kv", 0, f"what is left; {w.source}")
    return pd.DataFrame(rows)


def utilization_what_if(
    waterfalls: Mapping[str, Waterfall],
    utilizations: Sequence[float],
    bytes_per_request: Mapping[str, int],
    *,
    names: Mapping[str, str] | None = None,
) -> pd.DataFrame:
    """KV cache and requests (KV / bytes per request) of each waterfall at other ``gpu_memory_utilization``.

    One row per utilization; for each waterfall (named by ``names``, short labels for the headers) its KV
    cache in GiB and the requests it holds by the article's count, under a two-level header.
    """
    columns: dict[tuple[str, str], list[Any]] = {}
    for label, w in waterfalls.items():
        short = (names or {}).get(label, label)
        kv = [w.with_utilization(u).kv_cache() for u in utilizations]
        columns[(short, "KV cache (GiB)")] = [k / GiB for k in kv]
        per = bytes_per_request.get(label)
        columns[(short, "requests")] = [k / per if per else None for k in kv]
    frame = pd.DataFrame(columns, index=pd.Index(list(utilizations), name="gpu_memory_utilization"))
    frame.columns = pd.MultiIndex.from_tuples(frame.columns)
    return frame


def utilization_step(waterfall: Waterfall, bytes_per_request: int, *, step: float = 0.01) -> dict[str, Any]:
    """What ``step`` more ``gpu_memory_utilization`` buys: ``gib`` of KV cache and ``requests`` of that size.

    Also ``total-gib``, the memory the step is a share of.
    """
    raised = waterfall.with_utilization(waterfall.gpu_memory_utilization + step)
    more = raised.kv_cache() - waterfall.kv_cache()
    return {"step": step, "total-gib": waterfall.total / GiB, "gib": more / GiB,
            "requests": more / bytes_per_request}


def reserve_check() -> pd.DataFrame:
    """Tables 2 and 3 side by side: the reserve, the CUDA context inside it, and any graph overrun.

    vLLM only starts if ``total x utilization`` is free once the CUDA context exists, and a graph that
    outgrows its estimate spills into what the reserve leaves. So the highest utilization a run tolerates is
    ``(total - context - overrun) / total``.
    """
    c = article.constants()
    t2 = article.table(2).set_index("run")
    t3 = article.table(3).set_index("run")
    total = c["total_memory"]
    rows = []
    for run in t3.index:
        w = article.article_waterfall(int(run))
        overrun = max(0.0, float(t2.loc[run, "actual_gib"] - t2.loc[run, "reserved_gib"]))
        ctx = float(t3.loc[run, "cuda_context_gib"])
        rows.append({
            "run": int(run),
            "topology": t3.loc[run, "topology"],
            "mtp": bool(t3.loc[run, "mtp"]),
            "reserve_gib": w.reserve / GiB,
            "cuda_context_gib": ctx,
            "graph_overrun_gib": overrun,
            "reserve_left_gib": w.reserve / GiB - ctx - overrun,
            "max_utilization": max_utilization(total, ctx, overrun),
        })
    return pd.DataFrame(rows)


def log_waterfalls(paths: Iterable[str], *, gpu_memory_gib: float | None = None) -> dict[str, Waterfall]:
    """``{label: waterfall}`` for the first memory-profiling worker of each vLLM start-up log."""
    from pdtune.scenario import Scenario
    from pdtune.vllm_log import parse_log

    out: dict[str, Waterfall] = {}
    for path in paths:
        resolved = Scenario().resolve(path)
        log = parse_log(resolved)
        workers = log.memory_workers
        if not workers:
            raise InputError(resolved, "Available KV cache memory", "no process in the log profiled memory")
        worker = workers[0]
        total = None
        if worker.total_memory is None and gpu_memory_gib is not None:
            total = from_gib(gpu_memory_gib)
        out[f"measured: {resolved.name} [{worker.name}]"] = log.waterfall(worker.name, total=total)
    return out


def waterfall_sentence(modeled: Waterfall, spec: ModelSpec, topology: str, *, article_model: bool) -> str:
    """What the modeled panel leaves for the KV cache, beside the article's run 7."""
    run7 = article.article_waterfall(7).kv_cache() / GiB
    text = (f"The modeled panel leaves {modeled.kv_cache() / GiB:,.2f} GiB of KV cache on one GPU of "
            f"{spec.name} {topology} at utilization {modeled.gpu_memory_utilization:g}, against the "
            f"{run7:,.2f} GiB the article measured in run 7")
    if article_model:
        return text + ": for the article's own model the difference is the weights residual of the previous section."
    return text + f" for its own model on a GB300: the weights of {spec.name} and its GPU's memory make the difference."
