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
============================  ================================================================================

How the defaults were chosen is written down in ``data/clusters/gb300-qwen3.8-modeled/README.md``: a grid
search within physically plausible ranges, once, against the article's two headline numbers and its
qualitative findings; then held fixed for every other prediction (including the InferenceX check, which they
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
    step_overhead_s: float = 3.5e-3
    layer_overhead_s: float = 0.0
    request_overhead_s: float = 0.0
    arrival_clustering: float = 0.0
    expert_compute: float | None = None
    expert_hbm: float | None = None

    def __post_init__(self) -> None:
        for name in ("expert_compute", "expert_hbm"):
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

    @property
    def experts(self) -> float:
        """The achieved fraction of peak in the routed experts' matmuls."""
        return self.compute if self.expert_compute is None else self.expert_compute

    @property
    def experts_hbm(self) -> float:
        """The achieved fraction of HBM bandwidth streaming the routed experts' weights."""
        return self.hbm if self.expert_hbm is None else self.expert_hbm

    def to_dict(self) -> dict[str, float]:
        out = asdict(self)
        for name in ("expert_compute", "expert_hbm"):
            if out[name] is None:
                del out[name]  # unset: the same as compute / hbm
        return out


#: The factors that are fractions of a peak, and those that are times.
FRACTION_FACTORS = ("compute", "hbm", "link")
TIME_FACTORS = ("collective_latency_s", "step_overhead_s", "layer_overhead_s", "request_overhead_s")
FACTORS = (*FRACTION_FACTORS, "expert_compute", "expert_hbm", *TIME_FACTORS, "arrival_clustering")


#: The calibration every bundled prediction uses.
DEFAULT_EFFICIENCY = Efficiency()

#: vLLM's draft acceptance rate (accepted / proposed draft tokens) the bundled predictions assume for MTP:
#: a step with K draft tokens keeps ``1 + K * A`` tokens on average. Not published by the article; see the
#: dataset README for why 0.25.
DEFAULT_ACCEPTANCE = 0.25

#: The roofline: everything at peak, nothing in between. Predictions never exceed what this gives.
ROOFLINE = Efficiency(compute=1.0, hbm=1.0, link=1.0, collective_latency_s=0.0, step_overhead_s=0.0)
