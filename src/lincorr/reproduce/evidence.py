"""Each test kind of `verdicts` read as one estimator with its two one-sided tests against any value of the effect.

A claim is decided (`decisions.decide`) by two one-sided tests of one estimator: "the effect is at most θ" rejected
(`p_above(θ)`, read at θ = 0) and "the effect is at least θ" rejected (`p_below(θ)`, read at θ = the effect of
interest Δ). Both come from one method, so the bounds that invert them at a level are the claim's interval and the
verdict can be read off it. Each kind below is made from the arguments its constructor in `verdicts` was called with
(the test's recipe), so a stored claim is read again by the current code without measuring it:

- a rate above chance (`binomial_above`): exact binomial tests, Clopper-Pearson bounds;
- paired rates (`mcnemar_gain`): Tango's score test of a difference of paired proportions (at θ = 0, McNemar's z);
- two rates (`fisher_greater`): Miettinen and Nurminen's score test of a difference of independent proportions;
- paired values (`paired_greater`): Student's t on the mean difference;
- a resampled effect (`bootstrap_greater`): the bias-corrected percentile bootstrap (BC), expanded for few units as
  Hesterberg's expanded percentile interval is (BCa's acceleration would need the units' own values, which a stored test
  does not keep);
- a resampled effect with each resample's own standard error (`studentized_greater`): the bootstrap-t, whose bounds
  are the estimate less its standard error times the resamples' t quantiles (a bias of the resamples moves them the
  other way, where the BC bounds cannot pass the draws);
- a correlation (`correlation_above`): Fisher's z over the independent units;
- ranks of two groups (`ranks_greater`): the common-language effect (AUC) with a score test on the arcsine scale,
  Hanley and McNeil's variance taken at the value tested (at θ = 0, the Mann-Whitney variance);
- each of several parts (`all_of`): the weakest part, as a share of its own Δ when the parts' Δs differ; "at most θ"
  is rejected only where every part rejects (intersection-union), "at least θ" where any part does at the level over
  the number of parts (Bonferroni);
- any of several parts (`any_of`): the share of parts whose own test is below ALPHA, tested against the share ALPHA
  would give by chance (a binomial over the parts, which assumes them independent);
- a part relabelled with a condition the step checked (`relabelled`): the part's tests, "at most θ" never rejected
  where the condition failed.

`separation` is how far Δ lies from 0 in standard errors of the estimator at this budget (a planning figure: it gives
the power of each test at Δ and at 0, and the units that would reach a power of 0.8); `floors` the smallest p-value
each test can reach at this budget, whatever the data (an exact test's, a bootstrap's over its draws).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np
import scipy.stats
# The distributions' functions without a frozen scipy.stats object's cost: the calibration decides many thousand claims.
from scipy.special import bdtr, bdtrc, ndtr, ndtri, stdtr

from lincorr.reproduce.estimator import Evidence
from lincorr.reproduce.rates import fisher_greater, mcnemar_gain
from lincorr.reproduce.verdicts import ALPHA, Test, fisher_z, from_json, studentized_draws


def evidence_of(test: Test) -> Evidence:
    """The estimator and one-sided tests of `test`, made from its recipe; from its stored effect and 95% interval (a normal
    approximation) where it has none."""
    if test.recipe and test.recipe.get("test") in KINDS:
        arguments = {name: from_json(value) for name, value in test.recipe["arguments"].items()}
        return KINDS[test.recipe["test"]](**arguments)
    return as_stored(test)


def as_stored(test: Test) -> Evidence:
    """A test without a recipe: normal tests on its effect with the standard error its 95% interval implies."""
    if test.effect is None or test.interval is None or not all(map(math.isfinite, test.interval)) or math.isnan(test.p_value):
        return untestable(test.name, test.interest, test.units, test.unit)
    se = max((test.interval[1] - test.interval[0]) / (2 * scipy.stats.norm.isf(0.025)), 1e-12)
    return normal_evidence(f"normal approximation from its stored interval: {test.name}", test.effect, se, test.interest,
                           test.units, test.unit)


def normal_evidence(method: str, effect: float, se: float, interest: float | None, units: int | None, unit: str) -> Evidence:
    return Evidence(method, effect, lambda theta: float(ndtr((theta - effect) / se)),
                    lambda theta: float(ndtr((effect - theta) / se)), (effect - 40 * se, effect + 40 * se),
                    interest, None if interest is None else interest / se, (0.0, 0.0), units, unit)


def binomial_above(successes: int, trials: int, chance: float, what: str = "hits", interest: float | None = None) -> Evidence:
    """The rate above `chance`, exact binomial tests either way (Clopper-Pearson bounds)."""
    successes, trials, chance = int(successes), int(trials), float(chance)

    def p_above(theta: float) -> float:
        return 1.0 if successes == 0 else float(bdtrc(successes - 1, trials, min(max(chance + theta, 0.0), 1.0)))

    def p_below(theta: float) -> float:
        return 1.0 if successes == trials else float(bdtr(successes, trials, min(max(chance + theta, 0.0), 1.0)))

    rate = (successes + 0.5) / (trials + 1)
    se = math.sqrt(rate * (1 - rate) / max(trials, 1))
    floors = (chance**trials, (1 - min(chance + interest, 1.0)) ** trials if interest is not None else 0.0)
    return Evidence(f"exact binomial, {successes}/{trials} {what} vs chance {chance:.3g}", successes / max(trials, 1) - chance,
                    p_above, p_below, (-chance, 1 - chance), interest, None if interest is None else interest / se, floors,
                    trials, what)


def paired_greater(values, controls, what: str = "r vs shuffled control", interest: float | None = None,
                   unit: str = "pairs") -> Evidence:
    """The mean of the paired differences, Student's t either way."""
    values, controls = np.asarray(values, float), np.asarray(controls, float)
    keep = np.isfinite(values) & np.isfinite(controls)
    difference = values[keep] - controls[keep]
    n = int(difference.size)
    if n < 2:
        return untestable(f"paired t: {what}, {n} {unit}", interest, n, unit)
    mean, se = float(difference.mean()), float(difference.std(ddof=1)) / math.sqrt(n)
    if se == 0:  # every difference the same: the mean is known exactly
        return Evidence(f"paired t: {what}, {n} {unit} (every difference {mean:.3g})", mean,
                        lambda theta: 0.0 if mean > theta else 1.0, lambda theta: 0.0 if mean < theta else 1.0,
                        (mean - 1.0, mean + 1.0), interest, math.inf if interest else None, (0.0, 0.0), n, unit)
    spread = max(abs(mean), se) * 1e3
    return Evidence(f"paired t: {what}, mean of {n} {unit}", mean, lambda theta: float(stdtr(n - 1, (theta - mean) / se)),
                    lambda theta: float(stdtr(n - 1, (mean - theta) / se)), (mean - spread, mean + spread), interest,
                    None if interest is None else interest / se, (0.0, 0.0), n, unit)


