"""A plan file (``pdtune plan --json``) read back for ``pdtune recipe``, every key it reads checked."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from pdtune import limits
from pdtune.errors import InputError, brief
from pdtune.io import read_mapping


#: What ``pdtune recipe`` reads from a plan file and the kind of each value ("whole": an int, or a float such as
#: ``3.0``, within :data:`pdtune.limits.MAX_EXACT_INT`; "number": finite). A file ``pdtune plan --json`` wrote has
#: all of it; one edited by hand or truncated is refused here, naming the key, before a recipe is written.
_PLAN_SCHEMA: dict[str, dict[str, str]] = {
    "settings": {"isl": "whole", "osl": "whole", "max_gpus": "whole", "max_num_batched_tokens": "whole",
                 "gpu_memory_utilization": "number", "kv_cache_dtype": "text"},
    "model": {"name": "text", "precision": "text"},
    "gpus.prefill": {"name": "text", "gpus_per_node": "whole"},
    "gpus.decode": {"name": "text", "gpus_per_node": "whole"},
}
_PLAN_ROW = {"row": "whole", "deployment": "text", "prefill_topology": "text", "decode_topology": "text",
             "mtp_tokens": "whole", "n_prefill_workers": "whole", "n_decode_workers": "whole", "concurrency": "whole"}
_PLAN_CANDIDATE = {"role": "text", "topology": "text", "mtp_tokens": "whole"}


def load_plan(path: str | Path) -> dict[str, Any]:
    """A ``pdtune plan --json`` file, checked for everything ``pdtune recipe`` reads from it."""
    source = Path(path)
    data = read_mapping(source, "PLAN.json")
    if data.get("generator") != "pdtune plan":
        raise InputError(source, "generator", "not a `pdtune plan --json` output")
    for key in ("settings", "rows", "model", "gpus"):
        if key not in data:
            raise InputError(source, key, "missing")
    for where, fields in _PLAN_SCHEMA.items():
        section: Any = data
        for part in where.split("."):
            section = section.get(part) if isinstance(section, dict) else None
        if not isinstance(section, dict):
            raise InputError(source, where, "must be an object")
        _check_plan_fields(section, fields, source, where)
    for key, fields in (("rows", _PLAN_ROW), ("candidates", _PLAN_CANDIDATE)):
        entries = data.get(key, [])
        if not isinstance(entries, list):
            raise InputError(source, key, "must be a list")
        for i, entry in enumerate(entries):
            if not isinstance(entry, dict):
                raise InputError(source, f"{key}[{i}]", "must be an object")
            _check_plan_fields(entry, fields, source, f"{key}[{i}]")
    return data


def _check_plan_fields(section: dict[str, Any], fields: dict[str, str], source: Path, where: str) -> None:
    for key, kind in fields.items():
        value = section.get(key)
        name = f"{where}.{key}"
        if kind == "text":
            if not isinstance(value, str) or not value.strip():
                raise InputError(source, name, f"must be text, got {brief(value)}")
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise InputError(source, name, f"must be a number, got {brief(value)}")
        if kind == "whole" and (value != int(value) or not 0 <= value <= limits.MAX_EXACT_INT):
            raise InputError(source, name, f"must be a whole number from 0 to {limits.MAX_EXACT_INT:,}, got "
                                           f"{brief(value)}")

