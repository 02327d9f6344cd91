"""vLLM's switches per line: the defaults and rules read from each published wheel, and ``--vllm-env``.

``data/vllm/switches.csv`` is written by ``scripts/vllm_switches.py`` from the wheels' source (its header
names each wheel and its sha256). One row per switch and run of lines where its value stays the same:
``env:NAME`` an environment variable's default, ``field:Class.name``/``arg:name`` a config or engine-argument
default, ``batch:...`` the GPU tiers of ``EngineArgs.get_batch_defaults``, ``value:...`` a constant in a
function, ``rule:...`` whether a line has a behaviour (``yes``/``no``). :func:`value` answers for any
version pdtune follows: the row of the newest line at or below it.

The environment variables pdtune applies (:data:`APPLIED`) can be set per run with ``--vllm-env NAME=VALUE``
(``state``, ``log``, ``predict``, ``plan``), a parameters file's ``vllm_env:`` and the recipes' worker
environment. A name pdtune does not apply, a value vLLM would not read, or a variable the line does not
have is bad input.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from pdtune import versions
from pdtune.errors import DataError, InputError, brief
from pdtune.paths import data_dir

COLUMNS = ("name", "kind", "from", "to", "value", "affects", "source")
ABSENT = "absent"


@dataclass(frozen=True)
class Row:
    name: str
    kind: str
    first: str
    last: str
    value: str
    affects: str
    source: str

    def covers(self, line: tuple[int, int]) -> bool:
        return _line(self.first) <= line <= _line(self.last)


def _line(version: str) -> tuple[int, int]:
    major, minor, _ = versions.parse(version)
    return major, minor


def table_path() -> Path:
    return data_dir() / "vllm" / "switches.csv"


@cache
def rows() -> tuple[Row, ...]:
    from pdtune.guarded import bundled, read_csv_table

    path = table_path()
    with bundled():
        raw = read_csv_table(path, COLUMNS)
    return tuple(Row(r["name"], r["kind"], r["from"], r["to"], r["value"], r["affects"], r["source"]) for r in raw)


@cache
def wheels() -> dict[str, tuple[str, str]]:
    """line -> (wheel file, sha256), from the table's header."""
    from pdtune.guarded import read_text

    out: dict[str, tuple[str, str]] = {}
    for text in read_text(table_path()).splitlines():
        if not text.startswith("#"):
            break
        parts = text.split()
        if len(parts) == 6 and parts[1] == "wheel" and parts[4] == "sha256":
            out[parts[2]] = (parts[3], parts[5])
    return out


@cache
def lines() -> tuple[str, ...]:
    """The lines the table covers, oldest first."""
    return tuple(sorted(wheels(), key=_line))


def line_of(version: str) -> str:
    """The newest line the table covers at or below ``version`` (0.15 reads 0.11's rules; 0.26.1 is 0.26)."""
    target = _line(version)
    below = [line for line in lines() if _line(line) <= target]
    if not below:
        raise DataError(table_path(), "from", f"no line at or below vLLM {brief(version)}")
    return below[-1]


def row(name: str, version: str) -> Row:
    line = _line(line_of(version))
    for r in rows():
        if r.name == name and r.covers(line):
            return r
    raise DataError(table_path(), name, f"no row for vLLM {brief(version)}")


def value(name: str, version: str) -> str:
    return row(name, version).value


def rule(name: str, version: str) -> bool:
    """A ``rule:`` row's answer; any other value is a broken table."""
    got = value(f"rule:{name}", version)
    if got not in ("yes", "no"):
        raise DataError(table_path(), f"rule:{name}", f"expected yes or no, got {brief(got)}")
    return got == "yes"


def number(name: str, version: str) -> int | float | None:
    """A numeric row; ``None`` where the line has no such value (``absent``, ``None``)."""
    got = value(name, version)
    if got in (ABSENT, "None", ""):
        return None
    try:
        return int(got)
    except ValueError:
        try:
            return float(got)
        except ValueError:
            raise DataError(table_path(), name, f"not a number: {brief(got)}") from None


def default_gpu_memory_utilization(version: str) -> float:
    """``--gpu-memory-utilization``'s default in ``version``'s line (``EngineArgs``: 0.9 in 0.11, 0.92 from 0.20)."""
    got = number("arg:gpu_memory_utilization", version)
    if not isinstance(got, float):
        raise DataError(table_path(), "arg:gpu_memory_utilization", f"not a fraction: {brief(got)}")
    return got


# ------------------------------------------------------------------------------------ --vllm-env


@dataclass(frozen=True)
class EnvVar:
    """An environment variable pdtune applies: the values vLLM reads and what pdtune does with it."""

    name: str
    choices: tuple[str, ...]  # accepted spellings; vLLM reads them as documented in ``envs.py``
    effect: str


CHUNKED_LOCAL_HMA = "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE"
LONG_MAX_MODEL_LEN = "VLLM_ALLOW_LONG_MAX_MODEL_LEN"
ESTIMATE_CUDAGRAPHS = "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS"

#: ``bool(int(os.getenv(NAME, default)))`` variables take an integer; pdtune accepts 0 and 1.
_BOOL = ("0", "1")

APPLIED: dict[str, EnvVar] = {
    v.name: v for v in (
        EnvVar("VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE", _BOOL,
               "1 keeps the hybrid KV-cache manager on for chunked local attention (Llama 4)"),
        EnvVar("VLLM_ALLOW_LONG_MAX_MODEL_LEN", _BOOL,
               "1 lets --max-model-len exceed the config's derived limit"),
        EnvVar("VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS", _BOOL,
               "0 stops vLLM subtracting its CUDA-graph memory estimate from the KV cache (0.20+)"),
    )
}


