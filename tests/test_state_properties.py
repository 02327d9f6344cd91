"""Invariants of the state planner over random hybrid models, TP sizes and vLLM lines."""

from __future__ import annotations

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from pdtune.model import spec_from_config
from pdtune.state import plan_state
from pdtune.units import cdiv

VERSIONS = st.sampled_from(["0.11", "0.20", "0.21", "0.26", "0.28", "0.32", "0.33"])


@st.composite
def gdn_models(draw: st.DrawFn) -> dict[str, object]:
    nk = draw(st.sampled_from([2, 4, 8, 16]))
    return {
        "model_type": "qwen3_next",
        "hidden_size": 1024,
        "vocab_size": 1000,
        "num_hidden_layers": draw(st.sampled_from([8, 12, 16, 24, 48])),
        "full_attention_interval": draw(st.sampled_from([2, 3, 4])),
        "num_attention_heads": draw(st.sampled_from([8, 16, 32])),
        "num_key_value_heads": draw(st.sampled_from([1, 2, 4, 8])),
        "head_dim": draw(st.sampled_from([64, 128, 256])),
        "linear_num_key_heads": nk,
        "linear_num_value_heads": nk * draw(st.sampled_from([1, 2, 4, 8])),
        "linear_key_head_dim": draw(st.sampled_from([64, 128])),
        "linear_value_head_dim": draw(st.sampled_from([64, 128])),
        "linear_conv_kernel_dim": 4,
        "num_experts": 0,
        "intermediate_size": 2048,
    }


@settings(max_examples=200, deadline=None)
@given(
    gdn_models(),
    st.sampled_from([1, 2, 4, 8]),
    VERSIONS,
    st.integers(1, 200_000),
    st.integers(0, 4),
    st.booleans(),
    st.sampled_from(["auto", "fp8"]),
)
def test_hybrid_plan_invariants(cfg: dict[str, object], tp: int, vllm: str, max_len: int, spec: int,
                                prefix: bool, kv_dtype: str) -> None:
    assume(int(cfg["num_attention_heads"]) % tp == 0)  # type: ignore[call-overload]
    assume(int(cfg["linear_num_key_heads"]) % tp == 0)  # type: ignore[call-overload]
    kv = int(cfg["num_key_value_heads"])  # type: ignore[call-overload]
    assume(kv % tp == 0 or tp % kv == 0)
    assume(int(cfg["num_attention_heads"]) % kv == 0)  # type: ignore[call-overload]
    model = spec_from_config(cfg)
    plan = plan_state(model, max_model_len=max_len, tp=tp, vllm=vllm, num_speculative_tokens=spec,
                      prefix_caching=prefix, kv_cache_dtype=kv_dtype)
    att, rec = plan.attention_page, plan.recurrent_page
    assert att is not None and rec is not None
    # One attention page covers the recurrent state, and the padding is less than one alignment step.
    assert att.page_size_bytes == rec.page_size_bytes == plan.block_bytes >= rec.state_bytes
    step = 16 if vllm == "0.11" else 64
    assert rec.page_size_bytes - rec.state_bytes < step * att.bytes_per_token
    assert plan.block_tokens % 16 == 0
    if vllm == "0.11":
        assert plan.block_tokens == 16 * cdiv(rec.state_bytes, 16 * att.bytes_per_token)
    # Every group has the same size; a request takes at least one block from each.
    assert len({len(g.layers) for g in plan.groups}) == 1
    assert all(g.blocks_per_request >= 1 for g in plan.groups)
    assert plan.bytes_per_request == plan.blocks_per_request * plan.block_bytes
    # Every real layer sits in exactly one group.
    members = [layer for g in plan.groups for layer in g.layers if layer is not None]
    assert sorted(members) == list(range(model.num_layers + plan.draft_layers))


@settings(max_examples=100, deadline=None)
@given(gdn_models(), st.integers(0, 2**40), st.integers(0, 2**40), VERSIONS)
def test_capacity_is_monotone_and_fits(cfg: dict[str, object], a: int, b: int, vllm: str) -> None:
    plan = plan_state(spec_from_config(cfg), max_model_len=4096, vllm=vllm, kv_cache_dtype="fp8")
    small, large = plan.capacity(min(a, b)), plan.capacity(max(a, b))
    assert small.num_blocks <= large.num_blocks
    assert small.max_concurrency <= large.max_concurrency
    assert small.kv_cache_tokens <= large.kv_cache_tokens
    assert large.num_blocks * plan.pool_block_bytes <= max(a, b)
    # vLLM's block-granular count never exceeds the article's bytes-only division
    assert large.max_concurrency <= large.requests_by_bytes + 1e-9
