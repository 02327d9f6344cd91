"""The search: rate matching within the budget, KV room and KV transfer per row, the frontier, the picks."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from pdtune.errors import InputError
from pdtune.frontier.xpyd import IsolatedSweep, RatePairs
from pdtune.gpus import GpuSpec, gpu_count, load_gpu
from pdtune.model import ModelSpec, load_model
from pdtune.precision import parse_weights_dtype
from pdtune.perfmodel import build_engine
from pdtune.plan.aggregated import aggregated_pool
from pdtune.plan.evaluate import (
    LATENCY_MODEL,
    LATENCY_NOTE,
    SIMULATED,
    SIMULATED_NOTE,
    Evaluator,
    evaluate_rows,
    simulated,
    steady_state,
)
from pdtune.plan.inputs import (
    DEFAULT_FLOORS,
    PLAN_FORMAT,
    PlanSettings,
    Sla,
    TpotP90,
    TtftCeiling,
    tpot_p90_rule,
    ttft_ceiling,
)
from pdtune.plan.report import Pick, ceil_to, comparison_sentence, report_table
from pdtune.plan.pools import (
    Candidate,
    check_listed_layouts,
    Factors,
    Rejected,
    Pool,
    measured_pool,
    modeled_pool,
    prune_sweeps,
    candidate_topologies,
    pool_factors,
)
from pdtune.plan.staircase import LinkTerms, PairTerms, Staircase, on_staircase
from pdtune.state import plan_state
from pdtune.topology import Topology, parse_topology
from pdtune.transfer import (
    NVLINK,
    SCALE_OUT,
    EngineExtras,
    Transfer,
    links_file,
    load_link,
    request_transfer,
    scope_link,
)
from pdtune.units import MiB


# ------------------------------------------------------------------------------------------ the plan


@dataclass(frozen=True, eq=False)
class Plan:
    """A finished search: candidates, the rate-matched rows an SLA can pick (counts cover every row), the
    frontier, the picks."""

    settings: PlanSettings
    spec: ModelSpec
    prefill_gpu: GpuSpec
    decode_gpu: GpuSpec
    candidates: tuple[Candidate, ...]
    rejected: tuple[Rejected, ...]
    pruned: tuple[str, ...]
    rows: pd.DataFrame  # every feasible row an SLA can pick: each pair's staircase (see pdtune.plan.staircase)
    table: pd.DataFrame  # frontier rows and pick rows, numbered by ``row``
    picks: tuple[Pick, ...]
    counts: dict[str, int]
    transfers: dict[str, dict[str, Any]]  # per prefill -> decode layout pair and link: the transfer
    factors: dict[str, Factors] = field(default_factory=dict)  # per pool: the model's factors and their source
    tpot_p90: TpotP90 | None = None  # how modeled rows' TPOT p90 is obtained
    ceiling: TtftCeiling | None = None  # the TTFT a pick should stay under, and where it comes from
    latency_model: str = LATENCY_MODEL  # what the reported rows' latencies come from
    model_id: str | None = None  # the model's Hub id (config _name_or_path, or the bundled model's)
    no_disagg: str | None = None  # why the plan has no disaggregated row (the budget's refusal), else None

    @property
    def frontier(self) -> pd.DataFrame:
        return self.table[self.table["on_frontier"]]

    @property
    def modeled(self) -> bool:
        return bool(self.table["modeled"].any()) if len(self.table) else True

    def row(self, k: int) -> dict[str, Any]:
        """Plan row ``k`` as plain Python values."""
        hit = self.table[self.table["row"] == k]
        if not len(hit):
            raise InputError("--row", "row", f"no row {k}; the plan has rows 0 to {len(self.table) - 1}")
        return _plain_row(hit.iloc[0])

    def ends(self) -> dict[str, Any]:
        """The frontier's two ends: the most tokens/s per GPU, the most tokens/s per user."""
        f = self.frontier
        if not len(f):
            return {}
        top = f.loc[f["tps_per_gpu"].idxmax()]
        fast = f.loc[f["tps_per_user"].idxmax()]
        return {"throughput": _plain_row(top), "latency": _plain_row(fast)}

    def search_summary(self) -> pd.DataFrame:
        """Per role (prefill, decode, aggregated): layouts kept as candidates, rejected (heads, experts, memory,
        budget) and pruned."""
        rows = []
        for role in ("prefill", "decode"):
            rows.append({
                "role": role,
                "gpu": (self.prefill_gpu if role == "prefill" else self.decode_gpu).name,
                "candidates": sum(1 for c in self.candidates if c.role == role),
                "rejected": sum(1 for r in self.rejected if r.role == role),
                "pruned": sum(1 for p in self.pruned if p.startswith(role + " ")),
                "network_charged": sum(1 for c in self.candidates if c.role == role and c.network_charged),
                "source": ", ".join(sorted({c.source.split(":")[0] for c in self.candidates if c.role == role})),
            })
        if self.settings.aggregated:
            agg = self.rows[self.rows["mode"] == "agg"]
            rows.append({
                "role": "aggregated",
                "gpu": ", ".join(sorted(set(agg["prefill_gpu"].astype(str)))),
                "candidates": self.counts.get("aggregated_candidates", 0),
                "rejected": sum(1 for r in self.rejected if r.role == "aggregated"),
                "pruned": 0,
                "network_charged": int(agg.groupby("deployment")["network_charged"].first().sum()) if len(agg) else 0,
                "source": "modeled",
            })
        return pd.DataFrame(rows)

    def transfer_frame(self) -> pd.DataFrame:
        """One row per prefill -> decode layout pair and link of the table's disaggregated rows: bytes, link,
        time, share of TTFT."""
        cols = ["prefill_topology", "decode_topology", "mtp_tokens", "kv_link", "kv_mib_per_request",
                "kv_transfer_ms", "prefill_block_tokens", "decode_block_tokens", "block_size_to_set"]
        dis = self.table["mode"] == "disagg"
        if not dis.any():  # aggregated rows only: they have none of these columns
            return pd.DataFrame(columns=cols + ["share_of_ttft_min", "share_of_ttft_max"])
        frame = self.table.loc[dis, cols + ["kv_transfer_share"]]
        return (frame.groupby(cols, dropna=False, sort=False)["kv_transfer_share"]
                .agg(["min", "max"]).rename(columns={"min": "share_of_ttft_min", "max": "share_of_ttft_max"})
                .reset_index())

    def state_extras(self) -> dict[str, Any] | None:
        """What ``--speculative-model`` and ``--decode-context-parallel-size`` changed, in words and values."""
        s = self.settings
        if s.speculative_model is None and s.decode_context_parallel_size == 1:
            return None
        extras = s.extras()
        draft = extras.speculative_model
        method = None
        if draft is not None:  # the method vLLM infers from the draft's architecture (pdtune.state's rule)
            state = plan_state(self.spec, max_model_len=s.isl + s.osl, tp=s.decode_context_parallel_size,
                               kv_cache_dtype=s.kv_cache_dtype, vllm=s.vllm, **extras.state_args(decode=True))
            method = state.speculation.method if state.speculation is not None else None
        return {
            "speculative_model": draft.name if draft is not None else None,
            "speculative_model_path": s.speculative_model,
            "speculative_method": method,
            "num_speculative_tokens": s.num_speculative_tokens,
            "decode_context_parallel_size": s.decode_context_parallel_size,
            "affects": ("the KV room of every engine (the draft's layers, on both pools) and of the decode engines "
                        "(DCP shards full-attention tokens over their TP group), the KV transfer's bytes and "
                        "block sizes, and the recipes (speculative-config, decode-context-parallel-size); not "
                        "the step model: the draft's passes and acceptance and DCP's attention all-gather are "
                        "not in the predicted TPOT, and MTP decode candidates are off while a draft is given"),
        }

    def warnings(self) -> list[str]:
        """One line per pick whose TTFT is above the plan's TTFT ceiling (nothing meeting its SLA is below)."""
        out = []
        c = self.ceiling
        for pick in self.picks:
            if pick.met and pick.above_ceiling and c is not None and pick.row is not None:
                r = self.row(pick.row)
                why = ("no row meeting the SLA is below it" if pick.searched is None else
                       f"none of the {pick.searched} best candidates evaluated ({self.latency_model}, which evaluates "
                       f"at most {pick.searched} of the {pick.candidates:,} rows meeting the SLA) is below it")
                out.append(f"warning: the pick for {pick.sla.describe()} (row {pick.row}, {r['deployment']}) has a "
                           f"TTFT of {ceil_to(r['ttft_ms_p50']):,.0f} ms, above the TTFT ceiling of {c.ms:,.0f} ms "
                           f"({c.source}); {why}")
        return out

    def comparison(self, pick: Pick) -> dict[str, Any]:
        """Aggregated against disaggregated for one SLA: the best row of each, which wins, by how much."""
        agg = self.row(pick.best_agg) if pick.best_agg is not None else None
        dis = self.row(pick.best_disagg) if pick.best_disagg is not None else None
        winner, ratio = None, None
        if agg is not None and dis is not None:
            ceiling = self.ceiling.ms if self.ceiling is not None else math.inf
            a_in, d_in = agg["ttft_ms_p50"] <= ceiling, dis["ttft_ms_p50"] <= ceiling
            if a_in != d_in:  # as the sentence says it: the mode within the ceiling wins
                winner = "agg" if a_in else "disagg"
            else:
                winner = "agg" if agg["tps_per_gpu"] > dis["tps_per_gpu"] else "disagg"
            w, o = (agg, dis) if winner == "agg" else (dis, agg)
            ratio = w["tps_per_gpu"] / o["tps_per_gpu"] if o["tps_per_gpu"] > 0 else None
        elif agg is not None or dis is not None:
            winner = "agg" if agg is not None else "disagg"
        return {"sla": pick.sla.describe(), "agg_row": pick.best_agg, "disagg_row": pick.best_disagg,
                "winner": winner, "ratio": ratio, "sentence": comparison_sentence(self, pick)}

    def to_dict(self) -> dict[str, Any]:
        extras = self.state_extras()
        settings = self.settings.to_dict()
        if extras is not None and extras["speculative_method"]:
            settings["speculative_method"] = extras["speculative_method"]  # what the recipes write
        return {
            "pdtune_plan": PLAN_FORMAT,
            "generator": "pdtune plan",
            "modeled": self.modeled,
            "latency_model": self.latency_model,
            "latency_note": {LATENCY_MODEL: LATENCY_NOTE, SIMULATED: SIMULATED_NOTE}.get(self.latency_model, ""),
            "ttft_ceiling": self.ceiling.to_dict() if self.ceiling is not None else None,
            "warnings": self.warnings(),
            "comparisons": [self.comparison(p) for p in self.picks],
            "no_disagg": self.no_disagg,  # why no disaggregated row exists, when none does
            "modeled_note": ("rows built on modeled sweeps are predictions of pdtune.perfmodel (a roofline "
                             "model), not measurements") if self.modeled else "",
            "settings": settings,
            "model": {"name": self.spec.name, "source": self.spec.source, "precision": self.spec.weights.name,
                      "hybrid": self.spec.is_hybrid, "num_mtp_layers": self.spec.num_mtp_layers,
                      "hub_id": self.model_id},
            "gpus": {"prefill": self.prefill_gpu.to_dict(), "decode": self.decode_gpu.to_dict()},
            "factors": {role: f.to_dict() for role, f in self.factors.items()},
            "tpot_p90": self.tpot_p90.to_dict() if self.tpot_p90 is not None else None,
            "state_extras": extras,
            "counts": self.counts,
            "candidates": [c.to_dict() for c in self.candidates],
            "rejected": [r.to_dict() for r in self.rejected],
            "pruned": list(self.pruned),
            "transfers": self.transfers,
            "rows": [_plain_row(r) for _, r in self.table.iterrows()],
            "picks": [p.to_dict() for p in self.picks],
        }


