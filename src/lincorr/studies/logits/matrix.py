"""Correlation matrices (§3.4, Fig. 3, Appendices D and J): many prompt pairs over one set of inputs.

Each prompt's logits are collected once and reused by every pair it is in; all pairs with the
same source share one fit, because ols and ridge solve each target column independently: one
factorisation of the source against the column-concatenation of its targets gives every W.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping, Sequence
from typing import ClassVar

import numpy as np

from lincorr.collection import CollectSettings, LogitTable, collect
from lincorr.errors import LincorrError
from lincorr.fit import FitConfig, PairResult, fit_targets
from lincorr.metrics import summarize
from lincorr.models import LM
from lincorr.outputs import none_if_nan, settings_key, staged_directory, write_csv, write_json
from lincorr.prompts import Prompt, registry_prompts
from lincorr.results import Stored, record

__all__ = ["METRICS", "Grid", "GridScores", "MatrixResult", "score_grid", "prepare_grid", "measure_matrix", "matrix_from_tables"]


log = logging.getLogger("lincorr")

Cell = tuple[str, str] | None  # (source prompt, target prompt), or None for an empty cell
METRICS = ("labelwise_r", "instancewise_r", "labelwise_std")


@dataclasses.dataclass(frozen=True)
class Grid:
    """Which prompt pair fills each cell of a matrix: `cells` is `[n_rows][n_cols]`."""

    title: str
    row_labels: tuple[str, ...]
    column_labels: tuple[str, ...]
    cells: tuple[tuple[Cell, ...], ...]
    row_axis: str = "source prompt"
    column_axis: str = "target prompt"

    @classmethod
    def square(cls, names: Sequence[str], title: str = "") -> Grid:
        """Every ordered pair of `names`: row = source, column = target, the diagonal a prompt onto itself."""
        names = tuple(dict.fromkeys(names))
        return cls(title, names, names, tuple(tuple((s, t) for t in names) for s in names))

    @classmethod
    def rectangle(cls, sources: Sequence[str], targets: Sequence[str], title: str = "") -> Grid:
        """Every source (rows) against every target (columns)."""
        sources, targets = tuple(dict.fromkeys(sources)), tuple(dict.fromkeys(targets))
        return cls(title, sources, targets, tuple(tuple((s, t) for t in targets) for s in sources))

    @classmethod
    def cross_language(cls, registry, languages: Sequence[str] | None = None) -> Grid:
        """Fig. 3's X-Lang panel: row = English knowledge k, column = language l, cell = k -> l/k."""
        translated = [spec for spec in registry.prompts if "/" in spec.name and spec.family == "cross-language"]
        languages = tuple(languages or dict.fromkeys(spec.name.split("/")[0] for spec in translated))
        names = {spec.name for spec in registry.prompts}
        knowledge = tuple(
            dict.fromkeys(
                spec.name.split("/", 1)[1] for spec in translated if spec.name.split("/", 1)[1] in names
            )
        )
        if not knowledge:
            raise LincorrError("the registry has no cross-language prompts named <language>/<knowledge> with an English <knowledge>")
        unknown = [language for language in languages if not any(f"{language}/{k}" in names for k in knowledge)]
        if unknown:
            raise LincorrError(f"no cross-language prompts for {', '.join(unknown)}; known: {', '.join(sorted({s.name.split('/')[0] for s in translated}))}")
        cells = tuple(tuple((k, f"{lang}/{k}") if f"{lang}/{k}" in names else None for lang in languages) for k in knowledge)
        return cls("English -> other languages, same knowledge", knowledge, languages, cells, "English prompt (source)", "language of the target prompt")

    def prompt_names(self) -> tuple[str, ...]:
        """Every prompt a cell uses, in first-use order (rows first)."""
        return tuple(dict.fromkeys(name for row in self.cells for cell in row if cell for name in cell))

    def source_names(self) -> tuple[str, ...]:
        """Every prompt used as a source."""
        return tuple(dict.fromkeys(cell[0] for row in self.cells for cell in row if cell))

    def without(self, missing: set[str]) -> Grid:
        """Cells using a `missing` prompt emptied; rows and columns left with no cell dropped."""
        cells = [[cell if cell and not (set(cell) & missing) else None for cell in row] for row in self.cells]
        rows = [i for i, row in enumerate(cells) if any(row)]
        columns = [j for j in range(len(self.column_labels)) if any(cells[i][j] for i in rows)]
        return dataclasses.replace(
            self,
            row_labels=tuple(self.row_labels[i] for i in rows),
            column_labels=tuple(self.column_labels[j] for j in columns),
            cells=tuple(tuple(cells[i][j] for j in columns) for i in rows),
        )


