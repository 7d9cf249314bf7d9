"""The report's sections of the training studies (Peng et al. §4-6): Tables 4-7 and 18, Fig. 5, edit predictions, embedding widths."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

from lincorr.report import figures
from lincorr.report.files import ANY, NUMBER, REAL, SCALAR, TEXT, Entries, Items, Maybe, read_document
from lincorr.report.page import Block, Column, Figure, KeyNumbers, Section, Table
from lincorr.report.sections import SKIPPED, number, plotted, plus_minus, read_provenance, shown, skipped_note

GRADCORR = {
    "rows": Items({"relation": SCALAR, "model": ANY, "n_step_facts": SCALAR, "paper_logit_r": Maybe(NUMBER), "paper_gradient_r": Maybe(NUMBER),
                   **{key: NUMBER for key in ("logit_r", "gradient_r", "control_r", "seconds")}}),
    "skipped": Items(SKIPPED),
}


def read_gradcorr(directory: Path) -> Section:
    """`lincorr gradcorr --out`: Table 4 with the paper's numbers."""
    table = read_document(directory / "gradcorr.json", GRADCORR)
    rows = table["rows"]
    paper = next((row["paper_model"] for row in rows if "paper_model" in row), "")
    columns = (Column("relation", ""), Column("logit r"), Column("gradient r"), Column("control r (shuffled W)"),
               Column(f"paper ({paper}) logit r", ".2f"), Column(f"paper ({paper}) gradient r", ".2f"), Column("step facts"), Column("seconds", ".1f"))
    figure = figures.grouped_bar_figure([row["relation"] for row in rows], {
        "logit r": [plotted(row["logit_r"]) for row in rows], "gradient r": [plotted(row["gradient_r"]) for row in rows],
        "control r (shuffled W)": [plotted(row["control_r"]) for row in rows],
        f"paper ({paper}) gradient r": [plotted(row.get("paper_gradient_r")) for row in rows]},
        "Table 4: gradient correlation beside its control and the paper", y_name="r", y_range=(-1, 1))
    blocks: list[Block] = [Figure(figure), Table("Table 4: does one step on source facts move target logits as W predicts?", columns, tuple(
        (row["relation"], number(row["logit_r"]), number(row["gradient_r"]), number(row["control_r"]), number(row.get("paper_logit_r")),
         number(row.get("paper_gradient_r")), row["n_step_facts"], number(row["seconds"])) for row in rows))]
    if table["skipped"]:
        blocks.append(skipped_note(table["skipped"]))
    model = rows[0]["model"] if rows else None
    return Section(f"gradient correlation (Table 4) on {model}", "gradcorr", str(directory), read_provenance(directory, table, model=model),
                   tuple(blocks))


TABLE5_NUMBERS = ("generalization_rate", "generalization_rate_std", "rate_before", "random_baseline", "source_learned_rate",
                  "calibrated_prediction_accuracy", "calibrated_prediction_success_auc", "paper_generalization_rate", "paper_random_baseline")
TABLE5 = Items({"relation": SCALAR, **{key: Maybe(NUMBER) for key in TABLE5_NUMBERS}})


def read_table5(directory: Path) -> Section:
    """`lincorr generalize --table5 --out`: Table 5 with the paper's column; skipped relations say why."""
    rows = read_document(directory / "table5.json", TABLE5)
    paper = next((row["paper_model"] for row in rows if "paper_model" in row), "")
    columns = (Column("relation", ""), Column("generalization", ".1%"), Column("± std", ".1%"), Column("before", ".1%"),
               Column("random", ".1%"), Column("source learned", ".1%"), Column("calibrated predictor acc.", ".0%"),
               Column("calibrated predictor AUC", ".2f"), Column(f"paper ({paper})", ".2%"), Column("paper random", ".2%"), Column("note", ""))
    table = Table("Table 5: generalization after teaching source facts", columns, tuple(
        (row["relation"], *(number(row.get(key)) for key in TABLE5_NUMBERS),
         f"skipped: {row['skipped']}" if "skipped" in row else "")
        for row in rows))
    figure = figures.grouped_bar_figure([row["relation"] for row in rows], {
        name: [plotted(row.get(key)) for row in rows] for name, key in (
            ("generalization", "generalization_rate"), ("before training", "rate_before"), ("random", "random_baseline"),
            (f"paper ({paper})", "paper_generalization_rate"))}, "Table 5: generalization rate per relation", y_name="rate",
        y_range=(0, 1.02))
    model = next((row["model"] for row in rows if "model" in row), None)
    return Section(f"generalization (Table 5) on {model}", "generalize-table5", str(directory), read_provenance(directory, {}, model=model),
                   (Figure(figure), table))


