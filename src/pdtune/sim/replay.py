"""Replay a trace of vLLM's own scheduler through :class:`pdtune.sim.scheduler.Scheduler`, call by call.

``scripts/scheduler_traces.py`` drives vLLM 0.33's ``Scheduler`` (on a CPU) the way ``EngineCore`` does and
writes every ``schedule()`` and ``update_from_output()`` call to ``data/vllm/scheduler-traces/<name>.json``.
:func:`replay` runs the same loop with pdtune's scheduler, built from the trace's settings and KV cache groups,
adds each request at the tick vLLM saw it, feeds each update the tokens vLLM's mock model runner produced, and
compares, at every call: the tokens scheduled per request, the draft tokens, the requests preempted, the
requests that sample, the free blocks, every request's blocks per group, the order of the running and waiting
queues, and the requests that finished. ``python -m pdtune.sim.replay [FOLDER]`` prints the comparison.
"""

from __future__ import annotations

import sys
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pdtune.errors import InputError
from pdtune.paths import data_dir
from pdtune.sim.kvcache import FULL, RECURRENT, SLIDING, GroupLayout, KVLayout
from pdtune.sim.request import SimRequest
from pdtune.sim.scheduler import Scheduler, SchedulerConfig

FORMAT = "pdtune-scheduler-trace/1"
_SPECS = {"FullAttentionSpec": FULL, "SlidingWindowSpec": SLIDING, "MambaSpec": RECURRENT}


def traces_dir() -> Path:
    return data_dir() / "vllm" / "scheduler-traces"


def layout_of(trace: dict[str, Any]) -> KVLayout:
    """The trace's KV cache groups as a :class:`KVLayout`."""
    cfg = trace["config"]
    groups = []
    for g in cfg["groups"]:
        kind = _SPECS.get(g["spec"])
        if kind is None:
            raise InputError(trace.get("workload", "trace"), "groups", f"unknown spec {g['spec']!r}")
        groups.append(GroupLayout(kind, g["block_size"], sliding_window=g.get("sliding_window"),
                                  spec_blocks=g.get("spec_blocks", 0), admission_cap=g.get("admission_cap")))
    return KVLayout(tuple(groups), cfg["num_blocks"])


def config_of(trace: dict[str, Any]) -> SchedulerConfig:
    c = trace["config"]
    return SchedulerConfig(
        max_num_seqs=c["max_num_seqs"], max_num_batched_tokens=c["max_num_batched_tokens"],
        max_model_len=c["max_model_len"], long_prefill_token_threshold=c.get("long_prefill_token_threshold", 0),
        async_scheduling=c["async_scheduling"], enable_prefix_caching=c["enable_prefix_caching"],
        scheduler_reserve_full_isl=c["scheduler_reserve_full_isl"], watermark=c["watermark"],
        num_spec_tokens=c["num_spec_tokens"], num_lookahead_tokens=c["num_lookahead_tokens"],
        num_prefill_lookahead=c["num_prefill_lookahead_tokens"], draft_slots=c["draft_slots"],
        use_v2_model_runner=c["use_v2_model_runner"], hash_lookahead=c["num_hash_lookahead_tokens"] > 0,
        max_num_scheduled_tokens=c.get("max_num_scheduled_tokens"),
    )


@dataclass
class Replay:
    """The outcome of one trace: calls compared, the first differences (with what differed)."""

    workload: str
    schedule_calls: int = 0
    update_calls: int = 0
    differences: list[str] = field(default_factory=list)
    preemptions: int = 0
    requests: int = 0

    @property
    def same(self) -> bool:
        return not self.differences


def _snapshot(s: Scheduler) -> dict[str, Any]:
    blocks = {}
    for rid in s.requests:
        counts = list(s.kv.blocks_of(rid))
        if any(counts):
            blocks[rid] = counts
    return {"free": s.kv.num_free_blocks, "blocks": blocks, "running": [r.rid for r in s.running],
            "waiting": [r.rid for r in s.kv_holding_waiting] + [r.rid for r in s.waiting]}


def _compare(kind: str, index: int, ours: dict[str, Any], theirs: dict[str, Any], keys: tuple[str, ...]) -> list[str]:
    out = []
    for key in keys:
        a, b = ours.get(key), theirs.get(key)
        if key in ("preempted", "finished", "sampling"):
            a, b = sorted(a or []), sorted(b or [])
        if a != b:
            out.append(f"event {index} ({kind}, tick {theirs.get('tick')}): {key}: pdtune {_brief(a)} vs vLLM {_brief(b)}")
    return out


