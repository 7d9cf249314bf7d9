"""The decisions' error rates, measured by simulation: seeded synthetic data for each test kind at a known true effect.

For each kind (`KINDS`), runs of `CLAIMS` claims are drawn with the true effect 0, Δ/2, Δ and 2Δ, at a small and a
large budget, and decided as a run of that many claims is (`decisions.verdict_of` at ALPHA / CLAIMS). `simulate`
counts, over the runs, how often any claim of a run at effect 0 is `reproduced` and any at effect Δ `not reproduced`
(the family-wise errors the design bounds by ALPHA), and how often each verdict comes out at each effect. The suite
asserts the bounds (tests/test_calibration.py) and docs/methods.md prints the table (`python docs/methods.py --write`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np
import scipy.stats

from lincorr.reproduce import evidence, rates
from lincorr.reproduce.decisions import INCONCLUSIVE, NOT_REPRODUCED, REPRODUCED, SMALLER, verdict_of
from lincorr.reproduce.estimator import Evidence
from lincorr.reproduce.verdicts import ALPHA, FAILURES_REMOVED

CLAIMS = 15  # a run's family, about a paper's measured claims
EFFECTS = (0.0, 0.5, 1.0, 2.0)  # the true effect, in multiples of Δ
VERDICT_ORDER = (REPRODUCED, SMALLER, NOT_REPRODUCED, INCONCLUSIVE)


@dataclasses.dataclass(frozen=True)
class Kind:
    """A test kind to simulate: its Δ, the units of a small and a large budget, and how one claim's data at a true effect
    and budget are drawn and read (`draw(rng, effect, units)` -> Evidence); `limit` says where data of this shape are a
    known limit of the method (shown with its measured rates, not held to the bounds)."""

    name: str
    interest: float
    budgets: tuple[int, int]
    unit: str
    draw: Callable[[np.random.Generator, float, int], Evidence]
    limit: str = ""


def draw_binomial(rng: np.random.Generator, effect: float, units: int) -> Evidence:
    return evidence.binomial_above(int(rng.binomial(units, 0.2 + effect)), units, 0.2, interest=0.2)


def draw_paired_rates(rng: np.random.Generator, effect: float, units: int) -> Evidence:
    loss = 0.1
    outcome = rng.choice(3, size=units, p=[loss + effect, loss, 1 - 2 * loss - effect])  # gained, lost, unchanged
    before = outcome == 1
    after = outcome == 0
    return rates.mcnemar_gain(before, after, interest=0.2)


def draw_two_rates(rng: np.random.Generator, effect: float, units: int) -> Evidence:
    return rates.fisher_greater(int(rng.binomial(units, 0.3 + effect)), units, int(rng.binomial(units, 0.3)), units, interest=0.25)


def draw_failures_removed(rng: np.random.Generator, effect: float, units: int) -> Evidence:
    control_failing = 0.7
    failing = control_failing * (1 - effect)
    return rates.fisher_greater(units - int(rng.binomial(units, failing)), units, units - int(rng.binomial(units, control_failing)), units,
                                interest=0.4, scale=FAILURES_REMOVED)


def draw_paired_values(rng: np.random.Generator, effect: float, units: int) -> Evidence:
    return evidence.paired_greater(rng.normal(effect, 1.0, units), np.zeros(units), interest=0.5)


def draw_bootstrap(rng: np.random.Generator, effect: float, units: int) -> Evidence:
    return bootstrapped_mean(rng, rng.normal(effect, 1.0, units))


def draw_skewed_bootstrap(rng: np.random.Generator, effect: float, units: int) -> Evidence:
    return bootstrapped_mean(rng, rng.exponential(1.0, units) - 1.0 + effect)


def bootstrapped_mean(rng: np.random.Generator, values: np.ndarray) -> Evidence:
    """The mean and its resampled means: enough draws for the expanded bootstrap's smallest p to lie below ALPHA / CLAIMS."""
    draws = 2000 if values.size <= 20 else 400
    resampled = values[rng.integers(0, values.size, size=(draws, values.size))].mean(axis=1)
    return evidence.bootstrap_greater(float(values.mean()), resampled, "mean", interest=0.5, units=values.size)


def draw_studentized(rng: np.random.Generator, effect: float, units: int) -> Evidence:
    return studentized_mean(rng, rng.normal(effect, 1.0, units))


def draw_skewed_studentized(rng: np.random.Generator, effect: float, units: int) -> Evidence:
    return studentized_mean(rng, rng.exponential(1.0, units) - 1.0 + effect)


def studentized_mean(rng: np.random.Generator, values: np.ndarray) -> Evidence:
    """The mean, its standard error and the resampled means with theirs (s / sqrt(n) of each resample)."""
    samples = values[rng.integers(0, values.size, size=(999 if values.size <= 20 else 400, values.size))]
    root = math.sqrt(values.size)
    return evidence.studentized_greater(float(values.mean()), float(values.std(ddof=1)) / root, samples.mean(axis=1),
                                        samples.std(axis=1, ddof=1) / root, "mean", interest=0.5, units=values.size)


def draw_correlation(rng: np.random.Generator, effect: float, units: int) -> Evidence:
    x = rng.normal(size=units)
    y = effect * x + math.sqrt(1 - effect**2) * rng.normal(size=units)
    return evidence.correlation_above("r", float(np.corrcoef(x, y)[0, 1]), 1.0, units, "inputs", 0.3)


