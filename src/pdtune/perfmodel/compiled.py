"""A row's prediction compiled once into step terms, so that its TTFT and TPOT are sums the factors scale.

The fits (:mod:`pdtune.perfmodel.fit`) re-evaluate every row at each trial of the efficiency factors; a row's
scheduling (which batches run, how often) does not depend on them, so it is compiled once: the steady-state
model's plan (:func:`pdtune.perfmodel.validation.compile_agg`) or a simulated run's median request
(:func:`pdtune.perfmodel.simulated.linear_form`). Every number here is **modeled**.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pdtune.perfmodel.efficiency import Efficiency
from pdtune.perfmodel.engine import StepTerms


@dataclass(frozen=True)
class CompiledPoint:
    """An aggregated row with its efficiency-independent plan: TTFT and TPOT as weighted step terms."""

    index: Any
    ttft: tuple[tuple[StepTerms, float], ...]
    ttft_overhead: float
    tpot: tuple[tuple[StepTerms, float], ...]
    concurrency: int
    isl: int
    osl: int
    gpus: int

    def times(self, eff: Efficiency) -> tuple[float, float]:
        """(TTFT, TPOT) in seconds."""
        ttft = sum(w * t.seconds(eff) for t, w in self.ttft) + self.ttft_overhead * eff.request_overhead_s
        tpot = sum(w * t.seconds(eff) for t, w in self.tpot)
        return ttft, tpot
