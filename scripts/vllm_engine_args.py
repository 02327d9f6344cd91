"""Write the list of command-line flags vLLM's engine and ``vllm serve`` accept, read from vLLM's source.

    python scripts/vllm_engine_args.py --src /work/vllm-src/0.33.0/vllm --out data/vllm/engine-args-0.33.0.txt
    python scripts/vllm_engine_args.py --src vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl --out ...

``--src`` is the ``vllm`` package folder of an unpacked wheel, or the wheel itself. Nothing is imported: the
files are parsed with :mod:`ast` (vLLM needs torch and CUDA to import), and the flags are collected the way
argparse would register them:

* ``EngineArgs.add_cli_args`` and ``AsyncEngineArgs.add_cli_args`` (``engine/arg_utils.py``): every
  ``add_argument("--flag", "-alias", ...)``. Most pass ``**group_kwargs["field"]`` where ``group_kwargs =
  get_kwargs(SomeConfig)``; ``get_kwargs`` gives a field whose type contains ``bool`` (but is not
  ``bool | str | None``, which becomes an optional-valued flag, and is not a config dataclass, which becomes
  JSON) ``argparse.BooleanOptionalAction``, so argparse also registers ``--no-flag``. The field's type is
  read from the config class (or its bases) in ``config/``.
* ``vllm serve``'s frontend (``entrypoints/common/cli_args.py``, ``entrypoints/openai/cli_args.py`` in
  older lines): ``make_arg_parser``'s own flags, and one ``--field-name`` per field of ``FrontendArgs`` and
  its bases, with ``--no-`` variants by the same rule.

Every flag is written with its scope: ``engine`` (what ``vllm serve`` and Dynamo's ``dynamo.vllm`` worker,
which srt-slurm launches, both accept) or ``serve`` (the OpenAI server's own flags, ``vllm serve`` only).

``--values OUT.json`` also writes what each flag takes, read the same way: the kind ``get_kwargs`` derives
from the field's type (``bool``, ``int``, ``float``, ``str``, ``json`` for a config dataclass or a dict,
``list``, ``optional-str`` for ``bool | str | None``), the ``Literal`` choices (flattened, nested ``Literal``
aliases included; ``enforced: argparse`` when argparse checks them, ``config`` when the type also admits
``str`` and the config class's validator checks them), whether ``None`` is accepted, and the bounds of the
field's pydantic ``Field(gt=, ge=, lt=, le=)``; explicit ``type=``/``choices=``/``action=`` arguments of
``add_argument`` win. A ``json`` flag naming a config dataclass lists that class's fields with their own kinds,
choices and bounds (vLLM's ``@config`` dataclasses forbid unknown keys).
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import sys
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any
from pathlib import Path, PurePosixPath

ENGINE_FILE = "engine/arg_utils.py"
FRONTEND_FILES = ("entrypoints/common/cli_args.py", "entrypoints/launchers/cli_args.py",
                  "entrypoints/openai/cli_args.py")
CONFIG_DIR = "config"


# ------------------------------------------------------------------------------------------ sources


class Source:
    """The ``vllm`` package's Python files, from a folder or from a wheel."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._zip: zipfile.ZipFile | None = None
        if path.is_file() and path.suffix == ".whl":
            self._zip = zipfile.ZipFile(path)
            self._names = {n[len("vllm/"):] for n in self._zip.namelist() if n.startswith("vllm/")}
        elif path.is_dir():
            self._names = {p.relative_to(path).as_posix() for p in path.rglob("*.py")}
        else:
            raise SystemExit(f"{path}: not a vllm package folder or a .whl")

    def has(self, rel: str) -> bool:
        return rel in self._names

    def read(self, rel: str) -> str:
        if self._zip is not None:
            return self._zip.read(f"vllm/{rel}").decode("utf-8")
        return (self.path / rel).read_text(encoding="utf-8")

    def under(self, folder: str) -> list[str]:
        return sorted(n for n in self._names if n.startswith(folder + "/") and n.endswith(".py"))

    def version(self) -> str:
        for rel in ("_version.py", "version.py"):
            if self.has(rel):
                for node in ast.walk(ast.parse(self.read(rel))):
                    if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                        names = {t.id for t in node.targets if isinstance(t, ast.Name)}
                        if names & {"__version__", "version"} and isinstance(node.value.value, str):
                            return node.value.value
        return "unknown"