def bootstrap_greater(estimate: float, resampled, what: str, interest: float | None = None, units: int | None = None,
                      unit: str = "inputs") -> Evidence:
    """The effect judged by its resamples: the bias-corrected percentile bootstrap (BC), whose bounds are the resamples'
    quantiles at Φ(2·z0 ± z) and whose one-sided p-values invert them (z0: the estimate's place among its resamples),
    expanded for few units (`tail`)."""
    finite = np.sort(np.asarray(resampled, float)[np.isfinite(np.asarray(resampled, float))])
    draws = finite.size
    if draws < 2 or finite[0] == finite[-1]:
        return untestable(f"bootstrap over {units or '?'} {unit}: {what}, {draws} distinct resamples", interest, units, unit)
    estimate = float(estimate)
    below = (np.searchsorted(finite, estimate, "left") + np.searchsorted(finite, estimate, "right")) / 2
    z0 = float(ndtri(min(max(below / draws, 0.5 / draws), 1 - 0.5 / draws)))

    def share_at_most(theta: float) -> float:  # kept inside (0, 1), as a resample count of 0 or all says "beyond the draws"
        return (np.searchsorted(finite, theta, "right") + 0.5) / (draws + 1)

    def tail(position: float) -> float:
        """The one-sided p of a normal position among the resamples, expanded for few units (Hesterberg's expanded
        percentile: read on Student's t over n - 1 after shrinking by sqrt((n - 1) / n), so that with normal units the
        bounds are as wide as the t interval's, where the plain percentiles are too narrow)."""
        if not units or units < 3:
            return float(ndtr(position))
        return float(stdtr(units - 1, position * math.sqrt((units - 1) / units)))

    def p_above(theta: float) -> float:
        return tail(ndtri(share_at_most(theta)) - 2 * z0)

    se = float(finite.std(ddof=1))
    fewest = ndtri(0.5 / (draws + 1))  # the share at or below a value beyond every draw
    floors = (tail(fewest - 2 * z0), tail(fewest + 2 * z0))
    # The bounds are the extreme draws: the bootstrap says nothing of values beyond them.
    return Evidence(f"bias-corrected bootstrap over {units or '?'} {unit} ({draws} resamples, the estimate at the "
                    f"{ndtr(z0):.0%} point of them): {what}", estimate, p_above, lambda theta: 1.0 - p_above(theta),
                    (float(finite[0]), float(finite[-1])), interest, None if interest is None or se == 0 else interest / se,
                    floors, bounded=False, units=units, unit=unit)


