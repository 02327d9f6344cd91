"""The key numbers of one scenario, as the workbook's ``summary.json`` and ``summary.md`` report them.

Every number here is computed by the same pdtune functions the chapters call, never read back from a
notebook's output, so a summary can be checked against ``pdtune state`` / ``pdtune frontier`` and stays
right even when a chapter fails:

* state per request: :func:`pdtune.state.plan_state` at TP=1 (the unsharded figure, the article's 759 MiB);
* KV cache and max concurrency per decode engine: :func:`pdtune.capacity.topology_capacity`, which is
  chapter 4's table (weights per GPU from the config, the measured or assumed overheads, vLLM's capacity);
* best prefill and decode topology per concurrency: :func:`pdtune.frontier.best_per_concurrency`;
* the two ends of the disaggregated frontier and the SLA pick: :func:`pdtune.frontier.upper_envelope`
  and :func:`pdtune.frontier.sla_pick`, after :func:`pdtune.frontier.accuracy_gate`.

Result paths and a model given as a path must already be absolute (the workbook resolves them).
"""

from __future__ import annotations

import json
import math
import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from pdtune import __version__, article
from pdtune.capacity import topology_capacity
from pdtune.frontier import (
    accuracy_gate,
    best_per_concurrency,
    deployment_label,
    sla_pick,
    upper_envelope,
    winner_runs,
)
from pdtune.gpus import gpu_count, load_gpu
from pdtune.io import plain, write_text
from pdtune.model import ModelSpec, load_model
from pdtune.results import load_results, parse_gpus
from pdtune.scenario import RESULT_KINDS, Scenario, carried_over, default_name
from pdtune.state import StatePlan, plan_state
from pdtune.units import GiB, MiB

if TYPE_CHECKING:
    from pdtune.workbook.parameters import Parameters


SUMMARY_JSON = "summary.json"


SUMMARY_MD = "summary.md"


_KIND_TITLES = {
    "prefill": "Prefill isolation",
    "decode": "Decode isolation",
    "disagg": "Disaggregated frontier",
}


@dataclass(frozen=True)
class RequestState:
    """One request's state on one unsharded engine (TP=1), and the command that prints the same."""

    model: str
    vllm: str
    max_model_len: int
    kv_cache_dtype: str
    block_tokens: int
    pages: int  # pages over every layer slot (184 in the article)
    bytes: int
    command: str

    @property
    def mib(self) -> float:
        return self.bytes / MiB

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model, "vllm": self.vllm, "tp": 1, "max_model_len": self.max_model_len,
            "kv_cache_dtype": self.kv_cache_dtype, "num_speculative_tokens": 0, "prefix_caching": False,
            "block_tokens": self.block_tokens, "pages": self.pages, "bytes": self.bytes, "mib": self.mib,
            "command": self.command,
        }


@dataclass(frozen=True)
class PhaseSummary:
    """An isolated sweep (prefill-only or decode-only): the best topology at each concurrency."""

    kind: str
    paths: tuple[str, ...]
    modeled: bool
    workload: str
    points: int
    deployments: int
    best: tuple[dict[str, Any], ...]  # per concurrency: concurrency, deployment, tps_per_gpu, tps_per_user

    def runs(self) -> list[dict[str, Any]]:
        """Consecutive concurrencies won by the same deployment, merged: who wins where, in one line each."""
        if not self.best:
            return []
        runs = winner_runs(pd.DataFrame(list(self.best)), "deployment").drop(columns="points")
        return [{k: plain(v) for k, v in run.items()} for run in runs.to_dict("records")]

    def to_dict(self) -> dict[str, Any]:
        return {
            "paths": list(self.paths), "modeled": self.modeled, "workload": self.workload,
            "points": self.points, "deployments": self.deployments, "winners": self.runs(),
            "best_per_concurrency": list(self.best),
        }


@dataclass(frozen=True)
class FrontierSummary:
    """The disaggregated sweep: what the accuracy gate kept, the envelope's two ends, the SLA pick."""

    paths: tuple[str, ...]
    modeled: bool
    workload: str
    points: int
    deployments: int
    gate: dict[str, Any]
    envelope_points: int
    envelope_deployments: int
    throughput_end: dict[str, Any]  # the most tokens/s per GPU on the envelope
    latency_end: dict[str, Any]  # the most tokens/s per user on the envelope
    sla: dict[str, Any]
    command: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "paths": list(self.paths), "modeled": self.modeled, "workload": self.workload,
            "points": self.points, "deployments": self.deployments, "accuracy_gate": self.gate,
            "envelope_points": self.envelope_points, "envelope_deployments": self.envelope_deployments,
            "throughput_end": self.throughput_end, "latency_end": self.latency_end, "sla": self.sla,
            "command": self.command,
        }


