"""The tests of a paper's phenomena (scipy.stats), and the verdict each outcome earns.

A step measures; one of these functions turns what it measured into a `Test`: the statistic, a
one-sided p-value and what was tested, in words. `verdict` is the only rule that reads a test:
reproduced when the effect points the paper's way and p < ALPHA.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import scipy.stats

ALPHA = 0.05
VERDICTS = ("reproduced", "not reproduced", "not applicable")


@dataclasses.dataclass(frozen=True)
class Test:
    """One test of a phenomenon: its name and statistic, a one-sided p-value, and whether the effect points the paper's way."""

    name: str
    statistic: float
    p_value: float
    direction_holds: bool

    def summary(self) -> dict:
        return dataclasses.asdict(self)


def verdict(test: Test | None) -> str:
    """`reproduced` when the effect points the paper's way with p < ALPHA, `not reproduced` otherwise; no test: `not applicable`."""
    if test is None:
        return "not applicable"
    return "reproduced" if test.direction_holds and test.p_value < ALPHA else "not reproduced"


def binomial_above(successes: int, trials: int, chance: float, what: str = "hits") -> Test:
    """More `successes` out of `trials` than a rate of `chance` gives (exact binomial, one-sided)."""
    result = scipy.stats.binomtest(int(successes), int(trials), float(chance), alternative="greater")
    return Test(f"binomial: {successes}/{trials} {what} vs chance {chance:.3g}", successes / trials, float(result.pvalue),
                successes / trials > chance)


def mcnemar_gain(before: Sequence[bool], after: Sequence[bool], what: str = "right") -> Test:
    """Paired: more items turn right than turn wrong (exact McNemar: a binomial test on the discordant pairs, one-sided)."""
    before, after = np.asarray(before, bool), np.asarray(after, bool)
    gained, lost = int(np.sum(after & ~before)), int(np.sum(before & ~after))
    p = float(scipy.stats.binomtest(gained, gained + lost, 0.5, alternative="greater").pvalue) if gained + lost else 1.0
    return Test(f"McNemar (exact): {gained} became {what}, {lost} stopped being, of {before.size}", float(gained - lost), p, gained > lost)


def fisher_greater(hits: int, n: int, control_hits: int, control_n: int, what: str = "real vs control") -> Test:
    """The rate `hits / n` above `control_hits / control_n` (Fisher's exact test, one-sided); the statistic is the odds ratio."""
    table = [[hits, n - hits], [control_hits, control_n - control_hits]]
    odds, p = scipy.stats.fisher_exact(table, alternative="greater")
    return Test(f"Fisher exact: {what} {hits}/{n} vs {control_hits}/{control_n}", float(odds), float(p),
                hits / max(n, 1) > control_hits / max(control_n, 1))


def paired_greater(values: Sequence[float], controls: Sequence[float], what: str = "r vs shuffled control") -> Test:
    """`values` above their paired `controls` (Wilcoxon signed-rank, one-sided); the statistic is the mean difference."""
    values, controls = np.asarray(values, float), np.asarray(controls, float)
    keep = np.isfinite(values) & np.isfinite(controls)
    difference = values[keep] - controls[keep]
    if difference.size == 0 or not difference.any():
        return Test(f"Wilcoxon signed-rank: {what}, {difference.size} pairs", 0.0, 1.0, False)
    p = float(scipy.stats.wilcoxon(difference, alternative="greater").pvalue)
    return Test(f"Wilcoxon signed-rank: {what}, {difference.size} pairs", float(difference.mean()), p, difference.mean() > 0)


def combined(tests: Sequence[Test], what: str) -> Test:
    """Several one-sided tests of one claim as one (Fisher's method); the direction must hold in most of them."""
    if len(tests) == 1:
        return tests[0]
    statistic, p = scipy.stats.combine_pvalues([t.p_value for t in tests], method="fisher")
    holding = sum(t.direction_holds for t in tests)
    return Test(f"Fisher's combination of {len(tests)} {what} ({holding} pointing the paper's way)", float(statistic), float(p),
                2 * holding > len(tests))


def ranks_greater(values: Sequence[float], others: Sequence[float], what: str = "values vs others") -> Test:
    """`values` tend to exceed `others` (Mann-Whitney U, one-sided); the statistic is the common-language effect size."""
    values, others = np.asarray(values, float), np.asarray(others, float)
    values, others = values[np.isfinite(values)], others[np.isfinite(others)]
    if not values.size or not others.size:
        return Test(f"Mann-Whitney U: {what}, {values.size} vs {others.size}: a group is empty", 0.5, 1.0, False)
    result = scipy.stats.mannwhitneyu(values, others, alternative="greater")
    effect = float(result.statistic) / (values.size * others.size)
    return Test(f"Mann-Whitney U: {what}, {values.size} vs {others.size}", effect, float(result.pvalue), effect > 0.5)
