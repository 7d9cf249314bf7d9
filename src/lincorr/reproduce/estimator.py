"""One estimator of a claim's effect and its two one-sided tests against any value of the effect (`Evidence`), and the
confidence bounds that invert them; `evidence` makes one for each test kind, `decisions` reads it."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable


@dataclasses.dataclass(frozen=True)
class Evidence:
    """One estimator of a claim's effect (positive: the paper's way) and its two one-sided tests: `p_above(θ)` the p-value
    of "the effect is at most θ", `p_below(θ)` of "the effect is at least θ"; the values the effect can take, Δ, the
    separation of Δ from 0 in standard errors, the smallest p each test can reach, the units and the method's name."""

    method: str
    effect: float
    p_above: Callable[[float], float]
    p_below: Callable[[float], float]
    bounds: tuple[float, float]
    interest: float | None
    separation: float | None = None
    floors: tuple[float, float] = (0.0, 0.0)  # of `p_above` and of `p_below`
    units: int | None = None
    unit: str = ""
    parts: tuple[Evidence, ...] = ()
    bounded: bool = True  # the effect cannot pass `bounds` (a rate); else a bound that reaches them is unbounded (a bootstrap's draws)
    each: str | None = None  # for `all_of`: what its parts are, so that `counted` can judge it on some of them

    def above(self, theta: float) -> float:
        """`p_above(θ)`, where θ lies past what a bounded effect can be: 0 below its values, 1 above them."""
        if self.bounded and theta < self.bounds[0]:
            return 0.0
        return 1.0 if self.bounded and theta > self.bounds[1] else self.p_above(theta)

    def below(self, theta: float) -> float:
        """`p_below(θ)`, 0 past a bounded effect's largest value (it cannot reach θ), 1 below its smallest."""
        if self.bounded and theta > self.bounds[1]:
            return 0.0
        return 1.0 if self.bounded and theta < self.bounds[0] else self.p_below(theta)

    def lower(self, level: float) -> float:
        """The lower confidence bound at one-sided `level`: the largest θ that "at most θ" is rejected at (a bound of the
        effect's values, or -inf past a bootstrap's draws, where none or every one is)."""
        low, high = self.bounds
        if self.p_above(low) > level:  # past a bootstrap's lowest draw "at most θ" has its smallest p
            return low if self.bounded or self.floors[0] <= level else -math.inf
        return high if self.p_above(high) <= level else crossing(lambda theta: self.p_above(theta) <= level, low, high)

    def upper(self, level: float) -> float:
        """The upper confidence bound at one-sided `level`: the smallest θ that "at least θ" is rejected at."""
        low, high = self.bounds
        if self.p_below(high) > level:
            return high if self.bounded or self.floors[1] <= level else math.inf
        return low if self.p_below(low) <= level else crossing(lambda theta: self.p_below(theta) <= level, high, low)


def crossing(rejected: Callable[[float], bool], inside: float, outside: float) -> float:
    """The last value, going from `inside` (where the test rejects) towards `outside` (where it does not), at which it still
    rejects: bisection kept on the rejecting side, so that a bound and the test it inverts agree even where a p-value
    steps (a bootstrap's)."""
    for _ in range(200):
        middle = (inside + outside) / 2
        if middle in (inside, outside):
            break
        inside, outside = (middle, outside) if rejected(middle) else (inside, middle)
    return inside
