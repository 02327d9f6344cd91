"""A plan file (``pdtune plan --json``) read back for ``pdtune recipe``: one schema, checked before any key is used.

:func:`check_plan` is the only way into a plan's contents for :mod:`pdtune.recipe`, whether the plan comes
from a file (:func:`load_plan`) or from ``pdtune plan --recipes`` and the workbook in the same process. It
checks, naming the file and the key (``rows[3].decode_topology``) of the first problem:

* the format: ``pdtune_plan`` must be :data:`~pdtune.plan.inputs.PLAN_FORMAT` and ``generator`` ``pdtune plan``;
* every key the recipes read, present and of its kind: whole numbers within :mod:`pdtune.limits` (counts of
  GPUs, workers, requests, tokens), finite numbers, text, one of a set;
* values against vLLM's own rules: ``kv_cache_dtype``, ``gpu_memory_utilization``, ``max_num_batched_tokens``
  and ``block_size_to_set`` by the value rules generated from vLLM 0.33's wheel (:mod:`pdtune.vllm_args`), the
  KV dtype also by the state accounting's table (the rule ``pdtune state`` applies), the vLLM line by
  :func:`pdtune.versions.check`;
* the model and its layouts as ``pdtune plan`` and the workbook check them: the config is read again (the file
  it names, else the bundled model of that name), every topology must parse and serve the model
  (:func:`pdtune.scenario.layout_problem`: heads, experts, stages), MTP only on a model with an MTP module;
* the counts agree: each side's GPUs are its workers times its layout's GPUs, a row's GPUs are their sum (or
  its replicas times the layout's) and within the plan's budget, a disaggregated row has at least one worker
  per side and an aggregated row at least one replica; the GPUs are ones pdtune knows.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pdtune import limits, versions
from pdtune.errors import InputError, brief
from pdtune.io import read_mapping
from pdtune.plan.inputs import PLAN_FORMAT

Check = Callable[[Any], str]  # "" when the value is fine, else the problem


def whole(lo: int, hi: int, what: str = "") -> Check:
    def check(value: Any) -> str:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                or value != int(value):
            return f"must be a whole number, got {brief(value)}"
        if not lo <= value <= hi:
            return f"must be from {lo:,} to {hi:,}{' ' + what if what else ''}, got {brief(value)}"
        return ""
    return check


def number(lo: float = 0.0, hi: float = limits.MAX_MEASURE, *, positive: bool = False) -> Check:
    def check(value: Any) -> str:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return f"must be a finite number, got {brief(value)}"
        if value < lo or value > hi or (positive and value <= 0):
            return f"must be {'above' if positive else 'at least'} {lo:g} and at most {hi:g}, got {brief(value)}"
        return ""
    return check


def text(value: Any) -> str:
    return "" if isinstance(value, str) and value.strip() and len(value) <= 4096 else \
        f"must be text, got {brief(value)}"


def any_text(value: Any) -> str:
    """Text, empty allowed."""
    return "" if isinstance(value, str) and len(value) <= 4096 else f"must be text, got {brief(value)}"


def optional(inner: Check) -> Check:
    def check(value: Any) -> str:
        return "" if value is None else inner(value)
    return check


def one_of(*choices: str) -> Check:
    def check(value: Any) -> str:
        return "" if value in choices else f"must be one of {', '.join(choices)}, got {brief(value)}"
    return check


def flag_value(flag: str) -> Check:
    """The value vLLM's rules accept for ``flag`` (:func:`pdtune.vllm_args.value_problem`)."""
    def check(value: Any) -> str:
        from pdtune.vllm_args import value_problem

        if isinstance(value, bool):
            return f"must be a value of vLLM's {flag}, got {brief(value)}"
        problem = value_problem(flag, value)
        return f"vLLM's {flag} {problem}" if problem else ""
    return check


def whole_list(lo: int, hi: int, most: int = 4096) -> Check:
    item = whole(lo, hi)

    def check(value: Any) -> str:
        if not isinstance(value, (list, tuple)) or not value or len(value) > most:
            return f"must be a list of 1 to {most:,} whole numbers, got {brief(value)}"
        for v in value:
            problem = item(v)
            if problem:
                return problem
        return ""
    return check


def speculative_method(value: Any) -> str:
    """A method of vLLM's ``--speculative-config`` (its ``SpeculativeMethod`` choices)."""
    from pdtune.vllm_args import value_rules

    problem = text(value)
    if problem:
        return problem
    choices = value_rules()["--speculative-config"]["fields"]["method"]["choices"]
    return "" if value in choices else f"must be a speculative method of vLLM ({', '.join(choices[:12])}, ...), got " \
                                       f"{brief(value)}"


