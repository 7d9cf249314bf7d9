"""How the tests read a mistake at the command line: the error objects the CLI reported, and its one stderr line."""

from __future__ import annotations

import lincorr.cli as cli


def spy_on_errors(monkeypatch) -> list:
    """The errors the CLI reports from now on, as objects: their class is the stable kind of the mistake."""
    reported = []
    real = cli.report_error
    monkeypatch.setattr(cli, "report_error", lambda error, **where: reported.append(error) or real(error, **where))
    return reported


def one_error_line(capsys) -> str:
    """stderr's one `lincorr: error:` line (no traceback, nothing on stdout)."""
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lincorr: error: ") and "Traceback" not in captured.err, captured.err
    assert captured.out == ""
    return lines[0]
