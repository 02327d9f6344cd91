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


def high_end_sentence(table: pd.DataFrame) -> str:
    """Chapter 6's "why": the high-concurrency winner's room beside the earlier winners that run out of it."""
    if len(table) == 0:
        return "There is no decode sweep to explain."
    win = table.iloc[0]
    c = int(win["concurrency"])
    room = "an unknown number of" if pd.isna(win["room"]) else _whole(win["room"])
    text = (f"At concurrency {c:,} the best is {win['deployment']} ({win['tps_per_gpu']:,.0f} tokens/s "
            f"per GPU); its KV cache holds {room} requests")
    text += ", so none of them waits." if win["holds_all"] else ", fewer than that: some requests wait."
    starved = table[(table.index > 0) & (table["won_at"] != MISSING) & ~table["holds_all"].astype(bool)]
    for row in starved.itertuples(index=False):
        flat = ("" if pd.isna(row.flattens_at)
                else f" and its curve is flat from concurrency {row.flattens_at:,.0f} on")
        text += (f" {row.deployment}, best at {row.won_at}, holds only {_whole(row.room)} requests{flat}, "
                 f"so it ends at {row.tps_per_gpu:,.0f}.")
    return text


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


def mtp_room_sentence(room: pd.DataFrame, layouts: Sequence[str]) -> str:
    """What MTP costs in KV room for each of ``layouts``: MiB per request on one rank, requests held."""
    parts = []
    for layout in layouts:
        both = room[room["layout"] == layout].dropna(subset=["room"]) if len(room) else room
        if len(both) != 2:
            continue
        off, on = both[~both["mtp"].astype(bool)].iloc[0], both[both["mtp"].astype(bool)].iloc[0]
        parts.append(f"{layout} needs {on['mib_per_request_rank']:,.1f} MiB per request on one rank with MTP "
                     f"instead of {off['mib_per_request_rank']:,.1f}, so it holds {_whole(on['room'])} requests "
                     f"instead of {_whole(off['room'])}")
    if not parts:
        return "No layout was swept both with and without MTP."
    return "; ".join(parts) + "."


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


def mtp_verdict(effect: pd.DataFrame, *, modeled: bool = False) -> str:
    """Does the data say "MTP helps a lot while the KV cache has room"? One sentence with the medians; of a
    ``modeled`` sweep it says what the model predicts, never what "the data" shows."""
    if len(effect) == 0:
        return "No layout was swept both with and without MTP, so the data cannot say whether MTP helps."
    below = effect["median_gain_below"].dropna()
    above = effect["median_gain_above"].dropna()
    parts = []
    if len(below):
        parts.append(f"while the KV cache holds every request, MTP multiplies throughput per GPU by a median "
                     f"{statistics.median(below):.2f} across the {len(below)} layouts")
    if len(above):
        parts.append(f"once requests wait for KV room, by {statistics.median(above):.2f}")
    helps = bool(len(below)) and statistics.median(below) > 1
    if len(above):
        helps = helps and statistics.median(above) < statistics.median(below)
    verdict = "agrees with the article" if helps else "does not show the article's pattern"
    if modeled:
        return "The model predicts that " + "; ".join(parts) + f": the prediction {verdict}."
    return "In this sweep, " + "; ".join(parts) + f": the sweep {verdict}."


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


def roofline_sentence(frame: pd.DataFrame) -> str:
    """The sketch in words: each deployment's roofline and modeled tokens/s per GPU at the fewest requests."""
    if len(frame) == 0:
        return "No decode layout of the parameters fits this model on this GPU."
    n = int(frame["requests"].min())
    at = frame[frame["requests"] == n]
    parts = [f"{r.deployment} at most {r.roofline_tps_per_gpu:,.1f} (modeled {r.modeled_tps_per_gpu:,.1f})"
             for r in at.itertuples(index=False)]
    what = "request" if n == 1 else "requests"
    return f"With {n:,} {what} per engine, tokens/s per GPU: " + "; ".join(parts) + "."


def room_sentence(room: pd.DataFrame, deployments: Sequence[str], tokens: int) -> str:
    """How many requests of ``tokens`` tokens each named decode deployment (all of them when none is named)
    holds: chapter 7's workload."""
    named = list(deployments) or (list(room["deployment"]) if len(room) else [])
    mine = room[room["deployment"].isin(named)].dropna(subset=["room_at_workload"]) if len(room) else room
    if len(mine) == 0:
        return "There is no decode sweep whose KV room could be computed."
    parts = [f"{r.deployment} {_whole(r.room_at_workload)} ({r.room_at_workload / r.gpus:,.1f} per GPU)"
             for r in mine.itertuples(index=False)]
    return f"At {tokens:,} tokens per request the engines hold: " + "; ".join(parts) + "."


