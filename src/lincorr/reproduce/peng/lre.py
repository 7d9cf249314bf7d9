"""The step behind `peng.table2.lre`: Table 2's question asked on the 47 LRE relations (Hernandez et al.), beyond the paper.

W is fitted between each relation's two prompts (`lincorr.studies.logits.lre`) the paper's way (ols)
and lincorr's (ridge-std), and judged by LRE's own subject-object pairs.
"""

from __future__ import annotations

from lincorr.fit import FitConfig
from lincorr.knowledge.lre import lre_relations
from lincorr.reproduce.peng.logits import OURS_FIT, PAPER_FIT, hit_at_1_test
from lincorr.reproduce.step import Context, Measured, NotApplicable
from lincorr.reproduce.verdicts import any_of
from lincorr.studies.logits.lre import LRE_FITS, SIGNIFICANCE, lre_precision
from lincorr.studies.logits.precision import precision_fits


def lre(ctx: Context) -> Measured:
    """Hit@1 of W on every LRE relation this tokenizer can judge, each tested against chance, per fit."""
    relations = lre_relations(names=tuple(ctx.settings.get("relations", ())))
    configs = [config for config in precision_fits(FitConfig(alpha=1.0, n_boot=100), PAPER_FIT) if config.label in LRE_FITS]
    table = lre_precision(ctx.lm, relations, ctx.inputs(), configs, max_subjects=ctx.settings.get("max_subjects"),
                          settings=ctx.collect)
    tests = {fit: [(row, hit_at_1_test(row, ctx.interest)) for row in table.rows if row.estimator == fit] for fit in (PAPER_FIT, OURS_FIT)}
    if not tests[PAPER_FIT]:
        raise NotApplicable("no LRE relation could be judged on this model: " + "; ".join(r for _, r in table.skipped[:3]))
    above = {fit: [row.label for row, test in pairs if test.p_value < SIGNIFICANCE] for fit, pairs in tests.items()}
    ours = {"n_inputs": table.n_inputs, "max_subjects": ctx.settings.get("max_subjects"), "judged": len(tests[PAPER_FIT]),
            "skipped": len(table.skipped), "above_chance": {fit: len(labels) for fit, labels in above.items()},
            "hit_at_1": {fit: {row.label: round(row.hit_influenced[1], 3) for row, _ in pairs} for fit, pairs in tests.items()}}
    text = (f"{len(tests[PAPER_FIT])} of {len(relations)} relations judged; Hit@1 above chance (p < {SIGNIFICANCE}) on "
            + ", ".join(f"{len(above[fit])} with {fit}" for fit in (PAPER_FIT, OURS_FIT)))
    return Measured(ours, text, any_of([test for _, test in tests[PAPER_FIT]], "Hit@1 binomials (ols)"),
                    any_of([test for _, test in tests[OURS_FIT]], "Hit@1 binomials (ridge-std)") if tests[OURS_FIT] else None)


STEPS = {"lre": lre}
