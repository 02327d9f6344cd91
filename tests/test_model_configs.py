"""The real published configs bundled in data/models/ (README there: where each came from), read and planned.

Each test pins the layer kinds pdtune reads from the file and one per-request byte count worked out by hand,
in the comment above it, from the config's fields and the vLLM 0.33 rule it follows (file and function named;
``kv_cache_interface.py`` is ``vllm/v1/kv_cache_interface.py``, ``kv_cache_planning.py`` is
``vllm/v1/core/kv_cache_planning.py``). ``plan_state`` defaults: bf16 KV (2 B per element), 16-token blocks,
no prefix caching (one block per recurrent state), ``max_num_batched_tokens`` 8192 with async scheduling, so
``VllmConfig.max_in_flight_tokens`` = 2 x 8192 = 16,384 (config/vllm.py).

A SHA-256 per file keeps the bytes the README describes: a changed file must come with a changed README.
"""

from __future__ import annotations

import hashlib
import json
from fractions import Fraction
from pathlib import Path

import pytest

from pdtune.cli import main
from pdtune.errors import InputError
from pdtune.model import LayerKind, load_model
from pdtune.model.load import spec_from_config
from pdtune.precision import checkpoint_formats
from pdtune.paths import clusters_dir, models_dir
from pdtune.state import StatePlan, plan_state
from pdtune.units import cdiv

TPS = (1, 2, 4, 8)
L = 8192

#: folder -> SHA-256 of its config.json, as its README states.
SHA256 = {
    "mistral-7b-v0.1": "cf25cdf4719f181d1d1d371973285d9afe9afde0d0c6a6fd48de857555ce1e0d",
    "qwen3-235b-a22b-fp8": "f666a1099576294bf252b16a899d415425663ed1930b1482967ddd30b085bbc4",
    "gemma-2-9b-it": "cac169434e5ca8e9cfaa0de6e0fc6ab65643b5505fe5a17699d36cf29a9bbca1",
    "gemma-3-27b-it": "cabd884f5e0d4f01a5bd7fe14bd4bacd0bd83f3725a02acbdc4e72dc001835fa",
    "lfm2.5-vl-1.6b": "fbda22b139d38119d8548135b115ec5ec980202392d237267b9cd210da24a51e",
    "phi-3-mini-4k-instruct": "d81d79531772a0cafe4615997c659cbf53b831622daed49494b4a6937eef9dd3",
    "qwen3.5-397b-a17b": "d544b09c0613c709540e749228a7f8144d4e67404a09a45c882a23efa2d8ee0a",
}


def groups(plan: StatePlan) -> list[tuple[str, int, int, int]]:
    """(kind, real layers, padding slots, blocks per request) of each KV cache group."""
    return [(str(g.kind), len(g.layers) - g.padding_layers, g.padding_layers, g.blocks_per_request)
            for g in plan.groups]


@pytest.mark.parametrize("name", sorted(SHA256))
def test_bundled_file_is_the_one_the_readme_describes(name: str) -> None:
    folder = models_dir() / name
    data = (folder / "config.json").read_bytes()
    assert hashlib.sha256(data).hexdigest() == SHA256[name]
    assert SHA256[name] in (folder / "README.md").read_text(encoding="utf-8")


# ------------------------------------------------------------------ mistral: model-wide window, every layer


