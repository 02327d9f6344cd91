"""Chapter 4, concurrency per engine: the frames, sentences and glued numbers the chapter prints.

Table 3's requests per engine the article's way and vLLM's way, per GPU, per layout; the article's
layouts and the reader's ranked by requests per GPU; vLLM's count for one KV cache; start-up logs checked
against it. The rules are in :mod:`pdtune.capacity` and :mod:`pdtune.state`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pandas as pd

from pdtune import article
from pdtune.capacity import topology_capacity
from pdtune.errors import InputError
from pdtune.state import StatePlan
from pdtune.units import GiB, MiB


def table3_per_gpu(t3: pd.DataFrame | None = None) -> pd.DataFrame:
    """:func:`pdtune.article.table3_recomputed` with what one GPU holds: an engine is ``tp`` GPUs.

    Adds ``gpus_per_engine``, ``requests_vllm_per_gpu`` and ``vllm_vs_article`` (vLLM's max concurrency
    over the article's requests per engine).
    """
    frame = (t3 if t3 is not None else article.table3_recomputed()).copy()
    frame["gpus_per_engine"] = [article.TOPOLOGIES[t].tp for t in frame["topology"]]
    frame["requests_vllm_per_gpu"] = frame["requests_vllm"] / frame["gpus_per_engine"]
    frame["vllm_vs_article"] = frame["requests_vllm"] / frame["requests_article"]
    return frame


def layout_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (topology, MTP) of :func:`table3_per_gpu`: the range of ``vllm_vs_article`` and of
    ``requests_vllm_per_gpu`` over the runs, as ``<column>_min`` and ``<column>_max``."""
    columns = ["vllm_vs_article", "requests_vllm_per_gpu", "kv_cache_gib"]
    grouped = frame.groupby(["topology", "mtp"], sort=False)[columns].agg(["min", "max"])
    grouped.columns = [f"{c}_{stat}" for c, stat in grouped.columns]
    return grouped.reset_index()


def requests_comparison(t3: pd.DataFrame | None = None) -> pd.DataFrame:
    """Table 3's requests per engine, long format for a chart: the article's column and vLLM's, per run."""
    frame = t3 if t3 is not None else article.table3_recomputed()
    rows = []
    for r in frame.itertuples():
        label = f"run {r.run} · {r.topology}{' + MTP' if r.mtp else ''}"
        rows.append({"run": r.run, "run_label": label, "topology": r.topology, "mtp": r.mtp,
                     "measure": "article: KV cache ÷ 759 MiB", "requests": r.published_requests_per_engine,
                     "mib_per_request": article.constants()["per_request_state"],
                     "provenance": f"article table 3, run {r.run}"})
        rows.append({"run": r.run, "run_label": label, "topology": r.topology, "mtp": r.mtp,
                     "measure": f"vLLM {article.ARTICLE_VLLM}: one TP rank", "requests": r.requests_vllm,
                     "mib_per_request": r.mib_per_request_rank,
                     "provenance": f"pdtune.state, vLLM {article.ARTICLE_VLLM}, KV cache of table 3 run {r.run}"})
    return pd.DataFrame(rows)


def article_topology_capacity(topologies: Iterable[str], *, run: int = 7) -> pd.DataFrame:
    """:func:`topology_capacity` of the article's model and workload, with table 3 ``run``'s measured parts.

    The GPU, its utilization and the speculative tokens are the article's.
    """
    t3 = article.table(3)
    row = t3[t3["run"] == run]
    if row.empty:
        raise InputError("data/article/table3_memory_per_engine.csv", "run", f"no run {run}")
    r = row.iloc[0]
    c = article.constants()
    from pdtune.model import load_model

    return topology_capacity(
        load_model(article.MODEL), topologies, gpu_memory_gib=c["total_memory"],
        gpu_memory_utilization=c["gpu_memory_utilization"], non_torch_gib=float(r["non_torch_gib"]),
        activation_peak_gib=float(r["activation_peak_gib"]),
        cudagraph_estimate_gib=float(r["cudagraph_estimate_gib"]), max_model_len=article.ISL + article.OSL,
        kv_cache_dtype=article.KV_CACHE_DTYPE, vllm=article.ARTICLE_VLLM,
        num_speculative_tokens=article.article_speculative_tokens(),
    )


def capacity_leaders(capacity: pd.DataFrame) -> dict[str, Any]:
    """The layouts of :func:`topology_capacity` that lead: ``most-kv-*`` (KV cache per GPU) and
    ``most-requests-*`` (vLLM's requests per GPU, over every row with or without MTP), each with its
    ``-topology``, ``-gpus`` (per deployment), ``-mtp`` and the value; NaN and "none" when no row fits."""
    numbers: dict[str, Any] = {}
    has_numbers = "requests_per_gpu" in capacity
    fits = capacity.dropna(subset=["requests_per_gpu"]) if has_numbers else capacity.iloc[0:0]
    for name, column in (("most-kv", "kv_cache_gib"), ("most-requests", "requests_per_gpu")):
        if fits.empty:
            numbers.update({f"{name}-topology": "none", f"{name}-gpus": float("nan"),
                            f"{name}-mtp": False, name: float("nan")})
            continue
        best = fits.loc[fits[column].idxmax()]
        numbers.update({f"{name}-topology": best["topology"], f"{name}-gpus": int(best["gpus"]),
                        f"{name}-mtp": bool(best["mtp"]), name: float(best[column])})
    return numbers


def capacity_numbers(plan: StatePlan, kv_cache_bytes: int) -> dict[str, Any]:
    """vLLM's count for one KV cache (:meth:`StatePlan.capacity`) and its inputs.

    ``kv-bytes`` (and ``kv-gib``), ``pool-block-bytes`` (``group-size`` pages of ``page-bytes``),
    ``num-blocks``, ``pool-blocks`` per request, ``max-concurrency``, ``kv-tokens`` (the "GPU KV cache
    size" line), ``groups``, ``block`` and ``mib`` per request.
    """
    cap = plan.capacity(kv_cache_bytes)
    return {
        "kv-bytes": kv_cache_bytes,
        "kv-gib": kv_cache_bytes / GiB,
        "page-bytes": plan.block_bytes,
        "group-size": plan.group_size,
        "pool-block-bytes": plan.pool_block_bytes,
        "num-blocks": cap.num_blocks,
        "pool-blocks": plan.pool_blocks_per_request,
        "max-concurrency": cap.max_concurrency,
        "kv-tokens": cap.kv_cache_tokens,
        "groups": len(plan.groups),
        "block": plan.block_tokens,
        "mib": plan.bytes_per_request / MiB,
    }


def log_checks(paths: Iterable[str], model: str) -> pd.DataFrame:
    """Each engine of each vLLM start-up log: logged KV cache tokens and concurrency beside pdtune's.

    Empty (with the columns) when no log is given, so a chapter can show it unconditionally.
    """
    from pdtune.scenario import Scenario
    from pdtune.vllm_log import cross_check, parse_log

    columns = ["log", "engine", "available_kv_cache_gib", "num_blocks", "logged_kv_cache_tokens",
               "predicted_kv_cache_tokens", "logged_max_concurrency", "predicted_max_concurrency"]
    rows = []
    for path in paths:
        resolved = Scenario().resolve(path)
        for check in cross_check(parse_log(resolved), model):
            d = check.to_dict()
            rows.append({"log": resolved.name, **{c: d.get(c) for c in columns[1:]}})
    return pd.DataFrame(rows, columns=columns)