@dataclass(frozen=True)
class VllmEnv:
    """The environment one vLLM run sees: the table's defaults for its line, overridden by the user's."""

    version: str
    given: tuple[tuple[str, str], ...] = ()

    def get(self, name: str) -> str:
        for key, val in self.given:
            if key == name:
                return val
        return value(f"env:{name}", self.version)

    def flag(self, name: str) -> bool:
        return self.get(name) not in ("0", "", "False", "false", ABSENT, "None")

    def is_default(self, name: str) -> bool:
        return all(key != name for key, _ in self.given)

    def as_dict(self) -> dict[str, str]:
        return dict(self.given)


def parse_assignment(text: str, source: str = "--vllm-env") -> tuple[str, str]:
    name, sep, val = str(text).partition("=")
    if not sep or not name.strip():
        raise InputError(source, "vllm_env", f"expected NAME=VALUE, got {brief(text)}")
    return name.strip(), val.strip()


def check_env(pairs: Iterable[tuple[str, str]] | Mapping[str, object], version: str,
              source: str = "--vllm-env", *, strict: bool = True) -> VllmEnv:
    """``pairs`` checked for ``version``: every name one pdtune applies and the line has, every value one vLLM
    reads; a name given twice with two values is refused (which one counts?)."""
    items = list(pairs.items()) if isinstance(pairs, Mapping) else list(pairs)
    seen: dict[str, str] = {}
    for name, raw in items:
        name = str(name)
        val = _spelled(raw)
        var = APPLIED.get(name)
        if var is None:
            known = ", ".join(sorted(APPLIED))
            raise InputError(source, name, f"not a vLLM environment variable pdtune applies (known: {known})")
        if value(f"env:{name}", version) == ABSENT:
            if not strict:
                continue  # another line than the one given (an article column at 0.11): it has no such variable
            raise InputError(source, name, f"vLLM {brief(version)} has no {name} (envs.py)")
        if val not in var.choices:
            raise InputError(source, name, f"value {brief(val)} is not one of {', '.join(var.choices)}")
        if name in seen and seen[name] != val:
            raise InputError(source, name, f"given twice ({seen[name]} and {val})")
        seen[name] = val
    return VllmEnv(version, tuple(seen.items()))


def _spelled(raw: object) -> str:
    # YAML reads 1 and true as numbers and booleans; vLLM reads the environment's string.
    if isinstance(raw, bool):
        return "1" if raw else "0"
    return str(raw).strip()


def parse_assignments(texts: Iterable[str], source: str = "--vllm-env") -> tuple[tuple[str, str], ...]:
    return tuple(parse_assignment(text, source) for text in texts)


def env_from_args(args: object, version: str) -> VllmEnv:
    """``--vllm-env`` of a parsed command line (absent: the line's defaults)."""
    given = getattr(args, "vllm_env", None) or []
    return check_env(parse_assignments(given), version)


# The environment of the vLLM runs a command models: ``--vllm-env`` (or a parameters file's ``vllm_env:``) for
# the command's duration. ``plan_state`` reads it wherever it is called from (``state``, ``predict``'s engines,
# ``plan``'s search, the chapters), checked against the line it plans for.
_ACTIVE: ContextVar[tuple[tuple[str, str], ...] | None] = ContextVar("vllm_env", default=None)
#: A notebook kernel's environment (a chapter's ``vllm_env`` parameter, :func:`set_process_environment`): what
#: :func:`active` answers outside any :func:`vllm_environment` block.
_PROCESS: list[tuple[tuple[str, str], ...]] = [()]
_SOURCE: ContextVar[str] = ContextVar("vllm_env_source", default="--vllm-env")


@contextmanager
def vllm_environment(pairs: Iterable[tuple[str, str]] | Mapping[str, object],
                     source: str = "--vllm-env") -> Iterator[None]:
    items = tuple((str(k), _spelled(v)) for k, v in (pairs.items() if isinstance(pairs, Mapping) else pairs))
    token, token_source = _ACTIVE.set(items), _SOURCE.set(source)
    try:
        yield
    finally:
        _ACTIVE.reset(token)
        _SOURCE.reset(token_source)


def set_process_environment(pairs: Iterable[str] | Iterable[tuple[str, str]], version: str,
                            source: str = "vllm_env") -> VllmEnv:
    """Set the environment for the rest of this process (a chapter's kernel), checked for ``version``."""
    items = [parse_assignment(p, source) if isinstance(p, str) else (str(p[0]), str(p[1])) for p in pairs]
    env = check_env(items, version, source)
    _PROCESS[0] = env.given
    return env


def active() -> tuple[tuple[str, str], ...]:
    """The variables set for this command (name, value), unchecked."""
    current = _ACTIVE.get()
    return _PROCESS[0] if current is None else current


def env_source() -> str:
    """Where the variables in force were given (``--vllm-env``, a parameters file's ``vllm_env``): errors name it."""
    return _SOURCE.get()


def environment(version: str) -> VllmEnv:
    """The environment a vLLM ``version`` run sees: the active variables over the line's defaults (checked
    strictly where they were given, against the line the user named; a variable this line lacks is left out)."""
    return check_env(active(), version, env_source(), strict=False)
