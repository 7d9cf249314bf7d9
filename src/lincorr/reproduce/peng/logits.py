"""The steps behind Peng et al.'s logit claims (§3): W precision, correlation matrices, case tables.

Each runs a study of `lincorr.studies.logits` the paper's way (ols, the paper's relations) at
the claim's N, with lincorr's estimator beside it where lincorr's default differs, and tests
the phenomenon with `verdicts`.
"""

from __future__ import annotations

import math

import numpy as np

from lincorr.collection import collect
from lincorr.fit import FitConfig, PairResult, fit_tables
from lincorr.paper import paper_table
from lincorr.relations import RelationSpec, bind_relation
from lincorr.reproduce.step import Context, Measured, NotApplicable
from lincorr.reproduce.verdicts import Test, binomial_above, any_of, paired_greater
from lincorr.studies.logits.cases import measure_cases, paper_cases
from lincorr.studies.logits.matrix import Grid, measure_matrix, prepare_grid
from lincorr.studies.logits.precision import precision_fits, measure_precision

PAPER_FIT = "ols"
OURS_FIT = "ridge-std"


def hit_at_1_test(row) -> Test:
    """Hit@1 influenced of one relation and estimator against its chance level."""
    trials = row.n_pairs_influenced
    return binomial_above(round(row.hit_influenced[1] * trials), trials, row.chance_influenced[1], f"{row.label} Hit@1")


def precision(ctx: Context) -> Measured:
    """Table 2: Hit@Top-N of W, the paper's ols and lincorr's ridge-std, tested as Hit@1 above chance per relation."""
    relations = ctx.chosen({r.label: r for r in paper_table("table2").relations()})
    table = measure_precision(ctx.lm, ctx.registry, relations, ctx.inputs(), precision_fits(FitConfig(alpha=1.0, n_boot=100), PAPER_FIT),
                            settings=ctx.collect)
    by_fit = {fit: [row for row in table.rows if row.estimator == fit] for fit in (PAPER_FIT, OURS_FIT)}
    if not by_fit[PAPER_FIT]:
        raise NotApplicable("no relation of Table 2 could be judged on this model: " + "; ".join(r for _, r in table.skipped))
    ours = {row.label: {} for row in table.rows}
    for fit, rows in by_fit.items():
        for row in rows:
            ours[row.label][fit] = {"hit_influenced": [round(row.hit_influenced[k], 3) for k in (1, 3, 5)],
                                    "hit_influencing": [round(row.hit_influencing[k], 3) for k in (1, 3, 5)],
                                    "chance_at_1": round(row.chance_influenced[1], 4), "n_pairs": row.n_pairs_influenced}
    text = "; ".join(f"{label} Hit@1 ols {v[PAPER_FIT]['hit_influenced'][0]:.2f} / ridge-std "
                     f"{v.get(OURS_FIT, {}).get('hit_influenced', [math.nan])[0]:.2f} (chance {v[PAPER_FIT]['chance_at_1']:.3f})"
                     for label, v in ours.items() if PAPER_FIT in v)
    return Measured({"n_inputs": table.n_inputs, "relations": ours, "skipped": dict(table.skipped)}, text,
                    any_of([hit_at_1_test(r) for r in by_fit[PAPER_FIT]], "Hit@1 binomials (ols)"),
                    any_of([hit_at_1_test(r) for r in by_fit[OURS_FIT]], "Hit@1 binomials (ridge-std)") if by_fit[OURS_FIT] else None)


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


def cell_fits(ctx: Context) -> dict[tuple[str, str], PairResult]:
    """W of every off-diagonal cell of the claim's family grid, by (source, target); fitted once per reproduction.

    The grid keeps the prompts with a usable domain for this tokenizer, as the matrix study's.
    """
    config = cell_fit_config(ctx)
    inputs = ctx.inputs()
    grid, prompts, _ = prepare_grid(ctx.registry, family_grid(ctx), ctx.lm.tokenizer, len(inputs), config)
    key = ("cell fits", grid.prompt_names(), len(inputs), config.estimator)
    if key not in ctx.shared:
        tables = collect(ctx.lm, prompts, inputs, ctx.collect)
        cells = [cell for row in grid.cells for cell in row if cell and cell[0] != cell[1]]
        ctx.shared[key] = {(s, t): fit_tables(tables[s], tables[t], config) for s, t in cells}
    return ctx.shared[key]