GENERALIZATION = {
    **{key: ANY for key in ("relation", "model", "n_facts", "seeds", "epochs_run_per_seed", "estimator", "n_inputs")},
    **{key: NUMBER for key in ("generalization_rate", "generalization_rate_std", "rate_before", "random_baseline", "source_learned_rate",
                               "prediction_accuracy", "prediction_success_auc", "calibrated_prediction_accuracy",
                               "calibrated_prediction_success_auc", "labelwise_r_mean")},
    "categories": Entries(ANY), "weight_curve": Maybe(Items({"w_ref_low": NUMBER, "w_ref_high": NUMBER, "generalization_rate": NUMBER, "n": ANY})),
}
FACTS = Items({
    "learned": ANY, "generalized": NUMBER, "references": Items(TEXT),
    **{key: SCALAR for key in ("entity", "source_answer", "generated", "category", "seed")},
    **{key: NUMBER for key in ("w_ref", "w_gen", "w_max", "bias_ref", "bias_gen")},
})


def generalization_blocks(directory: Path, result: Mapping) -> list:
    """The headline rates, Fig. 5 and Table 6 of one generalization study."""
    facts = read_document(directory / "facts.json", FACTS)
    learned = [fact for fact in facts if fact["learned"]]
    numbers = KeyNumbers((
        ("facts", f"{result['n_facts']} per seed x seeds {result['seeds']}; epochs run {result['epochs_run_per_seed']}"),
        ("generalization rate", plus_minus(result["generalization_rate"], result["generalization_rate_std"], ".1%")),
        ("before training", shown(result["rate_before"], ".1%")), ("random baseline", shown(result["random_baseline"], ".1%")),
        ("source learned", shown(result["source_learned_rate"], ".1%")),
        ("edit predictor", f"accuracy {shown(result['prediction_accuracy'], '.0%')}, AUC {shown(result['prediction_success_auc'], '.2f')}; "
                           f"calibrated {shown(result['calibrated_prediction_accuracy'], '.0%')}, "
                           f"AUC {shown(result['calibrated_prediction_success_auc'], '.2f')}"),
        ("categories", ", ".join(f"{name} {count}" for name, count in result["categories"].items())),
        ("label-wise r of W", f"{shown(result['labelwise_r_mean'])} ({result['estimator']}, {result['n_inputs']} inputs)"),
    ))
    outcome = figures.outcome_figure([plotted(f["w_ref"]) for f in learned], [plotted(f["generalized"]) for f in learned],
                                     [f"{f['entity']}: {f['source_answer']} -> {f['generated']} ({f['category']})" for f in learned],
                                     [{**c, "w_ref_low": plotted(c["w_ref_low"]), "w_ref_high": plotted(c["w_ref_high"])}
                                      for c in result.get("weight_curve", [])],
                                     f"Fig. 5: outcome against W[s, reference] ({result['relation']})")
    columns = (Column("entity", ""), Column("source", ""), Column("reference", ""), Column("generated", ""), Column("W[s,ref]", ".3f"),
               Column("W[s,gen]", ".3f"), Column("max W[s,:]", ".3f"), Column("b[ref]", ".2f"), Column("b[gen]", ".2f"), Column("case", ""),
               Column("seed", ""))
    table = Table("Table 6: every edited fact", columns, tuple(
        (f["entity"], f["source_answer"], "/".join(f["references"]), f["generated"], number(f["w_ref"]), number(f["w_gen"]),
         number(f["w_max"]), number(f["bias_ref"]), number(f["bias_gen"]), f["category"], f["seed"]) for f in facts))
    return [numbers, Figure(outcome, "Learned facts only; 1 = the target answer after training is a reference answer."), table]


