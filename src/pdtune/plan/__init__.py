"""What to deploy on N GPUs for an SLA: aggregated replicas against every xPyD, with KV transfer in TTFT.

The article's workflow, run before anything is measured:

1. **Candidates.** Every engine layout the model admits on each pool's GPU, up to the budget: TP (and DP with
   expert parallelism for MoE models; dense models scale by more engines instead) in powers of two, with and
   without MTP on the decode side when the model has an MTP module. A layout is rejected, with the reason
   kept, when heads or experts do not divide or when weights and one request's KV do not fit the memory
   waterfall (:func:`pdtune.perfmodel.build_engine`). A TP/EP group larger than one NVLink domain (an 8-GPU
   HGX board) stays a candidate, its collectives charged at the scale-out NIC's bandwidth by the performance
   model (:meth:`pdtune.gpus.GpuSpec.link_bandwidth`), and every row built on it says so
   (``network_charged``).
2. **Isolated sweeps.** Each candidate's prefill-only sweep (ISL/2, the article's 8192/2) and decode-only
   sweep at the plan's ISL/OSL, **modeled** by :mod:`pdtune.perfmodel` with each pool's factors (the
   ``--calibration`` file naming its GPU, else the GPU's defaults: :func:`pool_factors`; a draft model and
   DCP size the engines' KV room through :mod:`pdtune.state`), or the user's **measured** sweeps
   (``prefill_results`` / ``decode_results``, any format :func:`pdtune.results.load_results` reads). Decode
   points beyond the engine's KV room at ISL + OSL are dropped (the KV-room check of chapter 7; a decode sweep
   run at a short ISL holds far more requests than the same engine can at the plan's workload). Points and
   sweeps that cannot reach a frontier are pruned (see :func:`_pareto_points`, :func:`prune_sweeps`).
3. **Rate matching within the budget.** Rate matching (:mod:`pdtune.frontier.xpyd`) combines every prefill
   sweep with every decode sweep as ``x`` prefill and ``y`` decode engines, ``x * g_p + y * g_d <= N``. Of the
   ``O(N^2)`` worker counts only those on each pair's TTFT/throughput staircase are built, found in ``O(log N)``
   steps (:mod:`pdtune.plan.staircase`), and the rest counted: memory and time do not grow with the budget
   (2^20 GPUs take seconds), and the table, picks and counts are those of every row.
   A measured decode sweep must hold the plan's mean context (``ISL + OSL / 2``; a sweep at ISL 1 and OSL 1024
   is refused for an 8192/1024 plan: :func:`pdtune.plan.pools.decode_context`).
4. **KV transfer.** Each row's TTFT gains the time to move one request's state from the prefill layout to the
   decode layout over the link between the pools (:mod:`pdtune.transfer`, the rule ``pdtune predict`` and the
   dataset generator charge too, at the lower of the two pools' ``link`` factors): ``kv_transfer_ms`` and its
   share of TTFT are columns of every row. A row whose KV stream would need more than the busiest GPU's link
   is dropped and counted.
5. **The aggregated baseline.** Replicas of one aggregated ``vllm serve`` server of every admissible layout, as
   many as the budget holds, at each concurrency (:mod:`pdtune.plan.aggregated`), in the same table
   (``mode`` agg or disagg).
6. **Evaluation, frontier and picks.** The upper envelope of all rows (:func:`pdtune.frontier.upper_envelope`)
   with its provenance; every row the plan reports and every SLA check passes through one evaluation step
   (:mod:`pdtune.plan.evaluate`; today the steady-state model, ``latency_model: steady-state``, p99 >= p90 >=
   p50). For each SLA the most tokens/s per GPU that meets it, preferring a TTFT within the plan's ceiling
   (:class:`TtftCeiling`, derived from the workload unless given; a pick above it is a warning), with its
   runner-up, the best aggregated and the best disaggregated row, and one sentence saying which mode wins by
   how much (:mod:`pdtune.plan.report`). A TPOT p90 limit is checked against each row's ``tpot_ms_p90``:
   a measured decode sweep's p99 where it has one, else the TPOT times a stated factor (:class:`TpotP90`);
   ``tpot_p90_basis`` says which.

Every modeled number is labelled so (``modeled``, ``prefill_source``, ``decode_source``). GPU counts,
workers and concurrencies are integers: a row's ``concurrency`` is Little's law rounded to whole requests,
what a benchmark's ``--max-concurrency`` would be set to.
"""


from pdtune.plan.files import load_plan
from pdtune.plan.evaluate import LATENCY_MODEL, Evaluator, evaluate_rows, steady_state
from pdtune.plan.inputs import (
    DEFAULT_FLOORS,
    GRID,
    PLAN_FORMAT,
    PLAN_VLLM,
    ROW_COLUMNS,
    PlanSettings,
    Sla,
    TpotP90,
    TtftCeiling,
    sla_list,
    tpot_p90_rule,
    ttft_ceiling,
)
from pdtune.plan.pools import (
    Candidate,
    Factors,
    Rejected,
    candidate_topologies,
    pool_factors,
    spans_nvlink_domain,
)
from pdtune.plan.report import Pick, ceil_to, comparison_sentence, floor_to, picks_sentence
from pdtune.plan.search import Plan, plan

__all__ = [
    "DEFAULT_FLOORS", "GRID", "LATENCY_MODEL", "PLAN_FORMAT", "PLAN_VLLM", "ROW_COLUMNS", "Candidate", "Evaluator",
    "Factors", "Pick", "Plan", "PlanSettings", "Rejected", "Sla", "TpotP90", "TtftCeiling", "candidate_topologies",
    "ceil_to", "comparison_sentence", "evaluate_rows", "floor_to", "load_plan", "picks_sentence", "plan",
    "pool_factors", "sla_list", "spans_nvlink_domain", "steady_state", "tpot_p90_rule", "ttft_ceiling",
]
