"""The workbook's plan: ``pdtune plan`` for the model, GPU and ``plan:`` section of a parameters file.

One mapping from a scenario to :class:`pdtune.plan.PlanSettings` and its SLAs, used by the workbook (which
writes ``plan/plan.json`` and, with ``plan.recipes``, the srt-slurm recipes of every pick) and by the plan
chapter (which shows the same search). The flags' meanings are ``pdtune plan``'s: ``min_tps_per_user`` one
pick per floor, each with the TTFT and TPOT p90 limits; the scenario's MTP tokens and acceptance are the
decode candidates' MTP; a ``speculative_model`` replaces them with its own draft tokens; the ``calibration``
file serves the pool whose GPU it names. The state accounting and the recipes follow vLLM
:data:`pdtune.plan.PLAN_VLLM`, the line whose flags the recipes write.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pdtune.errors import InputError
from pdtune.io import write_failure, write_text
from pdtune.scenario import PlanParameters, Scenario

if TYPE_CHECKING:  # the search (pdtune.plan, pdtune.perfmodel, scipy) is imported where it runs
    from pdtune.plan import Plan, PlanSettings, Sla

#: Where the workbook writes the plan inside its output folder, and the recipes inside that.
PLAN_DIR = "plan"
PLAN_JSON = "plan.json"
RECIPES_DIR = "recipes"


def _parameters(value: PlanParameters | Mapping[str, Any]) -> PlanParameters:
    if isinstance(value, PlanParameters):
        return value
    return PlanParameters.from_mapping(dict(value), source="plan")


def plan_settings(*, model: str, gpu: str, isl: int, osl: int, kv_cache_dtype: str = "fp8",
                  gpu_memory_utilization: float = 0.92, num_speculative_tokens: int = 3,
                  mtp_acceptance: float = 0.25, speculative_model: str = "", decode_context_parallel_size: int = 1,
                  calibration: str = "", plan: PlanParameters | Mapping[str, Any] | None = None,
                  prefill_gpu: str | None = None, decode_gpu: str | None = None,
                  max_gpus: int | None = None, vllm_env: tuple[tuple[str, str], ...] = (),
                  weights: str = "") -> PlanSettings:
    """The :class:`PlanSettings` of a scenario's values (a chapter's parameters, or a :class:`Scenario`'s).

    ``prefill_gpu`` / ``decode_gpu`` / ``max_gpus`` override the pools and the budget (the chapter's mixed
    pool and exercises); otherwise prefill runs on ``gpu`` and decode on ``plan.decode_gpu`` or ``gpu``.
    """
    from pdtune.plan import PlanSettings
    from pdtune.scenario import plan_budget

    p = _parameters(plan or {})
    draft = speculative_model.strip() or None

    return PlanSettings(
        model=model, gpu=prefill_gpu or gpu, decode_gpu=decode_gpu or p.decode_gpu.strip() or gpu,
        max_gpus=max_gpus or p.max_gpus or plan_budget(gpu), isl=isl, osl=osl,
        mtp_tokens=0 if draft else num_speculative_tokens, acceptance=mtp_acceptance,
        kv_cache_dtype=kv_cache_dtype, gpu_memory_utilization=gpu_memory_utilization,
        prefill_topologies=tuple(p.prefill_topologies) or None, decode_topologies=tuple(p.decode_topologies) or None,
        calibration=(calibration,) if calibration.strip() else (), speculative_model=draft,
        num_speculative_tokens=num_speculative_tokens if draft else 0,
        decode_context_parallel_size=decode_context_parallel_size, vllm_env=tuple(vllm_env),
        weights=weights,
    )


def plan_slas(plan: PlanParameters | Mapping[str, Any] | None) -> list[Sla]:
    """One SLA per interactivity floor, each with the latency limits (``pdtune plan``'s rule)."""
    from pdtune.plan import sla_list

    p = _parameters(plan or {})
    return sla_list(p.min_tps_per_user, p.max_ttft_ms, p.max_tpot_ms_p90)


def scenario_settings(scenario: Scenario) -> PlanSettings:
    return plan_settings(
        model=scenario.model, gpu=scenario.gpu, isl=scenario.isl, osl=scenario.osl,
        kv_cache_dtype=scenario.kv_cache_dtype, gpu_memory_utilization=scenario.gpu_memory_utilization,
        num_speculative_tokens=scenario.num_speculative_tokens, mtp_acceptance=scenario.mtp_acceptance,
        speculative_model=scenario.speculative_model,
        decode_context_parallel_size=scenario.decode_context_parallel_size, calibration=scenario.calibration,
        plan=scenario.plan, vllm_env=scenario.environment(), weights=scenario.weights)


@dataclass(frozen=True, eq=False)
class Planned:
    """A finished plan and how long its search took."""

    plan: Plan
    seconds: float

    @property
    def pick_rows(self) -> list[int]:
        """The table rows some SLA picked (what ``pdtune plan --recipes`` writes)."""
        return sorted({p.row for p in self.plan.picks if p.row is not None})


def timed_plan(settings: PlanSettings, slas: list[Sla]) -> Planned:
    """:func:`pdtune.plan.plan` (an SLA nothing meets is a pick with ``met=False`` and its closest row).

    Within one run of the workbook or of the book's execute step the search is made once
    (:func:`pdtune.site.runcache.remembered`): the workbook's own plan and chapter 9's three pages ask for the
    same one, and get it with the seconds the search took."""
    import os

    from pdtune import switches
    from pdtune.site import runcache

    def search() -> Planned:
        from pdtune.plan import plan

        started = time.perf_counter()
        result = plan(settings, slas)
        return Planned(result, time.perf_counter() - started)

    # the vLLM environment in force and the data folder change the plan without changing its settings
    key = ("timed_plan", settings, tuple(slas), switches.active(), os.environ.get("PDTUNE_DATA"))
    return runcache.remembered(key, search)


#: ``pdtune plan``'s error fields, as the ``plan:`` keys (or top-level keys) of a parameters file.
_PLAN_KEYS = {"max_gpus": "plan.max_gpus", "prefill_topologies": "plan.prefill_topologies",
              "decode_topologies": "plan.decode_topologies", "speculative_model": "speculative_model",
              "num_speculative_tokens": "num_speculative_tokens",
              "decode_context_parallel_size": "decode_context_parallel_size"}


@dataclass(frozen=True)
class WorkbookPlan:
    """The workbook's plan as the files hold it: ``plan.json``'s content, the summary's part, the pick rows."""

    data: dict[str, Any]
    summary: dict[str, Any]
    pick_rows: tuple[int, ...]


def scenario_plan(scenario: Scenario, source: str | Path) -> WorkbookPlan:
    """The workbook's plan, searched in a child process (the workbook itself never loads the performance model,
    so it starts, and stops on Ctrl-C, as fast as before); a question pdtune cannot answer (a budget smaller
    than the smallest deployment, a calibration for another model) is bad input naming the parameters file
    and the key."""
    from pdtune.signals import map_in_workers

    [outcome] = map_in_workers(_plan_job, [scenario], 1)
    if "error" in outcome:
        field, message = outcome["error"]
        raise InputError(source, field, message)
    return WorkbookPlan(outcome["data"], outcome["summary"], tuple(outcome["rows"]))


def _plan_job(scenario: Scenario) -> dict[str, Any]:
    """In the child: the search, as plain data (an error as its key and message, InputError does not pickle)."""
    from pdtune.switches import vllm_environment

    try:
        with vllm_environment(scenario.environment(), "vllm_env"):
            planned = timed_plan(scenario_settings(scenario), plan_slas(scenario.plan))
    except InputError as exc:
        key = _PLAN_KEYS.get(exc.field) or ("calibration" if scenario.calibration and
                                            str(exc.source) == scenario.calibration else "plan")
        return {"error": (key, exc.message)}
    return {"data": planned.plan.to_dict(), "summary": plan_summary(planned), "rows": planned.pick_rows}


def write_plan(folder: Path, result: WorkbookPlan, *, recipes: bool) -> dict[str, Any]:
    """``plan.json`` (what ``pdtune plan --json`` prints) and, with ``recipes``, every pick's recipes, into
    ``folder``; what the summary says about them (file names relative to the workbook's output folder)."""
    import copy
    import json

    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise write_failure(folder, "--out", exc) from None
    data = copy.deepcopy(result.data)
    summary = copy.deepcopy(result.summary)
    written: list[str] = []
    if recipes and result.pick_rows:
        from pdtune.recipe import write_recipes

        paths = write_recipes(data, list(result.pick_rows), folder / RECIPES_DIR, source=folder / PLAN_JSON)
        written = [f"{PLAN_DIR}/{RECIPES_DIR}/{Path(p).name}" for p in paths]
        data["recipes"] = written
    write_text(folder / PLAN_JSON, json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    summary["recipes"] = written
    for pick in summary["picks"]:
        if pick["met"]:
            pick["recipes"] = [r for r in written if f"row{pick['row']}-" in r]
    return summary


def plan_summary(planned: Planned) -> dict[str, Any]:
    from pdtune.plan import picks_sentence

    p = planned.plan
    s = p.settings
    picks = []
    for pick in p.picks:
        entry: dict[str, Any] = {"sla": pick.sla.describe(), "met": pick.met, "sentence": picks_sentence(p, pick),
                                 "comparison": p.comparison(pick)["sentence"]}
        row = p.row(pick.row if pick.met else pick.closest_row)  # type: ignore[arg-type]
        entry.update({k: row[k] for k in ("row", "mode", "deployment", "gpus_total", "concurrency", "tps_per_gpu",
                                         "tps_per_user", "ttft_ms_p50", "kv_transfer_ms", "kv_transfer_share")})
        picks.append(entry)
    return {
        "file": f"{PLAN_DIR}/{PLAN_JSON}", "modeled": p.modeled, "model": p.spec.name,
        "prefill_gpu": p.prefill_gpu.name, "decode_gpu": p.decode_gpu.name, "max_gpus": s.max_gpus,
        "isl": s.isl, "osl": s.osl, "vllm": s.vllm, "seconds": round(planned.seconds, 2),
        "candidates": {"prefill": p.counts["prefill_candidates"], "decode": p.counts["decode_candidates"],
                       "rejected": p.counts["rejected"]},
        "feasible_rows": p.counts["feasible_rows"], "factors": {r: f.source for r, f in p.factors.items()},
        "picks": picks, "recipes": [], "warnings": p.warnings(),
        "ttft_ceiling": p.ceiling.to_dict() if p.ceiling is not None else None,
        "latency_model": p.latency_model, "no_disagg": p.no_disagg,
    }