def matrix(ctx: Context) -> Measured:
    """Fig. 3: a family's matrix (ols); the label-wise r of each off-diagonal cell's target words tested against W fitted on shuffled pairs."""
    config = cell_fit_config(ctx)
    result = measure_matrix(ctx.lm, ctx.registry, family_grid(ctx), ctx.inputs(), config, ctx.collect)
    positions = [(i, j) for i, row in enumerate(result.grid.cells) for j, cell in enumerate(row) if cell and cell[0] != cell[1]]
    fits_by_cell = cell_fits(ctx)
    fits = [fits_by_cell[result.grid.cells[i][j]] for i, j in positions]
    r = [fit.labelwise_r_mean for fit in fits]
    control = [float(np.nanmean(fit.control_labelwise_r)) for fit in fits]
    # Tested over every target word of every cell: a 2-cell matrix has too few cells for a rank test of its own.
    by_word = [np.concatenate([getattr(fit, name) for fit in fits]) for name in ("labelwise_r", "control_labelwise_r")]
    instancewise = [float(result.instancewise_r[i, j]) for i, j in positions]
    ours = {"n_inputs": result.n_inputs, "estimator": config.estimator, "rows": list(result.grid.row_labels),
            "columns": list(result.grid.column_labels), "n_cells": len(fits), "labelwise_r_mean": mean(r),
            "control_r_mean": mean(control), "instancewise_r_mean": mean(instancewise),
            "skipped": [name for name, _ in result.skipped]}
    text = (f"{len(fits)} cells of {len(result.grid.row_labels)}x{len(result.grid.column_labels)}: label-wise r {ours['labelwise_r_mean']:.2f} "
            f"(shuffled {ours['control_r_mean']:.2f}), instance-wise r {ours['instancewise_r_mean']:.2f}")
    return Measured(ours, text, paired_greater(*by_word, "label-wise r of each target word vs W fitted on shuffled pairs"))


def case_chance(n: int, right: int, k: int) -> float:
    """The chance that k of n words drawn at random include at least one of `right` of them."""
    return 1.0 - math.comb(n - right, k) / math.comb(n, k) if n >= k else 1.0


def cases(ctx: Context) -> Measured:
    """Tables 3, 15-17: top influenced/influencing words of W (ols); the rows with known right answers tested against chance."""
    specs = paper_cases(str(ctx.settings["table"]))
    inputs = ctx.inputs()
    tables = measure_cases(ctx.lm, ctx.registry, specs, inputs, FitConfig(estimator=PAPER_FIT, n_boot=10), ctx.collect)
    hits, chances, shown = 0, [], {}
    for spec, table in zip(specs, tables.tables):
        bound = bind_relation(ctx.registry, RelationSpec(spec.relation.source, spec.relation.target), ctx.lm.tokenizer, require_pairs=False)
        other = len(bound.target.domain if spec.direction == "influenced" else bound.source.domain)
        for row in table.rows:
            shown.setdefault(f"{table.source}->{table.target}", {})[row.word] = [word for word, _ in row.top]
            if row.right:
                hits += any(word in row.right for word, _ in row.top)
                chances.append(case_chance(other, len(row.right), table.k))
    ours = {"n_inputs": len(inputs), "rows_with_reference": len(chances), "rows_hit": hits,
            "tables": {pair: dict(list(rows.items())[:5]) for pair, rows in shown.items()}}
    if not chances:
        return Measured(ours, f"{sum(len(r) for r in shown.values())} rows; no reference pairs to judge them",
                        None, reason="the registry has no reference pairs for these prompts, so no word can be called right")
    text = f"{hits} of {len(chances)} rows have a right word in their top-{specs[0].k} (chance {sum(chances) / len(chances):.3f} a row)"
    return Measured(ours, text, binomial_above(hits, len(chances), sum(chances) / len(chances), "rows with a right word"))


STEPS = {"precision": precision, "matrix": matrix, "cases": cases}