@dataclass(frozen=True)
class KeyNumbers:
    """What ``summary.json`` reports about a scenario; the workbook adds how each chapter went."""

    scenario: Scenario
    model_summary: str
    gpu: dict[str, Any]
    state: RequestState
    reference_topology: str
    engines: tuple[dict[str, Any], ...]  # chapter 4's table, one row per decode topology x MTP
    phases: dict[str, PhaseSummary | None]
    frontier: FrontierSummary | None
    notes: tuple[str, ...] = field(default=())
    weights: str = ""  # the weight format the model is served with (its config's, or the file's `weights`)

    @property
    def reference_engine(self) -> dict[str, Any] | None:
        """The decode engine the chapters draw in detail (TP4DP4+EP when listed), without MTP."""
        for row in self.engines:
            if row["topology"] == self.reference_topology and not row["mtp"]:
                return row
        return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "title": self.scenario.title or default_title(self.scenario),
            "model": {"name": model_name(self.scenario.model), "config": self.scenario.model,
                      "weights": self.weights, "layers": self.model_summary},
            "gpu": self.gpu,
            "workload": {"isl": self.scenario.isl, "osl": self.scenario.osl},
            "vllm": self.scenario.vllm,
            "state_per_request": self.state.to_dict(),
            "decode_engines": {
                "reference_topology": self.reference_topology,
                "kv_cache_is": "per GPU (one TP rank): what vLLM's 'Available KV cache memory' line reports",
                "rows": list(self.engines),
            },
            "prefill": _maybe(self.phases.get("prefill")),
            "decode": _maybe(self.phases.get("decode")),
            "frontier": _maybe(self.frontier),
            "defaults_used": list(self.scenario.defaults_used),
            "notes": list(self.notes),
        }


def _maybe(part: PhaseSummary | FrontierSummary | None) -> dict[str, Any] | None:
    return part.to_dict() if part is not None else None


def model_name(model: str) -> str:
    """The model as prose names it: a bundled name as given, a path by its folder (``load_model``'s name)."""
    path = Path(model)
    if path.name == "config.json":
        return path.parent.name
    return path.stem if path.suffix == ".json" else path.name


def default_title(scenario: Scenario) -> str:
    return f"{model_name(scenario.model)} on {scenario.gpu}, ISL/OSL {scenario.isl}/{scenario.osl}"


def key_numbers(scenario: Scenario) -> KeyNumbers:
    """The summary's numbers for ``scenario`` (paths in it absolute, or relative to the working folder)."""
    spec = scenario.model_spec()
    gpu = load_gpu(scenario.gpu)
    state = request_state(spec, scenario)
    engines = topology_capacity(
        spec,
        scenario.decode_topologies,
        gpu_memory_gib=scenario.gpu_memory_gib,
        gpu_memory_utilization=scenario.gpu_memory_utilization,
        non_torch_gib=scenario.non_torch_gib,
        activation_peak_gib=scenario.activation_peak_gib,
        cudagraph_estimate_gib=scenario.cudagraph_estimate_gib,
        max_model_len=scenario.isl + scenario.osl,
        kv_cache_dtype=scenario.kv_cache_dtype,
        vllm=scenario.vllm,
        num_speculative_tokens=scenario.num_speculative_tokens,
        speculative_model=load_model(scenario.speculative_model) if scenario.speculative_model.strip() else None,
        decode_context_parallel_size=scenario.decode_context_parallel_size,
    )
    rows = tuple(_engine_row(r, scenario) for r in engines.to_dict("records"))
    counts = parse_gpus(scenario.gpus, "gpus") if scenario.gpus.strip() else None
    frames = {kind: _load(scenario, kind, counts) for kind in RESULT_KINDS}
    phases = {kind: _phase(kind, frames[kind], scenario) for kind in ("prefill", "decode")}
    notes = []
    if not math.isclose(scenario.gpu_memory_gib, gpu.memory_total / GiB, abs_tol=0.005):
        notes.append(f"gpu_memory_gib {scenario.gpu_memory_gib:g} differs from the {gpu.name} table's "
                     f"{gpu.memory_total / GiB:.2f} GiB; the parameters file's value is used")
    return KeyNumbers(
        scenario=scenario,
        model_summary=spec.kinds_summary(),
        weights=spec.weights.name,
        gpu={"name": gpu.name, "description": gpu.description, "gpu_memory_gib": scenario.gpu_memory_gib,
             "gpu_memory_utilization": scenario.gpu_memory_utilization},
        state=state,
        reference_topology=article.reference_topology(scenario.decode_topologies),
        engines=rows,
        phases=phases,
        frontier=_frontier(frames["disagg"], scenario),
        notes=tuple(notes),
    )