def studentized_greater(estimate: float, se: float, resampled, resampled_se, what: str, interest: float | None = None,
                        units: int | None = None, unit: str = "inputs") -> Evidence:
    """The effect judged by the bootstrap-t: each resample's distance from the estimate in its own standard error stands
    for the estimate's distance from the effect in `se`, so "at most θ" is rejected at the share of t* at or above
    (estimate - θ) / se, and the bounds are estimate - se · t*. Where the resamples sit below the estimate (resampling
    repeats units, and a spread over noisier values grows), the bounds move the other way, past the draws' range that
    bounds the BC interval; every p can reach 1 / (draws + 1)."""
    t = np.sort(studentized_draws(estimate, resampled, resampled_se))
    draws = t.size
    if draws < 2 or not se > 0 or not math.isfinite(estimate):
        return untestable(f"bootstrap-t over {units or '?'} {unit}: {what}, {draws} usable resamples", interest, units, unit)

    def p_above(theta: float) -> float:
        return float((draws - np.searchsorted(t, (estimate - theta) / se, "left") + 1) / (draws + 1))

    def p_below(theta: float) -> float:
        return float((np.searchsorted(t, (estimate - theta) / se, "right") + 1) / (draws + 1))

    floor = 1 / (draws + 1)
    return Evidence(f"bootstrap-t over {units or '?'} {unit} ({draws} resamples, each with its own standard error): {what}", estimate,
                    p_above, p_below, (estimate - se * float(t[-1]), estimate - se * float(t[0])), interest,
                    None if interest is None else interest / se, (floor, floor), bounded=False, units=units, unit=unit)


