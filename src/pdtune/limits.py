"""Bounds from the domain on every count a config, a file or a flag can set, and the checks that name them.

A number read from outside decides how much pdtune allocates (one entry per layer, per capture size, per
concurrency) and ends in int64 columns, so each count has a ceiling far above any real deployment and far
below what would exhaust memory or overflow a frame. A value above its ceiling is bad input whose message
names the bound. The ceilings, with the largest real values they leave room for:

=====================  ===========  ==============================================================
what                   at most      largest seen (for scale)
=====================  ===========  ==============================================================
layers                 4,096        126 (Llama-3.1-405B), 61 (DeepSeek-V3)
attention/KV heads     16,384       128 (DeepSeek-V3)
experts                65,536       512 (Qwen3-Next, Qwen3.8-2.4T)
hidden/intermediate    2^24         53,248 (Llama-3.1-405B FFN)
vocabulary             2^26         262,144 (Gemma 3)
max_model_len, ISL/OSL 2^30         10 M (Llama 4 Scout)
sequences per engine   65,536       1,024 (vLLM's default max_num_seqs on large GPUs)
tokens per step        2^20         16,384 (vLLM's default token budget on GB300)
speculative tokens     64           3-8 (MTP, EAGLE)
parallel sizes         65,536       72 (an NVL72 rack), 1,024 (large DP)
GPUs                   2^20         tens of thousands (the largest clusters)
concurrency            2^24         a few thousand (sweeps)
bytes                  2^50 (1 PiB) 288 GB (GB300 HBM)
a measured quantity    1e15         tokens/s, ms, token totals; and, when not 0, at least 1e-6
=====================  ===========  ==============================================================
"""

from __future__ import annotations

from typing import Any

from pdtune.errors import InputError, brief

MAX_LAYERS = 4096
MAX_HEADS = 16384
MAX_EXPERTS = 65536
MAX_WIDTH = 1 << 24  # hidden, intermediate, head dims, state sizes
MAX_VOCAB = 1 << 26
MAX_MODEL_LEN = 1 << 30
MAX_NUM_SEQS = 65536
MAX_TOKENS_PER_STEP = 1 << 20  # max_num_batched_tokens, CUDA-graph capture sizes
MAX_SPECULATIVE_TOKENS = 64
MAX_PARALLEL = 65536  # TP, DP, PP, EP, DCP sizes; workers of a deployment
MAX_GPUS = 1 << 20
MAX_CONCURRENCY = 1 << 24
MAX_BYTES = 1 << 50
MAX_MEASURE = 1e15
#: The smallest positive measured quantity: a millionth of a millisecond, a token/s, a second, a GiB is no
#: measurement any benchmark of an LLM server prints (its clocks and counters do not resolve it), and a TPOT
#: of 1e-300 ms would turn every ratio taken with it (an error in percent) into a 300-digit number.
MIN_MEASURE = 1e-6
#: The largest integer a float64 holds exactly (and far inside int64): any whole number read from a file.
MAX_EXACT_INT = 1 << 53


def bound(value: int, maximum: int, source: str, field: str, what: str = "") -> int:
    """``value`` if it is at most ``maximum``; otherwise bad input that names the bound."""
    if value > maximum:
        shown = f"{value:,}" if value < 10**40 else f"a number with {len(str(value))} digits"
        raise InputError(source, field, f"{shown} is more than the {maximum:,} {what or 'pdtune accepts'}".rstrip())
    return value


def whole_number(value: Any, source: str, field: str, *, minimum: int = 1, maximum: int = MAX_EXACT_INT) -> int:
    """A whole number within ``[minimum, maximum]`` from a config or a file (bools and floats refused)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(source, field, f"must be a whole number, got {brief(value)}")
    if value < minimum:
        raise InputError(source, field, f"must be >= {minimum}, got {brief(value)}")
    return bound(value, maximum, source, field)
