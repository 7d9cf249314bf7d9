"""The steps behind Peng et al.'s resilience claims (§4.2, Appendix G): does W fitted before post-training still predict
the logits after it?

W is fitted on the reproduction's model (A, the base) and scored on the second checkpoint's logits
(B, `--eval-model`) for the same held-out inputs, beside B's own W and A's W on A. The cells are a
family's off-diagonal cells (Figs. 8, 9) or a paper table's relations (Table 9).
"""

from __future__ import annotations

from lincorr.collection import collect
from lincorr.fit import FitConfig, PairResult, fit_tables, fit_targets
from lincorr.prompts import registry_prompts
from lincorr.reproduce.pair import eval_lm
from lincorr.reproduce.peng.appendix import spread_of
from lincorr.reproduce.peng.logits import PAPER_FIT, family_grid, gain_test, mean, table_cells
from lincorr.reproduce.peng.units import N_CONTROL, cell_scores
from lincorr.reproduce.step import Context, Measured
from lincorr.studies.logits.resilience import check_same_tokenizer


def claim_cells(ctx: Context) -> list[tuple[str, str]]:
    """(source, target) prompt names: the relations of the settings' paper `table`, or the family grid's off-diagonal cells."""
    if "table" in ctx.settings:
        return table_cells(ctx)
    return [cell for row in family_grid(ctx).cells for cell in row if cell and cell[0] != cell[1]]


def carried_fits(ctx: Context) -> dict[tuple[str, str], dict[str, PairResult]]:
    """Per cell: A's W on B ("carried"), B's own W ("after") and A's W on A ("before"); fitted once per reproduction."""
    after_lm = eval_lm(ctx)
    check_same_tokenizer(ctx.lm, after_lm)
    cells = claim_cells(ctx)
    names = tuple(dict.fromkeys(name for cell in cells for name in cell))
    key = ("carried fits", names, tuple(cells), len(ctx.inputs()))
    if key not in ctx.shared:
        config = FitConfig(estimator=PAPER_FIT, alpha="cv", n_boot=10, n_control=1)
        prompts, _ = registry_prompts(ctx.registry, list(names), ctx.lm.tokenizer)
        before, after = (collect(lm, prompts, ctx.inputs(), ctx.collect) for lm in (ctx.lm, after_lm))
        ctx.shared[key] = {(s, t): {
            "carried": fit_targets(before[s], {t: before[t]}, config, evaluate_on=(after[s], {t: after[t]}))[t],
            "after": fit_tables(after[s], after[t], config), "before": fit_tables(before[s], before[t], config)}
            for s, t in cells}
    return ctx.shared[key]


def resilience(ctx: Context) -> Measured:
    """Figs. 8, 9 and Table 9: the label-wise r of A's W on B's logits above Ws fitted on shuffled pairs of A, tested over
    the held-out inputs every cell shares."""
    fits = carried_fits(ctx)
    carried = [cell["carried"] for cell in fits.values()]
    # The controls are fitted on A's tables, as W was, and scored on B's.
    gain, test = gain_test(carried, [(cell["before"].source.values, cell["before"].target.values) for cell in fits.values()], ctx,
                           "label-wise r of A's W on B")
    ours = {"n_inputs": len(ctx.inputs()), "estimator": PAPER_FIT, "eval_model": eval_lm(ctx).name, "n_cells": len(fits),
            "carried_r_mean": mean([fit.labelwise_r_mean for fit in carried]), "gain_over_control": round(gain, 3),
            "after_r_mean": mean([cell["after"].labelwise_r_mean for cell in fits.values()]),
            "before_r_mean": mean([cell["before"].labelwise_r_mean for cell in fits.values()]),
            "cells": {f"{s}->{t}": mean(cell["carried"].labelwise_r) for (s, t), cell in fits.items()}}
    text = (f"{len(fits)} cells: W of {ctx.lm.name} on {ours['eval_model']} r {ours['carried_r_mean']:.2f} ({gain:+.2f} over "
            f"{N_CONTROL} shuffled Ws); its own W {ours['after_r_mean']:.2f}, before {ours['before_r_mean']:.2f}")
    return Measured(ours, text, test)


def resilience_spread(ctx: Context) -> Measured:
    """Fig. 24: Fig. 23's spread (`appendix.spread_of`) of the label-wise r of A's W on B."""
    carried = {f"{s}->{t}": cell_scores(cell["carried"]) for (s, t), cell in carried_fits(ctx).items()}
    return spread_of(carried, "carried label-wise r", ctx.interest, n_inputs=len(ctx.inputs()), eval_model=eval_lm(ctx).name)


STEPS = {"resilience": resilience, "resilience_spread": resilience_spread}
