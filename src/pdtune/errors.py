"""The one error type for bad input.

A reader's config, log or results file is wrong far more often than our code is, so every check of
external input raises :class:`InputError` naming the file and the field. The CLI prints it as one line
and exits with status 2; nothing else is caught, so a real bug still shows its traceback.
"""

from __future__ import annotations

from os import PathLike


class InputError(ValueError):
    """Bad input: ``source`` is a file (or a flag) and ``field`` the key, column or line that is wrong."""

    def __init__(self, source: str | PathLike[str], field: str, message: str) -> None:
        self.source = str(source)
        self.field = field
        self.message = message
        super().__init__(f"{self.source}: {field}: {message}")


def require(condition: bool, source: str | PathLike[str], field: str, message: str) -> None:
    """Raise :class:`InputError` unless ``condition`` holds."""
    if not condition:
        raise InputError(source, field, message)