# --- what the chapter says, for its data or for none ---------------------------------------------------


def data_note(sweep: Sweep, *, article_data: bool) -> str:
    """Where the decode sweep comes from (:func:`pdtune.chapters.prefill.data_note`), and for the article's
    data the fifth topology it sweeps."""
    from pdtune.chapters.prefill import data_note as sweep_note

    text = sweep_note(sweep, article_data=article_data, figure="figure 2")
    if article_data:
        text += (" The article lists four decode topologies but names a fifth, TP4DP4+EP, in its findings and "
                 "uses it on the decode side of the disaggregated runs; the modeled data sweeps it too.")
    return text


def changes_sentence(runs: pd.DataFrame) -> str:
    """How often the winner changes along the sweep, and who wins where (from the merged runs of wins)."""
    if len(runs) == 0:
        return ("Without a decode sweep there is no winner to follow; the next sections compute what decides it "
                "for your layouts: the bytes a step reads, and the KV room.")
    changes = len(runs) - 1
    parts = []
    for r in runs.itertuples(index=False):
        span = (f"at {r.from_concurrency:,}" if r.from_concurrency == r.to_concurrency
                else f"from {r.from_concurrency:,} to {r.to_concurrency:,}")
        parts.append(f"{r.best} {span}")
    times = {0: "never changes", 1: "changes once", 2: "changes twice"}.get(changes, f"changes {changes} times")
    return (f"The winner {times} along the sweep ({'; '.join(parts)}), and each change has a cause the next "
            "sections compute: at small batches a step's time is set by the bytes it reads, and at large batches "
            "by how many requests fit in the KV cache.")


def experts_sentence(spec: Any, half: int | None, most: int | None) -> str:
    """Where half and nine in ten of a layer's experts are touched; a dense model has none to touch."""
    if spec.moe is None:
        return (f"{spec.name} has no experts: every decode step reads all of its weights, however many requests "
                "it carries, so the bytes per token fall in proportion to the batch.")
    return (f"Half of the experts are touched from {half:,} tokens per step on, nine in ten from {most:,}: the "
            "bytes of routed experts per token fall steeply as the batch grows, and a step of a few dozen requests "
            "costs little more than a step of one.")


def experts_takeaway(spec: Any, half: int | None) -> str:
    if spec.moe is None:
        return (f"for {spec.name} every step reads all its weights, so batching requests (or draft tokens) is "
                "nearly free until the step turns compute-bound or the KV cache is full.")
    return (f"half of a layer's experts are read from {half:,} tokens per step on, so batching requests (or "
            "draft tokens) is nearly free until the step turns compute-bound or the KV cache is full.")


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


def mtp_text(spec: Any, sweep: Sweep, effect: pd.DataFrame, room: pd.DataFrame, layouts: Sequence[str],
             num_speculative_tokens: int, *, article_data: bool) -> str:
    """The MTP section's sentences: what MTP costs in room, and whether the sweep shows it helping."""
    if spec.num_mtp_layers == 0 or not num_speculative_tokens:
        why = "has no MTP layer" if spec.num_mtp_layers == 0 else "runs without MTP (num_speculative_tokens: 0)"
        return f"{spec.name} {why}, so there is no MTP to weigh here."
    text = mtp_room_sentence(room, layouts if sweep.available else list(room["layout"].unique()))
    if not sweep.available:
        return text + " Without a decode sweep, what MTP buys in throughput is for the sweep to show."
    verdict = mtp_verdict(effect, modeled=sweep.modeled)
    return text + (f" The article: MTP helps a lot as long as the KV cache has room. {verdict}" if article_data
                   else f" {verdict}")


def explanation_text(top: pd.DataFrame, *, article_data: bool) -> str:
    """Who wins the highest concurrency and why (:func:`high_end_sentence`), and for the article's data the
    article's own explanation beside it."""
    if len(top) == 0:
        return ("Without a decode sweep there is no highest concurrency to read; the room table above is where "
                "a sweep's curves would go flat.")
    text = high_end_sentence(top)
    if article_data:
        text += (' This is the article\'s explanation, "more KV cache room than TEP8", computed: an engine that '
                 "holds every request keeps its throughput rising, and one that does not stops where its cache is "
                 "full, however fast its steps are.")
    return text
