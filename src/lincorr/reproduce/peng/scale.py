"""The step behind `peng.fig4`: W's precision at each size of a bundled size series (`reproduce.series`).

Figure 4 has City->Country's precision grow with LLaMA-3's size while CEO->Company's stays low. At every size W is
fitted on the same vocabulary inputs (one tokenizer, one seed), so both sizes judge the same reference subjects: the
growth is tested paired over them (exact McNemar on who is right at W's top-1, size by size up the series), and the
relation that stays low is held below Table 2's precise level at every size, as `peng.table2` holds an imprecise one.
W is the settings' estimator (the paper's ols by default), the other of ols and ridge-std beside.
"""

from __future__ import annotations

import dataclasses

from lincorr.fit import FitConfig, fit_relation
from lincorr.metrics import hit_at_k
from lincorr.paper import paper_table
from lincorr.reproduce.peng.logits import OURS_FIT, PAPER_FIT, PRECISE_LEVEL, imprecise_interest, imprecise_test
from lincorr.reproduce.series import Member, per_size
from lincorr.reproduce.step import Context, Measured
from lincorr.reproduce.verdicts import Test, all_of, mcnemar_gain, relabelled
from lincorr.studies.logits.precision import PrecisionResult, precision_fits, precision_of, ranked_weights

COMMAND = "lincorr reproduce peng --model {model} --only peng.fig4"


@dataclasses.dataclass(frozen=True)
class SizePrecision:
    """One relation at one size and estimator: its Table 2 row, and per reference subject whether W's top-1 target is right."""

    row: PrecisionResult
    right_at_1: dict[str, bool]


def size_precision(ctx: Context, label: str, fit: FitConfig) -> SizePrecision:
    """W of the Table 2 relation `label` on ctx's model at the settings' N, judged by its reference pairs."""
    spec = next(r for r in paper_table("table2").relations() if r.label == label)
    bound = fit_relation(ctx.lm, ctx.registry, spec, n_inputs=int(ctx.settings["n_inputs"]), fit=fit, settings=ctx.collect)
    weights, words = ranked_weights(bound.fit), bound.source.domain.words
    right = {words[row]: hit_at_k(weights, {row: columns}, (1,))[1] == 1.0 for row, columns in bound.fit.reference.columns.items()}  # type: ignore[union-attr]  # a Table 2 relation always has its reference
    return SizePrecision(precision_of(bound.fit, label=spec.label, reference=bound.reference), right)


def growth_test(smaller: tuple[Member, SizePrecision], larger: tuple[Member, SizePrecision], interest: float | None) -> Test:
    """More subjects right at top-1 on the larger size than on the smaller, over the subjects both judge (exact McNemar)."""
    (small, before), (large, after) = smaller, larger
    shared = sorted(set(before.right_at_1) & set(after.right_at_1))
    test = mcnemar_gain([before.right_at_1[s] for s in shared], [after.right_at_1[s] for s in shared], "right at top-1", interest,
                        "reference subjects")
    return relabelled(test, f"{before.row.label} Hit@1, {small.alias} -> {large.alias}: {test.name}")


def fig4_test(sizes: list[tuple[Member, dict[str, SizePrecision]]], grows: str, low: str, interest: float | None, fit: str) -> Test:
    """`grows` more precise at each size than at the one below it, and `low` below the precise level at every size."""
    rising = [growth_test((a, at_a[grows]), (b, at_b[grows]), interest) for (a, at_a), (b, at_b) in zip(sizes, sizes[1:])]
    low_interest = imprecise_interest([grows], PRECISE_LEVEL)
    staying = [relabelled(test, f"{member.alias}: {test.name}")
               for member, at in sizes for test in [imprecise_test(at[low].row, PRECISE_LEVEL, low_interest)]]
    return all_of(rising + staying, f"parts: {grows} rising with size, {low} below Hit@1 {PRECISE_LEVEL:g} at every size ({fit})")


def fig4(ctx: Context) -> Measured:
    """Figure 4: the settings' `grows` relation more precise on each larger size of the `series`, its `stays_low` relation
    below Table 2's precise level at every size; the headline `estimator` tested, the other of ols and ridge-std beside."""
    grows, low = str(ctx.settings["grows"]), str(ctx.settings["stays_low"])
    headline = str(ctx.settings.get("estimator", PAPER_FIT))
    fits = [config for config in precision_fits(FitConfig(n_boot=10), headline) if config.label in (PAPER_FIT, OURS_FIT)]
    sizes = per_size(ctx, COMMAND, lambda size: {config.label: {label: size_precision(size, label, config) for label in dict.fromkeys((grows, low))}
                                                 for config in fits})
    ours = {"series": str(ctx.settings["series"]), "n_inputs": int(ctx.settings["n_inputs"]), "estimator": headline,
            "sizes": [{"model": member.alias, **{fit: {label: {"hit_at_1": round(p.row.hit_influenced[1], 3), "n_pairs": p.row.n_pairs_influenced,
                                                                 "chance_at_1": round(p.row.chance_influenced[1], 4)}
                                                         for label, p in by_label.items()}
                                                  for fit, by_label in at.items()}}
                      for member, at in sizes]}
    text = "; ".join(f"{member.alias}: " + ", ".join(f"{label} Hit@1 {p.row.hit_influenced[1]:.2f} of {p.row.n_pairs_influenced}"
                                                    for label, p in at[headline].items())
                     for member, at in sizes) + f" ({headline}; {len(sizes)} sizes: a difference between models, not a trend)"
    tests = {config.label: fig4_test([(member, at[config.label]) for member, at in sizes], grows, low, ctx.interest, config.label)
             for config in fits}
    return Measured(ours, text, tests[headline], next((test for fit, test in tests.items() if fit != headline), None))


STEPS = {"precision_by_size": fig4}
