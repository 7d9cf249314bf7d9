"""The notebooks in examples/: the quickstart and one per paper, committed with their outputs, importing only lincorr's top
level; each still runs top to bottom on the bundled model and says what its committed outputs say.

`python tests/helpers/notebooks.py` re-executes them and writes their outputs back.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="nbformat is not installed (pip install -e '.[test]')")
pytest.importorskip("nbclient", reason="nbclient is not installed (pip install -e '.[test]')")

from helpers.notebooks import NOTEBOOKS, code_cells, execute, imported_modules  # noqa: E402  (needs nbclient)

ROOT = Path(__file__).parents[1]
PAPERS = {"peng-linear-correlation": "2502.04520", "merullo-vector-arithmetic": "2305.16130",
          "feng-extractive-structures": "2412.04614"}
NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")
# How long something took ("collection 30.9 s", "seconds  111.2") depends on the machine, its load and the cache, not the notebook.
DURATION = re.compile(r"\bseconds\s+\d+(?:\.\d+)?|\d+(?:\.\d+)? s\b")


def named(path: Path):
    return pytest.param(path, id=path.stem)


def read(path: Path):
    return nbformat.read(path, as_version=4)


def test_there_is_a_notebook_per_paper_beside_the_quickstart():
    assert sorted(path.stem for path in NOTEBOOKS) == sorted([*PAPERS, "quickstart"])


@pytest.mark.parametrize("path", [named(path) for path in NOTEBOOKS])
def test_a_notebook_imports_only_lincorrs_top_level(path):
    imported = imported_modules(read(path))
    assert "lincorr" in imported and not [name for name in imported if name.startswith("lincorr.")]


@pytest.mark.parametrize("path", [named(path) for path in NOTEBOOKS])
def test_a_notebook_is_committed_with_an_output_for_every_code_cell_and_no_error(path):
    cells = code_cells(read(path))
    assert cells and all(cell.outputs and cell.execution_count for cell in cells)
    outputs = [output for cell in cells for output in cell.outputs]
    assert not [output for output in outputs if output.output_type == "error"]
    assert not [output for output in outputs if output.get("name") == "stderr"]  # progress bars: their timings change every run


@pytest.mark.parametrize("name", PAPERS)
def test_a_papers_notebook_opens_with_its_title_and_arxiv_id_and_is_linked_from_the_readme(name):
    opening = read(ROOT / "examples" / f"{name}.ipynb").cells[0]
    assert opening.cell_type == "markdown" and f"arXiv:{PAPERS[name]}" in opening.source and "q4km" in opening.source
    assert f"(examples/{name}.ipynb)" in (ROOT / "README.md").read_text(encoding="utf-8")


def said(output) -> tuple[str, str]:
    """What an output says and its kind: a stream's text, or a result's plain text, with the mimetypes it came in."""
    if output.output_type == "stream":
        return f"stream {output.name}", output.text
    return f"{output.output_type} {sorted(output.get('data', {}))}", output.get("data", {}).get("text/plain", "")


def numbers_agree(committed: str, fresh: str) -> bool:
    """The same words, and the same numbers up to run-to-run noise on another CPU or torch build.

    A notebook is seeded, so on one machine its numbers repeat exactly; elsewhere floating-point reduction order may move
    a score across a tie. The tolerance allows that much and no more: 0.07 absolute is two of the 32 pairs an accuracy
    in the vector-arithmetic notebook counts, or one of the 20 OCR queries moving one rank in a mean rank; 10% relative
    covers the larger numbers (ranks near chance, sizes of files) whose last digits are noise. Durations are not compared.
    """
    committed, fresh = DURATION.sub("", committed), DURATION.sub("", fresh)
    words = [NUMBER.sub("#", text).split() for text in (committed, fresh)]
    values = [[float(number) for number in NUMBER.findall(text)] for text in (committed, fresh)]
    return words[0] == words[1] and len(values[0]) == len(values[1]) and all(
        math.isclose(a, b, rel_tol=0.1, abs_tol=0.07) for a, b in zip(*values))


@pytest.mark.integration
@pytest.mark.multiprocess
@pytest.mark.parametrize("path", [named(path) for path in NOTEBOOKS])
def test_a_notebook_runs_and_says_what_its_committed_outputs_say(path, tmp_path, bundled):
    bundled("gemma-3-270m-q4km")  # converted in the session's cache, which the kernel inherits (LINCORR_CACHE_DIR)
    committed, fresh = read(path), execute(path, tmp_path)
    for before, after in zip(code_cells(committed), code_cells(fresh), strict=True):
        kept = [said(output) for output in before.outputs]
        shown = [said(output) for output in after.outputs if output.get("name") != "stderr"]
        assert [kind for kind, _ in shown] == [kind for kind, _ in kept], before.source
        for (_, old), (_, new) in zip(kept, shown):
            assert numbers_agree(old, new), f"{before.source}\n--- committed:\n{old}\n--- now:\n{new}"
