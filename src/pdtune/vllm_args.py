"""vLLM's command-line rules, read from the lists generated from its wheels (``data/vllm/``): which flags a
version accepts, what each one takes, and the bounds pdtune adds.

``engine-args-<version>.txt`` lists the flags (``FLAG SCOPE``); ``engine-arg-values-<version>.json`` says what
each takes, as vLLM's ``get_kwargs`` derives it from the config field's type and its pydantic ``Field`` bounds
(both written by ``scripts/vllm_engine_args.py`` from the published wheel; nothing is imported from vLLM). On
top of vLLM's own rules pdtune keeps the domain's bounds of :mod:`pdtune.limits` (a 300-digit
``max-num-seqs`` is an int vLLM's argparse would take; no engine runs it).

:func:`value_problem` checks one flag's value, :func:`config_problems` a whole ``vllm_config`` role (the
mapping srt-slurm turns into flags), and :func:`parse_command` a ``vllm serve`` command line the way vLLM's
parser reads it: the flags it registers, a value where one is taken, a bare flag where none is, every value
of its kind, within its choices and bounds.
"""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from pdtune import guarded, limits
from pdtune.errors import InputError, brief
from pdtune.paths import data_dir

#: The vLLM line pdtune's recipes and serve commands are written for (its flag list is bundled).
VLLM_VERSION = "0.33.0"

#: pdtune's own bounds on flags whose vLLM bound is open: (maximum, what it counts).
PDTUNE_BOUNDS: dict[str, tuple[int, str]] = {
    "--max-num-seqs": (limits.MAX_NUM_SEQS, "sequences per engine"),
    "--max-num-batched-tokens": (limits.MAX_TOKENS_PER_STEP, "tokens per step"),
    "--max-model-len": (limits.MAX_MODEL_LEN, "tokens"),
    "--block-size": (limits.MAX_TOKENS_PER_STEP, "tokens per block"),
    "--tensor-parallel-size": (limits.MAX_PARALLEL, "GPUs"),
    "--data-parallel-size": (limits.MAX_PARALLEL, "ranks"),
    "--data-parallel-size-local": (limits.MAX_PARALLEL, "ranks"),
    "--data-parallel-start-rank": (limits.MAX_PARALLEL, "ranks"),
    "--pipeline-parallel-size": (limits.MAX_PARALLEL, "stages"),
    "--decode-context-parallel-size": (limits.MAX_PARALLEL, "GPUs"),
    "--nnodes": (limits.MAX_GPUS, "nodes"),
    "--node-rank": (limits.MAX_GPUS, "nodes"),
    "--port": (65535, "(the largest TCP port)"),
    "--data-parallel-rpc-port": (65535, "(the largest TCP port)"),
}
#: Keys of a JSON config whose numbers pdtune bounds too.
_JSON_BOUNDS: dict[str, tuple[int, str]] = {"num_speculative_tokens": (limits.MAX_SPECULATIVE_TOKENS, "tokens")}


def engine_args_file(version: str = VLLM_VERSION) -> Path:
    return data_dir() / "vllm" / f"engine-args-{version}.txt"


def values_file(version: str = VLLM_VERSION) -> Path:
    return data_dir() / "vllm" / f"engine-arg-values-{version}.json"


@cache
def accepted_flags(version: str = VLLM_VERSION) -> dict[str, str]:
    """Flag -> scope (``engine`` or ``serve``) of one vLLM version, from the generated list."""
    path = engine_args_file(version)
    with guarded.bundled():
        lines = guarded.read_text(path, "engine-args").splitlines()
    out: dict[str, str] = {}
    for lineno, line in enumerate(lines, start=1):
        if line.strip() and not line.startswith("#"):
            parts = line.split()
            if len(parts) != 2:
                raise InputError(path, f"line {lineno}", "expected '<flag> <scope>'")
            out[parts[0]] = parts[1]
    return out


@cache
def value_rules(version: str = VLLM_VERSION) -> dict[str, dict[str, Any]]:
    """Flag -> what it takes (``kind``, ``choices``, ``bounds``, ``optional``, ``fields`` of a JSON config)."""
    path = values_file(version)
    with guarded.bundled():
        data = guarded.read_json(path, "engine-arg-values")
        if not isinstance(data, dict) or not isinstance(data.get("flags"), dict) or data.get("vllm") != version:
            raise InputError(path, "flags", f"not the value rules of vLLM {version}")
    return data["flags"]


