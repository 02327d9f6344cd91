"""How the measured servers were launched: the ``vllm serve`` flags of the scripts behind aiconfigurator's rows.

aiconfigurator's silicon file records a row's layout, precision, vLLM image and measurement date, not the server's
flags. The rows of MiniMax-M2.5, Kimi-K2.5, gpt-oss-120b and Llama-3.1-70B come from SemiAnalysis's InferenceX
runs (their provenance names InferenceX's database dumps and exports; ``data/clusters/aiconfigurator-silicon/``
``README.md`` gives the evidence), and InferenceX launches each (model, precision, GPU) with a script of its own
whose flags differ from vLLM's defaults. MiniMax-M2.5 FP8 on B200, for one, runs with ``--kv-cache-dtype fp8``
(twice the KV room of the ``auto`` dtype) and ``--max-num-batched-tokens $((ISL * 2))`` (a quarter of the default
8,192 prefill tokens per step at ISL 1,024). A prediction on vLLM's defaults is then a prediction of another server.

``launch_flags.csv`` beside the silicon file holds those flags, read from InferenceX's git history at the last
commit of each script on or before the rows' measurement dates, one line per (model, GPU, precision, dates,
condition), each naming its script and commit. :func:`row_flags` finds a row's line; :meth:`ServerFlags.engine_config`
lays it over vLLM's defaults. A flag a script does not pass stays vLLM's default; a row no line covers (the Qwen3
rows, measured by aiconfigurator's own runs) keeps vLLM's defaults throughout.

Some scripts also launched another layout than the row records. MiniMax-M2.5's H200 script of late March passes
``--enable-expert-parallel`` whenever ``EP_SIZE >= 1``, which the sweep always sets, so its rows recorded as TP8 ran
as TEP8; Kimi-K2.5's B200 FP4 script before 2026-04-14 never passed expert parallelism, so its rows recorded as TEP4
ran as TP4. The ``served_topology`` column (``TEP{TP}``) says so, and :func:`served_topology` applies it where it
keeps the row's GPU count, or where the recorded layout multiplied the server's GPUs by its attention DP (the
file's ``TP4DP4+EP`` on 16 GPUs is InferenceX's ``tp: 4, dp-attn: true`` on 4: MiniMax-M2.5's FP8 scripts ignore
DP attention and ran it as TEP4, its FP4 scripts as DP4+EP, Kimi-K2.5's B200 FP4 script as TP4). The
``unpredictable`` column marks rows whose recorded workload is not the one that ran.
"""

from __future__ import annotations

import ast
import csv
import math
import operator
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import pandas as pd

from pdtune.errors import InputError
from pdtune.perfmodel.engine import EngineConfig

#: The columns of ``launch_flags.csv`` the rules are made of (the file has more: commit dates, other flags, notes).
COLUMNS = ("model_path", "system", "precision", "date_from", "date_to", "script", "commit", "condition",
           "kv_cache_dtype", "max_num_batched_tokens", "max_num_seqs", "gpu_memory_utilization",
           "max_cudagraph_capture_size", "block_size", "prefix_caching", "served_topology", "unpredictable")
#: What a row's launch says when no launch script of its server is known: the server is vLLM's defaults.
DEFAULT_SERVER = "vLLM's defaults"
#: The names a flag's value or a rule's condition may use: the row's workload and layout.
VARIABLES = ("ISL", "OSL", "CONC", "TP", "EP", "DP")

_COMPARE = {"=": operator.eq, "==": operator.eq, "!=": operator.ne, ">=": operator.ge, "<=": operator.le,
            ">": operator.gt, "<": operator.lt}
_CONDITION = re.compile(r"^\s*([A-Z]+)\s*(==|=|!=|>=|<=|>|<)\s*(\d+)\s*$")
_ARITHMETIC = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv}


@dataclass(frozen=True)
class ServerFlags:
    """The flags of one measured server that pdtune models (None: vLLM's default), and where they were read."""

    kv_cache_dtype: str | None = None
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    gpu_memory_utilization: float | None = None
    max_capture_size: int | None = None
    block_size: int | None = None
    prefix_caching: bool | None = None
    topology: str | None = None  # the layout the script launched, where it is not the one the row records
    unpredictable: str | None = None  # why the row's recorded workload is not the one that ran, where it is not
    source: str = ""

    def engine_config(self, base: EngineConfig) -> EngineConfig:
        """``base`` (vLLM's defaults for the row) with every flag the script passes."""
        changes: dict[str, Any] = {}
        for name in ("kv_cache_dtype", "max_num_batched_tokens", "max_num_seqs", "gpu_memory_utilization",
                     "max_capture_size", "block_size"):
            value = getattr(self, name)
            if value is not None:
                changes[name] = value
        return replace(base, **changes) if changes else base


