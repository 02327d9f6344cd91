"""vLLM version strings, as users write them and as vLLM prints them.

``0.11``, ``0.26.1rc1.dev1177+ga9a17e709`` and ``v0.33.0`` all parse; only (major, minor, patch) matter
because the source lines this package follows change at minor releases.

The lines pdtune follows run from :data:`OLDEST` (0.11, the article's) to :data:`CURRENT` (0.33). A version
given on the command line or in a parameters file outside that range is refused (:func:`check`): pdtune
cannot know the arithmetic of a line it has not read, and answering with 0.33's under the name 0.40 would
be a silent guess. A version a *log* reports above the newest line is read with the newest line's rules and
says so in the cross-check's notes (``pdtune log``): the log's own numbers show whether they still fit.
"""

from __future__ import annotations

import re

from pdtune.errors import InputError, brief

#: The newest vLLM release whose source this package follows.
CURRENT = "0.33"
#: The oldest: the article's.
OLDEST = "0.11"

#: The vLLM every command and the workbook assume when none is given: the current line. The article's
#: book and its parameter set (data/params/article.yaml) pass the article's 0.26.1 explicitly.
DEFAULT_VLLM = CURRENT

_VERSION = re.compile(r"^v?(\d{1,6})\.(\d{1,6})(?:\.(\d{1,6}))?")


def parse(version: str, source: str = "--vllm", field: str = "vllm") -> tuple[int, int, int]:
    match = _VERSION.match(str(version).strip())
    if not match:
        raise InputError(source, field, f"not a vLLM version: {brief(version)} (expected e.g. 0.11 or 0.33.0)")
    major, minor, patch = match.groups()
    return int(major), int(minor), int(patch or 0)


def check(version: str, source: str = "--vllm", field: str = "vllm") -> str:
    """``version`` if it parses and lies within the lines pdtune follows (0.11 to 0.33); else bad input."""
    parsed = parse(version, source, field)
    if parsed[:2] > parse(CURRENT)[:2]:
        raise InputError(source, field, f"vLLM {brief(version)} is newer than {CURRENT}, the newest line pdtune "
                                        f"follows: give {CURRENT} (or the line you run, if older)")
    if parsed[:2] < parse(OLDEST)[:2]:
        raise InputError(source, field, f"vLLM {brief(version)} is older than {OLDEST}, the oldest line pdtune "
                                        "follows")
    return str(version).strip()


def newer_than_current(version: str) -> bool:
    return parse(version)[:2] > parse(CURRENT)[:2]


def at_least(version: str, reference: str) -> bool:
    return parse(version) >= parse(reference)
