"""The steps behind Peng et al.'s logit claims (§3): W precision, correlation matrices, case tables.

Each runs a study of `lincorr.studies.logits` the paper's way (ols, the paper's relations) at
the claim's N, with lincorr's estimator beside it where lincorr's default differs, and tests
the phenomenon with `verdicts`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any, cast

import numpy as np

from lincorr.collection import collect
from lincorr.errors import LincorrError
from lincorr.fit import FitConfig, PairResult, fit_tables
from lincorr.paper import paper_table
from lincorr.prompts import registry_prompts
from lincorr.relations import RelationSpec, bind_relation
from lincorr.reproduce.peng.units import N_CONTROL, as_drawn, cell_scores, labelwise_gain, resamples
from lincorr.reproduce.step import Context, Measured, NotApplicable
from lincorr.reproduce.verdicts import Test, all_of, binomial_above, bootstrap_greater
from lincorr.studies.logits.cases import CaseSpec, measure_cases, paper_cases
from lincorr.studies.logits.matrix import Grid, measure_matrix, prepare_grid
from lincorr.studies.logits.precision import precision_fits, measure_precision

PAPER_FIT = "ols"
OURS_FIT = "ridge-std"
# Table 2: the Hit@1 of City->Country (0.42), the less precise of the two relations the paper calls precise; a claim's
# `interest` says it again with its reason.
PRECISE_LEVEL = 0.42


def hit_at_1_test(row, interest: float | None = None) -> Test:
    """Hit@1 influenced of one relation and estimator against its chance level; `interest` a Hit@1 (not a rise above chance)."""
    trials, chance = row.n_pairs_influenced, row.chance_influenced[1]
    return binomial_above(round(row.hit_influenced[1] * trials), trials, chance, f"{row.label} Hit@1",
                          None if interest is None else max(interest - chance, 0.0))


def imprecise_test(row, level: float, interest: float) -> Test:
    """Hit@1 of a relation the paper calls imprecise below `level`, the Hit@1 of a precise W: its misses above 1 - level
    (exact binomial); the effect is how far below `level` it lies, judged against `interest`."""
    trials = row.n_pairs_influenced
    misses = trials - round(row.hit_influenced[1] * trials)
    return binomial_above(misses, trials, 1.0 - level, f"{row.label} rows whose top-1 is wrong (imprecise: Hit@1 below {level:g})",
                          interest)


def imprecise_interest(precise, level: float) -> float:
    """The smallest distance below `level` of a relation the paper calls imprecise (Table 2's Food->Taste, 0.28: 0.14).
    A relation's own distance would not do: X+1->X+2's Hit@1 of 0.00 puts it at the largest effect its test can have,
    which one right row excludes."""
    paper = paper_table("table2")
    return min(level - row.values["hit_influenced"][0] for row in paper.rows
               if row.relation.label not in precise and row.values["hit_influenced"][0] < level)


def precision_test(rows, precise, level: float, fit: str) -> Test:
    """Table 2 as the paper reads it: each relation it calls precise above chance at Hit@1, and each other one below
    `level` (the Hit@1 of its least precise precise relation), each with its own line."""
    interest = imprecise_interest(precise, level)
    parts = [hit_at_1_test(row, level) if row.label in precise else imprecise_test(row, level, interest) for row in rows]
    return all_of(parts, f"relations: precise ones above chance, the others below Hit@1 {level:g} ({fit})")


def precision(ctx: Context) -> Measured:
    """Table 2: Hit@Top-N of W, the paper's ols and lincorr's ridge-std; the relations the paper calls precise (settings'
    `precise`) tested above chance, the others below the precise level (`ctx.interest`)."""
    relations = ctx.chosen({r.label: r for r in paper_table("table2").relations()})
    table = measure_precision(ctx.lm, ctx.registry, relations, ctx.inputs(), precision_fits(FitConfig(alpha=1.0, n_boot=100), PAPER_FIT),
                            settings=ctx.collect)
    by_fit = {fit: [row for row in table.rows if row.estimator == fit] for fit in (PAPER_FIT, OURS_FIT)}
    precise = list(ctx.settings.get("precise", ()))
    if not any(row.label in precise for row in by_fit[PAPER_FIT]):
        raise NotApplicable("no relation the paper calls precise could be judged on this model: " + "; ".join(r for _, r in table.skipped))
    ours: dict[str, dict] = {row.label: {} for row in table.rows}
    for fit, rows in by_fit.items():
        for row in rows:
            ours[row.label][fit] = {"hit_influenced": [round(row.hit_influenced[k], 3) for k in (1, 3, 5)],
                                    "hit_influencing": [round(row.hit_influencing[k], 3) for k in (1, 3, 5)],
                                    "chance_at_1": round(row.chance_influenced[1], 4), "n_pairs": row.n_pairs_influenced}
    text = "; ".join(f"{label} ({'precise' if label in precise else 'imprecise'}) Hit@1 ols {v[PAPER_FIT]['hit_influenced'][0]:.2f} / "
                     f"ridge-std {v.get(OURS_FIT, {}).get('hit_influenced', [math.nan])[0]:.2f} (chance {v[PAPER_FIT]['chance_at_1']:.3f})"
                     for label, v in ours.items() if PAPER_FIT in v)
    level = float(ctx.interest) if ctx.interest is not None else PRECISE_LEVEL
    return Measured({"n_inputs": table.n_inputs, "precise": precise, "relations": ours, "skipped": dict(table.skipped)}, text,
                    precision_test(by_fit[PAPER_FIT], precise, level, PAPER_FIT),
                    precision_test(by_fit[OURS_FIT], precise, level, OURS_FIT) if by_fit[OURS_FIT] else None)


def mean(values) -> float:
    """The mean of `values` over those defined, rounded for a claim table; NaN for none."""
    values = np.asarray(values, float)
    return round(float(np.nanmean(values)), 3) if np.isfinite(values).any() else math.nan


def family_grid(ctx: Context) -> Grid:
    """The claim's grid: a family's prompts (or the settings' subset of them), or Fig. 3's cross-language panel."""
    family = ctx.settings["family"]
    if family == "cross-language":
        grid = Grid.cross_language(ctx.registry, ctx.settings.get("languages"))
        knowledge = ctx.settings.get("knowledge")
        return grid.without(set(grid.row_labels) - set(knowledge)) if knowledge else grid
    names = ctx.settings.get("prompts") or [spec.name for spec in ctx.registry.family(family)]
    return Grid.square(names, f"{family} family")


def cell_fit_config(ctx: Context) -> FitConfig:
    """How a family's cells are fitted: the claim's estimator (the paper's ols unless the settings name another)."""
    return FitConfig(estimator=ctx.settings.get("estimator", PAPER_FIT), alpha="cv", n_boot=10, n_control=1)


def table_cells(ctx: Context) -> list[tuple[str, str]]:
    """(source, target) prompt names of the relations of the settings' paper `table` (those the settings' `relations` name)."""
    relations = ctx.chosen({r.label: r for r in paper_table(str(ctx.settings["table"])).relations()})
    return [(r.source, r.target) for r in relations]


def cell_fits(ctx: Context) -> dict[tuple[str, str], PairResult]:
    """W of every cell of the claim, by (source, target): a paper table's relations (settings' `table`), else every
    off-diagonal cell of its family grid; fitted once per reproduction. Cells whose prompts have no usable domain for this
    tokenizer are left out, as the matrix study leaves them."""
    config = cell_fit_config(ctx)
    inputs = ctx.inputs()
    if "table" in ctx.settings:
        wanted = table_cells(ctx)
        prompts, skipped = registry_prompts(ctx.registry, list(dict.fromkeys(name for cell in wanted for name in cell)), ctx.lm.tokenizer)
        cells = [cell for cell in wanted if set(cell) <= set(prompts)]
        if not cells:
            raise NotApplicable("no relation of the table has usable domains on this model: " + "; ".join(r for _, r in skipped))
    else:
        grid, prompts, _ = prepare_grid(ctx.registry, family_grid(ctx), ctx.lm.tokenizer, len(inputs), config)
        cells = [cell for row in grid.cells for cell in row if cell and cell[0] != cell[1]]
    key = ("cell fits", tuple(cells), len(inputs), config.estimator)
    if key not in ctx.shared:
        tables = collect(ctx.lm, {name: prompts[name] for cell in cells for name in cell}, inputs, ctx.collect)
        ctx.shared[key] = {(s, t): fit_tables(tables[s], tables[t], config) for s, t in cells}
    return ctx.shared[key]


def gain_test(fits: Sequence[PairResult], fitted_on: Sequence[tuple[np.ndarray, np.ndarray]], ctx: Context, what: str) -> tuple[float, Test]:
    """The mean over cells of the label-wise r above N_CONTROL Ws fitted on shuffled pairs, tested by resampling the
    held-out inputs every cell shares (`units`); `fitted_on` is what each W was fitted on."""
    n_test = shared_test_size(fits)
    scores = [cell_scores(fit, tables) for fit, tables in zip(fits, fitted_on)]
    effect = float(labelwise_gain(scores, as_drawn(n_test))[0])
    return effect, bootstrap_greater(effect, labelwise_gain(scores, resamples(n_test)),
                                     f"{what} minus the mean of {N_CONTROL} Ws fitted on shuffled pairs, mean over {len(fits)} cells",
                                     ctx.interest, n_test, "held-out inputs")


def shared_test_size(fits: Sequence[PairResult]) -> int:
    """The number of held-out inputs every fit is scored on; fits on different held-out inputs cannot be resampled together."""
    first = fits[0].test_index
    if any(not np.array_equal(fit.test_index, first) for fit in fits):
        raise LincorrError("the cells of a claim must be scored on the same held-out inputs to be resampled together")
    return int(first.size)


def matrix(ctx: Context) -> Measured:
    """Fig. 3: a family's matrix (ols); the label-wise r of its off-diagonal cells above Ws fitted on shuffled pairs,
    tested over the held-out inputs every cell shares."""
    config = cell_fit_config(ctx)
    result = measure_matrix(ctx.lm, ctx.registry, family_grid(ctx), ctx.inputs(), config, ctx.collect)
    positions = [(i, j) for i, row in enumerate(result.grid.cells) for j, cell in enumerate(row) if cell and cell[0] != cell[1]]
    fits_by_cell = cell_fits(ctx)
    fits = [fits_by_cell[cast(tuple[str, str], result.grid.cells[i][j])] for i, j in positions]  # filled cells only
    gain, test = gain_test(fits, [(fit.source.values, fit.target.values) for fit in fits], ctx, "label-wise r")
    r = [fit.labelwise_r_mean for fit in fits]
    instancewise = [float(result.instancewise_r[i, j]) for i, j in positions]
    ours = {"n_inputs": result.n_inputs, "estimator": config.estimator, "rows": list(result.grid.row_labels),
            "columns": list(result.grid.column_labels), "n_cells": len(fits), "labelwise_r_mean": mean(r),
            "gain_over_control": round(gain, 3), "n_control": N_CONTROL, "instancewise_r_mean": mean(instancewise),
            "skipped": [name for name, _ in result.skipped]}
    text = (f"{len(fits)} cells of {len(result.grid.row_labels)}x{len(result.grid.column_labels)}: label-wise r {ours['labelwise_r_mean']:.2f} "
            f"({ours['gain_over_control']:+.2f} over {N_CONTROL} shuffled Ws), instance-wise r {ours['instancewise_r_mean']:.2f}")
    return Measured(ours, text, test)


def correlations(ctx: Context) -> Measured:
    """Table 14: the label-wise r of a paper table's relations (ols), above Ws fitted on shuffled pairs, tested over the
    held-out inputs the relations share."""
    fits = cell_fits(ctx)
    gain, test = gain_test(list(fits.values()), [(fit.source.values, fit.target.values) for fit in fits.values()], ctx, "label-wise r")
    ours: dict[str, Any] = {"n_inputs": len(ctx.inputs()), "estimator": cell_fit_config(ctx).estimator, "gain_over_control": round(gain, 3),
            "relations": {f"{s}->{t}": mean(fit.labelwise_r) for (s, t), fit in fits.items()}}
    text = "; ".join(f"{cell} r {r:.2f}" for cell, r in ours["relations"].items()) + f" ({gain:+.2f} over {N_CONTROL} shuffled Ws)"
    return Measured(ours, text, test)


def case_chance(n: int, right: int, k: int) -> float:
    """The chance that k of n words drawn at random include at least one of `right` of them."""
    return 1.0 - math.comb(n - right, k) / math.comb(n, k) if n >= k else 1.0


def case_fit(ctx: Context) -> FitConfig:
    """The fit behind a case table: the settings' `estimator` (the paper's ols by default, or lincorr's ridge-std)."""
    name = str(ctx.settings.get("estimator", PAPER_FIT))
    return next(config for config in precision_fits(FitConfig(n_boot=10), PAPER_FIT) if config.label == name)


def is_tested(spec: CaseSpec, tested) -> bool:
    """Whether the settings' `tested` (pairs "city->country"; None: every pair) names `spec`'s relation."""
    return tested is None or f"{spec.relation.source}->{spec.relation.target}" in tested


def cases(ctx: Context) -> Measured:
    """Tables 3, 15-17: top influenced/influencing words of W; the rows of the relations the settings' `tested` names
    ("city->country"; all by default) with known right answers tested against chance, the others shown. With the
    settings' `every_row`, a tested table's rows are every word of its domain (the paper's words among them, shown)."""
    paper_specs = paper_cases(str(ctx.settings["table"]))
    tested = ctx.settings.get("tested")
    specs = tuple(dataclasses.replace(spec, words=None) if ctx.settings.get("every_row") and is_tested(spec, tested) else spec
                  for spec in paper_specs)
    inputs = ctx.inputs()
    fit = case_fit(ctx)
    tables = measure_cases(ctx.lm, ctx.registry, specs, inputs, fit, ctx.collect)
    hits, chances, paper_hits = 0, [], []
    shown: dict[str, dict[str, list[str]]] = {}
    for spec, paper_spec, table in zip(specs, paper_specs, tables.tables):
        bound = bind_relation(ctx.registry, RelationSpec(spec.relation.source, spec.relation.target), ctx.lm.tokenizer, require_pairs=False)
        other = len(bound.target.domain if spec.direction == "influenced" else bound.source.domain)
        pair = f"{table.source}->{table.target}"
        rows_shown = [row for row in table.rows if paper_spec.words is None or row.word in paper_spec.words] or list(table.rows)
        shown.setdefault(pair, {}).update({row.word: [word for word, _ in row.top] for row in rows_shown})
        for row in table.rows:
            if row.right and is_tested(spec, tested):
                hit = any(word in row.right for word, _ in row.top)
                hits += hit
                chances.append(case_chance(other, len(row.right), table.k))
                if paper_spec.words is not None and row.word in paper_spec.words:
                    paper_hits.append(hit)
    ours = {"n_inputs": len(inputs), "estimator": fit.label, "tested": tested, "rows_with_reference": len(chances), "rows_hit": hits,
            "paper_rows_hit": [sum(paper_hits), len(paper_hits)],
            "tables": {pair: dict(list(rows.items())[:5]) for pair, rows in shown.items()}}
    if not chances:
        reason = ctx.settings.get("untested_reason", "the registry has no reference pairs for these prompts, so no word can be called right")
        return Measured(ours, f"{sum(len(r) for r in shown.values())} rows shown ({fit.label}); nothing judged", None, reason=reason)
    text = (f"{hits} of {len(chances)} rows of {', '.join(tested or shown)} have a right word in their top-{specs[0].k} "
            f"({fit.label}; chance {sum(chances) / len(chances):.3f} a row)"
            + (f"; the paper's rows: {sum(paper_hits)} of {len(paper_hits)}" if ctx.settings.get("every_row") else ""))
    return Measured(ours, text, binomial_above(hits, len(chances), sum(chances) / len(chances), "rows with a right word", ctx.interest))


STEPS = {"precision": precision, "matrix": matrix, "correlations": correlations, "cases": cases}