def correlation_above(name: str, r: float, p_value: float, units: int, unit: str, interest: float | None, control: float = 0.0) -> Evidence:
    """A Pearson r less `control`, z-tests on Fisher's z over the `units` independent units either way (the caller's
    permutation p, of r above `control` alone, stays in the claim's test)."""
    if not (math.isfinite(r) and math.isfinite(control)):  # a correlation over constant data has none
        return untestable(f"Fisher's z over {units} {unit}: {name}: r is {r}", interest, int(units), unit)
    se = 1 / math.sqrt(max(int(units) - 3, 1))
    z = fisher_z(r)

    def p_above(theta: float) -> float:
        return float(ndtr((fisher_z(control + theta) - z) / se))

    separation = None if interest is None else (fisher_z(control + interest) - fisher_z(control)) / se
    return Evidence(f"Fisher's z over {units} {unit}: {name}", r - control, p_above, lambda theta: 1.0 - p_above(theta),
                    (-1 - control + 1e-9, 1 - control - 1e-9), interest, separation, (0.0, 0.0), int(units), unit)


def ranks_greater(values, others, what: str = "values vs others", interest: float | None = None) -> Evidence:
    """The common-language effect (AUC) above 1/2, a score test either way on arcsin(2·AUC - 1) (`angle`), with Hanley and
    McNeil's variance at the AUC tested carried to that scale by its derivative."""
    ours, theirs = np.asarray(values, float), np.asarray(others, float)
    ours, theirs = ours[np.isfinite(ours)], theirs[np.isfinite(theirs)]
    n1, n2 = ours.size, theirs.size
    if not n1 or not n2:
        return untestable(f"AUC: {what}, {n1} vs {n2}: a group is empty", interest, n1 + n2, "items")
    auc = float(scipy.stats.mannwhitneyu(ours, theirs).statistic) / (n1 * n2)
    observed = angle(auc)

    def z(theta: float) -> float:
        tested = 0.5 + theta
        return (observed - angle(tested)) * math.sqrt(tested * (1 - tested)) / hanley_mcneil_se(tested, n1, n2)

    return Evidence(f"AUC score test: {what}, {n1} vs {n2}", auc - 0.5, lambda theta: float(ndtr(-z(theta))),
                    lambda theta: float(ndtr(z(theta))), (-0.5 + 1e-9, 0.5 - 1e-9), interest,
                    None if interest is None else interest / hanley_mcneil_se(0.5, n1, n2), (0.0, 0.0), n1 + n2, "items")


def angle(auc: float) -> float:
    """arcsin(2·AUC - 1): the scale on which the AUC's sampling distribution is nearly symmetric both at 1/2 (where the
    logit's stretch makes a test liberal with few units) and near 1 (where the AUC's own skew does)."""
    return math.asin(min(max(2 * auc - 1, -1.0), 1.0))


def hanley_mcneil_se(auc: float, n1: int, n2: int) -> float:
    """Hanley and McNeil's (1982) standard error of an AUC of `auc` from groups of `n1` and `n2`."""
    q1, q2 = auc / (2 - auc), 2 * auc**2 / (1 + auc)
    return math.sqrt(max(auc * (1 - auc) + (n1 - 1) * (q1 - auc**2) + (n2 - 1) * (q2 - auc**2), 1e-12) / (n1 * n2))


def untestable(name: str, interest: float | None = None, units: int | None = None, unit: str = "") -> Evidence:
    """No evidence either way: neither test ever rejects, and the effect is unknown."""
    return Evidence(name, math.nan, lambda theta: 1.0, lambda theta: 1.0, (-math.inf, math.inf), interest, None, (0.0, 0.0),
                    units=units, unit=unit or "")


def relabelled(test: Test, name: str, holds: bool = True) -> Evidence:
    """`test`'s evidence; where the step's condition failed, "at most θ" is never rejected (no effect can be claimed)."""
    inner = evidence_of(test)
    if holds:
        return inner
    return dataclasses.replace(inner, method=f"{inner.method} (the step's condition failed: {name})", p_above=lambda theta: 1.0)


def all_of(tests: list[Test], what: str) -> Evidence:
    """Each part holds: the weakest part's effect (each part's effect over its Δ where their Δs differ); "at most θ" rejected
    where every part rejects it, "at least θ" where any part does at the level times the number of parts."""
    return each_of(tuple(evidence_of(test) for test in tests), what)


