"""Reading result files: JSON objects, JSON lines and commented CSV, with one-line errors for bad bytes."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from pdtune.errors import InputError


def read_text(path: Path) -> str:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(path, "file", f"unreadable: {exc.strerror or exc}") from None
    if b"\x00" in raw[:4096]:
        raise InputError(path, "file", "binary data, not a text result file")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(path, "file", f"not UTF-8 text (byte {exc.start})") from None
    if not text.strip():
        raise InputError(path, "file", "empty")
    return text


def read_records(path: Path, text: str | None = None) -> list[dict[str, Any]]:
    """One JSON object, or JSON lines (one object per line, as SGLang and ``--append-result`` write)."""
    text = read_text(path) if text is None else text
    if path.suffix != ".jsonl":
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            if exc.msg != "Extra data":
                raise InputError(path, "json", f"not valid JSON (line {exc.lineno}: {exc.msg})") from None
        else:
            if not isinstance(obj, dict):
                raise InputError(path, "json", f"top level must be an object, got {type(obj).__name__}")
            return [obj]
    records: list[dict[str, Any]] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(path, f"line {lineno}", f"not valid JSON ({exc.msg})") from None
        if not isinstance(obj, dict):
            raise InputError(path, f"line {lineno}", f"must be a JSON object, got {type(obj).__name__}")
        records.append(obj)
    if not records:
        raise InputError(path, "file", "no JSON records")
    return records


def read_csv(path: Path, text: str | None = None) -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
    """Header and (file line number, row) pairs; leading ``#`` lines (licence notes) are skipped."""
    text = read_text(path) if text is None else text
    lines = text.splitlines()
    skip = 0
    while skip < len(lines) and (lines[skip].startswith("#") or not lines[skip].strip()):
        skip += 1
    reader = csv.reader(io.StringIO("\n".join(lines[skip:])))
    try:
        header = [h.strip() for h in next(reader)]
    except StopIteration:
        raise InputError(path, "header", "no CSV header") from None
    except csv.Error as exc:
        raise InputError(path, "header", f"not valid CSV ({exc})") from None
    rows: list[tuple[int, dict[str, str]]] = []
    try:
        for i, values in enumerate(reader):
            if not any(v.strip() for v in values):
                continue
            lineno = skip + 2 + i
            if len(values) != len(header):
                raise InputError(path, f"line {lineno}", f"has {len(values)} fields, header has {len(header)}")
            rows.append((lineno, dict(zip(header, values, strict=True))))
    except csv.Error as exc:
        raise InputError(path, "csv", f"not valid CSV ({exc})") from None
    return header, rows


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