def vllm_env(value: Any) -> str:
    """``--vllm-env`` as the plan wrote it: a mapping of variables pdtune applies (:func:`pdtune.switches.check_env`,
    for the newest line; recipe checks it again for the plan's own line)."""
    from pdtune.switches import check_env

    if not isinstance(value, dict):
        return f"must be a mapping NAME: VALUE, got {brief(value)}"
    try:
        check_env(value, versions.DEFAULT_VLLM, "settings.vllm_env")
    except InputError as exc:
        return exc.message
    return ""


def versions_line(value: Any) -> str:
    problem = text(value)
    if problem:
        return problem
    try:
        versions.check(value, "settings.vllm")
    except InputError as exc:
        return exc.message
    return ""


COUNT = whole(0, limits.MAX_PARALLEL)
WORKERS = whole(1, limits.MAX_PARALLEL, "workers")
GPUS = whole(1, limits.MAX_GPUS, "GPUs")
REQUESTS = whole(1, limits.MAX_CONCURRENCY, "requests")
MEASURE = number(0.0, limits.MAX_MEASURE)
LATENCY = number(0.0, limits.MAX_MEASURE, positive=True)

#: Every key ``pdtune recipe`` reads, by section, and the check of its value.
SECTIONS: dict[str, dict[str, Check]] = {
    "settings": {
        "isl": whole(1, limits.MAX_MODEL_LEN, "tokens"), "osl": whole(2, limits.MAX_MODEL_LEN, "tokens"),
        "max_gpus": GPUS, "max_num_batched_tokens": flag_value("--max-num-batched-tokens"),
        "gpu_memory_utilization": flag_value("--gpu-memory-utilization"),
        "kv_cache_dtype": flag_value("--kv-cache-dtype"), "vllm": versions_line,
        "decode_context_parallel_size": optional(whole(1, limits.MAX_PARALLEL)),
        "speculative_model": optional(text),
        "num_speculative_tokens": optional(whole(0, limits.MAX_SPECULATIVE_TOKENS, "tokens")),
        "speculative_method": optional(lambda v: speculative_method(v)),
        "vllm_env": optional(vllm_env),
    },
    "model": {"name": text, "source": text, "precision": text, "num_mtp_layers": whole(0, limits.MAX_LAYERS),
              "hub_id": optional(text)},
    "gpus.prefill": {"name": text, "gpus_per_node": GPUS, "nvlink_domain_gpus": GPUS},
    "gpus.decode": {"name": text, "gpus_per_node": GPUS, "nvlink_domain_gpus": GPUS},
}

#: Keys of every row, and those of each serving mode.
ROW: dict[str, Check] = {
    "row": whole(0, 1 << 20), "mode": one_of("agg", "disagg"), "deployment": text, "gpus_total": GPUS,
    "concurrency": REQUESTS, "tps_per_gpu": MEASURE, "tps_per_user": LATENCY, "ttft_ms_p50": LATENCY,
    "tpot_ms_p50": LATENCY, "kv_transfer_ms": MEASURE, "mtp_tokens": whole(0, limits.MAX_SPECULATIVE_TOKENS),
    "curve_concurrencies": whole_list(1, limits.MAX_CONCURRENCY), "network_groups": optional(any_text),
}
DISAGG_ROW: dict[str, Check] = {
    "prefill_topology": text, "decode_topology": text, "n_prefill_workers": WORKERS, "n_decode_workers": WORKERS,
    "gpus_prefill": GPUS, "gpus_decode": GPUS, "prefill_concurrency": REQUESTS, "decode_concurrency": REQUESTS,
    "curve_prefill_concurrency_max": whole(0, limits.MAX_CONCURRENCY),
    "curve_decode_concurrency_max": whole(0, limits.MAX_CONCURRENCY), "kv_link": one_of("nvlink", "scale_out"),
    "prefill_block_tokens": whole(1, limits.MAX_TOKENS_PER_STEP), "decode_block_tokens":
        whole(1, limits.MAX_TOKENS_PER_STEP), "block_size_to_set": optional(flag_value("--block-size")),
}
AGG_ROW: dict[str, Check] = {
    "topology": text, "agg_replicas": WORKERS, "server_concurrency": REQUESTS,
    "curve_server_concurrency_max": whole(0, limits.MAX_CONCURRENCY), "kv_link": one_of("none"),
}
CANDIDATE: dict[str, Check] = {"role": one_of("prefill", "decode"), "topology": text,
                               "mtp_tokens": whole(0, limits.MAX_SPECULATIVE_TOKENS),
                               "sweep_concurrencies": whole_list(1, limits.MAX_CONCURRENCY)}
