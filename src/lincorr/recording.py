"""Which of lincorr's code a computation ran, recorded while it runs, so a result goes stale only when code it ran changed.

A record maps each unit of lincorr's source that a computation ran or read to a short sha256 of its computation
(`provenance.computation`: comments, docstrings and argument annotations left out):

- a function or method it called (`lincorr.fit:fit_targets`, `lincorr.linear:LinearMap.fit`);
- the fields, decorators and constants of a class its code named or whose methods ran (`lincorr.fit:FitConfig`);
- a module-level value its code read (`lincorr.reproduce.runner:REJUDGED`), through `from ... import` and module
  attributes, and the functions such a value was computed by at import;
- each of the package's data files it opened (`file:knowledge/data/cities.yaml`, the sha256 of its bytes), and each
  package directory it listed (`dir:knowledge/data`).

`window()` records one computation: cProfile (the standard library's profiler, in C) counts the calls, an audit hook
sees the files opened. Windows nest. A value served from a memo (`cache`, `cached_property`, `SharedWork`) or from a
disk cache `replay`s the record it was stored with, so the record of a computation that reuses it still names the code
behind it. What the code that opens a window prepares for it is its caller's to name: in a key (settings, a model's
fingerprint) or by replaying the record of what it made (`record_of`).
`changed(record)` lists the units whose source is no longer what the record says; a unit that is gone counts as changed.
This module's own code decides what is recorded and computes no result, so no record names it.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import cProfile
import dataclasses
import functools
import hashlib
import os
import sys
import types
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from lincorr.provenance import computation_of

PACKAGE_DIRECTORY = Path(__file__).resolve().parent
HASH_LENGTH = 16  # hex digits: 64 bits tell an edit from its source's past for as long as a record is kept
# A unit that is a whole module ("lincorr.reading:*"): how results measured before lincorr recorded what ran keep the
# record they had, every module their step imported, so that any edit to one of those modules makes them stale.
WHOLE_MODULE = "*"


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
    try:
        return _parsed(module, _stamp(module))
    except OSError:
        return None


def unit_hash(unit: str) -> str | None:
    """The short sha256 of a unit as its source is now; None when it is gone."""
    kind, _, name = unit.partition(":")
    if kind in ("file", "dir"):
        path = PACKAGE_DIRECTORY / name
        try:
            data = path.read_bytes() if kind == "file" else "\n".join(sorted(os.listdir(path))).encode()
        except OSError:
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
    """The unit whose source holds `code` ("lincorr.fit:fit_targets"); None for code outside lincorr, this module's own,
    or a module's or class's body run at import (what it defined is recorded where it is used)."""
    module = module_of(code.co_filename)
    if module is None or module == __name__ or code.co_name in ("<module>",):
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
def _code_units(code: types.CodeType) -> frozenset[str]:
    """The unit `code` belongs to and the units of the values it reads."""
    unit = unit_of(code)
    if unit is None:
        return frozenset()
    module, _, name = unit.partition(":")
    found = {unit}
    owner = name.rpartition(".")[0]
    if owner:  # a method: its class's fields and constants
        found.add(f"{module}:{owner}")
        module_units = units(module)
        if module_units is not None and owner in module_units.nodes:
            read, calls = _names_in(module_units.nodes[owner])
            _resolve(module, read, calls, found, set())
    _resolve(module, set(code.co_names), set(), found, set())
    return frozenset(found)


# ---- windows ----


@dataclasses.dataclass
class Recording:
    """What a window saw: after it closes, `record` maps each unit to its hash (`complete` is False when another profiler
    held the interpreter, so nothing of it may be stored where it could be served later)."""

    codes: set = dataclasses.field(default_factory=set)
    replayed: dict = dataclasses.field(default_factory=dict)
    paths: set = dataclasses.field(default_factory=set)
    complete: bool = True
    record: dict = dataclasses.field(default_factory=dict)
    before: dict = dataclasses.field(default_factory=dict)  # the calls counted when the window opened


_open: list[Recording] = []
_profiler: list[cProfile.Profile] = []  # the one profiler, while any window is open
_hooked = False


def _counts() -> dict[types.CodeType, int]:
    profiler = _profiler[0]
    profiler.disable()  # flushes the frames still running, so their calls are counted
    counts = {entry.code: entry.callcount for entry in profiler.getstats() if isinstance(entry.code, types.CodeType)}
    profiler.enable(subcalls=False, builtins=False)
    return counts


def _audit(event: str, arguments: tuple) -> None:
    if not _open or event not in ("open", "os.listdir", "os.scandir"):
        return
    path = arguments[0] if arguments else None
    if path is None or isinstance(path, int):
        return
    try:
        resolved = Path(os.path.abspath(os.fsdecode(path)))
    except (TypeError, ValueError):
        return
    if PACKAGE_DIRECTORY not in resolved.parents or resolved.suffix in (".py", ".pyc"):
        return
    kind = "file" if event == "open" else "dir"
    for recording in _open:
        recording.paths.add(f"{kind}:{resolved.relative_to(PACKAGE_DIRECTORY).as_posix()}")


@contextlib.contextmanager
def window() -> Iterator[Recording]:
    """Record what runs inside the block; on leaving it, the yielded Recording's `record` holds the units."""
    global _hooked
    if not _hooked:
        sys.addaudithook(_audit)  # it cannot be removed; while no window is open it returns at once
        _hooked = True
    recording = Recording()
    if not _profiler:
        profiler = cProfile.Profile(subcalls=False, builtins=False)
        try:
            profiler.enable()
        except ValueError:  # another profiling tool holds the interpreter (Python 3.12+): what runs cannot be seen
            recording.complete = False
        else:
            _profiler.append(profiler)
    _open.append(recording)
    recording.before = _counts() if _profiler else {}
    try:
        yield recording
    finally:
        after = _counts() if _profiler else {}
        _open.remove(recording)
        if not _open and _profiler:
            _profiler.pop().disable()
        recording.complete = recording.complete and bool(after)
        recording.codes |= _ran_since(recording.before, after)
        recording.record = _record_of(recording)


