"""The code digest behind every cached result: it changes with the computation and with nothing else."""

from __future__ import annotations

import pytest

from lincorr.provenance import code_digest, computation, dependencies

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


def test_a_digest_covers_the_modules_a_step_imports():
    reached = dependencies("lincorr.reproduce.merullo.steps")
    assert {"lincorr.reproduce.merullo.steps", "lincorr.studies.vectors.sources", "lincorr.models"} <= set(reached)
    assert "lincorr.reproduce.runner" not in reached  # the runner decides what to measure, not what a claim measures
    assert len(code_digest("lincorr.reproduce.merullo.steps")) == 64


def test_a_name_from_the_package_is_followed_to_the_module_exporting_it():
    reached = set(dependencies("lincorr.outputs"))  # it imports __version__ and strict_json from the package
    assert "lincorr.strict_json" in reached and "lincorr" not in reached
    assert set(dependencies("lincorr.report.files")) >= {"lincorr.reading", "lincorr.schema"}
