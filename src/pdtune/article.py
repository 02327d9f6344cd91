"""The article's tables, read from ``data/article/`` and recomputed side by side with pdtune's numbers.

Chapters 1-4 print these frames; the tests pin them. Columns named ``published_*`` come from the article,
everything else is computed here. Also the article's choices other chapters start from: a run of table 3
as a waterfall (:func:`article_waterfall`), the MTP draft tokens of its runs, and its decode layout
(:func:`reference_topology` picks it when a scenario lists it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

import pandas as pd

from pdtune.errors import InputError
from pdtune.guarded import bundled, read_frame
from pdtune.memory import Accounting, Waterfall, cudagraph_plan, weights_per_gpu
from pdtune.model import ModelSpec, load_model
from pdtune.paths import article_dir
from pdtune.scenario import Scenario
from pdtune.state import StatePlan, plan_state
from pdtune.topology import parse_topology
from pdtune.units import GiB, MiB, from_gib

_SETUP = Scenario()

#: The article's model and workload: the defaults of :class:`pdtune.scenario.Scenario`, the one place they are written.
MODEL, ISL, OSL, KV_CACHE_DTYPE = _SETUP.model, _SETUP.isl, _SETUP.osl, _SETUP.kv_cache_dtype
#: the vLLM the article ran (v0.26.1rc1.dev1177+ga9a17e709); its per-request arithmetic is 0.11's
ARTICLE_VLLM = "0.26.1"


@dataclass(frozen=True)
class Topology:
    """The two engine layouts of tables 1-3."""

    name: str
    tp: int  # attention tensor parallelism: what shards the KV cache and GDN state
    expert_shards: int  # GPUs the experts are spread over


TOPOLOGIES = {"TP8": Topology("TP8", 8, 8), "TP4DP4": Topology("TP4DP4", 4, 16)}


@cache
def constants() -> dict[str, float]:
    path = article_dir() / "constants.csv"
    with bundled():
        frame = read_frame(path, ("name", "value"))
        try:
            values = frame["value"].astype(float)
        except ValueError:
            raise InputError(path, "value", "every constant must be a number") from None
    return dict(zip(frame["name"], values, strict=True))


def table(number: int) -> pd.DataFrame:
    names = {1: "table1_activation_peak.csv", 2: "table2_cuda_graphs.csv", 3: "table3_memory_per_engine.csv"}
    with bundled():
        return read_frame(article_dir() / names[number])


def article_plan(*, vllm: str = "0.11", tp: int = 1, num_speculative_tokens: int = 0,
                 prefix_caching: bool = False, model: ModelSpec | None = None) -> StatePlan:
    """Per-request state of the article's workload (ISL 8192 + OSL 1024, fp8 KV cache)."""
    return plan_state(
        model or load_model(MODEL),
        max_model_len=ISL + OSL,
        kv_cache_dtype=KV_CACHE_DTYPE,
        tp=tp,
        vllm=vllm,
        num_speculative_tokens=num_speculative_tokens,
        prefix_caching=prefix_caching,
    )


def waterfall_of(row: pd.Series, *, total_gib: float | None = None, utilization: float | None = None) -> Waterfall:
    """One run of table 3 as a :class:`Waterfall` (GiB inputs as printed)."""
    c = constants()
    return Waterfall(
        total=from_gib(total_gib if total_gib is not None else c["total_memory"]),
        gpu_memory_utilization=utilization if utilization is not None else c["gpu_memory_utilization"],
        weights=from_gib(row["weights_gib"]),
        activation_peak=from_gib(row["activation_peak_gib"]),
        non_torch=from_gib(row["non_torch_gib"]),
        cudagraph_estimate=from_gib(row["cudagraph_estimate_gib"]),
        cuda_context=from_gib(row["cuda_context_gib"]),
        # The article subtracts the 2.28 GiB driver from "279 GB" as if both were GiB (279 - 2.28 = 276.72);
        # read the same way here so the waterfall starts where the article's does. In GB it would be
        # 259.84 GiB, less than the 276.62 GiB torch reports.
        capacity=from_gib(c["box_capacity"]),
        driver=from_gib(c["driver_overhead"]),
        source=f"article table 3, run {int(row['run'])}",
        version=ARTICLE_VLLM,
    )


