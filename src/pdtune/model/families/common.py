"""Readers shared by every family: attention heads, MoE blocks, weight formats, MTP layers."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from pdtune import limits
from pdtune.errors import InputError, brief
from pdtune.model.config import Config
from pdtune.model.spec import AttentionShape, MoEShape, WeightFormat, dtype_bytes


def attention_shape(cfg: Config, *, output_gate: bool = False, sliding_window: int | None = None,
                    heads_key: str = "num_attention_heads", kv_key: str = "num_key_value_heads",
                    head_dim_key: str = "head_dim") -> AttentionShape:
    heads = cfg.int(heads_key)
    kv = cfg.int(kv_key, heads)
    if heads % kv:
        raise InputError(cfg.source, kv_key, f"{kv} does not divide {heads_key} {heads}")
    if cfg.has(head_dim_key):
        head_dim = cfg.int(head_dim_key)
    else:
        hidden = cfg.int("hidden_size")
        if hidden % heads:
            raise InputError(cfg.source, "head_dim", f"missing, and hidden_size is not a multiple of {heads_key}")
        head_dim = hidden // heads
    return AttentionShape(heads, kv, head_dim, output_gate, sliding_window)


def moe_shape(cfg: Config, *, experts_key: str = "num_experts", expert_size_key: str = "moe_intermediate_size",
              top_k_key: str = "num_experts_per_tok", dense_below: int | None = None) -> MoEShape | None:
    """The routed experts, or None for a model without them.

    ``dense_below``: an expert count below which the family's layers are dense MLPs, as its vLLM model tests
    it (Qwen2/3-MoE and Qwen3-Next ``num_experts > 0``, Granite-4.0-H ``num_local_experts > 0``: 1; Jamba
    ``num_experts > 1``: 2). Without it the family always builds its experts, so a count below 1 cannot load.
    Every family routes each token to ``num_experts_per_tok`` of them: at least 1, at most the count.
    """
    if not cfg.has(experts_key):
        return None
    experts = cfg.int(experts_key, minimum=0)
    if dense_below is not None and experts < dense_below:
        return None
    if experts < 1:
        raise InputError(cfg.source, experts_key, f"{experts} experts: this family's MoE layers always route to "
                                                  "experts (a dense model leaves the key out)")
    shared = 0
    if cfg.has("shared_expert_intermediate_size"):
        shared = cfg.int("shared_expert_intermediate_size", minimum=0)
    elif cfg.has("n_shared_experts"):
        shared = cfg.int("n_shared_experts", minimum=0) * cfg.int(expert_size_key)
    elif cfg.has("num_shared_experts"):
        shared = cfg.int("num_shared_experts", minimum=0) * cfg.int(expert_size_key)
    elif cfg.has("shared_intermediate_size"):  # granitemoehybrid
        shared = cfg.int("shared_intermediate_size", minimum=0)
    top_k = top_k_key if cfg.has(top_k_key) else "num_experts_per_token"
    per_token = cfg.int(top_k)
    if per_token > experts:
        raise InputError(cfg.source, top_k, f"{per_token} experts per token, but {experts_key} is {experts}: a token "
                                            "cannot be routed to more experts than the model has")
    return MoEShape(
        num_experts=experts,
        experts_per_token=per_token,
        expert_intermediate_size=cfg.int(expert_size_key) if cfg.has(expert_size_key) else cfg.int("intermediate_size"),
        shared_intermediate_size=shared,
        shared_expert_gate=shared > 0 and str(cfg.raw.get("model_type", "")).startswith("qwen"),
    )


def weight_format(cfg: Config, dtype: str) -> WeightFormat:
    """Bytes per parameter per weight class, from ``quantization_config``.

    Block-scaled formats carry their scales: FP8 with 128x128 fp32 block scales (DeepSeek-V3) costs
    1 + 4/16384 B; NVFP4 (4-bit values, one fp8 scale per 16) 9/16 B; MXFP4 (one e8m0 scale per 32) 17/32 B.
    """
    base = Fraction(dtype_bytes(dtype, cfg.source, "torch_dtype"))
    q = cfg.outer.get("quantization_config") or cfg.raw.get("quantization_config")
    if not isinstance(q, dict):
        return WeightFormat(base, base, base, name=dtype)
    method = str(q.get("quant_method", "")).lower()
    # a modelopt config nests its algorithm under "quantization" (hf_quant_config.json's form) or not
    inner = q.get("quantization") if method == "modelopt" and isinstance(q.get("quantization"), dict) else q
    algo = str(inner.get("quant_algo", "")).upper()
    if method == "fp8":
        block = q.get("weight_block_size") or [128, 128]
        field = "quantization_config.weight_block_size"
        if not isinstance(block, list) or len(block) != 2:
            raise InputError(cfg.source, field, f"must be [rows, columns] of one scale block, got {brief(block)}")
        rows, cols = (limits.whole_number(b, cfg.source, field, maximum=limits.MAX_WIDTH) for b in block)
        per = Fraction(1) + Fraction(4, rows * cols)
        return WeightFormat(per, per, base, name="fp8-block")
    if method == "mxfp4":
        # gpt-oss: only the routed experts are MXFP4; attention, router and embeddings stay bf16.
        return WeightFormat(base, Fraction(17, 32), base, name="mxfp4-experts")
    if method == "modelopt" and algo in ("FP8", "FP8_PER_CHANNEL_PER_TOKEN"):
        # NVIDIA's FP8 releases (ModelOptFp8Config): one byte a weight and a scale per tensor or per output
        # channel (4 B a row of thousands of weights, at most 0.1 %: not counted); embeddings stay in the dtype.
        return WeightFormat(Fraction(1), Fraction(1), base, name="fp8")
    if method == "modelopt" and algo == "FP8_PB_WO":  # FP8 weights with 128x128 fp32 block scales
        per = Fraction(1) + Fraction(4, 128 * 128)
        return WeightFormat(per, per, base, name="fp8-block")
    if method == "modelopt" and algo == "NVFP4" or method == "nvfp4":
        # Experts only when the attention is left in the dtype (the article's model: "*self_attn*"); NVIDIA's
        # dense releases exclude only lm_head and quantize every linear layer.
        excluded = inner.get("exclude_modules") or inner.get("ignore")
        experts_only = bool(inner.get("experts_only", False)) or _keeps_attention(excluded)
        nvfp4 = Fraction(9, 16)
        return WeightFormat(base if experts_only else nvfp4, nvfp4, base, name="nvfp4")
    if method == "compressed-tensors":
        return _compressed_tensors(cfg, q, base)
    if method in ("awq", "gptq"):
        return _int_groups(cfg, q, method, base)
    raise InputError(cfg.source, "quantization_config.quant_method", f"unsupported quantization {method or algo!r}")


def _keeps_attention(excluded: Any) -> bool:
    """Whether a quantization config's list of modules left unquantized names the attention (``*self_attn*``):
    then only the experts (and other MLPs) are quantized, else every linear layer but the ones it lists."""
    return isinstance(excluded, list) and any("attn" in str(m) for m in excluded)


def _compressed_tensors(cfg: Config, q: dict[str, Any], base: Fraction) -> WeightFormat:
    """compressed-tensors int4 group quantization: 4 bits plus a bf16 scale per group, on the experts only when
    the config leaves the attention out (Kimi-K2.5), else on every linear layer (the w4a16 releases of dense
    models, which leave out only lm_head)."""
    groups = q.get("config_groups") or {}
    for group in groups.values() if isinstance(groups, dict) else []:
        weights = group.get("weights") if isinstance(group, dict) else None
        if isinstance(weights, dict) and weights.get("num_bits") == 4:
            size = limits.whole_number(weights.get("group_size") or 32, cfg.source,
                                       "quantization_config.config_groups.weights.group_size",
                                       maximum=limits.MAX_WIDTH)
            int4 = Fraction(1, 2) + Fraction(2, size)
            dense = base if _keeps_attention(q.get("ignore")) else int4
            return WeightFormat(dense, int4, base, name=f"int4-g{size}")
        if isinstance(weights, dict) and weights.get("num_bits") == 8:
            return WeightFormat(Fraction(1), Fraction(1), base, name="int8/fp8")
    raise InputError(cfg.source, "quantization_config.config_groups", "no weight scheme pdtune understands")


def _int_groups(cfg: Config, q: dict[str, Any], method: str, base: Fraction) -> WeightFormat:
    """AWQ and GPTQ (vLLM's awq.py / gptq.py configs): ``bits``-bit weights, and per group of ``group_size`` input
    rows an fp16 scale and a ``bits``-bit zero point for each output column (GPTQ's per-row g_idx, 4 B a row of
    thousands of weights, is not counted); group_size -1 is one group per column (scales negligible)."""
    bits = limits.whole_number(q.get("bits", q.get("w_bit", 4)), cfg.source, "quantization_config.bits",
                               maximum=8)
    if bits not in (4, 8):
        raise InputError(cfg.source, "quantization_config.bits", f"{bits}-bit {method} is not a format pdtune "
                                                                 "knows (4 or 8)")
    size = q.get("group_size", q.get("q_group_size", 128))
    if size != -1:
        size = limits.whole_number(size, cfg.source, "quantization_config.group_size", maximum=limits.MAX_WIDTH)
    per = Fraction(bits, 8) + ((Fraction(2) + Fraction(bits, 8)) / size if size != -1 else 0)
    return WeightFormat(per, per, base, name=f"int{bits}-{method}-g{size}")  # embeddings stay in the dtype


def mtp_layers(cfg: Config, default: int = 0) -> int:
    for key in ("num_nextn_predict_layers", "mtp_num_hidden_layers"):
        if cfg.has(key):
            return cfg.int(key, minimum=0)
    return default


def model_dtype(cfg: Config) -> str:
    dtype = cfg.str("torch_dtype", cfg.raw.get("dtype", "bfloat16"))  # transformers 5 writes "dtype"
    dtype_bytes(dtype, cfg.source, "torch_dtype")
    return dtype