def read_generalization(directory: Path) -> Section:
    """`lincorr generalize --out` / `lincorr diagnose --out`: the rates, Fig. 5 and Table 6."""
    result = read_document(directory / "result.json", GENERALIZATION)
    return Section(f"generalization: {result['relation']} on {result['model']}", "generalize", str(directory),
                   read_provenance(directory, result), tuple(generalization_blocks(directory, result)))


SUBWORDS = {"relation": ANY, "model": ANY, "rows": Items({
    **{key: SCALAR for key in ("category", "n_target_words", "n_subjects", "n_facts")},
    **{key: NUMBER for key in ("labelwise_r", "hit_at_5", "generalization_rate", "rate_before")},
})}


def read_subwords(directory: Path) -> Section:
    """`lincorr subwords --out`: Table 18, then the generalization study it ran."""
    study = read_document(directory / "subwords.json", SUBWORDS)
    columns = (Column("category", ""), Column("target words"), Column("label-wise r"), Column("Hit@Top-5", ".2f"), Column("subjects"),
               Column("generalization", ".1%"), Column("facts"), Column("before", ".1%"))
    blocks: list[Block] = [Table("Table 18: by the token category of the target answer", columns, tuple(
        (r["category"], r["n_target_words"], number(r["labelwise_r"]), number(r["hit_at_5"]), r["n_subjects"], number(r["generalization_rate"]),
         r["n_facts"], number(r["rate_before"])) for r in study["rows"]))]
    nested = directory / "generalization"
    if (nested / "facts.json").exists():
        blocks += generalization_blocks(nested, read_document(nested / "result.json", GENERALIZATION))
    return Section(f"subwords: {study['relation']} on {study['model']}", "subwords", str(directory), read_provenance(directory, study),
                   tuple(blocks))


PREDICTION = {
    **{key: ANY for key in ("model", "source", "subject", "source_answer", "predicted_target", "runner_up", "current_target",
                            "predicts_reference")},
    **{key: NUMBER for key in ("confidence", "margin", "success_probability", "labelwise_r_mean")}, "references": Items(TEXT),
}


def read_prediction(directory: Path) -> Section:
    """`lincorr predict-edit --out`: the predicted target answer and how sure W is."""
    p = read_document(directory / "prediction.json", PREDICTION)
    numbers = KeyNumbers((
        ("edit", f"{p['source']}({p['subject']}) = {p['source_answer']}"),
        ("predicted target", f"{p['predicted_target']} (confidence {shown(p['confidence'], '.2f')}; runner-up {p['runner_up']}, margin {shown(p['margin'], '.2f')})"),
        ("current target", p["current_target"]),
        ("references", ", ".join(p["references"]) or "none in the registry"),
        ("predicts a reference", "yes" if p["predicts_reference"] else "no"),
        ("success probability", shown(p["success_probability"], ".2f")),
        ("label-wise r of W", shown(p["labelwise_r_mean"])),
    ))
    figure = figures.bar_figure(["confidence in the predicted target", "probability of a reference answer"],
                                [plotted(p["confidence"]), plotted(p["success_probability"])],
                                f"what W predicts for {p['subject']} after the edit", value_name="probability", limits=(0, 1))
    return Section(f"predict-edit: {p['source']}({p['subject']}) = {p['source_answer']} on {p['model']}", "predict-edit", str(directory),
                   read_provenance(directory, p), (numbers, Figure(figure)))


