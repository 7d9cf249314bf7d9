"""A run's claims judged: each claim's test made again by the current code from its recipe, on the scale its claims.yaml
names, then every measured claim decided together at the run's level (`decisions.decide`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

from lincorr.reproduce.claims import interest_scales, known_papers, restatements
from lincorr.reproduce.decisions import decide
from lincorr.reproduce.verdicts import ALPHA, Test, rebuilt

if TYPE_CHECKING:
    from lincorr.reproduce.runner import ClaimResult


def retested(claim: ClaimResult) -> ClaimResult:
    """The claim with its test (and its variant's) made again by the current code from their recipes; a ValueError naming
    the claim where either cannot be (a stored claim may come from anyone)."""
    if claim.detail is None and claim.verdict != "not applicable":  # carried on, it would pass for a verdict the code gave
        raise ValueError(f"claim {claim.id} is {claim.verdict!r} with no test behind it to judge again")
    if claim.detail is None:
        return claim
    try:
        test = Test.from_summary(claim.detail)
        variant = claim.variant
        if variant and variant.get("detail"):
            beside = Test.from_summary(variant["detail"])
            variant = {**variant, "test": beside.name, "p_value": beside.p_value, "detail": beside.summary()}
    except ValueError as error:
        raise ValueError(f"claim {claim.id}: {error}") from None
    return dataclasses.replace(claim, test=test.name, statistic=test.statistic, p_value=test.p_value, detail=test.summary(), variant=variant)


def judged(claims: Sequence[ClaimResult], alpha: float = ALPHA) -> tuple[ClaimResult, ...]:
    """The claims of one run, their tests made by the current code (`retested`), decided together (`decisions.decide`):
    each of the m measured claims' two one-sided tests at `alpha` / m, its interval at the same level; a variant is decided
    at that level too, outside the family, and so is a claim that restates others of the run (`restating`)."""
    measured = [i for i, c in enumerate(claims) if c.detail is not None]
    family = len(measured) - len(restating(claims))
    out = list(claims)
    for i in measured:
        claim = on_its_scale(claims[i])
        decision = decide(cast(Test, claim.measured_test()), family, alpha)
        variant = claim.variant
        if variant and variant.get("detail"):
            beside = decide(Test.from_summary(variant["detail"]), family, alpha)
            variant = {**variant, "test": beside.method, "p_value": beside.p_effect, "verdict": beside.verdict, "decision": beside.summary()}
        out[i] = dataclasses.replace(claim, test=decision.method, p_value=decision.p_effect, adjusted_p=decision.adjusted_p_effect,
                                     verdict=decision.verdict, variant=variant, decision=decision.summary())
    return tuple(out)


def on_its_scale(claim: ClaimResult) -> ClaimResult:
    """The claim with its test made again on the scale its paper's claims.yaml judges it on (`claims.interest_scales`),
    with Δ and its reason on that scale; as it is where none is given."""
    paper = claim.id.partition(".")[0]
    scale = interest_scales(paper).get(claim.id) if paper in known_papers() else None
    recipe = (claim.detail or {}).get("recipe")
    if scale is None or not recipe:
        return claim
    test = rebuilt({"test": recipe["test"], "arguments": {**recipe["arguments"], "scale": scale.name, "interest": scale.interest}})
    return dataclasses.replace(claim, detail=test.summary(), interest_reason=scale.reason)


def restating(claims: Sequence[ClaimResult]) -> dict[str, tuple[str, ...]]:
    """The measured claims of a run whose parts are, value for value, the parts of other claims of the run that they name
    (`claims.restatements`), each with those claims. Such a claim's T+ rejects only where each restated claim's does, and its
    T− (each part at a level no larger than within its own claim) only where one of theirs does, so a false rejection
    of it is a false rejection of a restated claim, which the family's union bound already counts: it is decided at
    ALPHA / m without adding to m. A claim whose parts differ from theirs is counted as any other."""
    measured = {c.id: c for c in claims if c.detail is not None}
    out = {}
    for claim in measured.values():
        paper = claim.id.partition(".")[0]
        restates = restatements(paper).get(claim.id, ()) if paper in known_papers() else ()
        if restates and all(other in measured for other in restates) and each_part(claim) and \
                all(each_part(measured[other]) for other in restates) and \
                sorted_parts(claim) == sorted((part for other in restates for part in sorted_parts(measured[other])), key=repr):
            out[claim.id] = restates
    return out


def each_part(claim: ClaimResult) -> bool:
    """Whether a claim's stored test holds only where each of its parts does (one test, or `all_of`): the restatement
    argument needs it of both sides (an "any of" claim's T+ is not its parts')."""
    detail = cast(dict, claim.detail)
    return not detail.get("parts") or bool(detail.get("every_part"))


def sorted_parts(claim: ClaimResult) -> list[tuple]:
    """Each part of a claim's stored test (the test itself where it has none) as (name, p, effect, interval, units, Δ),
    sorted: a T− at another Δ would not reject where the restated one does."""
    detail = cast(dict, claim.detail)
    return sorted(((part["name"], part["p_value"], part["effect"], tuple(part["interval"] or ()), part["units"], part["interest"])
                   for part in (detail.get("parts") or [detail])), key=repr)
