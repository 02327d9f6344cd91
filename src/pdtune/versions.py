"""vLLM version strings, as users write them and as vLLM prints them.

``0.11``, ``0.26.1rc1.dev1177+ga9a17e709`` and ``v0.33.0`` all parse; only (major, minor, patch) matter
because the source lines this package follows change at minor releases.
"""

from __future__ import annotations

import re

from pdtune.errors import InputError

#: The newest vLLM release whose source this package follows.
CURRENT = "0.33"

#: The vLLM every command and the workbook assume when none is given: the current line. The article's
#: book and its parameter set (data/params/article.yaml) pass the article's 0.26.1 explicitly.
DEFAULT_VLLM = CURRENT

_VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?")


def parse(version: str, source: str = "--vllm") -> tuple[int, int, int]:
    match = _VERSION.match(version.strip())
    if not match:
        raise InputError(source, "vllm", f"not a vLLM version: {version!r} (expected e.g. 0.11 or 0.33.0)")
    major, minor, patch = match.groups()
    return int(major), int(minor), int(patch or 0)


def at_least(version: str, reference: str) -> bool:
    return parse(version) >= parse(reference)
