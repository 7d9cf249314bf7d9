"""Reading run directories: which study wrote a directory (known by the files it writes) and what of it to show.

Each reader turns the files of one study's `save` into a `Section`; none imports the study, so a
report can be made from any saved directory, also one written by an older lincorr. Where a run
came from is read from its provenance.json (every study's `save` writes one); for directories
saved before that file existed, the model fingerprint and settings come from the result JSON
where it has them.

A logit-lens result (`lincorr lens`'s lens.json) is recognised by its content rather than its
file name: a JSON object with `layers` (the lens layers) and per-layer curves as long, named
`*_rr`, `*_top1`, `*_rank` or `*_accuracy`.
Any other directory lincorr wrote (it holds lincorr's output marker or a provenance.json) gets a
plain section: the scalar fields of its JSON files and its PNGs, inlined.

A run directory may come from anyone, so every file is read through `files`: each reader declares
the shape of the JSON it reads (the keys it uses and what they hold) beside it, and a file that
cannot be read or has another shape ends in an InputError naming the file and the key, never in
a KeyError halfway through a section. Only a directory that shows it is lincorr's (a file a reader
knows, the output marker, a provenance.json) has its other JSON files read at all.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from lincorr.errors import InputError
from lincorr.filesystem import OUTPUT_MARKER
from lincorr.reading import read_json
from lincorr.report import figures
from lincorr.report.files import (ANY, NULL, NUMBER, REAL, REMEDY, SCALAR, TEXT, WHAT, Entries, Items, Maybe, checked, grid,
                                  number_grid, read_array, read_document, read_picture)
from lincorr.report.page import Column, Figure, KeyNumbers, Picture, Provenance, Section, Table

LENS_CURVE_SUFFIXES = ("_rr", "_top1", "_rank", "_accuracy")
KS = ("1", "3", "5")
HITS = {k: NUMBER for k in KS}
SKIPPED = {"reason": ANY}
PROVENANCE = {"command": Maybe(ANY), "model_fingerprint": Maybe(ANY), "lincorr_version": Maybe(ANY), "written_at": Maybe(ANY),
              "settings": Maybe((dict, NULL))}


def read_provenance(directory: Path, document, *, model: str | None = None) -> Provenance:
    """provenance.json, falling back on what the result JSON itself says (runs saved before provenance.json existed)."""
    path = directory / "provenance.json"
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


# ---- the logit path ----

PAIR = {
    **{key: ANY for key in ("source", "target", "model", "n_source_domain", "n_target_domain", "n_inputs", "n_train", "n_test")},
    "source_domain": {"words": Items(TEXT)}, "target_domain": {"words": Items(TEXT)}, "reference_pairs": Maybe(Entries(Items(TEXT))),
    "estimator": TEXT, "alpha": Maybe(NUMBER), "labelwise_r_ci95": [NUMBER, NUMBER], "labelwise_r": Entries(NUMBER),
    **{key: NUMBER for key in ("labelwise_r_mean", "labelwise_r_std", "instancewise_r_mean", "control_labelwise_r_mean")},
}


def read_pair(directory: Path) -> Section:
    """`lincorr fit --save-dir` / `lincorr demo`: W as an interactive heatmap, and each target word's label-wise r."""
    path = directory / "result.json"
    result = read_document(path, PAIR)
    coef = read_array(directory / "W.npy")
    sources, targets = result["source_domain"]["words"], result["target_domain"]["words"]
    if not sources or not targets:
        raise InputError(f"{WHAT} {path} is not what lincorr writes: it lists no source or no target words; {REMEDY}")
    if coef.shape != (len(sources), len(targets)):
        raise InputError(f"{directory}: W.npy is {' x '.join(map(str, coef.shape))} but result.json lists {len(sources)} source and "
                         f"{len(targets)} target words; the directory mixes two runs: rerun the command that wrote it")
    rows, columns = {w: i for i, w in enumerate(sources)}, {w: j for j, w in enumerate(targets)}
    # A reference pair counts where both words are in the domains; a source whose right targets are all outside has none.
    reference = {rows[s]: right for s, objects in result.get("reference_pairs", {}).items()
                 if s in rows and (right := [columns[t] for t in objects if t in columns])}
    low, high = result["labelwise_r_ci95"]
    numbers = KeyNumbers((
        ("source -> target", f"{result['source']} ({result['n_source_domain']} words) -> {result['target']} ({result['n_target_domain']} words)"),
        ("templates", f"“{result.get('source_template', '')}” -> “{result.get('target_template', '')}”"),
        ("inputs", f"{result['n_inputs']} ({result['n_train']} train / {result['n_test']} test), {result.get('kind', '')}"),
        ("estimator", result["estimator"] + (f" (alpha {shown(result.get('alpha'), '.4g')})" if result["estimator"] == "ridge" else "")),
        ("label-wise r", f"{plus_minus(result['labelwise_r_mean'], result['labelwise_r_std'])}   95% CI [{shown(low)}, {shown(high)}]"
                         f" ({result.get('labelwise_r_ci95_method', 'test inputs resampled, W fixed')})"
                         + (f"; {result['n_constant_targets']} constant target words left out" if result.get("n_constant_targets") else "")),
        ("instance-wise r", shown(result["instancewise_r_mean"])),
        ("control r", f"{shown(result['control_labelwise_r_mean'])} (W fitted on shuffled pairs)"),
        ("reference pairs", f"{len(reference)} source words with a right target in the domain" if reference else "none (rows ordered by their own top target)"),
    ))
    title = f"W for {result['source']} -> {result['target']} on {result['model']}"
    labelwise = result["labelwise_r"]
    return Section(f"fit: {result['source']} -> {result['target']} on {result['model']}", "fit", str(directory),
                   read_provenance(directory, result), (
        numbers,
        Figure(figures.weight_figure(coef, sources, targets, reference, title),
               "Colour: W minus its row mean, clipped at the 99.5th percentile as in W.png; hover shows W itself. Outlined cells are reference pairs."),
        Figure(figures.bar_figure(list(labelwise), [plotted(v) for v in labelwise.values()],
                                  "label-wise r of each target word (held-out inputs)", value_name="label-wise r")),
    ))