def unknown_flags(flags: Iterable[str], *, serve: bool, version: str = VLLM_VERSION) -> list[str]:
    """The flags of ``flags`` vLLM ``version`` does not accept (``serve``: ``vllm serve``'s own count too)."""
    known = accepted_flags(version)
    return [f for f in flags if f not in known or (known[f] == "serve" and not serve)]


def flag_of(key: str) -> str:
    """A ``vllm_config`` key as the flag srt-slurm passes (``max_num_seqs`` and ``max-num-seqs`` alike)."""
    return "--" + str(key).replace("_", "-")


# ------------------------------------------------------------------------------------------ one value


def _bounds_problem(value: float, bounds: Mapping[str, float]) -> str:
    checks = {"gt": (lambda b: value > b, "greater than"), "ge": (lambda b: value >= b, "at least"),
              "lt": (lambda b: value < b, "less than"), "le": (lambda b: value <= b, "at most")}
    for key, bound in bounds.items():
        ok, words = checks[key]
        if not ok(bound):
            return f"must be {words} {bound:g}, got {brief(value)}"
    return ""


def _number(text: Any, kind: str) -> tuple[float | int | None, str]:
    if isinstance(text, bool):
        return None, f"expected {'an integer' if kind == 'int' else 'a number'}, got {brief(text)}"
    if kind == "int":
        if isinstance(text, int):
            return text, ""
        raw = str(text).strip()
        digits = raw.lstrip("+-")
        if not (digits.isascii() and digits.isdigit()):
            return None, f"expected an integer, got {brief(text)}"
        if len(digits) > 18:
            return None, f"an integer of {len(digits):,} digits"
        return int(raw), ""
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None, f"expected a number, got {brief(text)}"
    if not math.isfinite(value):
        return None, f"expected a finite number, got {brief(text)}"
    return value, ""


def _check(spec: Mapping[str, Any], value: Any, name: str, pdtune_bound: tuple[int, str] | None) -> str:
    kind = spec.get("kind", "str")
    if value is None or (isinstance(value, str) and value in ("", "None")):
        return "" if spec.get("optional") else f"needs a value, got {brief(value)}"
    if kind in ("bool", "flag"):
        return "" if value is True else f"is a bare flag (true), got {brief(value)}"
    if kind in ("int", "float"):
        number, problem = _number(value, kind)
        if problem:
            return problem
        assert number is not None
        problem = _bounds_problem(number, spec.get("bounds", {}))
        if problem:
            return problem
        if pdtune_bound is not None and number > pdtune_bound[0]:
            return f"{number:,} is more than the {pdtune_bound[0]:,} {pdtune_bound[1]} pdtune accepts"
        if "choices" in spec and number not in spec["choices"]:
            return f"must be one of {', '.join(map(str, spec['choices']))}, got {brief(value)}"
        return ""
    if kind == "json":
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                return f"expected JSON, got {brief(value)}"
        if not isinstance(value, dict):
            return f"expected a JSON object, got {brief(value)}"
        fields = spec.get("fields")
        if fields:
            for key, item in value.items():
                if key not in fields:
                    return f"{spec.get('config_class', 'the config')} has no field {brief(key)}"
                problem = _check(fields[key], item, f"{name}.{key}", _JSON_BOUNDS.get(key))
                if problem:
                    return f"{key}: {problem}"
        return ""
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        if kind == "list" and isinstance(value, list):
            return ""
        return f"expected text, got {brief(value)}"
    if "choices" in spec and str(value) not in {str(c) for c in spec["choices"]}:
        shown = ", ".join(str(c) for c in spec["choices"][:30])
        return f"must be one of {shown}{', ...' if len(spec['choices']) > 30 else ''}; got {brief(value)}"
    return ""


def value_problem(flag: str, value: Any, version: str = VLLM_VERSION) -> str:
    """Why vLLM ``version`` (or pdtune's bound) refuses ``value`` for ``flag``; "" when it takes it.

    ``value`` is what a ``vllm_config`` mapping or a command line holds: ``True`` for a bare flag, a number or
    its text, a JSON string or object for a config flag."""
    rules = value_rules(version)
    if flag not in rules:
        return f"vLLM {version} has no flag {flag}"
    spec = rules[flag]
    if flag in PDTUNE_BOUNDS and spec.get("kind") == "int" and not spec.get("bounds"):
        spec = {**spec, "bounds": {"ge": 1}}  # a count or a port: vLLM's own check comes later, at start-up
    return _check(spec, value, flag, PDTUNE_BOUNDS.get(flag))


