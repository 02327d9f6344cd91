"""Byte units. Bytes are ints everywhere inside pdtune; GiB and MiB appear only at the edges."""

from __future__ import annotations

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30
GB = 10**9


def cdiv(a: int, b: int) -> int:
    """Ceiling division of non-negative ints, as vLLM's ``cdiv``."""
    return -(a // -b)


def round_up(x: int, multiple: int) -> int:
    return cdiv(x, multiple) * multiple


def gib(n_bytes: int | float) -> float:
    return n_bytes / GiB


def mib(n_bytes: int | float) -> float:
    return n_bytes / MiB


def from_gib(value: float) -> int:
    """GiB (as published, two decimals) to whole bytes."""
    return round(value * GiB)


def from_mib(value: float) -> int:
    return round(value * MiB)