# ------------------------------------------------------------------------------------------ types


@dataclass
class ClassInfo:
    name: str
    bases: list[str]
    fields: dict[str, ast.expr]
    is_dataclass: bool
    defaults: dict[str, ast.expr] = field(default_factory=dict)  # field -> its default (``Field(...)``)


@dataclass
class TypeIndex:
    """Config classes and module-level type aliases, by name."""

    classes: dict[str, ClassInfo] = field(default_factory=dict)
    aliases: dict[str, ast.expr] = field(default_factory=dict)
    unresolved: set[str] = field(default_factory=set)

    def add_module(self, tree: ast.Module) -> None:
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                fields = {
                    stmt.target.id: stmt.annotation
                    for stmt in node.body
                    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
                }
                defaults = {
                    stmt.target.id: stmt.value
                    for stmt in node.body
                    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None
                }
                decorators = {_name(d.func if isinstance(d, ast.Call) else d) for d in node.decorator_list}
                info = ClassInfo(node.name, [_name(b) for b in node.bases], fields,
                                 bool(decorators & {"config", "dataclass"}), defaults)
                self.classes.setdefault(node.name, info)
            elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                self.aliases.setdefault(node.targets[0].id, node.value)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                if _name(node.annotation) == "TypeAlias":
                    self.aliases.setdefault(node.target.id, node.value)
            elif type(node).__name__ == "TypeAlias":  # ``type X = ...`` (3.12+ syntax)
                self.aliases.setdefault(node.name.id, node.value)  # type: ignore[attr-defined]

    def lineage(self, cls: str) -> list[ClassInfo]:
        """``cls`` and its bases known here, nearest first (the order fields are looked up in)."""
        out: list[ClassInfo] = []
        seen: set[str] = set()
        todo = [cls]
        while todo:
            current = todo.pop(0)
            if current in seen or current not in self.classes:
                continue
            seen.add(current)
            out.append(self.classes[current])
            todo += self.classes[current].bases
        return out

    def field_annotation(self, cls: str, name: str) -> ast.expr | None:
        return next((info.fields[name] for info in self.lineage(cls) if name in info.fields), None)

    def field_default(self, cls: str, name: str) -> ast.expr | None:
        return next((info.defaults.get(name) for info in self.lineage(cls) if name in info.fields), None)

    def literal_values(self, annotation: ast.expr | None, depth: int = 0) -> list[Any]:
        """Every value of the ``Literal`` types in a type's union, nested ``Literal`` aliases flattened."""
        if annotation is None or depth > 10:
            return []
        node = annotation
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            try:
                node = ast.parse(node.value, mode="eval").body
            except SyntaxError:
                return []
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return self.literal_values(node.left, depth + 1) + self.literal_values(node.right, depth + 1)
        if isinstance(node, ast.Subscript):
            head = _name(node.value)
            args = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            if head == "Literal":
                out: list[Any] = []
                for arg in args:
                    if isinstance(arg, ast.Constant):
                        out.append(arg.value)
                    else:  # a Literal alias inside a Literal
                        out += self.literal_values(arg, depth + 1)
                return out
            if head in ("Optional", "Union", "Annotated"):
                return [v for a in (args[:1] if head == "Annotated" else args) for v in self.literal_values(a, depth + 1)]
            return []
        name = _name(node)
        if name in self.aliases and name not in self.classes:
            return self.literal_values(self.aliases[name], depth + 1)
        return []

    def value_spec(self, annotation: ast.expr | None) -> dict[str, Any]:
        """What ``get_kwargs`` makes of a field's type: its kind, choices, and whether None is accepted."""
        atoms = self.atoms(annotation)
        spec: dict[str, Any] = {}
        dataclass_atom = next((a for a in atoms if self.classes.get(a, ClassInfo(a, [], {}, False)).is_dataclass),
                              None)
        if dataclass_atom is not None:
            spec["kind"], spec["config_class"] = "json", dataclass_atom
        elif atoms == {"bool", "str", "None"}:
            spec["kind"] = "optional-str"
        elif "bool" in atoms:
            spec["kind"] = "bool"
        elif "Literal" in atoms or self.literal_values(annotation):
            values = self.literal_values(annotation)
            kinds = {type(v).__name__ for v in values}
            spec["kind"] = kinds.pop() if len(kinds) == 1 else "str"
            spec["choices"] = sorted(set(values), key=str)
            spec["enforced"] = "config" if "str" in atoms else "argparse"
        elif atoms & {"tuple", "list", "set"}:
            spec["kind"] = "list"
        elif "int" in atoms:
            spec["kind"] = "int"
        elif "float" in atoms:
            spec["kind"] = "float"
        elif "dict" in atoms:
            spec["kind"] = "json"
        else:
            spec["kind"] = "str"
        if "None" in atoms and spec["kind"] != "bool":
            spec["optional"] = True
        return spec

    def atoms(self, annotation: ast.expr | None, depth: int = 0) -> set[str]:
        """The members of a type's top-level union, as names ("bool", "None", "Literal", a class...)."""
        if annotation is None or depth > 10:
            return set()
        node = annotation
        if isinstance(node, ast.Constant):
            if node.value is None:
                return {"None"}
            if isinstance(node.value, str):  # a string annotation
                try:
                    return self.atoms(ast.parse(node.value, mode="eval").body, depth + 1)
                except SyntaxError:
                    return {node.value}
            return {type(node.value).__name__}
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return self.atoms(node.left, depth + 1) | self.atoms(node.right, depth + 1)
        if isinstance(node, ast.Subscript):
            head = _name(node.value)
            args = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            if head in ("Optional",):
                return self.atoms(args[0], depth + 1) | {"None"}
            if head in ("Union",):
                return set().union(*(self.atoms(a, depth + 1) for a in args))
            if head in ("Annotated",):
                return self.atoms(args[0], depth + 1)
            return {head}  # list[...], dict[...], Literal[...]
        name = _name(node)
        if name in ("bool", "str", "int", "float", "None"):
            return {name}
        if name in self.aliases and name not in self.classes:
            return self.atoms(self.aliases[name], depth + 1)
        if name not in self.classes and name not in _KNOWN_NON_BOOL:
            self.unresolved.add(name)
        return {name}

    def boolean_optional(self, annotation: ast.expr | None) -> bool:
        """Whether ``get_kwargs`` gives this field ``argparse.BooleanOptionalAction`` (a ``--no-`` twin)."""
        atoms = self.atoms(annotation)
        if any(self.classes.get(a, ClassInfo(a, [], {}, False)).is_dataclass for a in atoms):
            return False  # a config dataclass: parsed from JSON
        if atoms == {"bool", "str", "None"}:
            return False  # an optional-valued flag: bare flag -> True, value -> str
        return "bool" in atoms