def _ran_since(before: Mapping, after: Mapping) -> set:
    return {code for code, count in after.items() if count > before.get(code, 0)}


def so_far() -> dict[str, str]:
    """The record of the innermost open window up to now (empty outside every window): what has computed anything
    this window has made so far."""
    if not _open or not _profiler:
        return {}
    recording = _open[-1]
    return _record_of(dataclasses.replace(recording, codes=recording.codes | _ran_since(recording.before, _counts())))


def _record_of(recording: Recording) -> dict[str, str]:
    found: set[str] = set(recording.paths)
    for code in recording.codes:
        found |= _code_units(code)
    hashes = {unit: unit_hash(unit) for unit in found}
    record = {unit: digest for unit, digest in hashes.items() if digest is not None}
    record.update(recording.replayed)
    return dict(sorted(record.items()))


def replay(record: Mapping[str, str]) -> None:
    """A stored result is being reused: the record it was computed under joins every open window's."""
    for recording in _open:
        recording.replayed.update(record)


def changed(record: Mapping[str, str]) -> list[str]:
    """The units of `record` whose source is not what it was when recorded (gone ones included), sorted."""
    return sorted(unit for unit, digest in record.items() if unit_hash(unit) != digest)


def reused(record: Mapping[str, str] | None) -> bool:
    """Whether a stored result computed under `record` may be served now: it has one and none of it changed; it is then
    replayed into the open windows."""
    if not isinstance(record, Mapping) or not record or changed(record):
        return False
    replay(record)
    return True


# ---- memos that keep their records ----


# The values the memos of `cache` hold, by identity, with their records: what a caller hands a window (`record_of`).
_made: dict[int, tuple[object, dict]] = {}


def record_of(value: object) -> dict[str, str] | None:
    """The record of the call that made `value`, where a `cache`d function made it; else None."""
    made = _made.get(id(value))
    return made[1] if made is not None and made[0] is value else None


def cache(function: Callable) -> Callable:
    """functools.cache whose hits replay the record of the call that computed the value."""
    memo: dict = {}

    @functools.wraps(function)
    def cached(*args, **kwargs):
        key = (args, tuple(sorted(kwargs.items())))
        if key in memo:
            value, record = memo[key]
            replay(record)
            return value
        with window() as recording:
            value = function(*args, **kwargs)
        if recording.complete:
            memo[key] = (value, recording.record)
            _made[id(value)] = (value, recording.record)
        replay(recording.record)
        return value

    cached.cache_clear = memo.clear  # type: ignore[attr-defined]
    return cached


class SharedWork(dict):
    """What the claims of one run compute once and share (a model fine-tuned by the first claim that needs it): each
    value is stored with the record, so far, of the window that made it, and replayed whenever another reads it."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.records: dict = {}

    def __setitem__(self, key, value) -> None:
        self.records[key] = so_far()
        super().__setitem__(key, value)

    def __getitem__(self, key):
        value = super().__getitem__(key)
        replay(self.records.get(key, {}))
        return value


class cached_property:  # noqa: N801 - named as the functools descriptor it stands for
    """functools.cached_property whose later reads replay the record of the first."""

    def __init__(self, function: Callable):
        self.function = function
        self.__doc__ = function.__doc__

    def __set_name__(self, owner, name: str) -> None:
        self.slot = f"_recorded_{name}"

    def __get__(self, instance, owner=None):
        if instance is None:
            return self
        stored = instance.__dict__.get(self.slot)
        if stored is not None:
            replay(stored[1])
            return stored[0]
        with window() as recording:
            value = self.function(instance)
        if recording.complete:
            instance.__dict__[self.slot] = (value, recording.record)
        replay(recording.record)
        return value
