"""Chapter 9, plan before you measure: the frames, sentences and worked numbers the chapter prints.

The search is :func:`pdtune.plan.plan` with the settings :func:`pdtune.workbook.planning.plan_settings` makes of
the chapter's parameters (the workbook plans the same way and writes ``plan/plan.json``); the KV transfer is
:mod:`pdtune.transfer`; the recipes are :mod:`pdtune.recipe`. Every number here is a prediction of the
performance model (modeled), never a measurement.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from pdtune import article
from pdtune.errors import InputError
from pdtune.frontier import sla_pick, upper_envelope
from pdtune.gpus import gpu_count
from pdtune.plan import Plan, Sla, comparison_sentence, picks_sentence
from pdtune.recipe import engine_loads, row_engines, row_recipes, serve_script
from pdtune.transfer import NVLINK, SCALE_OUT, link_table, load_link
from pdtune.units import MiB
from pdtune.workbook.planning import Planned, plan_settings, plan_slas, timed_plan

#: The article's GPU (a GB300 NVL72 rack), whose NVLink the worked number uses.
ARTICLE_GPU = "gb300"
#: The plain dense model the chapter plans first (bf16 weights, no MTP layer), and its GPU budget: two 8-GPU
#: nodes, enough for every layout of a 70B model on any bundled GPU.
DENSE_MODEL = "llama-3.1-70b"
DENSE_BUDGET = 16

__all__ = ["plan_settings", "plan_slas", "timed_plan"]


def search_frame(planned: Planned) -> pd.DataFrame:
    """Per pool: its GPU, the layouts kept as candidates, rejected and pruned, and where their sweeps come from."""
    frame = planned.plan.search_summary()
    return frame.rename(columns={"network_charged": "over the network"})


def search_numbers(planned: Planned) -> dict[str, Any]:
    """What the prose says about the search: candidates, rejections, rows, frontier, seconds."""
    c = planned.plan.counts
    return {"prefill": c["prefill_candidates"], "decode": c["decode_candidates"], "rejected": c["rejected"],
            "pruned": c["pruned"], "matched": c["rate_matched_rows"], "rows": c["feasible_rows"],
            "frontier": c["frontier_rows"], "seconds": round(planned.seconds, 1),
            "max-gpus": planned.plan.settings.max_gpus, "charged": c["rows_network_charged"]}


def search_sentence(planned: Planned) -> str:
    n = search_numbers(planned)
    p = planned.plan
    pools = (p.prefill_gpu.name if not p.settings.mixed
             else f"{p.prefill_gpu.name} (prefill) and {p.decode_gpu.name} (decode)")
    return (f"On at most {gpu_count(n['max-gpus'], pools)}, {p.spec.name} admits {n['prefill']} prefill and "
            f"{n['decode']} decode candidates ({n['rejected']} layouts rejected, {n['pruned']} beaten by another "
            f"of the same size); rate matching gives {n['rows']:,} disaggregated deployments that fit the budget"
            f"{f' ({p.no_disagg})' if p.no_disagg else ''}, {n['frontier']} rows of either mode on the frontier, "
            f"in {n['seconds']:.1f} s of search on this machine.")


PICK_COLUMNS = ["sla", "mode", "deployment", "gpus_total", "concurrency", "tps_per_gpu", "tps_per_user",
                "ttft_ms_p50", "kv_transfer_share"]

#: Shares of TTFT as percentages, in the chapter's tables.
SHARE_FORMATS = {"kv_transfer_share": ".1%", "share_of_ttft_min": ".1%", "share_of_ttft_max": ".1%"}


def picks_frame(p: Plan) -> pd.DataFrame:
    """One row per SLA: the pick (or, when nothing meets it, the closest row, marked)."""
    rows = []
    for pick in p.picks:
        k = pick.row if pick.met else pick.closest_row
        r = p.row(k)  # type: ignore[arg-type]
        text = pick.sla.describe().replace(" tokens/s per user", " tok/s/user")
        row = {"sla": text + ("" if pick.met else " (closest)"), **{c: r[c] for c in PICK_COLUMNS[1:]}}
        if r["mode"] == "agg":  # an aggregated server moves no KV cache: no share, not a share of 0
            row["kv_transfer_share"] = None
        rows.append(row)
    return pd.DataFrame(rows, columns=PICK_COLUMNS)


def frontier_frame(p: Plan) -> pd.DataFrame:
    cols = ["row", "mode", "deployment", "gpus_total", "concurrency", "tps_per_gpu", "tps_per_user", "ttft_ms_p50",
            "kv_transfer_ms", "picked_for"]
    frame = p.frontier[cols].reset_index(drop=True)
    frame.loc[frame["mode"] == "agg", "kv_transfer_ms"] = float("nan")  # no transfer, shown as missing
    return frame


def pick_sentences(p: Plan) -> str:
    return " ".join(picks_sentence(p, pick) + "." for pick in p.picks)


def comparison_sentences(p: Plan) -> str:
    """Per SLA, aggregated against disaggregated serving in one sentence (:func:`pdtune.plan.comparison_sentence`)."""
    return " ".join(comparison_sentence(p, pick) for pick in p.picks)


def middle_pick(p: Plan, sla: Sla | None = None, *, disaggregated: bool = False) -> dict[str, Any] | None:
    """The pick of the middle SLA that is met (the one the chapter writes recipes for), or of ``sla``, as a
    plain row; ``disaggregated``: that SLA's best disaggregated row instead (the one whose KV transfer the
    chapter weighs). None when there is none."""
    met = [pick for pick in p.picks if pick.met and (sla is None or pick.sla == sla)]
    if not met:
        return None
    pick = met[len(met) // 2]
    k = pick.best_disagg if disaggregated else pick.row
    return p.row(k) if k is not None else None


def middle_sla(p: Plan) -> Sla | None:
    met = [pick for pick in p.picks if pick.met]
    return met[len(met) // 2].sla if met else None


def ends_sentence(p: Plan) -> str:
    """The frontier's two ends; beside the article's measured headline only for the article's model."""
    ends = p.ends()
    if not ends:
        return "The plan has no frontier."
    top, fast = ends["throughput"], ends["latency"]
    text = (f"The modeled frontier runs from {top['tps_per_gpu']:,.0f} total tokens/s per GPU ({top['deployment']}) "
            f"to {fast['tps_per_user']:,.1f} tokens/s per user ({fast['deployment']})")
    if p.spec.name == article.MODEL:
        c = article.constants()
        text += (f"; the article measured {c['headline_tps_per_gpu']:,.0f} and {c['headline_tps_per_user']:,.0f} "
                 "on its own seven configurations")
    return text + "."


