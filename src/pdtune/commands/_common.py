"""Helpers shared by the subcommands: the flags several commands take, JSON output, and typed flag
parsers with one-line errors."""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from pdtune.errors import InputError
from pdtune.results.gpus import SIDECAR_NAME, GpuCounts, parse_gpus


def emit_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2, sort_keys=False, default=_default)
    sys.stdout.write("\n")


def _default(obj: Any) -> Any:
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    if hasattr(obj, "item"):  # numpy scalars
        return obj.item()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {value}")
    return value


def non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return value


def fraction(text: str) -> float:
    value = non_negative_float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {text}")
    return value


def fraction_or_zero(text: str) -> float:
    value = non_negative_float(text)
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1), got {text}")
    return value


def int_list(text: str) -> list[int]:
    """``1,8,64`` -> [1, 8, 64]."""
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated whole numbers, got {text!r}") from None
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive whole numbers, got {text!r}")
    return values


def gpu_counts(text: str) -> GpuCounts:
    """``24`` (aggregated) or ``prefill=8,decode=16``, as :func:`pdtune.results.parse_gpus` reads it."""
    try:
        return parse_gpus(text)
    except InputError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


#: The flags several commands take, spelled once: the name, and what every command agrees on (type,
#: metavar, a default help). A command passes its own default and help where they differ.
SHARED_FLAGS: dict[str, dict[str, Any]] = {
    "model": {"metavar": "MODEL", "help": "bundled model name, folder with config.json, or the file"},
    "--model": {"help": "config.json, its folder, or a bundled model name"},
    "--vllm": {"metavar": "VERSION", "help": "vLLM line whose arithmetic to follow"},
    "--kv-cache-dtype": {"help": "KV cache dtype: auto | fp8 | fp8_e4m3 | bfloat16 | ..."},
    "--gpu-memory-utilization": {"type": fraction},
    "--isl": {"type": positive_int, "help": "input tokens per request"},
    "--osl": {"type": positive_int, "help": "output tokens per request"},
    "--num-speculative-tokens": {"type": non_negative_int, "default": 0, "metavar": "K"},
    "--speculative-model": {"metavar": "NAME_OR_CONFIG",
                            "help": "EAGLE/EAGLE3 head or draft model (bundled name or config.json); its layers "
                                    "join the KV cache"},
    "--decode-context-parallel-size": {"type": positive_int, "default": 1, "metavar": "N",
                                       "help": "DCP size: full-attention KV tokens shard over N ranks of the TP "
                                               "group (default 1)"},
    "--gpus": {"type": gpu_counts, "default": None, "metavar": "N|prefill=P,decode=D",
               "help": f"GPU counts for results that do not record them (else a {SIDECAR_NAME} next to them)"},
    "--out": {"metavar": "DIR"},
    "--json": {"action": "store_true", "help": "machine-readable output"},
    "--csv": {"action": "store_true", "help": "as CSV"},
}


def shared_flag(parser: argparse.ArgumentParser | argparse._ActionsContainer, name: str,
                **overrides: Any) -> argparse.Action:
    """Add the shared flag ``name`` (a key of :data:`SHARED_FLAGS`) to ``parser`` (or to a group of it),
    with ``overrides`` (``default``, ``help``, ...) for what this command says differently."""
    return parser.add_argument(name, **{**SHARED_FLAGS[name], **overrides})


def draft_and_dcp_flags(parser: argparse.ArgumentParser, *, engines: str) -> None:
    """``--speculative-model`` with its ``--num-speculative-tokens``, and ``--decode-context-parallel-size``:
    what they change in ``engines`` (the KV room, as ``pdtune state`` counts it) and what not (the step time)."""
    shared_flag(parser, "--speculative-model",
                help="EAGLE/EAGLE3 head or draft model (bundled name or config.json) with --num-speculative-tokens: "
                     f"its layers join the KV cache of {engines}; its draft passes are not in the step time")
    shared_flag(parser, "--num-speculative-tokens", help="draft tokens of --speculative-model (MTP: --mtp)")
    shared_flag(parser, "--decode-context-parallel-size",
                help="DCP size of the decode engines: full-attention KV tokens shard over N ranks of their TP "
                     "group (KV room as `pdtune state` counts it; the TP must be a multiple; not in the step time)")
