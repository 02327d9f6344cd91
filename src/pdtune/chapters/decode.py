"""Chapter 6, decode isolation: why KV room decides the high-concurrency winner, and what MTP buys.

Chapter 5's reading of a sweep (:mod:`pdtune.chapters.prefill`) applied to decode with the article's
decode claims, then the explanation in sentences and frames: every deployment at the highest concurrency
beside its KV room (:func:`high_end`), MTP's gain while the room holds every request and once it does not
(:func:`mtp_effect`), and the roofline sketch in words. The rules are in :mod:`pdtune.capacity` (KV room)
and :mod:`pdtune.perfmodel.roofline` (experts touched, the decode roofline).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

import pandas as pd

from pdtune import article
from pdtune.chapters.display import MISSING, concurrency_list
from pdtune.chapters.prefill import Claim
from pdtune.results.schema import empty_frame
from pdtune.sweep import Sweep


#: The article's decode findings (figure 2, ISL/OSL 1/1000, MTP with 3 speculative tokens).
DECODE_CLAIMS: tuple[Claim, ...] = (
    Claim("decode", "TEP8 with MTP is best at low concurrency", "TEP8+MTP", "low"),
    Claim("decode", "TEP8 (without MTP) is best at 512 and 1024", "TEP8", "at", (512, 1024)),
    Claim("decode", "TP4DP4+EP is best at high concurrency", "TP4DP4+EP", "high"),
)


def high_end(sweep: Sweep, room: pd.DataFrame, best: pd.DataFrame) -> pd.DataFrame:
    """Every deployment at the highest swept concurrency, fastest first, with its KV room: who holds all
    the requests and who makes them wait. ``won_at`` lists the concurrencies it wins anywhere in the sweep."""
    columns = ["deployment", "concurrency", "tps_per_gpu", "room", "holds_all", "flattens_at", "won_at"]
    if not sweep.available or len(best) == 0:
        return empty_frame(columns)
    top = int(best["concurrency"].max())
    at = sweep.frame[sweep.frame["concurrency"] == top][["deployment", "concurrency", "tps_per_gpu"]]
    merged = at.merge(room[["deployment", "room", "flattens_at"]], on="deployment", how="left") if len(room) \
        else at.assign(room=math.nan, flattens_at=math.nan)
    grid = [int(c) for c in best["concurrency"]]
    won = best.groupby("best")["concurrency"].apply(lambda c: concurrency_list([int(v) for v in c], grid))
    merged["holds_all"] = merged["room"] >= top
    merged["won_at"] = merged["deployment"].map(won).fillna(MISSING)
    merged = merged.sort_values("tps_per_gpu", ascending=False, kind="stable").reset_index(drop=True)
    return merged[columns]


def room_change(before: pd.DataFrame, after: pd.DataFrame, column: str = "room_at_workload") -> pd.DataFrame:
    """Two :func:`pdtune.capacity.kv_room` frames of one sweep side by side: requests held before and after a
    change."""
    columns = ["deployment", "before", "after", "gained"]
    if len(before) == 0:
        return empty_frame(columns)
    merged = before[["deployment", column]].merge(after[["deployment", column]], on="deployment",
                                                   suffixes=("_before", "_after"))
    out = pd.DataFrame({"deployment": merged["deployment"], "before": merged[f"{column}_before"],
                        "after": merged[f"{column}_after"]})
    return out.assign(gained=out["after"] - out["before"])[columns]


def mtp_effect(sweep: Sweep, room: pd.DataFrame) -> pd.DataFrame:
    """Per layout swept with and without MTP: MTP's gain (``tps with / tps without``) while the MTP
    variant's KV room holds every request, and once it does not.

    Columns: layout, room_with_mtp, below (concurrencies <= that room), wins_below ("k of n" where MTP is
    ahead), median_gain_below, above, wins_above, median_gain_above.
    """
    columns = ["layout", "room_with_mtp", "below", "wins_below", "median_gain_below", "above", "wins_above",
               "median_gain_above"]
    if not sweep.available:
        return empty_frame(columns)
    rows = []
    for layout, group in sweep.frame.groupby("layout", sort=False):
        if group["mtp"].nunique() < 2:
            continue
        wide = group.pivot_table(index="concurrency", columns="mtp", values="tps_per_gpu").dropna()
        gain = wide[True] / wide[False]
        mine = room[(room["layout"] == layout) & room["mtp"]] if len(room) else room
        cap = float(mine["room"].iloc[0]) if len(mine) and pd.notna(mine["room"].iloc[0]) else math.inf
        below, above = gain[gain.index <= cap], gain[gain.index > cap]

        grid = [int(c) for c in gain.index]

        def part(g: pd.Series) -> tuple[str, str, float]:
            if len(g) == 0:
                return MISSING, MISSING, math.nan
            return (concurrency_list([int(c) for c in g.index], grid), f"{int((g > 1).sum())} of {len(g)}",
                    float(g.median()))

        b, wb, gb = part(below)
        a, wa, ga = part(above)
        rows.append({"layout": layout, "room_with_mtp": cap if math.isfinite(cap) else math.nan, "below": b,
                     "wins_below": wb, "median_gain_below": gb, "above": a, "wins_above": wa,
                     "median_gain_above": ga})
    return pd.DataFrame(rows, columns=columns)


def _whole(requests: float) -> str:
    """Requests a KV cache holds, as the tables print them: whole requests, rounded down."""
    return f"{math.floor(requests + 1e-9):,}"


def winners(best: pd.DataFrame) -> list[str]:
    """The deployments that win somewhere in a best table, in order of first win."""
    return list(dict.fromkeys(best["best"])) if len(best) else []


def end_layouts(best: pd.DataFrame, topologies: Sequence[str]) -> list[str]:
    """The layouts (without ``+MTP``) that win the lowest and the highest concurrency; without a sweep, the
    reference layout of :func:`pdtune.article.reference_topology`."""
    if len(best) == 0:
        return [article.reference_topology(list(topologies))]
    ends = [best["best"].iloc[0], best["best"].iloc[-1]]
    return list(dict.fromkeys(str(e).removesuffix("+MTP") for e in ends))




def roofline_table(sketch: pd.DataFrame, spec: Any) -> pd.DataFrame:
    """The roofline sketch for the page: without the experts column for a model without experts."""
    return sketch.drop(columns=["experts_touched"]) if spec.moe is None else sketch


def room_table(sweep: Sweep, spec: Any, topologies: Sequence[str], **memory: Any) -> pd.DataFrame:
    """The KV room of every swept decode deployment (:func:`pdtune.capacity.kv_room`), or, with no sweep,
    of every decode layout of the parameters at the article's decode workload (ISL/OSL 1/1000) and at the
    disaggregated one (:func:`pdtune.capacity.layout_room`): chapter 4's accounting needs no sweep."""
    from pdtune.capacity import kv_room, layout_room

    if sweep.available:
        return kv_room(sweep, spec, **memory)
    isl, osl = memory.pop("isl"), memory.pop("osl")
    return layout_room(spec, topologies, sweep_isl=1, sweep_osl=1000, isl=isl, osl=osl, **memory)