def request_state(spec: ModelSpec, scenario: Scenario) -> RequestState:
    """TP=1, no MTP, no prefix caching: the figure the article calls "state per request"."""
    plan: StatePlan = plan_state(
        spec,
        max_model_len=scenario.isl + scenario.osl,
        kv_cache_dtype=scenario.kv_cache_dtype,
        vllm=scenario.vllm,
        prefix_caching=False,
    )
    return RequestState(
        model=spec.name,
        vllm=scenario.vllm,
        max_model_len=plan.max_model_len,
        kv_cache_dtype=scenario.kv_cache_dtype,
        block_tokens=plan.block_tokens,
        pages=plan.blocks_per_request,
        bytes=plan.bytes_per_request,
        command=state_command(scenario),
    )


def state_command(scenario: Scenario, *, tp: int = 1, num_speculative_tokens: int = 0,
                  kv_cache_bytes: int | None = None) -> str:
    """The ``pdtune state`` command line that prints the same plan (and capacity, given a KV cache)."""
    words = ["pdtune", "state", scenario.model, "--isl", str(scenario.isl), "--osl", str(scenario.osl),
             "--kv-cache-dtype", scenario.kv_cache_dtype, "--vllm", scenario.vllm, "--no-prefix-caching"]
    if tp != 1:
        words += ["--tp", str(tp)]
    if num_speculative_tokens:
        words += ["--num-speculative-tokens", str(num_speculative_tokens)]
        if scenario.speculative_model.strip():
            words += ["--speculative-model", scenario.speculative_model]
    if kv_cache_bytes is not None and scenario.decode_context_parallel_size > 1:
        words += ["--decode-context-parallel-size", str(scenario.decode_context_parallel_size)]
    if kv_cache_bytes is not None:
        # repr keeps every digit, so the command's bytes round back to exactly this KV cache
        words += ["--kv-cache-gib", repr(kv_cache_bytes / GiB)]
    return shlex.join(words)


def _engine_row(row: dict[str, Any], scenario: Scenario) -> dict[str, Any]:
    out = {k: plain(v) for k, v in row.items()}
    kv_gib = out.get("kv_cache_gib")
    if out.get("requests_per_engine") is not None and kv_gib is not None:
        k = scenario.num_speculative_tokens if out["mtp"] else 0
        out["command"] = state_command(scenario, tp=int(out["tp"]), num_speculative_tokens=k,
                                       kv_cache_bytes=round(kv_gib * GiB))
    return out


def _load(scenario: Scenario, kind: str, counts: Any) -> pd.DataFrame | None:
    paths = getattr(scenario, f"{kind}_results")
    if not paths:
        return None
    return load_results(list(paths), gpus=counts)


def _workload(df: pd.DataFrame) -> str:
    pairs = df[["isl", "osl"]].dropna().drop_duplicates()
    if len(pairs) != 1:
        return "ISL/OSL not recorded"
    isl, osl = pairs.iloc[0]
    return f"{int(isl)}/{int(osl)}"


def _modeled(df: pd.DataFrame) -> bool:
    return bool(df["modeled"].fillna(False).astype(bool).any())


def _point(row: pd.Series | dict[str, Any]) -> dict[str, Any]:
    get = row.get
    return {
        "deployment": str(get("deployment")),
        "concurrency": plain(get("concurrency")),
        "tps_per_gpu": plain(get("tps_per_gpu")),
        "tps_per_user": plain(get("tps_per_user")),
        "modeled": bool(get("modeled")) if get("modeled") is not None else None,
    }


