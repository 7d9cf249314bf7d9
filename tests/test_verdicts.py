"""The tests as the steps make them (each interval against a plain computation, each recipe made again), and their
decisions (`decisions.decide`) from planted effects."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from typing import Literal

import numpy as np
import pytest
import scipy.stats

import lincorr.reproduce.verdicts as verdicts
from lincorr.reproduce import decisions
from lincorr.reproduce.decisions import decide

from lincorr.reproduce.verdicts import (
    ALPHA,
    all_of,
    any_of,
    binomial_above,
    bootstrap_greater,
    correlation_above,
    fisher_greater,
    mcnemar_gain,
    paired_greater,
    ranks_greater,
    relabelled,
    untestable,
)



def test_the_units_needed_follow_the_square_root_law_of_a_z_test():
    rng = np.random.default_rng(3)
    resampled = rng.normal(0.1, 0.1, size=2000)  # standard error 0.1 with 50 units
    decision = decide(bootstrap_greater(0.05, resampled, "a planted effect", interest=0.1, units=50))
    z = scipy.stats.norm.isf(ALPHA) + scipy.stats.norm.ppf(0.8)
    assert decision.verdict == "inconclusive"
    assert decision.units_needed == pytest.approx(50 * (z / (0.1 / resampled.std(ddof=1))) ** 2, rel=0.01)


def test_no_budget_is_read_off_a_hundredfold_extrapolation():
    rng = np.random.default_rng(3)
    resampled = rng.normal(0.0, 1.0, size=2000)  # Δ a hundredth of a standard error: about 62,000 times the units
    decision = decide(bootstrap_greater(0.0, resampled, "no effect", interest=0.01, units=50))
    assert decision.verdict == "inconclusive" and decision.units_needed is None and decisions.MOST_UNITS_FACTOR == 100


def test_a_planted_effect_of_the_papers_size_is_reproduced_and_at_a_tiny_budget_inconclusive():
    paper_rise = 0.38  # Table 5: 38% of facts generalize after training, 0% before
    large = mcnemar_gain([False] * 100, [True] * 38 + [False] * 62, interest=paper_rise, unit="facts")
    tiny = mcnemar_gain([False] * 8, [True] * 2 + [False] * 6, interest=paper_rise, unit="facts")
    assert decide(large).verdict == "reproduced"
    assert decide(tiny).verdict == "inconclusive", "8 facts cannot tell"
    assert decide(tiny).units_needed > 8 and decide(tiny).power_effect < 0.8


def test_a_planted_null_is_not_reproduced():
    null = mcnemar_gain([False] * 199 + [True], [True] * 2 + [False] * 198, interest=0.38, unit="facts")
    decision = decide(null)
    assert decision.verdict == "not reproduced" and decision.interval[1] < 0.38


def test_an_interval_wholly_below_the_effect_decides_at_the_runs_level():
    """Peng's Table 2 on an imprecise relation, 5 of 9 rows wrong against 1 - 0.42 by chance, judged against 0.42: at the
    level of a run of 18 claims the interval lies below the effect, and the claim is not reproduced, whatever power a
    design would have had (power plans budgets; it decides nothing)."""
    decision = decide(binomial_above(5, 9, 1 - 0.42, interest=0.42), 18)
    assert decision.interval[1] < 0.42 and decision.verdict == "not reproduced"


def test_a_correlation_is_decided_by_one_method_whatever_permutation_p_the_step_found():
    """gemma-3-270m-q4km's Table 8: a permutation p of 1/201 from shuffling W's rows, beside r 0.049 over 200 inputs. The
    decision is Fisher's z over the inputs, its interval and both tests one method; the permutation p stays in the
    claim's test, and decides nothing."""
    shuffled = decide(correlation_above("centred r vs shuffled W", 0.049, 1 / 201, 200, "inputs", interest=0.1))
    assert shuffled.interval[0] < 0 < shuffled.interval[1] and shuffled.verdict == "inconclusive"
    assert decide(correlation_above("centred r vs shuffled W", 0.3, 1 / 201, 200, "inputs", interest=0.1)).verdict == "reproduced"


