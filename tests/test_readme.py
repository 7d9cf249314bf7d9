"""The front page: README.md stays short, its links resolve, its version and citation agree with the package, and its
two quickstarts run as written, with the defaults, on the bundled model, from an empty home directory.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
MAX_LINES = 150


def fenced(heading: str, language: str) -> str:
    """The first ```language block under the README's `## heading`."""
    section = README.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return re.search(rf"```{language}\n(.*?)```", section, re.S).group(1)


def lincorr_bibtex(text: str) -> str:
    return re.search(r"@software\{lincorr,.*?\n\}", text, re.S).group(0)


def test_the_readme_is_short_and_its_links_resolve():
    assert len(README.splitlines()) <= MAX_LINES
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README):
        if not re.match(r"https?://", target):
            assert (ROOT / target).exists(), target


def test_version_and_citation_agree_everywhere():
    from lincorr import __version__

    project_version = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(encoding="utf-8"), re.M).group(1)
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    assert project_version == __version__ == str(citation["version"])
    assert f"## {__version__}" in (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    bibtex = lincorr_bibtex(README)
    assert f"version = {{{__version__}}}" in bibtex
    assert bibtex == lincorr_bibtex((ROOT / "docs" / "citing.md").read_text(encoding="utf-8"))
    # The three papers: linked by their arXiv ids in the README, cited in the CFF file.
    arxiv = {ref["identifiers"][0]["value"].removeprefix("arXiv:") for ref in citation["references"]}
    assert len(arxiv) == 3 and all(f"https://arxiv.org/abs/{number}" in README for number in arxiv)


@pytest.fixture
def fresh_user(tmp_path, bundled_cache, bundled) -> dict:
    """A new user's environment: an empty home, nothing cached but the bundled models' conversions (made once per run) and
    the logit tables the run's tests collected: collecting is the integration tests' to check, in this process and in
    others (tests/test_distributed.py), and the quickstarts' tables cost about 30 s a test to collect again."""
    bundled("gemma-3-270m-q4km")  # converted into the session's cache before the user's cache links to it
    home = tmp_path / "home"
    home.mkdir()
    return {**os.environ, "HOME": str(home), "LINCORR_CACHE_DIR": str(bundled_cache(tables=True)), "HF_HUB_OFFLINE": "1"}


@pytest.mark.integration
def test_the_command_line_quickstart_runs_as_written(fresh_user, tmp_path):
    lines = [line.split("#", 1)[0].strip() for line in fenced("Quickstart: the command line", "bash").splitlines()]
    commands = [shlex.split(line) for line in lines if line]
    assert [command[:2] for command in commands] == [["lincorr", "demo"], ["lincorr", "fit"]]
    outputs = []
    for command in commands:
        done = subprocess.run([sys.executable, "-m", "lincorr", *command[1:]], cwd=tmp_path, env=fresh_user,
                              capture_output=True, text=True, timeout=1200)
        assert done.returncode == 0, done.stderr[-3000:]
        outputs.append(done.stdout)
    assert (tmp_path / "lincorr-out" / "result.json").is_file() and (tmp_path / "lincorr-out" / "W.png").is_file()
    for output in outputs:
        assert re.search(r"label-wise r", output, re.I), output


@pytest.mark.integration
def test_the_python_quickstart_runs_as_written(fresh_user, tmp_path):
    done = subprocess.run([sys.executable, "-c", fenced("Quickstart: Python", "python")], cwd=tmp_path, env=fresh_user,
                          capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    r, top = done.stdout.strip().splitlines()[-2:]
    assert 0.5 < float(r) <= 1  # a real correlation on gemma-3-270m, not noise
    assert top.startswith("[('Japan', ")  # measured: Japan 0.14, then Ukraine 0.03 (ridge, seed 0)
