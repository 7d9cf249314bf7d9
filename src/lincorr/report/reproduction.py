"""The report's section of `lincorr reproduce --out`: the paper's claim table (paper | ours | test | verdict) and each claim's evidence."""

from __future__ import annotations

import math
from pathlib import Path

from lincorr.report import figures
from lincorr.report.files import ANY, NUMBER, TEXT, Items, Maybe, read_document
from lincorr.report.page import Column, Figure, KeyNumbers, Section, Table
from lincorr.report.sections import number, read_provenance

VERDICTS = ("reproduced", "not reproduced", "not applicable")
REPRODUCTION = {
    "paper": TEXT, "title": Maybe(TEXT), "model": TEXT, "budget": Maybe(TEXT),
    "claims": Items({"id": TEXT, "where": TEXT, "statement": TEXT, "paper": ANY, "ours_text": Maybe((TEXT, type(None))), "test": TEXT,
                     "p_value": NUMBER, "verdict": TEXT, "reason": Maybe((TEXT, type(None)))}),
}


def published(paper) -> str:
    """The paper's numbers of a claim in one cell: the model it used, then each row's label and first value."""
    if not isinstance(paper, dict) or not paper:
        return ""
    rows = [row for row in paper.get("rows", ()) if isinstance(row, dict)]
    shown = [f"{row.get('label', '')} {next((value for key, value in row.items() if key not in ('label', 'source', 'target')), '')}"
             for row in rows[:4]]
    values = paper.get("values") if isinstance(paper.get("values"), dict) else {}
    shown += [f"{key} {value}" for key, value in list(values.items())[:4]]
    return f"{paper.get('model', '')}: " + "; ".join(shown)


def evidence(claims: list[dict]) -> Figure | None:
    """How strongly each measured claim's test speaks: -log10 p per claim, the line at p = 0.05 being the verdict's threshold."""
    measured = [claim for claim in claims if claim["p_value"] is not None and math.isfinite(claim["p_value"])]
    if not measured:
        return None
    strength = [-math.log10(max(claim["p_value"], 1e-300)) for claim in measured]
    figure = figures.bar_figure([f"{claim['id']} ({claim['verdict']})" for claim in measured], strength,
                                "Evidence per claim: -log10 p of its test (p = 0.05 at 1.3)", value_name="-log10 p",
                                limits=(0.0, max(max(strength), -math.log10(0.05)) * 1.05))
    figure.add_hline(y=-math.log10(0.05), line_dash="dot")
    return Figure(figure, "A claim is reproduced when its effect points the paper's way and its bar passes the dotted line.")


def read_reproduction(directory: Path) -> Section:
    """reproduction.json: the counts of each verdict, the claim table, and the evidence of each measured claim."""
    run = read_document(directory / "reproduction.json", REPRODUCTION)
    claims = run["claims"]
    counts = ", ".join(f"{sum(claim['verdict'] == v for claim in claims)} {v}" for v in VERDICTS)
    numbers = KeyNumbers((("paper", run.get("title") or run["paper"]), ("model", run["model"]),
                          ("budget", run.get("budget") or ""), ("verdicts", counts)))
    table = Table(f"the claims of {run['paper']}: the paper's numbers beside ours, each tested", (
        Column("claim", ""), Column("where", ""), Column("paper", ""), Column("ours", ""), Column("test", ""), Column("p", ".3g"),
        Column("verdict", "")), tuple(
        (claim["id"], claim["where"], published(claim["paper"]),
         (claim.get("ours_text") or "") if claim["verdict"] != "not applicable" else (claim.get("reason") or ""),
         claim["test"], number(claim["p_value"]), claim["verdict"]) for claim in claims))
    blocks = (numbers, table, *(figure for figure in (evidence(claims),) if figure))
    return Section(f"reproduction of {run['paper']} on {run['model']}", "reproduce", str(directory),
                   read_provenance(directory, run, model=run["model"]), blocks)
