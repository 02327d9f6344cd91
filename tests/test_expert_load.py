"""pdtune.perfmodel.expert_load: the experts the busiest expert-parallel rank reads (modeled, no routing trace).

vLLM splits ``E`` experts over ``G`` EP ranks as ``E // G`` whole experts each (``determine_expert_map`` in
``vllm/model_executor/layers/fused_moe/layer.py``, 0.33.0); the MoE layer's all-to-all (``FusedMoE.forward`` and its
dispatch/combine) returns only when every rank's experts ran, so the step pays the busiest rank's reads.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdtune.perfmodel.expert_load import busiest_rank, touch_probability, touched


def _max_by_hand(experts: int, k: int, tokens: int, ranks: int) -> float:
    """E[max of G iid Binomial(m, p)] = sum_{j<m} (1 - F(j)^G), F summed term by term with math.comb."""
    m = experts // ranks
    p = 1 - (1 - k / experts) ** tokens
    total, cdf = 0.0, 0.0
    for j in range(m):
        cdf += math.comb(m, j) * p**j * (1 - p) ** (m - j)
        total += 1 - cdf**ranks
    return total


def test_kimi_tep4_at_four_tokens_by_hand() -> None:
    # Kimi-K2.5: E = 384, k = 8; TEP4 holds m = 96 experts per GPU. Four decode tokens touch a given expert with
    # p = 1 - (1 - 8/384)^4 = 0.08077, so each GPU reads 96 p = 7.75 experts on average, but the busiest of four
    # reads 10.56: 36 % more expert bytes than the mean charges.
    p = 1 - (1 - 8 / 384) ** 4
    assert touch_probability(384, 8, 4) == pytest.approx(p)
    assert p == pytest.approx(0.08077, abs=1e-5)
    assert touched(384, 8, 4) / 4 == pytest.approx(7.7535, abs=1e-4)
    assert busiest_rank(384, 8, 4, 4) == pytest.approx(_max_by_hand(384, 8, 4, 4), rel=1e-9)
    assert busiest_rank(384, 8, 4, 4) == pytest.approx(10.559, abs=1e-3)
    # 64 tokens: 71.05 on average, 75.42 on the busiest GPU (+6 %): the gap closes as most experts are touched.
    assert busiest_rank(384, 8, 64, 4) == pytest.approx(75.418, abs=1e-3)


def test_one_rank_reads_the_mean() -> None:
    assert busiest_rank(256, 8, 17, 1) == touched(256, 8, 17)
    assert busiest_rank(256, 8, 0, 8) == 0.0


@settings(max_examples=60, deadline=None)
@given(per_rank=st.integers(1, 64), ranks=st.sampled_from([2, 4, 8, 16]), k=st.integers(1, 16),
       tokens=st.integers(1, 4096))
def test_the_busiest_rank_lies_between_the_mean_and_a_full_rank(per_rank: int, ranks: int, k: int,
                                                               tokens: int) -> None:
    experts = per_rank * ranks
    k = min(k, experts - 1) if experts > 1 else 1
    mean = touched(experts, k, tokens) / ranks
    busiest = busiest_rank(experts, k, tokens, ranks)
    assert mean - 1e-9 <= busiest <= per_rank + 1e-9
    assert busiest <= busiest_rank(experts, k, tokens + 1, ranks) + 1e-9  # more tokens never read fewer experts
    assert busiest == pytest.approx(_max_by_hand(experts, k, tokens, ranks), rel=1e-7, abs=1e-9)


def test_the_binomial_cdf_is_summed_without_underflow() -> None:
    # F(j) of Binomial(m, p) by hand (math.comb) where the terms are representable, and the edges: a rank of one
    # expert (F(0) = 1 - p), none (an empty sum), and m p large, where (1 - p)^m alone underflows.
    from pdtune.perfmodel.expert_load import binomial_cdf

    by_hand = [sum(math.comb(40, i) * 0.3**i * 0.7 ** (40 - i) for i in range(j + 1)) for j in range(40)]
    assert binomial_cdf(40, 0.3).tolist() == pytest.approx(by_hand, rel=1e-12)
    assert binomial_cdf(1, 0.25).tolist() == pytest.approx([0.75])
    assert binomial_cdf(0, 0.5).size == 0
    tail = binomial_cdf(2000, 0.999)  # P(X <= 1990) = P(at least 10 misses of mean 2): about 4.6e-5
    assert tail[0] == 0.0 and 0 < tail[1990] < 1e-3 and tail[-1] == pytest.approx(1 - 0.999**2000, rel=1e-9)