def matrix_hover(cells, metrics: Mapping[str, np.ndarray], templates: Mapping[str, str]) -> list[list[str]]:
    """Per cell: both prompts with their templates and every metric, one a line."""
    def prompt(name: str) -> str:
        return f"{name}: “{templates[name]}”" if name in templates else name

    return [[
        "\n".join([f"source: {prompt(cell[0])}", f"target: {prompt(cell[1])}",
                   *(f"{label}: {shown(values[i, j])}" for label, values in metrics.items())]) if cell else ""
        for j, cell in enumerate(row)] for i, row in enumerate(cells)]


MATRIX_METRICS = (  # key, name, colour limits
    ("labelwise_r", "label-wise r", figures.R_LIMITS),
    ("instancewise_r", "instance-wise r", figures.R_LIMITS),
    ("labelwise_std", "std of label-wise r", figures.STD_LIMITS),
)


MATRIX = {
    **{key: ANY for key in ("title", "n_inputs", "kind", "estimator", "seed")}, "model": TEXT,
    "rows": Items(TEXT), "columns": Items(TEXT), "cells": Items(Items((NULL, [TEXT, TEXT]))), "templates": Maybe(Entries(TEXT)),
    "skipped": Items({"prompt": ANY, "reason": ANY}), **{key: Items(Items(NUMBER)) for key, _, _ in MATRIX_METRICS},
}


