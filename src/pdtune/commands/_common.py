"""Helpers shared by the subcommands: the flags several commands take, JSON output, and typed flag
parsers with one-line errors."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from typing import Any

from pdtune import limits, versions
from pdtune.errors import InputError, brief
from pdtune.harnesses import HARNESSES, LATENCY_MODELS, STEADY_STATE
from pdtune.precision import WEIGHTS_HELP
from pdtune.results.gpus import SIDECAR_NAME, GpuCounts, parse_gpus
from pdtune.units import GiB, MiB, to_bytes


def emit_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2, sort_keys=False, default=json_default)
    sys.stdout.write("\n")


def json_default(obj: Any) -> Any:
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    if hasattr(obj, "item"):  # numpy scalars
        return obj.item()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def _whole(text: str, minimum: int, maximum: int, what: str) -> int:
    digits = text.strip().lstrip("+-")
    if not (digits.isascii() and digits.isdigit()):
        raise argparse.ArgumentTypeError(f"expected a whole number, got {brief(text)}")
    if len(digits) > 18:
        raise argparse.ArgumentTypeError(f"a number with {len(digits):,} digits is more than the {maximum:,} "
                                         f"{what} pdtune accepts")
    value = int(text)
    if value < minimum:
        need = {0: "must not be negative", 1: "must be positive"}.get(minimum, f"must be at least {minimum}")
        raise argparse.ArgumentTypeError(f"{need}, got {value}")
    if value > maximum:
        raise argparse.ArgumentTypeError(f"{value:,} is more than the {maximum:,} {what} pdtune accepts")
    return value


def whole_flag(maximum: int, what: str, *, minimum: int = 1) -> Callable[[str], int]:
    """An argparse type: a whole number from ``minimum`` to ``maximum`` (a bound of :mod:`pdtune.limits`,
    named ``what`` in the error)."""
    def parse(text: str) -> int:
        return _whole(text, minimum, maximum, what)

    parse.__name__ = "whole number"
    return parse


def non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {brief(text)}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {brief(text)}")
    return value


def _byte_flag(unit: int, name: str) -> Callable[[str], float]:
    def parse(text: str) -> float:
        value = non_negative_float(text)
        try:
            to_bytes(value, unit, "flag", name)
        except InputError as exc:
            raise argparse.ArgumentTypeError(exc.message) from None
        return value

    parse.__name__ = name
    return parse


#: argparse types of memory sizes: finite, >= 0, and still a whole number of bytes within
#: :data:`~pdtune.limits.MAX_BYTES` once scaled (a positive size never rounds to 0 bytes).
gib_flag = _byte_flag(GiB, "GiB")
mib_flag = _byte_flag(MiB, "MiB")


def check_shared(args: argparse.Namespace) -> None:
    """Checks of the shared flags that are bad input (not a mistyped flag): ``--vllm`` must name a line pdtune
    follows (:func:`pdtune.versions.check`). Run by :func:`pdtune.cli.main` before the command."""
    if isinstance(getattr(args, "vllm", None), str):
        versions.check(args.vllm, "--vllm")
        if getattr(args, "vllm_env", None):
            from pdtune.switches import env_from_args

            env_from_args(args, args.vllm)  # names, values and the line checked before any work


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


#: Entries of one comma-separated list flag.
MAX_LIST = 4096


def int_list(text: str) -> list[int]:
    """``1,8,64`` -> [1, 8, 64]: concurrencies, each from 1 to :data:`~pdtune.limits.MAX_CONCURRENCY`."""
    parts = [part for part in text.split(",") if part.strip()]
    if not parts:
        raise argparse.ArgumentTypeError(f"expected comma-separated whole numbers, got {brief(text)}")
    if len(parts) > MAX_LIST:
        raise argparse.ArgumentTypeError(f"{len(parts):,} values are more than the {MAX_LIST:,} pdtune accepts")
    return [_whole(part, 1, limits.MAX_CONCURRENCY, "concurrency") for part in parts]


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
    "--weights": {"metavar": "FMT", "help": WEIGHTS_HELP},
    "--vllm": {"metavar": "VERSION", "help": "vLLM line whose arithmetic to follow"},
    "--vllm-env": {"action": "append", "default": None, "metavar": "NAME=VALUE",
                   "help": "a vLLM environment variable the run sets (repeatable): "
                           "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE, VLLM_ALLOW_LONG_MAX_MODEL_LEN, "
                           "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS; defaults per line from data/vllm/switches.csv"},
    "--kv-cache-dtype": {"help": "KV cache dtype: auto | fp8 | fp8_e4m3 | bfloat16 | ..."},
    "--gpu-memory-utilization": {"type": fraction},
    "--isl": {"type": whole_flag(limits.MAX_MODEL_LEN, "tokens"), "help": "input tokens per request"},
    "--osl": {"type": whole_flag(limits.MAX_MODEL_LEN, "tokens"), "help": "output tokens per request"},
    "--num-speculative-tokens": {"type": whole_flag(limits.MAX_SPECULATIVE_TOKENS, "speculative tokens", minimum=0),
                                 "default": 0, "metavar": "K"},
    "--speculative-model": {"metavar": "NAME_OR_CONFIG",
                            "help": "EAGLE/EAGLE3 head or draft model (bundled name or config.json); its layers "
                                    "join the KV cache"},
    "--decode-context-parallel-size": {"type": whole_flag(limits.MAX_PARALLEL, "ranks"), "default": 1, "metavar": "N",
                                       "help": "DCP size: full-attention KV tokens shard over N ranks of the TP "
                                               "group (default 1)"},
    "--gpus": {"type": gpu_counts, "default": None, "metavar": "N|prefill=P,decode=D",
               "help": f"GPU counts for results that do not record them (else a {SIDECAR_NAME} next to them)"},
    "--out": {"metavar": "DIR"},
    "--json": {"action": "store_true", "help": "machine-readable output"},
    "--csv": {"action": "store_true", "help": "as CSV"},
    "--latency-model": {"choices": LATENCY_MODELS, "default": STEADY_STATE,
                        "help": "what predicts TTFT and TPOT: the steady-state model (default, fast) or the scheduler "
                                "simulation pdtune.sim (each point run as its benchmark: queues, cohorts, tails)"},
    "--harness": {"choices": tuple(HARNESSES), "metavar": "NAME",
                  "help": "with --latency-model simulated: the benchmark whose clients are simulated ("
                          + ", ".join(HARNESSES) + ")"},
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