@dataclass(frozen=True)
class _Rule:
    model: str
    gpu: str
    precision: str
    date_from: str
    date_to: str
    condition: tuple[tuple[str, str, int], ...]
    values: dict[str, str]
    source: str
    line: int


def launch_flags_file() -> Path:
    from pdtune.paths import clusters_dir

    return clusters_dir() / "aiconfigurator-silicon" / "launch_flags.csv"


def _evaluate(text: str, env: dict[str, int], where: str, field: str) -> int:
    """An integer flag value: a number, or arithmetic on :data:`VARIABLES` as the scripts write it (``2*ISL``,
    ``$((ISL * 2))``, ``ISL+OSL+256``, ``max(8192, 2*ISL)``)."""
    unreadable = InputError(where, field, f"cannot read {text!r} (a number or arithmetic on {', '.join(VARIABLES)})")
    s = text.strip()
    if s.startswith("$((") and s.endswith("))"):
        s = s[3:-2]
    s = s.replace("$", "")
    try:
        tree = ast.parse(s, mode="eval")
    except SyntaxError:
        raise unreadable from None

    def value(node: ast.AST) -> int:
        if isinstance(node, ast.Expression):
            return value(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name) and node.id in env:
            return env[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
            return _ARITHMETIC[type(node.op)](value(node.left), value(node.right))
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("max", "min")
                and node.args and not node.keywords):
            return (max if node.func.id == "max" else min)(value(a) for a in node.args)
        raise unreadable

    return value(tree)


def _condition(text: str, where: str) -> tuple[tuple[str, str, int], ...]:
    """``TP=8``, ``CONC>=256&ISL=8192``: every clause must hold."""
    if not text.strip():
        return ()
    out = []
    for clause in re.split(r"&|\band\b", text):
        m = _CONDITION.match(clause)
        if m is None or m.group(1) not in VARIABLES:
            raise InputError(where, "condition", f"cannot read {clause.strip()!r} (e.g. TP=8 or CONC>=256)")
        out.append((m.group(1), m.group(2), int(m.group(3))))
    return tuple(out)


@lru_cache(maxsize=4)
def _rules(path: str) -> tuple[_Rule, ...]:
    rules = []
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise InputError(path, missing[0], "column missing from the launch-flags table")
        for i, rec in enumerate(reader, start=2):
            where = f"{path}:{i}"
            values = {k: (rec.get(k) or "").strip() for k in COLUMNS[8:]}
            rules.append(_Rule(rec["model_path"].strip().lower(), rec["system"].strip().lower(),
                               rec["precision"].strip().lower(), rec["date_from"].strip(), rec["date_to"].strip(),
                               _condition(rec.get("condition") or "", where), values,
                               f"{rec['script'].strip()}@{rec['commit'].strip()[:12]}", i))
    return tuple(rules)


def measured_date(row: Mapping[str, Any]) -> str | None:
    """The measurement date a silicon row's provenance records (``measured=YYYY-MM-DD...``), if any."""
    m = re.search(r"measured=(\d{4}-\d{2}-\d{2})", str(row.get("provenance") or ""))
    return m.group(1) if m else None


def _variables(row: Mapping[str, Any]) -> dict[str, int]:
    from pdtune.topology import parse_topology

    env = {"ISL": int(row["isl"]), "OSL": int(row["osl"]), "CONC": int(row["concurrency"])}
    try:
        topo = parse_topology(str(row.get("topology")), "topology")
        env.update(TP=topo.tp, EP=topo.ep, DP=topo.dp)
    except (InputError, ValueError):
        pass
    return env


def _holds(rule: _Rule, env: dict[str, int]) -> bool:
    return all(name in env and _COMPARE[op](env[name], bound) for name, op, bound in rule.condition)


