"""Every module, file or name the docs point at exists (issue 19: "See src/pdtune/state.py" outlived the file).

Read: the READMEs (the repository's, the package map, the chapters' guide, data/'s) and every docstring and
comment of ``src/pdtune``. A reference is a ``src/pdtune/...``, ``tests/...``, ``benchmarks/...`` or ``scripts/...`` path, or a dotted ``pdtune.x.y`` name
(a module, or a name in one); each must resolve.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "src" / "pdtune" / "README.md", ROOT / "notebooks" / "README.md",
        *sorted((ROOT / "data").rglob("README.md"))]
PATH = re.compile(r"(?<![\w/.])((?:src/pdtune|tests|benchmarks|scripts)/[\w./-]*\w)")
DOTTED = re.compile(r"(?<![\w.])(pdtune(?:\.\w+)+)")


def sources() -> list[tuple[str, str]]:
    """(where, text) of every document and every module of the package (docstrings and comments included)."""
    out = [(str(p.relative_to(ROOT)), p.read_text(encoding="utf-8")) for p in DOCS]
    out += [(str(p.relative_to(ROOT)), p.read_text(encoding="utf-8")) for p in sorted((ROOT / "src").rglob("*.py"))]
    return out


def resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


def broken(items: list[tuple[str, str]]) -> list[str]:
    found = []
    for where, text in items:
        for path in PATH.findall(text):
            if "*" not in path and not (ROOT / path).exists() and not (ROOT / path.rstrip(".")).exists():
                found.append(f"{where}: {path}")
        for name in DOTTED.findall(text):
            if not resolves(name.rstrip(".")):
                found.append(f"{where}: {name}")
    return sorted(set(found))


def test_every_module_path_and_name_the_docs_name_exists() -> None:
    found = broken(sources())
    assert found == [], f"{len(found)} references to nothing:\n" + "\n".join(found)


def test_the_check_sees_a_stale_path_and_name() -> None:
    stale = [("x", "See `src/pdtune/state.py` and :func:`pdtune.state.plan_state`, :mod:`pdtune.no_such`.")]
    assert broken(stale) == ["x: pdtune.no_such", "x: src/pdtune/state.py"]
