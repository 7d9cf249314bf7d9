"""The tests of a paper's phenomena as a step makes them: what was measured, kept as the constructor call that made it.

A step measures; one of these functions turns what it measured into a `Test`: the statistic and one-sided p-value of
the test it names, the effect oriented so that positive is the paper's way (0 is no effect) with its 95% interval, the
effect it is judged against (`interest`: the paper's own effect, or a smallest effect of interest with its reason), and
the recipe (constructor and arguments) that made it. The
claim is decided from the recipe (`evidence` reads it as one estimator with two one-sided tests, `decisions` gives the
verdict), so a stored claim is judged by the current code without measuring it again.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import functools
import inspect
import math
import typing
from collections.abc import Callable, Sequence

import numpy as np
import scipy.stats

from lincorr.schema import ANY, NULL, NUMBER, REAL, TEXT, Entries, Items, Maybe, described_value, mismatch

ALPHA = 0.05  # the family-wise level of a run's claims (`decisions`)
MOST_EXACT_COUNT = 2**53  # the largest count a float64 holds exactly; past it scipy's binomial quantiles never converge
Z_95 = float(scipy.stats.norm.ppf(0.975))
# A test as `judge` reads it, checked wherever one is read back (`Test.from_summary`): a stored claim may come from anyone.
STORED_TEST = {"name": TEXT, "statistic": NUMBER, "p_value": REAL, "direction_holds": bool, "effect": Maybe(NUMBER),
               "interval": Maybe(([REAL, REAL], NULL)), "interest": Maybe(NUMBER),
               "units": Maybe(NUMBER), "unit": Maybe((TEXT, NULL)), "parts": Maybe(Items(Entries(ANY))),
               "every_part": Maybe((bool, NULL)), "recipe": Maybe((dict, NULL))}


@dataclasses.dataclass(frozen=True)
class Test:
    """One test of a phenomenon: name, statistic and one-sided p-value; the effect (positive: the paper's way) with its 95%
    interval and the effect it is judged against; the
    independent units the test counts ("8 facts"); and, for a claim about several tasks, each task's own test."""

    name: str
    statistic: float
    p_value: float
    direction_holds: bool
    effect: float | None = None
    interval: tuple[float, float] | None = None
    interest: float | None = None
    units: int | None = None
    unit: str = ""
    parts: tuple[Test, ...] = ()
    every_part: bool = False  # a claim about each of its parts (`all_of`): each must clear what the whole must
    recipe: dict | None = None  # the constructor and arguments that made it (`recorded`), so that it can be made again

    def summary(self) -> dict:
        """The test as JSON values (lists, not tuples), as a stored claim reads back; a part leaves its recipe to the whole's."""
        row = dataclasses.asdict(self)
        row["interval"] = list(self.interval) if self.interval is not None else None
        row["parts"] = [{**part.summary(), "recipe": None} for part in self.parts]
        return row

    @classmethod
    def from_summary(cls, row: dict) -> Test:
        """The stored test as the current code computes it where it has a recipe (`rebuilt`), else as stored; a ValueError
        where either is not a test `judge` can read."""
        if isinstance(row, dict) and row.get("recipe"):
            test = rebuilt(row["recipe"])
            check_readable(test.summary(), f"the test its {row['recipe']['test']} recipe makes")
            return test
        check_readable(row, "the stored test")
        fields: dict[str, typing.Any] = {field.name: row.get(field.name) for field in dataclasses.fields(cls)}
        fields["interval"] = tuple(fields["interval"]) if fields["interval"] is not None else None
        fields["parts"] = tuple(cls.from_summary(part) for part in row.get("parts") or ())
        fields["unit"], fields["every_part"] = fields["unit"] or "", bool(fields["every_part"])
        return cls(**fields)


def check_readable(row: object, what: str) -> None:
    """A ValueError naming the first field of the test `row` (what its message calls it) that `judge` could not read."""
    if not isinstance(row, dict):
        raise ValueError(f"{what} is {described_value(row)}, not an object")
    problem = mismatch(row, STORED_TEST, "")
    # NaN, an undefined p, judges as no evidence (`judge`); a p outside [0, 1] would be evidence of nothing.
    if not problem and (isinstance(row["p_value"], bool) or not (0 <= row["p_value"] <= 1 or math.isnan(row["p_value"]))):
        problem = f"p_value is {row['p_value']}, not a probability"
    if not problem and row.get("units") is not None and not 0 <= row["units"] <= MOST_EXACT_COUNT:
        problem = f"units is {row['units']}, not a count of independent units"
    if problem:
        raise ValueError(f"{what} is not one lincorr can judge: {problem}")


CONSTRUCTORS: dict[str, Callable[..., Test]] = {}
TESTS_TAKEN: dict[str, dict[str, bool]] = {}  # constructor -> `tests_taken`


def recorded(constructor: Callable[..., Test]) -> Callable[..., Test]:
    """A test constructor whose call is kept on its Test (`recipe`: its name and JSON arguments): a stored claim's test is
    made again by the current code whenever it is judged, so a change to how tests compute (an interval, a decision) reaches
    cached and committed claims without measuring them again, and the claims' code digests leave this module out."""
    signature = inspect.signature(constructor)
    TESTS_TAKEN[constructor.__name__] = tests_taken(constructor)

    @functools.wraps(constructor)
    def make(*args, **kwargs) -> Test:
        arguments = signature.bind(*args, **kwargs).arguments
        test = constructor(*args, **kwargs)
        return dataclasses.replace(test, direction_holds=bool(test.direction_holds),
                                   recipe={"test": constructor.__name__, "arguments": {name: as_json(value) for name, value in arguments.items()}})

    CONSTRUCTORS[constructor.__name__] = make
    return make


def tests_taken(constructor: Callable[..., Test]) -> dict[str, bool]:
    """The parameters of `constructor` that take tests, read from its type hints: {name: whether it takes a list of them}.
    A hint that holds Test in any other way is refused where the constructor is defined, so no parameter typed with tests
    escapes `check_tests_given`."""
    def holds_test(hint) -> bool:
        return hint is Test or any(holds_test(argument) for argument in typing.get_args(hint))

    hints = {name: hint for name, hint in typing.get_type_hints(constructor).items() if name != "return" and holds_test(hint)}
    for name, hint in hints.items():
        if hint is not Test and not (typing.get_origin(hint) in (list, collections.abc.Sequence) and typing.get_args(hint) == (Test,)):
            raise TypeError(f"{constructor.__name__}'s {name} takes tests as {hint}; take a Test or a Sequence[Test]")
    return {name: hint is not Test for name, hint in hints.items()}


NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}  # JSON has none (null is no number to a constructor)


