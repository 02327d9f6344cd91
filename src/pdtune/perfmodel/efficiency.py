"""The few global factors that turn a roofline into a prediction.

A roofline says what the hardware could do; a served model gets a fraction of it. The model keeps that
fraction in a few named numbers that apply to every topology, every GPU and every model alike, so that the
differences between topologies come from the physics (work per GPU, bytes per GPU, communication, KV room,
pipeline bubbles) and never from a factor chosen per topology:

============================  ================================================================================
``compute``                   achieved fraction of the dense tensor-core peak in matmuls and attention
``expert_compute``            the same for the routed experts' grouped GEMMs (small per-expert batches, routing
                              and permutes); unset, it is ``compute``
``expert_hbm``                the same for streaming the routed experts' weights (many small, scattered
                              matrices); unset, it is ``hbm``
``hbm``                       achieved fraction of HBM bandwidth when streaming weights, KV cache and states
``link``                      achieved fraction of NVLink (or NIC) bandwidth in collectives
``collective_latency_s``      fixed cost of one collective call (launch, synchronisation, NVLink round trip)
``step_overhead_s``           fixed cost of one engine step outside the GPU kernels: scheduling, input
                              preparation, sampling, the gaps between kernel launches
``layer_overhead_s``          fixed cost of one decoder layer in one step: the floor of its small kernels
                              (norms, rotary, activation, routing) that no roofline term sees
``request_overhead_s``        fixed cost a request pays before its first token outside the engine steps:
                              the HTTP front end, tokenisation, detokenisation and streaming (TTFT only)
``arrival_clustering``        aggregated serving: the fraction of the other clients whose next prompts reach
                              the scheduler together with a request's (0: every prompt alone; 1: the closed
                              loop's cohorts never disperse); see :mod:`pdtune.perfmodel.aggregated`
``expert_compute_<kernel>``,  the routed experts' fractions for one kernel family (:data:`EXPERT_KERNELS`:
``expert_hbm_<kernel>``       ``bf16``, ``fp8``, ``fp4`` native FP4, ``w4a16`` 4-bit weights dequantized to
                              BF16): a grouped GEMM's efficiency is the kernel's, a property of the GPU and the
                              weight format, not of the model; unset, ``expert_compute`` / ``expert_hbm``
``attention_hbm``             achieved fraction of HBM bandwidth reading the KV cache in attention (paged,
                              per-sequence blocks); unset, ``hbm``
``expert_overhead_s``         the extra fixed cost of a MoE layer in one step per routed expert the GPU holds:
                              routing, top-k, the token sort by expert and the grouped GEMMs' per-expert work
                              all grow with the experts, beyond ``layer_overhead_s``
``seq_overhead_s``            fixed cost per sequence in one step: the scheduler's and the input preparation's
                              per-request work, sampling and output processing (not sharded by TP)
``eager_layer_overhead_s``    the extra cost per layer of a step that runs outside CUDA graphs (more tokens
                              than the largest capture size, a prompt chunk): kernels launched one by one
``front_end_cv``              simulated serving (:mod:`pdtune.perfmodel.simulated`): the coefficient of
                              variation of the front end's time per request (``request_overhead_s`` is its
                              mean; each request draws a gamma of that mean and spread), which scatters the
                              prompts of a closed loop's cohorts (what ``arrival_clustering`` stands for in the
                              steady-state model)
============================  ================================================================================

How the defaults were chosen is written down in ``data/clusters/gb300-qwen3.8-modeled/README.md``: a grid
search within physically plausible ranges, against the article's two headline numbers and its
qualitative findings (the step overhead searched again, alone, when the step cost began charging the busiest
expert-parallel GPU: 3.5 ms became 1.8 ms); then held fixed for every other prediction (including the InferenceX check, which they
were not tuned on). The MTP draft acceptance rate, :data:`DEFAULT_ACCEPTANCE`, was chosen the same way. The
two later factors, ``layer_overhead_s`` and ``request_overhead_s``, are 0 in those defaults (the article's
tuning predates them); :mod:`pdtune.perfmodel.defaults` holds the defaults fitted on public vLLM measurements
and says which GPU uses which.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from pdtune.errors import InputError


@dataclass(frozen=True)
class Efficiency:
    compute: float = 0.38
    hbm: float = 0.62
    link: float = 0.9
    collective_latency_s: float = 4e-6
    step_overhead_s: float = 1.8e-3
    layer_overhead_s: float = 0.0
    request_overhead_s: float = 0.0
    arrival_clustering: float = 0.0
    expert_compute: float | None = None
    expert_hbm: float | None = None
    attention_hbm: float | None = None
    expert_overhead_s: float = 0.0
    seq_overhead_s: float = 0.0
    eager_layer_overhead_s: float = 0.0
    front_end_cv: float = 0.0
    expert_compute_bf16: float | None = None
    expert_hbm_bf16: float | None = None
    expert_compute_fp8: float | None = None
    expert_hbm_fp8: float | None = None
    expert_compute_fp4: float | None = None
    expert_hbm_fp4: float | None = None
    expert_compute_w4a16: float | None = None
    expert_hbm_w4a16: float | None = None

    def __post_init__(self) -> None:
        for name in OPTIONAL_FRACTIONS:
            e = getattr(self, name)
            if e is not None and not (isinstance(e, (int, float)) and math.isfinite(e) and 0 < e <= 1):
                raise InputError("efficiency", name, f"must be a fraction in (0, 1], got {e!r}")
        value = self.arrival_clustering
        if not (isinstance(value, (int, float)) and math.isfinite(value) and 0 <= value <= 1):
            raise InputError("efficiency", "arrival_clustering", f"must be a fraction in [0, 1], got {value!r}")
        for name in ("compute", "hbm", "link"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and 0 < value <= 1):
                raise InputError("efficiency", name, f"must be a fraction in (0, 1], got {value!r}")
        for name in TIME_FACTORS:
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise InputError("efficiency", name, f"must be a time >= 0 s, got {value!r}")
        value = self.front_end_cv
        if not (isinstance(value, (int, float)) and math.isfinite(value) and 0 <= value <= MAX_FRONT_END_CV):
            raise InputError("efficiency", "front_end_cv", f"must be in [0, {MAX_FRONT_END_CV:g}], got {value!r}")

    @property
    def experts(self) -> float:
        """The achieved fraction of peak in the routed experts' matmuls."""
        return self.compute if self.expert_compute is None else self.expert_compute

    @property
    def experts_hbm(self) -> float:
        """The achieved fraction of HBM bandwidth streaming the routed experts' weights."""
        return self.hbm if self.expert_hbm is None else self.expert_hbm

    def expert_fractions(self, kernel: str) -> tuple[float, float]:
        """(compute, HBM) fractions of the routed experts' grouped GEMMs in ``kernel``'s family."""
        compute = getattr(self, f"expert_compute_{kernel}", None) if kernel else None
        hbm = getattr(self, f"expert_hbm_{kernel}", None) if kernel else None
        return (self.experts if compute is None else compute, self.experts_hbm if hbm is None else hbm)

    def fractions(self, kind: str, kernel: str = "") -> tuple[float, float]:
        """(compute, HBM) fractions of one kind of work (:data:`pdtune.perfmodel.engine.KINDS`)."""
        if kind == "experts":
            return self.expert_fractions(kernel)
        if kind == "attention":
            return self.compute, self.hbm if self.attention_hbm is None else self.attention_hbm
        return self.compute, self.hbm

    def to_dict(self) -> dict[str, float]:
        out = asdict(self)
        for name in OPTIONAL_FRACTIONS:
            if out[name] is None:
                del out[name]  # unset: falls back (expert_* to compute / hbm, attention_hbm to hbm)
        for name in (*OPTIONAL_TIMES, "front_end_cv"):
            if out[name] == 0.0:
                del out[name]  # unset: no such cost (files written before these factors read back the same)
        return out


