"""Roofline predictions of prefill-only, decode-only, aggregated and disaggregated serving on a GPU spec.

Everything this package returns is **modeled**, never measured: throughput per GPU, TTFT and TPOT versus
concurrency for an aggregated prefill-only server (ISL/OSL 8192/2 by default), a decode-only server (1/1000)
and an xPyD disaggregated deployment (8192/1024), from a :class:`~pdtune.model.ModelSpec`, a
:class:`~pdtune.gpus.GpuSpec` and a :class:`~pdtune.topology.Topology`. The pieces:

* :mod:`.costs` — what one token costs the model (matmul FLOPs and bytes per layer, attention's pair term,
  GDN's linear term, the MTP module);
* :mod:`.engine` — one engine: weights and KV room per GPU, and the time of one step on the slowest stage;
* :mod:`.sweeps` — closed-loop concurrency sweeps and the disaggregated rate balance;
* :mod:`.aggregated` — one vLLM server prefilling and decoding at once (chunked prefill, cohorts, the budget);
* :mod:`.network` — what a collective costs inside one NVLink domain and beyond it (one-shot or two-shot);
* :mod:`.efficiency` — the global efficiency factors and the MTP acceptance rate;
* :mod:`.defaults` — the factors each GPU uses by default, and their source;
* :mod:`.validation` — predicted beside measured for every matching result row, and the error summaries;
* :mod:`.compiled` — a row's prediction compiled once into step terms the factors scale (the fits' unit);
* :mod:`.fit`, :mod:`.calibrate`, :mod:`.heldout` — fitting the factors on measured sweeps, holding out whole
  deployments, leave-one-model-out scores;
* :mod:`.inferencex` — the check against InferenceX's measured GB200 DeepSeek-R1 points;
* :mod:`.simulated` — the scheduler simulation as a latency model: each point run as its benchmark in
  :mod:`pdtune.sim`, the harnesses, the linear form of a run's median request;
* :mod:`.repeats` — a measurement repeated under another id counted once, in fits and in scores;
* :mod:`.launch_flags` — how a measured server was launched (InferenceX's ``vllm serve`` flags per row), laid over
  vLLM's defaults;
* :mod:`.replicates` — distinct runs of one point, each against the median of the others: the data's own spread
  beside the model's error;
* :mod:`.prior` — where the fit of the defaults starts: each factor's published value and its source;
* :mod:`.sensitivity` — which fitted factors the data moves, and which the prior's pull holds;
* :mod:`.expert_load` — the experts a MoE step reads, on average and on the busiest expert-parallel GPU;
* :mod:`.roofline` — the prefill ceiling, experts touched per decode step, the decode roofline sketch.
"""

from pdtune.perfmodel.aggregated import AggPlan, agg_plan, serving_defaults
from pdtune.perfmodel.efficiency import DEFAULT_ACCEPTANCE, DEFAULT_EFFICIENCY, ROOFLINE, Efficiency
from pdtune.perfmodel.costs import ModelCosts, model_costs
from pdtune.perfmodel.engine import Batch, Engine, EngineConfig, StepTime, build_engine
from pdtune.perfmodel.inferencex import inferencex_check
from pdtune.perfmodel.roofline import (
    PrefillCeiling,
    decode_roofline,
    experts_touched,
    prefill_ceiling,
    tokens_to_touch,
)
from pdtune.perfmodel.sweeps import (
    Prediction,
    predict_decode,
    predict_disagg,
    predict_prefill,
    to_frame,
)

__all__ = [
    "AggPlan",
    "agg_plan",
    "serving_defaults",
    "DEFAULT_ACCEPTANCE",
    "DEFAULT_EFFICIENCY",
    "ROOFLINE",
    "Batch",
    "Efficiency",
    "Engine",
    "EngineConfig",
    "ModelCosts",
    "Prediction",
    "PrefillCeiling",
    "StepTime",
    "build_engine",
    "decode_roofline",
    "experts_touched",
    "inferencex_check",
    "model_costs",
    "predict_decode",
    "predict_disagg",
    "predict_prefill",
    "prefill_ceiling",
    "to_frame",
    "tokens_to_touch",
]