def as_json(value: typing.Any) -> typing.Any:
    """An argument of a test constructor as JSON: lists for arrays and tuples, {"float": "nan"} and so on (NON_FINITE), recipes."""
    if isinstance(value, Test):
        if value.recipe is None:
            raise ValueError(f"the test {value.name!r} has no recipe: make it with a constructor of lincorr.reproduce.verdicts")
        return {"recipe": value.recipe}
    value = value.tolist() if isinstance(value, (np.ndarray, np.generic)) else value
    if isinstance(value, (list, tuple)):
        return [as_json(item) for item in value]
    return {"float": str(value)} if isinstance(value, float) and not math.isfinite(value) else value


def from_json(value: typing.Any) -> typing.Any:
    """`as_json` undone: a recipe becomes its Test, a tagged number a float; lists stay lists (constructors read them as arrays)."""
    if isinstance(value, dict) and set(value) == {"recipe"}:
        return rebuilt(value["recipe"])
    if isinstance(value, dict) and set(value) == {"float"} and value["float"] in NON_FINITE:
        return NON_FINITE[value["float"]]
    if isinstance(value, list):
        return [from_json(item) for item in value]
    return value


def rebuilt(recipe: dict) -> Test:
    """The Test a recipe makes with the current code; a recipe that names no constructor, or whose arguments the
    constructor refuses, raises ValueError."""
    if not isinstance(recipe, dict) or str(recipe.get("test")) not in CONSTRUCTORS or not isinstance(recipe.get("arguments"), dict):
        raise ValueError(f"not a recipe of a lincorr test: {str(recipe)[:200]}")
    constructor = CONSTRUCTORS[recipe["test"]]
    try:
        arguments = {name: from_json(value) for name, value in recipe["arguments"].items()}
        check_tests_given(recipe["test"], arguments)
        return constructor(**arguments)
    # OverflowError: a count of 1e999 (infinity) made a whole number.
    except (TypeError, ValueError, IndexError, ZeroDivisionError, OverflowError) as error:
        raise ValueError(f"the recipe of a {recipe['test']} test cannot be made again: {error}") from None


