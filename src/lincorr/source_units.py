"""lincorr's source cut into units, the parts of a record (`recording`): each function and method, each class's shell (its
fields, decorators and constants, without its methods), each module-level statement by the names it binds, and a
whole module (`lincorr.reading:*`); a unit's short hash, and the units a piece of running code belongs to and reads.

A module-level value is followed where the running code reads it: through `from ... import`, a module's attributes and
`lincorr._EXPORTS`, and into the functions a value was computed by at import. A function is a unit where it runs, not
where it is named, so a table of steps names none of the steps it holds.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import functools
import hashlib
import os
import re
import stat
import types
from collections.abc import Mapping
from pathlib import Path

from lincorr.provenance import computation_of

PACKAGE_DIRECTORY = Path(__file__).resolve().parent
HASH_LENGTH = 16  # hex digits: 64 bits tell an edit from its source's past for as long as a record is kept
# A unit that is a whole module ("lincorr.reading:*"): how results measured before lincorr recorded what ran keep the
# record they had, every module their step imported, so that any edit to one of those modules makes them stale.
WHOLE_MODULE = "*"
RECORDING_ITSELF = ("lincorr.recording", __name__)
# A record may come from someone else's file: only names of the package's own modules are looked up as modules.
SUBMODULES = re.compile(r"(\.[A-Za-z_][A-Za-z0-9_]*)*")
# Choices a computation made that its result depends on beside its key and its code (the memory plan a fine-tuning took
# from the memory free then), noted in its record as `kind:name` (`recording.note`): such a unit never changes.
CHOICE_KINDS = ("memory-plan",)
CHOSEN = "chosen"
CHOICE_NAME = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")


@dataclasses.dataclass(frozen=True)
class ModuleUnits:
    """A module's source cut into units: their nodes by name, the lines each spans, and what each top-level name binds."""

    nodes: Mapping[str, ast.AST]
    spans: tuple[tuple[int, int, str], ...]  # (first line, last line, unit), innermost last among overlapping ones
    bound: Mapping[str, str]  # a top-level name -> the unit binding it
    functions: frozenset[str]  # the units that are functions or methods (named by what calls them, not by what reads them)
    imports: Mapping[str, tuple[str, str | None]]  # a name -> (lincorr module, its name there; None for the module itself)


def module_of(filename: str) -> str | None:
    """The lincorr module whose source file is `filename`, or None for a file outside the package."""
    path = Path(filename)
    if not path.is_absolute() or PACKAGE_DIRECTORY not in path.parents or path.suffix != ".py":
        return None
    parts = path.relative_to(PACKAGE_DIRECTORY).with_suffix("").parts
    return ".".join((PACKAGE_DIRECTORY.name, *(parts[:-1] if parts[-1] == "__init__" else parts)))


def source_file(module: str) -> Path:
    relative = Path(*module.split(".")[1:])
    package = PACKAGE_DIRECTORY / relative / "__init__.py"
    return package if package.is_file() else (PACKAGE_DIRECTORY / relative).with_suffix(".py")


def _first_line(node: ast.AST) -> int:
    decorators = getattr(node, "decorator_list", [])
    return min([node.lineno, *(decorator.lineno for decorator in decorators)])  # type: ignore[attr-defined]


def _bound_names(statement: ast.stmt) -> list[str]:
    """The top-level names a statement binds (a definition binds its own name, not its locals)."""
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [statement.name]
    names: list[str] = []
    for node in ast.walk(statement):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.append(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names += [alias.asname or alias.name.split(".")[0] for alias in node.names]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
    return names


def _shell(node: ast.ClassDef) -> ast.ClassDef:
    """A class without its methods (each method is a unit of its own); nested classes keep their shells."""
    shell = copy.copy(node)
    shell.body = [_shell(s) if isinstance(s, ast.ClassDef) else s for s in node.body
                  if not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))] or [ast.Pass()]
    return shell


