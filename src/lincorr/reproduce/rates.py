"""Evidence of rates: paired rates (Tango's score test) and two independent rates (Miettinen and Nurminen's score test),
their difference or the share of the control's failures removed."""

from __future__ import annotations

import math

import numpy as np
from scipy.special import ndtr

from lincorr.reproduce.estimator import Evidence


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
                   interest: float | None = None) -> Evidence:
    """The rate `hits / n` less the control's, Miettinen and Nurminen's score test either way."""
    hits, n, control_hits, control_n = int(hits), int(n), int(control_hits), int(control_n)

    def z(theta: float) -> float:
        return miettinen_nurminen_z(hits, n, control_hits, control_n, theta)

    rate, control_rate = (hits + 0.5) / (n + 1), (control_hits + 0.5) / (control_n + 1)
    se = math.sqrt(rate * (1 - rate) / max(n, 1) + control_rate * (1 - control_rate) / max(control_n, 1))
    return Evidence(f"Miettinen-Nurminen score test, {what} {hits}/{n} vs {control_hits}/{control_n}",
                    hits / max(n, 1) - control_hits / max(control_n, 1), lambda theta: float(ndtr(-z(theta))),
                    lambda theta: float(ndtr(z(theta))), (-1 + 1e-9, 1 - 1e-9), interest,
                    None if interest is None else interest / se, (0.0, 0.0), n + control_n, "items")


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
