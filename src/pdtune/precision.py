"""Weight formats by name: bytes per parameter, the math they run in, and the format a measured run served.

A checkpoint's ``quantization_config`` says how its weights are stored (:func:`pdtune.model.load_model` reads
it into a :class:`~pdtune.model.WeightFormat`). A benchmark may have served the same model in another format:
an FP8 or NVFP4 variant of a BF16 release, an NVFP4 variant of an INT4 one. This module names the formats
pdtune knows and builds the :class:`~pdtune.model.WeightFormat` of such a run, so the performance model streams
the bytes the GPU really read and multiplies in the format it really used:

==================  ===========================  ==============  =========================================
name                bytes per parameter          math            what it is
==================  ===========================  ==============  =========================================
``bf16``            2                            bf16            unquantized (also ``fp16``)
``fp8``             1                            fp8             per-tensor or per-channel FP8 (ModelOpt,
                                                                 vLLM's online ``--quantization fp8``)
``fp8-block``       1 + 4/16384                  fp8             FP8 with one fp32 scale per 128 x 128 block
``nvfp4``           9/16 (one fp8 scale per 16)  fp4             NVFP4
``mxfp4``           17/32 (one e8m0 per 32)      fp4             MXFP4 (gpt-oss)
``int4-w4a16``      9/16 (one bf16 scale per 32) bf16            INT4 weights, 16-bit activations
                                                                 (compressed-tensors ``int4_wo``)
==================  ===========================  ==============  =========================================

Embeddings, the lm_head, norms and routers stay in the model dtype in every format, as the checkpoints do.
A :class:`WeightFormat` built here is named ``<dense>+<experts>-experts`` (or ``<dense>`` for a dense model), which
is how :func:`math_format` knows that INT4 weights multiply in BF16.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction

from pdtune.errors import InputError
from pdtune.model import ModelSpec, WeightFormat


@dataclass(frozen=True)
class Format:
    name: str
    bytes_per_param: Fraction
    math: str  # tensor-core format of the matmul: bf16, fp8 or fp4
    family: str  # formats of one family are the same serving choice (NVFP4 and MXFP4 are both FP4)


FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        Format("bf16", Fraction(2), "bf16", "bf16"),
        Format("fp16", Fraction(2), "bf16", "bf16"),
        Format("fp8", Fraction(1), "fp8", "fp8"),
        Format("fp8-block", Fraction(1) + Fraction(4, 128 * 128), "fp8", "fp8"),
        Format("nvfp4", Fraction(9, 16), "fp4", "fp4"),
        Format("mxfp4", Fraction(17, 32), "fp4", "fp4"),
        Format("int4-w4a16", Fraction(9, 16), "bf16", "int4"),
    )
}

#: aiconfigurator's quant modes (``gemm_quant_mode``, ``moe_quant_mode``, ``precision``) -> pdtune formats.
QUANT_MODES: dict[str, str] = {
    "bf16": "bf16",
    "bfloat16": "bf16",
    "float16": "fp16",
    "fp16": "fp16",
    "fp8": "fp8",
    "fp8_block": "fp8-block",
    "fp8-block": "fp8-block",
    "nvfp4": "nvfp4",
    "fp4": "nvfp4",
    "mxfp4": "mxfp4",
    "w4a16_mxfp4": "mxfp4",
    "int4_wo": "int4-w4a16",
    "int4": "int4-w4a16",
    "int4-w4a16": "int4-w4a16",
    "w4a16": "int4-w4a16",
}


#: What ``--weights`` (and a parameters file's ``weights:``) takes: one line, for every command's help.
WEIGHTS_HELP = ("the checkpoint's weight format when its config says another (Kimi-K2's says bf16, its weights are "
                "FP8): bf16, fp8, fp8-block, nvfp4, mxfp4, int4-w4a16, or dense=FMT,experts=FMT "
                "(default: what the config's quantization_config says)")


def lookup(name: str, source: str = "--weights", field: str = "weights") -> Format:
    key = str(name).strip().lower()
    key = QUANT_MODES.get(key, key)
    if key not in FORMATS:
        known = ", ".join(sorted(FORMATS))
        raise InputError(source, field, f"unknown weight format {name!r}; known: {known}")
    return FORMATS[key]


def _format_of(bytes_per_param: Fraction) -> Format:
    """The known format with these bytes per parameter (NVFP4 for 9/16: its math is the FP4 one)."""
    for fmt in FORMATS.values():
        if fmt.bytes_per_param == bytes_per_param and fmt.name not in ("fp16", "int4-w4a16"):
            return fmt
    if bytes_per_param >= 2:
        return FORMATS["bf16"]
    return FORMATS["fp8"] if bytes_per_param >= 1 else FORMATS["nvfp4"]


def checkpoint_formats(spec: ModelSpec) -> tuple[Format, Format]:
    """(dense, experts) formats of the model as its config stores it."""
    return _formats(spec.weights)


def _formats(w: WeightFormat) -> tuple[Format, Format]:
    named = _named_parts(w)
    if named is not None:
        return named
    # INT4 group-quantized checkpoints (compressed-tensors, AWQ, GPTQ; Kimi-K2's "int4-g32" weighs what NVFP4
    # weighs) multiply in BF16, not in FP4: the loader's name tells them apart.
    int4 = "int4" in w.name.lower()

    def of(bytes_per_param: Fraction) -> Format:
        if int4 and bytes_per_param < 1:  # any group size: 4-bit weights multiplied in BF16
            return FORMATS["int4-w4a16"]
        return _format_of(bytes_per_param)

    return of(w.dense), of(w.experts)


def _named_parts(weights: WeightFormat) -> tuple[Format, Format] | None:
    """A name this module built, ``<dense>+<experts>-experts`` or ``<dense>``, whose bytes match the format's."""
    dense, _, experts = weights.name.partition("+")
    experts = experts.removesuffix("-experts") or dense
    if dense not in FORMATS or experts not in FORMATS:
        return None
    found = FORMATS[dense], FORMATS[experts]
    if (found[0].bytes_per_param, found[1].bytes_per_param) != (weights.dense, weights.experts):
        return None  # a loader's label (e.g. "nvfp4" for NVFP4 experts over BF16 layers), not this module's
    return found


