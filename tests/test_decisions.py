"""The two one-sided tests of each kind against independent computations, and the verdict read off the interval."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.optimize
import scipy.stats

from lincorr.reproduce import evidence, rates
from lincorr.reproduce.decisions import INCONCLUSIVE, NOT_REPRODUCED, REPRODUCED, SMALLER, decide
from lincorr.reproduce.verdicts import (ALPHA, all_of, binomial_above, bootstrap_greater, correlation_above, fisher_greater, mcnemar_gain,
                                       paired_greater, studentized_greater)


def constrained_loss_rate(gained: int, lost: int, n: int, theta: float) -> float:
    """The paired rates' maximum likelihood under gain - loss = theta, by a numeric search over the loss rate."""
    unchanged = n - gained - lost

    def negative_log_likelihood(loss: float) -> float:
        cells = np.array([loss + theta, loss, 1 - 2 * loss - theta])
        return -float(np.dot([gained, lost, unchanged], np.log(np.maximum(cells, 1e-300))))

    low, high = max(0.0, -theta) + 1e-12, (1 - theta) / 2 - 1e-12
    return float(scipy.optimize.minimize_scalar(negative_log_likelihood, bounds=(low, high), method="bounded",
                                                options={"xatol": 1e-12}).x)


@pytest.mark.parametrize("gained, lost, n, theta", [(12, 4, 50, 0.0), (12, 4, 50, 0.3), (3, 9, 40, -0.05), (20, 1, 30, 0.5)])
def test_tangos_statistic_uses_the_rates_maximum_likelihood_under_the_difference_tested(gained, lost, n, theta):
    loss = constrained_loss_rate(gained, lost, n, theta)
    expected = (gained - lost - n * theta) / math.sqrt(n * (2 * loss + theta * (1 - theta)))
    assert rates.tango_z(gained, lost, n, theta) == pytest.approx(expected, rel=1e-6)
    if theta == 0:  # at no difference it is McNemar's z
        assert rates.tango_z(gained, lost, n, 0.0) == pytest.approx((gained - lost) / math.sqrt(gained + lost))


@pytest.mark.parametrize("hits, n, control_hits, control_n, theta", [(56, 70, 48, 80, 0.0), (56, 70, 48, 80, 0.25), (9, 10, 3, 10, 0.5),
                                                                     (5, 40, 20, 40, -0.2)])
def test_the_miettinen_nurminen_statistic_uses_the_rates_maximum_likelihood_under_the_difference(hits, n, control_hits, control_n, theta):
    def negative_log_likelihood(control_rate: float) -> float:
        rate = control_rate + theta
        return -(scipy.stats.binom.logpmf(hits, n, rate) + scipy.stats.binom.logpmf(control_hits, control_n, control_rate))

    low, high = max(0.0, -theta) + 1e-9, min(1.0, 1 - theta) - 1e-9
    control_rate = scipy.optimize.minimize_scalar(negative_log_likelihood, bounds=(low, high), method="bounded", options={"xatol": 1e-12}).x
    rate, total = control_rate + theta, n + control_n
    variance = (rate * (1 - rate) / n + control_rate * (1 - control_rate) / control_n) * total / (total - 1)
    expected = (hits / n - control_hits / control_n - theta) / math.sqrt(variance)
    assert rates.miettinen_nurminen_z(hits, n, control_hits, control_n, theta) == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("failures, n, control_failures, control_n, ratio", [(66, 128, 114, 128, 1.0), (66, 128, 114, 128, 0.03),
                                                                              (3, 40, 30, 50, 0.5), (20, 30, 10, 30, 1.6)])
def test_the_ratio_score_statistic_uses_the_rates_maximum_likelihood_under_the_ratio(failures, n, control_failures, control_n, ratio):
    def negative_log_likelihood(control_rate: float) -> float:
        return -(scipy.stats.binom.logpmf(failures, n, ratio * control_rate) + scipy.stats.binom.logpmf(control_failures, control_n, control_rate))

    control_rate = scipy.optimize.minimize_scalar(negative_log_likelihood, bounds=(1e-9, min(1.0, 1 / ratio) - 1e-9), method="bounded",
                                                  options={"xatol": 1e-12}).x
    rate, total = ratio * control_rate, n + control_n
    variance = (rate * (1 - rate) / n + ratio**2 * control_rate * (1 - control_rate) / control_n) * total / (total - 1)
    expected = (failures / n - ratio * control_failures / control_n) / math.sqrt(variance)
    assert rates.ratio_score_z(failures, n, control_failures, control_n, ratio) == pytest.approx(expected, rel=1e-5)