def check_tests_given(constructor_name: str, arguments: dict) -> None:
    """A TypeError where an argument the constructor reads as a Test (`relabelled`), or as a list of them (`all_of`), is not
    made from a recipe: its code would otherwise fail on a number or text where it reads a test's fields."""
    taken = TESTS_TAKEN[constructor_name]
    for name, value in ((name, arguments[name]) for name in taken.keys() & arguments.keys()):
        if not taken[name] and not isinstance(value, Test):
            raise TypeError(f"{name} is not a test's recipe")
        if taken[name] and not (isinstance(value, list) and value and all(isinstance(item, Test) for item in value)):
            raise TypeError(f"{name} is not a list of tests' recipes")


@recorded
def binomial_above(successes: int, trials: int, chance: float, what: str = "hits", interest: float | None = None) -> Test:
    """More `successes` out of `trials` than a rate of `chance` gives (exact binomial, one-sided). The effect is the rate
    above chance with its Clopper-Pearson interval; `interest` a rate above chance."""
    successes, trials = count(successes, "successes"), count(trials, "trials")
    result = scipy.stats.binomtest(successes, trials, float(chance), alternative="greater")
    ci = scipy.stats.binomtest(successes, trials, float(chance)).proportion_ci(0.95)  # two-sided: both ends say something
    return Test(f"binomial: {successes}/{trials} {what} vs chance {chance:.3g}", successes / trials, float(result.pvalue),
                successes / trials > chance, successes / trials - chance, (ci.low - chance, ci.high - chance), interest, trials, what)


@recorded
def mcnemar_gain(before: np.ndarray | Sequence[bool], after: np.ndarray | Sequence[bool], what: str = "right", interest: float | None = None, unit: str = "items") -> Test:
    """Paired: more items turn right than turn wrong (exact McNemar: a binomial test on the discordant pairs, one-sided).
    The effect is the rise in the rate right (Agresti-Min interval); `interest` a rise."""
    before, after = np.asarray(before, bool), np.asarray(after, bool)
    if before.ndim != 1 or before.shape != after.shape:  # numpy would pair them by broadcasting, into rates above 1
        raise ValueError(f"before and after are not two lists of one length ({before.shape} and {after.shape})")
    n = before.size
    gained, lost = int(np.sum(after & ~before)), int(np.sum(before & ~after))
    p = float(scipy.stats.binomtest(gained, gained + lost, 0.5, alternative="greater").pvalue) if gained + lost else 1.0
    gain_rate, loss_rate = (gained + 0.5) / (n + 2), (lost + 0.5) / (n + 2)
    half = Z_95 * math.sqrt(max(gain_rate + loss_rate - (gain_rate - loss_rate) ** 2, 0.0) / (n + 2))
    return Test(f"McNemar (exact): {gained} became {what}, {lost} stopped being, of {n}", float(gained - lost), p, gained > lost,
                (gained - lost) / max(n, 1), (gain_rate - loss_rate - half, gain_rate - loss_rate + half), interest, n, unit)


# The scales two independent rates are compared on (`fisher_greater`): their difference, or the share of the control's
# failures the real arm does not have (1 - the ratio of failure rates), on which a paper's Δ is attainable whatever the
# control's rate on the model measured (a difference of 0.75 is not, beside a control rate above 0.25).
DIFFERENCE, FAILURES_REMOVED = "difference", "failures removed"
SCALES = (DIFFERENCE, FAILURES_REMOVED)