#: At most this many rows and candidates (a plan's table holds tens).
MAX_ENTRIES = 1 << 16


def load_plan(path: str | Path) -> dict[str, Any]:
    """A ``pdtune plan --json`` file, checked in full (:func:`check_plan`) before anything reads it."""
    source = Path(path)
    data = read_mapping(source, "PLAN.json")
    check_plan(data, source)
    return data


def check_plan(data: Any, source: str | Path = "PLAN.json") -> dict[str, Any]:
    """``data`` checked against the plan schema (see the module docstring); the first problem is an
    :class:`~pdtune.errors.InputError` naming ``source`` and the key. Returns ``data``."""
    if not isinstance(data, dict):
        raise InputError(source, "PLAN.json", "top level must be a JSON object")
    if data.get("generator") != "pdtune plan":
        raise InputError(source, "generator", "not a `pdtune plan --json` output")
    fmt = data.get("pdtune_plan")
    if fmt is None:
        raise InputError(source, "pdtune_plan", f"no format version (this pdtune reads plan format {PLAN_FORMAT}); "
                                                "write the plan again with `pdtune plan --json`")
    if isinstance(fmt, bool) or fmt != PLAN_FORMAT:
        raise InputError(source, "pdtune_plan", f"plan format {brief(fmt)}; this pdtune reads format {PLAN_FORMAT}")
    for key in ("settings", "rows", "model", "gpus"):
        if key not in data:
            raise InputError(source, key, "missing")
    for where, fields in SECTIONS.items():
        section: Any = data
        for part in where.split("."):
            section = section.get(part) if isinstance(section, dict) else None
        if not isinstance(section, dict):
            raise InputError(source, where, "must be an object")
        _check_fields(section, fields, source, where)
    s = data["settings"]
    if s["isl"] + s["osl"] > limits.MAX_MODEL_LEN:
        raise InputError(source, "settings.osl", f"ISL + OSL is more than the {limits.MAX_MODEL_LEN:,} tokens "
                                                 "pdtune accepts")
    for role in ("prefill", "decode"):
        _check_gpu(data["gpus"][role], source, f"gpus.{role}")
    spec = _model(data, source)
    _check_kv_dtype(spec, s, source)
    rows = _entries(data, "rows", source)
    seen: set[int] = set()
    for i, row in enumerate(rows):
        where = f"rows[{i}]"
        _check_fields(row, ROW, source, where)
        _check_fields(row, AGG_ROW if row["mode"] == "agg" else DISAGG_ROW, source, where)
        if int(row["row"]) in seen:
            raise InputError(source, f"{where}.row", f"row {row['row']} given twice")
        seen.add(int(row["row"]))
        _check_row(row, data, spec, source, where)
    for i, cand in enumerate(_entries(data, "candidates", source, required=False)):
        _check_fields(cand, CANDIDATE, source, f"candidates[{i}]")
        _check_layout(spec, cand["topology"], int(cand["mtp_tokens"]), s, source, f"candidates[{i}].topology")
    return data


def _entries(data: dict[str, Any], key: str, source: str | Path, *, required: bool = True) -> list[dict[str, Any]]:
    entries = data.get(key, [] if not required else None)
    if not isinstance(entries, list):
        raise InputError(source, key, "must be a list")
    if len(entries) > MAX_ENTRIES:
        raise InputError(source, key, f"{len(entries):,} entries are more than the {MAX_ENTRIES:,} pdtune reads")
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise InputError(source, f"{key}[{i}]", "must be an object")
    return entries


def _check_fields(section: dict[str, Any], fields: dict[str, Check], source: str | Path, where: str) -> None:
    for key, check in fields.items():
        name = f"{where}.{key}"
        if key not in section:
            if check(None) == "":  # optional: absent is null
                continue
            raise InputError(source, name, "missing")
        problem = check(section[key])
        if problem:
            raise InputError(source, name, problem)


def _check_gpu(gpu: dict[str, Any], source: str | Path, where: str) -> None:
    from pdtune.gpus import load_gpu

    try:
        load_gpu(gpu["name"])
    except InputError as exc:
        raise InputError(source, f"{where}.name", exc.message) from None


