"""Where a result comes from: what of lincorr's code computes (`computation`, behind every record of `recording`), the
command line that is running, and the environment that computed it.

A change to what the code behind a result computes — not only a change someone remembered to mark — makes it stale;
comments, docstrings and type annotations of functions are not computation (`computation`).
Saved results name the `lincorr` command that wrote them (`running_command`, recorded by the CLI), or the Python call when
none is running, and the environment (`environment`): versions, threads, and the dtype, device and batch size this process
used, noted where they are decided (`note`), since batch size and threads change the logits in their last digits.
"""

from __future__ import annotations

import ast
import copy
import shlex
from collections.abc import Sequence

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


def _is_type_checking_block(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def computation(source: str) -> str:
    """What of a module's `source` can change a result: its syntax tree without comments, docstrings, the annotations of
    function arguments and returns, and imports for type checkers alone. Class-level annotations stay: they make a
    dataclass's fields, and `typing.get_type_hints` reads them."""
    return computation_of(ast.parse(source))


def computation_of(tree: ast.AST) -> str:
    """`computation` of one parsed node (a module, a function, a class, a statement), which is left as it was."""
    tree = copy.deepcopy(tree)
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