def test_a_verdict_and_its_interval_agree():
    """59 of 100 against even odds: one-sided exact p 0.044, and the one-sided Clopper-Pearson bound at the same level
    above 0: reproduced, at a level of 0.05; at a run of two claims' level, neither."""
    alone, in_pair = decide(binomial_above(59, 100, 0.5, interest=0.15)), decide(binomial_above(59, 100, 0.5, interest=0.15), 2)
    assert alone.p_effect < ALPHA and alone.interval[0] > 0 and alone.verdict == "reproduced"
    assert in_pair.interval[0] < 0 and in_pair.verdict == "inconclusive"


def test_each_part_of_a_claim_about_every_part_must_be_there():
    """Table 8's relations: one part whose interval includes 0 keeps the claim from `reproduced`."""
    weak = correlation_above("Fruit-Color", 0.049, 1 / 201, 200, "inputs", interest=0.1)
    clear = correlation_above("Object-Color", 0.3, 0.01, 200, "inputs", interest=0.1)
    assert decide(all_of([weak, clear], "relations")).verdict == "inconclusive"
    assert decide(all_of([clear, correlation_above("Gem-Color", 0.25, 0.005, 200, "inputs", interest=0.1)], "relations")).verdict == "reproduced"


def test_a_claim_about_somewhere_counts_the_parts_above_chance():
    """"Any of": the share of parts whose own test is below ALPHA, against the ALPHA that chance gives, never the best
    part's effect (which is selected)."""
    nowhere = correlation_above("Gem-Color", 0.01, 0.4, 200, "inputs", interest=0.1)
    clear = correlation_above("Object-Color", 0.3, 0.01, 200, "inputs", interest=0.1)
    one_of_two = decide(any_of([nowhere, clear], "relations"))
    assert one_of_two.effect == pytest.approx(0.5 - ALPHA) and one_of_two.verdict == "inconclusive"
    assert decide(any_of([clear] * 10 + [nowhere] * 2, "relations")).verdict == "reproduced"


def test_a_rank_sum_interval_stays_within_the_effects_bounds():
    """The Hanley-McNeil interval is a normal one around the common-language effect; near complete separation it would
    reach past 1/2, an effect no two groups can have."""
    separated = ranks_greater([5.0, 6.0, 7.0, 8.0], [1.0, 2.0, 3.0, 4.2], interest=0.2)
    assert separated.effect == 0.5 and -0.5 <= separated.interval[0] < separated.interval[1] == 0.5
    # Complete separation does not make the interval a point: 4 against 4 is far from certain.
    assert separated.interval[1] - separated.interval[0] > 0.1
    almost = ranks_greater([5.0, 6.0, 7.0, 1.5], [1.0, 2.0, 3.0, 4.0], interest=0.2)
    assert -0.5 <= almost.interval[0] < almost.effect < almost.interval[1] <= 0.5


def test_a_fisher_test_with_one_row_in_an_arm_cannot_decide():
    """qwen2.5-coder-0.5b-instruct-q4km's committed Table 18: 115/245 whole words against 0/1 subwords. With one row in
    an arm, the one-sided p of Fisher's exact test is at best the share of misses among all rows (131/246 here); at the
    effect judged for (whole words at 0.49) it stays near 0.5, so the test cannot see that effect."""
    test = fisher_greater(115, 245, 0, 1, interest=0.49)
    assert test.p_value > 0.4
    assert decide(test).verdict == "inconclusive"


def test_the_fisher_interval_is_newcombes_hybrid_score_interval():
    """Newcombe (1998), method 10, computed here from Wilson's intervals written out in full; his example 56/70 vs 48/80
    gives 0.0524 to 0.3339."""
    def wilson(x, m, z=1.959963984540054):
        p = x / m
        return ((2 * m * p + z**2 - z * np.sqrt(z**2 + 4 * m * p * (1 - p))) / (2 * (m + z**2)),
                (2 * m * p + z**2 + z * np.sqrt(z**2 + 4 * m * p * (1 - p))) / (2 * (m + z**2)))

    (l1, u1), (l2, u2) = wilson(56, 70), wilson(48, 80)
    d = 56 / 70 - 48 / 80
    expected = (d - np.hypot(56 / 70 - l1, u2 - 48 / 80), d + np.hypot(u1 - 56 / 70, 48 / 80 - l2))
    assert fisher_greater(56, 70, 48, 80).interval == pytest.approx(expected, abs=1e-12)
    assert expected == pytest.approx((0.0524, 0.3339), abs=1e-4)