def read_matrix(directory: Path) -> Section:
    """`lincorr matrix --out`: the three matrices on fixed colour scales, and every pair in a sortable table."""
    path = directory / "matrix.json"
    matrix = read_document(path, MATRIX)
    shape = (len(matrix["rows"]), len(matrix["columns"]))
    values = {key: number_grid(matrix, key, shape, path) for key, _, _ in MATRIX_METRICS}
    hover = matrix_hover(grid(matrix, "cells", shape, path), {name: values[key] for key, name, _ in MATRIX_METRICS},
                         matrix.get("templates", {}))
    model = matrix["model"] + (f" on {matrix['evaluated_on']}" if matrix.get("evaluated_on") else "")
    blocks = [KeyNumbers((("grid", matrix["title"] or "prompt pairs"),
                          ("inputs", f"{matrix['n_inputs']}, {matrix['kind']}, {matrix['estimator']}, seed {matrix['seed']}"),
                          ("skipped prompts", "; ".join(f"{s['prompt']} ({s['reason']})" for s in matrix["skipped"]) or "none")))]
    blocks += [Figure(figures.matrix_figure(values[key], matrix["rows"], matrix["columns"], f"{name} ({model})", value_name=name,
                                            limits=limits, hover=hover, row_axis="source prompt", column_axis="target prompt"))
               for key, name, limits in MATRIX_METRICS]
    blocks.append(Table("every pair", (Column("source", ""), Column("target", ""), *(Column(name) for _, name, _ in MATRIX_METRICS)), tuple(
        (cell[0], cell[1], *(number(values[key][i, j]) for key, _, _ in MATRIX_METRICS))
        for i, row in enumerate(matrix["cells"]) for j, cell in enumerate(row) if cell)))
    return Section(f"matrix: {matrix['title'] or 'prompt pairs'} on {model}", "matrix", str(directory), read_provenance(directory, matrix),
                   tuple(blocks))


RESILIENCE_MATRICES = (("A's W on A", "fit_on_fit"), ("A's W on B", "fit_on_eval"), ("B's W on B", "eval_on_eval"))
RESILIENCE = {
    "fit_model": ANY, "eval_model": ANY, "rows": Items(TEXT), "columns": Items(TEXT),
    "mean_offdiagonal": {f"r_{key}": NUMBER for _, key in RESILIENCE_MATRICES} | {"difference": NUMBER},
    **{f"labelwise_r_{key}": Items(Items(NUMBER)) for _, key in RESILIENCE_MATRICES},
}


def read_resilience(directory: Path) -> Section:
    """`lincorr resilience --out`: A's W on B minus on A, and the three label-wise r matrices (A and B may be the same model)."""
    path = directory / "resilience.json"
    result = read_document(path, RESILIENCE)
    fit_model, eval_model = result["fit_model"], result["eval_model"]
    shape = (len(result["rows"]), len(result["columns"]))
    matrices = tuple((name, number_grid(result, f"labelwise_r_{key}", shape, path)) for name, key in RESILIENCE_MATRICES)
    cells = [[(s, t) for t in result["columns"]] for s in result["rows"]]
    difference = matrices[1][1] - matrices[0][1]
    hover = matrix_hover(cells, {**dict(matrices), "difference": difference}, {})
    means = result["mean_offdiagonal"]
    blocks = [KeyNumbers((("A (W fitted)", fit_model), ("B (scored)", eval_model)) + tuple(
        (f"mean off-diagonal r, {name}", shown(means[key])) for name, key in (
            ("A's W on A", "r_fit_on_fit"), ("A's W on B", "r_fit_on_eval"), ("B's W on B", "r_eval_on_eval"), ("difference", "difference")))),
        Figure(figures.matrix_figure(difference, result["rows"], result["columns"], "label-wise r of A's W: on B minus on A",
                                     value_name="difference", limits=figures.R_LIMITS, hover=hover, row_axis="source prompt",
                                     column_axis="target prompt")),
    ]
    blocks += [Figure(figures.matrix_figure(values, result["rows"], result["columns"], f"label-wise r, {name}", value_name="label-wise r",
                                            limits=figures.R_LIMITS, hover=hover, row_axis="source prompt", column_axis="target prompt"))
               for name, values in matrices]
    return Section(f"resilience: {fit_model} -> {eval_model}", "resilience", str(directory),
                   read_provenance(directory, result, model=f"A: {fit_model} (W fitted), B: {eval_model} (scored)"), tuple(blocks))


PRECISION_ROW = {
    "label": SCALAR, "estimator": TEXT, "labelwise_r_mean": NUMBER, "hit_influenced": HITS, "hit_influencing": HITS,
    "chance_influenced": {"1": NUMBER}, "n_pairs_influenced": SCALAR, "n_pairs_influencing": SCALAR,
    "paper": Maybe({"model": ANY, "setting": ANY, "hit_influenced": {"1": NUMBER}, "hit_influencing": {"1": NUMBER}}),
}