def _phase(kind: str, df: pd.DataFrame | None, scenario: Scenario) -> PhaseSummary | None:
    if df is None:
        return None
    best = best_per_concurrency(df)
    return PhaseSummary(
        kind=kind,
        paths=getattr(scenario, f"{kind}_results"),
        modeled=_modeled(df),
        workload=_workload(df),
        points=len(df),
        deployments=int(deployment_label(df).nunique()),
        best=tuple(_point(r) for r in best.to_dict("records")),
    )


def _frontier(df: pd.DataFrame | None, scenario: Scenario) -> FrontierSummary | None:
    if df is None:
        return None
    gate = accuracy_gate(df, scenario.accuracy_threshold)
    envelope = upper_envelope(gate.kept)
    pick = sla_pick(gate.kept, min_tps_per_user=scenario.min_tps_per_user)
    words = ["pdtune", "frontier", *scenario.disagg_results,
             "--accuracy-threshold", f"{scenario.accuracy_threshold:g}",
             "--min-tps-per-user", f"{scenario.min_tps_per_user:g}"]
    if scenario.gpus.strip():
        words += ["--gpus", scenario.gpus]
    return FrontierSummary(
        paths=scenario.disagg_results,
        modeled=_modeled(df),
        workload=_workload(df),
        points=len(df),
        deployments=int(gate.kept["deployment"].nunique()) if len(gate.kept) else 0,
        gate=gate.to_dict(),
        envelope_points=len(envelope),
        envelope_deployments=int(envelope["deployment"].nunique()) if len(envelope) else 0,
        throughput_end=_point(envelope.iloc[0]) if len(envelope) else {},
        latency_end=_point(envelope.iloc[-1]) if len(envelope) else {},
        sla=pick.to_dict(),
        command=shlex.join(words),
    )


def _num(value: Any, digits: int = 1) -> str:
    if value is None:
        return "—"
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.{digits}f}"
    return f"{int(value):,}"


def _fixed(value: Any, digits: int = 2) -> str:
    """A column's number to the same decimals on every row (1,116.00 beside 139.50, not 1,116)."""
    return "—" if value is None else f"{float(value):,.{digits}f}"


def _tag(modeled: bool) -> str:
    return "modeled (pdtune's performance model, not measured)" if modeled else "measured"