def dense_plan(common: dict[str, Any]) -> Planned:
    """The chapter's dense example: :data:`DENSE_MODEL` on :data:`DENSE_BUDGET` GPUs of the scenario's GPU, at
    the scenario's workload and SLAs (its layouts and draft model are the scenario model's, so they are left
    out; the default factors, no MTP)."""
    plan = {k: v for k, v in dict(common.get("plan") or {}).items()
            if k in ("min_tps_per_user", "max_ttft_ms", "max_tpot_ms_p90")}
    kwargs = {**common, "model": DENSE_MODEL, "weights": "", "num_speculative_tokens": 0,
              "speculative_model": "", "decode_context_parallel_size": 1, "calibration": "", "plan": plan}
    return timed_plan(plan_settings(**kwargs, max_gpus=DENSE_BUDGET), plan_slas(plan))


def best_disaggregated(p: Plan) -> dict[str, Any] | None:
    """The disaggregated row of the plan's table with the most tokens/s per GPU, with the GPUs of one engine of
    each side (``gpus_per_prefill``, ``gpus_per_decode``); None when the plan has none (no pair fits its
    budget: ``p.no_disagg`` says why)."""
    dis = p.table[p.table["mode"] == "disagg"].sort_values("tps_per_gpu", ascending=False, kind="stable")
    if not len(dis):
        return None
    r = p.row(int(dis["row"].iloc[0]))
    return {**r, "gpus_per_prefill": int(r["gpus_prefill"]) // int(r["n_prefill_workers"]),
            "gpus_per_decode": int(r["gpus_decode"]) // int(r["n_decode_workers"])}


def picks_numbers(p: Plan) -> dict[str, Any]:
    """The lowest and the highest floor's picks (met or closest): tokens/s per GPU, and the share of the first
    the second keeps (what the picks' takeaway says)."""
    frame = picks_frame(p)
    low, high = frame.iloc[0], frame.iloc[-1]
    return {"low-sla": low["sla"], "high-sla": high["sla"], "low-tps": float(low["tps_per_gpu"]),
            "high-tps": float(high["tps_per_gpu"]), "kept": float(high["tps_per_gpu"] / low["tps_per_gpu"])}


# --- the KV transfer -------------------------------------------------------------------------------------


def article_request_bytes() -> int:
    """The article's state per request (its 759 MiB), computed by :mod:`pdtune.state` as chapter 1 does."""
    return article.article_plan().bytes_per_request


def dense_request_bytes(isl: int, osl: int, kv_cache_dtype: str) -> int:
    """The state of one :data:`DENSE_MODEL` request of ``isl + osl`` tokens (:mod:`pdtune.state`, chapter 1's
    arithmetic, under the plan's vLLM line): what its prefill engine hands to decode, all ranks together."""
    from pdtune.model import load_model
    from pdtune.plan import PLAN_VLLM
    from pdtune.state import plan_state

    return plan_state(load_model(DENSE_MODEL), max_model_len=isl + osl, kv_cache_dtype=kv_cache_dtype,
                      vllm=PLAN_VLLM).bytes_per_request


def largest_share(p: Plan) -> dict[str, Any]:
    """The disaggregated row of the plan whose KV transfer takes the largest share of its TTFT: the share, the
    link it crosses (in words) and the row's deployment; the share NaN when the plan has no such row."""
    t = p.table[p.table["mode"] == "disagg"]
    if not len(t):
        return {"share": float("nan"), "link": "", "deployment": "", "ms": float("nan")}
    r = t.loc[t["kv_transfer_share"].idxmax()]
    return {"share": float(r["kv_transfer_share"]), "link": LINK_WORDS[r["kv_link"]],
            "deployment": r["deployment"], "ms": float(r["kv_transfer_ms"])}


def largest_share_clause(p: Plan) -> str:
    """The transfer takeaway's first clause: the largest share :func:`largest_share` finds, or why there is none."""
    big = largest_share(p)
    if not big["deployment"]:
        return f"This plan moves no KV cache: it has no disaggregated row ({p.no_disagg or 'none is on its table'})"
    return (f"In this plan the transfer takes at most {big['share']:.1%} of a row's TTFT (its {big['deployment']}, "
            f"over {big['link']})")


def link_worked(n_bytes: int) -> dict[str, Any]:
    """``n_bytes`` over the article GPU's NVLink and over a 400 Gb/s NIC (the ConnectX-7 of the HGX and GB200
    tables): bandwidths, latencies and milliseconds, from ``data/gpus``."""
    nvlink = load_link(ARTICLE_GPU, NVLINK)
    nic = next(r for r in link_table(n_bytes) if r["scope"] == SCALE_OUT and r["bandwidth_gb_s"] * 8 == 400)
    return {"mib": n_bytes / MiB, "nvlink-name": nvlink.name, "nvlink-gb-s": nvlink.bandwidth / 1e9,
            "nvlink-us": nvlink.latency_s * 1e6, "nvlink-ms": 1000 * nvlink.seconds(n_bytes),
            "nic-name": f"{nic['name']} ({nic['gpu']})", "nic-gb-s": nic["bandwidth_gb_s"],
            "nic-gbit": nic["bandwidth_gb_s"] * 8, "nic-us": nic["latency_us"], "nic-ms": nic["ms"],
            "ratio": nic["ms"] / (1000 * nvlink.seconds(n_bytes))}


def share_numbers(worked: dict[str, Any], row: dict[str, Any] | None) -> dict[str, Any]:
    """The two transfer times as shares of a TTFT: the pick's prefill time plus the transfer."""
    if row is None:
        return {"prefill-ms": float("nan"), "nvlink-share": float("nan"), "nic-share": float("nan")}
    base = float(row["prefill_ttft_ms"])
    return {"prefill-ms": base, "deployment": row["deployment"],
            "nvlink-share": worked["nvlink-ms"] / (base + worked["nvlink-ms"]),
            "nic-share": worked["nic-ms"] / (base + worked["nic-ms"])}


def share_sentence(shares: dict[str, Any], p: Plan) -> str:
    """The article's request beside this plan's prefill time (:func:`share_numbers`), or why there is none."""
    if "deployment" not in shares:
        why = p.no_disagg or "its middle floor is met by aggregated serving only"
        return f"This plan has no disaggregated row for its middle floor to set them beside ({why})."
    return (f"Beside the modeled prefill time of this plan's best disaggregated row for its middle floor, "
            f"{shares['prefill-ms']:,.0f} ms, that is {shares['nvlink-share']:.1%} of TTFT over NVLink and "
            f"{shares['nic-share']:.1%} over the NIC.")


#: The link a row's KV cache crosses (``kv_link``), in words.
LINK_WORDS = {NVLINK: "NVLink", SCALE_OUT: "the scale-out network"}


def transfer_table(p: Plan) -> pd.DataFrame:
    """Per prefill -> decode layout pair of the table: bytes moved, link, time and its share of TTFT."""
    frame = p.transfer_frame()
    return frame.drop(columns=[c for c in ("mtp_tokens",) if c in frame.columns])


def transfer_sentence(p: Plan) -> str:
    t = p.table[p.table["mode"] == "disagg"]
    if not len(t):
        return ("All of this plan's rows are aggregated servers, which keep each request's KV cache on the engine "
                "that wrote it: nothing crosses a link.")
    lo, hi = float(t["kv_transfer_share"].min()), float(t["kv_transfer_share"].max())
    links = " and ".join(LINK_WORDS[k] for k in sorted(set(t["kv_link"])))
    return (f"In this plan the transfer takes {t['kv_transfer_ms'].min():.2f} to {t['kv_transfer_ms'].max():.2f} ms "
            f"over {links}: {lo:.1%} to {hi:.1%} of the TTFT of the rows shown.")


# --- mixed pools -----------------------------------------------------------------------------------------


def mixed_partner(gpu: str) -> str:
    """The other GPU kind of the chapter's mixed pool: prefill on a B200 (an H200 when the set's GPU is one)."""
    return "h200" if gpu.strip().lower() == "b200" else "b200"


def mixed_plan(settings_kwargs: dict[str, Any], slas: list[Sla], gpu: str) -> Planned | str:
    """The same question with prefill on :func:`mixed_partner` and decode on ``gpu``; a sentence when the
    budget holds no such deployment."""
    partner = mixed_partner(gpu)
    try:
        return timed_plan(plan_settings(**settings_kwargs, prefill_gpu=partner, decode_gpu=gpu), slas)
    except InputError as exc:
        return f"Prefill on {partner} and decode on {gpu} cannot be planned here: {exc.message}."


def mixed_sentence(single: Plan, mixed: Planned | str) -> str:
    if isinstance(mixed, str):
        return mixed
    m = mixed.plan
    sla = middle_sla(single)
    a = middle_pick(single, disaggregated=True)
    b = middle_pick(m, sla, disaggregated=True) if sla is not None else None
    if a is None or b is None:
        return "No SLA is met by a disaggregated row of both plans, so there is no pick to compare."
    pools = (f"both pools on {single.prefill_gpu.name}" if not single.settings.mixed
             else f"prefill on {single.prefill_gpu.name} and decode on {single.decode_gpu.name}")
    return (f"With prefill on {m.prefill_gpu.name} and decode on {m.decode_gpu.name}, the best disaggregated row for "
            f"{sla.describe()} "
            f"is {b['deployment']} at {b['tps_per_gpu']:,.0f} tokens/s per GPU, against {a['tps_per_gpu']:,.0f} "
            f"with {pools}; its KV cache crosses {LINK_WORDS[b['kv_link']]} in {b['kv_transfer_ms']:.1f} ms, "
            f"{b['kv_transfer_share']:.1%} of its TTFT.")


# --- recipes ---------------------------------------------------------------------------------------------


def recipe_texts(p: Plan, row: dict[str, Any]) -> dict[str, str]:
    """The deployment recipe of ``row`` (srt-slurm YAML) and the same engines as ``vllm serve`` commands."""
    data = p.to_dict()
    deploy = row_recipes(data, row)[0]
    return {"file": deploy.file_name, "yaml": deploy.text(), "serve": serve_script(data, row)}


def engine_frame(p: Plan, row: dict[str, Any]) -> pd.DataFrame:
    """Per engine of ``row``'s recipe: its role, layout, DP ranks, the requests in flight on it at the heaviest
    point of its curve, and the ``--max-num-seqs`` the recipe sets."""
    loads = engine_loads(row)
    return pd.DataFrame([{"role": e.role, "topology": e.topology.canonical, "dp": e.topology.dp,
                          "requests": loads[e.role], "max_num_seqs": e.max_num_seqs}
                         for e in row_engines(p.to_dict(), row)])


def serve_lines(script: str) -> str:
    """The ``vllm serve`` lines of a serve script, each with the environment it runs in (what the chapter prints)."""
    return "\n".join(line.strip() for line in script.splitlines()
                     if " vllm serve " in f" {line} " and not line.strip().startswith("#"))


# --- exercises -------------------------------------------------------------------------------------------


def pick_with_ttft(p: Plan, floor: float, max_ttft_ms: float) -> str:
    """The best row of an already searched plan for a floor and a TTFT limit (no new search)."""
    sla = Sla(floor, max_ttft_ms)
    rows = p.rows[sla.meets_latency(p.rows)]
    if not len(rows):
        return f"No row has a TTFT within {max_ttft_ms:,.0f} ms."
    pick = sla_pick(upper_envelope(rows), min_tps_per_user=floor)
    if not pick.met:
        return f"No row within {max_ttft_ms:,.0f} ms reaches {floor:g} tokens/s per user."
    return (f"{pick.deployment}: {pick.tps_per_gpu:,.0f} tokens/s per GPU at {pick.tps_per_user:.1f} tokens/s per "
            f"user, within TTFT {max_ttft_ms:,.0f} ms")
