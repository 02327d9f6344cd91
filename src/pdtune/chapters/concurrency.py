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

    The article's column divides one GPU's KV cache by one whole request: it counts requests *per GPU*,
    though the article calls it per engine. vLLM's maximum concurrency is per engine (a TP group of
    ``gpus_per_engine`` GPUs), so per GPU it is ``requests_vllm_per_gpu``. ``vllm_vs_article`` compares
    like with like: vLLM per GPU over the article's per GPU (1.0 when the state shards perfectly and the
    request is the article's; less with MTP's extra states or with replicated KV heads).
    """
    frame = (t3 if t3 is not None else article.table3_recomputed()).copy()
    frame["gpus_per_engine"] = [article.TOPOLOGIES[t].tp for t in frame["topology"]]
    frame["requests_vllm_per_gpu"] = frame["requests_vllm"] / frame["gpus_per_engine"]
    frame["vllm_vs_article"] = frame["requests_vllm_per_gpu"] / frame["requests_article"]
    return frame


def layout_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (topology, MTP) of :func:`table3_per_gpu`: the range of ``vllm_vs_article`` and of
    ``requests_vllm_per_gpu`` over the runs, as ``<column>_min`` and ``<column>_max``."""
    columns = ["vllm_vs_article", "requests_vllm_per_gpu", "kv_cache_gib"]
    grouped = frame.groupby(["topology", "mtp"], sort=False)[columns].agg(["min", "max"])
    grouped.columns = [f"{c}_{stat}" for c, stat in grouped.columns]
    return grouped.reset_index()


def requests_comparison(t3: pd.DataFrame | None = None) -> pd.DataFrame:
    """Table 3's requests per GPU, long format for a chart: the article's column (one GPU's KV cache over a
    whole request) and vLLM's maximum concurrency of one engine over the engine's GPUs, per run."""
    frame = table3_per_gpu(t3)
    rows = []
    for r in frame.itertuples():
        label = f"run {r.run} · {r.topology}{' + MTP' if r.mtp else ''}"
        rows.append({"run": r.run, "run_label": label, "topology": r.topology, "mtp": r.mtp,
                     "measure": "article: one GPU's KV cache ÷ 759 MiB", "requests": r.published_requests_per_engine,
                     "mib_per_request": article.constants()["per_request_state"],
                     "provenance": f"article table 3, run {r.run}"})
        rows.append({"run": r.run, "run_label": label, "topology": r.topology, "mtp": r.mtp,
                     "measure": f"vLLM {article.ARTICLE_VLLM}: one engine's requests ÷ its GPUs",
                     "requests": r.requests_vllm_per_gpu, "mib_per_request": r.mib_per_request_rank,
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


#: The real start-up log chapter 4 checks (``data/logs/README.md``: LMCache issue 1739, Qwen3-14B on one
#: GPU, printed by vLLM 0.10.2, which sizes a one-group cache as 0.11 does).
BUNDLED_LOG = ("lmcache-1739-qwen3-14b.log", "qwen3-14b", "0.11")


def log_checks(paths: Iterable[str], model: str, *, vllm: str | None = None) -> pd.DataFrame:
    """Each engine of each vLLM start-up log: logged KV cache tokens and concurrency beside pdtune's.

    ``vllm`` is the line to follow when a log does not name its version. Empty (with the columns) when no
    log is given; :func:`bundled_log_check` is the real log the chapter always shows.
    """
    from pdtune.scenario import Scenario
    from pdtune.vllm_log import cross_check, parse_log

    columns = ["log", "engine", "available_kv_cache_gib", "logged_kv_cache_tokens",
               "predicted_kv_cache_tokens", "logged_max_concurrency", "predicted_max_concurrency"]
    rows = []
    for path in paths:
        resolved = Scenario().resolve(path)
        for check in cross_check(parse_log(resolved), model, vllm=vllm):
            d = check.to_dict()
            rows.append({"log": resolved.name, **{c: d.get(c) for c in columns[1:]}})
    return pd.DataFrame(rows, columns=columns)


def bundled_log_check() -> pd.DataFrame:
    """:func:`log_checks` of the real log in ``data/logs/`` (:data:`BUNDLED_LOG`), with its model."""
    from pdtune.paths import logs_dir

    name, model, vllm = BUNDLED_LOG
    frame = log_checks([str(logs_dir() / name)], model, vllm=vllm)
    return frame.assign(log=f"{name} ({model})")


def layout_sentence(capacity: pd.DataFrame, model: str) -> str:
    """Which of the parameters' decode layouts holds the most KV cache and the most requests per GPU."""
    leaders = capacity_leaders(capacity)
    if leaders["most-requests-topology"] == "none":
        return f"None of these decode layouts fits {model} on this GPU: its weights leave no KV cache."
    kv, req = leaders["most-kv-topology"], leaders["most-requests-topology"]
    mtp = " with MTP" if leaders["most-requests-mtp"] else ""
    text = (f"For {model}, the layout with the most KV cache per GPU is {kv} ({leaders['most-kv']:,.2f} GiB), "
            f"and the one with the most requests per GPU is {req}{mtp} ({leaders['most-requests']:,.1f} per "
            f"GPU, {leaders['most-requests-gpus']:,} GPUs for one deployment)")
    if kv != req:
        text += (": more KV cache per GPU does not mean more requests when the larger TP group replicates "
                 "heads, or when a request's state on one rank is larger")
    return text + "."


def log_numbers(checks: pd.DataFrame) -> dict[str, Any]:
    """The first engine of a :func:`log_checks` frame: ``kv-gib``, ``logged-tokens``, ``predicted-tokens``,
    ``logged-concurrency``, ``predicted-concurrency`` (what the chapter's sentence quotes)."""
    if len(checks) == 0:
        raise InputError("vllm_logs", "-", "no engine in the log reported a KV cache size")
    r = checks.iloc[0]
    return {"kv-gib": float(r["available_kv_cache_gib"]), "logged-tokens": int(r["logged_kv_cache_tokens"]),
            "predicted-tokens": int(r["predicted_kv_cache_tokens"]),
            "logged-concurrency": float(r["logged_max_concurrency"]),
            "predicted-concurrency": float(r["predicted_max_concurrency"])}


def capacity_table(capacity: pd.DataFrame) -> pd.DataFrame:
    """:func:`pdtune.capacity.topology_capacity` for the page: the columns the prose and the chart name, the
    note only when some layout has one."""
    columns = ["topology", "mtp", "gpus", "weights_gib", "kv_cache_gib", "mib_per_request_rank",
               "requests_per_engine", "requests_per_gpu", "note"]
    out = capacity[columns]
    if not out["note"].fillna("").astype(str).str.strip().any():
        out = out.drop(columns="note")
    return out


def draft_and_dcp(speculative_model: str, decode_context_parallel_size: int) -> dict[str, Any]:
    """The draft model and DCP size as :func:`pdtune.capacity.topology_capacity` takes them (none: no change)."""
    from pdtune.model import load_model

    draft = load_model(speculative_model) if speculative_model.strip() else None
    return {"speculative_model": draft, "decode_context_parallel_size": decode_context_parallel_size}
