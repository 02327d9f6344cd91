"""How many GPUs a measured deployment used.

Per-GPU throughput divides by a GPU count, so a wrong count is a silently wrong chart. Counts come from
the result files where they exist (srt-slurm file names and job metadata, the InferenceX and rollup
columns); for every other format the reader supplies them, either with ``--gpus`` or with a sidecar file
:data:`SIDECAR_NAME` placed in the results folder (or any folder between it and the path given)::

    # pdtune-gpus.yaml: a disaggregated deployment
    prefill: 8
    decode: 16

    # or an aggregated one: every GPU both prefills and decodes
    total: 8

Without either, loading stops with an error naming the file: never a per-GPU figure divided by a guess.

An aggregated deployment is recorded as ``prefill=0, decode=total`` (srt-slurm's rollup does the same), so
``output_tps_per_decode_gpu`` of an aggregated row divides by all its GPUs, which all decode.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pdtune import guarded
from pdtune.errors import InputError, brief
from pdtune.limits import MAX_GPUS, bound

#: Name of the optional file that states the GPU counts of the results in its folder.
SIDECAR_NAME = "pdtune-gpus.yaml"

_KEYS = ("prefill", "decode", "total")


@dataclass(frozen=True)
class GpuCounts:
    """GPUs of one deployment: ``prefill + decode == total``; aggregated means ``prefill == 0``."""

    prefill: int
    decode: int
    total: int

    def __post_init__(self) -> None:
        _check(self.prefill, self.decode, self.total, "GpuCounts")

    @classmethod
    def aggregated(cls, total: int) -> GpuCounts:
        return cls(0, total, total)

    @classmethod
    def disaggregated(cls, prefill: int, decode: int) -> GpuCounts:
        return cls(prefill, decode, prefill + decode)

    @property
    def is_disaggregated(self) -> bool:
        return self.prefill > 0 and self.decode > 0

    def for_mode(self, mode: str | None) -> GpuCounts:
        """An unsplit count serving a prefill-only sweep puts every GPU on the prefill side."""
        if mode == "prefill" and self.prefill == 0:
            return GpuCounts(self.total, 0, self.total)
        return self

    def describe(self) -> str:
        if self.is_disaggregated:
            return f"prefill={self.prefill},decode={self.decode}"
        return f"total={self.total}"


def _check(prefill: Any, decode: Any, total: Any, source: str) -> None:
    for name, value in (("prefill", prefill), ("decode", decode), ("total", total)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise InputError(source, f"gpus.{name}", f"expected a whole number, got {brief(value)}")
        if value < 0:
            raise InputError(source, f"gpus.{name}", f"must not be negative, got {value}")
        bound(value, MAX_GPUS, source, f"gpus.{name}", "GPUs pdtune accepts")
    if total <= 0:
        raise InputError(source, "gpus.total", f"must be positive, got {total}")
    if prefill + decode != total:
        raise InputError(source, "gpus", f"prefill {prefill} + decode {decode} != total {total}")


def counts_from_mapping(values: dict[str, Any], source: str) -> GpuCounts:
    """``{prefill, decode}``, ``{total}`` or all three (which must agree)."""
    unknown = sorted(set(values) - set(_KEYS))
    if unknown:
        raise InputError(source, "gpus", f"unknown key {brief(unknown[0])} (expected prefill, decode, total)")
    parsed: dict[str, int] = {}
    for key, value in values.items():
        if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
            if not _is_count(value):
                raise InputError(source, f"gpus.{key}", f"a number with {len(value.strip()):,} digits is more "
                                                        f"than the {MAX_GPUS:,} GPUs pdtune accepts")
            value = int(value.strip())
        if isinstance(value, bool) or not isinstance(value, int):
            raise InputError(source, f"gpus.{key}", f"expected a whole number, got {brief(value)}")
        parsed[key] = value
    prefill, decode, total = parsed.get("prefill"), parsed.get("decode"), parsed.get("total")
    if prefill is None and decode is None:
        if total is None:
            raise InputError(source, "gpus", "give total=N, or prefill=N,decode=M")
        counts = (0, total, total)
    elif prefill is None or decode is None:
        raise InputError(source, "gpus", "give both prefill and decode (or total alone)")
    else:
        counts = (prefill, decode, prefill + decode if total is None else total)
    _check(*counts, source)
    return GpuCounts(*counts)


def _is_count(text: str) -> bool:
    """ASCII digits only, and few enough of them to be a count (``"²".isdigit()`` is true, ``int("²")`` fails)."""
    text = text.strip()
    return text.isascii() and text.isdigit() and len(text) <= 18


def parse_gpus(spec: str, source: str = "--gpus") -> GpuCounts:
    """``24`` (aggregated total), ``prefill=8,decode=16``, or ``total=24``."""
    text = spec.strip()
    if text.isascii() and text.isdigit():
        return counts_from_mapping({"total": text}, source)
    values: dict[str, Any] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep:
            raise InputError(source, "gpus", f"expected N or prefill=N,decode=M, got {brief(spec)}")
        values[key.strip().lower()] = value.strip()
    return counts_from_mapping(values, source)


def read_sidecar(path: Path) -> GpuCounts:
    try:
        raw = guarded.read_yaml(path, "gpus")
    except InputError as exc:
        raise InputError(exc.source, "gpus", exc.message) from None
    if isinstance(raw, int) and not isinstance(raw, bool):
        raw = {"total": raw}
    if not isinstance(raw, dict):
        raise InputError(path, "gpus", "expected a mapping with prefill and decode, or total")
    return counts_from_mapping({str(k): v for k, v in raw.items()}, str(path))


class SidecarFinder:
    """The nearest :data:`SIDECAR_NAME` above a result file, not climbing past the path the user gave."""

    def __init__(self) -> None:
        self._by_dir: dict[Path, tuple[Path, GpuCounts] | None] = {}

    def find(self, folder: Path, stop: Path) -> tuple[Path, GpuCounts] | None:
        chain: list[Path] = []
        current = folder
        found: tuple[Path, GpuCounts] | None = None
        while True:
            if current in self._by_dir:
                found = self._by_dir[current]
                break
            chain.append(current)
            candidate = current / SIDECAR_NAME
            if candidate.exists():  # a sidecar that is a folder or a FIFO is reported, not skipped
                found = (candidate, read_sidecar(candidate))
                break
            if current == stop or current.parent == current:
                break
            current = current.parent
        for d in chain:
            self._by_dir[d] = found
        return found