@pytest.mark.parametrize("tp", TPS)
def test_mistral_7b_v01_every_layer_slides(tp: int) -> None:
    # sliding_window 4096, no layer_types: llama.py LlamaAttention passes no per-layer window and
    # layers/attention/attention.py Attention takes cache_config.sliding_window -> 32 SlidingWindowSpec layers.
    # kv_cache_interface.py SlidingWindowSpec.max_admission_blocks_per_request:
    #   cdiv(min(4096 - 1 + 16384, 8192), 16) + 1 = 512 + 1 = 513 blocks per layer.
    # Page (AttentionSpec.page_size_bytes) = 16 x 2 (K, V) x (8 / tp) KV heads x 128 x 2 B = 65536 / tp B.
    # TP 1: 513 x 32 x 65536 = 1,075,838,976 B.
    spec = load_model("mistral-7b-v0.1")
    assert spec.layer_kinds == (LayerKind.SLIDING_ATTENTION,) * 32 and spec.attention.sliding_window == 4096
    plan = plan_state(spec, max_model_len=L, tp=tp)
    assert groups(plan) == [("sliding_attention", 32, 0, 513)]
    assert plan.bytes_per_request == 513 * 32 * (16 * 2 * (8 // tp) * 128 * 2)
    if tp == 1:
        assert plan.bytes_per_request == 1_075_838_976


# ------------------------------------------------------------------ Qwen3-235B-A22B-FP8: full attention, fp8


@pytest.mark.parametrize("tp", TPS)
def test_qwen3_235b_fp8_full_attention(tp: int) -> None:
    # qwen3_moe.py Qwen3MoeAttention: plain Attention in all 94 layers (use_sliding_window false). 4 KV heads:
    # linear.py QKVParallelLinear replicates a head when tp > 4, so max(1, 4 / tp) heads per rank.
    # kv_cache_interface.py FullAttentionSpec: cdiv(8192, 16) = 512 blocks; page 16 x 2 x heads x 128 x 2 B.
    # TP 1: 512 x 94 x 32768 = 1,577,058,304 B. The fp8 checkpoint does not change the KV dtype: its
    # quantization_config (quant_method fp8, 128 x 128 blocks) is weights only, so auto KV stays bf16.
    spec = load_model("qwen3-235b-a22b-fp8")
    assert spec.layer_kinds == (LayerKind.FULL_ATTENTION,) * 94
    assert spec.weights.name == "fp8-block" and spec.kv_cache_quant_algo is None
    plan = plan_state(spec, max_model_len=L, tp=tp)
    heads = max(1, 4 // tp)
    assert groups(plan) == [("full_attention", 94, 0, 512)]
    assert plan.bytes_per_request == 512 * 94 * (16 * 2 * heads * 128 * 2)
    if tp == 1:
        assert plan.bytes_per_request == 1_577_058_304


def test_qwen3_235b_fp8_matches_the_silicon_rows(capsys: pytest.CaptureFixture[str]) -> None:
    # perfmodel/validation.py select_rows keeps rows whose model id's last path component, lower-cased, is the
    # bundled name: Qwen/Qwen3-235B-A22B-FP8 -> qwen3-235b-a22b-fp8 (51 vLLM rows on h200_sxm).
    silicon = clusters_dir() / "aiconfigurator-silicon" / "silicon_sample.csv"
    assert main(["validate", str(silicon), "--model", "qwen3-235b-a22b-fp8", "--gpu", "h200", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["rows_used"] == 51 and out["rows_predicted"] == 51 and not out["unpredicted"]
    # The H200 defaults were fitted on these very rows: each is marked in-sample, none is scored.
    assert out["rows_fitted_on"] == 51 and out["in_sample_share"] == 1.0 and out["points"] == []
    assert {(r["model"], r["mode"]) for r in out["fitted_on"]} == {("Qwen/Qwen3-235B-A22B-FP8", "agg")}


# ------------------------------------------------------------------ gemma-2-9b-it: every other layer slides


@pytest.mark.parametrize("tp", TPS)
def test_gemma2_9b_slides_every_even_layer(tp: int) -> None:
    # No layer_types in the file: transformers configuration_gemma2.py Gemma2Config writes
    # "sliding_attention" if (i + 1) % 2 else "full_attention", so layers 0, 2, ..., 40 slide (window 4096,
    # gemma2.py Gemma2Attention: is_sliding = config.layer_types[layer_idx] == "sliding_attention").
    # kv_cache_planning.py _get_kv_cache_groups_uniform_page_size: 21 sliding and 21 full, group size 21,
    # so one group each. SlidingWindowSpec: cdiv(min(4095 + 16384, 8192), 16) + 1 = 513; FullAttentionSpec:
    # cdiv(8192, 16) = 512. Page 16 x 2 x (8 / tp) x 256 x 2 B = 131072 / tp; pool page = 21 layers x page.
    # TP 1: (513 + 512) x 21 x 131072 = 1025 x 2,752,512 = 2,821,324,800 B.
    spec = load_model("gemma-2-9b-it")
    kinds = spec.layer_kinds
    assert spec.model_type == "gemma2" and len(kinds) == 42 and spec.attention.sliding_window == 4096
    assert [i for i, k in enumerate(kinds) if k is LayerKind.SLIDING_ATTENTION] == list(range(0, 42, 2))
    plan = plan_state(spec, max_model_len=L, tp=tp)
    assert sorted(groups(plan)) == [("full_attention", 21, 0, 512), ("sliding_attention", 21, 0, 513)]
    assert plan.bytes_per_request == (513 + 512) * 21 * (16 * 2 * (8 // tp) * 256 * 2)
    if tp == 1:
        assert plan.bytes_per_request == 2_821_324_800


# ------------------------------------------------------------------ gemma-3-27b-it: interleaved windows


@pytest.mark.parametrize("tp", TPS)
def test_gemma3_27b_interleaves_five_sliding_one_full(tp: int) -> None:
    # The file's text_config has no layer_types and no sliding_window_pattern: transformers 5.20
    # configuration_gemma3.py Gemma3TextConfig.__post_init__ writes layer_types with pattern 6, so layers
    # 5, 11, ..., 59 (every sixth) are full: 10 full + 52 sliding (window 1024, gemma3.py Gemma3Attention).
    # kv_cache_planning.py _get_kv_cache_groups_uniform_page_size: group size = min(52, 10) = 10 (52 is not
    # < 1.5 x 10); sliding cdiv(52, 10) = 6 groups of layers[i::6] = 9, 9, 9, 9, 8, 8 (8 padding slots).
    # SlidingWindowSpec: cdiv(min(1023 + 16384, 8192), 16) + 1 = 513; FullAttentionSpec 512.
    # Page 16 x 2 x (16 / tp) x 128 x 2 B = 131072 / tp; pool page = 10 layers x page.
    # TP 1: (6 x 513 + 512) x 10 x 131072 = 3590 x 1,310,720 = 4,705,484,800 B.
    spec = load_model("gemma-3-27b-it")
    assert spec.model_type == "gemma3" and spec.text_model_type == "gemma3_text"
    kinds = spec.layer_kinds
    assert [i for i, k in enumerate(kinds) if k is LayerKind.FULL_ATTENTION] == list(range(5, 62, 6))
    assert kinds.count(LayerKind.SLIDING_ATTENTION) == 52 and spec.attention.sliding_window == 1024
    plan = plan_state(spec, max_model_len=L, tp=tp)
    assert groups(plan) == [("sliding_attention", 9, 1, 513)] * 4 + [("sliding_attention", 8, 2, 513)] * 2 + [
        ("full_attention", 10, 0, 512)]
    assert plan.bytes_per_request == (6 * 513 + 512) * 10 * (16 * 2 * (16 // tp) * 128 * 2)
    if tp == 1:
        assert plan.bytes_per_request == 4_705_484_800


def test_gemma3_fields_the_file_leaves_out_come_from_the_config_class() -> None:
    # READER FIX: google/gemma-3-27b-it's text_config names neither vocab_size nor max_position_embeddings.
    # vLLM reads Gemma3TextConfig (transformers 5.20), whose defaults are vocab_size 262,208,
    # max_position_embeddings 131,072 (already RoPE-scaled: config/model.py _get_and_verify_max_len skips the
    # factor for gemma3) and tied embeddings; pdtune used to stop at "vocab_size: missing".
    spec = load_model("gemma-3-27b-it")
    assert spec.vocab_size == 262_208 and spec.max_length.tokens == 131_072 and spec.tie_word_embeddings
    # A value the file does give wins over the class default.
    raw = json.loads((models_dir() / "gemma-3-27b-it" / "config.json").read_text(encoding="utf-8"))
    raw["text_config"] = {**raw["text_config"], "vocab_size": 1000, "max_position_embeddings": 4096}
    spec = spec_from_config(raw, source="edited.json")
    assert spec.vocab_size == 1000 and spec.max_length.tokens == 4096


# ------------------------------------------------------------------ LFM2.5-VL-1.6B: short conv + attention


@pytest.mark.parametrize("tp", TPS)
def test_lfm2_vl_text_model_short_conv(tp: int) -> None:
    # READER FIX: the lfm2_vl wrapper is read by its text_config (lfm2): lfm2_vl.py builds the registered
    # Lfm2ForCausalLM from config.text_config. layer_types: 10 conv + 6 full_attention (layers 2, 5, 8, 10, 12, 14).
    # Lfm2VLForConditionalGeneration.get_mamba_state_shape_from_config -> mamba_utils.py short_conv_state_shape:
    # (conv_L_cache - 1, hidden_size / tp) = (2, 2048 / tp) x 2 B = 8192 / tp B (conv_dim is 2048 too).
    # Attention page 16 x 2 x (8 / tp) x 64 x 2 B = 32768 / tp; the conv state is padded to it.
    # kv_cache_planning.py: group size 6 (10 is not < 1.5 x 6); conv layers[0::2], layers[1::2] = 5 + 5, one
    # padding slot each; no prefix caching: 1 block per state; attention cdiv(8192, 16) = 512.
    # TP 1: (1 + 1 + 512) x 6 x 32768 = 514 x 196,608 = 101,056,512 B.
    spec = load_model("lfm2.5-vl-1.6b")
    assert spec.model_type == "lfm2_vl" and spec.text_model_type == "lfm2"
    full = [i for i, k in enumerate(spec.layer_kinds) if k is LayerKind.FULL_ATTENTION]
    assert full == [2, 5, 8, 10, 12, 14] and spec.count(LayerKind.SHORT_CONV) == 10
    plan = plan_state(spec, max_model_len=L, tp=tp)
    assert plan.recurrent_page is not None and plan.recurrent_page.state_bytes == 8192 // tp
    assert groups(plan) == [("short_conv", 5, 1, 1)] * 2 + [("full_attention", 6, 0, 512)]
    assert plan.bytes_per_request == 514 * 6 * (32768 // tp)
    if tp == 1:
        assert plan.bytes_per_request == 101_056_512


# ------------------------------------------------------------------ Phi-3-mini-4k: model-wide window 2047


@pytest.mark.parametrize("tp", TPS)
def test_phi3_mini_every_layer_slides(tp: int) -> None:
    # sliding_window 2047 and no layer_types: phi3.py is llama.py's LlamaForCausalLM, so as for Mistral every
    # layer is a SlidingWindowSpec. max_position_embeddings 4096 caps max_model_len (below).
    # cdiv(min(2047 - 1 + 16384, 4096), 16) + 1 = 256 + 1 = 257 blocks per layer. head_dim = 3072 / 32 = 96:
    # page 16 x 2 x (32 / tp) x 96 x 2 B = 196608 / tp. TP 1 at 4096: 257 x 32 x 196608 = 1,616,904,192 B.
    spec = load_model("phi-3-mini-4k-instruct")
    assert spec.layer_kinds == (LayerKind.SLIDING_ATTENTION,) * 32 and spec.attention.sliding_window == 2047
    plan = plan_state(spec, max_model_len=4096, tp=tp)
    assert groups(plan) == [("sliding_attention", 32, 0, cdiv(4096, 16) + 1)]
    assert plan.bytes_per_request == 257 * 32 * (196_608 // tp)
    if tp == 1:
        assert plan.bytes_per_request == 1_616_904_192


def test_phi3_mini_refuses_8k(capsys: pytest.CaptureFixture[str]) -> None:
    # config/model.py _get_and_verify_max_len: 8192 > max_position_embeddings 4096 (no rope_scaling) -> vLLM
    # refuses to start; pdtune says so in one line naming the file and the field, exit 2.
    with pytest.raises(InputError):
        plan_state(load_model("phi-3-mini-4k-instruct"), max_model_len=8192)
    assert main(["state", "phi-3-mini-4k-instruct", "--max-model-len", "8192"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "phi-3-mini-4k-instruct/config.json" in err[0] and "max_position_embeddings" in err[0]


# ------------------------------------------------------------------ every new folder plans from the CLI


@pytest.mark.parametrize("name", sorted(SHA256))
@pytest.mark.parametrize("tp", TPS)
def test_state_cli_plans_every_new_config(name: str, tp: int, capsys: pytest.CaptureFixture[str]) -> None:
    length = 4096 if name == "phi-3-mini-4k-instruct" else L  # the 4k model's own limit
    assert main(["state", name, "--max-model-len", str(length), "--tp", str(tp), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["tp"] == tp and out["bytes_per_request"] > 0 and out["groups"]


@pytest.mark.parametrize("nested", [False, True], ids=["config-json-form", "hf-quant-config-form"])
def test_a_modelopt_fp8_release_and_its_kv_cache_by_vllm_line(tmp_path: Path, nested: bool) -> None:
    # NVIDIA's FP8 release of Llama-3.1-8B: quantization_config quant_method modelopt, quant_algo FP8,
    # kv_cache_quant_algo FP8, flat (config.json's form) or under "quantization" (hf_quant_config.json's).
    # Weights: modelopt.py ModelOptFp8Config, one byte a weight. KV cache: from vLLM 0.14.0,
    # EngineArgs.create_engine_config resolves --kv-cache-dtype auto to the declared FP8
    # (resolve_kv_cache_dtype_string, vllm/utils/torch_utils.py); the 0.13.0 and 0.12.0 wheels have no such
    # function and auto is the model dtype. By hand: 32 layers x 8 KV heads x 128 x 2 (K and V) = 65,536
    # values a token; 9,216 tokens x 65,536 = 603,979,776 B in FP8, 1,207,959,552 B in BF16.
    raw = json.loads(Path(load_model("llama-3.1-8b").source).read_text(encoding="utf-8"))
    algo = {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8"}
    raw["quantization_config"] = {"quant_method": "modelopt", **({"quantization": algo} if nested else algo)}
    spec = spec_from_config(raw, source="nvidia-llama-fp8/config.json", name="llama-fp8")
    assert spec.weights.name == "fp8" and spec.weights.dense == 1 and spec.kv_cache_quant_algo == "fp8_e4m3"

    def per_request(vllm: str, kv: str = "auto") -> int:
        return plan_state(spec, max_model_len=9216, kv_cache_dtype=kv, vllm=vllm).bytes_per_request

    assert per_request("0.13") == per_request("0.11") == 9216 * 65536 * 2 == 1_207_959_552
    assert per_request("0.14") == per_request("0.33") == 9216 * 65536 == 603_979_776
    assert per_request("0.33", "bfloat16") == 1_207_959_552  # a dtype given is the dtype used


def test_a_modelopt_nvfp4_release_quantizes_the_attention_unless_it_is_excluded() -> None:
    # modelopt NVFP4: 4-bit values and one fp8 scale per 16 = 9/16 B a weight. NVIDIA's dense releases exclude
    # only lm_head, so every linear layer is NVFP4; the article's model excludes "*self_attn*" (its config in
    # data/models/qwen3.8-2.4t), so only the experts are, the rest bf16 (2 B).
    raw = json.loads(Path(load_model("llama-3.1-8b").source).read_text(encoding="utf-8"))
    raw["quantization_config"] = {"quant_method": "modelopt",
                                  "quantization": {"quant_algo": "NVFP4", "exclude_modules": ["lm_head"]}}
    assert spec_from_config(raw, name="llama-fp4").weights.dense == Fraction(9, 16)
    raw["quantization_config"]["quantization"]["exclude_modules"].append("model.layers.*.self_attn*")
    assert spec_from_config(raw, name="llama-fp4").weights.dense == 2
    article = load_model("qwen3.8-2.4t").weights
    assert article.dense == 2 and article.experts == Fraction(9, 16)


@pytest.mark.parametrize(("quantization", "name", "per_weight"), [
    # awq.py AWQConfig: 4-bit weights; per group of 128 input rows, an fp16 scale and a 4-bit zero point for each
    # output column: 1/2 + (2 + 1/2) / 128 = 133/256 B a weight.
    ({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"},
     "int4-awq-g128", Fraction(133, 256)),
    # gptq.py GPTQConfig: the same packing (qweight, qzeros, scales); g_idx's 4 B a row is not counted.
    ({"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False}, "int4-gptq-g128",
     Fraction(133, 256)),
    # compressed-tensors w4a16 of a dense model (only lm_head ignored): 1/2 + 2/128 = 33/64 on every linear layer.
    ({"quant_method": "compressed-tensors", "ignore": ["lm_head"], "config_groups": {"group_0": {
        "targets": ["Linear"], "weights": {"num_bits": 4, "group_size": 128, "type": "int"}}}},
     "int4-g128", Fraction(33, 64)),
])
def test_int4_group_checkpoints_quantize_every_linear_layer(quantization: dict, name: str,
                                                           per_weight: Fraction) -> None:
    """AWQ, GPTQ and compressed-tensors w4a16 releases of a dense model (Llama-3.1-8B): the linear layers at the
    packed size, the embeddings and lm_head in bf16, and the matmuls in BF16 (the w4a16 kernels). They were
    refused ("unsupported quantization 'awq'") or counted at BF16 with FP4 math."""
    raw = json.loads(Path(load_model("llama-3.1-8b").source).read_text(encoding="utf-8"))
    spec = spec_from_config({**raw, "quantization_config": quantization}, name="llama-int4")
    assert spec.weights.name == name and spec.weights.dense == spec.weights.experts == per_weight
    assert spec.weights.embedding == 2
    assert [f.name for f in checkpoint_formats(spec)] == ["int4-w4a16", "int4-w4a16"]
    # Kimi-K2.5 leaves its attention out ("re:.*self_attn.*"): int4 experts, bf16 dense, as before
    kimi = load_model("kimi-k2.5")
    assert kimi.weights.dense == 2 and kimi.weights.experts == Fraction(9, 16)
