"""What every section of the report shares: where a run came from (provenance.json) and how its numbers are shown.

A run directory may come from anyone, so every file is read through `files`: each reader declares
the shape of the JSON it reads (the keys it uses and what they hold) beside it, and a file that
cannot be read or has another shape ends in an InputError naming the file and the key, never in
a KeyError halfway through a section.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any
from pathlib import Path

import numpy as np

from lincorr.report.files import ANY, NULL, NUMBER, TEXT, Maybe, read_document
from lincorr.report.page import KeyNumbers, Provenance

KS = ("1", "3", "5")
HITS = {k: NUMBER for k in KS}
SKIPPED = {"reason": ANY}
PROVENANCE = {"study": Maybe((TEXT, NULL)), "command": Maybe(ANY), "model_fingerprint": Maybe(ANY), "lincorr_version": Maybe(ANY),
              "written_at": Maybe(ANY), "settings": Maybe((dict, NULL))}


def recorded_study(directory: Path) -> str | None:
    """The study provenance.json names; None where it names none (a run saved before lincorr recorded it) or is missing."""
    path = directory / "provenance.json"
    return read_document(path, PROVENANCE).get("study") if path.exists() else None


def read_provenance(directory: Path, document, *, model: str | None = None, path: Path | None = None) -> Provenance:
    """provenance.json (or `path`: a committed reproduction's PAPER.provenance.json), falling back on what the result
    JSON itself says (runs saved before provenance.json existed)."""
    path = path or directory / "provenance.json"
    stored = read_document(path, PROVENANCE) if path.exists() else {}
    document = document if isinstance(document, dict) else {}
    return Provenance(
        command=stored.get("command"),
        model=model or document.get("model"),
        model_fingerprint=stored.get("model_fingerprint") or document.get("model_fingerprint"),
        lincorr_version=stored.get("lincorr_version"),
        settings=stored.get("settings") or document.get("config"),
        written_at=stored.get("written_at"),
    )


def undefined(value) -> bool:
    """Results write an undefined number (NaN) as null."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def shown(value, number_format: str = ".3f") -> str:
    return "undefined" if undefined(value) else format(value, number_format)


def plus_minus(mean, std, number_format: str = ".3f") -> str:
    return f"{shown(mean, number_format)} ± {shown(std, number_format)}"


def number(value) -> float | None:
    """A JSON number as a float for a table cell; None (an empty cell) when undefined."""
    return None if undefined(value) else float(value)


def plotted(value) -> float:
    """A JSON number for a figure: NaN (a gap) when undefined."""
    return np.nan if value is None else value



def skipped_note(skipped: Sequence[Mapping[str, Any]]) -> KeyNumbers:
    return KeyNumbers(tuple((str(s.get("relation") or s.get("prompt")), f"not judged: {s['reason']}") for s in skipped))



def scalar_fields(document: Mapping, prefix: str = "") -> tuple[tuple[str, str], ...]:
    """The numbers and words of a result JSON (not its lists and tables), as labelled text."""
    return tuple((f"{prefix}{key}", shown(value, ".4g") if isinstance(value, float) else str(value)) for key, value in document.items()
                 if isinstance(value, (str, int, float, bool)) or value is None)