def config_problems(config: Mapping[str, Any], *, serve: bool = False, version: str = VLLM_VERSION) -> list[str]:
    """Every problem of one role's ``vllm_config``: unknown flags and refused values (``key: problem``)."""
    out = []
    for key, value in config.items():
        if value is False or value is None:  # srt-slurm drops them
            continue
        flag = flag_of(key)
        if unknown_flags([flag], serve=serve, version=version):
            out.append(f"{key}: vLLM {version} has no flag {flag}" + ("" if serve else " for its engine"))
            continue
        problem = value_problem(flag, value, version)
        if problem:
            out.append(f"{key}: {problem}")
    if not out:
        out += _cross_problems({flag_of(k): v for k, v in config.items()})
    return out


def _cross_problems(flags: Mapping[str, Any]) -> list[str]:
    """vLLM's checks across flags that pdtune's values can break (``SchedulerConfig.verify_max_model_len``,
    vllm/config/scheduler.py): the token budget holds every running request's decode token."""
    seqs, tokens = flags.get("--max-num-seqs"), flags.get("--max-num-batched-tokens")
    if seqs is not None and tokens is not None and int(tokens) < int(seqs):
        return [f"max-num-batched-tokens: {tokens} is below max-num-seqs ({seqs}), which vLLM refuses"]
    return []


# ------------------------------------------------------------------------------------------ a command line


def parse_command(argv: Sequence[str] | str, *, version: str = VLLM_VERSION) -> dict[str, Any]:
    """A ``vllm serve MODEL --flag value ...`` command as vLLM's parser reads it: flag -> value (``True`` for a
    bare flag), ``model`` for the positional; raises ValueError naming the first problem.

    Every token after the model is a registered flag of ``vllm serve`` (engine and serve scopes); a flag
    that takes a value gets the next token (``optional-str`` flags take one only when it is not a flag), a
    bare flag takes none, ``list`` flags take every token up to the next flag; each value is checked by
    :func:`value_problem`. ``--flag=value`` is read as argparse reads it."""
    words = shlex.split(argv) if isinstance(argv, str) else list(argv)
    if words[:2] != ["vllm", "serve"]:
        raise ValueError(f"not a `vllm serve` command: {' '.join(words[:2])!r}")
    rules = value_rules(version)
    known = accepted_flags(version)
    out: dict[str, Any] = {}
    i = 2
    if i < len(words) and not words[i].startswith("-"):
        out["model"] = words[i]
        i += 1
    while i < len(words):
        word = words[i]
        if not word.startswith("-"):
            raise ValueError(f"{word!r}: a value without a flag")
        flag, _, inline = word.partition("=")
        if flag not in known:
            raise ValueError(f"{flag}: vLLM {version} has no such flag")
        if flag in out:
            raise ValueError(f"{flag} given twice")
        spec = rules.get(flag, {"kind": "str"})
        kind = spec.get("kind", "str")
        i += 1
        if kind in ("bool", "flag"):
            if inline:
                raise ValueError(f"{flag} takes no value, got {inline!r}")
            value: Any = True
        elif inline:
            value = inline
        elif kind == "optional-str":
            value = words[i] if i < len(words) and not words[i].startswith("-") else True
            i += value is not True
        elif kind == "list":
            items = []
            while i < len(words) and not words[i].startswith("-"):
                items.append(words[i])
                i += 1
            if not items:
                raise ValueError(f"{flag} needs at least one value")
            value = items
        else:
            if i >= len(words) or (words[i].startswith("-") and not _looks_negative(words[i])):
                raise ValueError(f"{flag} needs a value")
            value = words[i]
            i += 1
        if kind not in ("optional-str", "list"):
            problem = value_problem(flag, value, version)
            if problem:
                raise ValueError(f"{flag} {problem}")
        out[flag] = value
    if "model" not in out:
        raise ValueError("no model: `vllm serve` needs the model as its first argument")
    cross = _cross_problems(out)
    if cross:
        raise ValueError(cross[0])
    return out


def _looks_negative(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True
