"""The report's section of `lincorr reproduce --out`: the paper's claim table (paper | ours | test | verdict) and each claim's evidence."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any
from pathlib import Path

from lincorr.report import figures
from lincorr.report.page import Block, Column, Figure, KeyNumbers, Section, Table, provenance_beside
from lincorr.report.sections import number, read_provenance
from lincorr.report.effects import effect_text, sensitivity_text, tests_text
from lincorr.reproduction_file import RESULT_FILE, VERDICTS, read_reproduction_file



def published_cell(paper: object, shown_rows: int = 4) -> str:
    """A claim's published numbers (`Claim.paper_numbers()`, or as read back from a file) in one table cell: the model,
    then each row's label and first number (a list as "a/b/c"), then the paper's single values; "…" when rows are left out.

    The report's claim table and the generated docs (docs/reproductions.py) print this, so one claim reads the same in both. The input may come from
    someone else's reproduction.json, so anything not of the expected shape is skipped, never trusted.
    """
    if not isinstance(paper, Mapping) or not paper:
        return ""
    rows = [row for row in listed(paper.get("rows")) if isinstance(row, Mapping)]
    shown = []
    for row in rows[:shown_rows]:
        numbers = [value for key, value in row.items() if key not in ("label", "source", "target")]
        if numbers:
            shown.append(f"{row.get('label', '')} {_short(numbers[0])}")
    values = paper["values"] if isinstance(paper.get("values"), Mapping) else {}
    shown += [f"{key} {_short(value)}" for key, value in list(values.items())[:shown_rows]]
    more = " …" if len(rows) > shown_rows else ""
    return f"{paper.get('model', '')}: " + "; ".join(shown) + more


def listed(value: object) -> list:
    """`value` where it is a list; an empty one for anything else (rows that are a number, an object, text)."""
    return value if isinstance(value, list) else []


def _short(value: object) -> str:
    if isinstance(value, list):
        return "/".join(_short(v) for v in value[:5])
    if isinstance(value, Mapping):
        return ", ".join(f"{key} {_short(v)}" for key, v in value.items())
    return f"{value:g}" if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)


def evidence(claims: list[dict]) -> Figure | None:
    """How strongly each measured claim's test speaks: -log10 p per claim, the line at p = 0.05 being the verdict's threshold."""
    # A p outside [0, 1] is no p-value, whoever wrote it: it is left out, not drawn as evidence.
    measured = [claim for claim in claims if (p := number(claim["p_value"])) is not None and 0 <= p <= 1]
    if not measured:
        return None
    strength = [-math.log10(max(claim["p_value"], 1e-300)) for claim in measured]
    figure = figures.bar_figure([f"{claim['id']} ({claim['verdict']})" for claim in measured], strength,
                                "Evidence per claim: -log10 p of its test (p = 0.05 at 1.3)", value_name="-log10 p",
                                limits=(0.0, max(max(strength), -math.log10(0.05)) * 1.05))
    figure.add_hline(y=-math.log10(0.05), line_dash="dot")
    return Figure(figure, "A claim is reproduced when its effect points the paper's way and its bar passes the dotted line.")


def _numbers(value: object, path: tuple[str, ...] = ()):
    """(path, number) for every number in a claim's `ours`, a list standing for its first entry (Hit@1 of Hit@1/3/5)."""
    if isinstance(value, Mapping):
        for key, inner in value.items():
            yield from _numbers(inner, (*path, str(key)))
    elif isinstance(value, list) and value and not isinstance(value[0], (list, Mapping)):
        yield from _numbers(value[0], path)
    elif isinstance(value, (int, float)) and not isinstance(value, bool) and path:
        yield path, float(value)