def _imports(statement: ast.stmt, module: str) -> dict[str, tuple[str, str | None]]:
    found: dict[str, tuple[str, str | None]] = {}
    if isinstance(statement, ast.Import):
        for alias in statement.names:
            if alias.name.split(".")[0] == PACKAGE_DIRECTORY.name:
                found[alias.asname or alias.name.split(".")[0]] = (alias.name if alias.asname else PACKAGE_DIRECTORY.name, None)
    elif isinstance(statement, ast.ImportFrom) and statement.module:
        source = statement.module if statement.level == 0 else ".".join(module.split(".")[:-statement.level] + [statement.module])
        if source.split(".")[0] == PACKAGE_DIRECTORY.name:
            for alias in statement.names:
                submodule = f"{source}.{alias.name}"
                is_module = source_file(submodule).is_file()
                found[alias.asname or alias.name] = (submodule, None) if is_module else (source, alias.name)
    return found


def _class_units(node: ast.ClassDef, prefix: str, nodes: dict, spans: list, functions: set) -> None:
    name = f"{prefix}{node.name}"
    nodes[name] = _shell(node)
    spans.append((_first_line(node), node.end_lineno or node.lineno, name))
    for statement in node.body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
            method = f"{name}.{statement.name}"
            nodes[method] = statement
            functions.add(method)
            spans.append((_first_line(statement), statement.end_lineno or statement.lineno, method))
        elif isinstance(statement, ast.ClassDef):
            _class_units(statement, f"{name}.", nodes, spans, functions)


@functools.lru_cache(maxsize=None)
def _parsed(module: str, stamp: tuple) -> ModuleUnits:
    tree = ast.parse(source_file(module).read_text(encoding="utf-8"))
    nodes: dict[str, ast.AST] = {}
    spans: list[tuple[int, int, str]] = []
    bound: dict[str, str] = {}
    functions: set[str] = set()
    imports: dict[str, tuple[str, str | None]] = {}
    for statement in tree.body:
        if isinstance(statement, ast.ClassDef):
            _class_units(statement, "", nodes, spans, functions)
            bound[statement.name] = statement.name
            continue
        names = _bound_names(statement)
        unit = ",".join(dict.fromkeys(names)) or f"line {statement.lineno}"
        nodes[unit] = statement
        spans.append((_first_line(statement), statement.end_lineno or statement.lineno, unit))
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
            functions.add(unit)
        for name in names:
            bound[name] = unit
        imports.update(_imports(statement, module))
    # Outer spans first, so the last span holding a line is the innermost unit (a method inside its class).
    spans.sort(key=lambda span: (span[0], -span[1]))
    return ModuleUnits(nodes, tuple(spans), bound, frozenset(functions), imports)


def units(module: str) -> ModuleUnits | None:
    """The units of `module`'s source as it is now on disk (None for a module that no longer exists)."""
    package = PACKAGE_DIRECTORY.name
    if not (module.startswith(package) and SUBMODULES.fullmatch(module[len(package):])):
        return None
    try:
        return _parsed(module, _stamp(module))
    except (OSError, SyntaxError, ValueError):  # ValueError: not UTF-8, or a NUL in the source
        return None


def unit_hash(unit: str) -> str | None:
    """The short sha256 of a unit as its source is now; None when it is gone or is no unit of lincorr's (a record from
    someone's file may name any path: only a regular file or directory inside the package is read). A choice noted in a
    record (CHOICE_KINDS) is CHOSEN, never changed: what it chose is its name."""
    kind, _, name = unit.partition(":")
    if kind in CHOICE_KINDS:
        return CHOSEN if CHOICE_NAME.fullmatch(name) else None
    if kind in ("file", "dir"):
        try:
            path = (PACKAGE_DIRECTORY / name).resolve()
            mode = path.stat().st_mode
            inside = PACKAGE_DIRECTORY in path.parents or path == PACKAGE_DIRECTORY
            if not inside or not (stat.S_ISREG(mode) if kind == "file" else stat.S_ISDIR(mode)):
                return None
            data = path.read_bytes() if kind == "file" else "\n".join(sorted(os.listdir(path))).encode()
        except (OSError, ValueError):  # ValueError: a NUL in the name
            return None
        return hashlib.sha256(data).hexdigest()[:HASH_LENGTH]
    found = units(kind)
    if found is None or (name not in found.nodes and name != WHOLE_MODULE):
        return None
    return _node_hash(kind, name, _stamp(kind))


