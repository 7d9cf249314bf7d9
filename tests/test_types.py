"""mypy finds no error in src/lincorr with the settings in pyproject.toml ([tool.mypy])."""

from __future__ import annotations

from pathlib import Path

import pytest

mypy_api = pytest.importorskip("mypy.api", reason="mypy is not installed (pip install '.[test]')")

ROOT = Path(__file__).resolve().parents[1]


def test_mypy_finds_nothing(monkeypatch):
    # mypy reads `files` relative to where it runs; its incremental cache (.mypy_cache, ignored by git) makes a rerun fast.
    monkeypatch.chdir(ROOT)
    out, err, status = mypy_api.run(["--config-file", str(ROOT / "pyproject.toml")])
    assert status == 0 and "Success: no issues found" in out, out[-8000:] + err[-2000:]