def math_format(weights: WeightFormat, role: str) -> str:
    """The tensor-core format the ``role`` ("dense" or "experts") weights multiply in."""
    dense, experts = _formats(weights)
    return (dense if role == "dense" else experts).math


def with_formats(spec: ModelSpec, dense: Format, experts: Format) -> ModelSpec:
    """``spec`` served with ``dense`` and ``experts`` weights (embeddings and routers unchanged); the spec itself
    when those are its checkpoint's formats."""
    if (dense, experts) == checkpoint_formats(spec):
        return spec
    name = dense.name if spec.moe is None else f"{dense.name}+{experts.name}-experts"
    weights = WeightFormat(dense.bytes_per_param, experts.bytes_per_param, spec.weights.embedding, name=name)
    if weights == spec.weights:
        return spec
    return replace(spec, weights=weights)


def parse_weights_dtype(text: str, spec: ModelSpec, source: str = "--weights", field: str = "weights") -> ModelSpec:
    """``--weights``: ``FORMAT`` for every matmul weight, or ``dense=F,experts=G`` (either may be left out);
    errors name ``source`` and ``field`` (the flag, or a parameters file's ``weights``)."""
    dense, experts = checkpoint_formats(spec)
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    if not parts:
        raise InputError(source, field, "empty; give e.g. fp8 or dense=bf16,experts=nvfp4")
    for part in parts:
        key, sep, value = part.partition("=")
        if not sep:
            dense = experts = lookup(part, source, field)
        elif key.strip().lower() == "dense":
            dense = lookup(value, source, field)
        elif key.strip().lower() == "experts":
            experts = lookup(value, source, field)
        else:
            raise InputError(source, field, f"unknown part {key!r}; use dense= or experts=")
    return with_formats(spec, dense, experts)


def served_weights(
    spec: ModelSpec, gemm_quant_mode: str | None, moe_quant_mode: str | None, source: str = "results"
) -> tuple[ModelSpec, str]:
    """The model as a measured run served it, and a note saying how that was decided.

    A format of the same family as the checkpoint's (MXFP4 for "nvfp4" on gpt-oss) keeps the checkpoint: that is
    what vLLM loads. Otherwise the run used a quantized variant: its routed experts take ``moe_quant_mode``; its
    dense layers take ``gemm_quant_mode`` when the model is dense or its checkpoint is unquantized (an FP8 or NVFP4
    release of a BF16 model), and keep the checkpoint's format otherwise (an NVFP4 variant of an FP8 or INT4 MoE
    quantizes the experts).
    """
    ck_dense, ck_experts = checkpoint_formats(spec)
    gemm = lookup(gemm_quant_mode, source, "gemm_quant_mode") if gemm_quant_mode else None
    moe = lookup(moe_quant_mode, source, "moe_quant_mode") if moe_quant_mode else None
    unquantized = ck_dense.family == "bf16" and ck_experts.family == "bf16"
    if spec.moe is None:
        dense = gemm if gemm is not None and gemm.family != ck_dense.family else ck_dense
        experts = dense
    else:
        experts = moe if moe is not None and moe.family != ck_experts.family else ck_experts
        dense = gemm if gemm is not None and unquantized and gemm.family != ck_dense.family else ck_dense
    out = with_formats(spec, dense, experts)
    if out is spec:
        return spec, f"checkpoint weights ({spec.weights.name})"
    return out, f"served as {out.weights.name} (checkpoint {spec.weights.name})"


def requantized(spec: ModelSpec, served: ModelSpec) -> bool:
    """Whether a run served a quantized variant of a BF16 checkpoint (NVIDIA's ModelOpt FP8 and NVFP4 releases
    ship FP8 KV-cache scales, so vLLM keeps their KV cache in FP8)."""
    ck_dense, ck_experts = checkpoint_formats(spec)
    return served.weights != spec.weights and ck_dense.family == "bf16" and ck_experts.family == "bf16"


def expert_kernel(weights: WeightFormat, *, native_fp4: bool) -> str:
    """The kernel family the routed experts' grouped GEMMs run in: ``bf16``, ``fp8`` (per-tensor or block FP8),
    ``fp4`` (NVFP4 or MXFP4 on a GPU with FP4 tensor cores) or ``w4a16`` (INT4 weights, or FP4 weights on a GPU
    without FP4 tensor cores: dequantized to BF16 in the kernel, as vLLM's Marlin and triton MoE paths do).

    The efficiency of a grouped GEMM is its kernel's, so the performance model keeps one per family and GPU
    (:meth:`pdtune.perfmodel.efficiency.Efficiency.expert_fractions`).
    """
    family = _formats(weights)[1].family
    if family == "int4" or (family == "fp4" and not native_fp4):
        return "w4a16"
    return family