def _model(data: dict[str, Any], source: str | Path) -> Any:
    """The plan's model, read again: the config it names, else the bundled model of its name."""
    from pdtune.model import load_model

    m = data["model"]
    where = Path(m["source"])
    target = m["source"] if where.is_file() else m["name"]
    try:
        spec = load_model(target)
    except InputError as exc:
        raise InputError(source, "model.source", f"the model's config cannot be read ({exc.message}); the "
                                                 "recipes check every layout against it") from None
    if int(m["num_mtp_layers"]) != spec.num_mtp_layers:
        raise InputError(source, "model.num_mtp_layers", f"{m['num_mtp_layers']}, but {spec.source} has "
                                                         f"{spec.num_mtp_layers}")
    return spec


def _check_kv_dtype(spec: Any, s: dict[str, Any], source: str | Path) -> None:
    """The KV cache dtype as ``pdtune state`` takes it (its table of dtypes and their bytes)."""
    from pdtune.state import plan_state

    try:
        plan_state(spec, max_model_len=s["isl"] + s["osl"], tp=1, kv_cache_dtype=s["kv_cache_dtype"],
                   vllm=s["vllm"])
    except InputError as exc:
        if "dtype" in exc.field or "dtype" in exc.message:
            raise InputError(source, "settings.kv_cache_dtype", exc.message) from None
        # other problems are the layouts' (checked per row, with their own key)


def _check_layout(spec: Any, topology: str, mtp: int, s: dict[str, Any], source: str | Path, where: str) -> Any:
    from pdtune.scenario import layout_problem
    from pdtune.topology import parse_topology

    problem = layout_problem(spec, topology, max_model_len=s["isl"] + s["osl"], kv_cache_dtype=s["kv_cache_dtype"],
                             vllm=s["vllm"], source=where)
    if problem:
        raise InputError(source, where, problem)
    layout = parse_topology(topology, where)
    if layout.ep_size is not None:
        raise InputError(source, where, "vLLM has no layout with experts over a subset of the ranks (+EP<n>)")
    if mtp and not spec.num_mtp_layers:
        raise InputError(source, where.rsplit(".", 1)[0] + ".mtp_tokens",
                         f"MTP with {mtp} draft tokens, but {spec.name} has no MTP module")
    return layout


def _check_row(row: dict[str, Any], data: dict[str, Any], spec: Any, source: str | Path, where: str) -> None:
    s = data["settings"]
    budget = int(s["max_gpus"])
    mtp = int(row["mtp_tokens"])
    if row["mode"] == "agg":
        if mtp:
            raise InputError(source, f"{where}.mtp_tokens", "an aggregated row runs no MTP")
        layout = _check_layout(spec, row["topology"], 0, s, source, f"{where}.topology")
        gpus = int(row["agg_replicas"]) * layout.gpus
        if int(row["gpus_total"]) != gpus:
            raise InputError(source, f"{where}.gpus_total", f"{row['gpus_total']}, but {row['agg_replicas']} "
                                                            f"replicas of {layout.canonical} take {gpus}")
    else:
        p = _check_layout(spec, row["prefill_topology"], 0, s, source, f"{where}.prefill_topology")
        d = _check_layout(spec, row["decode_topology"], mtp, s, source, f"{where}.decode_topology")
        for side, layout in (("prefill", p), ("decode", d)):
            gpus = int(row[f"n_{side}_workers"]) * layout.gpus
            if int(row[f"gpus_{side}"]) != gpus:
                raise InputError(source, f"{where}.gpus_{side}", f"{row[f'gpus_{side}']}, but "
                                                                 f"{row[f'n_{side}_workers']} workers of "
                                                                 f"{layout.canonical} take {gpus}")
        total = int(row["gpus_prefill"]) + int(row["gpus_decode"])
        if int(row["gpus_total"]) != total:
            raise InputError(source, f"{where}.gpus_total", f"{row['gpus_total']}, but the two sides take {total}")
        if data["gpus"]["prefill"]["name"] == data["gpus"]["decode"]["name"] and row["kv_link"] == "nvlink" and \
                total > int(data["gpus"]["prefill"]["nvlink_domain_gpus"]):
            raise InputError(source, f"{where}.kv_link", f"NVLink for {total} GPUs, more than one NVLink domain "
                                                         f"({data['gpus']['prefill']['nvlink_domain_gpus']})")
    if int(row["gpus_total"]) > budget:
        raise InputError(source, f"{where}.gpus_total", f"{row['gpus_total']} GPUs, over the plan's budget of "
                                                        f"{budget}")
