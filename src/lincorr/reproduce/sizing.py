"""`--budget decide`: a budget sized to decide, from a first look at the quick budget, in two looks that share the level.

The first look is the quick budget's run. Each claim it leaves `inconclusive` is planned again: the units that give its
two tests a power of 0.8 at Δ at the second look's level (`decisions.units_for_power`, from the first look's standard
error, never from its effect), the quick setting its units grow with (`grows` in the paper's claims.yaml: sources, facts,
runs, seeds, names, inputs) scaled to them, and its predicted time: the first look's seconds of every claim that grows
with the same setting, times the growth (claims share work, so this errs long). The planned claims are taken
cheapest first while their predicted time fits `max_hours`; the others are named with their cost. The second look
measures them at the grown settings, the first look's units among its own.

Each look decides at ALPHA / 2, spread over the run's m claims as any run's ALPHA is (`judging.judged`): a false
rejection at either look has a chance of at most ALPHA / 2, so one anywhere in the run at most ALPHA, however the
looks depend on each other (Bonferroni over the two looks). Sizing the second look from a standard error alone is a
sample-size re-estimation from a nuisance parameter, which keeps its tests at their level; the suite measures the
whole two-look design's error rates by simulation (tests/test_sizing.py).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

from lincorr.models import LM, load_model
from lincorr.reproduce.claims import DECIDE, growth, load_paper
from lincorr.reproduce.decisions import INCONCLUSIVE, units_for_power
from lincorr.reproduce.evidence import evidence_of
from lincorr.reproduce.refresh import duration_text
from lincorr.reproduce.judging import judged, restating
from lincorr.reproduce.runner import ReproductionResult, alpha_of, reproduce
from lincorr.reproduce.verdicts import Test

PLANNED, OVER_CAP, DECIDED, FIXED = "planned", "over the cap", "decided at the first look", "not grown"


@dataclasses.dataclass(frozen=True)
class Planned:
    """One measured claim of the first look as the second takes it: its units now and planned, the setting that grows
    them with its value now and planned, the predicted seconds, and what is done with it (`outcome`) and why."""

    id: str
    units: int | None
    unit: str
    outcome: str
    why: str = ""
    planned_units: int | None = None
    setting: str | None = None
    value: object = None
    planned_value: object = None
    predicted_seconds: float | None = None

    def line(self) -> str:
        """"merullo.transfer: planned, 8 -> 53 sources (n_sources 8 -> 53), about 12 min"."""
        if self.outcome in (PLANNED, OVER_CAP):
            return (f"{self.id}: {self.outcome}, {self.units} -> {self.planned_units} {self.unit} ({self.setting} "
                    f"{value_text(self.value)} -> {value_text(self.planned_value)}), about {duration_text(self.predicted_seconds or 0.0)}"
                    + (f"; {self.why}" if self.why else ""))
        return f"{self.id}: {self.outcome}" + (f" ({self.why})" if self.why else "")


def value_text(value) -> str:
    """A setting's value as the plan prints it: a count, or a list of seeds by its length and ends."""
    return f"{len(value)} ({value[0]}-{value[-1]})" if isinstance(value, list) and value else str(value)


