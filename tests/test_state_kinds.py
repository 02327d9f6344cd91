"""Every KV-cache kind a text decoder gets in vLLM 0.33, pinned at TP 1, 2, 4, 8 to hand derivations.

Each expected number is worked out in the comment above it from the vLLM 0.33 source (file and function
named there; ``kv_cache_interface.py`` is ``vllm/v1/kv_cache_interface.py``). Defaults unless a test says
otherwise: vLLM 0.33, bf16 KV (2 B), no prefix caching (PD deployments pass ``--no-enable-prefix-caching``:
one recurrent block per request), ``max_num_batched_tokens`` 8192 and async scheduling on, so
``VllmConfig.max_in_flight_tokens`` = ``max_concurrent_batches`` (2) x 8192 = 16,384 (config/vllm.py).

Models without a bundled config (no public copy found, see data/models/README.md) use SYNTHETIC configs
written here, shaped like the named model; they pin pdtune's reader of that ``model_type``, not a real model.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pdtune.cli import main
from pdtune.errors import InputError
from pdtune.memory import vllm_default_max_num_batched_tokens
from pdtune.model import LayerKind, load_model
from pdtune.state import StatePlan, plan_state
from pdtune.units import GiB, cdiv

TPS = (1, 2, 4, 8)
L = 32_768


def groups(plan: StatePlan) -> list[tuple[str, int, int, int]]:
    """(kind, real layers, padding slots, blocks per request) of each KV cache group."""
    return [(str(g.kind), len(g.layers) - g.padding_layers, g.padding_layers, g.blocks_per_request)
            for g in plan.groups]


def synthetic(tmp_path: Path, raw: dict[str, Any]) -> str:
    folder = tmp_path / raw["model_type"]
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(raw))
    return str(folder)


# ------------------------------------------------------------------------------------ sliding window, model-wide


@pytest.mark.parametrize("tp", TPS)
def test_mistral_every_layer_slides(tp: int) -> None:
    # mistral-7b-v0.1 has sliding_window 4096 and no layer_types: llama.py LlamaAttention passes no per-layer
    # window, attention.py Attention takes cache_config.sliding_window -> all 32 layers SlidingWindowSpec.
    # kv_cache_interface.py SlidingWindowSpec.max_admission_blocks_per_request:
    #   cdiv(min(W - 1 + max_in_flight_tokens, L), block) + 1 = cdiv(min(4095 + 16384, 32768), 16) + 1
    #   = cdiv(20479, 16) + 1 = 1280 + 1 = 1281 blocks; page = 16 x (8 / tp) KV heads x 128 x 2 (K, V) x 2 B.
    plan = plan_state(load_model("mistral-7b-v0.1"), max_model_len=L, tp=tp)
    assert groups(plan) == [("sliding_attention", 32, 0, 1281)]
    assert plan.block_bytes == 16 * (8 // tp) * 128 * 2 * 2
    assert plan.bytes_per_request == 1281 * 32 * plan.block_bytes


@pytest.mark.parametrize(("length", "vllm", "blocks"), [
    (8192, "0.33", cdiv(8192, 16) + 1),           # min(20479, 8192) = 8192 -> 512 + 1 = 513
    (32768, "0.25", cdiv(4095 + 8192, 16) + 1),   # before 0.26 one batch in flight: cdiv(12287, 16) + 1 = 769
    (32768, "0.33", cdiv(4095 + 16384, 16) + 1),  # 1281
])
def test_mistral_blocks_follow_the_in_flight_rule(length: int, vllm: str, blocks: int) -> None:
    plan = plan_state(load_model("mistral-7b-v0.1"), max_model_len=length, vllm=vllm)
    assert plan.pool_blocks_per_request == blocks


def test_no_async_scheduling_keeps_one_batch_in_flight() -> None:
    # config/vllm.py max_concurrent_batches: 1 without async scheduling -> cdiv(4095 + 8192, 16) + 1 = 769
    plan = plan_state(load_model("mistral-7b-v0.1"), max_model_len=L, async_scheduling=False)
    assert plan.pool_blocks_per_request == 769


PHI3 = {  # SYNTHETIC, shaped like microsoft/Phi-3-mini-4k-instruct
    "architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "num_hidden_layers": 32, "hidden_size": 3072,
    "num_attention_heads": 32, "num_key_value_heads": 32, "intermediate_size": 8192, "vocab_size": 32064,
    "sliding_window": 2047, "torch_dtype": "bfloat16", "max_position_embeddings": 4096,
}


@pytest.mark.parametrize("tp", TPS)
def test_phi3_model_wide_window(tmp_path: Path, tp: int) -> None:
    # phi3.py reuses LlamaAttention: model-wide window 2047 on every layer. head_dim = 3072 / 32 = 96.
    # cdiv(min(2046 + 16384, 4096), 16) + 1 = 256 + 1 = 257; page = 16 x (32 / tp) x 96 x 2 x 2.
    plan = plan_state(load_model(synthetic(tmp_path, PHI3)), max_model_len=4096, tp=tp)
    assert groups(plan) == [("sliding_attention", 32, 0, 257)]
    assert plan.block_bytes == 16 * (32 // tp) * 96 * 2 * 2


GEMMA3 = {  # SYNTHETIC, shaped like google/gemma-3-27b-it's text model (12 of its 62 layers)
    "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "num_hidden_layers": 12,
    "hidden_size": 5376, "num_attention_heads": 32, "num_key_value_heads": 16, "head_dim": 128,
    "intermediate_size": 21504, "vocab_size": 262208, "sliding_window": 1024, "torch_dtype": "bfloat16",
    "max_position_embeddings": 131072,
}


@pytest.mark.parametrize("tp", TPS)
def test_gemma3_per_layer_window(tmp_path: Path, tp: int) -> None:
    # transformers Gemma3TextConfig writes layer_types with sliding_window_pattern 6: layers 5 and 11 full, 10
    # sliding. kv_cache_planning.py _get_kv_cache_groups_uniform_page_size: group size = min(10, 2) = 2 (10 is
    # not < 1.5 x 2) -> 5 sliding groups + 1 full. Sliding: cdiv(min(1023 + 16384, L), 16) + 1 = 1088 + 1 = 1089;
    # full: 32768 / 16 = 2048. Pool blocks: 5 x 1089 + 2048 = 7493.
    plan = plan_state(load_model(synthetic(tmp_path, GEMMA3)), max_model_len=L, tp=tp)
    assert groups(plan) == [("sliding_attention", 2, 0, 1089)] * 5 + [("full_attention", 2, 0, 2048)]
    assert plan.pool_blocks_per_request == 7493
    assert plan.block_bytes == 16 * (16 // tp) * 128 * 2 * 2


# ------------------------------------------------------------------------------------ gpt-oss (must show)


def test_gpt_oss_pool_blocks_per_request_must_show(capsys: pytest.CaptureFixture[str]) -> None:
    # 18 sliding (window 128) + 18 full layers, 8 KV heads x 64 x 2 x 2 B = 2048 B per token per layer.
    # Sliding: cdiv(min(127 + 16384, 32768), 16) + 1 = cdiv(16511, 16) + 1 = 1032 + 1 = 1033 (0.26+: two
    # batches of 8192 in flight); full: 32768 / 16 = 2048; 1033 + 2048 = 3081 block ids per request.
    # 40 GiB / (16 x 2048 x 18 layers = 589,824 B per pool block) = 72,817 blocks; 72,817 / 3081 = 23.634x;
    # "GPU KV cache size" = int(23.634... x 32768) = 774,445 (kv_cache_utils.py get_kv_cache_capacity).
    assert main(["state", "gpt-oss-120b", "--max-model-len", "32768", "--kv-cache-gib", "40", "--vllm", "0.33",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["pool_blocks_per_request"] == 3081
    assert [(g["kind"], g["blocks_per_request"]) for g in out["groups"]] == [
        ("sliding_attention", 1033), ("full_attention", 2048)]
    assert (out["num_blocks"], out["kv_cache_tokens"]) == (72_817, 774_445)
    assert out["in_flight_tokens"] == 16_384


def test_state_help_names_the_in_flight_rule(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["state", "--help"])
    text = capsys.readouterr().out
    assert "max_in_flight_tokens" in text and "3,081" in text and "1,033" in text


# ------------------------------------------------------------------------------------ chunked local attention


@pytest.mark.parametrize("tp", TPS)
def test_llama4_chunked_layers_promoted_without_hma(tp: int) -> None:
    # config/vllm.py VllmConfig.__post_init__: chunked local attention turns the hybrid KV-cache manager off
    # when VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE is 0 (its default in 0.11, envs.py; "1" from
    # 0.20, data/vllm/switches.csv); kv_cache_planning.py unify_hybrid_kv_cache_specs then makes the 36
    # chunked layers full attention: one group of 48 layers, 32768 / 16 = 2048 blocks. 40 heads / 8 KV heads,
    # head_dim 128 -> page 16 x (8 / tp) x 128 x 2 x 2.
    for plan in (plan_state(load_model("llama-4-scout-17b-16e"), max_model_len=L, tp=tp, allow_chunked_local_hma=False),
                 plan_state(load_model("llama-4-scout-17b-16e"), max_model_len=L, tp=tp, vllm="0.11")):
        assert not plan.hybrid_kv_cache_manager
        assert groups(plan) == [("full_attention", 48, 0, 2048)]
        assert plan.block_bytes == 16 * (8 // tp) * 128 * 2 * 2


@pytest.mark.parametrize("tp", TPS)
def test_llama4_chunked_layers_with_hma(tp: int) -> None:
    # 0.20+ default (the variable "1"): layers 3, 7, ..., 47 (no RoPE, no_rope_layer_interval 4) full, 36
    # chunked (8192). kv_cache_interface.py ChunkedLocalAttentionSpec.max_admission_blocks_per_request:
    #   cdiv(min(8192 + 16384, 32768), 16) = 1536. Group size min(36, 12) = 12 -> 3 chunked groups + 1 full.
    #   3 x 1536 + 2048 = 6656 pool blocks per request.
    plan = plan_state(load_model("llama-4-scout-17b-16e"), max_model_len=L, tp=tp)
    assert plan.hybrid_kv_cache_manager
    assert groups(plan) == [("chunked_attention", 12, 0, 1536)] * 3 + [("full_attention", 12, 0, 2048)]
    assert plan.pool_blocks_per_request == 6656


def test_kv_connector_without_hma_promotes_even_with_the_switch() -> None:
    # VllmConfig.__post_init__: a KV connector that does not support HMA disables it for every model.
    plan = plan_state(load_model("llama-4-scout-17b-16e"), max_model_len=L, allow_chunked_local_hma=True,
                      kv_connector_without_hma=True)
    assert groups(plan) == [("full_attention", 48, 0, 2048)]
    with pytest.raises(InputError, match="hybrid"):
        plan_state(load_model("nemotron-nano-9b-v2"), max_model_len=L, kv_connector_without_hma=True)


# ------------------------------------------------------------------------------------ MLA and sparse MLA


@pytest.mark.parametrize("tp", TPS)
def test_kimi_k25_mla(tp: int) -> None:
    # kimi_k25 wraps a DeepSeek-V3 text model: MLAAttentionSpec (kv_cache_interface.py) of one latent of
    # kv_lora_rank 512 + qk_rope_head_dim 64 = 576 x 2 B = 1152 B per token, not split by TP. FlashInfer-MLA's
    # smallest kernel block is 32: 32768 / 32 = 1024 blocks for each of the 61 layers.
    plan = plan_state(load_model("kimi-k2.5"), max_model_len=L, tp=tp)
    assert groups(plan) == [("mla", 61, 0, 1024)]
    assert (plan.block_tokens, plan.block_bytes) == (32, 32 * 1152)


@pytest.mark.parametrize(("kv_dtype", "per_token"), [
    ("auto", 576 * 2 + 132),  # bf16 latent 1152 + indexer 132 = 1284
    ("fp8", 576 + 132),       # FLASHINFER_MLA_SPARSE fp8 latent 576 + 132 = 708
    ("fp8_ds_mla", 656 + 132),  # packed 512 fp8 + 4 x 4 scales + 64 x 2 rope = 656; + 132 = 788
])
@pytest.mark.parametrize("tp", TPS)
def test_deepseek_v32_sparse_mla_with_indexer(tp: int, kv_dtype: str, per_token: int) -> None:
    # deepseek_v2.py DeepseekV32IndexerCache.get_kv_cache_spec: index_head_dim 128 fp8 + 128 / 128 x 4 B scale
    # = 132 B per token, in the same UniformTypeKVCacheSpecs group as the MLA latent (kv_cache_planning.py
    # get_kv_cache_groups); the indexer backend takes 64-token blocks only: 32768 / 64 = 512 blocks.
    plan = plan_state(load_model("deepseek-v3.2"), max_model_len=L, tp=tp, kv_cache_dtype=kv_dtype)
    assert groups(plan) == [("mla", 61, 0, 512)]
    assert (plan.block_tokens, plan.block_bytes) == (64, 64 * per_token)


# ------------------------------------------------------------------------------------ recurrent kinds


@pytest.mark.parametrize("tp", TPS)
def test_jamba_mamba1(tp: int) -> None:
    # jamba.py: attention in layers 4, 12, 20, 28 (attn_layer_period 8, offset 4), MambaMixer elsewhere (28).
    # mamba_utils.py MambaStateShapeCalculator.mamba1_state_shape: d_inner = 2 x 4096 = 8192 split by TP;
    #   conv (d_conv - 1 = 3, 8192 / tp) x 2 B = 49152 / tp; ssm (8192 / tp, d_state 16) x 2 B = 262144 / tp.
    # platforms/interface.py _align_hybrid_block_size: attention 8 / tp heads x 128 x 2 x 2 = 4096 / tp B per
    #   token; block = 16 x cdiv(311296, 16 x 4096) = 16 x 5 = 80 tokens; the Mamba page is padded to
    #   80 x 4096 / tp. Groups of min(4, 28) = 4: 7 Mamba groups (1 block each) + attention cdiv(32768, 80) = 410.
    plan = plan_state(load_model("jamba-1.5-mini"), max_model_len=L, tp=tp)
    rec = plan.recurrent_page
    assert rec is not None and rec.kind is LayerKind.MAMBA1
    assert (rec.conv_bytes, rec.ssm_bytes) == (49152 // tp, 262144 // tp)
    assert (plan.block_tokens, rec.page_size_bytes) == (80, 80 * 4096 // tp)
    assert groups(plan) == [("mamba1", 4, 0, 1)] * 7 + [("full_attention", 4, 0, 410)]
    assert plan.pool_blocks_per_request == 7 + 410


FALCON_H1 = {  # SYNTHETIC, shaped like tiiuae/Falcon-H1-1.5B
    "architectures": ["FalconH1ForCausalLM"], "model_type": "falcon_h1", "num_hidden_layers": 24,
    "hidden_size": 2048, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 128,
    "intermediate_size": 4608, "vocab_size": 65537, "mamba_d_ssm": 3072, "mamba_n_heads": 48, "mamba_d_head": 64,
    "mamba_n_groups": 1, "mamba_d_state": 256, "mamba_d_conv": 4, "mamba_expand": 2, "torch_dtype": "bfloat16",
    "max_position_embeddings": 131072,
}


@pytest.mark.parametrize(("tp", "conv_dim", "block", "attention_blocks"), [
    # mamba_utils.py mamba2_state_shape: n_groups 1 gets tp - 1 extra groups when tp > 1
    # (extra_groups_for_head_shards), conv_dim = 3072 + 2 x groups x 256, split by tp.
    (1, 3072 + 2 * 1 * 256, 1568, 21),      # state 3 x 3584 x 2 + 48 x 64 x 256 x 2 = 1,594,368 B
    (2, (3072 + 2 * 2 * 256) // 2, 1568, 21),  # 798,720 B; attention 1 KV head: 512 B/token
    (4, (3072 + 2 * 4 * 256) // 4, 784, 42),   # 400,896 B; KV heads replicate: still 1 x 128 x 2 x 2 = 512
    (8, (3072 + 2 * 8 * 256) // 8, 400, 82),   # 201,984 B
])
def test_falcon_h1_parallel_hybrid(tmp_path: Path, tp: int, conv_dim: int, block: int, attention_blocks: int) -> None:
    # falcon_h1.py FalconH1ParallelHybrid: each of the 24 layers has an Attention and a MambaMixer2 -> 24 full
    # attention + 24 Mamba2 specs, 2 groups of 24. Block = 16 x cdiv(state, 16 x attention bytes per token)
    # (_align_hybrid_block_size): tp 1: 16 x cdiv(1594368, 16384) = 16 x 98 = 1568; tp 4: 16 x cdiv(400896,
    # 8192) = 784; tp 8: 16 x cdiv(201984, 8192) = 400. Attention blocks cdiv(32768, block).
    plan = plan_state(load_model(synthetic(tmp_path, FALCON_H1)), max_model_len=L, tp=tp)
    rec = plan.recurrent_page
    assert rec is not None and rec.conv_shape == (3, conv_dim)
    assert rec.ssm_shape == (48 // tp, 64, 256)
    assert plan.block_tokens == block
    assert groups(plan) == [("full_attention", 24, 0, attention_blocks), ("mamba2", 24, 0, 1)]


GRANITE_H = {  # SYNTHETIC, shaped like ibm-granite/granite-4.0-h-small (8 of its 40 layers)
    "architectures": ["GraniteMoeHybridForCausalLM"], "model_type": "granitemoehybrid", "num_hidden_layers": 8,
    "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 512,
    "shared_intermediate_size": 1024, "num_local_experts": 8, "num_experts_per_tok": 2, "vocab_size": 100352,
    "mamba_n_heads": 128, "mamba_d_head": 64, "mamba_n_groups": 1, "mamba_d_state": 128, "mamba_d_conv": 4,
    "mamba_expand": 2, "torch_dtype": "bfloat16", "max_position_embeddings": 131072,
    "layer_types": ["mamba", "mamba", "mamba", "attention", "mamba", "mamba", "mamba", "attention"],
}


@pytest.mark.parametrize(("tp", "state"), [
    # conv (3, (8192 + 2 x groups x 128) / tp) x 2 B + ssm (128 / tp, 64, 128) x 2 B, groups as for Falcon-H1
    (1, 3 * 8448 * 2 + 128 * 64 * 128 * 2),        # 2,147,840
    (2, 3 * 4352 * 2 + 64 * 64 * 128 * 2),         # 1,074,688
    (4, 3 * 2304 * 2 + 32 * 64 * 128 * 2),         # 538,112
    (8, 3 * 1280 * 2 + 16 * 64 * 128 * 2),         # 269,824
])
def test_granite_h_mamba2(tmp_path: Path, tp: int, state: int) -> None:
    # granitemoehybrid.py: layer_types mamba -> MambaMixer2, attention -> Attention. Attention 8 / tp heads x 128
    # (4096 / 32) x 2 x 2 = 4096 / tp B per token; block = 16 x cdiv(state, 16 x 4096 / tp) = 16 x 33 = 528 at
    # every TP here. 6 Mamba layers in groups of 2 (3 groups) + 2 attention layers: cdiv(32768, 528) = 63.
    plan = plan_state(load_model(synthetic(tmp_path, GRANITE_H)), max_model_len=L, tp=tp)
    assert plan.recurrent_page is not None and plan.recurrent_page.state_bytes == state
    assert plan.block_tokens == 528
    assert groups(plan) == [("mamba2", 2, 0, 1)] * 3 + [("full_attention", 2, 0, 63)]


def test_granite_all_attention_variant(tmp_path: Path) -> None:
    # granite-4.0-micro style: every layer_types entry "attention" -> a plain full-attention model.
    raw = {**GRANITE_H, "layer_types": ["attention"] * 8}
    plan = plan_state(load_model(synthetic(tmp_path, raw)), max_model_len=L)
    assert groups(plan) == [("full_attention", 8, 0, 2048)] and plan.recurrent_page is None


KIMI_LINEAR = {  # SYNTHETIC, shaped like moonshotai/Kimi-Linear-48B-A3B-Instruct
    "architectures": ["KimiLinearForCausalLM"], "model_type": "kimi_linear", "num_hidden_layers": 27,
    "hidden_size": 2304, "num_attention_heads": 32, "num_key_value_heads": 32, "kv_lora_rank": 512,
    "q_lora_rank": None, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
    "intermediate_size": 9216, "moe_intermediate_size": 1024, "num_experts": 256, "num_experts_per_token": 8,
    "num_shared_experts": 1, "first_k_dense_replace": 1, "vocab_size": 163840, "torch_dtype": "bfloat16",
    "max_position_embeddings": 1048576,
    "linear_attn_config": {"kda_layers": [i for i in range(1, 28) if i not in (4, 8, 12, 16, 20, 24, 27)],
                           "full_attn_layers": [4, 8, 12, 16, 20, 24, 27], "num_heads": 32, "head_dim": 128,
                           "short_conv_kernel_size": 4},
}


@pytest.mark.parametrize(("tp", "block", "mla_blocks"), [
    # block = 128 x cdiv(state, 128 x 1152) (0.27+: MLA hybrids align to 128): tp 1: 128 x cdiv(2170880,
    # 147456) = 128 x 15 = 1920; tp 2: 128 x cdiv(1085440, 147456) = 1024; tp 4: 512; tp 8: 256.
    (1, 1920, cdiv(L, 1920)), (2, 1024, 32), (4, 512, 64), (8, 256, 128),
])
def test_kimi_linear_kda(tmp_path: Path, tp: int, block: int, mla_blocks: int) -> None:
    # kda.py KimiDeltaAttention (0.23+ fused conv): conv (3, 3 x 32 / tp x 128) x 2 B and a float32 recurrent
    # state (32 / tp, 128, 128) x 4 B (mamba_utils.py kda_state_shape). 20 KDA + 7 MLA layers: groups of 7
    # -> KDA 7 + 7 + 6 (+1 padding slot, "Add 1 padding layers, may waste at most 5.00%") and one MLA group.
    plan = plan_state(load_model(synthetic(tmp_path, KIMI_LINEAR)), max_model_len=L, tp=tp)
    rec = plan.recurrent_page
    assert rec is not None and rec.kind is LayerKind.KDA
    assert rec.state_bytes == 3 * (3 * 32 // tp * 128) * 2 + (32 // tp) * 128 * 128 * 4
    assert plan.block_tokens == block
    assert groups(plan) == [("kda", 7, 0, 1), ("kda", 7, 0, 1), ("kda", 6, 1, 1), ("mla", 7, 0, mla_blocks)]


LFM2 = {  # SYNTHETIC, shaped like LiquidAI/LFM2-1.2B
    "architectures": ["Lfm2ForCausalLM"], "model_type": "lfm2", "num_hidden_layers": 16, "hidden_size": 2048,
    "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 12288, "vocab_size": 65536,
    "conv_L_cache": 3, "conv_dim": 2048, "torch_dtype": "bfloat16", "max_position_embeddings": 128000,
    "layer_types": ["conv", "conv", "full_attention", "conv", "conv", "full_attention", "conv", "conv",
                    "full_attention", "conv", "full_attention", "conv", "full_attention", "conv", "full_attention",
                    "conv"],
}


@pytest.mark.parametrize("tp", TPS)
def test_lfm2_short_conv(tmp_path: Path, tp: int) -> None:
    # lfm2.py Lfm2ShortConvDecoderLayer: ShortConv state (conv_L_cache - 1 = 2, 2048 / tp) x 2 B = 8192 / tp
    # (mamba_utils.py short_conv_state_shape). Attention 8 / tp heads x 64 x 2 x 2 = 2048 / tp B per token:
    # the 16-token page (32768 / tp) already covers the state, which is padded to it (0.26+). 10 conv + 6
    # attention: max 10 is not < 1.5 x 6, so groups of 6: conv layers[0::2], layers[1::2] = 5 + 5 with one
    # padding slot each ("Add 2 padding layers, may waste at most 20.00%"); attention 32768 / 16 = 2048.
    plan = plan_state(load_model(synthetic(tmp_path, LFM2)), max_model_len=L, tp=tp)
    rec = plan.recurrent_page
    assert rec is not None and rec.state_bytes == 8192 // tp and rec.page_size_bytes == 16 * 2048 // tp
    assert groups(plan) == [("short_conv", 5, 1, 1)] * 2 + [("full_attention", 6, 0, 2048)]


GEMMA3N = {  # SYNTHETIC, shaped like google/gemma-3n-E4B's text model
    "architectures": ["Gemma3nForCausalLM"], "model_type": "gemma3n_text", "num_hidden_layers": 35,
    "hidden_size": 2048, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 256,
    "intermediate_size": 16384, "vocab_size": 262400, "sliding_window": 512, "num_kv_shared_layers": 15,
    "torch_dtype": "bfloat16", "max_position_embeddings": 32768,
}


@pytest.mark.parametrize("tp", TPS)
def test_gemma3n_kv_sharing(tmp_path: Path, tp: int) -> None:
    # gemma3n.py: the last num_kv_shared_layers (15) layers read an earlier layer's KV and get no spec of their
    # own: 20 layers keep KV, 4 sliding for each full (layer_types pattern) = 16 sliding + 4 full, groups of 4.
    # Sliding: cdiv(min(511 + 16384, 32768), 16) + 1 = 1056 + 1 = 1057; full 2048. KV heads max(1, 2 / tp).
    plan = plan_state(load_model(synthetic(tmp_path, GEMMA3N)), max_model_len=L, tp=tp)
    assert groups(plan) == [("sliding_attention", 4, 0, 1057)] * 4 + [("full_attention", 4, 0, 2048)]
    assert plan.block_bytes == 16 * max(1, 2 // tp) * 256 * 2 * 2


# ------------------------------------------------------------------------------------ full attention families


@pytest.mark.parametrize(("model", "layers", "kv_heads", "head_dim"), [
    ("minimax-m2.5", 62, 8, 128),       # minimax_m2.py: plain Attention in every layer, no window
    ("glm-4.7", 92, 8, 128),            # glm4_moe.py
    ("mixtral-8x7b", 32, 8, 128),       # mixtral: sliding_window null -> full
    ("qwen3-vl-235b-a22b", 94, 4, 128),  # qwen3_vl_moe text part
    ("qwen3-235b-a22b", 94, 4, 128),
    ("qwen3-32b", 64, 8, 128),
    ("qwen3-14b", 40, 8, 128),
])
@pytest.mark.parametrize("tp", TPS)
def test_full_attention_families(model: str, layers: int, kv_heads: int, head_dim: int, tp: int) -> None:
    # FullAttentionSpec: 32768 / 16 = 2048 blocks; page 16 x max(1, kv_heads / tp) x head_dim x 2 x 2 B
    # (KV heads replicate once TP exceeds them).
    plan = plan_state(load_model(model), max_model_len=L, tp=tp)
    assert groups(plan) == [("full_attention", layers, 0, 2048)]
    assert plan.block_bytes == 16 * max(1, kv_heads // tp) * head_dim * 2 * 2


# ------------------------------------------------------------------------------------ speculation, DCP, dtypes


@pytest.mark.parametrize("tp", TPS)
def test_eagle3_head_adds_its_layer(tp: int) -> None:
    # v1/spec_decode/eagle.py loads the draft into the same KV cache config: Llama-3.1-8B's 32 layers plus the
    # EAGLE-3 head's one (same 8 KV heads x 128) = 33 layers in one group, 8192 / 16 = 512 blocks.
    plan = plan_state(load_model("llama-3.1-8b"), max_model_len=8192, tp=tp,
                      speculative_model=load_model("eagle3-llama3-8b"), num_speculative_tokens=3)
    assert groups(plan) == [("full_attention", 33, 0, 512)]
    assert plan.speculation is not None and plan.speculation.method == "eagle3"


@pytest.mark.parametrize(("vllm", "async_on", "blocks"), [("0.27", False, 769), ("0.28", True, 1281)])
def test_draft_model_turns_async_default_off_before_028(vllm: str, async_on: bool, blocks: int) -> None:
    # config/vllm.py VllmConfig.__post_init__, async_scheduling None: 0.20-0.27 keep it on only for EAGLE/MTP
    # and ngram_gpu, so a separate draft model leaves one batch in flight: cdiv(4095 + 8192, 16) + 1 = 769;
    # 0.28+ also keep it on for draft_model: cdiv(4095 + 16384, 16) + 1 = 1281. The draft's 32 layers join.
    mistral = load_model("mistral-7b-v0.1")
    plan = plan_state(mistral, max_model_len=L, vllm=vllm, speculative_model=mistral, num_speculative_tokens=2)
    assert plan.async_scheduling is async_on
    assert groups(plan) == [("sliding_attention", 64, 0, blocks)]


@pytest.mark.parametrize("vllm", ["0.11", "0.20", "0.21", "0.33"])
def test_dcp_shards_tokens_and_the_logged_size(vllm: str) -> None:
    # TP 8, DCP 8: FullAttentionSpec.max_memory_usage_bytes takes cdiv(8192, 8) = 1024 tokens -> 64 blocks.
    # 10 GiB / (16 x 1 x 128 x 2 x 2 x 32 = 262,144 B) = 40,960 blocks. 0.11-0.20 log 40,960 x 16 x 8
    # ("Multiplying the GPU KV cache size by the dcp_world_size"), 0.21+ int(40960 / 64 x 8192): both 5,242,880.
    plan = plan_state(load_model("llama-3.1-8b"), max_model_len=8192, tp=8, decode_context_parallel_size=8,
                      vllm=vllm)
    cap = plan.capacity(10 * GiB)
    assert (plan.pool_blocks_per_request, cap.num_blocks, cap.kv_cache_tokens) == (64, 40_960, 5_242_880)


@pytest.mark.parametrize(("kv_dtype", "per_token"), [
    ("auto", 8 * 128 * 2 * 2),                      # 4096
    ("fp8", 8 * 128 * 2),                           # 2048
    ("fp8_e5m2", 8 * 128 * 2),
    ("int8_per_token_head", 8 * (128 * 2 + 8)),     # K, V int8 + two float32 scales per head and token: 2112
    ("fp8_per_token_head", 8 * (128 * 2 + 8)),
    ("int4_per_token_head", 8 * (128 + 8)),         # two 4-bit values per byte: 1088
    ("nvfp4", 8 * 2 * (128 // 2 + 128 // 16)),      # fp4 data + one fp8 scale per 16: 1152
])
def test_kv_dtypes_bytes_per_token(kv_dtype: str, per_token: int) -> None:
    # kv_cache_interface.py AttentionSpec.real_page_size_bytes with the dtype's slot size (utils/torch_utils.py
    # STR_DTYPE_TO_TORCH_DTYPE and the per-token-head / nvfp4 layouts of 0.20+).
    plan = plan_state(load_model("llama-3.1-8b"), max_model_len=8192, kv_cache_dtype=kv_dtype)
    assert plan.attention_page is not None and plan.attention_page.bytes_per_token == per_token


def test_per_token_head_dtypes_start_at_020() -> None:
    with pytest.raises(InputError, match="from vLLM 0.20"):
        plan_state(load_model("llama-3.1-8b"), max_model_len=8192, kv_cache_dtype="int8_per_token_head", vllm="0.11")


def test_skip_layers_keep_the_model_dtype() -> None:
    # kv_cache_dtype_skip_layers "0,31" keep bf16; the fp8 block grows to 32 tokens so its page (32 x 2048)
    # covers the bf16 page at 16 (16 x 4096) (_align_heterogeneous_kv_block_size, 0.26+); 8192 / 32 = 256.
    plan = plan_state(load_model("llama-3.1-8b"), max_model_len=8192, kv_cache_dtype="fp8",
                      kv_cache_dtype_skip_layers=("0", "31"))
    assert plan.block_tokens == 32
    assert groups(plan) == [("full_attention", 32, 0, 256)]
    (group,) = plan.groups
    assert group.block_bytes == 2 * 32 * 4096 + 30 * 32 * 2048


@pytest.mark.parametrize(("memory_gib", "vllm", "device", "expected"), [
    (276.62, "0.33", "NVIDIA GB300", 16384),  # >= 160 GiB (0.28+)
    (276.62, "0.27", "NVIDIA GB300", 8192),   # before 0.28 the top tier is >= 70 GiB
    (139.81, "0.33", "NVIDIA H200", 8192),
    (79.25, "0.33", "NVIDIA A100-SXM4-80GB", 2048),  # A100 excluded
    (None, "0.33", "", 2048),                 # device unknown
])
def test_default_max_num_batched_tokens(memory_gib: float | None, vllm: str, device: str, expected: int) -> None:
    # engine/arg_utils.py EngineArgs.get_batch_defaults, vllm serve (OPENAI_API_SERVER) column.
    memory = None if memory_gib is None else int(memory_gib * GiB)
    assert vllm_default_max_num_batched_tokens(memory, vllm=vllm, device_name=device) == expected


# ------------------------------------------------------------------------------------ bad input: one line, exit 2


def _one_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0]
    return err[0]


def test_tp_not_dividing_heads(capsys: pytest.CaptureFixture[str]) -> None:
    line = _one_line(capsys, ["state", "qwen2.5-vl-7b", "--max-model-len", "4096", "--tp", "8"])
    assert "qwen2.5-vl-7b/config.json: num_attention_heads: 28 heads do not divide over TP=8" in line


def test_over_long_max_model_len(capsys: pytest.CaptureFixture[str]) -> None:
    # config/model.py _get_and_verify_max_len: Llama-3.1's llama3 RoPE is not multiplied: the limit stays
    # max_position_embeddings 131,072.
    line = _one_line(capsys, ["state", "llama-3.1-8b", "--max-model-len", "131073"])
    assert "llama-3.1-8b/config.json: max_position_embeddings: --max-model-len 131,073" in line


def test_unknown_model_type(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = synthetic(tmp_path, {"model_type": "brand_new_lm", "num_hidden_layers": 2})
    line = _one_line(capsys, ["state", folder, "--max-model-len", "100"])
    assert "config.json: model_type: unknown architecture 'brand_new_lm'; pdtune understands:" in line
    assert "jamba" in line and "kimi_linear" in line
    removed = synthetic(tmp_path, {"model_type": "minimax_text_01", "num_hidden_layers": 2})
    assert "removed from vLLM in 0.23" in _one_line(capsys, ["state", removed, "--max-model-len", "100"])


def test_a_cached_plan_is_never_handed_out_under_another_vllm_environment() -> None:
    # state/planner.py plan_state keeps plans it made (a plan search asks the same question hundreds of times);
    # the environment in force is part of the key. The same question asked three times: under the 0.33 default
    # (the variable "1": 4 groups, 6656 blocks per request), under VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE
    # =0 (one full-attention group of 48 layers, 2048 blocks) and under the default again.
    from pdtune import switches

    spec = load_model("llama-4-scout-17b-16e")
    first = plan_state(spec, max_model_len=L, tp=1)
    with switches.vllm_environment({"VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE": "0"}):
        off = plan_state(spec, max_model_len=L, tp=1)
    again = plan_state(spec, max_model_len=L, tp=1)
    assert first.pool_blocks_per_request == 6656 and len(first.groups) == 4
    assert groups(off) == [("full_attention", 48, 0, 2048)]
    assert again is first  # asked again under the same environment: the kept plan
    # a refused question is refused every time, never answered from the cache
    for _ in range(2):
        with pytest.raises(InputError):
            plan_state(spec, max_model_len=L, tp=3)
