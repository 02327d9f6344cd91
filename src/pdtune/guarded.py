"""The guarded reader: every JSON, JSON-lines, YAML and CSV file pdtune reads comes in through here.

A file from outside can be anything, so before a parser sees a byte:

* **file type**: only a regular file is opened. A folder, a FIFO, a device or a socket is refused from
  ``os.stat`` alone, and the open itself is non-blocking (``O_NONBLOCK``) and checked again with ``fstat``,
  so a FIFO swapped in between can never hang the command;
* **size**: at most ``limit`` bytes (:data:`MAX_TEXT_BYTES` by default) are read;
* **encoding**: UTF-8 (a byte-order mark is dropped); NUL bytes mean binary data. Either is one line naming
  the file.

Then each parser is bounded:

* **JSON**: nesting at most :data:`MAX_DEPTH` deep, number literals at most :data:`MAX_NUMBER_CHARS`
  characters (Python refuses ints past 4,300 digits with a ``ValueError``; this says which file), a key given
  twice in one object refused (the second would silently win);
* **YAML**: the safe loader, plus: a key given twice refused, a complex key (``? [a, b]``) refused, aliases
  may expand to at most :data:`MAX_YAML_VALUES` values and :data:`MAX_DEPTH` levels (a billion-laughs file
  is refused before it is built), self-referencing aliases refused, number literals bounded as in JSON;
* **CSV**: leading ``#`` comment lines skipped, a header given twice refused, a field longer than the csv
  module's limit refused, every row as wide as the header.

Every failure is an :class:`~pdtune.errors.InputError` naming the file and the field (or line); values are
echoed only through :func:`~pdtune.errors.brief`.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import yaml

from pdtune.errors import DataError, InputError, brief

#: Bytes read from one JSON, YAML or CSV file (a vLLM bench result with every request's arrays is a few MB).
MAX_TEXT_BYTES = 64 << 20
#: Containers inside containers, in JSON and YAML alike (real files nest fewer than ten deep).
MAX_DEPTH = 64
#: Characters of one number literal: 2^63 has 19 digits, a float's full precision about 25.
MAX_NUMBER_CHARS = 64
#: Values a YAML document may hold once its aliases are expanded.
MAX_YAML_VALUES = 200_000

PathLike = str | os.PathLike[str]


# ------------------------------------------------------------------------------------------ files


@contextlib.contextmanager
def bundled() -> Iterator[None]:
    """Reading a bundled data file: its :class:`InputError` becomes a :class:`~pdtune.errors.DataError`."""
    try:
        yield
    except InputError as exc:
        raise DataError(exc.source, exc.field, exc.message) from None


def describe_mode(mode: int) -> str | None:
    """What a non-regular file is, in words (None for a regular file)."""
    if stat.S_ISREG(mode):
        return None
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def check_regular(path: PathLike, field: str = "file", *, limit: int | None = None) -> os.stat_result:
    """``os.stat`` of ``path`` (symbolic links followed) if it is a regular file no larger than ``limit``."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise InputError(path, field, "no such file") from None
    except OSError as exc:
        raise InputError(path, field, f"unreadable: {exc.strerror or exc}") from None
    kind = describe_mode(info.st_mode)
    if kind is not None:
        raise InputError(path, field, f"is {kind}, not a regular file")
    if limit is not None and info.st_size > limit:
        raise InputError(path, field, f"is {info.st_size:,} bytes, more than the {limit:,} pdtune reads")
    return info


