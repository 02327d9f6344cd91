"""Per-request state against the article (vLLM 0.11) and against vLLM's source (0.33), by hand."""

from __future__ import annotations

import pytest

from pdtune.errors import InputError
from pdtune.model import load_model
from pdtune.state import MambaCacheMode, Semantics, plan_state
from pdtune.units import GiB, MiB

ISL, OSL = 8192, 1024
LEN = ISL + OSL  # 9216 tokens; the article's chat-template tokens do not change a block count here


# --- the article (vLLM 0.11 arithmetic) --------------------------------------------------------------


def test_article_per_request_state() -> None:
    plan = plan_state(load_model("qwen3.8-2.4t"), max_model_len=LEN, kv_cache_dtype="fp8", vllm="0.11")
    per_layer = plan.per_layer_bytes()
    # 4 KV heads x 256 x 1 B (fp8) x 2 (K and V)
    assert per_layer["attention_per_token"] == 4 * 256 * 1 * 2 == 2048
    # (128*16*2 + 128*128) channels x (4 - 1) x 2 B
    assert per_layer["conv_per_request"] == (128 * 16 * 2 + 128 * 128) * 3 * 2 == 122_880
    # 128 value heads x 128 x 128 x 2 B
    assert per_layer["ssm_per_request"] == 128 * 128 * 128 * 2 == 4_194_304
    # 4216 KiB / 2 KiB = 2108 tokens, aligned up to 16: 2112 tokens of 2 KiB = 4.125 MiB
    assert plan.block_tokens == 16 * -(-(4_194_304 + 122_880) // (16 * 2048)) == 2112
    assert plan.block_bytes == 2112 * 2048 == 4_325_376
    # 23 attention layers x ceil(9216 / 2112) = 5 blocks, 69 GDN layers x 1 block
    assert plan.blocks_per_request == 23 * 5 + 69 * 1 == 184
    assert plan.bytes_per_request == 184 * 4_325_376 == 795_869_184
    assert plan.bytes_per_request / MiB == 759.0


def test_article_groups_follow_the_smaller_bucket() -> None:
    plan = plan_state(load_model("qwen3.8-2.4t"), max_model_len=LEN, kv_cache_dtype="fp8", vllm="0.11")
    # group size = min(23, 69) = 23: one attention group and three GDN groups of 23 layers each
    assert plan.group_size == 23
    assert sorted((str(g.kind), g.blocks_per_request) for g in plan.groups) == [
        ("full_attention", 5), ("gdn", 1), ("gdn", 1), ("gdn", 1)]
    assert plan.pool_blocks_per_request == 8


def test_article_kv_cache_line_in_0_11() -> None:
    plan = plan_state(load_model("qwen3.8-2.4t"), max_model_len=LEN, kv_cache_dtype="fp8", vllm="0.11")
    cap = plan.capacity(round(83.00 * GiB))
    # 83 GiB // (23 x 4,325,376 B) = 895 blocks; 895 / 8 blocks per request = 111.875
    assert cap.num_blocks == 895
    assert cap.max_concurrency == pytest.approx(111.875)
    # 0.11 logs num_blocks // len(groups) * block_size = 223 * 2112
    assert cap.kv_cache_tokens == 895 // 4 * 2112 == 470_976
    assert round(cap.requests_by_bytes, 1) == 112.0


def test_current_line_reserves_more_with_mtp_and_prefix_caching() -> None:
    m = load_model("qwen3.8-2.4t")
    base = plan_state(m, max_model_len=LEN, kv_cache_dtype="fp8", vllm="0.33")
    assert base.bytes_per_request == 795_869_184  # no MTP, no prefix caching: same as the article
    cached = plan_state(m, max_model_len=LEN, kv_cache_dtype="fp8", vllm="0.33", prefix_caching=True)
    # align mode: 2 running/cached states + 1 FlashInfer prefill checkpoint per GDN group; block aligned
    # to lcm(16, 64): 64 * ceil(4,317,184 / (64 * 2048)) = 64 * 33 = 2112 (unchanged)
    assert cached.mamba_cache_mode is MambaCacheMode.ALIGN
    assert cached.block_tokens == 2112
    assert cached.pool_blocks_per_request == 5 + 3 * 3
    mtp = plan_state(m, max_model_len=LEN, kv_cache_dtype="fp8", vllm="0.33", num_speculative_tokens=3)
    # conv window grows by 3 rows: (3 + 3) * 20480 * 2 B = 245,760; block 16 * ceil(4,440,064 / 32,768) = 2176
    assert mtp.per_layer_bytes()["conv_per_request"] == 245_760
    assert mtp.block_tokens == 2176
    # the MTP layer's attention joins: 24 attention layers set the group size; 69 GDN layers -> 3 groups
    # of 24 (3 padding slots), each keeping 1 + 3 states; attention ceil(9216 / 2176) = 5 blocks
    assert mtp.group_size == 24 and mtp.draft_layers == 1
    assert mtp.pool_blocks_per_request == 5 + 3 * 4
    assert mtp.bytes_per_request == 17 * 24 * 2176 * 2048


# --- current line (0.33) by hand from vLLM's source ----------------------------------------------------
# Qwen3-Next-80B-A3B: 48 layers, 12 full attention (2 KV heads x 256) and 36 GDN (16 key heads, 32 value
# heads, dk = dv = 128, kernel 4), bf16. Per TP rank t:
#   attention bytes/token = 2 * max(1, 2 // t) * 256 * 2          -> 2048 (t=1), 1024 (t>=2)
#   GDN state = conv (kernel-1) * (128*16*2 + 128*32)/t * 2 + SSM (32/t) * 128 * 128 * 2 = 1,097,728 / t
#   block = 16 * ceil(state / (16 * bytes/token))  [FlashInfer kernel block 16, _align_hybrid_block_size]
#   groups: min(12, 36) = 12 -> 1 attention + 3 GDN groups; blocks = ceil(9216 / block) + 3 * 1
#   bytes/request = pool blocks * 12 layers * block * bytes/token
QWEN3_NEXT = {
    # t: (block, page bytes, pool blocks per request, bytes per request)
    1: (544, 544 * 2048, 17 + 3, 20 * 12 * 544 * 2048),  # 1,097,728 / 32,768 = 33.5 -> 34 x 16
    2: (544, 544 * 1024, 17 + 3, 20 * 12 * 544 * 1024),  # 548,864 / 16,384 = 33.5 -> 34 x 16
    4: (272, 272 * 1024, 34 + 3, 37 * 12 * 272 * 1024),  # KV heads replicated: 274,432 / 16,384 -> 17 x 16
    8: (144, 144 * 1024, 64 + 3, 67 * 12 * 144 * 1024),  # 137,216 / 16,384 = 8.4 -> 9 x 16; 9216 / 144 = 64
}
# With prefix caching (0.33 default): align mode aligns to lcm(16, 64) = 64 and keeps 2 + 1 GDN blocks.
QWEN3_NEXT_ALIGN = {
    1: (576, 16 + 9),  # 64 * ceil(1,097,728 / 131,072) = 64 * 9; ceil(9216 / 576) = 16
    2: (576, 16 + 9),
    4: (320, 29 + 9),  # 64 * ceil(274,432 / 65,536) = 64 * 5; ceil(9216 / 320) = 29
    8: (192, 48 + 9),  # 64 * ceil(137,216 / 65,536) = 64 * 3; 9216 / 192 = 48
}


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_qwen3_next_current_line(tp: int) -> None:
    plan = plan_state(load_model("qwen3-next-80b-a3b"), max_model_len=LEN, tp=tp, vllm="0.33")
    block, page, pool_blocks, per_request = QWEN3_NEXT[tp]
    assert (plan.block_tokens, plan.block_bytes) == (block, page)
    assert plan.pool_blocks_per_request == pool_blocks
    assert plan.bytes_per_request == per_request
    align = plan_state(load_model("qwen3-next-80b-a3b"), max_model_len=LEN, tp=tp, vllm="0.33", prefix_caching=True)
    assert (align.block_tokens, align.pool_blocks_per_request) == QWEN3_NEXT_ALIGN[tp]


def test_qwen3_next_capacity_and_logged_tokens() -> None:
    plan = plan_state(load_model("qwen3-next-80b-a3b"), max_model_len=LEN, tp=1, vllm="0.33")
    cap = plan.capacity(40 * GiB)
    # 42,949,672,960 // (12 x 1,114,112) = 3212 blocks; 3212 / 20 = 160.6; int(160.6 * 9216) = 1,480,089
    assert cap.num_blocks == 3212
    assert cap.max_concurrency == pytest.approx(160.6)
    assert cap.kv_cache_tokens == 1_480_089


# Nemotron-Nano-9B-v2: 27 Mamba2 + 4 attention (8 KV heads x 128) + 25 MLP layers, bf16, SSM cache float32
# (NemotronHForCausalLMConfig's default). Mamba2: 128 heads x 80, 8 groups, state 128, kernel 4:
#   conv = 3 * (10240 + 2*8*128)/t * 2 = 73,728 / t;  SSM = (128/t) * 80 * 128 * 4 = 5,242,880 / t
#   attention bytes/token = 2 * (8/t) * 128 * 2 = 4096 / t; the ratio is the same for every t:
#   block = 16 * ceil(5,316,608 / 65,536) = 16 * 82 = 1312; page = 1312 * 4096 / t
#   groups: min(4, 27) = 4 -> 7 Mamba groups (28 slots, 1 padding) + 1 attention group
#   blocks = ceil(9216 / 1312) = 8 + 7 * 1 = 15; bytes/request = 15 * 4 * page
@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_nemotron_nano_current_line(tp: int) -> None:
    plan = plan_state(load_model("nemotron-nano-9b-v2"), max_model_len=LEN, tp=tp, vllm="0.33")
    assert plan.recurrent_page is not None
    assert plan.recurrent_page.state_bytes == 5_316_608 // tp
    assert plan.block_tokens == 1312
    assert plan.block_bytes == 1312 * 4096 // tp
    assert plan.group_size == 4 and len(plan.groups) == 8
    assert sum(g.padding_layers for g in plan.groups) == 1
    assert plan.pool_blocks_per_request == 15
    assert plan.bytes_per_request == 15 * 4 * 1312 * 4096 // tp


def test_nemotron_ssm_dtype_changed_after_0_11() -> None:
    m = load_model("nemotron-nano-9b-v2")
    old = plan_state(m, max_model_len=LEN, vllm="0.11")
    new = plan_state(m, max_model_len=LEN, vllm="0.33")
    assert old.recurrent_page is not None and new.recurrent_page is not None
    assert new.recurrent_page.ssm_bytes == 2 * old.recurrent_page.ssm_bytes  # float32 vs bfloat16


# DeepSeek-V3: 61 MLA layers, one latent of 512 + 64 elements per token, bf16 = 1152 B, identical on every TP
# rank (MLA has a single KV head). 0.33 on Blackwell picks FLASHINFER_MLA, whose smallest kernel block is 32:
#   page = 32 * 1152 = 36,864; blocks = 9216 / 32 = 288; one group of 61 layers
@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_deepseek_v3_current_line(tp: int) -> None:
    plan = plan_state(load_model("deepseek-v3"), max_model_len=LEN, tp=tp, vllm="0.33")
    assert plan.block_tokens == 32 and plan.block_bytes == 36_864
    assert plan.group_size == 61 and len(plan.groups) == 1
    assert plan.pool_blocks_per_request == 288
    assert plan.bytes_per_request == 288 * 61 * 36_864
    cap = plan.capacity(40 * GiB)
    # 42,949,672,960 // (61 * 36,864) = 19,099 blocks; / 288 = 66.32
    assert cap.num_blocks == 42_949_672_960 // (61 * 36_864) == 19_099
    assert cap.kv_cache_tokens == int(19_099 / 288 * 9216)


def test_sliding_window_layers_keep_a_window() -> None:
    # Corrected for 0.26+: SlidingWindowSpec.max_admission_blocks_per_request (v1/kv_cache_interface.py) holds
    # VllmConfig.max_in_flight_tokens = max_concurrent_batches x max_num_batched_tokens = 2 x 8192 with async
    # scheduling (on by default since 0.20), not one batch.
    plan = plan_state(load_model("gpt-oss-120b"), max_model_len=LEN, vllm="0.33")
    blocks = {str(g.kind): g.blocks_per_request for g in plan.groups}
    # 8 KV heads x 64 x 2 x bf16; 18 sliding + 18 full layers -> two groups of 18 (1.5 rule)
    assert plan.group_size == 18
    assert blocks["full_attention"] == 9216 // 16
    # min(128 - 1 + 16384, 9216) = 9216 tokens -> ceil(9216 / 16) + 1 = 577 blocks
    assert blocks["sliding_attention"] == -(-9216 // 16) + 1 == 577
    # 0.25 held one batch: min(128 - 1 + 8192, 9216) = 8319 -> ceil(8319 / 16) + 1 = 521
    old = plan_state(load_model("gpt-oss-120b"), max_model_len=LEN, vllm="0.25")
    assert {str(g.kind): g.blocks_per_request for g in old.groups}["sliding_attention"] == -(-8319 // 16) + 1 == 521


def test_version_lines() -> None:
    assert not Semantics.for_version("0.11").kernel_alignment
    assert Semantics.for_version("0.26.1rc1.dev1177+ga9a17e709").all_mode_default
    # The wheels: MambaModelConfig.verify_and_update_config defaults Mamba2 models to "all" under prefix
    # caching in 0.20-0.27 only ("align" from 0.28), but config/cache.py's MambaCacheMode keeps "all" as a
    # choice through 0.31 (the earlier rule "no 'all' from 0.28" was wrong for an explicit --mamba-cache-mode).
    assert not Semantics.for_version("0.28").all_mode_default and Semantics.for_version("0.28").has_all_mode
    assert Semantics.for_version("0.31").has_all_mode and not Semantics.for_version("0.32").has_all_mode
    assert Semantics.for_version("0.21").tokens_from_concurrency and not Semantics.for_version("0.20").tokens_from_concurrency
    assert Semantics.for_version("0.33").gdn_checkpoint_block and not Semantics.for_version("0.32").gdn_checkpoint_block
    with pytest.raises(InputError, match="older than 0.11"):
        Semantics.for_version("0.10.2")
    with pytest.raises(InputError, match="not a vLLM version"):
        Semantics.for_version("latest")


def test_tp_that_does_not_divide_heads_is_an_error() -> None:
    with pytest.raises(InputError) as err:
        plan_state(load_model("qwen3-next-80b-a3b"), max_model_len=LEN, tp=3)
    assert err.value.field in {"num_attention_heads", "linear_num_value_heads", "num_key_value_heads"}


def test_user_block_size_smaller_than_the_state_is_raised() -> None:
    plan = plan_state(load_model("qwen3.8-2.4t"), max_model_len=LEN, kv_cache_dtype="fp8", block_size=64, vllm="0.33")
    assert plan.block_tokens == 2112
    assert any("--block-size 64" in n for n in plan.notes)
    big = plan_state(load_model("qwen3.8-2.4t"), max_model_len=LEN, kv_cache_dtype="fp8", block_size=4096, vllm="0.33")
    assert big.block_tokens == 4096  # a larger user block is kept, the recurrent page padded to it