# --- the dense example the chapter opens on ---------------------------------------------------------------

#: The dense example's decode engine (aiconfigurator measured TP1 to TP8; TP4 is the middle of the range).
DENSE_TOPOLOGY = "TP4"


def _dense_spec() -> Any:
    from pdtune.chapters.prefill import DENSE_MODEL
    from pdtune.model import load_model
    from pdtune.precision import parse_weights_dtype

    return parse_weights_dtype("fp8", load_model(DENSE_MODEL))


def dense_example(cases: pd.DataFrame | None = None) -> pd.DataFrame:
    """Llama-3.1-70B (FP8) on H200, TP4, ISL/OSL 8192/1024: aiconfigurator's measured median TPOT at each
    concurrency, the output tokens/s per GPU it gives (``B * 1000 / (TPOT g)``), and the roofline and
    modeled step of :func:`pdtune.perfmodel.roofline.decode_roofline` for the same batch."""
    from pdtune.chapters.prefill import DENSE_GPU, DENSE_MODEL, DENSE_WORKLOAD
    from pdtune.chapters.trust import sweep_cases
    from pdtune.gpus import load_gpu
    from pdtune.perfmodel.roofline import decode_roofline

    cases = sweep_cases() if cases is None else cases
    isl, osl = DENSE_WORKLOAD
    mine = cases[(cases["model"] == DENSE_MODEL) & (cases["gpu"] == DENSE_GPU)
                 & (cases["topology"] == DENSE_TOPOLOGY)
                 & cases["case"].str.endswith(f"ISL/OSL {isl}/{osl}")].sort_values("concurrency")
    batches = [int(c) for c in mine["concurrency"]]
    sketch = decode_roofline(_dense_spec(), load_gpu(DENSE_GPU), [DENSE_TOPOLOGY], batches, isl=isl, osl=osl,
                             kv_cache_dtype="fp8", vllm="0.33")
    gpus = int(mine["gpus_total"].iloc[0])
    out = pd.DataFrame({"requests": batches, "measured_tpot_ms": mine["measured_tpot_ms_p50"].to_numpy(),
                        "roofline_ms": sketch["roofline_ms"].to_numpy(),
                        "modeled_ms": sketch["modeled_ms"].to_numpy()})
    out["tokens_per_s_per_gpu"] = out["requests"] * 1000 / (out["measured_tpot_ms"] * gpus)
    return out


