"""The report's sections of the extractive-structures studies (Feng et al.): scores, OCR, freezing, ordering, grafting, and W's predictions."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from lincorr.report import figures
from lincorr.errors import InputError
from lincorr.report.files import ANY, NUMBER, REAL, REMEDY, SCALAR, TEXT, WHAT, Entries, Items, Maybe, number_grid, read_document
from lincorr.report.page import Block, Column, Figure, KeyNumbers, Section, Table
from lincorr.report.sections import number, plotted, read_provenance, shown

SCORE_NAMES = ("informative", "downstream", "upstream")
SCORES = {
    "hop": ANY, "model": ANY, "n_checked": ANY, "layers": Items(SCALAR), "components": Items(TEXT),
    **{name: Items(Items(NUMBER)) for name in SCORE_NAMES},
    **{f"{kind}_mean_rank_{when}": NUMBER for kind in ("fact", "implication") for when in ("before", "after")},
    "linearization_r": Maybe(Entries(NUMBER)),
    "checked": Maybe(Items({"component": SCALAR, **{f"{name}_{kind}": NUMBER for name in SCORE_NAMES for kind in ("linear", "exact")}})),
    "roles": Maybe(Items(TEXT)), "by_role": Maybe(Entries(Items(Items(Items(NUMBER))))),
}


def role_figure(scores: dict, shape: tuple[int, int], path: Path) -> Figure | None:
    """Fig. 3 by token position: each score's grid at each token role, when the run kept scores by role."""
    if not scores.get("by_role"):
        return None
    roles = scores.get("roles") or []
    by_role: dict[str, dict[str, np.ndarray]] = {role: {} for role in roles}
    for name, per_role in scores["by_role"].items():
        if len(per_role) != len(roles):
            raise InputError(f"{WHAT} {path} is not what lincorr writes: by_role.{name} has not one grid per role; {REMEDY}")
        for role, rows in zip(roles, per_role):
            by_role[role][name] = number_grid({name: rows}, name, shape, path)
    heatmaps = figures.role_heatmaps(by_role, scores["layers"], scores["components"],
                                     f"{scores['hop']}-hop extractive scores by token role, {scores['model']}")
    return Figure(heatmaps, "Each row: the scores summed over the positions of one token role; the rows of a score sum to its grid above.")


def read_extractive_scores(directory: Path) -> Section:
    """`scores.json` of the extractive-scores study: the three scores per layer and component, and the linearisation check."""
    path = directory / "scores.json"
    scores = read_document(path, SCORES)
    names = SCORE_NAMES
    r = scores.get("linearization_r", {})
    numbers = KeyNumbers((
        ("implication mean rank", f"{shown(scores['implication_mean_rank_before'], '.2f')} -> {shown(scores['implication_mean_rank_after'], '.2f')}"),
        ("fact mean rank", f"{shown(scores['fact_mean_rank_before'], '.2f')} -> {shown(scores['fact_mean_rank_after'], '.2f')}"),
        ("linearisation r", ", ".join(f"{name} {shown(r.get(name))}" for name in names) + f" over {scores['n_checked']} components"),
        ("reward", scores.get("reward", "")),
    ))
    shape = (len(scores["layers"]), len(scores["components"]))
    heatmaps = figures.score_heatmaps({name: number_grid(scores, name, shape, path) for name in names}, scores["layers"], scores["components"],
                                      f"{scores['hop']}-hop extractive scores, {scores['model']}")
    blocks: list[Block] = [numbers, Figure(heatmaps, "Each score on its own symmetric colour scale; hover a cell for its value.")]
    blocks += [figure for figure in (role_figure(scores, shape, path),) if figure]
    if scores.get("checked"):
        blocks.append(Table("exact (intervention) against linearised scores", (Column("component", ""), *(
            Column(f"{name} {kind}", ".4g") for name in names for kind in ("linear", "exact"))), tuple(
            (c["component"], *(number(c[f"{name}_{kind}"]) for name in names for kind in ("linear", "exact"))) for c in scores["checked"])))
    return Section(f"extractive scores: {scores['hop']}-hop on {scores['model']}", "extractive-scores", str(directory),
                   read_provenance(directory, scores), tuple(blocks))


OCR = {
    "hop": ANY, "model": ANY, "n_facts": ANY, "chance_mean_rank": REAL,
    **{f"{kind}_mean_rank_{when}": NUMBER for kind in ("fact", "implication") for when in ("before", "after")},
    "per_epoch": Items({"epoch": SCALAR, "fact_mean_rank": NUMBER, "implication_mean_rank": NUMBER}),
}


