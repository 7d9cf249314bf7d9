"""The report's sections of the logit path (Peng et al. §3): a fitted pair, matrices, resilience, precision, its N curve, scale, cases."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from lincorr.errors import InputError
from lincorr.reading import check_array
from lincorr.report import figures
from lincorr.report.files import ANY, NULL, NUMBER, REAL, REMEDY, SCALAR, TEXT, WHAT, Entries, Items, Maybe, grid, number_grid, read_array, read_document
from lincorr.report.page import Block, Column, Figure, KeyNumbers, Section, Table
from lincorr.report.sections import HITS, KS, SKIPPED, number, plotted, plus_minus, read_provenance, shown, skipped_note

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
    W = read_array(directory / "W.npy")
    sources, targets = result["source_domain"]["words"], result["target_domain"]["words"]
    if not sources or not targets:
        raise InputError(f"{WHAT} {path} is not what lincorr writes: it lists no source or no target words; {REMEDY}")
    # The check `lincorr.load_result` makes of the same file. NaN weights are refused rather than drawn: no fit writes
    # one, and a heatmap of them would be an empty picture of a damaged file, presented as a result.
    check_array(W, directory / "W.npy", WHAT, REMEDY, ((len(sources), "source words"), (len(targets), "target words")), weights=True)
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
        Figure(figures.weight_figure(W, sources, targets, reference, title),
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
    blocks: list[Block] = [KeyNumbers((("grid", matrix["title"] or "prompt pairs"),
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
    blocks: list[Block] = [KeyNumbers((("A (W fitted)", fit_model), ("B (scored)", eval_model)) + tuple(
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


def hit_table(rows: Sequence[Mapping], title: str) -> Table:
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



def hit_figure(rows: Sequence[Mapping], title: str):
    """Hit@1 in both directions and its chance level, one group of bars per relation and fit."""
    return figures.grouped_bar_figure(
        [f"{row['label']} ({row['estimator']})" for row in rows],
        {"Hit@1 influenced": [plotted(row["hit_influenced"]["1"]) for row in rows],
         "Hit@1 influencing": [plotted(row["hit_influencing"]["1"]) for row in rows],
         "chance influenced": [plotted(row["chance_influenced"]["1"]) for row in rows]},
        title, y_name="share of reference pairs", y_range=(0, 1.02))


PRECISION = {"model": ANY, "n_inputs": ANY, "rows": Items(PRECISION_ROW), "skipped": Items(SKIPPED)}


def read_precision(directory: Path) -> Section:
    """`lincorr precision --out`: Hit@k per relation, sortable, with the paper's column."""
    table = read_document(directory / "precision.json", PRECISION)
    blocks: list[Block] = [Figure(hit_figure(table["rows"], f"Hit@1 of W in both directions, {table['n_inputs']} inputs")),
              hit_table(table["rows"], f"Hit@Top-N of W, {table['n_inputs']} inputs")]
    if table["skipped"]:
        blocks.append(skipped_note(table["skipped"]))
    return Section(f"precision on {table['model']}", "precision", str(directory), read_provenance(directory, table), tuple(blocks))


LRE = {"model": ANY, "n_inputs": ANY, "rows": Items(PRECISION_ROW | {"relation_type": TEXT}), "skipped": Items(SKIPPED)}


def read_lre(directory: Path) -> Section:
    """`lincorr lre --out`: Hit@1 of W on each LRE relation beside chance, and every row with its relation type."""
    table = read_document(directory / "lre.json", LRE)
    rows = [{**row, "label": f"{row['label']} ({row['relation_type']})"} for row in table["rows"]]
    blocks: list[Block] = [Figure(hit_figure(rows, f"Hit@1 of W on the LRE relations, {table['n_inputs']} inputs")),
              hit_table(rows, f"Hit@Top-N of W against LRE's samples, {table['n_inputs']} inputs")]
    if table["skipped"]:
        blocks.append(skipped_note(table["skipped"]))
    return Section(f"LRE precision on {table['model']}", "lre", str(directory), read_provenance(directory, table), tuple(blocks))


SCALE = {"models": Items({"model": TEXT, "n_parameters": REAL}), "rows": Items(PRECISION_ROW | {"model": TEXT}),
         "size_series": Maybe((TEXT, NULL)), "note": Maybe((TEXT, NULL))}


