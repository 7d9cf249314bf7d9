"""A claim's decision as text: effect, interval and Δ; both one-sided tests; what would decide an inconclusive one."""

from __future__ import annotations

import math


def real(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and abs(value) < 1e300


def bound_text(value) -> str:
    """An interval's end: a number, or ∞ for an end the data leave open (a stored null)."""
    # A bound found by bisection at a p-value's step lands within a few ulps of it: 0, not -6.2e-61.
    return (f"{value:.3g}" if abs(value) > 1e-12 else "0") if real(value) else "∞"


def effect_text(decision: dict | None) -> str:
    """"0.38 [0.12, 0.64] vs Δ 0.5 (0.76 of Δ)" of a stored decision (`Decision.summary()`), with each test's power and the
    units that would give 0.8 where it is inconclusive, or "". A saved file may come from anyone: a field of the wrong kind
    is left out, never an error."""
    if not isinstance(decision, dict) or not real(decision.get("effect")):
        return ""
    text = f"{decision['effect']:.3g}"
    interval = decision.get("interval")
    if isinstance(interval, (list, tuple)) and len(interval) == 2:
        text += f" [{'-' if not real(interval[0]) else ''}{bound_text(interval[0])}, {bound_text(interval[1])}]"
    interest = decision.get("interest")
    if real(interest):
        text += f" vs Δ {interest:.3g}"
        if interest:
            text += f" ({decision['effect'] / interest:.2g} of Δ)"
    if decision.get("verdict") == "inconclusive" and real(decision.get("power_effect")):
        text += f"; power {decision['power_effect']:.2f} at Δ"
        if real(decision.get("units_needed")):
            text += f", about {int(decision['units_needed'])} {str(decision.get('unit') or 'units')} for 0.8"
    return text


def tests_text(decision: dict | None) -> str:
    """"T+ p 0.0012 (adj 0.018), T− p 0.6 (adj 1)": each one-sided test's raw and adjusted p, or ""."""
    if not isinstance(decision, dict):
        return ""
    parts = []
    for name, raw, adjusted in (("T+", "p_effect", "adjusted_p_effect"), ("T−", "p_size", "adjusted_p_size")):
        if real(decision.get(raw)) and real(decision.get(adjusted)):
            parts.append(f"{name} p {p_text(decision[raw])} (adj {p_text(decision[adjusted])})")
    return ", ".join(parts)


def p_text(p: float) -> str:
    """A p-value in two figures; one below float64's smallest (it reads as 0: a score test's normal tail underflows past
    z = 38) as "< 1e-300", which it is, rather than 0, which no test gives."""
    return f"{p:.2g}" if p > 0 else "< 1e-300"


def sensitivity_text(decision: dict | None) -> str:
    """"Δ/2: reproduced; 2Δ: reproduced, smaller": the verdicts at half and twice Δ, or ""."""
    if not isinstance(decision, dict) or not isinstance(decision.get("at_half"), str) or not isinstance(decision.get("at_double"), str):
        return ""
    return f"Δ/2: {decision['at_half']}; 2Δ: {decision['at_double']}"
