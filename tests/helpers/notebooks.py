"""Run the notebooks in examples/ and keep what is committed of them small and stable.

`python tests/helpers/notebooks.py [NAME.ipynb ...]` re-executes them (all by default) in a temporary directory, so their
files land nowhere in the checkout, and writes each back with its outputs; run it from the repository root with
lincorr importable (PYTHONPATH=src) after changing a notebook or what it shows.
"""

from __future__ import annotations

import ast
import resource
import sys
import tempfile
import time
from pathlib import Path

import nbclient
import nbformat

EXAMPLES = Path(__file__).parents[2] / "examples"
NOTEBOOKS = sorted(EXAMPLES.glob("*.ipynb"))


def code_cells(notebook) -> list:
    return [cell for cell in notebook.cells if cell.cell_type == "code"]


def imported_modules(notebook) -> list[str]:
    """Every module the notebook's code imports, `from X import y` as X."""
    imported = []
    for node in ast.walk(ast.parse("\n".join(cell.source for cell in code_cells(notebook)))):
        if isinstance(node, ast.ImportFrom):
            imported.append(node.module or "")
        elif isinstance(node, ast.Import):
            imported += [alias.name for alias in node.names]
    return imported


def execute(path: Path, directory: Path):
    """The notebook at `path`, run top to bottom with `directory` as its working directory; raises on a failing cell."""
    notebook = nbformat.read(path, as_version=4)
    # The kernel inherits the environment: PYTHONPATH, and LINCORR_CACHE_DIR (a test session's cache) where set.
    nbclient.NotebookClient(notebook, timeout=900, kernel_name="python3", record_timing=False,
                            resources={"metadata": {"path": str(directory)}}).execute()
    return notebook


def stripped(notebook):
    """The notebook without what changes from run to run for no reason of its own: the kernel's version, and stderr
    (progress bars, with their timings, and library warnings)."""
    notebook.metadata = {"kernelspec": notebook.metadata["kernelspec"], "language_info": {"name": "python"}}
    for cell in code_cells(notebook):
        cell.outputs = [output for output in cell.outputs if output.get("name") != "stderr"]
    return notebook


def main(names: list[str]) -> None:
    for path in [EXAMPLES / name for name in names] or NOTEBOOKS:
        with tempfile.TemporaryDirectory() as directory:
            started, cpu = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
            notebook = execute(path, Path(directory))
            nbformat.write(stripped(notebook), path)
        # The kernel's CPU time, counted once it has exited: on a shared machine the wall time says more about the neighbours.
        used = resource.getrusage(resource.RUSAGE_CHILDREN)
        kernel = used.ru_utime + used.ru_stime - cpu.ru_utime - cpu.ru_stime
        print(f"{path.name}: {time.perf_counter() - started:.0f} s wall, kernel CPU {kernel:.0f} s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
