"""The one error type for bad input.

A reader's config, log or results file is wrong far more often than our code is, so every check of
external input raises :class:`InputError` naming the file and the field. The CLI prints it as one line
and exits with status 2; nothing else is caught, so a real bug still shows its traceback.

The message is one line however it was built: newlines become spaces and each part is cut to a bounded
length (:data:`MAX_MESSAGE`), so a value echoed from a hostile file (a billion-laughs YAML, a megabyte
string) can never become a multi-megabyte error. :func:`brief` is the bounded ``repr`` to echo a value with.
"""

from __future__ import annotations

import reprlib
from os import PathLike
from typing import Any

#: Characters kept of the source, the field and the message of one error.
MAX_SOURCE = 400
MAX_FIELD = 120
MAX_MESSAGE = 600

_brief = reprlib.Repr()
_brief.maxlevel = 3
_brief.maxlist = _brief.maxtuple = _brief.maxset = _brief.maxdict = 6
_brief.maxstring = _brief.maxother = 60
_brief.maxlong = 40


def brief(value: Any) -> str:
    """``repr(value)`` bounded in depth, items and length: safe to put in an error message, whatever the value."""
    try:
        return one_line(_brief.repr(value), 120)
    except Exception:  # a repr that raises (a hostile object) still gives a message
        return f"<{type(value).__name__}>"


def one_line(text: str, limit: int) -> str:
    """``text`` on one line, cut to ``limit`` characters (an ellipsis says it was cut)."""
    flat = " ".join(str(text).split()) if ("\n" in text or "\r" in text or "\t" in text) else str(text)
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


class InputError(ValueError):
    """Bad input: ``source`` is a file (or a flag) and ``field`` the key, column or line that is wrong."""

    def __init__(self, source: str | PathLike[str], field: str, message: str) -> None:
        self.source = one_line(str(source), MAX_SOURCE)
        self.field = one_line(str(field), MAX_FIELD)
        self.message = one_line(str(message), MAX_MESSAGE)
        super().__init__(f"{self.source}: {self.field}: {self.message}")


class DataError(ValueError):
    """A bundled data file (``data/``, or ``PDTUNE_DATA``) is missing or broken: the installation's fault, not
    the reader's input. Printed like :class:`InputError` (one line, exit status 2), but deliberately *not* a
    subclass of it, so that code treating an ``InputError`` as "this candidate does not fit" (a layout whose
    heads do not divide) can never mistake a missing table for a rejected candidate."""

    def __init__(self, source: str | PathLike[str], field: str, message: str) -> None:
        self.source = one_line(str(source), MAX_SOURCE)
        self.field = one_line(str(field), MAX_FIELD)
        self.message = one_line(str(message), MAX_MESSAGE)
        super().__init__(f"{self.source}: {self.field}: {self.message} (bundled data)")