@recorded
def fisher_greater(hits: int, n: int, control_hits: int, control_n: int, what: str = "real vs control", interest: float | None = None,
                   scale: str = DIFFERENCE) -> Test:
    """The rate `hits / n` above `control_hits / control_n` (Fisher's exact test, one-sided); the statistic is the odds ratio.
    The effect, on `scale`: the difference of rates with Newcombe's hybrid score interval (Wilson's for each rate: sound
    where an arm is small or its rate 0 or 1), or the share of failures removed with Katz's log interval (half a failure
    added to each count)."""
    hits, n = count(hits, "hits"), count(n, "n")
    control_hits, control_n = count(control_hits, "control hits"), count(control_n, "control n")
    if scale not in SCALES:
        raise ValueError(f"scale is {scale!r}, none of {', '.join(SCALES)}")
    table = [[hits, n - hits], [control_hits, control_n - control_hits]]
    odds, p = scipy.stats.fisher_exact(table, alternative="greater")
    rate, control_rate = hits / max(n, 1), control_hits / max(control_n, 1)
    name = f"Fisher exact: {what} {hits}/{n} vs {control_hits}/{control_n}"
    if scale == FAILURES_REMOVED:
        failures, control_failures = n - hits, control_n - control_hits
        if not n or not control_failures:  # no failure of the control to remove: no ratio
            return Test(name, float(odds), float(p), rate > control_rate, None, None, interest, n + control_n)
        # Katz's log interval, each count and total given half a case (an arm with no failures, or all, keeps a variance).
        log_ratio = math.log((failures + 0.5) / (n + 1)) - math.log((control_failures + 0.5) / (control_n + 1))
        half = Z_95 * math.sqrt(1 / (failures + 0.5) - 1 / (n + 1) + 1 / (control_failures + 0.5) - 1 / (control_n + 1))
        return Test(name, float(odds), float(p), rate > control_rate, 1 - failures / n / (control_failures / control_n),
                    (1 - math.exp(log_ratio + half), 1 - math.exp(log_ratio - half)), interest, n + control_n)
    (low, high), (control_low, control_high) = wilson_interval(hits, n), wilson_interval(control_hits, control_n)
    difference = rate - control_rate
    interval = (difference - math.hypot(rate - low, control_high - control_rate), difference + math.hypot(high - rate, control_rate - control_low))
    return Test(name, float(odds), float(p), rate > control_rate, difference, interval, interest, n + control_n)


def count(value: float, name: str) -> int:
    """`value` as a count: a whole number from 0 to MOST_EXACT_COUNT (a stored recipe may hold 3.7 or 10**18), else ValueError."""
    if isinstance(value, bool) or not (float(value).is_integer() and 0 <= value <= MOST_EXACT_COUNT):
        raise ValueError(f"{name} is {value}, not a whole number from 0 to 2**53")
    return int(value)


def wilson_interval(successes: int, trials: int) -> tuple[float, float]:
    """Wilson's 95% score interval of a rate (the whole of [0, 1] for no trials)."""
    if trials <= 0:
        return 0.0, 1.0
    rate, z2 = successes / trials, Z_95**2
    centre = (rate + z2 / (2 * trials)) / (1 + z2 / trials)
    half = Z_95 * math.sqrt(rate * (1 - rate) / trials + z2 / (4 * trials**2)) / (1 + z2 / trials)
    return max(centre - half, 0.0), min(centre + half, 1.0)


@recorded
def paired_greater(values: np.ndarray | Sequence[float], controls: np.ndarray | Sequence[float], what: str = "r vs shuffled control",
                   interest: float | None = None, unit: str = "pairs") -> Test:
    """`values` above their paired `controls` (Wilcoxon signed-rank, one-sided); the effect is the mean difference with its
    t interval. Each pair must be an independent unit: pairs that share their inputs call for `bootstrap_greater`."""
    values, controls = np.asarray(values, float), np.asarray(controls, float)
    keep = np.isfinite(values) & np.isfinite(controls)
    difference = values[keep] - controls[keep]
    name = f"Wilcoxon signed-rank: {what}, {difference.size} {unit}"
    if difference.size < 2 or not difference.any():
        return Test(name, 0.0, 1.0, False, 0.0, None, interest, int(difference.size), unit)
    p = float(scipy.stats.wilcoxon(difference, alternative="greater").pvalue)
    mean, sd = float(difference.mean()), float(difference.std(ddof=1))
    half = float(scipy.stats.t.ppf(0.975, difference.size - 1)) * sd / math.sqrt(difference.size)
    return Test(name, mean, p, mean > 0, mean, (mean - half, mean + half), interest, int(difference.size), unit)