@dataclasses.dataclass(frozen=True)
class GridScores:
    """Per cell, `[n_rows, n_cols]`: mean and std over target labels of label-wise r, and mean instance-wise r.

    `pairs` holds every filled cell's whole `PairResult` (its W, interval and control), by (source, target).
    """

    labelwise_r: np.ndarray
    labelwise_std: np.ndarray
    instancewise_r: np.ndarray
    source_alpha: dict[str, float]  # the penalty each source's shared fit used (0 for ols)
    n_constant_targets: np.ndarray  # target words per cell left out of the label-wise mean (r undefined)
    pairs: Mapping[tuple[str, str], PairResult] = dataclasses.field(default_factory=dict)


def score_grid(
    grid: Grid, fit_on: Mapping[str, LogitTable], config: FitConfig, evaluate_on: Mapping[str, LogitTable] | None = None
) -> GridScores:
    """Fit W on the train split of `fit_on` and score it on the test split of `evaluate_on` (default the same tables).

    Each source is fitted once onto all of its targets (`fit.fit_targets`), so with ridge and
    alpha="cv" the penalty is cross-validated once per source over all of its targets together
    (shared, like the factorisation), not per pair. Every other setting of `config` (target scores,
    interval, control) applies to each cell as it does to one pair.
    """
    evaluate_on = fit_on if evaluate_on is None else evaluate_on
    shape = (len(grid.row_labels), len(grid.column_labels))
    scores = {metric: np.full(shape, np.nan) for metric in METRICS}
    n_constant = np.zeros(shape, dtype=int)
    alphas: dict[str, float] = {}
    pairs: dict[tuple[str, str], PairResult] = {}
    for source in grid.source_names():
        where = [(i, j, cell[1]) for i, row in enumerate(grid.cells) for j, cell in enumerate(row) if cell and cell[0] == source]
        targets = list(dict.fromkeys(target for _, _, target in where))
        for name in [source, *targets]:
            check_comparable(fit_on[name], evaluate_on[name], name)
        fitted = fit_targets(fit_on[source], {t: fit_on[t] for t in targets}, config, source_name=source,
                             evaluate_on=None if evaluate_on is fit_on else (evaluate_on[source], {t: evaluate_on[t] for t in targets}))
        alphas[source] = next(iter(fitted.values())).alpha
        for i, j, target in where:
            pair = pairs[source, target] = fitted[target]
            spread = summarize(pair.labelwise_r)
            scores["labelwise_r"][i, j], scores["labelwise_std"][i, j] = spread["mean"], spread["std"]
            n_constant[i, j] = pair.n_constant_targets
            scores["instancewise_r"][i, j] = np.nanmean(pair.instancewise_r)
    return GridScores(scores["labelwise_r"], scores["labelwise_std"], scores["instancewise_r"], alphas, n_constant, pairs)


def check_comparable(fitted: LogitTable, evaluated: LogitTable, name: str) -> None:
    """Tables to fit on and to score on must share inputs and domain tokens (same tokenizer, same sample)."""
    if fitted is evaluated:
        return
    if fitted.inputs != evaluated.inputs:
        raise LincorrError(f"'{name}': the tables to fit on and to evaluate on have different inputs; sample them with the same tokenizer and seed")
    if fitted.domain.token_ids != evaluated.domain.token_ids:
        raise LincorrError(f"'{name}': the two models tokenize the domain differently; W carries over only between models with the same tokenizer")


