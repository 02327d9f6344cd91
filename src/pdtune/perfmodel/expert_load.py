"""Routed experts one MoE layer reads in a step: on average, and on the busiest expert-parallel rank.

Each token picks ``k`` of ``E`` experts; taken as uniform and independent per token, one expert is touched by a
step of ``T`` tokens with probability ``p = 1 - (1 - k/E)^T``, so the layer reads ``E p`` experts on average
(:func:`touched`). Under expert parallelism the ``E`` experts are split over ``G`` ranks of ``m = E / G`` whole
experts each (vLLM's ``determine_expert_map`` in ``model_executor/layers/fused_moe/layer.py``; pdtune refuses an
``E`` that ``G`` does not divide). Each rank reads its own touched experts, ``Binomial(m, p)`` of them, and the
layer's all-to-all waits for the slowest rank, so the step pays the **expected maximum** over ``G`` ranks
(:func:`busiest_rank`):

    E[max] = sum_{j=0}^{m-1} (1 - F(j)^G),   F the Binomial(m, p) CDF

(the tail-sum formula for a non-negative integer variable; the ranks are taken as independent). At few tokens the
maximum is well above the mean ``m p`` (Kimi-K2.5 at TEP4 and 4 tokens: 10.6 experts against 7.75); once most
experts are touched both reach ``m``. Every number here is **modeled**: no routing trace was measured.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np


def touch_probability(num_experts: int, experts_per_token: int, tokens: float) -> float:
    """``1 - (1 - k/E)^T``: the chance a step of ``T`` tokens touches a given expert (0 without experts)."""
    if num_experts <= 0 or tokens <= 0:
        return 0.0
    return -math.expm1(tokens * math.log1p(-experts_per_token / num_experts))


def touched(num_experts: int, experts_per_token: int, tokens: float) -> float:
    """``E (1 - (1 - k/E)^T)``: the experts of one MoE layer a step of ``T`` tokens reads, on average."""
    return num_experts * touch_probability(num_experts, experts_per_token, tokens)


@lru_cache(maxsize=65536)
def busiest_rank(num_experts: int, experts_per_token: int, tokens: float, ranks: int) -> float:
    """Expected experts the busiest of ``ranks`` expert-parallel ranks reads (one rank reads all ``E p``)."""
    p = touch_probability(num_experts, experts_per_token, tokens)
    if ranks <= 1 or p <= 0.0:
        return num_experts * p
    m = num_experts // ranks
    if p >= 1.0:
        return float(m)
    return float(np.sum(1.0 - binomial_cdf(m, p) ** ranks))


def binomial_cdf(m: int, p: float) -> np.ndarray:
    """``F(j)`` of Binomial(m, p) for ``j = 0 .. m-1``, the probabilities summed in log space (no underflow at
    large ``m p``). Written here rather than taken from scipy.stats: importing it costs every ``pdtune`` command
    1.4 s of start-up, and this is all of it pdtune uses."""
    if m < 1:
        return np.zeros(0)  # no expert on a rank: the tail sum is empty
    j = np.arange(1, m, dtype=float)
    log_comb = np.concatenate(([0.0], np.cumsum(np.log(m - j + 1) - np.log(j))))  # log C(m, j), j = 0 .. m-1
    k = np.arange(m, dtype=float)
    log_pmf = log_comb + k * math.log(p) + (m - k) * math.log1p(-p)
    return np.cumsum(np.exp(log_pmf))