@recorded
def bootstrap_greater(estimate: float, resampled: np.ndarray | Sequence[float], what: str, interest: float | None = None,
                      units: int | None = None, unit: str = "inputs") -> Test:
    """An effect above 0, judged by resampling its independent units (inputs every cell shares, runs): the p-value is the
    share of resampled effects at or below 0 (one-sided, +1 smoothed), the interval the 2.5-97.5 percentiles."""
    finite = np.asarray(resampled, float)
    finite = finite[np.isfinite(finite)]
    p = float((1 + np.sum(finite <= 0)) / (1 + finite.size))
    low, high = (np.percentile(finite, [2.5, 97.5]) if finite.size else (math.nan, math.nan))
    return Test(f"bootstrap over {units or '?'} {unit} ({finite.size} resamples): {what}", float(estimate), p, estimate > 0,
                float(estimate), (float(low), float(high)), interest, units, unit)


@recorded
def studentized_greater(estimate: float, se: float, resampled: np.ndarray | Sequence[float], resampled_se: np.ndarray | Sequence[float],
                        what: str, interest: float | None = None, units: int | None = None, unit: str = "inputs") -> Test:
    """An effect above 0, judged by the bootstrap-t over its independent units: `se` the estimate's standard error, and
    each resample's effect with its own (`resampled`, `resampled_se`, from resampling the resample); the p-value is the
    share of t* = (resampled - estimate) / resampled_se at or above estimate / se (+1 smoothed), the interval
    estimate - se · t* at its 97.5 and 2.5 percentiles."""
    t = studentized_draws(estimate, resampled, resampled_se)
    if t.size < 2 or not se > 0:
        return Test(f"bootstrap-t over {units or '?'} {unit}: {what}, {t.size} usable resamples", float(estimate), 1.0, False,
                    float(estimate), None, interest, units, unit)
    p = float((1 + np.sum(t >= estimate / se)) / (1 + t.size))
    low, high = (estimate - se * np.percentile(t, [97.5, 2.5]))
    return Test(f"bootstrap-t over {units or '?'} {unit} ({t.size} resamples): {what}", float(estimate), p, estimate > 0,
                float(estimate), (float(low), float(high)), interest, units, unit)


def studentized_draws(estimate: float, resampled, resampled_se) -> np.ndarray:
    """The resamples' t* = (resampled - estimate) / resampled_se, those with a finite positive standard error."""
    values, errors = np.asarray(resampled, float), np.asarray(resampled_se, float)
    usable = np.isfinite(values) & np.isfinite(errors) & (errors > 0)
    return (values[usable] - float(estimate)) / errors[usable]


@recorded
def correlation_above(name: str, r: float, p_value: float, units: int, unit: str, interest: float | None, control: float = 0.0) -> Test:
    """A Pearson r above `control` (a shuffled control's r, or 0), its p-value from the caller's permutation test: the
    effect r - control with a Fisher-z interval over the `units` independent units (standard error 1 / sqrt(units - 3))."""
    se = 1 / math.sqrt(max(units - 3, 1))
    z = fisher_z(r)
    interval = (math.tanh(z - Z_95 * se) - control, math.tanh(z + Z_95 * se) - control)
    return Test(name, r - control, p_value, r > control, r - control, interval, interest, units, unit)


def fisher_z(r: float) -> float:
    """Fisher's z of a correlation, with |r| kept below 1 so that a perfect r stays finite."""
    return math.atanh(float(np.clip(r, -1 + 1e-12, 1 - 1e-12)))