@dataclasses.dataclass(frozen=True)
class MatrixResult(Stored):
    """Scores of every cell of a grid; each matrix is `[n_rows, n_cols]`, NaN in empty cells."""

    study: ClassVar[str] = "matrix"

    grid: Grid
    model_name: str
    model_fingerprint: str
    kind: str
    n_inputs: int
    config: FitConfig
    labelwise_r: np.ndarray
    labelwise_std: np.ndarray
    instancewise_r: np.ndarray
    source_alpha: dict[str, float]
    n_constant_targets: np.ndarray  # [n_rows, n_cols] target words constant on the test inputs, left out of each mean
    skipped: tuple[tuple[str, str], ...]  # (prompt, why it has no domain for this tokenizer)
    seconds_collect: float
    seconds_fit: float
    evaluated_on: str = ""  # the model whose logits were scored, when it is not the fitted one
    templates: Mapping[str, str] = dataclasses.field(default_factory=dict)  # prompt name -> template

    def matrix(self, metric: str) -> np.ndarray:
        """One of `labelwise_r`, `instancewise_r`, `labelwise_std`."""
        if metric not in METRICS:
            raise LincorrError(f"unknown matrix '{metric}'; use one of {', '.join(METRICS)}")
        return getattr(self, metric)

    def value(self, source: str, target: str, metric: str = "labelwise_r") -> float:
        """The score of the cell holding the pair source -> target."""
        for i, row in enumerate(self.grid.cells):
            for j, cell in enumerate(row):
                if cell == (source, target):
                    return float(self.matrix(metric)[i, j])
        raise LincorrError(f"the matrix has no cell {source} -> {target}")

    def pairs(self) -> list[dict]:
        """One row per filled cell: source, target and the three scores."""
        return [
            {"source": cell[0], "target": cell[1], **{m: none_if_nan(self.matrix(m)[i, j]) for m in METRICS},
             "n_constant_targets": int(self.n_constant_targets[i, j])}
            for i, row in enumerate(self.grid.cells)
            for j, cell in enumerate(row)
            if cell
        ]

    def summary(self) -> dict:
        """The JSON contract of `lincorr matrix --json` (NaN written as null)."""
        return {
            "title": self.grid.title,
            "model": self.model_name,
            "model_fingerprint": self.model_fingerprint,
            **({"evaluated_on": self.evaluated_on} if self.evaluated_on else {}),
            "kind": self.kind,
            "n_inputs": self.n_inputs,
            "estimator": self.config.estimator,
            "seed": self.config.seed,
            "test_fraction": self.config.test_fraction,
            "rows": list(self.grid.row_labels),
            "columns": list(self.grid.column_labels),
            "cells": [[list(cell) if cell else None for cell in row] for row in self.grid.cells],
            **{m: [[none_if_nan(v) for v in row] for row in self.matrix(m)] for m in METRICS},
            "source_alpha": self.source_alpha,
            # Target words whose held-out logits are constant have no r; each cell's mean leaves them out.
            "n_constant_targets": int(self.n_constant_targets.sum()),
            "skipped": [{"prompt": name, "reason": reason} for name, reason in self.skipped],
            "seconds_collect": self.seconds_collect,
            "seconds_fit": self.seconds_fit,
        }

    def save(self, directory) -> None:
        """matrix.json, a CSV and a PNG heatmap per matrix, and pairs.csv; written whole or not at all."""
        with staged_directory(directory) as out:
            self.write_into(out)

    def write_into(self, out) -> None:
        """The files of `save` into an existing directory."""
        from lincorr.plots import matrix_heatmap

        write_json(out / "matrix.json", {**self.summary(), "templates": dict(self.templates), "config": dataclasses.asdict(self.config)})
        record(out, self, model_fingerprint=self.model_fingerprint,
               settings={**settings_key(self.config), "kind": self.kind, "n_inputs": self.n_inputs})
        write_csv(out / "pairs.csv", ["source", "target", *METRICS, "n_constant_targets"], [list(p.values()) for p in self.pairs()])
        model = f"{self.model_name} on {self.evaluated_on}" if self.evaluated_on else self.model_name
        for metric, limits, label, description in (
            ("labelwise_r", (-1.0, 1.0), "label-wise r", "label-wise Pearson r (mean over target words)"),
            ("instancewise_r", (-1.0, 1.0), "instance-wise r", "instance-wise Pearson r (mean over test inputs)"),
            ("labelwise_std", (0.0, 0.5), "std of label-wise r", "std of label-wise r over target words"),
        ):
            values = self.matrix(metric)
            write_csv(out / f"{metric}.csv", ["source", *self.grid.column_labels],
                      [[row_label, *(none_if_nan(v) for v in row)] for row_label, row in zip(self.grid.row_labels, values)])
            matrix_heatmap(
                values, self.grid.row_labels, self.grid.column_labels, out / f"{metric}.png",
                f"{model}: {description}\n{self.grid.title} ({self.n_inputs} inputs, {self.config.estimator})",
                limits=limits, colour_label=label, row_axis=self.grid.row_axis, column_axis=self.grid.column_axis,
            )

    def text(self) -> str:
        """The label-wise r matrix for the terminal, what was skipped or left out, and the time taken."""
        return "\n".join([
            f"{self.model_name}: {self.grid.title}, {self.n_inputs} inputs, {self.config.estimator}; "
            "label-wise r (row = source, column = target)",
            self.aligned("labelwise_r"),
            *(f"skipped {name}: {reason}" for name, reason in self.skipped),
            *([f"left out: {int(self.n_constant_targets.sum())} target words constant on the test inputs (r undefined), "
               "per cell in pairs.csv and the JSON"] if self.n_constant_targets.any() else []),
            f"\ncollection {self.seconds_collect:.1f} s, fits {self.seconds_fit:.1f} s",
        ])

    def aligned(self, metric: str = "labelwise_r") -> str:
        """One matrix as aligned text, one row per source, two decimals."""
        values = self.matrix(metric)
        width = max(len(label) for label in self.grid.row_labels)
        columns = [label[:6] for label in self.grid.column_labels]
        lines = [" " * width + "  " + " ".join(f"{c:>6}" for c in columns)]
        for label, row in zip(self.grid.row_labels, values):
            lines.append(f"{label:<{width}}  " + " ".join(f"{v:6.2f}" if np.isfinite(v) else f"{'-':>6}" for v in row))
        return "\n".join(lines)