def _brief(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 300 else text[:297] + "..."


def replay(trace: dict[str, Any], *, stop_after: int = 5) -> Replay:
    """Run the trace's loop through pdtune's scheduler; stop after ``stop_after`` differences."""
    if trace.get("format") != FORMAT:
        raise InputError(trace.get("workload", "trace"), "format", f"expected {FORMAT!r}")
    result = Replay(trace["workload"], requests=len(trace["requests"]))
    cfg = config_of(trace)
    sched = Scheduler(cfg, layout_of(trace))
    depth = trace["config"]["max_concurrent_batches"]
    k = cfg.num_spec_tokens
    adds = deque(trace["requests"])
    events = trace["events"]
    queue: deque = deque()
    tick = 0
    i = 0
    while i < len(events):
        while adds and adds[0]["tick"] <= tick:
            a = adds.popleft()
            sched.add_request(SimRequest(a["rid"], a["prompt"], a["max_tokens"], prefix_id=a.get("prefix"),
                                         prefix_len=a.get("prefix_len", 0)))
        expected = events[i]
        if sched.has_requests() and len(queue) < depth:
            if expected["op"] != "schedule" or expected["tick"] != tick:
                result.differences.append(f"event {i}: pdtune schedules at tick {tick}, vLLM {expected['op']}s at "
                                          f"tick {expected['tick']}")
                break
            plan = sched.schedule()
            result.schedule_calls += 1
            ours = {"scheduled": dict(plan.num_scheduled_tokens), "spec": dict(plan.spec_tokens),
                    "preempted": plan.preempted, "sampling": plan.sampling, **_snapshot(sched)}
            result.differences += _compare("schedule", i, ours, expected,
                                           ("scheduled", "spec", "preempted", "sampling", "free", "blocks",
                                            "running", "waiting"))
            i += 1
            queue.appendleft(plan)
            if len(queue) < depth and (plan.total_tokens > 0 or sched.has_requests()):
                tick += 1
                if len(result.differences) >= stop_after:
                    break
                continue
        elif not queue:
            if not adds:
                break
            tick = max(tick + 1, adds[0]["tick"])
            continue
        if len(result.differences) >= stop_after or i >= len(events):
            break
        expected = events[i]
        if expected["op"] != "update":
            result.differences.append(f"event {i}: pdtune updates at tick {tick}, vLLM {expected['op']}s at "
                                      f"tick {expected['tick']}")
            break
        plan = queue.pop()
        finished = sched.update_from_output(plan, expected["generated"])
        result.update_calls += 1
        ours = {"finished": [r.rid for r in finished], **_snapshot(sched)}
        result.differences += _compare("update", i, ours, expected, ("finished", "free", "blocks", "running",
                                                                      "waiting"))
        if k and not cfg.async_scheduling and plan.total_tokens > 0:
            sched.update_draft_token_ids({rid: k for rid in plan.num_scheduled_tokens})
        i += 1
        tick += 1
        if len(result.differences) >= stop_after:
            break
    if not result.differences and i < len(events):
        result.differences.append(f"pdtune's loop ended after event {i} of {len(events)}")
    result.preemptions = sched.num_preemptions
    return result


def load(path: Path) -> dict[str, Any]:
    from pdtune.guarded import bundled, read_json

    with bundled():
        data = read_json(path)
    if not isinstance(data, dict):
        raise InputError(path, "trace", "expected a JSON object")
    return data


def replay_all(folder: Path | None = None) -> list[Replay]:
    folder = folder or traces_dir()
    return [replay(load(p)) for p in sorted(folder.glob("*.json"))]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    folder = Path(args[0]) if args else traces_dir()
    total = 0
    bad = 0
    for r in replay_all(folder):
        total += r.schedule_calls
        bad += len(r.differences)
        status = "same" if r.same else f"{len(r.differences)} difference(s)"
        print(f"{r.workload:24s} {r.schedule_calls:5d} schedule + {r.update_calls:5d} update calls, "
              f"{r.requests:3d} requests, {r.preemptions:3d} preemptions: {status}")
        for d in r.differences:
            print(f"    {d}")
    print(f"{total} schedule calls compared, {bad} differences")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