def test_a_claim_about_each_task_needs_every_task():
    holds = binomial_above(30, 40, 0.1, interest=0.3)
    fails = binomial_above(4, 40, 0.1, interest=0.3)
    both = all_of([holds, fails], "tasks")
    assert decide(both).verdict == "not reproduced" and len(both.parts) == 2
    assert decide(all_of([holds, holds], "tasks")).verdict == "reproduced"


def test_a_claim_about_somewhere_stays_valid_when_its_parts_share_their_inputs():
    """Peng's LRE relations are all fitted on the same inputs: five copies of one result are one piece of evidence, which
    Fisher's method would count five times over; the smallest p times the parts does not."""
    copies = [binomial_above(9, 40, 0.1, interest=0.3) for _ in range(5)]
    somewhere = any_of(copies, "copies")
    assert somewhere.p_value == pytest.approx(min(1.0, 5 * copies[0].p_value)) and somewhere.p_value > copies[0].p_value
    assert scipy.stats.combine_pvalues([t.p_value for t in copies], method="fisher").pvalue < copies[0].p_value
    assert somewhere.effect == copies[0].effect and somewhere.interval == copies[0].interval


def test_a_binomial_effect_has_a_two_sided_interval_around_it():
    test = binomial_above(12, 40, 0.1, interest=0.3)
    exact = scipy.stats.binomtest(12, 40).proportion_ci(0.95)
    assert test.interval == pytest.approx((exact.low - 0.1, exact.high - 0.1))
    assert test.interval[0] < test.effect < test.interval[1] < 0.9, "the upper end says something, unlike a one-sided bound"


def test_every_test_is_made_again_from_its_stored_recipe():
    rng = np.random.default_rng(0)
    values, controls = rng.normal(0.3, 1, 12), rng.normal(0, 1, 12)
    tests = [binomial_above(8, 40, 0.1, "hits", 0.15), mcnemar_gain([True, False] * 10, [True, True] * 10, interest=0.2),
             fisher_greater(12, 30, 3, 25, interest=0.3), paired_greater(values, controls, interest=0.5),
             bootstrap_greater(0.2, rng.normal(0.2, 0.1, 500), "gain", 0.1, units=40), correlation_above("r", 0.4, 0.01, 30, "items", 0.2),
             ranks_greater(values, controls, interest=0.2), untestable("no crossing", interest=0.1),
             relabelled(binomial_above(8, 40, 0.1, interest=0.15), "renamed", holds=False)]
    tests += [all_of(tests[:3], "parts"), any_of(tests[3:5], "parts")]
    for test in tests:
        stored = json.loads(json.dumps(test.summary()))
        assert verdicts.Test.from_summary(stored) == test
    assert tests[-3].name == "renamed" and not tests[-3].direction_holds
    assert all(part.recipe is not None for part in verdicts.Test.from_summary(tests[-2].summary()).parts), "a rebuilt part has its recipe"
    assert all(row["recipe"] is None for row in tests[-2].summary()["parts"]), "a stored part leaves its recipe to the whole's"


