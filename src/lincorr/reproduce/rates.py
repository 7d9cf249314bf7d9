"""Evidence of rates: paired rates (Tango's score test) and two independent rates (Miettinen and Nurminen's score test),
their difference or the share of the control's failures removed."""

from __future__ import annotations

import math

import numpy as np
from scipy.special import ndtr

from lincorr.reproduce.estimator import Evidence
from lincorr.reproduce.verdicts import DIFFERENCE, FAILURES_REMOVED


def mcnemar_gain(before, after, what: str = "right", interest: float | None = None, unit: str = "items") -> Evidence:
    """The rise in the rate `what` from `before` to `after` on the same items, Tango's score test either way."""
    before, after = np.asarray(before, bool), np.asarray(after, bool)
    n = before.size
    gained, lost = int(np.sum(after & ~before)), int(np.sum(before & ~after))

    def z(theta: float) -> float:
        return tango_z(gained, lost, n, theta)

    spread = math.sqrt(max((gained + lost + 1) / (n + 2) - ((gained - lost) / max(n, 1)) ** 2, 1e-12) / max(n, 1))
    return Evidence(f"Tango's score test, {gained} became {what} and {lost} stopped being, of {n} {unit}", (gained - lost) / max(n, 1),
                    lambda theta: float(ndtr(-z(theta))), lambda theta: float(ndtr(z(theta))),
                    (-1 + 1e-9, 1 - 1e-9), interest, None if interest is None else interest / spread, (0.0, 0.0), n, unit)


def tango_z(gained: int, lost: int, n: int, theta: float) -> float:
    """Tango's (1998) score statistic for a paired difference of rates `theta` (gain rate minus loss rate): the observed
    difference less n·θ over its standard error at the rates' maximum likelihood under that difference."""
    if n == 0:
        return 0.0
    a, b, c = 2 * n, -(gained * (1 + theta) + lost * (1 - theta) - 2 * n * theta), -lost * theta * (1 - theta)
    loss_rate = (-b + math.sqrt(max(b * b - 4 * a * c, 0.0))) / (2 * a)
    variance = n * (2 * loss_rate + theta * (1 - theta))
    difference = gained - lost - n * theta
    if variance <= 1e-15:
        return 0.0 if abs(difference) < 1e-12 else math.copysign(math.inf, difference)
    return difference / math.sqrt(variance)


def fisher_greater(hits: int, n: int, control_hits: int, control_n: int, what: str = "real vs control",
                   interest: float | None = None, scale: str = DIFFERENCE) -> Evidence:
    """The rate `hits / n` above the control's, Miettinen and Nurminen's score test either way: of their difference, or
    (`scale` FAILURES_REMOVED) of the share of the control's failures the real arm does not have, 1 - (its failure rate /
    the control's), where Δ can be any value below 1 whatever the control's rate."""
    hits, n, control_hits, control_n = int(hits), int(n), int(control_hits), int(control_n)
    if scale == FAILURES_REMOVED:
        return failures_removed(n - hits, n, control_n - control_hits, control_n, what, interest)

    def z(theta: float) -> float:
        return miettinen_nurminen_z(hits, n, control_hits, control_n, theta)

    rate, control_rate = (hits + 0.5) / (n + 1), (control_hits + 0.5) / (control_n + 1)
    se = math.sqrt(rate * (1 - rate) / max(n, 1) + control_rate * (1 - control_rate) / max(control_n, 1))
    return Evidence(f"Miettinen-Nurminen score test, {what} {hits}/{n} vs {control_hits}/{control_n}",
                    hits / max(n, 1) - control_hits / max(control_n, 1), lambda theta: float(ndtr(-z(theta))),
                    lambda theta: float(ndtr(z(theta))), (-1 + 1e-9, 1 - 1e-9), interest,
                    None if interest is None else interest / se, (0.0, 0.0), n + control_n, "items")