def _plain_row(row: pd.Series) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in row.items():
        if isinstance(value, (np.integer,)):
            value = int(value)
        elif isinstance(value, (np.floating, float)):
            value = None if not math.isfinite(float(value)) else float(value)
        elif isinstance(value, np.bool_):
            value = bool(value)
        elif value is pd.NA:
            value = None
        out[str(key)] = value
    return out


def plan(
    settings: PlanSettings,
    slas: Sequence[Sla] = (),
    *,
    prefill_results: Sequence[str] | None = None,
    decode_results: Sequence[str] | None = None,
    require_sla: bool = False,
    evaluator: Evaluator | None = None,
    progress: Any = None,
) -> Plan:
    """Search ``settings``'s space and pick for each SLA (``DEFAULT_FLOORS`` when none is given).

    ``require_sla``: an SLA nothing meets is bad input (the CLI's behaviour when the user names one), with the
    closest row in the message; otherwise it is a pick with ``met=False``. ``evaluator`` re-evaluates the rows
    the plan reports (:mod:`pdtune.plan.evaluate`; default: the steady-state model). ``progress``: a
    :class:`~pdtune.plan.evaluate.SimProgress` the simulated evaluator reports each row to.
    """
    s = settings
    spec = load_model(s.model)
    if s.weights:
        spec = parse_weights_dtype(s.weights, spec)
    prefill_gpu = load_gpu(s.gpu)
    decode_gpu = load_gpu(s.decode_gpu_name)
    for g in {prefill_gpu.name, decode_gpu.name}:
        load_link(g, "scale_out")  # a GPU without link data is bad input before any work
    factors = pool_factors(s, prefill_gpu, decode_gpu)
    s.extras()  # an unreadable --speculative-model is bad input before any work
    check_listed_layouts(spec, s)
    p90 = tpot_p90_rule(s.tpot_p90_factor)
    pools = {}
    for role, gpu, given in (("prefill", prefill_gpu, prefill_results), ("decode", decode_gpu, decode_results)):
        pools[role] = (measured_pool(given, spec, gpu, role, s) if given
                       else modeled_pool(spec, gpu, role, s, factors[role].efficiency))
    ttft_limited = any(sla.max_ttft_ms is not None for sla in slas)
    unloaded = _unloaded_ttft(pools["prefill"])  # before pruning: the fastest prompt alone
    prune_sweeps(pools["prefill"], "prefill", s.osl)
    if not ttft_limited:
        # Decode pruning can drop a slower sweep whose lower rate would let a lighter prefill point meet a TTFT
        # limit; with a TTFT limit every decode sweep stays.
        prune_sweeps(pools["decode"], "decode", s.osl)
    try:
        _check_budget(spec, s, pools, prefill_gpu, decode_gpu)
        budget_error = None
    except InputError as e:
        # No disaggregated pair fits the budget; one aggregated server may (a model that fills one node): the
        # error stands only if none does.
        if not (s.aggregated and e.field == "max_gpus"):
            raise
        budget_error = e
    disagg, space, transfers = _match(spec, s, pools, prefill_gpu, decode_gpu, factors, p90)
    if disagg is None and budget_error is None:
        budget_error = InputError("--max-gpus", "max_gpus", f"no rate-matched deployment of at most "
                                  f"{gpu_count(s.max_gpus)} is feasible (KV room or link limits)")
    counts = dict(space.stairs.counts)
    agg_rejected: list[Rejected] = []
    agg_layouts = agg_dropped = 0
    parts = [] if disagg is None else [disagg]
    if s.aggregated:
        kinds = [("prefill", prefill_gpu)] + ([("decode", decode_gpu)] if s.mixed else [])
        for role, gpu in kinds:
            pool = aggregated_pool(spec, gpu, s, factors[role].efficiency)
            parts += pool.rows
            agg_rejected += pool.rejected
            agg_layouts += len(pool.layouts)
            agg_dropped += pool.dropped_above_room
            unloaded = min(unloaded, pool.unloaded_ttft_ms)
    if not parts:
        assert budget_error is not None
        if not s.aggregated:
            raise budget_error
        raise InputError(budget_error.source, budget_error.field,
                         f"{budget_error.message}; no aggregated server fits {gpu_count(s.max_gpus)} either")
    rows = pd.concat(parts, ignore_index=True)
    # the staircase counted the disaggregated rows; the aggregated ones are all here
    agg = rows["mode"].astype(str) == "agg"
    counts["rows_network_charged"] += int(rows.loc[agg, "network_charged"].astype(bool).sum())
    rows["mode"] = rows["mode"].astype(str)
    for col in _COUNT_COLUMNS:  # whole numbers, absent (NA) where a mode has none
        if col in rows.columns:
            rows[col] = rows[col].astype("Int64")
    rows = evaluate_rows(rows, p90)  # the search's own ranking: steady state
    ceiling = ttft_ceiling(s, unloaded)
    floors = list(slas) or [Sla(min_tps_per_user=f) for f in DEFAULT_FLOORS]
    if evaluator is None:
        evaluator = (simulated(spec, {"prefill": prefill_gpu, "decode": decode_gpu}, s, factors, p90,
                               progress=progress)
                     if s.latency_model == "simulated" else steady_state(p90))
    table, picks = report_table(rows, floors, evaluator, ceiling, require_sla=require_sla and bool(slas),
                                meeting=space.stairs.meeting, curves=space.curves)
    counts.update({
        "prefill_candidates": len(pools["prefill"].candidates),
        "decode_candidates": len(pools["decode"].candidates),
        "aggregated_candidates": agg_layouts,
        "rejected": len(pools["prefill"].rejected) + len(pools["decode"].rejected),
        "aggregated_rejected": len(agg_rejected),
        "aggregated_points_above_kv_room": agg_dropped,
        "pruned": len(pools["prefill"].pruned) + len(pools["decode"].pruned),
        "decode_points_above_kv_room": pools["decode"].dropped_above_room,
        "aggregated_rows": int((rows["mode"] == "agg").sum()),
        "frontier_rows": int(table["on_frontier"].sum()),
        "frontier_rows_network_charged": int(table.loc[table["on_frontier"], "network_charged"].sum()),
    })
    return Plan(s, spec, prefill_gpu, decode_gpu,
                tuple(pools["prefill"].candidates + pools["decode"].candidates),
                tuple(pools["prefill"].rejected + pools["decode"].rejected + agg_rejected),
                tuple(pools["prefill"].pruned + pools["decode"].pruned), rows, table, tuple(picks), counts,
                transfers, factors, p90, ceiling, evaluator.name, _model_id(spec),
                budget_error.message if budget_error is not None else None)