def dense_floor() -> dict[str, float]:
    """The dense example's weights (GB over all its GPUs) and the time one GPU takes to read its share at
    full HBM bandwidth (ms): the floor of every decode step."""
    from pdtune.chapters.prefill import DENSE_GPU
    from pdtune.gpus import load_gpu
    from pdtune.memory import weights_per_gpu
    from pdtune.topology import parse_topology

    spec, gpu = _dense_spec(), load_gpu(DENSE_GPU)
    tp = parse_topology(DENSE_TOPOLOGY).tp
    per_gpu = weights_per_gpu(spec, tp=tp).total
    return {"weights-gb": per_gpu * tp / 1e9, "floor-ms": per_gpu / gpu.hbm_bandwidth * 1000}


def worked_room(room: pd.DataFrame, spec: Any, tokens: int, kv_cache_dtype: str, vllm: str) -> dict[str, Any]:
    """What {eq}`decode-kv-room` takes for one deployment of the room table (the first without MTP whose
    room is known): one rank's KV cache in bytes, its pool block bytes, the blocks a request of ``tokens``
    tokens takes, and the DP ranks."""
    from pdtune.state import plan_state
    from pdtune.topology import deployment_layout
    from pdtune.units import GiB

    rows = room[~room["mtp"].astype(bool) & room["room_at_workload"].notna()] if len(room) else room
    if len(rows) == 0:
        return {"deployment": "none", "kv-bytes": 0, "block-bytes": 1, "blocks": 1, "dp": 0}
    row = rows.iloc[0]
    layout = deployment_layout(str(row["deployment"]))[0]
    plan = plan_state(spec, tp=layout.tp, max_model_len=tokens, kv_cache_dtype=kv_cache_dtype, vllm=vllm)
    return {"deployment": str(row["deployment"]), "kv-bytes": round(float(row["kv_cache_gib"]) * GiB),
            "block-bytes": plan.pool_block_bytes, "blocks": plan.pool_blocks_per_request, "dp": layout.dp}


# --- the sentences whose wording depends on the scenario ---------------------------------------------------


def data_note(sweep: Sweep, *, article_data: bool) -> str:
    """Where the decode sweep comes from (:func:`pdtune.chapters.prefill.data_note`); for the article's data,
    the fifth layout its findings name."""
    from pdtune.chapters.prefill import data_note as sweep_note

    text = sweep_note(sweep, article_data=article_data, figure="figure 2")
    if article_data:
        text += " It also sweeps TP4DP4+EP, which the article's findings name."
    return text


def experts_sentence(spec: Any, touched: Any) -> str:
    """The experts-touched rule worked for this model with the page's function ``touched(E, k, B)``; a dense
    model has no experts."""
    from pdtune.perfmodel.costs import model_costs
    from pdtune.perfmodel.roofline import tokens_to_touch

    c = model_costs(spec)
    if not c.num_experts:
        return f"{spec.name} is dense: every step reads all its weights, as in the dense example."
    e, k = c.num_experts, c.experts_per_token
    return (f"{spec.name} has E = {e} experts and k = {k} per layer: a step of 16 tokens reads "
            f"experts_touched({e}, {k}, 16) = {touched(e, k, 16):,.1f} of them, and half of them from "
            f"{tokens_to_touch(spec, 0.5):,} tokens on.")


def widest_ep(spec: Any, topologies: Sequence[str]) -> int:
    """The largest EP group among ``topologies`` that splits the model's experts whole (the most imbalance);
    without one, the largest of 8, 4 or 2 GPUs that does; 0 for a dense model."""
    from pdtune.perfmodel.costs import model_costs
    from pdtune.topology import parse_topology

    e = model_costs(spec).num_experts
    sizes = [parse_topology(t, "decode topology").ep for t in topologies]
    fits = [g for g in sizes if 1 < g <= e and e % g == 0] or [g for g in (8, 4, 2) if g <= e and e % g == 0]
    return max(fits, default=0)