def read_ocr(directory: Path) -> Section:
    """`ocr.json` of the out-of-context reasoning study: fact and implication mean rank after every epoch."""
    ocr = read_document(directory / "ocr.json", OCR)
    epochs = [row["epoch"] for row in ocr["per_epoch"]]
    curves = {"facts": [row["fact_mean_rank"] for row in ocr["per_epoch"]],
              "implications": [row["implication_mean_rank"] for row in ocr["per_epoch"]]}
    figure = figures.line_figure(epochs, curves, f"{ocr['hop']}-hop facts and their implications, {ocr['model']}", x_name="epoch (0 = before training)",
                                 y_name="mean rank", reference_line=(f"chance ({shown(ocr['chance_mean_rank'], '.2f')})", ocr["chance_mean_rank"]))
    numbers = KeyNumbers((("facts", str(ocr["n_facts"])), ("fact mean rank", f"{shown(ocr['fact_mean_rank_before'], '.2f')} -> {shown(ocr['fact_mean_rank_after'], '.2f')}"),
                          ("implication mean rank", f"{shown(ocr['implication_mean_rank_before'], '.2f')} -> {shown(ocr['implication_mean_rank_after'], '.2f')}")))
    return Section(f"out-of-context reasoning: {ocr['hop']}-hop on {ocr['model']}", "extractive-ocr", str(directory),
                   read_provenance(directory, ocr), (numbers, Figure(figure)))



RANKS = {"fact_mean_rank": NUMBER, "implication_mean_rank": NUMBER}
KINDS = (("implications", "implication_mean_rank"), ("facts", "fact_mean_rank"))
FREEZE = {"model": ANY, "n_layers": SCALAR, "split_layer": SCALAR, "split": ANY, "chance_mean_rank": REAL,
          "rows": Items({"setting": TEXT, "hop": TEXT, **RANKS}), "informative_by_layer": Entries(Items(NUMBER)),
          "paper": {"model": ANY, "rows": Items({"setting": TEXT, "hop": TEXT, **RANKS})}}


def read_freeze(directory: Path) -> Section:
    """`lincorr extractive freeze --out`: Table 2's mean ranks per setting and hop, the paper's beside, and the per-block informative mass."""
    result = read_document(directory / "freeze.json", FREEZE)
    settings = list(dict.fromkeys(row["setting"] for row in result["rows"]))
    ours = {(row["setting"], row["hop"]): row for row in result["rows"]}
    paper = {(row["setting"], row["hop"]): row for row in result["paper"]["rows"]}
    hops = list(dict.fromkeys(row["hop"] for row in result["rows"]))
    bars = figures.grouped_bar_figure(settings, {
        f"{hop}-hop {kind}": [plotted(ours[setting, hop][key]) for setting in settings] for hop in hops for kind, key in KINDS},
        f"Table 2: mean ranks after resetting or freezing blocks (split at block {result['split_layer']})", y_name="mean rank",
        reference_line=(f"chance ({shown(result['chance_mean_rank'], '.2f')})", result["chance_mean_rank"]))
    curves = figures.line_figure(list(range(result["n_layers"])), {f"{hop}-hop update": [plotted(v) for v in values]
                                                                 for hop, values in result["informative_by_layer"].items()},
                                 "informative score per block (MLP and heads summed)", x_name="block", y_name="informative score")
    columns = (Column("setting", ""), Column("hop", ""), Column("fact mean rank", ".2f"), Column("implication mean rank", ".2f"),
               Column(f"paper ({result['paper']['model']}) fact", ".2f"), Column("paper implication", ".2f"))
    table = Table("Table 2", columns, tuple(
        (setting, hop, number(row["fact_mean_rank"]), number(row["implication_mean_rank"]),
         number(paper.get((setting, hop), {}).get("fact_mean_rank")), number(paper.get((setting, hop), {}).get("implication_mean_rank")))
        for (setting, hop), row in ours.items()))
    return Section(f"freezing blocks (Table 2) on {result['model']}", "extractive-freeze", str(directory), read_provenance(directory, result),
                   (KeyNumbers((("split", str(result["split"])),)), Figure(bars), Figure(curves), table))


ORDERING = {"model": ANY, "chance_mean_rank": REAL, "orders": Items({
    "order": TEXT, "continued_curve": Items(RANKS), "test_curve": Items(RANKS),
    **{f"{kind}_mean_rank_{when}": NUMBER for kind in ("test_fact", "test_implication") for when in ("before", "after")}})}


def read_ordering(directory: Path) -> Section:
    """`lincorr extractive ordering --out`: Fig. 4, the test implications' mean rank through fine-tuning on test facts, per order."""
    result = read_document(directory / "ordering.json", ORDERING)
    orders = result["orders"]
    chance = (f"chance ({shown(result['chance_mean_rank'], '.2f')})", result["chance_mean_rank"])
    blocks: list[Block] = []
    for stage, key, x_name in (("continued training (training sets)", "continued_curve", "epoch of continued training (all phases)"),
                               ("fine-tuning on test facts (OCR)", "test_curve", "epoch of fine-tuning on test facts")):
        length = max((len(order[key]) for order in orders), default=0)
        series = {f"{order['order']}: {kind}": [plotted(row[rank]) for row in order[key]] + [plotted(None)] * (length - len(order[key]))
                  for order in orders for kind, rank in KINDS}
        blocks.append(Figure(figures.line_figure(list(range(length)), series, f"Fig. 4: {stage}", x_name=x_name, y_name="mean rank",
                                                 reference_line=chance)))
    columns = (Column("order", ""), Column("test facts before", ".2f"), Column("after", ".2f"), Column("test implications before", ".2f"),
               Column("after", ".2f"))
    blocks.append(Table("test sets before and after fine-tuning on the test facts", columns, tuple(
        (order["order"], *(number(order[f"{kind}_mean_rank_{when}"]) for kind in ("test_fact", "test_implication") for when in ("before", "after")))
        for order in orders)))
    return Section(f"data ordering (Fig. 4) on {result['model']}", "extractive-ordering", str(directory), read_provenance(directory, result),
                   tuple(blocks))