def open_regular(path: PathLike, field: str = "file", *, limit: int | None = None) -> IO[bytes]:
    """A regular file opened for reading without ever blocking on a FIFO or a device (see the module docstring)."""
    check_regular(path, field, limit=limit)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise InputError(path, field, f"unreadable: {exc.strerror or exc}") from None
    try:
        kind = describe_mode(os.fstat(fd).st_mode)  # swapped for something else after the stat
        if kind is not None:
            raise InputError(path, field, f"is {kind}, not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def read_bytes(path: PathLike, field: str = "file", *, limit: int = MAX_TEXT_BYTES) -> bytes:
    with open_regular(path, field, limit=limit) as fh:
        try:
            data = fh.read(limit + 1)
        except OSError as exc:
            raise InputError(path, field, f"unreadable: {exc.strerror or exc}") from None
    if len(data) > limit:  # /proc and other files whose size stat does not know
        raise InputError(path, field, f"more than the {limit:,} bytes pdtune reads")
    return data


def decode(data: bytes, source: PathLike, field: str = "file") -> str:
    """UTF-8 text (a byte-order mark dropped); NUL bytes or bad UTF-8 are one line naming ``source``."""
    nul = data.find(b"\0")
    if nul >= 0:
        raise InputError(source, field, f"binary data (a NUL byte at {nul:,}), not a text file")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(source, field, f"not UTF-8 text (byte {exc.start:,})") from None


def read_text(path: PathLike, field: str = "file", *, limit: int = MAX_TEXT_BYTES) -> str:
    """A text file, read whole after the checks of :func:`open_regular` (see the module docstring)."""
    return decode(read_bytes(path, field, limit=limit), path, field)


def iter_lines(path: PathLike, field: str = "file", *, max_line: int = 1 << 16,
               chunk: int = 1 << 20) -> Iterator[str]:
    """The lines of a (possibly huge) text file, streamed: memory stays bounded by ``chunk`` and ``max_line``.

    A line longer than ``max_line`` characters is cut there (the rest up to its newline is dropped): no line a
    reader looks for is that long, and nothing downstream then costs more than ``max_line`` per line. Bytes
    that are not UTF-8 become U+FFFD; a NUL in the first chunk means a binary file.
    """
    import codecs

    fh = open_regular(path, field)
    try:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        pending = ""
        skipping = False  # inside the unread tail of an over-long line
        first = True
        while True:
            try:
                raw = fh.read(chunk)
            except OSError as exc:
                raise InputError(path, field, f"unreadable: {exc.strerror or exc}") from None
            if first:
                if b"\x00" in raw[:8192]:
                    raise InputError(path, field, "binary data, not a text file")
                if raw.startswith(codecs.BOM_UTF8):
                    raw = raw[len(codecs.BOM_UTF8):]
                first = False
            text = pending + decoder.decode(raw, final=not raw)
            start = 0
            while True:
                end = text.find("\n", start)
                if end < 0:
                    break
                if skipping:
                    skipping = False
                else:
                    yield text[start:min(end + 1, start + max_line)]
                start = end + 1
            pending = text[start:]
            if len(pending) > max_line:
                if not skipping:
                    yield pending[:max_line]
                skipping = True
                pending = ""
            if not raw:
                if pending and not skipping:
                    yield pending
                return
    finally:
        fh.close()


# ------------------------------------------------------------------------------------------ JSON


def _number_hooks(source: PathLike) -> tuple[Callable[[str], int], Callable[[str], float]]:
    def parse_int(text: str) -> int:
        if len(text) > MAX_NUMBER_CHARS:
            raise InputError(source, "json", f"a number with {len(text):,} digits (more than {MAX_NUMBER_CHARS})")
        return int(text)

    def parse_float(text: str) -> float:
        if len(text) > MAX_NUMBER_CHARS:
            raise InputError(source, "json", f"a number {len(text):,} characters long (more than {MAX_NUMBER_CHARS})")
        return float(text)

    return parse_int, parse_float


def _no_duplicates(source: PathLike) -> Callable[[list[tuple[str, Any]]], dict[str, Any]]:
    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out = dict(items)
        if len(out) != len(items):
            seen: set[str] = set()
            for key, _ in items:
                if key in seen:
                    raise InputError(source, key, "is given twice in one JSON object (the second would win)")
                seen.add(key)
        return out

    return pairs


def parse_json(text: str, source: PathLike, field: str = "json") -> Any:
    """One JSON document, bounded as the module docstring says."""
    parse_int, parse_float = _number_hooks(source)
    try:
        value = json.loads(text, object_pairs_hook=_no_duplicates(source), parse_int=parse_int,
                           parse_float=parse_float)
    except json.JSONDecodeError as exc:
        raise InputError(source, field, f"not valid JSON (line {exc.lineno}: {exc.msg})") from None
    except RecursionError:
        raise InputError(source, field, f"nested more than {MAX_DEPTH} levels deep") from None
    check_depth(value, source, field)
    return value


def read_json(path: PathLike, field: str = "json", *, limit: int = MAX_TEXT_BYTES) -> Any:
    return parse_json(read_text(path, "file", limit=limit), path, field)


def check_depth(value: Any, source: PathLike, field: str, limit: int = MAX_DEPTH) -> None:
    """Refuse lists and mappings nested more than ``limit`` deep (walked without recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if not isinstance(item, (dict, list)):
            continue
        children = item.values() if isinstance(item, dict) else item
        if depth > limit:
            raise InputError(source, field, f"nested more than {limit} levels deep")
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))


# ------------------------------------------------------------------------------------------ YAML


class _Refused(yaml.YAMLError):
    """A YAML document pdtune will not build (carries the message and the line)."""

    def __init__(self, message: str, node: yaml.Node | None = None) -> None:
        super().__init__(message)
        self.problem = message
        self.problem_mark = node.start_mark if node is not None else None


class GuardedLoader(yaml.SafeLoader):
    """PyYAML's safe loader with the bounds of the module docstring; use :func:`parse_yaml`."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _value in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            if not isinstance(key_node, yaml.ScalarNode):
                raise _Refused("a complex key (a list or mapping used as a key) is not accepted", key_node)
            key = self.construct_object(key_node, deep=deep)
            try:
                line = seen.get(key)
            except TypeError:
                raise _Refused("a key must be text or a number", key_node) from None
            if line is not None:
                raise _Refused(f"{brief(key)} is given twice (lines {line} and {key_node.start_mark.line + 1})",
                               key_node)
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        if len(node.value) > MAX_NUMBER_CHARS:
            raise _Refused(f"a number with {len(node.value):,} digits (more than {MAX_NUMBER_CHARS})", node)
        return super().construct_yaml_int(node)

    def construct_yaml_float(self, node: yaml.ScalarNode) -> float:
        if len(node.value) > MAX_NUMBER_CHARS:
            raise _Refused(f"a number {len(node.value):,} characters long (more than {MAX_NUMBER_CHARS})", node)
        return super().construct_yaml_float(node)


GuardedLoader.add_constructor("tag:yaml.org,2002:int", GuardedLoader.construct_yaml_int)
GuardedLoader.add_constructor("tag:yaml.org,2002:float", GuardedLoader.construct_yaml_float)


def _check_graph(root: yaml.Node) -> None:
    """Size (aliases expanded) and depth of a composed YAML graph, each node visited once."""
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        children = _children(node)
        if done:
            open_nodes.discard(key)
            size[key] = 1 + sum(size[id(c)] for c in children)
            depth[key] = 1 + max((depth[id(c)] for c in children), default=0)
            if size[key] > MAX_YAML_VALUES:
                raise _Refused(f"its aliases expand to more than {MAX_YAML_VALUES:,} values (an alias bomb?)", node)
            if depth[key] > MAX_DEPTH:
                raise _Refused(f"nested more than {MAX_DEPTH} levels deep", node)
            continue
        if key in size:
            continue
        if key in open_nodes:
            raise _Refused("an alias refers to the node it is inside", node)
        open_nodes.add(key)
        stack.append((node, True))
        for child in children:
            if id(child) in open_nodes:
                raise _Refused("an alias refers to the node it is inside", child)
            if id(child) not in size:
                stack.append((child, False))


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def parse_yaml(text: str, source: PathLike, field: str = "yaml") -> Any:
    """One YAML document, bounded as the module docstring says; a syntax error names its line."""
    loader = GuardedLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_graph(node)
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else field
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(source, where, f"not valid YAML: {problem}") from None
    except RecursionError:
        raise InputError(source, field, f"nested more than {MAX_DEPTH} levels deep") from None
    finally:
        loader.dispose()


def read_yaml(path: PathLike, field: str = "yaml", *, limit: int = MAX_TEXT_BYTES) -> Any:
    return parse_yaml(read_text(path, "file", limit=limit), path, field)


def read_mapping(path: PathLike, field: str) -> dict[str, Any]:
    """A YAML (``.yaml``/``.yml``) or JSON file whose top level is a mapping; anything else is bad input
    naming ``field``."""
    source = Path(path)
    try:
        text = read_text(source, field)
        data = parse_yaml(text, source, field) if source.suffix in (".yaml", ".yml") else parse_json(text, source, field)
    except InputError as exc:
        if exc.field in ("file", "json", "yaml"):
            raise InputError(exc.source, field, exc.message) from None
        raise
    if not isinstance(data, dict):
        raise InputError(source, field, "top level must be a mapping")
    return data


# ------------------------------------------------------------------------------------------ CSV


def parse_csv(text: str, source: PathLike) -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
    """Header and (file line number, row) pairs of CSV text; leading ``#`` lines (licence notes) are skipped."""
    lines = text.splitlines()
    skip = 0
    while skip < len(lines) and (lines[skip].startswith("#") or not lines[skip].strip()):
        skip += 1
    reader = csv.reader(io.StringIO("\n".join(lines[skip:])))
    try:
        header = [h.strip() for h in next(reader)]
    except StopIteration:
        raise InputError(source, "header", "no CSV header") from None
    except csv.Error as exc:
        raise InputError(source, "header", f"not valid CSV ({exc})") from None
    seen: set[str] = set()
    for name in header:
        if name in seen:
            raise InputError(source, name, "column given twice in the header (which one counts?)")
        seen.add(name)
    rows: list[tuple[int, dict[str, str]]] = []
    try:
        for i, values in enumerate(reader):
            if not any(v.strip() for v in values):
                continue
            lineno = skip + 2 + i
            if len(values) != len(header):
                raise InputError(source, f"line {lineno}", f"has {len(values)} fields, header has {len(header)}")
            rows.append((lineno, dict(zip(header, values, strict=True))))
    except csv.Error as exc:
        raise InputError(source, "csv", f"not valid CSV ({exc})") from None
    return header, rows


def read_csv(path: PathLike, *, limit: int = MAX_TEXT_BYTES) -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
    return parse_csv(read_text(path, "file", limit=limit), path)


def read_csv_table(path: PathLike, columns: tuple[str, ...]) -> list[dict[str, str]]:
    """The rows of a CSV table that must have ``columns``; a missing column is bad input naming it."""
    header, rows = read_csv(path)
    missing = [c for c in columns if c not in header]
    if missing:
        raise InputError(path, missing[0], "column missing")
    return [row for _, row in rows]


def read_frame(path: PathLike, columns: tuple[str, ...] = ()) -> Any:
    """A CSV table as a pandas frame, read by :func:`read_csv` first (file type, encoding, duplicate headers),
    then typed by pandas; ``columns`` must be present."""
    import pandas as pd

    header, _rows = read_csv(path)
    missing = [c for c in columns if c not in header]
    if missing:
        raise InputError(path, missing[0], "column missing")
    text = read_text(path)
    try:
        return pd.read_csv(io.StringIO(text), comment=None, skip_blank_lines=True,
                           skiprows=_comment_lines(text))
    except (ValueError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise InputError(path, "csv", f"not a table pandas reads ({str(exc).splitlines()[0]})") from None


def _comment_lines(text: str) -> int:
    count = 0
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            count += 1
        else:
            break
    return count