#: Counts one serving mode has and the other has not: nullable integers in the rows.
_COUNT_COLUMNS = ("n_prefill_workers", "n_decode_workers", "gpus_prefill", "gpus_decode", "prefill_concurrency",
                  "decode_concurrency", "prefill_block_tokens", "decode_block_tokens", "agg_replicas",
                  "server_concurrency")


def _unloaded_ttft(pool: Pool) -> float:
    """The TTFT of one request alone on the fastest prefill candidate (its sweep's lowest TTFT), in ms."""
    values = [float(f["ttft_ms_p50"].min()) for f in pool.sweeps if len(f)]
    return min(values) if values else math.inf


def _model_id(spec: ModelSpec) -> str | None:
    """The Hub id ``vllm serve`` loads: the config's ``_name_or_path``, else the bundled model's
    (``data/models/hub-ids.csv``); None when neither names one."""
    from pdtune.model.hub import hub_id

    return hub_id(spec)


def _check_budget(spec: ModelSpec, s: PlanSettings, pools: dict[str, Pool], prefill_gpu: GpuSpec,
                  decode_gpu: GpuSpec) -> None:
    """No candidate on a side, or no pair within the budget: bad input, naming the smallest deployment."""
    sides = {role: pools[role].candidates for role in ("prefill", "decode")}
    for role, given in (("prefill", s.prefill_topologies), ("decode", s.decode_topologies)):
        if given is not None and not sides[role]:  # the user's own list: say what became of it
            why = "; ".join(f"{r.topology}: {r.reason}" for r in pools[role].rejected) or "none was usable"
            raise InputError(f"--{role}-topologies", f"{role}_topologies", f"no listed layout fits: {why}")
    if all(sides.values()):
        smallest = min(c.gpus for c in sides["prefill"]) + min(c.gpus for c in sides["decode"])
        if smallest <= s.max_gpus:
            return
    for role in ("prefill", "decode"):
        if sides[role]:
            continue
        # Every layout refused for one cause that is not its memory (a DCP no TP is a multiple of, a setting
        # of the engine): that cause is the bad input, not the budget.
        refused = [r for r in pools[role].rejected if r.cause is not None]
        causes = {r.cause for r in refused}
        if len(causes) == 1 and refused[0].cause is not None and refused[0].cause[1] != "kv_cache":
            source, field_ = refused[0].cause
            raise InputError(source, field_, f"no {role} layout of {spec.name} can run with it: "
                                             f"{refused[0].topology}: {refused[0].reason}")
    smallest = _smallest_deployment(spec, s, prefill_gpu, decode_gpu)
    where = f"{spec.name} on {prefill_gpu.name}" + (f"/{decode_gpu.name}" if s.mixed else "")
    if smallest is None:
        raise InputError("--max-gpus", "max_gpus",
                         f"{where}: no layout of up to 512 GPUs holds the weights and one {s.isl}+{s.osl}-token "
                         "request")
    label, gpus = smallest
    raise InputError("--max-gpus", "max_gpus",
                     f"{gpu_count(s.max_gpus)} {'is' if s.max_gpus == 1 else 'are'} fewer than the smallest "
                     f"disaggregated deployment of {where}: {label} "
                     f"needs {gpus} GPUs")


