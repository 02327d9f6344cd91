"""The package's imports form no circle, and no module imports another's private name (issue 19).

Read from the source with Python's own parser, not by importing: every ``import`` counts, the ones inside a
function (imported late, for speed) and under ``TYPE_CHECKING`` (for annotations) included, because each is a
dependency all the same, and a circle of them means two modules that cannot be read, tested or moved apart.
A module's package ``__init__`` re-exporting it is not an edge back: importing ``pdtune.a.b`` runs
``pdtune/a/__init__.py`` first, which is how packages work, not a circle in the code.

A private name (``_x``) is one module's own business; another module that needs it needs a public name
(imported, or read as ``module._x``). Within one module anything goes.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "pdtune"


def modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name, for its ``__init__``)."""
    found = {}
    for path in sorted((SRC / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> Iterator[tuple[str, str, int]]:
    """(module imported, name taken from it or '', line) for every import of ``path`` that reaches the package."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in known:
                    yield alias.name, "", node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolved against this module's package
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                if submodule in known:
                    yield submodule, "", node.lineno
                elif base in known:
                    yield base, alias.name, node.lineno


def module_aliases(path: Path, known: dict[str, Path]) -> dict[str, str]:
    """Local names bound to one of the package's modules (``import pdtune.x as y``, ``from pdtune import x``)."""
    bound = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in known:
                    bound[alias.asname or alias.name] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                if f"{node.module}.{alias.name}" in known:
                    bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return bound


def dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = dotted(node.value)
        return f"{inner}.{node.attr}" if inner else None
    return None


def private_crossings(known: dict[str, Path]) -> list[str]:
    found = []
    for name, path in known.items():
        for target, imported, line in imports(name, path, known):
            if imported.startswith("_") and not imported.startswith("__") and target != name:
                found.append(f"{name}:{line} imports {target}.{imported}")
        bound = module_aliases(path, known)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                owner = dotted(node.value)
                target = bound.get(owner or "", owner if owner in known else None)
                if target is not None and target != name:
                    found.append(f"{name}:{node.lineno} reads {target}.{node.attr}")
    return found


def import_graph(known: dict[str, Path]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {name: set() for name in known}
    for name, path in known.items():
        for target, _, _ in imports(name, path, known):
            # a package's __init__ importing its own modules, and a module its own package, are how packages
            # load, not a circle between two modules' code
            if target == name or name.startswith(f"{target}.") or target.startswith(f"{name}.") \
                    and path.name == "__init__.py":
                continue
            graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_package_has_no_import_circle() -> None:
    found = cycles(import_graph(modules()))
    assert not found, "import circles (each a set of modules that import one another): " + "; ".join(
        " <-> ".join(c) for c in found)


def test_no_module_imports_another_modules_private_name() -> None:
    found = private_crossings(modules())
    assert not found, f"{len(found)} private names cross modules:\n" + "\n".join(found)


def test_the_checks_see_a_circle_and_a_private_name(tmp_path: Path) -> None:
    """The two checks on a package made to fail them (a check that cannot fail proves nothing)."""
    pkg = tmp_path / "pdtune"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from pdtune.a import A\n")
    (pkg / "a.py").write_text("from pdtune.sub.b import B, _hidden\nA = 1\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "b.py").write_text("def f():\n    from pdtune import a\n    return a._secret\nB = _hidden = 2\n")
    known = {}
    for path in sorted(pkg.rglob("*.py")):
        parts = list(path.relative_to(tmp_path).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        known[".".join(parts)] = path
    assert cycles(import_graph(known)) == [["pdtune.a", "pdtune.sub.b"]]
    found = private_crossings(known)
    assert [f.split(" ", 1)[1] for f in found] == ["imports pdtune.sub.b._hidden", "reads pdtune.a._secret"]


# ------------------------------------------------------------------------------------------ start-up cost


def test_light_commands_start_without_pandas() -> None:
    """``pdtune --version``, ``pdtune log`` and ``pdtune state`` build their parser without pandas, NumPy or the
    performance model (``pdtune.cli.build_parser``): a shared flag's choices once pulled in
    ``pdtune.perfmodel.simulated``, half a second of every command's start, now :mod:`pdtune.harnesses`."""
    import subprocess
    import sys

    probe = ("import sys\nfrom pdtune.cli import build_parser\nbuild_parser(sys.argv[1:])\n"
             "print(sorted(m for m in ('pandas', 'numpy', 'pdtune.perfmodel') if m in sys.modules))")
    for argv in (["--version"], ["log", "x.log"], ["state", "--isl", "1024"], ["graphs"]):
        out = subprocess.run([sys.executable, "-c", probe, *argv], capture_output=True, text=True, check=True)
        assert out.stdout.strip() == "[]", f"pdtune {' '.join(argv)} imports {out.stdout.strip()}"
    # the probe can fail: a command that needs pandas is seen loading it
    out = subprocess.run([sys.executable, "-c", probe, "results"], capture_output=True, text=True, check=True)
    assert "pandas" in out.stdout


def test_no_command_imports_scipy_until_it_fits() -> None:
    """scipy is imported only where a fit runs (``scipy.optimize`` inside the fitting functions): scipy.stats alone
    took 1.4 s of every command's start (``pdtune --help`` 3.5 s, then 1.8 s) when pdtune.perfmodel.expert_load
    imported it for one Binomial CDF, now :func:`~pdtune.perfmodel.expert_load.binomial_cdf`."""
    import subprocess
    import sys

    # one process for every parser: an import by any of them stays in sys.modules
    probe = ("import sys\nfrom pdtune.cli import build_parser\n"
             "for argv in (['--help'], ['predict', 'x'], ['plan', 'x'], ['validate', 'x']):\n"
             "    build_parser(argv)\n"
             "import pdtune.perfmodel, pdtune.plan, pdtune.sim\n"
             "print(sorted(m for m in sys.modules if m == 'scipy' or m.startswith('scipy.')))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=False)
    found = out.stdout.strip()
    assert found == "[]", f"pdtune's parsers and models import {found[:200]} {out.stderr[-300:]}"