def precision_table(rows: Sequence[Mapping], title: str) -> Table:
    """Hit@Top-1/3/5 in both directions with chance and the paper's numbers, one row per relation and estimator."""
    paper = next((row["paper"] for row in rows if "paper" in row), None)
    columns = (Column("relation", ""), Column("estimator", ""), Column("label-wise r"),
               *(Column(f"→ @{k}", ".2f") for k in KS), *(Column(f"← @{k}", ".2f") for k in KS),
               Column("chance → @1", ".3f"), Column("subjects"), Column("objects"), Column("paper → @1", ".2f"), Column("paper ← @1", ".2f"))
    return Table(title, columns, tuple(
        (row["label"], row["estimator"], number(row["labelwise_r_mean"]), *(number(row["hit_influenced"][k]) for k in KS),
         *(number(row["hit_influencing"][k]) for k in KS), number(row["chance_influenced"]["1"]), row["n_pairs_influenced"],
         row["n_pairs_influencing"], number(row["paper"]["hit_influenced"]["1"]) if "paper" in row else None,
         number(row["paper"]["hit_influencing"]["1"]) if "paper" in row else None)
        for row in rows), note=(
        "→ influenced: share of the reference subjects with a right object among the top-k targets of their row of W; "
        "← influencing: share of the reference objects with a right subject among the top-k sources of their column. "
        + (f"Paper: {paper['model']}, {paper['setting']}." if paper else "")))


def skipped_note(skipped: Sequence[Mapping]) -> KeyNumbers:
    return KeyNumbers(tuple((s.get("relation") or s.get("prompt"), f"not judged: {s['reason']}") for s in skipped))


PRECISION = {"model": ANY, "n_inputs": ANY, "rows": Items(PRECISION_ROW), "skipped": Items(SKIPPED)}


def read_precision(directory: Path) -> Section:
    """`lincorr precision --out`: Hit@k per relation, sortable, with the paper's column."""
    table = read_document(directory / "precision.json", PRECISION)
    blocks = [precision_table(table["rows"], f"Hit@Top-N of W, {table['n_inputs']} inputs")]
    if table["skipped"]:
        blocks.append(skipped_note(table["skipped"]))
    return Section(f"precision on {table['model']}", "precision", str(directory), read_provenance(directory, table), tuple(blocks))


SCALE = {"models": Items({"model": TEXT, "n_parameters": REAL}), "rows": Items(PRECISION_ROW | {"model": TEXT})}


def read_scale(directory: Path) -> Section:
    """`lincorr scale --out`: r and Hit@N against model size, one figure per estimator, and the rows."""
    scale = read_document(directory / "scale.json", SCALE)
    models = [f"{m['model']} ({m['n_parameters'] / 1e6:.0f}M)" for m in scale["models"]]
    blocks = []
    for estimator in dict.fromkeys(row["estimator"] for row in scale["rows"]):
        series: dict[str, list[float]] = {}
        for model in scale["models"]:
            for row in (r for r in scale["rows"] if r["model"] == model["model"] and r["estimator"] == estimator):
                for name, value in (("label-wise r", row["labelwise_r_mean"]), ("Hit@1 influenced", row["hit_influenced"]["1"]),
                                    ("Hit@5 influenced", row["hit_influenced"]["5"]), ("Hit@1 influencing", row["hit_influencing"]["1"])):
                    series.setdefault(f"{row['label']}: {name}", []).append(value)
        series = {name: values for name, values in series.items() if len(values) == len(models)}
        blocks.append(Figure(figures.line_figure(models, series, f"correlation and W precision by model size ({estimator})",
                                                 x_name="model", y_name="r / Hit@N", y_range=(0, 1.02))))
    blocks.append(precision_table([{**row, "label": f"{row['label']} on {row['model']}"} for row in scale["rows"]], "every model, relation and estimator"))
    return Section(f"scale: {', '.join(m['model'] for m in scale['models'])}", "scale", str(directory),
                   read_provenance(directory, scale, model=", ".join(models)), tuple(blocks))


CASES = Items({
    **{key: ANY for key in ("k", "source", "target", "direction", "estimator", "model")}, "missing": Items(TEXT),
    "rows": Items({"word": SCALAR, "top": Items([TEXT, NUMBER]), "right": Items(TEXT)}),
})