def failures_removed(failures: int, n: int, control_failures: int, control_n: int, what: str,
                     interest: float | None) -> Evidence:
    """1 - (failures / n) / (control_failures / control_n), each way by Miettinen and Nurminen's score test of the ratio of
    failure rates: "the effect is at most θ" is "the ratio is at least 1 - θ"."""
    method = f"Miettinen-Nurminen score test of failures removed, {what}: {failures}/{n} vs {control_failures}/{control_n} fail"
    if not n or not control_n or failures == control_failures == 0:  # no arm that fails: nothing to compare
        return Evidence(f"{method} (neither fails)", math.nan, lambda theta: 1.0, lambda theta: 1.0, (-math.inf, math.inf),
                        interest, None, (0.0, 0.0), n + control_n, "items")

    def z(theta: float) -> float:
        return ratio_score_z(failures, n, control_failures, control_n, 1 - theta)

    # A control that never fails, beside a real arm that does, is an effect below any value (-inf): its tests still hold.
    effect = 1 - (failures / n) / (control_failures / control_n) if control_failures else -math.inf
    low, high = katz_bounds(failures, n, control_failures, control_n, 1.0)
    se = (high - low) / 2  # about one standard error of the ratio, and so of the effect: for planning only
    # The effect has no lower limit; far below any interval a test can give, the search for a bound stops.
    return Evidence(method, effect, lambda theta: float(ndtr(z(theta))), lambda theta: float(ndtr(-z(theta))),
                    (1 - 1e6, 1 - 1e-9), interest, None if interest is None else interest / max(se, 1e-12), (0.0, 0.0),
                    n + control_n, "items")


def katz_bounds(failures: int, n: int, control_failures: int, control_n: int, z: float) -> tuple[float, float]:
    """The ratio of two failure rates `z` standard errors either side on the log scale (Katz), each count and total
    given half a case (so that an arm with no failures, or all, keeps a variance): a planning and display figure."""
    log_ratio = math.log((failures + 0.5) / (n + 1)) - math.log((control_failures + 0.5) / (control_n + 1))
    se = math.sqrt(1 / (failures + 0.5) - 1 / (n + 1) + 1 / (control_failures + 0.5) - 1 / (control_n + 1))
    return math.exp(log_ratio - z * se), math.exp(log_ratio + z * se)


def ratio_score_z(failures: int, n: int, control_failures: int, control_n: int, ratio: float) -> float:
    """The score statistic of a ratio `ratio` of two independent rates: the rates' maximum likelihood under that ratio
    (Farrington and Manning's quadratic), the variance times N / (N - 1) (Miettinen and Nurminen)."""
    total = n + control_n
    difference = failures / n - ratio * control_failures / control_n
    a, b, c = ratio * total, -(ratio * n + failures + control_n + ratio * control_failures), failures + control_failures
    if a < 1e-12 * abs(b):  # the quadratic's leading term vanishes as the ratio nears 0
        fitted_control = c / -b
    else:
        fitted_control = (-b - math.sqrt(max(b * b - 4 * a * c, 0.0))) / (2 * a)
    fitted = ratio * fitted_control
    variance = (fitted * (1 - fitted) / n + ratio**2 * fitted_control * (1 - fitted_control) / control_n) * total / (total - 1)
    if variance <= 1e-15:
        return 0.0 if abs(difference) < 1e-14 else math.copysign(math.inf, difference)
    return difference / math.sqrt(variance)


def miettinen_nurminen_z(hits: int, n: int, control_hits: int, control_n: int, theta: float) -> float:
    """The score statistic of a difference of two independent rates `theta`: the rates' maximum likelihood under that
    difference (Farrington and Manning's cubic), the variance times N / (N - 1) (Miettinen and Nurminen)."""
    if n == 0 or control_n == 0:
        return 0.0
    rate, control_rate = hits / n, control_hits / control_n
    difference = rate - control_rate - theta
    if abs(difference) < 1e-14:
        return 0.0
    ratio = control_n / n
    a = 1 + ratio
    b = -(1 + ratio + rate + ratio * control_rate + theta * (ratio + 2))
    c = theta * theta + theta * (2 * rate + ratio + 1) + rate + ratio * control_rate
    d = -rate * theta * (1 + theta)
    v = (b / a / 3) ** 3 - b * c / (6 * a * a) + d / a / 2
    s = math.sqrt(max((b / a / 3) ** 2 - c / a / 3, 0.0))
    u = math.copysign(s, v) if v != 0 else s
    cosine = min(max(v / u**3, -1.0), 1.0) if u != 0 else 0.0
    fitted = 2 * u * math.cos((math.pi + math.acos(cosine)) / 3) - b / a / 3
    fitted_control = fitted - theta
    variance = (fitted * (1 - fitted) / n + fitted_control * (1 - fitted_control) / control_n) * (n + control_n) / (n + control_n - 1)
    if variance <= 1e-15:
        return math.copysign(math.inf, difference)
    return difference / math.sqrt(variance)