@pytest.mark.parametrize("recipe", [{"test": "system", "arguments": {}}, {"test": "binomial_above", "arguments": {"successes": "x"}},
                                    {"test": "binomial_above", "arguments": {"nope": 1}}, {"test": "all_of", "arguments": {"tests": [{"recipe": 7}], "what": ""}},
                                    "binomial_above", {"test": "any_of", "arguments": []},
                                    # numbers or objects where a test is read, a count of 1e999
                                    {"test": "all_of", "arguments": {"tests": [1, 2], "what": ""}},
                                    {"test": "any_of", "arguments": {"tests": {"a": 1}, "what": ""}},
                                    {"test": "relabelled", "arguments": {"test": 5, "name": "x"}},
                                    {"test": "binomial_above", "arguments": {"successes": math.inf, "trials": 5, "chance": 0.1}},
                                    {"test": "untestable", "arguments": {"name": [1]}},
                                    {"test": "mcnemar_gain", "arguments": {"before": [True], "after": [True, False], "interest": 0.2}},
                                    {"test": "correlation_above", "arguments": {"name": "r", "r": 0.5, "p_value": None, "units": 10,
                                                                                "unit": "items", "interest": 0.1}},
                                    # a name that is no text; counts past 2**53 (scipy's quantile never returned) or not whole
                                    {"test": ["binomial_above"], "arguments": {}},
                                    {"test": "binomial_above", "arguments": {"successes": 3, "trials": 10**18, "chance": 0.1, "interest": 0.5}},
                                    {"test": "fisher_greater", "arguments": {"hits": 3.7, "n": 10, "control_hits": 1, "control_n": 10}},
                                    {"test": "bootstrap_greater", "arguments": {"estimate": 0.1, "resampled": [0.1, 0.2], "what": "x",
                                                                                "units": {"float": "inf"}}}])
def test_a_recipe_that_names_no_test_or_wrong_arguments_is_refused(recipe):
    with pytest.raises(ValueError):
        verdicts.Test.from_summary({"recipe": recipe})


def test_the_tests_a_constructor_takes_are_read_from_its_type_hints_and_any_other_form_is_refused():
    assert {name: taken for name, taken in verdicts.TESTS_TAKEN.items() if taken} == {
        "relabelled": {"test": False}, "all_of": {"tests": True}, "any_of": {"tests": True}}

    def listed(tests: list[verdicts.Test], weights: Sequence[float]) -> verdicts.Test: ...

    def optional(test: verdicts.Test | None) -> verdicts.Test: ...

    def named(kind: Literal["Test"], tests_run: int) -> verdicts.Test: ...

    assert verdicts.tests_taken(listed) == {"tests": True} and verdicts.tests_taken(named) == {}
    with pytest.raises(TypeError, match="takes tests as"):
        verdicts.tests_taken(optional)


STORED = {"name": "binomial", "statistic": 0.5, "p_value": 0.01, "direction_holds": True}


@pytest.mark.parametrize("row, message", [
    ({}, "name is missing"), ("x", "the stored test is text"), ({**STORED, "p_value": "x"}, "p_value is text"),
    ({**STORED, "p_value": None}, "p_value is null"), ({**STORED, "p_value": 2}, "p_value is 2, not a probability"),
    ({**STORED, "interval": "ab"}, "interval is text"), ({**STORED, "p_value": True}, "not a probability"),
    ({**STORED, "parts": "ab"}, "parts is text"), ({**STORED, "parts": [{}]}, "name is missing"),
    ({**STORED, "units": float("inf")}, "units is inf, not a count"),
])
def test_a_stored_test_without_a_recipe_that_judge_could_not_read_is_refused(row, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        verdicts.Test.from_summary(row)
    # A stored test of the right kinds reads; without an effect and interval it cannot be decided either way.
    assert decide(verdicts.Test.from_summary(STORED)).verdict == "inconclusive"


def test_an_undefined_p_is_no_evidence_either_way():
    """A NaN p (a stored test that could not be computed) is `inconclusive`, whatever interval it carries."""
    test = verdicts.Test("r", 0.5, math.nan, True, 0.5, (0.1, 0.9), 0.2, 40)
    assert decide(test).verdict == "inconclusive"


def test_a_recipe_over_billions_of_units_is_judged_without_exhausting_memory():
    """Counts of 2e9 names per arm (Fisher's exact power over them once asked for 15 GiB); a stored recipe may come from anyone."""
    test = verdicts.Test.from_summary({"recipe": {"test": "fisher_greater", "arguments": {
        "hits": 10**9, "n": 2 * 10**9, "control_hits": 10**9, "control_n": 2 * 10**9, "interest": 0.1}}})
    assert test.p_value == pytest.approx(0.5, abs=1e-3)
    assert decide(test).verdict == "not reproduced", "a difference of 0 in rates, known to within 1e-4"
