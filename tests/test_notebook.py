"""examples/quickstart.ipynb runs top to bottom on the bundled model, so it can never go stale; it is committed without outputs."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="nbformat is not installed (pip install -e '.[test]')")
nbclient = pytest.importorskip("nbclient", reason="nbclient is not installed (pip install -e '.[test]')")

NOTEBOOK = Path(__file__).parents[1] / "examples" / "quickstart.ipynb"


def test_the_committed_notebook_has_no_outputs():
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code and all(cell.outputs == [] and cell.execution_count is None for cell in code)


def test_the_notebook_imports_only_lincorrs_top_level():
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    imported = []
    for node in ast.walk(ast.parse("\n".join(cell.source for cell in notebook.cells if cell.cell_type == "code"))):
        if isinstance(node, ast.ImportFrom):
            imported.append(node.module or "")
        elif isinstance(node, ast.Import):
            imported += [alias.name for alias in node.names]
    assert "lincorr" in imported and not [name for name in imported if name.startswith("lincorr.")]


@pytest.mark.integration
@pytest.mark.multiprocess
def test_quickstart_runs_and_shows_its_figures_inline(tmp_path):
    # The kernel inherits LINCORR_CACHE_DIR: the session's cache, with the converted models and the tables the demo's
    # report test collects.
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    nbclient.NotebookClient(notebook, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs]
    assert not [output for output in outputs if output.output_type == "error"]
    assert sum("image/png" in output.get("data", {}) for output in outputs) == 2  # W and the matrix, inline
    text = "".join(output.get("text", "") for output in outputs if output.output_type == "stream")
    assert "City->Country" in text and "generalization_rate" in text
    assert (tmp_path / "quickstart-out" / "report.html").stat().st_size > 1_000_000  # plotly.js inline