def test_failures_removed_reaches_a_delta_a_difference_of_rates_cannot():
    """A control that already generalizes half the time leaves a difference of at most 0.5, below the paper's 0.75: the
    difference can never be `reproduced`; the share of the control's failures removed can (here all of them)."""
    difference = decide(fisher_greater(128, 128, 64, 128, "real vs shuffled", 0.75), 18)
    removed = decide(fisher_greater(128, 128, 64, 128, "real vs shuffled", 0.97, scale="failures removed"), 18)
    assert difference.verdict == SMALLER and removed.verdict == REPRODUCED
    assert removed.effect == 1.0 and 0.8 < removed.interval[0] < 0.97 < removed.interval[1]
    # At no effect both scales test the same null (equal rates) with the same score statistic.
    assert decide(fisher_greater(70, 128, 60, 128, "x", 0.97, scale="failures removed"), 18).p_effect == pytest.approx(
        decide(fisher_greater(70, 128, 60, 128, "x", 0.75), 18).p_effect, rel=1e-9)
    # A control that never fails beside a real arm that does: an effect below any value, and its tests still decide.
    worse = decide(fisher_greater(60, 128, 128, 128, "x", 0.97, scale="failures removed"), 18)
    assert worse.verdict == NOT_REPRODUCED and worse.effect is None
    assert decide(fisher_greater(128, 128, 128, 128, "x", 0.97, scale="failures removed"), 18).verdict == INCONCLUSIVE, \
        "neither arm fails: nothing to compare"


def test_the_binomial_bounds_are_clopper_pearsons():
    level = ALPHA / 10
    test = evidence.binomial_above(13, 40, 0.1, interest=0.3)
    assert test.lower(level) == pytest.approx(scipy.stats.beta.ppf(level, 13, 28) - 0.1, abs=1e-8)
    assert test.upper(level) == pytest.approx(scipy.stats.beta.ppf(1 - level, 14, 27) - 0.1, abs=1e-8)


def test_the_paired_bounds_are_students():
    rng = np.random.default_rng(3)
    values = rng.normal(0.4, 1.0, 25)
    level = ALPHA / 4
    interval = scipy.stats.ttest_1samp(values, 0.0).confidence_interval(1 - 2 * level)
    test = evidence.paired_greater(values, np.zeros(25), interest=0.5)
    assert (test.lower(level), test.upper(level)) == pytest.approx((interval.low, interval.high), abs=1e-8)


def test_the_bootstrap_bounds_are_the_bias_corrected_quantiles_expanded_for_few_units():
    """Efron's BC interval, expanded as Hesterberg's: the resamples' quantiles at Φ(2·z0 ± c·t), z0 the estimate's place
    among them, t Student's quantile over n - 1 and c = sqrt(n / (n - 1))."""
    rng = np.random.default_rng(4)
    resampled = np.sort(rng.normal(0.3, 0.1, 2000))
    estimate, level, n = 0.33, 0.05, 50
    z0 = scipy.stats.norm.ppf(np.mean(resampled < estimate))
    spread = math.sqrt(n / (n - 1)) * scipy.stats.t.isf(level, n - 1)
    expected = np.quantile(resampled, scipy.stats.norm.cdf([2 * z0 - spread, 2 * z0 + spread]))
    test = evidence.bootstrap_greater(estimate, resampled, "mean", interest=0.2, units=n)
    step = np.max(np.diff(resampled[10:-10]))  # the bounds are read between neighbouring draws
    assert (test.lower(level), test.upper(level)) == pytest.approx(tuple(expected), abs=3 * step)