#: The routed experts' kernel families (:func:`pdtune.precision.expert_kernel`).
EXPERT_KERNELS = ("bf16", "fp8", "fp4", "w4a16")

#: The factors that are fractions of a peak, and those that are times.
FRACTION_FACTORS = ("compute", "hbm", "link")
KERNEL_FACTORS = tuple(f"expert_{side}_{k}" for k in EXPERT_KERNELS for side in ("compute", "hbm"))
OPTIONAL_FRACTIONS = ("expert_compute", "expert_hbm", "attention_hbm", *KERNEL_FACTORS)
TIME_FACTORS = ("collective_latency_s", "step_overhead_s", "layer_overhead_s", "request_overhead_s",
                "expert_overhead_s", "seq_overhead_s", "eager_layer_overhead_s")
OPTIONAL_TIMES = TIME_FACTORS[4:]
FACTORS = (*FRACTION_FACTORS, "expert_compute", "expert_hbm", *TIME_FACTORS[:4], "arrival_clustering",
           "attention_hbm", *TIME_FACTORS[4:], "front_end_cv", *KERNEL_FACTORS)
#: The largest front-end spread a factor set may give (a coefficient of variation; 1 is an exponential).
MAX_FRONT_END_CV = 4.0


#: The calibration every bundled prediction uses.
DEFAULT_EFFICIENCY = Efficiency()

#: vLLM's draft acceptance rate (accepted / proposed draft tokens) the bundled predictions assume for MTP:
#: a step with K draft tokens keeps ``1 + K * A`` tokens on average. Not published by the article; see the
#: dataset README for why 0.25.
DEFAULT_ACCEPTANCE = 0.25

#: The roofline: everything at peak, nothing in between. Predictions never exceed what this gives.
ROOFLINE = Efficiency(compute=1.0, hbm=1.0, link=1.0, collective_latency_s=0.0, step_overhead_s=0.0)
