"""Where a result comes from: the digest of the lincorr code behind a cached number, and the command line that is running.

Cache keys (logit tables, stored study rows) carry `code_digest(module)`, so any change to the
code behind a result — not only a change someone remembered to mark — makes it recompute.
Saved results name the `lincorr` command that wrote them (`running_command`, recorded by the CLI).
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
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                found.append(submodule if importlib.util.find_spec(node.module).submodule_search_locations is not None
                             and importlib.util.find_spec(submodule) is not None else node.module)
        stack.extend(ast.iter_child_nodes(node))
    return tuple(sorted(set(found) - {name}))


@functools.cache
def dependencies(name: str) -> tuple[str, ...]:
    """`name` and every lincorr module it reaches through run-time imports, sorted."""
    seen, todo = set(), [name]
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(internal_imports(module))
    return tuple(sorted(seen))


@functools.cache
def code_digest(name: str) -> str:
    """sha256 of lincorr's version and the source of `name` and all of its lincorr dependencies."""
    from lincorr import __version__

    digest = hashlib.sha256(__version__.encode())
    for module in dependencies(name):
        digest.update(module.encode())
        digest.update(module_path(module).read_bytes())
    return digest.hexdigest()