def plan(first: ReproductionResult, max_hours: float) -> tuple[Planned, ...]:
    """The second look of `first` (a first look judged at the second's level, `alpha_of(DECIDE)`): every measured claim
    with its outcome, the planned ones cheapest first within `max_hours`."""
    paper, grows = load_paper(first.paper), growth(first.paper)
    restated = restating(first.claims)
    family = sum(c.detail is not None for c in first.claims) - len(restated)
    level = alpha_of(DECIDE) / max(family, 1)
    # A claim often reads work another claim did (Feng's localisation the fine-tuning of Fig. 2): each is charged the
    # first look's seconds of every claim that grows with its setting, which errs long.
    setting_seconds: dict[str, float] = {}
    for claim in first.claims:
        if claim.id in grows and claim.seconds is not None:
            setting_seconds[grows[claim.id].setting] = setting_seconds.get(grows[claim.id].setting, 0.0) + claim.seconds
    rows, candidates = [], []
    for claim in first.claims:
        if claim.detail is None:
            continue
        decision, test = claim.decision or {}, claim.measured_test()
        row = Planned(claim.id, decision.get("units"), decision.get("unit") or "units", DECIDED)
        if claim.verdict != INCONCLUSIVE:
            rows.append(row)
            continue
        if claim.id not in grows:
            rows.append(dataclasses.replace(row, outcome=FIXED, why="its units are fixed by its design; no quick setting grows them"))
            continue
        wanted = wanted_units(test, level) if test is not None else None
        if wanted is None or not row.units:
            rows.append(dataclasses.replace(row, outcome=FIXED, why="the units for a power of 0.8 at Δ are past 100 times its own"
                                            if row.units else "its units cannot be read"))
            continue
        rule = grows[claim.id]
        value = (paper.claim(claim.id).settings_for("quick") or {})[rule.setting]
        planned_value = rule.grown(value, math.ceil(rule.size(value) * wanted / row.units))
        factor = rule.size(planned_value) / rule.size(value)
        if factor <= 1:
            rows.append(dataclasses.replace(row, outcome=FIXED, why=f"{rule.setting} is at the most its data hold ({rule.most})"))
            continue
        short = rule.size(planned_value) < math.ceil(rule.size(value) * wanted / row.units)
        capped = f"{rule.setting} capped at the {rule.most} its data hold: power below 0.8" if short else ""
        candidates.append(dataclasses.replace(
            row, outcome=PLANNED, why=capped, planned_units=math.ceil(row.units * factor), setting=rule.setting, value=value,
            planned_value=planned_value, predicted_seconds=setting_seconds.get(rule.setting, 0.0) * factor))
    spent = 0.0
    for row in sorted(candidates, key=lambda r: r.predicted_seconds or 0.0):
        fits = spent + (row.predicted_seconds or 0.0) <= max_hours * 3600
        spent += (row.predicted_seconds or 0.0) if fits else 0.0
        rows.append(row if fits else dataclasses.replace(row, outcome=OVER_CAP))
    order = {c.id: i for i, c in enumerate(first.claims)}
    return tuple(sorted(rows, key=lambda r: order[r.id]))


def wanted_units(test: Test, level: float) -> int | None:
    """The units the second look asks of an undecided `test` at `level`: those for a power of 0.8 at Δ
    (`decisions.units_for_power`, from its standard error), or twice its own where that power reads as reached already
    (a normal approximation, loose at a few units); None where they are past 100 times its own or cannot be read."""
    evidence = evidence_of(test)
    needed = units_for_power(evidence, level)
    if needed is None or not evidence.units:
        return None
    return needed if needed > evidence.units else 2 * evidence.units


def plan_text(plans: tuple[Planned, ...], max_hours: float) -> str:
    planned = [p for p in plans if p.outcome == PLANNED]
    total = sum(p.predicted_seconds or 0.0 for p in planned)
    return "\n".join([f"--budget decide: {len(planned)} claims measured again, about {duration_text(total)} of the {max_hours:g} h "
                      f"allowed (--max-hours); each look decides at half the run's 0.05"] + [p.line() for p in plans])


def decided(paper: str, lm, *, max_hours: float, on_plan: Callable[[tuple[Planned, ...]], None] | None = None,
            only: str | None = None, **run) -> ReproductionResult:
    """`paper`'s claims on `lm` at `--budget decide`: the quick budget's run as the first look, the claims it leaves
    undecided measured again at the units `plan` gives them (`on_plan` hears the plan first), both looks decided at
    ALPHA / 2 across the run. `run`: `reproduce`'s registry, settings and eval_model."""
    lm = lm if isinstance(lm, LM) else load_model(lm)  # loaded once, for both looks
    first_look = reproduce(paper, lm, only=only, budget="quick", **run)
    first = dataclasses.replace(first_look, budget=DECIDE, claims=judged(first_look.claims, alpha_of(DECIDE)))
    plans = plan(first, max_hours)
    if on_plan is not None:
        on_plan(plans)
    claims_of = load_paper(paper)
    grown = {p.id: {**(claims_of.claim(p.id).settings_for("quick") or {}), str(p.setting): p.planned_value}
             for p in plans if p.outcome == PLANNED}
    if not grown:
        return first
    second = reproduce(paper, lm, only=",".join(grown), budget="quick", grown=grown, **run)
    # A second look that could not measure (too many sources for the task's pairs, say) leaves the first look's.
    again = {c.id: c for c in second.claims if c.detail is not None}
    return dataclasses.replace(first, claims=judged([again.get(c.id, c) for c in first.claims], alpha_of(DECIDE)),
                               seconds=round((first.seconds or 0.0) + (second.seconds or 0.0), 1),
                               measured=(first.measured or 0) + (second.measured or 0))
