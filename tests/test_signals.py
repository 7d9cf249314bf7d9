"""Signals and pipes, in a real `lincorr` process (`lincorr.__main__.main`, the console entry): Ctrl-C and SIGTERM at
any moment end in one line and 128 + the signal, a reader that went away ends the command quietly with 141.

A signal sent after a delay lands at a moment the test does not know, so here the process signals itself from an
import hook at a chosen moment: while `lincorr.cli` starts importing, deep in start-up (torch, which a model command's
options import) and while the command runs (the module its handler imports). No model is loaded.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

SOURCE = str(Path(__file__).resolve().parents[1] / "src")

# argv: the module whose import sends the signal, the signal's name, then the command's arguments.
SIGNAL_AT_IMPORT = """
import importlib.abc, os, signal, sys

module, number, arguments = sys.argv[1], getattr(signal, sys.argv[2]), sys.argv[3:]
# Ctrl-C as a terminal delivers it: a job a shell started in the background inherits SIGINT ignored, and keeps it so.
signal.signal(signal.SIGINT, signal.default_int_handler)


class SignalAtImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == module:
            os.kill(os.getpid(), number)
        return None


sys.meta_path.insert(0, SignalAtImport())
sys.argv = ["lincorr", *arguments]
from lincorr.__main__ import main

sys.exit(main())
"""


def lincorr_process(arguments: list[str], *, code: str | None = None, **popen) -> subprocess.Popen:
    command = [sys.executable, "-c", code, *arguments] if code else [sys.executable, "-m", "lincorr", *arguments]
    environment = {**os.environ, "PYTHONPATH": SOURCE + os.pathsep + os.environ.get("PYTHONPATH", ""), "HF_HUB_OFFLINE": "1"}
    return subprocess.Popen(command, env=environment, stderr=subprocess.PIPE, text=True, **popen)


@pytest.mark.parametrize("name, status", [("SIGINT", 130), ("SIGTERM", 143)])
@pytest.mark.parametrize("moment, command", [("lincorr.cli", ["templates"]), ("torch", ["fit", "--help"]),
                                             ("lincorr.knowledge.report", ["templates"])])
def test_a_signal_at_any_moment_ends_in_one_line(name, status, moment, command):
    process = lincorr_process([moment, name, *command], code=SIGNAL_AT_IMPORT, stdout=subprocess.PIPE)
    out, err = process.communicate(timeout=300)
    assert process.returncode == status, err
    assert err.splitlines() == ["lincorr: interrupted; run the same command again to resume from the cache"], err
    assert out == "", "interrupted before the table was printed"


def closed_pipe_run(arguments: list[str]) -> tuple[int, str]:
    """The status and stderr of `lincorr ARGUMENTS` writing into a pipe nobody reads any more."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # as `| head -1` does once it has its line, here before the first byte
    try:
        process = lincorr_process(arguments, stdout=write_end)
    finally:
        os.close(write_end)
    _, err = process.communicate(timeout=300)
    return process.returncode, err


@pytest.mark.parametrize("arguments", [["templates"], ["templates", "--json"]])
def test_a_reader_that_went_away_ends_the_command_quietly(arguments):
    assert closed_pipe_run(arguments) == (128 + signal.SIGPIPE, "")


def test_help_into_a_closed_pipe_is_quiet():
    status, err = closed_pipe_run(["--help"])
    assert err == "" and status in (0, 128 + signal.SIGPIPE), "argparse itself drops a failed write of the help"