def prepare_grid(registry, grid: Grid, tokenizer, n_inputs: int, config: FitConfig) -> tuple[Grid, dict[str, Prompt], tuple]:
    """Prompts for the grid, the grid without prompts that have no domain, and the skipped prompts; checks ols sizes."""
    prompts, skipped = registry_prompts(registry, grid.prompt_names(), tokenizer)
    grid = grid.without({name for name, _ in skipped})
    if not grid.cells:
        raise LincorrError("no prompt of this matrix has a usable domain for this tokenizer: " + "; ".join(r for _, r in skipped))
    prompts = {name: prompts[name] for name in grid.prompt_names()}
    config.check_sizes(n_inputs, max(len(prompts[s].domain) for s in grid.source_names()))
    for name, reason in skipped:
        log.warning("skipping %s: %s", name, reason)
    return grid, prompts, skipped


def measure_matrix(
    lm: LM,
    registry,
    grid: Grid,
    inputs: Sequence[str],
    config: FitConfig = FitConfig(),
    settings: CollectSettings = CollectSettings(),
) -> MatrixResult:
    """Collect every prompt of `grid` once over `inputs` (as `settings` say), then fit and score all of its cells."""
    grid, prompts, skipped = prepare_grid(registry, grid, lm.tokenizer, len(inputs), config)
    started = time.perf_counter()
    tables = collect(lm, prompts, inputs, settings)
    return matrix_from_tables(grid, tables, config, model_name=lm.name, skipped=skipped, seconds_collect=time.perf_counter() - started)


def matrix_from_tables(
    grid: Grid,
    fit_on: Mapping[str, LogitTable],
    config: FitConfig,
    *,
    evaluate_on: Mapping[str, LogitTable] | None = None,
    model_name: str = "",
    evaluated_on: str = "",
    skipped: tuple = (),
    seconds_collect: float = 0.0,
) -> MatrixResult:
    """Score a grid on tables already collected (W from `fit_on`, scores on `evaluate_on`)."""
    started = time.perf_counter()
    scores = score_grid(grid, fit_on, config, evaluate_on)
    first = next(iter(fit_on.values()))
    return MatrixResult(
        grid=grid,
        model_name=model_name,
        model_fingerprint=first.model,
        kind=first.kind,
        n_inputs=len(first.inputs),
        config=config,
        labelwise_r=scores.labelwise_r,
        labelwise_std=scores.labelwise_std,
        instancewise_r=scores.instancewise_r,
        source_alpha=scores.source_alpha,
        n_constant_targets=scores.n_constant_targets,
        skipped=skipped,
        seconds_collect=seconds_collect,
        seconds_fit=time.perf_counter() - started,
        evaluated_on=evaluated_on,
        templates={name: table.template for name, table in fit_on.items()},
    )