# Names that are plainly not booleans; listed so that they are not reported as unresolved.
_KNOWN_NON_BOOL = {"Any", "Callable", "Path", "dict", "list", "tuple", "set", "type", "Literal", "bytes"}


def _name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Subscript):
        return _name(node.value)
    if isinstance(node, ast.Constant) and node.value is None:
        return "None"
    return ast.dump(node)


# ------------------------------------------------------------------------------------------ flags


@dataclass(frozen=True)
class Flag:
    name: str
    scope: str  # "engine" or "serve"


def _functions(tree: ast.Module, owner: str | None, name: str) -> Iterator[ast.FunctionDef]:
    for node in tree.body:
        if owner is None and isinstance(node, ast.FunctionDef) and node.name == name:
            yield node
        if isinstance(node, ast.ClassDef) and node.name == owner:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == name:
                    yield item


def _is_boolean_action(value: ast.expr) -> bool:
    return isinstance(value, ast.Attribute) and value.attr == "BooleanOptionalAction" or (
        isinstance(value, ast.Name) and value.id == "BooleanOptionalAction")


def argument_flags(func: ast.FunctionDef, types: TypeIndex, scope: str) -> list[Flag]:
    """Every ``add_argument`` in ``func``, with ``--no-`` twins where argparse registers them."""
    kwargs_of: dict[str, str] = {}  # variable -> config class (``x = get_kwargs(Cls)``)
    alias_of: dict[str, tuple[str, str]] = {}  # variable -> (class, field) (``y = x["field"]``)
    actions: dict[tuple[str, str], bool] = {}  # (class, field) -> boolean action set/unset after get_kwargs
    for node in ast.walk(func):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
            if isinstance(target, ast.Name) and isinstance(value, ast.Call) and _name(value.func) == "get_kwargs":
                kwargs_of[target.id] = _name(value.args[0])
            elif isinstance(target, ast.Name) and (ref := _field_ref(value, kwargs_of)):
                alias_of[target.id] = ref
            elif (isinstance(target, ast.Subscript) and isinstance(target.slice, ast.Constant)
                  and target.slice.value == "action" and (ref := _field_ref(target.value, kwargs_of, alias_of))):
                actions[ref] = _is_boolean_action(value)
    out: list[Flag] = []
    for node in ast.walk(func):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"):
            continue
        names = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)
                 and a.value.startswith("-")]
        if not names:
            continue
        boolean = False
        for kw in node.keywords:
            if kw.arg == "action":
                boolean = _is_boolean_action(kw.value)
            elif kw.arg is None:  # **something
                ref = _spread_ref(kw.value, kwargs_of, alias_of)
                if ref is not None:
                    boolean = actions.get(ref, types.boolean_optional(types.field_annotation(*ref)))
        for flag in names:
            out.append(Flag(flag, scope))
            if boolean and flag.startswith("--"):
                out.append(Flag("--no-" + flag[2:], scope))
    return out


