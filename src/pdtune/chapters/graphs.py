"""Chapter 3, activation peak and CUDA graphs: the frames and glued numbers the chapter prints.

Table 1 with the batched-tokens rule checked, graph counts for other ``max_num_seqs``, table 2 with the
largest per-graph increment each estimate allows, and what the unused graph memory costs in requests. The
rules are in :mod:`pdtune.memory` (capture sizes, counts, the estimate).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pandas as pd

from pdtune import article
from pdtune.memory import CUDAGraphMode, cudagraph_plan, default_max_num_batched_tokens, implied_increment
from pdtune.units import MiB, from_gib


def table1_checked() -> pd.DataFrame:
    """Table 1 with ``max_num_batched_tokens`` recomputed from the article's rule, and each activation peak
    as a share of the GPU's torch total (``pct_of_gpu``)."""
    t1 = article.table(1)
    t1["max_num_batched_tokens_rule"] = [
        default_max_num_batched_tokens(int(r.max_num_seqs), int(r.num_speculative_tokens)) for r in t1.itertuples()
    ]
    t1["rule_holds"] = t1["max_num_batched_tokens_rule"] == t1["max_num_batched_tokens"]
    t1["pct_of_gpu"] = 100 * t1["activation_peak_gib"] / article.constants()["total_memory"]
    t1["provenance"] = [f"article table 1, run {r}" for r in t1["run"]]
    return t1


def graph_counts(max_num_seqs: Iterable[int], num_speculative_tokens: int) -> pd.DataFrame:
    """Graphs captured for each ``max_num_seqs``, without and with ``num_speculative_tokens``, in both modes."""
    rows = []
    ks = sorted({0, num_speculative_tokens})
    for seqs in max_num_seqs:
        for k in ks:
            decode_only = cudagraph_plan(seqs, num_speculative_tokens=k, mode=CUDAGraphMode.FULL_DECODE_ONLY)
            both = cudagraph_plan(seqs, num_speculative_tokens=k, mode=CUDAGraphMode.FULL_AND_PIECEWISE)
            rows.append({
                "max_num_seqs": seqs,
                "num_speculative_tokens": k,
                "max_num_batched_tokens": default_max_num_batched_tokens(seqs, k),
                "max_capture_size": decode_only.max_capture_size,
                "smallest_graph": min(decode_only.capture_sizes),
                "graphs_full_decode_only": decode_only.count,
                "graphs_full_and_piecewise": both.count,
            })
    return pd.DataFrame(rows)


def table2_bounds() -> pd.DataFrame:
    """Table 2 recomputed, with the largest per-graph increment each estimate allows.

    ``estimate = first + (n - 1) x increment`` with ``first`` > 0, so ``increment < estimate / (n - 1)``:
    :func:`pdtune.memory.implied_increment` with ``first = 0``.
    """
    t2 = article.table2_recomputed()
    t2["max_increment_mib"] = [
        implied_increment(from_gib(r.reserved_gib), 0, int(r.graphs)) / MiB for r in t2.itertuples()
    ]
    t2["estimate_covers_actual"] = t2["reserved_gib"] >= t2["actual_gib"]
    t2["provenance"] = [f"article table 2, run {r}" for r in t2["run"]]
    return t2


def table2_summary(t2: pd.DataFrame | None = None) -> dict[str, Any]:
    """Table 2 in a few numbers: ``runs``, ``graph-counts-match`` (our count equals the published one),
    ``over-reserved`` runs (estimate above actual) with ``min-over-pct``/``max-over-pct`` of actual, and
    ``under-reserved`` runs."""
    frame = t2 if t2 is not None else table2_bounds()
    over = frame[frame["reserved_gib"] > frame["actual_gib"]]
    pct = 100 * (over["reserved_gib"] - over["actual_gib"]) / over["actual_gib"]
    return {
        "runs": len(frame),
        "graph-counts-match": int((frame["graphs"] == frame["published_graphs"]).sum()),
        "over-reserved": len(over),
        "min-over-pct": float(pct.min()) if len(over) else float("nan"),
        "max-over-pct": float(pct.max()) if len(over) else float("nan"),
        "under-reserved": int((frame["reserved_gib"] < frame["actual_gib"]).sum()),
    }