def test_the_bootstrap_t_bounds_are_the_estimate_less_its_error_times_the_resamples_t_quantiles():
    """Efron and Tibshirani's bootstrap-t: [θ̂ - se · t*(1 - α), θ̂ - se · t*(α)], t* = (θ* - θ̂) / se*; its p at 0 the
    share of t* at or beyond θ̂ / se, +1 smoothed."""
    rng = np.random.default_rng(5)
    values = rng.normal(0.4, 1.0, 60)
    samples = values[rng.integers(0, 60, size=(1999, 60))]
    estimate, se = float(values.mean()), float(values.std(ddof=1) / math.sqrt(60))
    means, errors = samples.mean(axis=1), samples.std(axis=1, ddof=1) / math.sqrt(60)
    t = np.sort((means - estimate) / errors)
    reading, level = evidence.studentized_greater(estimate, se, means, errors, "mean", interest=0.2, units=60), 0.025
    expected = (estimate - se * np.quantile(t, 1 - level), estimate - se * np.quantile(t, level))
    step = se * np.max(np.diff(t[20:-20]))
    assert (reading.lower(level), reading.upper(level)) == pytest.approx(expected, abs=2 * step)
    assert reading.above(0.0) == pytest.approx((1 + np.sum(t >= estimate / se)) / 2000)
    # For normal units the bootstrap-t is close to Student's t interval (here within a tenth of its half-width).
    student = scipy.stats.t.isf(level, 59) * se
    assert reading.lower(level) == pytest.approx(estimate - student, abs=0.1 * student)


def test_resamples_biased_below_the_estimate_leave_the_bc_bound_open_and_the_bootstrap_t_bound_closed():
    """Fig. 23 on smollm2-135m-instruct-q41: a spread grows in a resample, so the resamples' effects sit below the estimate.
    BC's upper bound, a quantile of the draws, cannot pass them; the bootstrap-t's moves the other way, above the estimate."""
    rng = np.random.default_rng(6)
    estimate, se = 0.0, 0.01
    resampled = rng.normal(-0.03, 0.01, 1000)  # every resample three standard errors below the estimate
    bc = decide(bootstrap_greater(estimate, resampled, "spread", interest=0.02, units=500), 18)
    bootstrap_t = decide(studentized_greater(estimate, se, resampled, np.full(1000, se), "spread", interest=0.02, units=500), 18)
    assert bc.interval[1] == math.inf and bc.by_design
    assert estimate < bootstrap_t.interval[1] < math.inf and bootstrap_t.by_design is None

def test_the_correlation_bounds_are_fisher_zs():
    level = 0.005
    test = evidence.correlation_above("r", 0.4, 0.01, 103, "inputs", 0.2, control=0.05)
    z, half = math.atanh(0.4), scipy.stats.norm.isf(level) / 10
    assert (test.lower(level), test.upper(level)) == pytest.approx((math.tanh(z - half) - 0.05, math.tanh(z + half) - 0.05), abs=1e-8)


def test_the_auc_score_test_at_no_effect_has_the_mann_whitney_variance():
    assert evidence.hanley_mcneil_se(0.5, 12, 20) == pytest.approx(math.sqrt((12 + 20 + 1) / (12 * 12 * 20)))


@pytest.mark.parametrize("test, claims, verdict", [
    (binomial_above(30, 40, 0.25, interest=0.4), 10, REPRODUCED),  # 0.5 above chance: there, and not below 0.4
    (binomial_above(90, 200, 0.25, interest=0.4), 10, SMALLER),  # 0.2 [0.1, 0.3]: there, and below 0.4
    (binomial_above(10, 40, 0.25, interest=0.4), 10, NOT_REPRODUCED),  # none above chance, and far below 0.4
    (binomial_above(5, 8, 0.25, interest=0.4), 10, INCONCLUSIVE),  # 8 trials cannot tell at 0.005
])
def test_the_four_verdicts_of_two_one_sided_tests(test, claims, verdict):
    decision = decide(test, claims)
    assert decision.verdict == verdict
    low, high = decision.interval
    assert (low > 0) == (verdict in (REPRODUCED, SMALLER)) and (high < 0.4) == (verdict in (SMALLER, NOT_REPRODUCED))
    if verdict == INCONCLUSIVE:
        assert decision.units_needed > 8 and decision.power_effect < 0.8


def test_a_confident_negative_is_not_reproduced_whatever_the_power_of_a_design():
    """The committed gemma Merullo capitals zero-shot claim: the mean RR change is below 0 on all 8 sources; an interval
    wholly below Δ is decided (T− rejects), not left inconclusive for want of power."""
    rng = np.random.default_rng(0)
    decision = decide(paired_greater(rng.normal(-0.2, 0.05, 8), np.zeros(8), interest=0.1), 13)
    assert decision.interval[1] < 0 and decision.verdict == NOT_REPRODUCED