def read_scale(directory: Path) -> Section:
    """`lincorr scale --out`: r and Hit@N against model size, one figure per estimator, and the rows."""
    scale = read_document(directory / "scale.json", SCALE)
    models = [f"{m['model']} ({m['n_parameters'] / 1e6:.0f}M)" for m in scale["models"]]
    # The lines run over the size series; models shown beside it (`in_series` false) are in the table only.
    in_series = [m for m in scale["models"] if m.get("in_series", True)]
    blocks: list[Block] = []
    for estimator in dict.fromkeys(row["estimator"] for row in scale["rows"]):
        series: dict[str, list[float]] = {}
        for model in in_series:
            for row in (r for r in scale["rows"] if r["model"] == model["model"] and r["estimator"] == estimator):
                for name, value in (("label-wise r", row["labelwise_r_mean"]), ("Hit@1 influenced", row["hit_influenced"]["1"]),
                                    ("Hit@5 influenced", row["hit_influenced"]["5"]), ("Hit@1 influencing", row["hit_influencing"]["1"])):
                    series.setdefault(f"{row['label']}: {name}", []).append(value)
        series = {name: values for name, values in series.items() if len(values) == len(in_series)}
        blocks.append(Figure(figures.line_figure([f"{m['model']} ({m['n_parameters'] / 1e6:.0f}M)" for m in in_series], series, f"correlation and W precision by model size ({estimator})",
                                                 x_name="model", y_name="r / Hit@N", y_range=(0, 1.02))))
    blocks.append(hit_table([{**row, "label": f"{row['label']} on {row['model']}"} for row in scale["rows"]], "every model, relation and estimator"))
    if scale.get("note"):
        blocks.append(KeyNumbers((("size series", ": ".join(filter(None, (scale.get("size_series"), scale["note"])))),)))
    return Section(f"scale: {', '.join(m['model'] for m in scale['models'])}", "scale", str(directory),
                   read_provenance(directory, scale, model=", ".join(models)), tuple(blocks))


def case_figure(case: Mapping, row_side: str, width: int):
    """One case table as a heatmap: a row per row word, a column per rank, W's weight as colour and the word on hover."""
    weights = np.array([[plotted(weight) for _, weight in row["top"]] + [np.nan] * (width - len(row["top"])) for row in case["rows"]],
                       dtype=float).reshape(len(case["rows"]), width)
    limit = float(np.nanmax(np.abs(weights))) if np.isfinite(weights).any() else 1.0
    hover = [[f"{row['word']} -> {word}{' (a reference answer)' if word in row['right'] else ''}\nW: {shown(weight, '+.4g')}"
              for word, weight in row["top"]] + [""] * (width - len(row["top"])) for row in case["rows"]]
    return figures.matrix_figure(weights, [row["word"] for row in case["rows"]], [f"#{rank}" for rank in range(1, width + 1)],
                                 f"{case['source']} -> {case['target']}: W of the top-{case['k']} {case['direction']} words",
                                 value_name="W", limits=(-(limit or 1.0), limit or 1.0), hover=hover, row_axis=row_side, column_axis="rank")


CASES = Items({
    **{key: ANY for key in ("k", "source", "target", "direction", "estimator", "model")}, "missing": Items(TEXT),
    "rows": Items({"word": SCALAR, "top": Items([TEXT, NUMBER]), "right": Items(TEXT)}),
})


def read_cases(directory: Path) -> Section:
    """`lincorr cases --out`: one table per case table, reference answers marked ✓."""
    tables = read_document(directory / "cases.json", CASES)
    blocks: list[Block] = []
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
        blocks.append(Figure(case_figure(case, row_side, width)))
    model = tables[0]["model"] if tables else None
    return Section(f"cases on {model}", "cases", str(directory), read_provenance(directory, {}, model=model), tuple(blocks))


CURVE = {"label": TEXT, "model": ANY, "ns": Items(REAL), "rows": Items(PRECISION_ROW | {"n_inputs": REAL}),
         "skipped": Items({"setting": ANY, "reason": ANY})}


def read_precision_curve(directory: Path) -> Section:
    """`lincorr precision --n-curve --out`: Hit@1 in both directions against N for each fit, and every row."""
    curve = read_document(directory / "precision_curve.json", CURVE)
    found = {(row["n_inputs"], row["estimator"], direction): row[f"hit_{direction}"]["1"]
             for row in curve["rows"] for direction in ("influenced", "influencing")}
    series = {f"{estimator}, {direction}": [plotted(found.get((n, estimator, direction))) for n in curve["ns"]]
              for estimator in dict.fromkeys(row["estimator"] for row in curve["rows"]) for direction in ("influenced", "influencing")}
    blocks: list[Block] = [Figure(figures.line_figure(curve["ns"], series, f"Hit@1 of W against the number of inputs N ({curve['label']})",
                                         x_name="inputs N", y_name="Hit@1", y_range=(0, 1.02))),
              hit_table([{**row, "label": f"N = {row['n_inputs']}"} for row in curve["rows"]], "every N and fit")]
    if curve["skipped"]:
        blocks.append(KeyNumbers(tuple((s["setting"], f"not fitted: {s['reason']}") for s in curve["skipped"])))
    return Section(f"precision curve: {curve['label']} on {curve['model']}", "precision-curve", str(directory),
                   read_provenance(directory, curve), tuple(blocks))