def _stamp(module: str) -> tuple:
    """What tells one version of a module's file from another without reading it."""
    path = source_file(module)
    stat = path.stat()
    return str(path), stat.st_ino, stat.st_mtime_ns, stat.st_size


@functools.lru_cache(maxsize=None)
def _node_hash(module: str, name: str, stamp: tuple) -> str:
    if name == WHOLE_MODULE:
        node: ast.AST = ast.parse(source_file(module).read_text(encoding="utf-8"))
    else:
        node = _parsed(module, stamp).nodes[name]
    return hashlib.sha256(computation_of(node).encode()).hexdigest()[:HASH_LENGTH]


def unit_of(code: types.CodeType) -> str | None:
    """The unit whose source holds `code` ("lincorr.fit:fit_targets"); None for code outside lincorr, the recording's
    own (it decides what is recorded and computes no result; it runs inside windows as they nest), or a module's body
    run at import (what it defined is recorded where it is used)."""
    module = module_of(code.co_filename)
    if module is None or module in RECORDING_ITSELF or code.co_name == "<module>":
        return None
    found = units(module)
    if found is None:
        return None
    innermost = None
    for first, last, unit in found.spans:
        if first > code.co_firstlineno:
            break
        if code.co_firstlineno <= last:
            innermost = unit
    return None if innermost is None else f"{module}:{innermost}"


def _names_in(node: ast.AST) -> tuple[set[str], set[str]]:
    """The names a unit's node reads, and those it calls."""
    read, called = set(), set()
    for child in ast.walk(node):
        if isinstance(child, ast.Name):
            read.add(child.id)
        elif isinstance(child, ast.Attribute):
            read.add(child.attr)
        if isinstance(child, ast.Call) and isinstance(child.func, (ast.Name, ast.Attribute)):
            called.add(child.func.id if isinstance(child.func, ast.Name) else child.func.attr)
    return read, called


def _resolve(module: str, names: set[str], called: set[str], found: set[str], seen: set[tuple[str, str]]) -> None:
    """Add to `found` the units of `module` (and of the modules it imports from) that bind the values `names` read:
    values and classes, and the functions `called` from a module-level value (they ran at import)."""
    module_units = units(module)
    if module_units is None:
        return
    modules: list[str] = []
    for name in names:
        if (module, name) in seen:
            continue
        seen.add((module, name))
        if name in module_units.imports:
            source, original = module_units.imports[name]
            if original is None:
                modules.append(source)
            elif source == "lincorr" and (exported := _exported(original)) is not None:
                _resolve(exported, {original}, called, found, seen)
            else:
                _resolve(source, {original}, {original} if name in called else set(), found, seen)
        elif name in module_units.bound:
            unit = module_units.bound[name]
            if unit in module_units.functions and name not in called:
                continue  # a function counts where it runs
            found.add(f"{module}:{unit}")
            if unit not in module_units.functions:
                read, calls = _names_in(module_units.nodes[unit])
                _resolve(module, read, calls, found, seen)
    for source in modules:  # `module.NAME`: its attributes are among the names read
        _resolve(source, names, called, found, seen)


def _exported(name: str) -> str | None:
    from lincorr import _EXPORTS

    return _EXPORTS.get(name)


@functools.lru_cache(maxsize=None)
def code_units(code: types.CodeType) -> frozenset[str]:
    """The unit `code` belongs to and the units of the values it reads."""
    unit = unit_of(code)
    if unit is None:
        return frozenset()
    module, _, name = unit.partition(":")
    found = {unit}
    module_units = units(module)
    owner = name.rpartition(".")[0]
    if owner:  # a method: its class's fields and constants
        found.add(f"{module}:{owner}")
        if module_units is not None and owner in module_units.nodes:
            read, calls = _names_in(module_units.nodes[owner])
            _resolve(module, read, calls, found, set())
    node = module_units.nodes.get(name) if module_units is not None else None
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        # Its defaults and decorators were evaluated at import, in the module's scope: what they read is no name of its code.
        evaluated = [*node.args.defaults, *(d for d in node.args.kw_defaults if d is not None), *node.decorator_list]
        for expression in evaluated:
            read, calls = _names_in(expression)
            _resolve(module, read, calls, found, set())
    _resolve(module, set(code.co_names), set(), found, set())
    return frozenset(found)