def table2_recomputed() -> pd.DataFrame:
    """Table 2 with our graph counts and the unused columns recomputed from reserved and actual."""
    t2 = table(2)
    t2["graphs"] = [
        cudagraph_plan(int(r.max_num_seqs), num_speculative_tokens=int(r.num_speculative_tokens)).count
        for r in t2.itertuples()
    ]
    t2["unused_gib"] = (t2["reserved_gib"] - t2["actual_gib"]).round(2)
    t2["unused_pct"] = (100 * (t2["reserved_gib"] - t2["actual_gib"]) / t2["actual_gib"]).round(0).astype(int)
    return t2[["run", "topology", "mtp", "max_num_seqs", "graphs", "published_graphs", "reserved_gib", "actual_gib",
               "unused_gib", "published_unused_gib", "unused_pct", "published_unused_pct"]]


def table3_recomputed() -> pd.DataFrame:
    """Table 3: KV cache by vLLM's accounting and by the prose's, and requests per engine three ways.

    ``requests_article`` divides by the article's 759 MiB (one whole, unsharded request);
    ``requests_vllm`` is vLLM's max concurrency on one TP rank of the engine under the article's vLLM
    (0.26: TP-sharded state, ``1 + spec`` GDN states with MTP, the MTP layer's attention in the cache,
    no prefix caching).
    """
    t3 = table(3)
    per_request = article_plan().bytes_per_request
    rows = []
    for _, row in t3.iterrows():
        w = waterfall_of(row)
        kv = w.kv_cache(Accounting.VLLM)
        topo = TOPOLOGIES[row["topology"]]
        spec = int(row["num_speculative_tokens"])
        rank = article_plan(vllm=ARTICLE_VLLM, tp=topo.tp, num_speculative_tokens=spec)
        rows.append({
            "run": int(row["run"]),
            "topology": row["topology"],
            "mtp": bool(row["mtp"]),
            "kv_cache_gib": kv / GiB,
            "published_kv_cache_gib": row["published_kv_cache_gib"],
            "kv_cache_prose_gib": w.kv_cache(Accounting.ARTICLE_PROSE) / GiB,
            "requests_article": kv / per_request,
            "published_requests_per_engine": row["published_requests_per_engine"],
            "mib_per_request_rank": rank.bytes_per_request / MiB,
            "requests_vllm": rank.capacity(kv).max_concurrency,
        })
    return pd.DataFrame(rows)


def weights_recomputed() -> pd.DataFrame:
    """Weights per GPU from the derived config versus table 3, with the residual."""
    model = load_model(MODEL)
    t3 = table(3).drop_duplicates(["topology", "mtp"])
    rows = []
    for _, row in t3.iterrows():
        topo = TOPOLOGIES[row["topology"]]
        ours = weights_per_gpu(model, tp=topo.tp, ep=topo.expert_shards, mtp=bool(row["mtp"])).total / GiB
        rows.append({
            "topology": row["topology"],
            "mtp": bool(row["mtp"]),
            "weights_gib": ours,
            "published_weights_gib": row["weights_gib"],
            "residual_gib": row["weights_gib"] - ours,
        })
    return pd.DataFrame(rows)


def article_waterfall(run: int, *, utilization: float | None = None) -> Waterfall:
    """Table 3's ``run`` as a :class:`Waterfall` starting from the box (279, read as the article reads it)."""
    t3 = table(3)
    rows = t3[t3["run"] == run]
    if rows.empty:
        raise InputError("data/article/table3_memory_per_engine.csv", "run", f"no run {run}")
    return waterfall_of(rows.iloc[0], utilization=utilization)


def article_speculative_tokens() -> int:
    """The MTP draft tokens of the article's MTP runs (table 1)."""
    return int(table(1)["num_speculative_tokens"].max())


#: The decode layout the article picks for high concurrency (table 3 runs 5-8).
ARTICLE_DECODE_TOPOLOGY = "TP4DP4+EP"


def reference_topology(topologies: Sequence[str]) -> str:
    """The layout a chapter draws in detail: the article's TP4DP4+EP when listed, else the first listed."""
    if not topologies:
        raise InputError("decode_topologies", "decode_topologies", "the list is empty")
    wanted = parse_topology(ARTICLE_DECODE_TOPOLOGY)
    for name in topologies:
        if parse_topology(name, "decode_topologies") == wanted:
            return name
    return topologies[0]
