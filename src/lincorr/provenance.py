"""Where a result comes from: the digest of the lincorr code behind a cached number, the command line that is running, and the
environment that computed it.

Cache keys (logit tables, stored study rows) carry `code_digest(module)`, so any change to what the code behind a
result computes — not only a change someone remembered to mark — makes it recompute; comments, docstrings and type
annotations of functions are not computation (`computation`).
Saved results name the `lincorr` command that wrote them (`running_command`, recorded by the CLI), or the Python call when
none is running, and the environment (`environment`): versions, threads, and the dtype, device and batch size this process
used, noted where they are decided (`note`), since batch size and threads change the logits in their last digits.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import shlex
from collections.abc import Sequence
from pathlib import Path

PACKAGE = "lincorr"

# The arguments of the `lincorr` command this process is running; None while lincorr is used as a library.
_running_arguments: tuple[str, ...] | None = None


# What this process has used so far that a saved result depends on: models (dtype, device) and logit batch sizes.
_noted: dict[str, dict] = {"models": {}, "batch_sizes": {}}


def note(kind: str, name: str, value) -> None:
    """Remember that this process used `value` for `name` ("models": a model's dtype and device; "batch_sizes": a model's batch)."""
    _noted[kind][name] = value


def environment() -> dict:
    """Versions of lincorr, torch, transformers and Python, torch's thread count, and what `note` remembered."""
    import platform
    import sys
    from importlib.metadata import PackageNotFoundError, version

    from lincorr import __version__

    def installed(package: str) -> str | None:
        try:
            return version(package)
        except PackageNotFoundError:
            return None

    torch = sys.modules.get("torch")  # a result that never touched torch does not import it only to say so
    return {"lincorr": __version__, "torch": installed("torch"), "transformers": installed("transformers"),
            "python": platform.python_version(), "torch_threads": torch.get_num_threads() if torch else None,
            "models": dict(_noted["models"]), "batch_sizes": dict(_noted["batch_sizes"])}


def python_call() -> str | None:
    """How this Python process was started (`python script.py ARGS`), for results saved without a `lincorr` command."""
    import sys

    return shlex.join(["python", *sys.argv]) if sys.argv and sys.argv[0] else None


def record_command(argv: Sequence[str] | None) -> None:
    """Remember the arguments of the `lincorr` command this process is running; None when it has finished."""
    global _running_arguments
    _running_arguments = None if argv is None else tuple(argv)


def running_command() -> str | None:
    """The command line being run ("lincorr fit city country -n 500"), or None when no `lincorr` command is running."""
    return None if _running_arguments is None else shlex.join(("lincorr", *_running_arguments))


def module_path(name: str) -> Path:
    """The source file of a lincorr module ("lincorr.collection.tables")."""
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(name)
    return Path(spec.origin)


def _is_type_checking_block(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def top_level_source(name: str) -> list[str]:
    """The module behind `lincorr.<name>`: the one it is exported from; none for `__version__`, which every digest holds,
    or for the list of exports itself. (The package's own file only lists its exports, so a new export leaves every
    digest as it was.)"""
    from lincorr import _EXPORTS

    return [_EXPORTS[name]] if name in _EXPORTS else [] if name in ("__version__", "_EXPORTS") else [PACKAGE]


def internal_imports(name: str) -> tuple[str, ...]:
    """The lincorr modules `name` imports at run time, at any depth of its code (imports only for type checkers left out)."""
    tree = ast.parse(module_path(name).read_text(encoding="utf-8"))
    found: list[str] = []
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if _is_type_checking_block(node):
            continue
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.split(".")[0] == PACKAGE]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == PACKAGE and node.level == 0:
            parent = importlib.util.find_spec(node.module)
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                if parent is not None and parent.submodule_search_locations is not None and importlib.util.find_spec(submodule) is not None:
                    found.append(submodule)
                elif node.module == PACKAGE:
                    found += top_level_source(alias.name)
                else:
                    found.append(node.module)
        stack.extend(ast.iter_child_nodes(node))
    return tuple(sorted(set(found) - {name}))


@functools.cache
def dependencies(name: str, leaving_out: tuple[str, ...] = ()) -> tuple[str, ...]:
    """`name` and every lincorr module it reaches through run-time imports, sorted; not through the modules `leaving_out`."""
    seen, todo = set(), [name]
    while todo:
        module = todo.pop()
        if module not in seen and module not in leaving_out:
            seen.add(module)
            todo.extend(internal_imports(module))
    return tuple(sorted(seen))


def computation(source: str) -> str:
    """What of a module's `source` can change a result: its syntax tree without comments, docstrings, the annotations of
    function arguments and returns, and imports for type checkers alone. Class-level annotations stay: they make a
    dataclass's fields, and `typing.get_type_hints` reads them."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = [statement for statement in node.body if not _is_type_checking_block(statement)]
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                body = body[1:] or [ast.Pass()]
            node.body = body or [ast.Pass()]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            node.returns = None
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            arguments = node.args
            for argument in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs, arguments.vararg, arguments.kwarg]:
                if argument is not None:
                    argument.annotation = None
    return canonical_dump(tree)


def canonical_dump(node: object) -> str:
    """`node` as text that one source gives under every Python from 3.10 on: `ast.dump` shows the fields of its own
    version (3.12 adds `type_params=[]` to every function and class, 3.13 hides empty fields), so a result measured
    under one Python would read as stale under another. Empty fields are left out, and `kind` (the u of u"..."); an
    f-string's literal parts are joined (3.12 splits some and adds empty ones)."""
    if isinstance(node, ast.JoinedStr):
        node = ast.JoinedStr(values=_joined_literals(node.values))
    if isinstance(node, ast.AST):
        fields = [f"{name}={canonical_dump(value)}" for name, value in ast.iter_fields(node)
                  if value is not None and value != [] and name not in ("kind", "type_comment")]
        return f"{type(node).__name__}({', '.join(fields)})"
    if isinstance(node, list):
        return f"[{', '.join(canonical_dump(item) for item in node)}]"
    return repr(node)


def _joined_literals(values: list[ast.expr]) -> list[ast.expr]:
    """An f-string's parts with consecutive literal strings joined into one and empty literals dropped."""
    joined: list[ast.expr] = []
    for value in values:
        literal = isinstance(value, ast.Constant) and isinstance(value.value, str)
        if literal and joined and isinstance(joined[-1], ast.Constant) and isinstance(joined[-1].value, str):
            # Both are str Constants, checked through `literal` and the test above, which mypy does not carry over.
            joined[-1] = ast.Constant(joined[-1].value + value.value)  # type: ignore[attr-defined]
        elif not literal or value.value:  # type: ignore[attr-defined]
            joined.append(value)
    return joined


@functools.cache
def code_digest(name: str, leaving_out: tuple[str, ...] = ()) -> str:
    """sha256 of lincorr's version and the computation (`computation`) of `name` and all of its lincorr dependencies: an
    edit to a comment, a docstring or a type annotation leaves a cached result valid; any other edit recomputes it.
    `leaving_out` names modules whose part of a result is computed again whenever it is read (the reproduction's tests)."""
    from lincorr import __version__

    digest = hashlib.sha256(__version__.encode())
    for module in dependencies(name, leaving_out):
        digest.update(module.encode())
        digest.update(computation(module_path(module).read_text(encoding="utf-8")).encode())
    return digest.hexdigest()