def draw_ranks(rng: np.random.Generator, effect: float, units: int) -> Evidence:
    shift = math.sqrt(2) * scipy.stats.norm.ppf(0.5 + effect)  # two normals this far apart have an AUC of 1/2 + effect
    return evidence.ranks_greater(np.round(rng.normal(shift, 1.0, units), 1), np.round(rng.normal(0.0, 1.0, units), 1), interest=0.2)


def draw_each_of(rng: np.random.Generator, effect: float, units: int) -> Evidence:
    return evidence.each_of(tuple(evidence.paired_greater(rng.normal(effect, 1.0, units), np.zeros(units), interest=0.5)
                                  for _ in range(3)), "parts")


KINDS = (
    Kind("binomial (exact)", 0.2, (20, 200), "trials", draw_binomial),
    Kind("paired rates (Tango's score)", 0.2, (30, 300), "items", draw_paired_rates),
    Kind("two rates (Miettinen-Nurminen score)", 0.25, (30, 300), "items per arm", draw_two_rates),
    Kind("two rates, failures removed (Miettinen-Nurminen score)", 0.4, (30, 300), "items per arm", draw_failures_removed),
    Kind("paired values (Student's t)", 0.5, (10, 200), "pairs", draw_paired_values),
    Kind("bootstrap (bias-corrected)", 0.5, (15, 150), "units", draw_bootstrap),
    Kind("bootstrap (bias-corrected), exponential units", 0.5, (15, 80), "units", draw_skewed_bootstrap,
         "BC corrects the estimate's bias, not its skew (that is BCa's acceleration, which needs the units' own values): "
         "with skewed units and few of them, the upper bound is too low"),
    Kind("bootstrap-t", 0.5, (15, 150), "units", draw_studentized),
    Kind("bootstrap-t, exponential units", 0.5, (15, 80), "units", draw_skewed_studentized,
         "a resample that misses the long tail has a small standard error, so with 15 skewed units t* has a long lower "
         "tail and T− errs past the level; at 80 units it holds (the claims that use it resample 500 held-out inputs)"),
    Kind("correlation (Fisher's z)", 0.3, (20, 600), "units", draw_correlation),
    Kind("ranks (AUC score test, ties)", 0.2, (15, 150), "per group", draw_ranks),
    Kind("each of 3 parts (paired t)", 0.5, (10, 200), "pairs per part", draw_each_of),
)


@dataclasses.dataclass(frozen=True)
class Rates:
    """One kind at one budget: the family-wise error rates over `runs` runs of CLAIMS claims, and the share of claims
    given each verdict at each true effect (in multiples of Δ)."""

    kind: str
    units: int
    unit: str
    runs: int
    false_reproduced: float  # runs at effect 0 with any claim `reproduced` or `reproduced, smaller`
    false_not_reproduced: float  # runs at effect Δ with any claim `not reproduced` or `reproduced, smaller`
    verdicts: dict[float, dict[str, float]]


def simulate(kind: Kind, units: int, runs: int, seed: int = 0) -> Rates:
    """`runs` runs of CLAIMS claims of `kind` at each true effect, decided at ALPHA / CLAIMS."""
    rng = np.random.default_rng(seed)
    level = ALPHA / CLAIMS
    verdicts: dict[float, dict[str, float]] = {}
    family_errors = {}
    for multiple in EFFECTS:
        outcomes = np.array([[verdict_of(kind.draw(rng, multiple * kind.interest, units), kind.interest, level)
                              for _ in range(CLAIMS)] for _ in range(runs)])
        verdicts[multiple] = {verdict: float(np.mean(outcomes == verdict)) for verdict in VERDICT_ORDER}
        wrong = (REPRODUCED, SMALLER) if multiple == 0 else (NOT_REPRODUCED, SMALLER) if multiple == 1 else ()
        family_errors[multiple] = float(np.mean(np.isin(outcomes, wrong).any(axis=1))) if wrong else math.nan
    return Rates(kind.name, units, kind.unit, runs, family_errors[0.0], family_errors[1.0], verdicts)


def monte_carlo_margin(runs: int) -> float:
    """Three standard errors of a rate of ALPHA estimated over `runs` runs: the slack a simulated error rate is allowed."""
    return 3 * math.sqrt(ALPHA * (1 - ALPHA) / runs)


RUNS = 300  # runs per kind, budget and effect: a family-wise rate of ALPHA is measured within about 0.013


def calibrated(runs: int = RUNS) -> list[Rates]:
    """Every kind at both its budgets, each seeded by its place in KINDS (the suite and docs/methods.md read the same numbers)."""
    return [simulate(kind, units, runs, seed=index) for index, kind in enumerate(KINDS) for units in kind.budgets]


def table(results: list[Rates]) -> str:
    """The simulation as a markdown table: per kind and budget, the family-wise errors and the verdicts at each effect."""
    lines = [f"| kind | units | runs of {CLAIMS} | any reproduced at 0 | any not reproduced at Δ | at 0: not reproduced "
             "| at Δ/2: reproduced, smaller | at Δ: reproduced | at 2Δ: reproduced |", "|---|---|---|---|---|---|---|---|---|"]
    for found in results:
        at = found.verdicts
        lines.append(f"| {found.kind} | {found.units} {found.unit} | {found.runs} | {found.false_reproduced:.3f} "
                     f"| {found.false_not_reproduced:.3f} | {at[0.0][NOT_REPRODUCED]:.2f} | {at[0.5][SMALLER]:.2f} "
                     f"| {at[1.0][REPRODUCED]:.2f} | {at[2.0][REPRODUCED]:.2f} |")
    return "\n".join(lines) + "\n"
