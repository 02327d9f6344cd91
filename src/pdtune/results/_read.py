"""Reading result files: JSON objects, JSON lines and commented CSV, through the guarded reader
(:mod:`pdtune.guarded`: file type, size, encoding, depth, number length and duplicate keys checked)."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from pdtune import guarded
from pdtune.errors import InputError


def read_text(path: Path) -> str:
    text = guarded.read_text(path, "file")
    if not text.strip():
        raise InputError(path, "file", "empty")
    return text


def read_records(path: Path, text: str | None = None) -> list[dict[str, Any]]:
    """One JSON object, or JSON lines (one object per line, as SGLang and ``--append-result`` write)."""
    text = read_text(path) if text is None else text
    if path.suffix != ".jsonl":
        try:
            obj = guarded.parse_json(text, path)
        except InputError as exc:
            if "Extra data" not in exc.message:
                raise
        else:
            if not isinstance(obj, dict):
                raise InputError(path, "json", f"top level must be an object, got {type(obj).__name__}")
            return [obj]
    records: list[dict[str, Any]] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"line {lineno}"
        try:
            obj = guarded.parse_json(line, path, where)
        except InputError as exc:
            if exc.field == "json" or exc.field == where:
                raise InputError(path, where, exc.message) from None
            raise
        if not isinstance(obj, dict):
            raise InputError(path, where, f"must be a JSON object, got {type(obj).__name__}")
        records.append(obj)
    if not records:
        raise InputError(path, "file", "no JSON records")
    return records


def read_csv(path: Path, text: str | None = None) -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
    """Header and (file line number, row) pairs; leading ``#`` lines (licence notes) are skipped."""
    return guarded.parse_csv(read_text(path) if text is None else text, path)


def csv_header(path: Path, text: str) -> list[str] | None:
    """The header of a commented CSV, or None when the first data line is not one."""
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        try:
            return [h.strip() for h in next(csv.reader([line]))]
        except (csv.Error, StopIteration):
            return None
    return None