def _smallest_deployment(spec: ModelSpec, s: PlanSettings, prefill_gpu: GpuSpec,
                         decode_gpu: GpuSpec) -> tuple[str, int] | None:
    config = s.engine_config()
    found: dict[str, Topology] = {}
    for role, gpu in (("prefill", prefill_gpu), ("decode", decode_gpu)):
        for topo in candidate_topologies(spec, 512):
            try:
                build_engine(spec, gpu, topo, isl=s.isl, osl=s.osl, config=config)
            except InputError:
                continue
            found[role] = topo
            break
    if len(found) < 2:
        return None
    p, d = found["prefill"], found["decode"]
    return f"1x{p.canonical} : 1x{d.canonical}", p.gpus + d.gpus


@dataclass(frozen=True)
class _Context:
    """What every matched block needs to finish its rows."""

    spec: ModelSpec
    settings: PlanSettings
    prefill_gpu: GpuSpec
    decode_gpu: GpuSpec
    candidates: dict[tuple[str, str, int], Candidate]  # (role, topology, MTP tokens)
    link_efficiency: float  # achieved share of the link's bandwidth: the lower of the two pools' factors
    extras: EngineExtras  # a draft model and DCP, as the state accounting takes them
    tpot_p90: TpotP90


def _match(spec: ModelSpec, s: PlanSettings, pools: dict[str, Pool], prefill_gpu: GpuSpec,
           decode_gpu: GpuSpec, factors: dict[str, Factors], p90: TpotP90,
           ) -> tuple[pd.DataFrame, _RowSpace, dict[str, dict[str, Any]]]:
    """Rate-match every prefill sweep with every decode sweep within the budget, add the KV transfer: the rows
    on each pair's staircase (:mod:`pdtune.plan.staircase`), and every row's counts."""
    n = s.max_gpus
    prefill, decode = pools["prefill"], pools["decode"]
    ctx = _Context(spec, s, prefill_gpu, decode_gpu,
                   {(c.role, c.topology, c.mtp_tokens): c for c in prefill.candidates + decode.candidates},
                   min(f.efficiency.link for f in factors.values()), s.extras(), p90)
    same_kind = prefill_gpu.name == decode_gpu.name
    domain = (load_link(prefill_gpu.name, NVLINK).domain_gpus or 0) if same_kind else 0
    if same_kind and domain:
        _check_links_order(prefill_gpu)
    stairs = Staircase(n, domain, p90.factor)
    transfers: dict[tuple[str, str, int, str], Transfer] = {}
    keyed: dict[tuple[str, str, int, str], dict[str, Any]] = {}
    space = _RowSpace(ctx, stairs, transfers, keyed)
    parts = []
    for gp, pframes in _by_gpus(prefill).items():
        for gd, dframes in _by_gpus(decode).items():
            if gp + gd > n:
                continue
            pairs = RatePairs.of(pd.concat(pframes, ignore_index=True), pd.concat(dframes, ignore_index=True),
                                 s.osl, isl=s.isl)
            links = stairs.links(gp, gd)

            def terms(p: IsolatedSweep, d: IsolatedSweep) -> PairTerms:
                found = {scope: _key_values(ctx, transfers, keyed, p.topology, d.topology, int(d.mtp_tokens), scope)
                         for scope in links}
                one = next(iter(found.values()))
                return PairTerms({scope: LinkTerms(v["ms"], float(v["send"]), float(v["recv"]),
                                                   float(v["bandwidth"]), int(v["p_dp"]), int(v["d_dp"]))
                                  for scope, v in found.items()},
                                 float(one["room"]), str(one["dsource"]).startswith("measured"))

            def charged(p: IsolatedSweep, d: IsolatedSweep) -> bool:
                return bool(ctx.candidates[("prefill", p.topology, 0)].network_charged
                            or ctx.candidates[("decode", d.topology, int(d.mtp_tokens))].network_charged)

            selection = stairs.candidates(pairs, terms, charged)
            matched = pairs.frame(selection)
            if not len(matched):
                continue
            finished = _finish(matched, ctx, transfers, keyed)
            pair_of = np.repeat(np.arange(len(selection)), [sel[0].size for sel in selection])
            point = np.concatenate([sel[2] for sel in selection])
            kept_at = finished.index.to_numpy()
            group = pair_of[kept_at] * (1 + int(point.max())) + point[kept_at]
            finished = finished[on_staircase(finished, group)]
            if len(finished):
                space.remember(pairs, finished, pair_of[finished.index.to_numpy()])
                parts.append(finished)
    rows = pd.concat(parts, ignore_index=True) if parts else None
    summary = {f"{p} -> {d}{'+MTP' + str(k) if k else ''} over {scope}": t.to_dict()
               for (p, d, k, scope), t in sorted(transfers.items())}
    return rows, space, summary


