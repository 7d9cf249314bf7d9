"""The code digest behind every cached result: it changes with the computation and with nothing else."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import lincorr.provenance

from lincorr.provenance import computation

MODULE = '''"""A module."""
from __future__ import annotations
import dataclasses
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy

@dataclasses.dataclass
class Row:
    """A row."""
    count: int = 0

def scaled(values: list[float], factor: float = 2.0) -> list[float]:
    """Each value times `factor`."""
    return [value * factor for value in values]  # a comment
'''

# Edits a reader, a linter or a type checker asks for: none changes what the module computes.
SAME = {
    "docstrings": MODULE.replace('"""A module."""', '"""Another module."""').replace('"""Each value times `factor`."""', ""),
    "comments": MODULE.replace("  # a comment", "  # another comment\n    # and a line more"),
    "argument annotations": MODULE.replace("values: list[float], factor: float = 2.0", "values: list, factor: int | float = 2.0"),
    "return annotation": MODULE.replace(") -> list[float]:", "):"),
    "imports for type checkers": MODULE.replace("    import numpy", "    import numpy\n    from collections.abc import Sequence"),
    "blank lines": MODULE.replace("\n\ndef scaled", "\n\n\n\ndef scaled"),
}

# Edits that change a result, or may: each must change the digest.
OTHER = {
    "a constant": MODULE.replace("factor: float = 2.0", "factor: float = 3.0"),
    "an expression": MODULE.replace("value * factor", "value / factor"),
    "a dataclass field's annotation": MODULE.replace("    count: int = 0", "    count: dataclasses.InitVar[int] = 0"),
    "a field's default": MODULE.replace("count: int = 0", "count: int = 1"),
    "an import": MODULE.replace("import dataclasses\n", "import dataclasses\nimport math\n"),
}


@pytest.mark.parametrize("edit", SAME)
def test_an_edit_that_computes_the_same_keeps_the_digest(edit):
    assert SAME[edit] != MODULE
    assert computation(SAME[edit]) == computation(MODULE)


@pytest.mark.parametrize("edit", OTHER)
def test_an_edit_that_may_compute_otherwise_changes_the_digest(edit):
    assert OTHER[edit] != MODULE
    assert computation(OTHER[edit]) != computation(MODULE)


def test_the_computation_is_written_without_the_fields_one_python_adds():
    # 3.12 gives every function `type_params=[]` and splits this f-string's literal around an empty part; 3.13 hides
    # empty fields: the text (and so every stored digest) must be what any Python from 3.10 on gives.
    source = 'def f(x: int) -> str:\n    """doc"""\n    return f"{x:>3}a" "b{x!r}"\n'
    assert computation(source) == (
        "Module(body=[FunctionDef(name='f', args=arguments(args=[arg(arg='x')]), body=[Return(value=JoinedStr(values=["
        "FormattedValue(value=Name(id='x', ctx=Load()), conversion=-1, format_spec=JoinedStr(values=[Constant(value='>3')])), "
        "Constant(value='ab{x!r}')]))])])")


def other_pythons() -> list[str]:
    """Interpreters of other minor versions (3.10 on) that run: on PATH, or installed by pyenv."""
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    found = {}
    for candidate in [*filter(None, (shutil.which(f"python3.{minor}") for minor in range(10, 15))),
                      *map(str, sorted(pyenv.glob("3.1*/bin/python3")))]:
        probe = subprocess.run([candidate, "-c", "import sys; print(sys.version_info[1])"], capture_output=True, text=True)
        if probe.returncode == 0 and int(probe.stdout) not in (sys.version_info[1], *found):
            found[int(probe.stdout)] = candidate
    return list(found.values())


OTHER_PYTHONS = other_pythons()
EVERY_MODULE = """
import hashlib, importlib.util, json, sys
from pathlib import Path
spec = importlib.util.spec_from_file_location("provenance", sys.argv[1])
provenance = importlib.util.module_from_spec(spec); spec.loader.exec_module(provenance)
root = Path(sys.argv[1]).parent
print(json.dumps({str(p.relative_to(root)): hashlib.sha256(provenance.computation(p.read_text()).encode()).hexdigest()
                  for p in sorted(root.rglob("*.py"))}))
"""


@pytest.mark.skipif(not OTHER_PYTHONS, reason="no other Python (3.10 to 3.14) on PATH")
@pytest.mark.parametrize("python", OTHER_PYTHONS)
def test_every_module_of_lincorr_computes_the_same_under_another_python(python):
    """A reproduction measured under one Python must not read as stale under another (provenance needs the stdlib alone)."""
    provenance = Path(lincorr.provenance.__file__)
    here, there = (json.loads(subprocess.run([exe, "-c", EVERY_MODULE, str(provenance)], capture_output=True, text=True,
                                             check=True).stdout) for exe in (sys.executable, python))
    assert len(here) > 100 and here == there
