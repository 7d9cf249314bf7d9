"""The effect of a claim as one line of text: effect, interval, the effect judged against, power, and the budget that would decide it."""

from __future__ import annotations

import math


def effect_text(detail: dict | None, power: float | None, needed: int | None) -> str:
    """"effect 0.38 [0.12, 0.64] vs 0.5, power 0.41 (about 24 facts for power 0.8)" of a stored test (`Test.summary()`), or "".
    A saved file may come from anyone: a field of the wrong kind is left out, never an error."""
    def real(value) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and abs(value) < 1e300

    if not isinstance(detail, dict) or not real(detail.get("effect")):
        return ""
    text = f"effect {detail['effect']:.3g}"
    interval = detail.get("interval")
    if isinstance(interval, (list, tuple)) and len(interval) == 2 and all(map(real, interval)):
        text += f" [{interval[0]:.3g}, {interval[1]:.3g}]"
    if real(detail.get("interest")):
        text += f" vs {detail['interest']:.3g}"
    if real(power) and (needed is None or real(needed)):
        text += f", power {power:.2f}"
        if needed:
            text += f" (about {int(needed)} {str(detail.get('unit') or 'units')} for power 0.8)"
    return text