def _check_links_order(gpu: GpuSpec) -> None:
    """The staircase takes NVLink to be no slower than the NIC (a deployment never gains by leaving its
    domain): true of every GPU in ``data/gpus``; a table that says otherwise is refused, not searched wrong."""
    nvlink, nic = load_link(gpu.name, NVLINK), load_link(gpu.name, SCALE_OUT)
    if nvlink.bandwidth < nic.bandwidth or nvlink.latency_s > nic.latency_s:
        raise InputError(links_file(), "nvlink", f"{gpu.name}: NVLink is slower than its NIC in the GPU tables")


@dataclass
class _RowSpace:
    """Everything the search's rows stand for: the staircase's counts, and any deployment's whole curve."""

    ctx: _Context
    stairs: Staircase
    transfers: dict[tuple[str, str, int, str], Transfer]
    keyed: dict[tuple[str, str, int, str], dict[str, Any]]
    where: dict[str, tuple[RatePairs, int, int, int]] = field(default_factory=dict)

    def remember(self, pairs: RatePairs, rows: pd.DataFrame, pair_of: np.ndarray) -> None:
        for label, k, x, y in zip(rows["deployment"], pair_of, rows["n_prefill_workers"], rows["n_decode_workers"],
                                  strict=True):
            self.where.setdefault(label, (pairs, int(k), int(x), int(y)))

    def curves(self, labels: set[str]) -> pd.DataFrame:
        """Every feasible row (all decode points) of the deployments ``labels`` name."""
        frames = []
        by_pairs: dict[int, tuple[RatePairs, dict[int, list[tuple[int, int]]]]] = {}
        for label in sorted(labels):
            pairs, k, x, y = self.where[label]
            by_pairs.setdefault(id(pairs), (pairs, {}))[1].setdefault(k, []).append((x, y))
        for pairs, wanted in by_pairs.values():
            selection = []
            for k, (_, d) in enumerate(pairs.pairs):
                ratios = sorted(wanted.get(k, []))
                n_points = d.concurrency.size
                x = np.repeat([r[0] for r in ratios], n_points).astype(np.int64)
                y = np.repeat([r[1] for r in ratios], n_points).astype(np.int64)
                selection.append((x, y, np.tile(np.arange(n_points), len(ratios)).astype(np.int64)))
            frames.append(_finish(pairs.frame(selection), self.ctx, self.transfers, self.keyed))
        return pd.concat(frames, ignore_index=True)


