"""The package's layout rules (issue 10): one module per idea, none a grab bag, the map in src/pdtune/README.md
naming every module.

These fail when a module grows past the size the project allows, when the book's build creeps back into
``charts/``, or when a module is added without a line in the package map.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "pdtune"
MAX_LINES = 800

#: Imports that mean "building or executing the book", which belongs in ``pdtune.site``.
BUILD_IMPORTS = ("sphinx", "papermill", "nbclient", "nbformat", "jupyter_book", "myst_nb", "subprocess")


def modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def test_no_module_over_the_limit() -> None:
    sizes = {path.relative_to(PACKAGE): len(path.read_text(encoding="utf-8").splitlines()) for path in modules()}
    assert len(sizes) > 100  # the whole package was read
    over = [f"{path} has {lines} lines" for path, lines in sorted(sizes.items()) if lines > MAX_LINES]
    assert over == [], f"split by idea (limit {MAX_LINES} lines): {'; '.join(over)}"


def test_the_old_grab_bags_are_gone() -> None:
    for name in ("tables.py", "isolation.py", "workbook.py"):
        assert not (PACKAGE / name).exists(), name


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_charts_hold_no_build_code() -> None:
    charts = sorted((PACKAGE / "charts").glob("*.py"))
    assert charts
    building = {path.name: sorted(_imports(path) & set(BUILD_IMPORTS)) for path in charts}
    assert {name: found for name, found in building.items() if found} == {}


def test_the_package_map_names_every_module() -> None:
    text = (PACKAGE / "README.md").read_text(encoding="utf-8")
    named = set(re.findall(r"`([a-z_]+)`", text))
    top = {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    top |= {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    missing = sorted(top - named)
    assert not missing, f"src/pdtune/README.md does not name: {', '.join(missing)}"
    # and the submodules of every package are named on its line
    failures: list[str] = []
    # (``commands`` is one module per subcommand, named for it, and the map says so once)
    for package in sorted(p for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()):
        if package.name == "commands":
            continue
        subs = {p.stem for p in package.glob("*.py") if not p.stem.startswith("_")}
        subs |= {p.name for p in package.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
        lacking = sorted(subs - named)
        failures.extend(f"{package.name}'s {name}" for name in lacking)
    assert not failures, f"src/pdtune/README.md does not name {', '.join(failures)}"


def test_a_package_docstring_that_lists_its_modules_lists_them_all() -> None:
    """``chapters``, ``site`` and ``workbook`` once listed all but their newest module."""
    failures = []
    listing = 0
    for init in sorted(PACKAGE.rglob("__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        listed = set(re.findall(r":mod:`\.(\w+)`", doc))
        if not listed:
            continue
        listing += 1
        subs = {p.stem for p in init.parent.glob("*.py") if not p.stem.startswith("_")}
        subs |= {p.name for p in init.parent.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
        if subs - listed or listed - subs:
            failures.append(f"{init.parent.name}: lacks {sorted(subs - listed)}, names {sorted(listed - subs)}")
    assert listing >= 3 and failures == [], "; ".join(failures)
