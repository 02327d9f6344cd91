"""No dead code: every top-level function, class and constant of ``src/pdtune`` is used by something that ships
(issue 19).

"Used" means named outside its own definition, read with Python's parser, in the package itself, the chapters
(``notebooks/*.md``, their code cells), ``benchmarks/``, ``scripts/`` or ``data/``'s scripts. Tests alone do not
count: a function only a test calls is a function nothing needs. A package ``__init__`` importing a name to
re-export it is not a use either. Names are matched as names (like vulture), so a name used by one module keeps
another module's namesake alive: the check errs towards silence, never towards a false alarm.

A few names are used by something that is not Python naming them; :data:`CALLED_BY_NAME` says who.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "pdtune"

#: Names something other than Python source calls by name, and who does.
CALLED_BY_NAME = {
    "setup": "Sphinx, for the extension pdtune.site.bookbuild that _config.yml names",
    "register": "pdtune.cli, for each module of pdtune.commands it discovers",
    "run": "pdtune.cli, through the parser's func default set by each command's register()",
}


def definitions(path: Path) -> Iterator[tuple[str, int]]:
    """(name, line) of every top-level function, class and constant (an UPPER_CASE name) a module defines."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            yield node.name, node.lineno
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name) and target.id.isupper():
                    yield target.id, node.lineno


def names_in(tree: ast.AST, skip: set[int] = frozenset()) -> set[str]:  # type: ignore[assignment]
    """Every name ``tree`` uses: loaded names, attributes, names imported (outside ``skip``, nodes by id)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.ImportFrom | ast.Import):
            found |= {alias.name.rsplit(".", 1)[-1] for alias in node.names}
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and re.fullmatch(r"[A-Za-z_]\w*",
                                                                                               node.value):
            found.add(node.value)  # getattr(module, "name"), __all__ lists in modules that are not re-exports
    return found


def module_uses(path: Path) -> set[str]:
    """The names a module uses (its top-level definitions' own names aside, unless something else names them)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    is_init = path.name == "__init__.py"
    skip: set[int] = set()
    if is_init:  # re-exports: the imports and __all__ of a package's __init__ are not uses
        for node in tree.body:
            if isinstance(node, ast.ImportFrom | ast.Import):
                skip |= {id(n) for n in ast.walk(node)}
            elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__"
                                                      for t in node.targets):
                skip |= {id(n) for n in ast.walk(node)}
    used: set[str] = set()
    for node in tree.body:
        if id(node) in skip:
            continue
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            # a definition naming itself (recursion) does not use itself; a call decorator (``@rule("...")``)
            # registers it, which is a use
            for part in [*node.decorator_list, *node.body, *getattr(node, "bases", []),
                         *([node.args] if hasattr(node, "args") else []),
                         *([node.returns] if getattr(node, "returns", None) else [])]:
                used |= names_in(part, skip) - {node.name}
            if any(isinstance(d, ast.Call) for d in node.decorator_list):
                used.add(node.name)
        else:
            used |= names_in(node, skip)
    return used


def notebook_code(path: Path) -> str:
    """The code cells of a MyST chapter, joined."""
    cells = re.findall(r"^```\{code-cell\}[^\n]*\n(.*?)^```", path.read_text(encoding="utf-8"), re.M | re.S)
    return "\n".join("\n".join(ln for ln in c.splitlines() if not ln.startswith(":")) for c in cells)


def shipped_uses() -> set[str]:
    used: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        used |= module_uses(path)
    for folder in ("benchmarks", "scripts", "data"):
        for path in (ROOT / folder).rglob("*.py"):
            used |= names_in(ast.parse(path.read_text(encoding="utf-8")))
    for path in (ROOT / "notebooks").glob("*.md"):
        used |= names_in(ast.parse(notebook_code(path)))
    return used


def dead(used: set[str], paths: list[Path], root: Path = ROOT) -> list[str]:
    found = []
    for path in sorted(paths):
        for name, line in definitions(path):
            if name.startswith("__") or name in CALLED_BY_NAME or name in used:
                continue
            found.append(f"{path.relative_to(root)}:{line} {name}")
    return found


def test_every_top_level_name_is_used_by_what_ships() -> None:
    found = dead(shipped_uses(), list(PACKAGE.rglob("*.py")))
    assert found == [], f"{len(found)} names nothing but (perhaps) tests uses; remove them:\n" + "\n".join(found)


def test_the_check_sees_a_dead_function_and_a_used_one(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("LIMIT = 3\n\ndef used():\n    return LIMIT\n\ndef dead():\n    return dead()\n\n"
                      "def caller():\n    return used()\n\n@register('x')\ndef registered():\n    pass\n",
                      encoding="utf-8")
    used = module_uses(module)
    assert "used" in used and "LIMIT" in used and "registered" in used
    assert "dead" not in used  # a call to itself is no use
    assert [name for name, _ in definitions(module)] == ["LIMIT", "used", "dead", "caller", "registered"]
    assert dead(used, [module], tmp_path) == [f"m.py:6 dead", "m.py:9 caller"]
