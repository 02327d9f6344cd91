"""Files: output that appears whole or not at all, values ready for JSON, and input read with one-line errors."""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path
from typing import Any

from pdtune.errors import InputError


def plain(value: Any) -> Any:
    """A JSON-ready scalar: numpy to Python, NaN to ``None`` (JSON has no NaN)."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder, then rename it into place."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# ------------------------------------------------------------------------------------------ input


def read_mapping(path: str | os.PathLike[str], field: str) -> dict[str, Any]:
    """A YAML (``.yaml``/``.yml``) or JSON file whose top level is a mapping; anything else is bad input naming
    ``field``."""
    import json

    import yaml

    source = Path(path)
    try:
        text = source.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(source, field, f"unreadable: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise InputError(source, field, "not UTF-8 text") from None
    try:
        if source.suffix in (".yaml", ".yml"):
            data = yaml.safe_load(text)
        else:
            data = json.loads(text)
    except yaml.YAMLError as exc:
        raise InputError(source, field, f"not valid YAML: {str(exc).splitlines()[0]}") from None
    except json.JSONDecodeError as exc:
        raise InputError(source, field, f"not valid JSON (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(data, dict):
        raise InputError(source, field, "top level must be a mapping")
    return data


def read_csv_table(path: str | os.PathLike[str], columns: tuple[str, ...]) -> list[dict[str, str]]:
    """The rows of a bundled CSV table that must have ``columns``; a missing column is bad input naming it."""
    import csv

    source = Path(path)
    try:
        with source.open(encoding="utf-8", newline="") as fh:
            reader = csv.DictReader(fh)
            missing = [c for c in columns if c not in (reader.fieldnames or [])]
            if missing:
                raise InputError(source, missing[0], "column missing")
            return list(reader)
    except OSError as exc:
        raise InputError(source, source.name, f"unreadable: {exc.strerror}") from None


def staging_dir(target: Path) -> Path:
    """A fresh hidden folder beside ``target`` to build its files in (then renamed into place), so that a
    failure leaves nothing half-written; ``target`` must be a folder or absent."""
    if target.exists() and not target.is_dir():
        raise InputError(target, "--out", "exists and is not a folder")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=f".{target.name}.new-", dir=target.parent))
    except OSError as exc:
        raise InputError(target, "--out", f"cannot write there: {exc.strerror}") from None
