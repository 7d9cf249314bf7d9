"""The layout holds: imports point one way (cli -> reproduce -> studies -> core stages -> models), and studies are used only through public APIs."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import lincorr

SOURCE = Path(lincorr.__file__).parent
STUDY_PACKAGES = {"lincorr.studies", "lincorr.studies.logits", "lincorr.studies.training", "lincorr.studies.vectors",
                  "lincorr.studies.extractive"}


def modules() -> dict[str, Path]:
    """Every module of the package by dotted name."""
    found = {}
    for info in pkgutil.walk_packages([str(SOURCE)], prefix="lincorr."):
        spec = importlib.util.find_spec(info.name)
        found[info.name] = Path(spec.origin)
    return found


def imports(path: Path) -> list[tuple[str, tuple[str, ...]]]:
    """(module, names) for every run-time `from lincorr... import names` / `import lincorr...` in a file, at any depth.

    Imports under `if TYPE_CHECKING:` are only annotations and are left out.
    """
    found = []
    stack: list[ast.AST] = [ast.parse(path.read_text(encoding="utf-8"))]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "lincorr":
            found.append((node.module, tuple(alias.name for alias in node.names)))
        elif isinstance(node, ast.Import):
            found += [(alias.name, ()) for alias in node.names if alias.name.split(".")[0] == "lincorr"]
        stack.extend(ast.iter_child_nodes(node))
    return found


def layer(module: str) -> int:
    """0: core stages and models, 1: studies, 2: reproducing papers from the studies and the ripple benchmark (judged by
    the reproduction's rules), 3: the command line."""
    if module.startswith("lincorr.cli") or module == "lincorr.__main__":
        return 3
    if module.startswith(("lincorr.reproduce", "lincorr.ripple")):
        return 2
    return 1 if module.startswith("lincorr.studies") else 0


def test_imports_never_point_back_up_the_layers():
    backwards = [
        f"{name} imports {target}"
        for name, path in modules().items()
        for target, _ in imports(path)
        if layer(target) > layer(name)
    ]
    assert not backwards


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (or a module importing itself): the import cycles."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components

    names = sorted(graph)
    index = {name: i for i, name in enumerate(names)}
    edges = [(index[a], index[b]) for a in names for b in graph[a] if b in index]
    rows, cols = zip(*edges) if edges else ((), ())
    adjacency = csr_matrix(([1] * len(edges), (rows, cols)), shape=(len(names), len(names)))
    _, labels = connected_components(adjacency, directed=True, connection="strong")
    groups = [[n for n in names if labels[index[n]] == label] for label in set(labels)]
    return [g for g in groups if len(g) > 1 or g[0] in graph[g[0]]]


def test_no_import_cycle_anywhere():
    """Not even through an import inside a function: a cycle means two modules that cannot be understood apart."""
    graph = {name: {target for target, _ in imports(path) if target != name} for name, path in modules().items()}
    # A package's own __init__ importing its modules (and they it) is how a package exports; those edges are not cycles.
    graph = {name: {t for t in targets if not (t.startswith(name + ".") or name.startswith(t + "."))} for name, targets in graph.items()}
    assert not import_cycles(graph)


def test_the_cycle_finder_finds_a_planted_cycle():
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []


def test_studies_import_no_private_names():
    private = [
        f"{name} imports {target}.{imported}"
        for name, path in modules().items() if layer(name) in (1, 2)
        for target, names in imports(path)
        for imported in names if imported.startswith("_")
    ]
    assert not private


def test_a_study_uses_another_study_only_through_its_public_api():
    """A name imported from a study module by another study or by a reproduction must be in that module's `__all__` (its public study API)."""
    known = modules()
    reaching = []
    for name, path in known.items():
        if layer(name) not in (1, 2):
            continue
        for target, names in imports(path):
            if target == name or layer(target) != 1 or target not in known or target in STUDY_PACKAGES:
                continue
            public = set(getattr(importlib.import_module(target), "__all__", ()))
            reaching += [f"{name} uses {target}.{n}, which is not in its __all__" for n in names if n not in public]
    assert not reaching


def test_every_study_declares_its_public_api():
    studies = [name for name in modules() if layer(name) == 1 and name not in STUDY_PACKAGES]
    missing = [name for name in studies if not hasattr(importlib.import_module(name), "__all__")]
    assert not missing
    for name in studies:
        module = importlib.import_module(name)
        assert all(hasattr(module, exported) for exported in module.__all__), name


def test_the_walker_sees_nested_and_type_checking_imports_correctly(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from typing import TYPE_CHECKING\n"
        "from lincorr.metrics import rate\n"
        "if TYPE_CHECKING:\n    from lincorr.fit import PairResult\n"
        "def f():\n    import lincorr.plots\n    from lincorr.names import _private\n"
    )
    assert sorted(imports(sample)) == [("lincorr.metrics", ("rate",)), ("lincorr.names", ("_private",)), ("lincorr.plots", ())]


def test_the_module_table_in_the_docs_is_current():
    """docs/architecture.md lists every module with its docstring: regenerate with `python docs/modules.py --write`."""
    tool = importlib.util.spec_from_file_location("module_table", SOURCE.parents[1] / "docs" / "modules.py")
    module_table = importlib.util.module_from_spec(tool)
    tool.loader.exec_module(module_table)
    assert module_table.current_section() == module_table.table()


MAX_FILE_LINES = 450
MAX_FUNCTION_LINES = 60


def oversized(path: Path) -> list[str]:
    """What in one source file is over the size a reader takes in at once: the file itself, and each function by its lines."""
    text = path.read_text(encoding="utf-8")
    found = [f"{path.name}: {len(text.splitlines())} lines"] if len(text.splitlines()) > MAX_FILE_LINES else []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = node.end_lineno - node.lineno + 1
            if length > MAX_FUNCTION_LINES:
                found.append(f"{path.name}:{node.lineno} {node.name}: {length} lines")
    return found


def test_no_source_file_or_function_is_too_long_to_read_at_once():
    assert [entry for path in modules().values() for entry in oversized(path)] == []


def test_the_size_check_finds_a_long_function(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("def long():\n" + "    x = 1\n" * MAX_FUNCTION_LINES + "\n\ndef short():\n    return 1\n")
    assert oversized(sample) == [f"sample.py:1 long: {MAX_FUNCTION_LINES + 1} lines"]