def _by_gpus(pool: Pool) -> dict[int, list[pd.DataFrame]]:
    out: dict[int, list[pd.DataFrame]] = {}
    for c, frame in zip(pool.candidates, pool.sweeps, strict=True):
        out.setdefault(c.gpus, []).append(frame)
    return out


def _network_groups(prefill: Candidate, decode: Candidate, ctx: _Context) -> str:
    notes = []
    for c, gpu in ((prefill, ctx.prefill_gpu), (decode, ctx.decode_gpu)):
        if c.network_charged:
            topo = parse_topology(c.topology)
            group = max(topo.tp, topo.expert_shards)
            notes.append(f"{c.role} {c.topology}: a {group}-GPU group over {math.ceil(group / gpu.nvlink_domain)} "
                         f"NVLink domains, its collectives charged at {gpu.network_bandwidth / 1e9:g} GB/s")
    return "; ".join(notes)


def _key_values(ctx: _Context, transfers: dict[tuple[str, str, int, str], Transfer],
                keyed: dict[tuple[str, str, int, str], dict[str, Any]], p: str, d: str, k: int,
                scope: str) -> dict[str, Any]:
    """What every row of one prefill -> decode layout pair, MTP and link shares (computed once per plan)."""
    key = (p, d, int(k), scope)
    if key in keyed:
        return keyed[key]
    s = ctx.settings
    if key not in transfers:
        link = scope_link(ctx.prefill_gpu, ctx.decode_gpu, scope)
        x = ctx.extras
        transfers[key] = request_transfer(ctx.spec, parse_topology(p), parse_topology(d), link, isl=s.isl,
                                          osl=s.osl, kv_cache_dtype=s.kv_cache_dtype, vllm=s.vllm,
                                          num_speculative_tokens=int(k) or x.num_speculative_tokens,
                                          efficiency=ctx.link_efficiency, speculative_model=x.speculative_model,
                                          decode_context_parallel_size=x.decode_context_parallel_size)
    t = transfers[key]
    pc, dc = ctx.candidates[("prefill", p, 0)], ctx.candidates[("decode", d, int(k))]
    keyed[key] = {
        "ms": t.ms, "mib": t.bytes_total / MiB, "send": t.send_bytes_per_gpu, "recv": t.decode_bytes_per_rank,
        "bandwidth": t.link.bandwidth * t.efficiency, "pblock": t.blocks.prefill, "dblock": t.blocks.decode,
        "to_set": t.blocks.to_set or 0,
        "room": np.nan if dc.kv_room is None else _room_with_block(ctx, parse_topology(d), int(k), dc.kv_room,
                                                                    t.blocks.to_set),
        "p_dp": parse_topology(p).dp, "d_dp": parse_topology(d).dp,
        "charged": pc.network_charged or dc.network_charged, "groups": _network_groups(pc, dc, ctx),
        "psource": pc.source, "dsource": dc.source,
        "modeled": pc.source.startswith("modeled") or dc.source.startswith("modeled"),
    }
    return keyed[key]