_BOUNDS = ("gt", "ge", "lt", "le")


def field_bounds(default: ast.expr | None) -> dict[str, float]:
    """The numeric bounds of a pydantic ``Field(default=..., ge=1, le=65535)`` default."""
    out: dict[str, float] = {}
    if isinstance(default, ast.Call) and _name(default.func) == "Field":
        for kw in default.keywords:
            if kw.arg in _BOUNDS:
                value = _constant(kw.value)
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    out[kw.arg] = value
    return out


def _constant(node: ast.expr) -> Any:
    """A literal number (``-1`` included), string, or a list/tuple of them; None when not a literal."""
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        return None


def _class_fields(types: TypeIndex, cls: str) -> dict[str, dict[str, Any]]:
    """A config dataclass's fields as JSON keys: kind, choices and bounds of each (nearest class first)."""
    out: dict[str, dict[str, Any]] = {}
    for info in types.lineage(cls):
        for name, annotation in info.fields.items():
            if name in out or name.startswith("_"):
                continue
            spec = types.value_spec(annotation)
            spec.pop("config_class", None)
            bounds = field_bounds(info.defaults.get(name))
            if bounds:
                spec["bounds"] = bounds
            out[name] = spec
    return dict(sorted(out.items()))


def argument_values(func: ast.FunctionDef, types: TypeIndex) -> dict[str, dict[str, Any]]:
    """Every ``add_argument`` in ``func``: flag -> what it takes (see the module docstring)."""
    kwargs_of: dict[str, str] = {}
    alias_of: dict[str, tuple[str, str]] = {}
    for node in ast.walk(func):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
            if isinstance(target, ast.Name) and isinstance(value, ast.Call) and _name(value.func) == "get_kwargs":
                kwargs_of[target.id] = _name(value.args[0])
            elif isinstance(target, ast.Name) and (ref := _field_ref(value, kwargs_of)):
                alias_of[target.id] = ref
    out: dict[str, dict[str, Any]] = {}
    for node in ast.walk(func):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"):
            continue
        names = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)
                 and a.value.startswith("-")]
        if not names:
            continue
        spec: dict[str, Any] = {"kind": "str"}
        for kw in node.keywords:
            if kw.arg is None and (ref := _spread_ref(kw.value, kwargs_of, alias_of)):
                spec = types.value_spec(types.field_annotation(*ref))
                bounds = field_bounds(types.field_default(*ref))
                if bounds:
                    spec["bounds"] = bounds
                spec["field"] = f"{ref[0]}.{ref[1]}"
        for kw in node.keywords:  # explicit arguments win over the field's type
            if kw.arg == "action":
                if _is_boolean_action(kw.value):
                    spec = {**spec, "kind": "bool"}
                elif isinstance(kw.value, ast.Constant) and kw.value.value in ("store_true", "store_false"):
                    spec = {"kind": "flag"}
            elif kw.arg == "type" and isinstance(kw.value, ast.Name) and kw.value.id in ("int", "float", "str"):
                spec["kind"] = kw.value.id
            elif kw.arg == "choices":
                values = _constant(kw.value)
                if isinstance(values, (list, tuple)):
                    spec["choices"], spec["enforced"] = sorted(values, key=str), "argparse"
        if spec.get("kind") == "json" and spec.get("config_class"):
            spec["fields"] = _class_fields(types, spec["config_class"])
        for flag in names:
            out[flag] = spec
            if spec.get("kind") == "bool" and flag.startswith("--"):
                out["--no-" + flag[2:]] = {"kind": "bool", "negates": flag}
    return out