def to_markdown(summary: dict[str, Any], chapters: Sequence[dict[str, Any]] = (),
                link: Callable[[str], str] = lambda name: f"`{name}`") -> str:
    """``summary.md``: the same numbers as ``summary.json``, for a person.

    ``link`` writes a reference to an executed notebook by file name (a markdown link beside the files,
    a ``{doc}`` role inside the HTML book).
    """
    s = summary
    state = s["state_per_request"]
    gpu = s["gpu"]
    lines = [
        f"# Workbook summary: {s['title']}",
        "",
        f"- parameters: `{s.get('parameters_file', '-')}`",
        f"- model: {s['model']['name']} ({s['model']['layers']}; {s['model'].get('weights') or 'config'} weights)",
        f"- GPU: {gpu['name']} ({gpu['description']}), {gpu['gpu_memory_gib']:g} GiB as torch sees it, "
        f"gpu_memory_utilization {gpu['gpu_memory_utilization']:g}",
        f"- workload: ISL/OSL {s['workload']['isl']}/{s['workload']['osl']}; vLLM {s['vllm']}",
        "",
        *_defaults_section(s.get("defaults_used") or []),
        "## State per request",
        "",
        f"{_num(state['bytes'])} B = **{state['mib']:,.2f} MiB** per request on one unsharded engine "
        f"(TP=1, no MTP, no prefix caching): {state['pages']:,} pages of {state['block_tokens']}-token blocks.",
        "",
        f"Same figure: `{state['command']}`",
        "",
        "## KV cache and concurrency per decode engine",
        "",
        "KV cache is per GPU (one TP rank); requests per engine are vLLM's max concurrency for that rank's "
        "share of each request, to two decimals as vLLM logs it (chapter 6 quotes the same numbers). Weights are computed from the config; the other overheads come from the "
        "parameters file.",
        "",
        "| topology | MTP | weights, GiB per GPU | KV cache, GiB per GPU | MiB per request, one rank | "
        "requests per engine | requests per deployment |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    notes = []
    for r in s["decode_engines"]["rows"]:
        lines.append(
            f"| {r['topology']} | {'yes' if r['mtp'] else 'no'} | {_fixed(r.get('weights_gib'))} | "
            f"{_fixed(r.get('kv_cache_gib'))} | {_fixed(r.get('mib_per_request_rank'))} | "
            f"{_fixed(r.get('requests_per_engine'))} | {_fixed(r.get('requests_per_deployment'))} |"
        )
        if r.get("note"):  # below the table, so the table fits the page's column
            notes.append(f"- {r['topology']}{' with MTP' if r['mtp'] else ''}: {r['note']}")
    if notes:
        lines += ["", *notes]
    for kind in ("prefill", "decode"):
        part = s.get(kind)
        lines += ["", f"## Best {kind} topology", ""]
        if part is None:
            lines.append(f"No {kind}-only results were given (`{kind}_results` is empty).")
            continue
        lines.append(f"{part['points']} points from {part['deployments']} deployments, "
                     f"ISL/OSL {part['workload']}, {_tag(part['modeled'])}. "
                     "Winner by total tokens/s per GPU (all GPUs):")
        lines.append("")
        for run in part["winners"]:
            first, last = _num(run["from_concurrency"]), _num(run["to_concurrency"])
            span = f"concurrency {first}" if first == last else f"concurrency {first}–{last}"
            lines.append(f"- {span}: **{run['deployment']}**")
    front = s.get("frontier")
    lines += ["", "## Disaggregated frontier", ""]
    if front is None:
        lines.append("No disaggregated results were given (`disagg_results` is empty).")
    else:
        gate = front["accuracy_gate"]
        lines.append(f"{front['points']} points, ISL/OSL {front['workload']}, {_tag(front['modeled'])}; "
                     f"accuracy gate {gate['threshold']:g}: {len(gate['excluded'])} deployment(s) excluded, "
                     f"{len(gate['unmeasured'])} kept without an accuracy recorded. "
                     f"The upper envelope has {front['envelope_points']} points, from "
                     f"{front['envelope_deployments']} of the {front['deployments']} deployments that pass.")
        lines.append("")
        for name, key in (("throughput end", "throughput_end"), ("latency end", "latency_end")):
            p = front[key]
            if p:
                lines.append(f"- {name}: **{p['deployment']}** at concurrency {_num(p['concurrency'])}: "
                             f"{p['tps_per_gpu']:,.0f} total tok/s per GPU (all GPUs), "
                             f"{_fixed(p['tps_per_user'], 1)} output tok/s per user (1000 / median TPOT)")
        sla = front["sla"]
        if sla["met"]:
            lines.append(f"- SLA ≥ {sla['minimum']:g} tok/s per user: **{sla['deployment']}** at concurrency "
                         f"{_num(sla['concurrency'])}, {sla['tps_per_gpu']:,.0f} tok/s per GPU")
        else:
            lines.append(f"- SLA ≥ {sla['minimum']:g} tok/s per user: no point meets it (the best reaches "
                         f"{_fixed(sla['best_available'], 1)} tok/s per user)")
        lines += ["", f"Same figures: `{front['command']}`"]
    lines += _plan_section(s.get("plan"))
    if chapters:
        lines += ["", "## Chapters", "", "| # | chapter | status | notebook | seconds |",
                  "|---:|---|---|---|---:|"]
        for c in chapters:
            status = c["status"]
            if status == "failed":
                status = f"**failed** at {c['failed_at']}" if c.get("failed_at") else "**failed**"
            notebook = link(c["notebook"]) if c.get("notebook") else "—"
            seconds = _num(c.get("seconds"))
            lines.append(f"| {c['number']} | {c['name']} | {status} | {notebook} | {seconds} |")
    if s.get("notes"):
        lines += ["", "## Notes", ""] + [f"- {n}" for n in s["notes"]]
    return "\n".join(lines) + "\n"


def _plan_section(plan: dict[str, Any] | None) -> list[str]:
    """The plan's picks and the files written for them (``pdtune plan`` for this file's ``plan:`` section)."""
    if not plan:
        return []
    pools = plan["prefill_gpu"] if plan["prefill_gpu"] == plan["decode_gpu"] else (
        f"prefill on {plan['prefill_gpu']}, decode on {plan['decode_gpu']}")
    c = plan["candidates"]
    lines = ["", "## Plan", "",
             f"{_tag(plan['modeled'])}: `pdtune plan` of {plan['model']} on {pools}, at most "
             f"{gpu_count(plan['max_gpus'])}, ISL/OSL {plan['isl']}/{plan['osl']}, vLLM {plan['vllm']}: "
             f"{c['prefill']} prefill and {c['decode']} decode candidates, {_num(plan['feasible_rows'])} "
             "rate-matched disaggregated deployments"
             f"{' (' + plan['no_disagg'] + ')' if plan.get('no_disagg') else ''}, searched in "
             f"{plan['seconds']:.1f} s. Written to `{plan['file']}` (what `pdtune recipe` reads).", ""]
    for pick in plan["picks"]:
        if pick["met"]:
            files = ", ".join(f"`{r}`" for r in pick.get("recipes") or []) or "none written (`plan.recipes: false`)"
            lines.append(f"- SLA {pick['sla']}: **{pick['deployment']}** (row {pick['row']}) on "
                         f"{gpu_count(pick['gpus_total'])} at concurrency {pick['concurrency']}: "
                         f"{pick['tps_per_gpu']:,.0f} tok/s per GPU, "
                         f"{_fixed(math.floor(pick['tps_per_user'] * 10 + 1e-9) / 10, 1)} tok/s per user, TTFT "
                         f"{_num(math.ceil(pick['ttft_ms_p50'] - 1e-9), 0)} ms"
                         + (f" ({pick['kv_transfer_share']:.1%} KV transfer)" if pick.get("mode") != "agg" else "")
                         + f"; recipes: {files}")
            if pick.get("comparison"):
                # it opens on the SLA (">= 20 tokens/s ..."): escaped, or Markdown reads a blockquote
                lines.append("  " + re.sub(r"^>", r"\\>", pick["comparison"]))
        else:
            lines.append(f"- SLA {pick['sla']}: nothing meets it; the closest is {pick['deployment']} (row "
                         f"{pick['row']}): {_fixed(math.floor(pick['tps_per_user'] * 10 + 1e-9) / 10, 1)} "
                         "tok/s per user")
    lines += [f"- {w}" for w in plan.get("warnings") or []]
    return lines


def _defaults_section(lines: Sequence[str]) -> list[str]:
    """Every parameter the file left out, and where its value comes from (nothing is inherited silently)."""
    if not lines:
        return []
    n, k = len(lines), sum(map(carried_over, lines))
    setup = "carried over from the article's setup (Qwen3.8-2.4T on GB300)"
    if k == 0:
        carried = f"none is {setup}."
    else:
        who = "it is" if n == 1 else "all are" if k == n else f"{k} of them {'is' if k == 1 else 'are'}"
        carried = (f"{who} {setup} and hold{'s' if k == 1 else ''} for your cluster only if you confirm "
                   f"{'it' if k == 1 else 'them'}.")
    it = "it" if n == 1 else "them"
    out = ["## Values your parameters file did not give", "",
           f"{n} parameter{'s are' if n != 1 else ' is'} not in the file; {carried} Give {it} in the file to "
           f"replace {it}.", ""]
    return out + [f"- `{default_name(line)}` = {line.split(' = ', 1)[1]}" for line in lines] + [""]


def summary_record(numbers: KeyNumbers, params: Parameters, chapters: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """``summary.json``'s content: the key numbers, the parameters file and how each chapter went (``chapters``:
    one plain record per chapter, :meth:`pdtune.workbook.chapter.ChapterResult.to_dict`)."""
    summary = numbers.to_dict()
    summary["title"] = params.scenario.title or default_title(params.scenario)
    summary["parameters_file"] = str(params.source)
    summary["parameters"] = params.scenario.to_dict()
    summary["generated_by"] = f"pdtune {__version__} workbook"
    summary["chapters"] = [dict(c) for c in chapters]
    summary["status"] = "ok" if all(c["status"] == "ok" for c in chapters) else "failed"
    return summary


def write_summary(folder: Path, summary: dict[str, Any]) -> None:
    """``summary.json`` and ``summary.md`` into ``folder``."""
    text = json.dumps(summary, indent=2, ensure_ascii=False) + "\n"
    write_text(folder / SUMMARY_JSON, text)
    write_text(folder / SUMMARY_MD,
               to_markdown(summary, summary["chapters"], link=lambda c: f"[{c}]({c})"))
