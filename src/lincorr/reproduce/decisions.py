"""How a claim is decided: two one-sided tests of one estimator, adjusted across the run, and the interval that inverts them.

For a claim whose effect of interest is Δ (the paper's effect, or a smallest effect of interest with its reason), the
estimator of its test kind (`evidence`) gives two one-sided tests, each at the claim's level `level`:

- T+, "the effect is at most 0": rejected, the effect is there;
- T−, "the effect is at least Δ": rejected, the effect is smaller than the paper's.

`reproduced` when T+ rejects and T− does not (there, and consistent with Δ); `reproduced, smaller` when both reject
(there, below Δ: its ratio to Δ is printed); `not reproduced` when T− rejects and T+ does not; `inconclusive` when
neither does, with the units each test would need for a power of 0.8 (power plans budgets; it decides nothing).

The run's family: each of a run's m measured claims is read at ALPHA / m (Bonferroni). A claim's two hypotheses
cannot both be true (the effect cannot be at most 0 and at least Δ > 0), so at most m of the 2m are, and the chance of
any false rejection in the run is at most ALPHA. The interval is the pair of one-sided bounds at the same ALPHA / m,
so the verdict reads off it: reproduced exactly when its lower end is above 0, below Δ exactly when its upper end is.
The adjusted p-values are m times the raw ones (capped at 1), below ALPHA exactly when the test rejects.
"""

from __future__ import annotations

import dataclasses
import math

import scipy.stats

from lincorr.reproduce.estimator import Evidence
from lincorr.reproduce.evidence import counted, evidence_of
from lincorr.reproduce.verdicts import ALPHA, Test

TARGET_POWER = 0.8
# The most units, in multiples of a test's own, that `units_for_power` reports: past it the power is a few times the
# level, and a hundredfold extrapolation of one standard error says little.
MOST_UNITS_FACTOR = 100
REPRODUCED, SMALLER, NOT_REPRODUCED, INCONCLUSIVE = "reproduced", "reproduced, smaller", "not reproduced", "inconclusive"


@dataclasses.dataclass(frozen=True)
class Decision:
    """A claim's verdict and the numbers it reads off: the effect with its interval at `level` on each side, Δ, the raw and
    adjusted p of each one-sided test, each test's power at the other's hypothesis and the units that would give them
    TARGET_POWER (one number: the normal approximation gives both tests the same separation), the verdicts Δ/2 and 2Δ
    would give, and, where the budget cannot reach `level`, why."""

    verdict: str
    method: str
    effect: float | None
    interval: tuple[float, float] | None
    interest: float | None
    level: float
    claims: int
    p_effect: float
    p_size: float | None
    adjusted_p_effect: float
    adjusted_p_size: float | None
    power_effect: float | None
    power_size: float | None
    units: int | None
    unit: str
    units_needed: int | None
    at_half: str | None
    at_double: str | None
    by_design: str | None = None

    def summary(self) -> dict:
        row = dataclasses.asdict(self)
        # An end the data leave open (past a bootstrap's draws) is null: JSON has no infinity.
        row["interval"] = [end if math.isfinite(end) else None for end in self.interval] if self.interval is not None else None
        return row


def verdict_of(evidence: Evidence, interest: float | None, level: float) -> str:
    """The verdict of the two one-sided tests at `level`, Δ = `interest` (without one, only T+ is run)."""
    return verdict_read(evidence.above(0.0) <= level, interest is not None and interest > 0 and evidence.below(interest) <= level)


def verdict_read(there: bool, smaller: bool) -> str:
    """The verdict of T+ (`there`: the effect is above 0) and T− (`smaller`: it is below Δ) as they came out."""
    if there:
        return SMALLER if smaller else REPRODUCED
    return NOT_REPRODUCED if smaller else INCONCLUSIVE


def decide(test: Test, claims: int = 1, alpha: float = ALPHA) -> Decision:
    """The decision on `test` in a run of `claims` measured claims: both one-sided tests at `alpha / claims`."""
    level = alpha / max(claims, 1)
    evidence = counted(evidence_of(test), level)
    interest = evidence.interest if evidence.interest is not None and evidence.interest > 0 else None
    p_effect = evidence.above(0.0)
    p_size = evidence.below(interest) if interest is not None else None
    known = math.isfinite(evidence.effect)
    interval = (evidence.lower(level), evidence.upper(level)) if known else None
    power_effect, power_size = (power(evidence, level) if interest is not None else (None, None))
    verdict = verdict_read(p_effect <= level, p_size is not None and p_size <= level)
    return Decision(
        verdict, evidence.method, evidence.effect if known else None, interval, interest, level, claims, p_effect, p_size,
        min(1.0, p_effect * claims), None if p_size is None else min(1.0, p_size * claims), power_effect, power_size,
        evidence.units, evidence.unit, units_for_power(evidence, level) if verdict == INCONCLUSIVE else None,
        verdict_of(evidence, interest / 2, level) if interest else None, verdict_of(evidence, interest * 2, level) if interest else None,
        by_design(evidence, level))


def power(evidence: Evidence, level: float) -> tuple[float | None, float | None]:
    """T+'s power where the effect is Δ and T−'s where it is 0: the normal approximation at the estimator's standard error
    (`Evidence.separation`), 0 where the method's smallest p is above `level`."""
    if evidence.separation is None:
        return None, None
    reach = float(scipy.stats.norm.sf(scipy.stats.norm.isf(level) - evidence.separation))
    above, below = (0.0 if floor > level else reach for floor in evidence.floors)
    return above, below


def units_for_power(evidence: Evidence, level: float) -> int | None:
    """About how many units would give each test TARGET_POWER at `level` (the separation grows with the square root of the
    units); None where that is past MOST_UNITS_FACTOR times the units, or cannot be read."""
    if evidence.separation is None or not evidence.units or not evidence.separation > 0:
        return None
    factor = ((scipy.stats.norm.isf(level) + scipy.stats.norm.ppf(TARGET_POWER)) / evidence.separation) ** 2
    if factor > MOST_UNITS_FACTOR:
        return None
    return max(int(math.ceil(evidence.units * factor)), evidence.units)


def by_design(evidence: Evidence, level: float) -> str | None:
    """Which test no outcome at this budget could make reject (its smallest p above `level`), or None."""
    tests = [f"{name}'s smallest p is {floor:.3g}" for name, floor in zip(("T+", "T−"), evidence.floors) if floor > level]
    if not tests:
        return None
    return (f"{' and '.join(tests)} at {evidence.units or '?'} {evidence.unit or 'units'}, above the claim's level "
            f"{level:.3g}: a larger budget is needed for it to reject")