def frontend_values(tree: ast.Module, types: TypeIndex) -> dict[str, dict[str, Any]]:
    """``vllm serve``'s own flags: ``make_arg_parser``'s arguments and the ``FrontendArgs`` fields."""
    out: dict[str, dict[str, Any]] = {}
    for info in reversed(types.lineage("FrontendArgs")):
        for name, annotation in info.fields.items():
            spec = types.value_spec(annotation)
            bounds = field_bounds(info.defaults.get(name))
            if bounds:
                spec["bounds"] = bounds
            flag = "--" + name.replace("_", "-")
            out[flag] = spec
            if spec["kind"] == "bool":
                out["--no-" + flag[2:]] = {"kind": "bool", "negates": flag}
    for func in _functions(tree, None, "make_arg_parser"):
        out.update(argument_values(func, types))
    return out


def collect_values(source: Source) -> tuple[dict[str, dict[str, Any]], TypeIndex]:
    """Flag -> what it takes, for every flag :func:`collect` lists (an engine flag wins over a serve flag)."""
    types = TypeIndex()
    engine = ast.parse(source.read(ENGINE_FILE))
    frontend_rel = next(f for f in FRONTEND_FILES if source.has(f) and "class FrontendArgs" in source.read(f))
    frontend = ast.parse(source.read(frontend_rel))
    for rel in source.under(CONFIG_DIR):
        types.add_module(ast.parse(source.read(rel)))
    types.add_module(engine)
    types.add_module(frontend)
    values = frontend_values(frontend, types)
    for owner in ("EngineArgs", "AsyncEngineArgs"):
        for func in _functions(engine, owner, "add_cli_args"):
            values.update(argument_values(func, types))
    return dict(sorted(values.items(), key=lambda kv: kv[0].lstrip("-"))), types


def _field_ref(node: ast.expr, kwargs_of: dict[str, str],
               alias_of: dict[str, tuple[str, str]] | None = None) -> tuple[str, str] | None:
    """``x["field"]`` with ``x = get_kwargs(Cls)`` -> (Cls, field); an alias variable -> its reference."""
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id in kwargs_of \
            and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
        return kwargs_of[node.value.id], node.slice.value
    if alias_of is not None and isinstance(node, ast.Name) and node.id in alias_of:
        return alias_of[node.id]
    return None


def _spread_ref(node: ast.expr, kwargs_of: dict[str, str],
                alias_of: dict[str, tuple[str, str]]) -> tuple[str, str] | None:
    ref = _field_ref(node, kwargs_of, alias_of)
    if ref is not None:
        return ref
    if isinstance(node, ast.Dict):  # ``**{**x["field"], "default": None}``
        for key, value in zip(node.keys, node.values, strict=True):
            if key is None and (ref := _field_ref(value, kwargs_of, alias_of)):
                return ref
    return None


def frontend_flags(tree: ast.Module, types: TypeIndex) -> list[Flag]:
    """``vllm serve``'s own flags: ``make_arg_parser``'s, and one per ``FrontendArgs`` field."""
    out: list[Flag] = []
    for func in _functions(tree, None, "make_arg_parser"):
        out += argument_flags(func, types, "serve")
    extra_flags: dict[str, list[str]] = {}
    for func in _functions(tree, "FrontendArgs", "_customize_cli_kwargs"):
        for node in ast.walk(func):
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Subscript):
                target = node.targets[0]
                if (isinstance(target.slice, ast.Constant) and target.slice.value == "flags"
                        and isinstance(target.value, ast.Subscript) and isinstance(target.value.slice, ast.Constant)
                        and isinstance(node.value, ast.List)):
                    extra_flags[target.value.slice.value] = [
                        e.value for e in node.value.elts if isinstance(e, ast.Constant)]
    for info in types.lineage("FrontendArgs"):
        for name, annotation in info.fields.items():
            flag = "--" + name.replace("_", "-")
            out.append(Flag(flag, "serve"))
            out += [Flag(f, "serve") for f in extra_flags.get(name, [])]
            if types.boolean_optional(annotation):
                out.append(Flag("--no-" + flag[2:], "serve"))
    return out