def graph_estimate_cost() -> pd.DataFrame:
    """Table 2's unused graph memory as requests the KV cache could have held, both ways of counting."""
    t2 = article.table2_recomputed().set_index("run")
    t3 = article.table3_recomputed().set_index("run")
    per_request_mib = article.article_plan().bytes_per_request / MiB
    rows = []
    for run in t2.index:
        unused = float(t2.loc[run, "reserved_gib"] - t2.loc[run, "actual_gib"])
        rows.append({
            "run": int(run),
            "topology": t2.loc[run, "topology"],
            "mtp": bool(t2.loc[run, "mtp"]),
            "unused_gib": unused,
            "requests_article": unused * 1024 / per_request_mib,
            "requests_vllm_rank": unused * 1024 / float(t3.loc[run, "mib_per_request_rank"]),
        })
    return pd.DataFrame(rows)


def per_graph_table(t2: pd.DataFrame | None = None) -> pd.DataFrame:
    """Table 2 per graph: the estimate and what was used, per captured graph, beside the largest per-graph
    increment the estimate allows (``reserved / (n - 1)``, :func:`table2_bounds`).

    When a run's graphs used more per graph, on average, than its estimate allows for any graph after the
    first (``used_per_graph_mib > max_increment_mib``), the two largest graphs vLLM captured to measure the
    increment added less memory than the smaller ones did: the estimate, not the graphs, is what fell short.
    """
    frame = (t2 if t2 is not None else table2_bounds()).copy()
    frame["reserved_per_graph_mib"] = frame["reserved_gib"] * 1024 / frame["graphs"]
    frame["used_per_graph_mib"] = frame["actual_gib"] * 1024 / frame["graphs"]
    return frame[["run", "topology", "mtp", "max_num_seqs", "graphs", "reserved_gib", "actual_gib",
                  "reserved_per_graph_mib", "used_per_graph_mib", "max_increment_mib"]]


def oddities_numbers(t2: pd.DataFrame | None = None) -> dict[str, Any]:
    """Runs 3, 5 and 6 of table 2 in the numbers chapter 3's explanation quotes.

    ``used-ratio-5-3`` and ``reserved-ratio-5-3``: run 5 (TP4DP4) over run 3 (TP8), same 80 sequences and
    37 graphs; ``dp``: run 5's data-parallel size; ``max-increment-6`` and ``used-per-graph-6``: the most a
    further graph may add under run 6's estimate, and what its graphs used on average.
    """
    frame = per_graph_table(t2).set_index("run")
    r3, r5, r6 = frame.loc[3], frame.loc[5], frame.loc[6]
    return {
        "used-ratio-5-3": float(r5["actual_gib"] / r3["actual_gib"]),
        "reserved-ratio-5-3": float(r5["reserved_gib"] / r3["reserved_gib"]),
        "dp": 16 // 4,  # TP4DP4: 16 GPUs, TP4, so DP4
        "max-increment-5": float(r5["max_increment_mib"]),
        "max-increment-6": float(r6["max_increment_mib"]),
        "used-per-graph-5": float(r5["used_per_graph_mib"]),
        "used-per-graph-6": float(r6["used_per_graph_mib"]),
        "used-per-graph-3": float(r3["used_per_graph_mib"]),
    }


def engine_requests(activation_peak_gib: float, cudagraph_estimate_gib: float, bytes_per_request: int) -> pd.DataFrame:
    """The activation peak and the CUDA-graph estimate of the parameters, as requests of ``bytes_per_request``."""
    rows = [{"part": part, "size_gib": gib, "requests": from_gib(gib) / bytes_per_request}
            for part, gib in (("activation peak", activation_peak_gib),
                              ("CUDA-graph estimate", cudagraph_estimate_gib))]
    return pd.DataFrame(rows)
