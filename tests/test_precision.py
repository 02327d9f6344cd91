"""Weight formats: the bytes a served model streams and the math it multiplies in, from the run or the flag."""

from __future__ import annotations

from fractions import Fraction

import pytest

from pdtune.errors import InputError
from pdtune.model import load_model
from pdtune.perfmodel import model_costs
from pdtune.precision import checkpoint_formats, parse_weights_dtype, requantized, served_weights


def test_checkpoint_formats_from_quantization_config() -> None:
    assert [f.name for f in checkpoint_formats(load_model("gpt-oss-120b"))] == ["bf16", "mxfp4"]
    assert [f.name for f in checkpoint_formats(load_model("deepseek-v3"))] == ["fp8-block", "fp8-block"]
    # Kimi-K2.5 ships INT4 experts (group 32, bf16 scales: 4/8 + 2/32 = 9/16 B) that multiply in BF16.
    kimi = load_model("kimi-k2.5")
    assert [f.name for f in checkpoint_formats(kimi)] == ["bf16", "int4-w4a16"]
    assert model_costs(kimi).expert_dtype == "bf16"


def test_a_run_in_the_checkpoints_family_keeps_the_checkpoint() -> None:
    # aiconfigurator labels gpt-oss "nvfp4"; vLLM loads the MXFP4 checkpoint (attention stays BF16).
    spec = load_model("gpt-oss-120b")
    served, note = served_weights(spec, "nvfp4", "nvfp4")
    assert served is spec and "checkpoint" in note


def test_quantized_variants_of_a_bf16_release() -> None:
    llama = load_model("llama-3.1-70b")
    fp8, _ = served_weights(llama, "fp8", "fp8")
    assert fp8.weights.dense == Fraction(1) and fp8.weights.embedding == llama.weights.embedding
    assert model_costs(fp8).dense_dtype == "fp8" and requantized(llama, fp8)
    fp4, _ = served_weights(llama, "nvfp4", "nvfp4")
    assert fp4.weights.dense == Fraction(9, 16) and model_costs(fp4).dense_dtype == "fp4"


def test_an_nvfp4_variant_of_an_int4_or_fp8_moe_quantizes_the_experts() -> None:
    kimi, minimax = load_model("kimi-k2.5"), load_model("minimax-m2.5")
    served, _ = served_weights(kimi, "nvfp4", "nvfp4")
    assert [f.name for f in checkpoint_formats(served)] == ["bf16", "nvfp4"]
    assert model_costs(served).expert_dtype == "fp4" and not requantized(kimi, served)
    served, _ = served_weights(minimax, "nvfp4", "nvfp4")
    assert [f.name for f in checkpoint_formats(served)] == ["fp8-block", "nvfp4"]


def test_weights_dtype_flag() -> None:
    spec = load_model("qwen3-32b")
    assert parse_weights_dtype("fp8", spec).weights.dense == Fraction(1)
    moe = parse_weights_dtype("dense=bf16,experts=int4-w4a16", load_model("qwen3-235b-a22b"))
    assert moe.weights.experts == Fraction(9, 16) and model_costs(moe).expert_dtype == "bf16"
    with pytest.raises(InputError) as err:
        parse_weights_dtype("int3", spec)
    assert err.value.field == "weights" and err.value.source == "--weights"
