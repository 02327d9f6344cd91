"""pdtune.sim makes the same scheduling decisions as vLLM 0.33's own Scheduler at every recorded call.

The traces in data/vllm/scheduler-traces/ were recorded by scripts/scheduler_traces.py (``make scheduler-traces``)
from vLLM 0.33.0 on a CPU; pdtune.sim.replay.replay runs the same loop through pdtune.sim.scheduler.Scheduler and
compares, at every schedule() and update_from_output(): tokens per request, draft tokens, preempted and sampling
requests, free blocks, every request's blocks per group, the running and waiting queues, finished requests.
"""

from __future__ import annotations

import pytest

from pdtune.model import load_model
from pdtune.sim.kvcache import KVLayout
from pdtune.sim.replay import layout_of, load, replay, traces_dir
from pdtune.state import plan_state

TRACES = sorted(traces_dir().glob("*.json"))


def test_every_workload_of_the_issue_is_recorded() -> None:
    names = {p.stem for p in TRACES}
    # chunked prefill, KV-limited admission, preemption, max_num_seqs, async scheduling, speculative tokens,
    # a hybrid model's groups (sliding window and GatedDeltaNet), long_prefill_token_threshold
    for needed in ("chunked-prefill", "kv-admission", "preemption", "max-num-seqs", "async-arrivals",
                   "spec-ngram", "spec-eagle3", "sliding-window", "gdn-hybrid", "long-prefill-threshold"):
        assert needed in names
    for path in TRACES:
        trace = load(path)
        assert trace["vllm"] == "0.33.0"


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.stem)
def test_replay_matches_vllm_at_every_call(path) -> None:  # type: ignore[no-untyped-def]
    trace = load(path)
    result = replay(trace)
    assert result.same, "\n".join(result.differences)
    assert result.schedule_calls == sum(1 for e in trace["events"] if e["op"] == "schedule")
    assert result.update_calls == sum(1 for e in trace["events"] if e["op"] == "update")


def test_the_traces_preempt_and_the_replay_counts_them() -> None:
    """Preemption traces do preempt (else they would test nothing), and pdtune counts the same preemptions."""
    for name in ("preemption", "preemption-async", "preemption-nocache", "gdn-hybrid-preemption",
                 "spec-eagle3-preemption", "sliding-window-preemption"):
        trace = load(traces_dir() / f"{name}.json")
        vllm = sum(len(e["preempted"]) for e in trace["events"] if e["op"] == "schedule")
        assert vllm > 0, name
        assert replay(trace).preemptions == vllm


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.stem)
def test_trace_groups_are_pdtunes_plan(path) -> None:  # type: ignore[no-untyped-def]
    """The KV cache groups vLLM's get_kv_cache_groups made for each trace are the ones pdtune.state.plan_state
    computes for the same model, TP and settings (block sizes, windows, sliding-window admission caps:
    SlidingWindowSpec.max_admission_blocks_per_request = cdiv(min(W - 1 + in_flight, L), block) + 1, with
    in_flight two batches of max_num_batched_tokens under async scheduling)."""
    trace = load(path)
    c = trace["config"]
    spec = load_model(c["model"])
    plan = plan_state(spec, max_model_len=c["max_model_len"], tp=c["tp"], kv_cache_dtype="auto", vllm="0.33",
                      prefix_caching=c["enable_prefix_caching"] and not spec.is_hybrid,
                      max_num_batched_tokens=c["max_num_batched_tokens"], async_scheduling=c["async_scheduling"])
    assert KVLayout.from_plan(plan, c["num_blocks"]) == layout_of(trace)