GRAFT_RANKS = (("Impl F'", "impl_counterfactual"), ("Impl F", "impl_original"), ("F'", "facts_counterfactual"))
GRAFT = {"model": ANY, "chance_mean_rank": REAL,
         "rows": Items({"weights": TEXT, "facts_original": NUMBER, **{key: NUMBER for _, key in GRAFT_RANKS}}),
         "downstream_informative_r": {key: NUMBER for key in ("mlp", "head", "p_mlp", "p_head")},
         "paper": {"model": ANY, "rows": Items({"weights": TEXT, **{key: NUMBER for _, key in GRAFT_RANKS}})}}


def read_graft(directory: Path) -> Section:
    """`lincorr extractive graft --out`: Table 3's mean ranks per weight set (the paper's beside) and Fig. 6's correlations."""
    result = read_document(directory / "graft.json", GRAFT)
    rows, paper = result["rows"], {row["weights"]: row for row in result["paper"]["rows"]}
    figure = figures.grouped_bar_figure([row["weights"] for row in rows], {
        name: [plotted(row[key]) for row in rows] for name, key in GRAFT_RANKS},
        "Table 3: mean ranks per weight set", y_name="mean rank",
        reference_line=(f"chance ({shown(result['chance_mean_rank'], '.2f')})", result["chance_mean_rank"]))
    r = result["downstream_informative_r"]
    numbers = KeyNumbers((("Fig. 6: r(downstream, informative)", f"MLPs {shown(r['mlp'])} (p {shown(r['p_mlp'], '.2g')}), "
                                                                 f"heads {shown(r['head'])} (p {shown(r['p_head'], '.2g')})"),))
    columns = (Column("weights", ""), *(Column(name, ".2f") for name, _ in GRAFT_RANKS), Column("F", ".2f"),
               *(Column(f"paper ({result['paper']['model']}) {name}", ".2f") for name, _ in GRAFT_RANKS))
    table = Table("Table 3", columns, tuple(
        (row["weights"], *(number(row[key]) for _, key in GRAFT_RANKS), number(row["facts_original"]),
         *(number(paper.get(row["weights"], {}).get(key)) for _, key in GRAFT_RANKS)) for row in rows))
    return Section(f"weight grafting (Table 3) on {result['model']}", "extractive-graft", str(directory), read_provenance(directory, result),
                   (numbers, Figure(figure), table))


PREDICTORS = ("w_ref", "w_rank_score", "predicted_success")
PREDICT = {"model": ANY, "n_predicted": SCALAR, "n_right_after": SCALAR, "n_right_before": SCALAR, "labelwise_r_mean": NUMBER,
           "auc": {**{name: NUMBER for name in PREDICTORS}, "random": {"mean": NUMBER, "low": NUMBER, "high": NUMBER}},
           "facts": Items({"name": SCALAR, "city": SCALAR, "language": SCALAR, "w_ref": NUMBER, "implication_rank_after": NUMBER,
                           "right_after": ANY})}


def read_extractive_predict(directory: Path) -> Section:
    """`lincorr extractive predict --out`: each fact's W[city, language] against its implication rank after training, and the AUCs."""
    result = read_document(directory / "ocr_prediction.json", PREDICT)
    facts = [fact for fact in result["facts"] if fact["w_ref"] is not None]
    figure = figures.scatter_figure([fact["w_ref"] for fact in facts], [plotted(fact["implication_rank_after"]) for fact in facts],
                                    [f"{fact['name']}: {fact['city']} -> {fact['language']}" for fact in facts],
                                    "W[city, language] of the untrained model against the implication's rank after training",
                                    x_name="W[city, language]", y_name="implication rank after training",
                                    groups=["right after training" if fact["right_after"] else "wrong after training" for fact in facts])
    auc = result["auc"]
    numbers = KeyNumbers((
        ("implications right", f"{result['n_right_after']} of {result['n_predicted']} after training ({result['n_right_before']} before)"),
        *((f"AUC of {name}", shown(auc[name])) for name in PREDICTORS),
        ("AUC of random scores", f"{shown(auc['random']['mean'])} (95% in {shown(auc['random']['low'])}..{shown(auc['random']['high'])})"),
        ("label-wise r of W", shown(result["labelwise_r_mean"])),
    ))
    return Section(f"W as a predictor of OCR on {result['model']}", "extractive-predict", str(directory), read_provenance(directory, result),
                   (numbers, Figure(figure)))