def row_flags(row: Mapping[str, Any], path: str | Path | None = None) -> ServerFlags | None:
    """The launch flags of an aiconfigurator silicon row's server (None for a row of another source, or one no line
    of the table covers). Among the lines of the row's model, GPU and precision whose condition holds: the first whose
    dates hold the row's measurement date, else the first without dates; an undated row takes the first line without
    dates, else the earliest."""
    if str(row.get("source") or "") != "aiconfigurator-silicon":
        return None
    table = str(path or launch_flags_file())
    if not Path(table).exists():
        return None
    model = str(row.get("model") or "").strip().lower()
    gpu = str(row.get("gpu") or "").strip().lower()
    precision = str(row.get("precision") or "").strip().lower()
    env = _variables(row)
    candidates = [r for r in _rules(table) if (r.model, r.gpu, r.precision) == (model, gpu, precision)
                  and _holds(r, env)]
    if not candidates:
        return None
    date = measured_date(row)
    undated = [r for r in candidates if not r.date_from and not r.date_to]
    if date is None:
        chosen = undated[0] if undated else min(candidates, key=lambda r: (r.date_from, r.line))
    else:
        dated = [r for r in candidates if (r.date_from or r.date_to) and (not r.date_from or r.date_from <= date)
                 and (not r.date_to or date <= r.date_to)]
        if not dated and not undated:
            return None
        chosen = (dated or undated)[0]
    return _flags(chosen, env, table)


def launched_by(rows: pd.DataFrame) -> pd.Series:
    """Per row (by its index), the script version that launched its server (``script@commit``, :func:`row_flags`),
    or :data:`DEFAULT_SERVER`: what a prediction of the row assumes of the server's flags."""
    fields = ("source", "model", "gpu", "precision", "isl", "osl", "concurrency", "topology", "provenance")
    have = [f for f in fields if f in rows.columns]
    seen: dict[tuple, str] = {}  # rows alike in every value row_flags reads share its answer (5,221 rows: 14 s)
    out = []
    for record in rows[have].to_dict("records"):
        key = (*(str(record[f]) for f in have if f != "provenance"), measured_date(record))
        if key not in seen:
            seen[key] = f.source if (f := row_flags(record)) is not None else DEFAULT_SERVER
        out.append(seen[key])
    return pd.Series(out, index=rows.index, dtype=object)


def _flags(rule: _Rule, env: dict[str, int], table: str) -> ServerFlags:
    where = f"{table}:{rule.line}"
    v = rule.values

    def integer(name: str) -> int | None:
        return _evaluate(v[name], env, where, name) if v[name] else None

    util = None
    if v["gpu_memory_utilization"]:
        util = float(v["gpu_memory_utilization"])
        if not (math.isfinite(util) and 0 < util <= 1):
            raise InputError(where, "gpu_memory_utilization", f"must be in (0, 1], got {util}")
    caching = {"on": True, "off": False, "": None}.get(v["prefix_caching"].lower())
    if caching is None and v["prefix_caching"]:
        raise InputError(where, "prefix_caching", f"must be on, off or empty, got {v['prefix_caching']!r}")
    served = None
    if v["served_topology"]:
        served = v["served_topology"]
        for name, value in env.items():
            served = served.replace("{" + name + "}", str(value))
    return ServerFlags(kv_cache_dtype=v["kv_cache_dtype"] or None,
                       max_num_batched_tokens=integer("max_num_batched_tokens"),
                       max_num_seqs=integer("max_num_seqs"), gpu_memory_utilization=util,
                       max_capture_size=integer("max_cudagraph_capture_size"), block_size=integer("block_size"),
                       prefix_caching=caching, topology=served, unpredictable=v["unpredictable"] or None,
                       source=rule.source)


def served_topology(recorded: Any, flags: ServerFlags | None) -> Any:
    """The layout a row's server ran: the script's (``flags.topology``) where it names one of the same GPU count as
    the recorded one, or of the recorded layout's TP GPUs when that layout has attention DP; else the recorded one
    (any other conflict of GPU counts is the data's, and stays visible).

    The second case is how aiconfigurator's file records InferenceX's DP-attention entries: ``tp: 4, ep: 4,
    dp-attn: true`` becomes ``TP4DP4+EP`` on 16 GPUs, but InferenceX starts one server on ``$TP`` GPUs (its scripts
    pass ``--tensor-parallel-size=$TP``, or ``--tensor-parallel-size=1 --data-parallel-size=$TP``) and counts
    ``$TP`` GPUs per single-node run (``utils/process_result.py``: ``tput_per_gpu`` is the total over ``TP``)."""
    if flags is None or flags.topology is None or recorded is None:
        return recorded
    from pdtune.topology import parse_topology

    served = parse_topology(flags.topology, "served_topology")
    if served.gpus == recorded.gpus or (recorded.dp > 1 and served.gpus == recorded.tp * recorded.pp):
        return served
    return recorded


__all__ = ["DEFAULT_SERVER", "ServerFlags", "launch_flags_file", "launched_by", "measured_date", "row_flags",
           "served_topology"]