def read_cases(directory: Path) -> Section:
    """`lincorr cases --out`: one table per case table, reference answers marked ✓."""
    tables = read_document(directory / "cases.json", CASES)
    blocks = []
    for case in tables:
        # As many rank columns as the longest row has answers: the k a file states sizes nothing.
        width = max((len(row["top"]) for row in case["rows"]), default=0)
        row_side, other_side = (case["source"], case["target"]) if case["direction"] == "influenced" else (case["target"], case["source"])
        blocks.append(Table(
            f"{case['source']} -> {case['target']}: top-{case['k']} {case['direction']} {other_side} words ({case['estimator']})",
            (Column(row_side, ""), *(Column(f"#{rank}", "") for rank in range(1, width + 1))),
            tuple((row["word"], *(f"{word}{' ✓' if word in row['right'] else ''} ({shown(weight, '+.3f')})" for word, weight in row["top"]),
                   *[None] * (width - len(row["top"]))) for row in case["rows"]),
            note="✓: a reference answer. " + (f"Not in the domain for this tokenizer: {', '.join(case['missing'])}." if case["missing"] else "")))
    model = tables[0]["model"] if tables else None
    return Section(f"cases on {model}", "cases", str(directory), read_provenance(directory, {}, model=model), tuple(blocks))


# ---- the training studies ----

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
    blocks = [Table("Table 4: does one step on source facts move target logits as W predicts?", columns, tuple(
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
    model = next((row["model"] for row in rows if "model" in row), None)
    return Section(f"generalization (Table 5) on {model}", "generalize --table5", str(directory), read_provenance(directory, {}, model=model),
                   (table,))


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
    blocks = [Table("Table 18: by the token category of the target answer", columns, tuple(
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
    return Section(f"predict-edit: {p['source']}({p['subject']}) = {p['source_answer']} on {p['model']}", "predict-edit", str(directory),
                   read_provenance(directory, p), (numbers,))


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
    provenance = read_provenance(directory, {})
    model = (provenance.settings or {}).get("vocabulary")  # the ablation names its model only as the vocabulary it used
    return Section(f"vocabulary ablation (Table 7){f' on {model}' if model else ''}", "ablate --table7", str(directory),
                   dataclasses.replace(provenance, model=model), (table,))


# ---- the inside path ----

SCORE_NAMES = ("informative", "downstream", "upstream")
SCORES = {
    "hop": ANY, "model": ANY, "n_checked": ANY, "layers": Items(SCALAR), "components": Items(TEXT),
    **{name: Items(Items(NUMBER)) for name in SCORE_NAMES},
    **{f"{kind}_mean_rank_{when}": NUMBER for kind in ("fact", "implication") for when in ("before", "after")},
    "linearization_r": Maybe(Entries(NUMBER)),
    "checked": Maybe(Items({"component": SCALAR, **{f"{name}_{kind}": NUMBER for name in SCORE_NAMES for kind in ("linear", "exact")}})),
}


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
    blocks = [numbers, Figure(heatmaps, "Each score on its own symmetric colour scale; hover a cell for its value.")]
    if scores.get("checked"):
        blocks.append(Table("exact (intervention) against linearised scores", (Column("component", ""), *(
            Column(f"{name} {kind}", ".4g") for name in names for kind in ("linear", "exact"))), tuple(
            (c["component"], *(number(c[f"{name}_{kind}"]) for name in names for kind in ("linear", "exact"))) for c in scores["checked"])))
    return Section(f"extractive scores: {scores['hop']}-hop on {scores['model']}", "extractive scores", str(directory),
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
    return Section(f"out-of-context reasoning: {ocr['hop']}-hop on {ocr['model']}", "extractive ocr", str(directory),
                   read_provenance(directory, ocr), (numbers, Figure(figure)))


def lens_curves(document) -> dict[str, list[float]]:
    """The per-layer curves of a logit-lens result (empty for any other JSON)."""
    if not isinstance(document, dict) or not isinstance(document.get("layers"), list):
        return {}
    return {key: value for key, value in document.items() if key.endswith(LENS_CURVE_SUFFIXES) and isinstance(value, list)
            and len(value) == len(document["layers"]) and all(v is None or isinstance(v, (int, float)) for v in value)}


def read_lens(directory: Path, path: Path, document: dict) -> Section:
    """A logit-lens result (`lincorr lens` writes lens.json): its curves over the lens layers, the crossing marked."""
    checked(document, {"layers": Items(SCALAR)}, path)
    curves = lens_curves(document)
    bounded = all(curve.endswith(("_rr", "_top1", "_accuracy")) for curve in curves)
    task, model = document.get("task"), document.get("model")
    figure = figures.line_figure(document["layers"], {curve.replace("_", " "): [plotted(v) for v in values]
                                                      for curve, values in curves.items()},
                                 f"logit lens{f': {task}' if task else ''}", x_name="lens layer l (resid[l]; the last is the output)",
                                 y_name="reciprocal rank / share", y_range=(0, 1.02) if bounded else None)
    if isinstance(document.get("crossing_layer"), int):
        figure.add_vline(x=document["crossing_layer"], line_dash="dot", line_color="grey", annotation_text="crossing")
    return Section(f"logit lens: {task or path.stem}{f' on {model}' if model else ''}", "logit lens", str(directory),
                   read_provenance(directory, document), (KeyNumbers(scalar_fields(document)), Figure(figure)))


def scalar_fields(document: Mapping, prefix: str = "") -> tuple[tuple[str, str], ...]:
    """The numbers and words of a result JSON (not its lists and tables), as labelled text."""
    return tuple((f"{prefix}{key}", shown(value, ".4g") if isinstance(value, float) else str(value)) for key, value in document.items()
                 if isinstance(value, (str, int, float, bool)) or value is None)


def read_other(directory: Path, others: Mapping[Path, object]) -> Section:
    """A directory of a study the report has no view of: the scalar fields of its JSON files (`others`, read), and its PNGs."""
    documents = {path.name: document for path, document in others.items() if isinstance(document, dict)}
    numbers = tuple(item for name, document in documents.items() for item in scalar_fields(document, f"{name}: "))
    blocks = ([KeyNumbers(numbers)] if numbers else []) + [Picture(path.name, read_picture(path)) for path in sorted(directory.glob("*.png"))]
    model = next((document["model"] for document in documents.values() if isinstance(document.get("model"), str)), None)
    return Section(f"{directory.name}{f' on {model}' if model else ''}", "other", str(directory),
                   read_provenance(directory, next(iter(documents.values()), {}), model=model), tuple(blocks))


# The file each study's `save` always writes, and how to read it; a directory may hold several.
READERS: tuple[tuple[tuple[str, ...], Callable[[Path], Section]], ...] = (
    (("W.npy", "result.json"), read_pair),
    (("matrix.json",), read_matrix),
    (("resilience.json",), read_resilience),
    (("precision.json",), read_precision),
    (("scale.json",), read_scale),
    (("cases.json",), read_cases),
    (("gradcorr.json",), read_gradcorr),
    (("table5.json",), read_table5),
    (("facts.json", "result.json"), read_generalization),
    (("subwords.json",), read_subwords),
    (("prediction.json",), read_prediction),
    (("table7.json",), read_table7),
    (("scores.json",), read_extractive_scores),
    (("ocr.json",), read_ocr),
)


def read_run(directory) -> tuple[Section, ...]:
    """The sections of one run directory (usually one); an InputError when it holds no lincorr result or a file that cannot be read."""
    directory = Path(directory)
    if not directory.is_dir():
        raise InputError(f"{directory} is not a directory; pass the --out or --save-dir directory of a lincorr run")
    # A reader's file is looked for by name alone: one that is a directory or a FIFO is refused when read, not passed over.
    found = [(files, reader) for files, reader in READERS if all((directory / name).exists() for name in files)]
    if not found and not any((directory / name).exists() for name in (OUTPUT_MARKER, "provenance.json")):
        raise InputError(f"{directory} is not a lincorr run directory: it holds no file a lincorr command writes (result.json, "
                         "matrix.json, precision.json, provenance.json, ...); pass the --out or --save-dir directory of a lincorr command")
    sections = [reader(directory) for _, reader in found]
    read = {name for files, _ in found for name in files} | {"provenance.json"}
    others = {path: read_json(path, WHAT) for path in sorted(directory.glob("*.json")) if path.name not in read}
    sections += [read_lens(directory, path, document) for path, document in others.items() if lens_curves(document)]
    return tuple(sections) or (read_other(directory, others),)
