"""A step-level simulator of vLLM v1's scheduler, driven by pdtune's per-step cost model.

Where the steady-state model (:mod:`pdtune.perfmodel.aggregated`) averages, the simulator runs the benchmark:
clients send requests (:mod:`~pdtune.sim.workload`), vLLM 0.33's scheduler decides every step
(:mod:`~pdtune.sim.scheduler`, with its KV cache blocks in :mod:`~pdtune.sim.kvcache`), each step takes the cost
model's time (:mod:`~pdtune.sim.stepcost`), the engine loop keeps async scheduling's batches in flight
(:mod:`~pdtune.sim.engine`), DP ranks sit behind vLLM's load balancer (:mod:`~pdtune.sim.router`), a
disaggregated deployment moves each prompt's KV from a prefill pool to a decode pool (:mod:`~pdtune.sim.disagg`),
and the run reports per-request TTFT, TPOT, ITL, E2E and their tails (:mod:`~pdtune.sim.results`). The
scheduler's decisions are checked step by step against vLLM 0.33's own ``Scheduler``
(``data/vllm/scheduler-traces/``, ``tests/test_sim_traces.py``). Every number it produces is **modeled**.

    from pdtune.sim import simulate, closed_loop
    result = simulate(engine, closed_loop(64, 1024, 128, num_prompts=640), efficiency=eff)
    result.stats()["ttft_ms_p90"], result.to_row()

The entry points: :func:`simulate` (one aggregated server, its DP ranks behind vLLM's load balancer),
:func:`simulate_disagg` (``x`` prefill engines, ``y`` decode engines), :func:`simulate_sweep` (a concurrency sweep
sharing one step-cost cache). A :class:`SimResult` gives ``stats()`` (median, p90, p99 of TTFT, TPOT, ITL, E2E;
throughputs per GPU and per user), ``to_row()`` / ``to_frame()`` (pdtune's tidy schema, ``modeled`` True),
``request_frame()``, ``timeline_frame()`` and ``cost``, the :class:`StepCost` to pass back (``cost=`` keeps the
cached step terms; other factors re-time them), which keeps a calibration's trial factor sets fast.
"""

from pdtune.sim.engine import EngineCore, SpecDecode, Timeline
from pdtune.sim.kvcache import BlockPool, GroupLayout, KVCacheManager, KVLayout
from pdtune.sim.request import SimRequest, Status
from pdtune.sim.results import REQUEST_COLUMNS, RequestRecord, SimResult
from pdtune.sim.disagg import simulate_disagg
from pdtune.sim.run import SimConfig, setup_engine, simulate, simulate_sweep
from pdtune.sim.scheduler import Scheduler, SchedulerConfig, StepPlan
from pdtune.sim.stepcost import StepCost
from pdtune.sim.workload import (Phase, RequestSpec, Workload, closed_loop, open_loop, read_trace, trace,
                                 vllm_bench_lengths, sa_bench_lengths)

__all__ = [
    "REQUEST_COLUMNS", "BlockPool", "EngineCore", "GroupLayout", "KVCacheManager", "KVLayout", "Phase",
    "RequestRecord", "RequestSpec", "Scheduler", "SchedulerConfig", "SimConfig", "SimRequest", "SimResult",
    "SpecDecode", "Status", "StepCost", "StepPlan", "Timeline", "Workload", "closed_loop", "open_loop",
    "read_trace", "sa_bench_lengths", "setup_engine", "simulate", "simulate_disagg", "simulate_sweep", "trace",
    "vllm_bench_lengths",
]