def busiest_table(spec: Any, ranks: int, touched: Any, busiest: Any,
                  tokens: Sequence[int] = (1, 4, 16, 64, 256, 1024)) -> pd.DataFrame:
    """Per step size: the experts one of ``ranks`` EP GPUs reads on average and on the busiest GPU (the page's
    functions), and how much more the busiest reads; empty for a dense model."""
    from pdtune.perfmodel.costs import model_costs

    c = model_costs(spec)
    columns = ["tokens", "experts_mean", "experts_busiest", "extra_percent"]
    if not ranks or not c.num_experts:
        return empty_frame(columns)
    e, k = c.num_experts, c.experts_per_token
    rows = []
    for t in tokens:
        mean, most = touched(e, k, t) / ranks, busiest(e, k, t, ranks)
        rows.append({"tokens": int(t), "experts_mean": mean, "experts_busiest": most,
                     "extra_percent": 100 * (most / mean - 1)})
    return pd.DataFrame(rows, columns=columns)


def busiest_sentence(spec: Any, ranks: int, touched: Any, busiest: Any) -> str:
    """The busiest-rank rule worked for this model on ``ranks`` EP GPUs with the page's functions; a dense model
    has no experts to split."""
    from pdtune.perfmodel.costs import model_costs

    table = busiest_table(spec, ranks, touched, busiest, tokens=(4, 64))
    if table.empty:
        return f"{spec.name} has no experts to split over GPUs, so every GPU reads the same bytes."
    c = model_costs(spec)
    e, k, m = c.num_experts, c.experts_per_token, c.num_experts // ranks
    parts = [f"at {r.tokens} tokens busiest_rank({e}, {k}, {r.tokens}, {ranks}) = {r.experts_busiest:,.1f} "
             f"experts against a mean of {r.experts_mean:,.1f} ({r.extra_percent:+.0f} %)"
             for r in table.itertuples()]
    each = f"{m} expert{'s' if m > 1 else ''} each"
    return f"{spec.name} on {ranks} EP GPUs ({each}): {parts[0]}; {parts[1]}."


def mtp_text(spec: Any, sweep: Sweep, effect: pd.DataFrame, num_speculative_tokens: int, *,
             article_data: bool) -> str:
    """What the sweep says MTP buys while the KV cache has room and once it has not, or why there is none."""
    if spec.num_mtp_layers == 0 or not num_speculative_tokens:
        why = "has no MTP layer" if spec.num_mtp_layers == 0 else "runs without MTP (num_speculative_tokens: 0)"
        return f"{spec.name} {why}, so there is no MTP to weigh here."
    if not sweep.available or len(effect) == 0:
        return "What MTP buys is for a sweep with and without it to show."
    below = effect["median_gain_below"].dropna()
    above = effect["median_gain_above"].dropna()
    who = "The model predicts" if sweep.modeled else "The sweep shows"
    gain = (f"{who} a median gain of {statistics.median(below):.2f} while the KV cache holds every request"
            if len(below) else f"{who} no point inside the room")
    gain += f" and {statistics.median(above):.2f} once requests wait" if len(above) else ""
    if article_data:
        gain += ', as the article says: "MTP helps a lot as long as the KV cache has room"'
    return gain + "."


def room_sentence(room: pd.DataFrame, deployments: Sequence[str]) -> str:
    """How many requests of the disaggregated workload each named decode deployment (all of them when none
    is named) holds: vLLM's maximum concurrency, to two decimals as the workbook summary prints it."""
    named = list(deployments) or (list(room["deployment"]) if len(room) else [])
    mine = room[room["deployment"].isin(named)].dropna(subset=["room_at_workload"]) if len(room) else room
    if len(mine) == 0:
        return "No decode layout of the parameters fits this model on this GPU."
    parts = [f"{r.deployment} {r.room_at_workload:,.2f} ({r.room_at_workload / r.gpus:,.2f} per GPU)"
             for r in mine.itertuples(index=False)]
    return "At the disaggregated workload the engines hold " + "; ".join(parts) + "."


def high_end_sentence(table: pd.DataFrame) -> str:
    """Who wins the highest concurrency, whether its KV cache holds every request there, and which earlier
    winners run out of room; without a sweep, that there is nothing to read."""
    if len(table) == 0:
        return "Without a decode sweep there is no highest concurrency to read."
    win = table.iloc[0]
    text = f"At concurrency {int(win['concurrency']):,} {win['deployment']} wins"
    text += (", and its KV cache holds every request." if win["holds_all"]
             else ", although some of its requests wait for KV room.")
    return text


def end_winners(best: pd.DataFrame) -> list[str]:
    """The deployments that win the lowest and the highest concurrency (none without a sweep)."""
    return list(dict.fromkeys(best["best"].iloc[[0, -1]])) if len(best) else []