def _finish(matched: pd.DataFrame, ctx: _Context, transfers: dict[tuple[str, str, int, str], Transfer],
            keyed: dict[tuple[str, str, int, str], dict[str, Any]]) -> pd.DataFrame:
    """:func:`_with_transfer`, without the rows over KV room or over the link (the staircase counts them)."""
    out = _with_transfer(matched, ctx, transfers, keyed)
    return out[_feasible(out)]


def _feasible(rows: pd.DataFrame) -> np.ndarray:
    """Rows within their decode engine's KV room (unknown room: kept) and within the link's bandwidth."""
    over_room = rows["decode_concurrency"].to_numpy() > rows["decode_room"].to_numpy()
    return ~(over_room | (rows["kv_link_utilization"].to_numpy() > 1.0))


def _with_transfer(matched: pd.DataFrame, ctx: _Context, transfers: dict[tuple[str, str, int, str], Transfer],
                   keyed: dict[tuple[str, str, int, str], dict[str, Any]]) -> pd.DataFrame:
    """The KV transfer term of every row (TTFT, concurrency, link load, the block-size fix) and the columns
    that follow from its two candidates (provenance, network charge)."""
    s = ctx.settings
    gpus_total = matched["gpus_total"].to_numpy()
    same_kind = ctx.prefill_gpu.name == ctx.decode_gpu.name
    domain = (load_link(ctx.prefill_gpu.name, NVLINK).domain_gpus or 0) if same_kind else 0
    keys = pd.DataFrame({
        "p": matched["prefill_topology"].astype(str).to_numpy(),
        "d": matched["decode_topology"].astype(str).to_numpy(),
        "k": matched["mtp_tokens"].to_numpy(dtype=float).astype(int),
        "scope": np.where(gpus_total <= domain, NVLINK, SCALE_OUT),
    })
    codes, uniques = pd.factorize(pd.MultiIndex.from_frame(keys))
    per_key: dict[str, list[Any]] = {name: [] for name in (
        "ms", "mib", "send", "recv", "bandwidth", "pblock", "dblock", "to_set", "room", "p_dp", "d_dp",
        "charged", "groups", "psource", "dsource", "modeled")}
    for p, d, k, scope in uniques:
        for name, value in _key_values(ctx, transfers, keyed, p, d, int(k), scope).items():
            per_key[name].append(value)
    col = {name: np.asarray(values)[codes] for name, values in per_key.items()}
    ttft = matched["ttft_ms_p50"].to_numpy(dtype=float)
    rate = matched["total_tps"].to_numpy(dtype=float) / (s.isl + s.osl)
    paced = matched["paced_tpot_ms"].to_numpy(dtype=float)
    p_ranks = matched["n_prefill_workers"].to_numpy() * col["p_dp"]
    d_ranks = matched["n_decode_workers"].to_numpy() * col["d_dp"]
    utilization = np.maximum(rate / p_ranks * col["send"], rate / d_ranks * col["recv"]) / col["bandwidth"]
    total_ttft = ttft + col["ms"]
    # The sweeps' own tails where they were measured (the evaluation step turns them into p90/p99).
    dsource = col["dsource"].astype(str)
    p99 = matched["tpot_ms_p99"].to_numpy(dtype=float)
    measured_tpot_p99 = np.where(np.char.startswith(dsource, "measured") & np.isfinite(p99), p99, np.nan)
    ttft99 = matched["ttft_ms_p99"].to_numpy(dtype=float)
    measured_ttft_p99 = np.where(np.char.startswith(col["psource"].astype(str), "measured") & np.isfinite(ttft99),
                                 np.maximum(ttft99, ttft) + col["ms"], np.nan)
    block = pd.array(col["to_set"].astype(np.int64), dtype="Int64")
    block[col["to_set"] == 0] = pd.NA
    out = matched.assign(
        deployment=matched["deployment"].astype(str),
        prefill_ttft_ms=ttft,
        mode="disagg",
        ttft_ms_p50=total_ttft,
        measured_ttft_ms_p99=measured_ttft_p99,
        measured_tpot_ms_p99=measured_tpot_p99,
        kv_transfer_ms=col["ms"],
        kv_transfer_share=col["ms"] / total_ttft,
        kv_link=keys["scope"].to_numpy(),
        kv_mib_per_request=col["mib"],
        kv_link_utilization=utilization,
        prefill_block_tokens=col["pblock"].astype(np.int64),
        decode_block_tokens=col["dblock"].astype(np.int64),
        block_size_to_set=block,
        decode_room=col["room"].astype(float),
        # Little's law with the transfer inside TTFT, in whole requests (what --max-concurrency is set to), at the
        # TPOT the decode side runs at the row's rate (pdtune.frontier.xpyd.rate_match: paced_tpot_ms).
        concurrency=np.maximum(1, np.rint(rate * (total_ttft + paced * (s.osl - 1)) / 1000.0)).astype(np.int64),
        prefill_concurrency=matched["prefill_concurrency"].to_numpy(dtype=float).astype(np.int64),
        decode_concurrency=matched["decode_concurrency"].to_numpy(dtype=float).astype(np.int64),
        network_charged=col["charged"].astype(bool),
        network_groups=col["groups"],
        prefill_source=col["psource"],
        decode_source=col["dsource"],
        modeled=col["modeled"].astype(bool),
        prefill_gpu=ctx.prefill_gpu.name,
        decode_gpu=ctx.decode_gpu.name,
        replicas_in_budget=s.max_gpus // gpus_total,
    )
    return out


def _room_with_block(ctx: _Context, topo: Topology, k: int, room: int, block: int | None) -> float:
    """A decode engine's KV room when ``--block-size`` grows its block: fewer requests, by the bytes ratio."""
    if block is None:
        return float(room)
    s = ctx.settings
    common: dict[str, Any] = dict(max_model_len=s.isl + s.osl, tp=topo.tp, kv_cache_dtype=s.kv_cache_dtype,
                                  vllm=s.vllm, **ctx.extras.state_args(decode=True))
    if k:
        common["num_speculative_tokens"] = k
    own = plan_state(ctx.spec, **common).bytes_per_request
    forced = plan_state(ctx.spec, block_size=block, **common).bytes_per_request
    return float(math.floor(room * own / forced))