@recorded
def ranks_greater(values: np.ndarray | Sequence[float], others: np.ndarray | Sequence[float], what: str = "values vs others", interest: float | None = None) -> Test:
    """`values` tend to exceed `others` (Mann-Whitney U, one-sided); the statistic is the common-language effect size and
    the effect its excess over 1/2 (Hanley-McNeil interval, kept within the effect's bounds, -1/2 to 1/2, and of some
    width at complete separation)."""
    ours, theirs = np.asarray(values, float), np.asarray(others, float)
    ours, theirs = ours[np.isfinite(ours)], theirs[np.isfinite(theirs)]
    if not ours.size or not theirs.size:
        return Test(f"Mann-Whitney U: {what}, {ours.size} vs {theirs.size}: a group is empty", 0.5, 1.0, False, 0.0, None, interest)
    result = scipy.stats.mannwhitneyu(ours, theirs, alternative="greater")
    auc = float(result.statistic) / (ours.size * theirs.size)
    n1, n2 = ours.size, theirs.size
    # Hanley-McNeil's variance vanishes at complete separation (0 or 1), shrinking the interval to a point: read half a pair inside.
    spread = min(max(auc, 0.5 / (n1 * n2)), 1 - 0.5 / (n1 * n2))
    q1, q2 = spread / (2 - spread), 2 * spread**2 / (1 + spread)
    se = math.sqrt(max(spread * (1 - spread) + (n1 - 1) * (q1 - spread**2) + (n2 - 1) * (q2 - spread**2), 1e-12) / (n1 * n2))
    return Test(f"Mann-Whitney U: {what}, {n1} vs {n2}", auc, float(result.pvalue), auc > 0.5, auc - 0.5,
                (max(auc - 0.5 - Z_95 * se, -0.5), min(auc - 0.5 + Z_95 * se, 0.5)), interest, n1 + n2)


@recorded
def untestable(name: str, interest: float | None = None, units: int | None = None, unit: str = "") -> Test:
    """What a step could not test on this model (no FFN makes the crossing, no variance): p 1, the paper's way not seen."""
    return Test(name, 0.0, 1.0, False, interest=interest, units=units, unit=unit)


@recorded
def relabelled(test: Test, name: str, holds: bool = True) -> Test:
    """`test` under another name, its direction holding only where `holds` also does (a condition the step checked)."""
    return dataclasses.replace(test, name=name, direction_holds=bool(test.direction_holds and holds))


@recorded
def all_of(tests: Sequence[Test], what: str) -> Test:
    """A claim that each of several tasks or relations holds (intersection-union test): its p-value, effect, interval and
    effect of interest are those of the part with the largest p (the part that decides it); each part keeps its own line,
    and the decision reads every part (`evidence.all_of`)."""
    if len(tests) == 1:
        return tests[0]
    weakest = max(tests, key=lambda t: t.p_value)
    holding = sum(t.direction_holds for t in tests)
    smallest_units = min((t.units for t in tests if t.units), default=None)
    return Test(f"each of {len(tests)} {what} ({holding} pointing the paper's way; largest p: {weakest.name})", weakest.statistic,
                weakest.p_value, holding == len(tests), weakest.effect, weakest.interval, weakest.interest, smallest_units,
                weakest.unit, tuple(tests), every_part=True)


@recorded
def any_of(tests: Sequence[Test], what: str) -> Test:
    """A claim that the phenomenon holds somewhere among several tasks or relations: the smallest p-value times their number
    (Bonferroni), valid however the parts depend on each other (relations fitted on the same inputs do; Fisher's method
    would need them independent). Its effect and interval are the smallest-p part's, and say nothing of the others; each
    part keeps its own line; the decision counts the parts above chance (`evidence.any_of`)."""
    if len(tests) == 1:
        return tests[0]
    smallest = min(tests, key=lambda t: t.p_value)
    holding = sum(t.direction_holds for t in tests)
    return Test(f"the smallest p of {len(tests)} {what}, times {len(tests)} ({holding} pointing the paper's way; smallest: {smallest.name})",
                smallest.statistic, min(1.0, len(tests) * smallest.p_value), smallest.direction_holds, smallest.effect, smallest.interval,
                units=smallest.units, unit=smallest.unit, parts=tuple(tests))
