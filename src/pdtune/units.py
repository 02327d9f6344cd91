"""Byte units. Bytes are ints everywhere inside pdtune; GiB and MiB appear only at the edges.

Converting at the edge is where outside numbers become bytes, so :func:`from_gib` and :func:`from_mib` check
the *scaled* value: NaN and infinities are refused, as is anything that overflows or exceeds
:data:`~pdtune.limits.MAX_BYTES` once multiplied, and a positive amount that rounds to 0 bytes (it would be
divided by later). The error names ``source`` and ``field``: the flag, or the file and line the number came from.
"""

from __future__ import annotations

import math

from pdtune.errors import InputError
from pdtune.limits import MAX_BYTES

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30
GB = 10**9


def cdiv(a: int, b: int) -> int:
    """Ceiling division of non-negative ints, as vLLM's ``cdiv``."""
    return -(a // -b)


def gib(n_bytes: int | float) -> float:
    return n_bytes / GiB


def mib(n_bytes: int | float) -> float:
    return n_bytes / MiB


def to_bytes(value: float, unit: int, source: str = "value", field: str = "bytes", *,
             negative: bool = False) -> int:
    """``value`` units of ``unit`` bytes as whole bytes, checked after scaling (see the module docstring).

    ``negative`` lets a signed amount through (a deficit a log reports); its size is bounded all the same.
    """
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        raise InputError(source, field, f"expected a number, got {str(value)[:40]!r}") from None
    if math.isnan(number):
        raise InputError(source, field, "is NaN")
    if math.isinf(number):
        raise InputError(source, field, "is infinite")
    if number < 0 and not negative:
        raise InputError(source, field, f"must not be negative, got {number:g}")
    scaled = number * unit
    if not math.isfinite(scaled) or abs(scaled) > MAX_BYTES:
        raise InputError(source, field, f"{number:g} is more than {MAX_BYTES / unit:,.0f} "
                                        f"({_name(unit)}), the {MAX_BYTES // 2**50} PiB pdtune accepts")
    n_bytes = round(scaled)
    if number != 0 and n_bytes == 0:
        raise InputError(source, field, f"{number:g} {_name(unit)} rounds to 0 bytes")
    return n_bytes


def from_gib(value: float, source: str = "value", field: str = "GiB", *, negative: bool = False) -> int:
    """GiB (as published, two decimals) to whole bytes."""
    return to_bytes(value, GiB, source, field, negative=negative)


def from_mib(value: float, source: str = "value", field: str = "MiB", *, negative: bool = False) -> int:
    return to_bytes(value, MiB, source, field, negative=negative)


def _name(unit: int) -> str:
    return {GiB: "GiB", MiB: "MiB", KiB: "KiB"}.get(unit, f"x {unit} B")