TABLE7 = Items({
    "relation": SCALAR, "mapping": SCALAR, "paper_model": ANY, "seeds": Items(ANY),
    **{key: NUMBER for key in ("generalization_mean", "generalization_std", "rate_before", "source_learned", "random_baseline", "paper")},
})


def read_table7(directory: Path) -> Section:
    """`lincorr ablate --table7 --out`: the vocabulary ablation beside the paper's Table 7."""
    rows = read_document(directory / "table7.json", TABLE7)
    paper = rows[0]["paper_model"] if rows else ""
    columns = (Column("relation", ""), Column("mapping", ""), Column("generalization %", ".2f"), Column("± std", ".2f"), Column("before %", ".2f"),
               Column("source learned %", ".2f"), Column("random %", ".2f"), Column(f"paper ({paper}) %", ".2f"), Column("seeds", ""))
    table = Table("Table 7: the vocabulary ablation", columns, tuple(
        (r["relation"], r["mapping"], number(r["generalization_mean"]), number(r["generalization_std"]), number(r["rate_before"]),
         number(r["source_learned"]), number(r["random_baseline"]), number(r["paper"]), ", ".join(map(str, r["seeds"]))) for r in rows))
    figure = figures.grouped_bar_figure([f"{r['relation']} ({r['mapping']})" for r in rows], {
        "ours": [plotted(r["generalization_mean"]) for r in rows], f"paper ({paper})": [plotted(r["paper"]) for r in rows],
        "random": [plotted(r["random_baseline"]) for r in rows]}, "Table 7: generalization after the vocabulary ablation",
        y_name="generalization %")
    provenance = read_provenance(directory, {})
    model = (provenance.settings or {}).get("vocabulary")  # the ablation names its model only as the vocabulary it used
    return Section(f"vocabulary ablation (Table 7){f' on {model}' if model else ''}", "ablate-table7", str(directory),
                   dataclasses.replace(provenance, model=model), (Figure(figure), table))


WIDTHS = Items({"relation": SCALAR, "embedding_width": REAL, "mapping": TEXT, "seeds": Items(ANY),
                **{key: NUMBER for key in ("explained_variance", "generalization_mean", "generalization_std", "rate_before", "source_learned",
                                           "stage1_target_accuracy", "random_baseline")}})


def read_widths(directory: Path) -> Section:
    """`lincorr ablate --embedding-width --out`: generalization against the vocabulary's width for each mapping, and every row."""
    rows = read_document(directory / "widths.json", WIDTHS)
    widths = sorted({row["embedding_width"] for row in rows})
    found = {(row["embedding_width"], row["mapping"]): row["generalization_mean"] for row in rows}
    series = {mapping: [plotted(found.get((width, mapping))) for width in widths] for mapping in dict.fromkeys(row["mapping"] for row in rows)}
    columns = (Column("width", ""), Column("variance kept", ".1%"), Column("mapping", ""), Column("generalization %", ".2f"),
               Column("± std", ".2f"), Column("before %", ".2f"), Column("stage-1 target fit %", ".0f"), Column("random %", ".2f"))
    table = Table("every width and mapping (mean over seeds)", columns, tuple(
        (row["embedding_width"], number(row["explained_variance"]), row["mapping"], number(row["generalization_mean"]),
         number(row["generalization_std"]), number(row["rate_before"]), number(row["stage1_target_accuracy"]), number(row["random_baseline"]))
        for row in rows))
    relation = rows[0]["relation"] if rows else ""
    figure = figures.line_figure(widths, series, f"generalization against the embeddings' width ({relation})",
                                 x_name="principal components kept", y_name="generalization %")
    provenance = read_provenance(directory, {})
    model = (provenance.settings or {}).get("vocabulary")
    return Section(f"vocabulary ablation by embedding width{f' on {model}' if model else ''}", "ablate-widths", str(directory),
                   dataclasses.replace(provenance, model=model), (Figure(figure), table))
