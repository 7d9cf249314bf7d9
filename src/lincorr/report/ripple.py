"""`lincorr ripple --out`: the predictors' table per set of queries, their ROC curves, and W against what moved."""

from __future__ import annotations

from pathlib import Path

from lincorr.report import figures
from lincorr.report.files import ANY, NULL, NUMBER, TEXT, Entries, Items, Maybe, read_document
from lincorr.report.page import Block, Column, Figure, KeyNumbers, Section, Table
from lincorr.report.sections import number, read_provenance, shown

INTERVAL = [NUMBER, NUMBER]
SUBSET = {
    "rows": TEXT, "n_queries": int,
    **{key: Maybe(int) for key in ("n_edits", "n_asked", "n_entered_top_k")},
    "predictors": Maybe(Items({"predictor": TEXT, "auc": NUMBER, "auc_ci95": INTERVAL, "spearman": NUMBER, "spearman_ci95": INTERVAL})),
    "claims": Maybe(Items({"claim": TEXT, "decision": {"verdict": TEXT, "effect": NUMBER, "interval": (INTERVAL, NULL)}})),
    "roc": Maybe(Entries({"fpr": Items(NUMBER), "tpr": Items(NUMBER)})),
    "w_and_change": Maybe({"w": Items(NUMBER), "change": Items(NUMBER)}),
}
RIPPLE = {"model": TEXT, "n_edits": int, "n_edits_scored": int, "n_queries_scored": int, "skipped": Entries(int),
          "gradient_parameters": TEXT, "seconds_per_edit": Entries(NUMBER), "settings": ANY,
          "benchmark": {"subsets": Entries(SUBSET)}}


def interval_text(value, bounds) -> str:
    low, high = bounds or (None, None)
    return f"{shown(value, '.2f')} [{shown(low, '.2f')}, {shown(high, '.2f')}]"


def subset_blocks(subset: dict) -> list[Block]:
    """One set of queries: the predictor table, the claims' verdicts, the ROC curves and W against the change."""
    if not subset["n_queries"]:
        return [KeyNumbers(((subset["rows"], "no query"),))]
    rows = tuple((row["predictor"], number(row["auc"]), interval_text(row["auc"], row["auc_ci95"]), number(row["spearman"]),
                  interval_text(row["spearman"], row["spearman_ci95"])) for row in subset.get("predictors", ()))
    blocks: list[Block] = [
        Table(f"{subset['rows']}: {subset['n_queries']} queries, {subset.get('n_edits', 0)} edits",
              (Column("predictor"), Column("AUC (enters top-k)", ".2f"), Column("AUC [95%, edits resampled]"),
               Column("Spearman with Δ log p", ".2f"), Column("Spearman [95%]")), rows),
        KeyNumbers(tuple((claim["claim"], f"{claim['decision']['verdict']}: AUC difference "
                          f"{interval_text(claim['decision']['effect'], claim['decision'].get('interval'))}")
                         for claim in subset.get("claims", ()))),
    ]
    curves = subset.get("roc") or {}
    if curves:
        figure = figures.line_figure([], {}, f"ROC: the implied answer enters the top k ({subset['rows']})",
                                     x_name="false positive rate", y_name="true positive rate", y_range=(0, 1))
        for name, curve in curves.items():
            figure.add_scatter(x=curve["fpr"], y=curve["tpr"], mode="lines", name=name)
        figure.add_scatter(x=[0, 1], y=[0, 1], mode="lines", name="chance", line={"dash": "dash", "color": "grey"})
        blocks.append(Figure(figure))
    points = subset.get("w_and_change")
    if points and points["w"]:
        blocks.append(Figure(figures.scatter_figure(points["w"], points["change"], [""] * len(points["w"]),
                                                    f"W[new object, implied answer] against the change ({subset['rows']})",
                                                    x_name="W (ols, the paper's)", y_name="Δ log p of the implied answer")))
    return blocks


def read_ripple(directory: Path) -> Section:
    """`lincorr ripple --out`: what was scored and left out, then each set of queries' table, verdicts and figures."""
    run = read_document(directory / "ripple.json", RIPPLE)
    costs = ", ".join(f"{name} {shown(seconds, '.2f')}" for name, seconds in run["seconds_per_edit"].items())
    numbers = KeyNumbers((
        ("scored", f"{run['n_queries_scored']} queries of {run['n_edits_scored']} edits ({run['n_edits']} read)"),
        ("left out", "; ".join(f"{count} {reason}" for reason, count in run["skipped"].items()) or "none"),
        ("GradSim over", run["gradient_parameters"]),
        ("seconds per edit", costs),
    ))
    blocks: list[Block] = [numbers]
    for subset in run["benchmark"]["subsets"].values():
        blocks += subset_blocks(subset)
    return Section(f"ripple effects on {run['model']}", "ripple", str(directory), read_provenance(directory, run, model=run["model"]),
                   tuple(blocks))