def each_of(parts: tuple[Evidence, ...], what: str) -> Evidence:
    """`all_of` on the parts' evidence."""
    if len(parts) == 1:
        return parts[0]
    interests = {part.interest for part in parts}
    scales = [1.0] * len(parts) if len(interests) == 1 else [part.interest or math.nan for part in parts]
    common = next(iter(interests)) if len(interests) == 1 else 1.0
    if any(not (scale > 0) for scale in scales):
        scales, common = [1.0] * len(parts), None
    effect = min(part.effect / scale for part, scale in zip(parts, scales))

    def p_above(theta: float) -> float:
        return max(part.p_above(theta * scale) for part, scale in zip(parts, scales))

    def p_below(theta: float) -> float:
        return min(1.0, len(parts) * min(part.p_below(theta * scale) for part, scale in zip(parts, scales)))

    separations = [part.separation for part in parts if part.separation is not None]
    separation = min(separations) if common is not None and len(separations) == len(parts) else None
    low = min(part.bounds[0] / scale for part, scale in zip(parts, scales))
    high = max(part.bounds[1] / scale for part, scale in zip(parts, scales))
    scale_note = "" if len(interests) == 1 else ", each as a share of its own effect of interest"
    fewest = min((part for part in parts if part.units), key=lambda part: part.units or 0, default=parts[0])  # its units and their name
    return Evidence(f"each of {len(parts)} {what} (the weakest{scale_note})", effect, p_above, p_below, (low, high), common,
                    separation, (max(part.floors[0] for part in parts), min(1.0, len(parts) * min(part.floors[1] for part in parts))),
                    fewest.units, fewest.unit, parts, each=what)


def counted(evidence: Evidence, level: float) -> Evidence:
    """`evidence` as a claim at `level` reads it: an `all_of` whose parts include some that no outcome could let reject "at
    most 0" at `level` (their smallest p above it: 9 single-digit rows) is judged on the other parts, those shown, not
    counted. A part's units are fixed before its data are seen (by the tokenizer, by the paper's rows), so leaving it out
    favours no verdict; kept, it would make T+ fail whatever the model does. Unchanged where every part, or none, can
    reach `level`."""
    if evidence.each is None:
        return evidence
    kept = tuple(part for part in evidence.parts if part.floors[0] <= level)
    if not kept or len(kept) == len(evidence.parts):
        return evidence
    left_out = [part for part in evidence.parts if part.floors[0] > level]
    inner = each_of(kept, evidence.each)
    shown = "; ".join(f"{part.method} (smallest p {part.floors[0]:.3g})" for part in left_out)
    return dataclasses.replace(inner, method=f"{inner.method}; shown, not counted, as no outcome could reach {level:.3g}: {shown}",
                               each=None)


ANY_OF_INTEREST = 0.25


def any_of(tests: list[Test], what: str) -> Evidence:
    """The phenomenon somewhere among the parts: the share of parts whose own test of "at most 0" is below ALPHA, above the
    share ALPHA that chance gives; Δ a quarter of the parts more than chance (ANY_OF_INTEREST: lincorr's smallest effect of
    interest, as no paper states how many of its relations must hold)."""
    parts = [evidence_of(test) for test in tests]
    holding = sum(part.above(0.0) <= ALPHA for part in parts)
    inner = binomial_above(holding, len(parts), ALPHA, f"{what} with p below {ALPHA}", ANY_OF_INTEREST)
    return dataclasses.replace(inner, method=f"{inner.method} (a binomial over the parts, as if independent)", parts=tuple(parts))


KINDS: dict[str, Callable[..., Evidence]] = {
    kind.__name__: kind for kind in (binomial_above, mcnemar_gain, fisher_greater, paired_greater, bootstrap_greater,
                                     studentized_greater, correlation_above, ranks_greater, untestable, relabelled, all_of, any_of)}
