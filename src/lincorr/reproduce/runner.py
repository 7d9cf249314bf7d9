"""Running a paper's claims on one model: each step at the chosen budget, tested, stored at once, and the claim table.

A finished claim is stored in the cache (`cache.stored_result`) under the model fingerprint,
the claim id, the budget, its settings (and, for a claim over a size series, every member's
fingerprint) and the code digest of its step's module, so an interrupted reproduction resumes
where it stopped and a change to the code, or to a model, behind a claim measures it again.
`ReproductionResult.stale_claims` says which claims of a saved reproduction the code has moved past.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import datetime
import logging
import textwrap
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar

from lincorr.bundled import machine_memory
from lincorr import recording
from lincorr.cache import recorded_result
from lincorr.collection import CollectSettings
from lincorr.errors import FreeMemoryError, InputError, LincorrError, UsageError
from lincorr.knowledge import load_registry
from lincorr.finetune import MEMORY_PLAN, layer_index
from lincorr.memory_plan import PLANS
from lincorr.models import LM, load_model, require_other_checkpoint
from lincorr.outputs import staged_directory, write_json, write_text_atomic
from lincorr.progress import progress_bar
from lincorr.reading import human_size
from lincorr.reproduce.claims import BUDGETS, DECIDE, Claim, known_papers, load_paper
from lincorr.reproduce.pair import EVAL_LM, NEEDS_EVAL_MODEL
from lincorr.reproduce.series import series_key
from lincorr.reproduce.step import Context
from lincorr.reproduce.steps import STEPS
from lincorr.report.effects import effect_text, sensitivity_text, tests_text
from lincorr.reproduce.decisions import decide
from lincorr.reproduce.judging import judged, restating, retested
from lincorr.reproduce.verdicts import ALPHA, Test
from lincorr.reproduction_file import REPRODUCTION, RESULT_FILE, VERDICTS, check_judged_numbers, read_reproduction_file
from lincorr.results import record, summary_frame

# One line per finished claim at INFO (`lincorr -v`): the progress of a run whose output is a log, where no bar is drawn.
log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class ClaimResult:
    """One claim as measured: the paper's numbers, ours, the test, the verdict and why, and the decision it reads off
    (`decisions.Decision`: effect with its interval, Δ, both one-sided tests' raw and adjusted p, power, units needed)."""

    id: str
    where: str
    statement: str
    paper: dict
    ours: dict
    ours_text: str
    test: str
    statistic: float | None
    p_value: float | None  # of T+, "the effect is at most 0" (`decisions`)
    verdict: str
    reason: str
    variant: dict | None = None  # lincorr's way beside the paper's: its test and verdict, outside the run's family
    step: str | None = None
    code: dict | None = None  # the record of the code that measured it (`recording`); None for a claim no step measured
    measured_at: str | None = None
    seconds: float | None = None
    detail: dict | None = None  # the paper's-way test as made (`Test.summary()`, with the recipe the decision reads)
    adjusted_p: float | None = None  # T+'s, Bonferroni's across the measured claims of the run
    interest_reason: str | None = None
    decision: dict | None = None  # `Decision.summary()`, made by `judged`
    # The memory plans its fine-tuning took (noted in `code`: under "auto" they follow the memory free, which no key
    # names); empty where it trained nothing, None where nothing was measured or in a file saved before they were kept.
    memory_plans: list[str] | None = None

    def summary(self) -> dict:
        """The claim's row of `--json`: id, statement, paper, ours, test, p-values, effect, power, verdict, reason, provenance."""
        return dataclasses.asdict(self)

    @classmethod
    def from_summary(cls, row: dict) -> ClaimResult:
        fields: dict[str, Any] = {field.name: row.get(field.name) for field in dataclasses.fields(cls)}
        return cls(**fields)

    def measured_test(self) -> Test | None:
        return Test.from_summary(self.detail) if self.detail else None

    def effect_text(self) -> str:
        """The effect with its interval and Δ, and the power where it is inconclusive (`report.effects.effect_text`)."""
        return effect_text(self.decision)


# A claim's test is made again from its recipe by the current code whenever the claim is judged (`verdicts.recorded`), so
# a claim's record leaves the tests' modules out (their powers too): a change there re-judges every stored claim without
# measuring it.
REJUDGED = ("lincorr.reproduce.verdicts", "lincorr.reproduce.evidence", "lincorr.reproduce.decisions")


def changed_code(claim: ClaimResult) -> list[str]:
    """What of the code that measured `claim` has changed since: the units of its record whose source differs, or why
    its record cannot be trusted (no record, a step that is gone); empty for a current claim or one never measured."""
    if claim.step is None or (claim.detail is None and not claim.code):
        return []
    if claim.step not in STEPS:
        return [f"its step {claim.step} (gone)"]
    if not isinstance(claim.code, dict) or not claim.code:
        return ["its record of the code it ran (missing: measured before lincorr kept one)"]
    return recording.changed(claim.code)


@dataclasses.dataclass(frozen=True)
class ReproductionResult:
    """A paper's claim table on one model at one budget."""

    study: ClassVar[str] = "reproduce"

    paper: str
    title: str
    model_name: str
    model_fingerprint: str
    budget: str
    claims: tuple[ClaimResult, ...]
    eval_model: str = ""  # the second checkpoint (`--eval-model`) the resilience claims read, if one was given
    seconds: float | None = None  # the wall time of the run that made this table, model load included
    measured: int | None = None  # how many of its claims that run measured (the others came from the cache)

    def summary(self) -> dict:
        """The JSON of `lincorr reproduce --json`: {"paper", "model", "claims": [...]} with the title, fingerprint and budget."""
        return {"paper": self.paper, "title": self.title, "model": self.model_name, "model_fingerprint": self.model_fingerprint,
                "budget": self.budget, **({"eval_model": self.eval_model} if self.eval_model else {}),
                "seconds": self.seconds, "measured": self.measured,
                "claims": [claim.summary() for claim in self.claims]}

    def to_pandas(self):
        """The claim table as a pandas DataFrame, one claim per row (pandas is needed, not installed with lincorr)."""
        return summary_frame(self.summary())

    def counts(self) -> dict[str, int]:
        """How many claims ended in each verdict."""
        return {v: sum(c.verdict == v for c in self.claims) for v in VERDICTS}

    def cached_count(self) -> int:
        """The claims with a measurement that this run did not make."""
        return max(sum(bool(c.code) for c in self.claims) - (self.measured or 0), 0)

    def measured_first(self) -> list[ClaimResult]:
        """The claims in the paper's order, those measured first and the `not applicable` ones below them."""
        return sorted(self.claims, key=lambda c: c.verdict == "not applicable")

    def family_text(self) -> str:
        """"each claim's two one-sided tests at 0.05 / 18 ...": how the run's claims were decided together."""
        repeated = restating(self.claims)
        family = sum(c.detail is not None for c in self.claims) - len(repeated)
        looks = " (each of two looks at half the run's 0.05: `lincorr.reproduce.sizing`)" if self.budget == DECIDE else ""
        return (f"each of the {family} measured claims' two one-sided tests at {alpha_of(self.budget):g} / {family} (Bonferroni){looks}, "
                f"its interval at the same level on each side" + "".join(
                    f"; {claim_id} restates {', '.join(others)}, decided at that level and not counted"
                    for claim_id, others in repeated.items()))

    def text(self) -> str:
        """One line per claim, the measured first: id, verdict, effect [interval] vs Δ, both tests' p, our numbers or the reason."""
        width = max((len(c.id) for c in self.claims), default=10)
        lines = [f"{self.title} on {self.model_name} (budget {self.budget}): "
                 + ", ".join(f"{n} {v}" for v, n in self.counts().items() if n) + f"; {self.family_text()}"
                 + (f"; this run took {self.seconds:.0f} s, {self.measured} claims measured, {self.cached_count()} from the cache"
                    if self.seconds is not None else "")]
        for c in self.measured_first():
            numbers = "; ".join(part for part in (c.effect_text(), tests_text(c.decision)) if part)
            lines.append(f"{c.id:<{width}}  {c.verdict:<19}  " + "; ".join(part for part in (numbers, c.ours_text or c.reason) if part))
        return "\n".join(lines)

    def markdown(self) -> str:
        """The claim table, verdict first: claim | verdict | effect [interval] vs Δ | tests | at Δ/2 and 2Δ | Δ's source |
        ours | where; the `not applicable` claims below, each with why."""
        lines = [f"Decided by {self.family_text()}.", "",
                 "| claim | verdict | effect [interval] vs Δ | tests | at Δ/2, 2Δ | Δ's source | ours | where |",
                 "|---|---|---|---|---|---|---|---|"]
        lines += [f"| {c.id} | {c.verdict} | {c.effect_text()} | {tests_text(c.decision)} | {sensitivity_text(c.decision)} "
                  f"| {c.interest_reason or ''} | {c.ours_text} | {c.where} |" for c in self.claims if c.verdict != "not applicable"]
        unmeasured = [c for c in self.claims if c.verdict == "not applicable"]
        if unmeasured:
            lines += ["", "Not applicable:", "", "| claim | where | why |", "|---|---|---|"]
            lines += [f"| {c.id} | {c.where} | {c.reason} |" for c in unmeasured]
        return "\n".join(lines) + "\n"

    def rejudged(self) -> ReproductionResult:
        """The same measurements judged by the current code (`judged`): tests made again from their recipes and decided. A test whose recipe the current code cannot make raises ValueError."""
        return dataclasses.replace(self, claims=judged([retested(claim) for claim in self.claims], alpha_of(self.budget)))

    def stale_claims(self) -> list[ClaimResult]:
        """Measured claims that some code they ran has changed since (`changed_code`)."""
        return [c for c in self.claims if changed_code(c)]

    def save(self, directory) -> None:
        """reproduction.json (the summary), claims.md and provenance.json."""
        with staged_directory(directory) as out:
            record(out, self, model_fingerprint=self.model_fingerprint, settings={"paper": self.paper, "budget": self.budget}, state=False)
            write_json(out / RESULT_FILE, self.summary())
            write_text_atomic(out / "claims.md", self.markdown())

    @classmethod
    def load(cls, directory) -> ReproductionResult:
        """A reproduction saved by `save` (or its reproduction.json alone, as docs/reproductions/ keeps it)."""
        path = Path(directory)
        file = path / RESULT_FILE if path.is_dir() else path
        data = read_reproduction_file(file)
        check_judged_numbers(data, file)
        if data["paper"] not in known_papers():  # its claims would be judged as if they were one of these papers'
            raise InputError(f"{file}: the paper {data['paper']!r} is none of {', '.join(known_papers())}; {REPRODUCTION.remedy}")
        # A claim this version does not have (a misspelt id, one with a trailing space) would join the run's family of p-values.
        known = {claim.id for claim in load_paper(data["paper"]).claims}
        unknown = next((row["id"] for row in data["claims"] if row["id"] not in known), None)
        if unknown is not None:
            raise InputError(f"{file}: the claim {unknown!r} is none of {data['paper']}'s claims (lincorr reproduce "
                             f"{data['paper']} --list names them); {REPRODUCTION.remedy}")
        return cls(data["paper"], data.get("title", ""), data["model"], data.get("model_fingerprint", ""), data.get("budget", ""),
                   tuple(ClaimResult.from_summary(row) for row in data["claims"]), data.get("eval_model", ""), data.get("seconds"),
                   data.get("measured"))


def alpha_of(budget: str) -> float:
    """The level a run at `budget` shares among its claims: ALPHA, or half of it for each look of `--budget decide`."""
    return ALPHA / 2 if budget == DECIDE else ALPHA


def unmeasured_reason(claim: Claim, budget: str, *, with_eval_model: bool) -> str | None:
    """Why `claim` is not measured in a run at `budget` (None when it is): no step, not at this budget, or no second checkpoint."""
    if claim.step is None:
        return claim.not_applicable
    if claim.settings_for(budget) is None:
        return f"not run at --budget {budget} (too long for a first look); run --budget paper"
    if claim.eval_model and not with_eval_model:
        return NEEDS_EVAL_MODEL
    return None


class NotMeasuredHere(Exception):
    """A claim this machine cannot measure (`memory_reason`), or not at this moment (a FreeMemoryError while measuring),
    raised where the cache holds no result for it: nothing is stored, and a machine or moment with the memory measures it."""


def memory_reason(claim: Claim, lm: LM) -> str | None:
    """Why a claim that fine-tunes is not measured on this machine (None when it is): its paper's measured peak, in
    multiples of the bytes of the model's weights as loaded, less what the leanest memory plan saves on every parameter
    of the model's blocks, which every training recipe trains (`memory_plan.PLANS`: no whole-model gradient, moments in
    bfloat16; the embeddings some recipes leave frozen saved nothing), comes to more than the machine's memory. Only the
    weights held in the machine's memory count (the CPU's, and Apple's MPS, which shares it); a CUDA device's memory is
    not checked. It stops only the measuring: a result the cache holds, measured on a machine with the memory, is served."""
    if claim.fine_tuning_peak is None:
        return None
    held = {name: parameter for name, parameter in lm.model.named_parameters() if parameter.device.type in ("cpu", "mps")}
    weights = sum(parameter.numel() * parameter.element_size() for parameter in held.values())
    if not weights:
        return None
    paper_plan, leanest = PLANS[0], PLANS[-1]
    in_blocks = sum(parameter.numel() for name, parameter in held.items() if layer_index(name) is not None)
    saved = (paper_plan.bytes_per_trainable() - leanest.bytes_per_trainable()) * in_blocks
    needed, total = int(claim.fine_tuning_peak * weights) - saved, machine_memory()
    if needed <= total:
        return None
    return (f"fine-tuning {lm.name} needs about {human_size(needed)} of memory even with {leanest.name} ({claim.fine_tuning_peak:g} "
            f"times its weights of {human_size(weights)} with the paper's AdamW: {claim.fine_tuning_measured}), more than this "
            f"machine's {human_size(total)}; run this claim on a machine with more memory")


def finished_note(claim: ClaimResult, measured_now: bool) -> str:
    """Where a finished claim's result came from, and its p before the run's adjustment (the verdict waits for it), or
    why it is not applicable."""
    where = (f"measured in {claim.seconds:.0f} s" if measured_now and claim.seconds is not None
             else "from the cache" if claim.code else "")
    if claim.verdict == "not applicable":
        what = f"not applicable: {textwrap.shorten(claim.reason, 120, placeholder=' ...')}"
    else:
        what = f"p {claim.p_value:.2g} before the run's adjustment" if claim.p_value is not None else ""
    return ", ".join(part for part in (where, what) if part)


def claims_to_run(paper: str, only: str | None, budget: str, *, with_eval_model: bool) -> tuple[Claim, ...]:
    """The claims of `paper` named in `only` (None: all), once one of them would be measured: a choice that measures
    nothing is refused before a model loads, not reported as a table of `not applicable` after. (A claim that fine-tunes
    on a machine without the memory for it is known only once the model is loaded: `memory_reason`.)"""
    if budget not in BUDGETS:
        raise InputError(f"unknown budget '{budget}'; use one of {', '.join(BUDGETS)}")
    chosen = load_paper(paper).chosen(only)
    reasons = [(claim.id, unmeasured_reason(claim, budget, with_eval_model=with_eval_model)) for claim in chosen]
    if all(reason is not None for _, reason in reasons):
        shown = "; ".join(f"{claim_id}: {reason}" for claim_id, reason in reasons[:3])
        raise UsageError(f"no claim chosen is measured at --budget {budget} ({shown}{'; ...' if len(reasons) > 3 else ''}); "
                         f"choose others with --only (see lincorr reproduce {paper} --list)")
    return chosen


def unmeasured(claim: Claim, reason: str) -> ClaimResult:
    return ClaimResult(claim.id, claim.where, claim.statement, claim.paper_numbers(), {}, "", claim.test, None, None,
                       "not applicable", reason, step=claim.step)


def measure_unless_refused(claim: Claim, ctx: Context, refusal: str | None, measured: list[str]) -> dict:
    """`measure_claim`, noting the claim in `measured` once measured; NotMeasuredHere, and nothing stored, where the
    machine lacks the memory (`memory_reason`) or lacks it free while measuring: a machine or moment with it measures it."""
    if refusal is not None:
        raise NotMeasuredHere(refusal)
    row = measure_claim(claim, ctx)
    measured.append(claim.id)
    return row


def measure_claim(claim: Claim, ctx: Context) -> dict:
    """Run the claim's step and test; a step that cannot run on this model ends `not applicable` with its reason. Too
    little memory free now is no property of the model: NotMeasuredHere, so that the refusal is not stored as its result."""
    assert claim.step is not None, "a claim without a step is not applicable, never measured"
    started = time.perf_counter()
    try:
        measured = STEPS[claim.step](ctx)
    except FreeMemoryError as error:
        raise NotMeasuredHere(f"too little memory free while measuring: {error}") from None
    except LincorrError as error:
        result = unmeasured(claim, f"cannot run on this model: {error}")
    else:
        test, beside = measured.test, measured.variant
        result = ClaimResult(
            claim.id, claim.where, claim.statement, claim.paper_numbers(), measured.ours, measured.text,
            test.name if test else claim.test, test.statistic if test else None, test.p_value if test else None,
            decide(test).verdict if test else "not applicable", measured.reason,
            {"test": beside.name, "p_value": beside.p_value, "detail": beside.summary(), "verdict": decide(beside).verdict}
            if beside else None, claim.step, detail=test.summary() if test else None, interest_reason=claim.interest_reason)
    return dataclasses.replace(result, seconds=round(time.perf_counter() - started, 1),
                               measured_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")).summary()


def reproduce(paper: str, lm_or_model: LM | str, *, only: str | None = None, budget: str = "quick", registry=None,
              settings: CollectSettings = CollectSettings(), eval_model: LM | str | None = None,
              on_finished: Callable[[ClaimResult, bool], None] | None = None,
              grown: Mapping[str, Mapping[str, object]] | None = None) -> ReproductionResult:
    """Every claim of `paper` ("peng") on a model (an LM or a model spec) at `budget` ("quick" or "paper"), or those named in `only`.

    `settings` say how the logit tables are collected; without their cache every claim is measured again.
    `eval_model` is a second checkpoint of the model (base -> instruct) for the claims that need one; without it they are
    not applicable. Each finished claim is stored at once; a rerun finds it and measures only what is missing or whose
    code changed. `on_finished(claim, measured_now)` hears of each claim as it finishes (a refresh's progress). `grown`
    gives some claims other settings than the budget's (claim id -> settings: `sizing`'s second look).
    """
    started = time.perf_counter()
    claims_of = load_paper(paper)
    chosen = claims_to_run(paper, only, budget, with_eval_model=eval_model is not None)
    lm = lm_or_model if isinstance(lm_or_model, LM) else load_model(lm_or_model)
    registry = registry or load_registry()
    second = eval_model if isinstance(eval_model, LM) or eval_model is None else load_model(eval_model)
    if second is not None:
        require_other_checkpoint(lm, second, "--eval-model")
    shared = recording.SharedWork({EVAL_LM: second} if second is not None else {})
    # The registry's content is part of every claim's input (its prompts, domains and pairs, whichever files they came from).
    registry_key = hashlib.sha256(repr(registry).encode()).hexdigest()
    results: list[ClaimResult] = []
    measured: list[str] = []

    def finished(result: ClaimResult) -> None:
        results.append(result)
        log.info("%s (%d of %d): %s", result.id, len(results), len(chosen), finished_note(result, result.id in measured))
        if on_finished is not None:
            on_finished(result, result.id in measured)

    for claim in progress_bar(chosen, desc=f"reproduce {paper}", unit="claim"):
        reason = unmeasured_reason(claim, budget, with_eval_model=second is not None)
        if reason is not None:
            finished(unmeasured(claim, reason))
            continue
        claim_settings = (grown or {}).get(claim.id) or claim.settings_for(budget)
        ctx = Context(lm, registry, claim_settings, settings, shared, claim.interest)
        # The fingerprint names the weights, not what they were loaded as: the dtype and the device change the numbers too.
        key = {"paper": paper, "claim": claim.id, "budget": budget, "model": lm.fingerprint, "dtype": str(lm.head_weight.dtype),
               "device": lm.device.type, "settings": dict(claim_settings), "collect": settings.key(),
               "interest": claim.interest, "registry": registry_key, **series_key(claim_settings),
               **({"eval_model": second.fingerprint} if claim.eval_model and second is not None else {})}

        # A function of its own, not a closure: code runs in the claim's record under the function that holds it.
        measure = functools.partial(measure_unless_refused, claim, ctx, memory_reason(claim, lm), measured)
        try:
            row, code = recorded_result("reproduce", key, measure, leaving_out=REJUDGED, use_cache=settings.use_cache)
        except NotMeasuredHere as refused:
            finished(unmeasured(claim, str(refused)))
        else:
            # the test the table judges, by the current code
            finished(retested(dataclasses.replace(ClaimResult.from_summary(row), code=code if claim.step else None,
                                                  memory_plans=recording.noted(code, MEMORY_PLAN))))
    return ReproductionResult(paper, claims_of.title, lm.name, lm.fingerprint, budget, judged(results), second.name if second else "",
                              round(time.perf_counter() - started, 1), len(measured))