def collect(source: Source) -> tuple[list[Flag], TypeIndex]:
    types = TypeIndex()
    engine = ast.parse(source.read(ENGINE_FILE))
    frontend_rel = next((f for f in FRONTEND_FILES if source.has(f) and "class FrontendArgs" in source.read(f)),
                        None)
    if frontend_rel is None:
        raise SystemExit(f"{source.path}: no FrontendArgs in {' or '.join(FRONTEND_FILES)}")
    frontend = ast.parse(source.read(frontend_rel))
    for rel in source.under(CONFIG_DIR):
        types.add_module(ast.parse(source.read(rel)))
    types.add_module(engine)
    types.add_module(frontend)
    flags: list[Flag] = []
    for owner in ("EngineArgs", "AsyncEngineArgs"):
        for func in _functions(engine, owner, "add_cli_args"):
            flags += argument_flags(func, types, "engine")
    if not flags:
        raise SystemExit(f"{source.path}: no add_argument calls found in {ENGINE_FILE}")
    flags += frontend_flags(frontend, types)
    return flags, types


def unique(flags: Iterable[Flag]) -> list[Flag]:
    """One line per flag; an engine flag wins over a serve flag of the same name."""
    best: dict[str, Flag] = {}
    for f in flags:
        if f.name not in best or (f.scope == "engine" and best[f.name].scope != "engine"):
            best[f.name] = f
    return sorted(best.values(), key=lambda f: f.name.lstrip("-"))


def render(flags: list[Flag], version: str, origin: str) -> str:
    lines = [
        f"# vLLM {version}: command-line flags of the engine and of `vllm serve`, one per line: FLAG SCOPE.",
        "# scope engine: EngineArgs/AsyncEngineArgs (vllm serve and dynamo.vllm, which srt-slurm launches);",
        "# scope serve: the OpenAI server's own flags (vllm serve only).",
        f"# Generated by scripts/vllm_engine_args.py from {origin}; do not edit by hand.",
    ]
    lines += [f"{f.name} {f.scope}" for f in flags]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", required=True, type=Path, help="the vllm package folder, or a vLLM wheel")
    parser.add_argument("--out", type=Path, help="where to write the list (default: stdout)")
    parser.add_argument("--origin", help="how the header names the source (default: its file name and hash)")
    parser.add_argument("--values", type=Path, help="also write what each flag takes (JSON) here")
    args = parser.parse_args(argv)
    source = Source(args.src)
    flags, types = collect(source)
    version = source.version()
    origin = args.origin
    if origin is None:
        if args.src.is_file():
            digest = hashlib.sha256(args.src.read_bytes()).hexdigest()
            origin = f"{args.src.name} (sha256 {digest})"
        else:
            origin = f"the vllm {version} package source ({PurePosixPath(*args.src.parts[-2:])})"
    text = render(unique(flags), version, origin)
    if args.out is None:
        sys.stdout.write(text)
    else:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text, encoding="utf-8")
    if args.values is not None:
        values, _ = collect_values(source)
        listed = {f.name for f in unique(flags)}
        payload = {"vllm": version, "generated_by": "scripts/vllm_engine_args.py", "origin": origin,
                   "flags": {k: v for k, v in values.items() if k in listed}}
        args.values.parent.mkdir(parents=True, exist_ok=True)
        args.values.write_text(json.dumps(payload, indent=1, sort_keys=False) + "\n", encoding="utf-8")
        missing = sorted(listed - set(values))
        print(f"{len(payload['flags'])} flags with value rules"
              + (f"; none found for {', '.join(missing)}" if missing else ""), file=sys.stderr)
    if types.unresolved:
        print(f"note: type names not found in vllm/{CONFIG_DIR} (read as not boolean): "
              f"{', '.join(sorted(types.unresolved))}", file=sys.stderr)
    print(f"{len(unique(flags))} flags from vLLM {version}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