def paper_beside_ours(claim: Mapping, budget: str = "") -> Figure | None:
    """The paper's row numbers and ours as grouped bars, row by row and number by number.

    Ours for a paper row "L" and number "k" is every number of the claim's measurement whose path names L and ends in
    k (`relations/L/ols/k`), one series per path (the paper's estimator and lincorr's, say); a row or number the
    measurement does not name is left out, and a claim with none gets no figure.
    """
    paper: Any = claim.get("paper")  # someone else's JSON: checked where read
    rows = [row for row in listed(paper.get("rows")) if isinstance(row, Mapping)] if isinstance(paper, Mapping) else []
    measured = list(_numbers(claim.get("ours")))
    bars: dict[str, dict[str, float]] = {}  # "L k" -> series name -> value
    for row in rows:
        label = str(row.get("label", ""))
        # A row's number is its value or a list's first entry; a value that is an object is no number of the row.
        for (key, *inner), published in _numbers({k: v for k, v in row.items() if k not in ("label", "source", "target")}):
            if inner:
                continue
            ours = {f"ours {'/'.join(p for p in path if p not in (label, key))}".strip(): value
                    for path, value in measured if path[-1] == key and label in path}
            if ours:
                bars[f"{label} {key}"] = {"paper": published, **ours}
    if not bars:
        return None
    names = list(dict.fromkeys(name for values in bars.values() for name in values))
    series = {name: [values.get(name) for values in bars.values()] for name in names}
    title = f"{claim.get('where', '')}: the paper ({paper.get('model', '')}) beside ours"
    return Figure(figures.grouped_bar_figure(list(bars), series, title, y_name="value"),
                  f"Each published number beside the one this run measured for the same row, on this run's model at its budget "
                  f"({budget or 'unrecorded'}; the paper's model and N are the paper's); a series named after a setting "
                  "(ols, ridge-std, a training preset) was measured with it; a list is shown by its first entry.")


def read_reproduction(directory: Path, file: Path | None = None) -> Section:
    """reproduction.json (or `file`, a reproduction kept on its own as docs/reproductions/MODEL/PAPER.json keeps it, its
    provenance beside it as PAPER.provenance.json): the counts of each verdict, the claim table, and the evidence of each
    measured claim."""
    run = read_reproduction_file(file or directory / RESULT_FILE)
    claims = run["claims"]
    counts = ", ".join(f"{n} {v}" for v in VERDICTS if (n := sum(claim['verdict'] == v for claim in claims)))
    numbers = KeyNumbers((("paper", run.get("title") or run["paper"]), ("model", run["model"]),
                          ("budget", run.get("budget") or ""), ("verdicts", counts)))
    # The verdict first, then what it reads off; the claims no step measured folded below the measured ones.
    ordered = sorted(claims, key=lambda claim: claim["verdict"] == "not applicable")
    table = Table(f"the claims of {run['paper']}, each decided by two one-sided tests: the effect above 0, and below Δ", (
        Column("claim", ""), Column("verdict", ""), Column("effect [interval] vs Δ", ""), Column("tests", ""),
        Column("at Δ/2, 2Δ", ""), Column("Δ's source", ""), Column("paper", ""), Column("ours", ""), Column("where", "")), tuple(
        (claim["id"], claim["verdict"], effect_text(claim.get("decision")), tests_text(claim.get("decision")),
         sensitivity_text(claim.get("decision")), claim.get("interest_reason") or "", published_cell(claim["paper"]),
         (claim.get("ours_text") or "") if claim["verdict"] != "not applicable" else (claim.get("reason") or ""), claim["where"])
        for claim in ordered))
    beside = (paper_beside_ours(claim, run.get("budget") or "") for claim in claims if claim["verdict"] != "not applicable")
    blocks: tuple[Block, ...] = (numbers, table, *(figure for figure in (evidence(claims), *beside) if figure))
    # A reproduction kept on its own reads its own provenance only: a provenance.json beside it is another run's.
    return Section(f"reproduction of {run['paper']} on {run['model']}", "reproduce", str(file or directory),
                   read_provenance(directory, run, model=run["model"], path=provenance_beside(file) if file is not None else None),
                   blocks)