def test_a_claim_about_each_part_takes_the_weakest_part_and_splits_t_minus_over_the_parts():
    rng = np.random.default_rng(1)
    parts = [paired_greater(rng.normal(mean, 0.3, 30), np.zeros(30), interest=0.5) for mean in (0.9, 0.6, 0.2)]
    whole, level = decide(all_of(parts, "tasks"), 5), ALPHA / 5
    readings = [evidence.evidence_of(part) for part in parts]
    assert whole.effect == pytest.approx(min(r.effect for r in readings))
    assert whole.interval == pytest.approx((min(r.lower(level) for r in readings), min(r.upper(level / 3) for r in readings)), abs=1e-7)
    assert whole.verdict == SMALLER, "every part above 0, the third below 0.5"


def test_the_sensitivity_columns_read_the_same_data_at_half_and_twice_delta():
    decision = decide(binomial_above(90, 200, 0.25, interest=0.4), 10)
    assert (decision.verdict, decision.at_half, decision.at_double) == (SMALLER, REPRODUCED, SMALLER)
    decision = decide(binomial_above(90, 200, 0.25, interest=0.2), 10)
    assert (decision.verdict, decision.at_half, decision.at_double) == (REPRODUCED, REPRODUCED, SMALLER)


def test_a_budget_whose_smallest_p_is_above_the_level_says_so():
    """Peng's Table 2 at 9 rows: even every row right gives p = 0.58**9 = 0.0074, above 0.05 / 18."""
    decision = decide(binomial_above(9, 9, 0.58, interest=0.3), 18)
    assert decision.verdict == INCONCLUSIVE and decision.by_design and "T+" in decision.by_design and decision.power_effect == 0.0



def test_a_part_no_outcome_could_decide_is_shown_not_counted():
    """Peng's Table 2 on a digit-splitting tokenizer: X+1->X+2 has 9 rows (smallest p 0.0074 above 0.05 / 18), so 9 of 9
    right would still fail the claim's T+; it is judged on the parts that can reach the level, as if they were all."""
    decidable = [binomial_above(40, 50, 0.1, "City->Country", interest=0.3), binomial_above(30, 40, 0.2, "en->es", interest=0.3)]
    digits = binomial_above(9, 9, 0.58, "X+1->X+2", interest=0.3)
    with_digits, without = decide(all_of([*decidable, digits], "relations"), 18), decide(all_of(decidable, "relations"), 18)
    assert with_digits.verdict == without.verdict == REPRODUCED and with_digits.by_design is None
    assert with_digits.p_effect == without.p_effect and with_digits.interval == pytest.approx(without.interval)
    assert "X+1->X+2" in with_digits.method and "not counted" in with_digits.method
    reachable = decide(all_of([*decidable, digits], "relations"), 2)  # at 0.025 its 0.0074 can be reached: it counts
    assert (reachable.units, reachable.unit) == (9, "X+1->X+2"), "the units of the part with the fewest, named as it names them"
    assert "not counted" not in reachable.method and reachable.p_effect == pytest.approx(max(
        evidence.evidence_of(part).above(0.0) for part in [*decidable, digits]))
    alone = decide(digits, 18)  # a claim of one such part is inconclusive by design, not judged on nothing
    assert alone.verdict == INCONCLUSIVE and alone.by_design

def test_a_bootstrap_bound_past_its_draws_is_open():
    resampled = np.linspace(0.0, 0.1, 100)  # the estimate above every draw: nothing bounds the effect from above
    decision = decide(bootstrap_greater(0.5, resampled, "mean", interest=0.2, units=20), 4)
    assert decision.interval[1] == math.inf and decision.summary()["interval"][1] is None


def test_a_mcnemar_claim_reads_its_paired_items():
    before = np.array([False] * 30 + [True] * 10)
    after = np.array([True] * 20 + [False] * 10 + [True] * 8 + [False] * 2)
    decision = decide(mcnemar_gain(before, after, interest=0.3), 2)
    assert decision.effect == pytest.approx((20 - 2) / 40) and decision.verdict == REPRODUCED


def test_a_correlation_over_constant_data_is_inconclusive():
    assert decide(correlation_above("r", math.nan, math.nan, 10, "items", 0.3)).verdict == INCONCLUSIVE
