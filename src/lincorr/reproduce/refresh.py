"""Refreshing saved reproductions (`lincorr reproduce --refresh DIR`): the claims some code of which has changed since they
were measured, measured again model by model, merged into their files and judged again with the rest.

A file is rewritten, whole and judged again, as each of its stale claims is measured, so the file itself holds the
progress: a refresh stopped on one machine resumes on another from the file, where the claims it finished read fresh
(and on the same machine from the cache too, which keeps each claim as it finishes). The time a refresh will take is the
sum of its claims' last measurements.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import shlex
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from lincorr.collection import CollectSettings
from lincorr.errors import InputError
from lincorr.models import LM
from lincorr.outputs import write_text_atomic
from lincorr.reproduce.claims import DECIDE
from lincorr.reproduce.judging import judged, retested
from lincorr.reproduce.runner import ClaimResult, ReproductionResult, alpha_of, changed_code, reproduce
from lincorr.reproduction_file import RESULT_FILE
from lincorr.strict_json import dumps

@dataclasses.dataclass(frozen=True)
class SavedReproduction:
    """One saved reproduction file, what it holds, and its claims that code they ran has changed since."""

    path: Path
    result: ReproductionResult
    stale: tuple[ClaimResult, ...]

    def seconds(self) -> float:
        """How long the stale claims took when last measured."""
        return sum(claim.seconds or 0.0 for claim in self.stale)


def reproduction_files(directory: str | Path) -> list[Path]:
    """The reproduction files of `directory`: a run's reproduction.json (or that file named itself), each MODEL/PAPER.json
    of a tree like docs/reproductions/, or each PAPER.json of one of its model directories."""
    path = Path(directory)
    if not path.is_dir():
        return [path]  # its reader says what it is, if not a reproduction
    if os.path.lexists(path / RESULT_FILE):
        return [path / RESULT_FILE]
    # A tree of MODEL/PAPER.json, or one model's directory of PAPER.json.
    found = [p for p in sorted(path.glob("*/*.json")) or sorted(path.glob("*.json")) if not p.name.endswith(".provenance.json")]
    odd = next((p for p in found if p.is_dir()), None)  # a tree's entry is a file; a directory there would read as a run
    if odd is not None:
        raise InputError(f"{odd} is a directory, not a saved reproduction's PAPER.json; move it out of {directory}")
    if not found:
        raise InputError(f"{directory}: no saved reproduction there; pass the --out directory of `lincorr reproduce`, its "
                         f"{RESULT_FILE}, or a directory of MODEL/PAPER.json files such as docs/reproductions")
    return found


def saved_reproductions(directory: str | Path) -> list[SavedReproduction]:
    """Every reproduction file of `directory` (`reproduction_files`), read and checked, with its stale claims."""
    saved = []
    for path in reproduction_files(directory):
        result = ReproductionResult.load(path)
        saved.append(SavedReproduction(path, result, tuple(result.stale_claims())))
    return saved


# The longest time a refresh plan shows as a number: a saved file's times are anyone's, and 1e308 s (two of them summing to
# infinity) printed as "about inf h", or as a number of 300 digits.
MOST_SHOWN_HOURS = 10_000


def duration_text(seconds: float) -> str:
    if math.isnan(seconds):
        return "? h"
    if not seconds < MOST_SHOWN_HOURS * 3600:
        return f"{MOST_SHOWN_HOURS:,}+ h"
    return f"{seconds / 3600:.1f} h" if seconds >= 5400 else f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"


def plan_lines(saved: Sequence[SavedReproduction]) -> list[str]:
    """What a refresh will measure: each file's stale claims and the time they took when last measured, a line each,
    then the total (lines for `errors.printable` to show one by one: a path may hold a line break)."""
    stale = [s for s in saved if s.stale]
    if not stale:
        return [f"no stale claim: every measured claim of the {len(saved)} reproductions matches the code"]
    lines = [f"{len(s.stale)} stale of {len(s.result.claims)} in {s.path} ({', '.join(c.id for c in s.stale)}), "
             f"about {duration_text(s.seconds())}" for s in stale]
    total = sum(s.seconds() for s in stale)
    return [*lines, f"refreshing {sum(len(s.stale) for s in stale)} claims of {len(stale)} files: about "
                    f"{duration_text(total)} by their last measurements"]


PACE_SHARE = 0.25  # the share of the recorded time a refresh has done before its own pace scales what is left


class RefreshProgress:
    """A line per claim as a refresh finishes it, with the time left: the remaining claims' last measurements, scaled by
    how this refresh's measurements have compared with theirs so far once a quarter of the recorded time is done."""

    def __init__(self, saved: Sequence[SavedReproduction], report: Callable[[str], None]):
        self.recorded = {(s.path, claim.id): claim.seconds or 0.0 for s in saved for claim in s.stale}
        self.report = report
        self.done: list[tuple[float, float]] = []  # (recorded, taken) of each claim finished so far

    def listener(self, path: Path) -> Callable[[ClaimResult, bool], None]:
        """What `reproduce` tells of each claim of the file at `path`."""
        def finished(claim: ClaimResult, measured_now: bool) -> None:
            recorded = self.recorded.pop((path, claim.id), None)
            if recorded is None:
                return
            taken = (claim.seconds or 0.0) if measured_now else 0.0
            refused = not measured_now and not_measured(claim)
            self.done.append((recorded, taken))
            left, recorded_done = sum(self.recorded.values()), sum(r for r, _ in self.done)
            # A few claims served by the cache in no time (a shared table of logits) say nothing of the pace of the rest.
            pace = (sum(t for _, t in self.done) / recorded_done
                    if recorded_done > 0 and recorded_done >= PACE_SHARE * (recorded_done + left) else 1.0)
            how = (f"not measured here ({claim.reason}); its earlier measurement is kept, still stale" if refused
                   else f"measured in {duration_text(taken)}" if measured_now else "from the cache")
            self.report(f"[{len(self.done)}/{len(self.done) + len(self.recorded)}] {claim.id} of {path}: {how}; about "
                        f"{duration_text(left * pace if pace > 0 else left)} left")
        return finished


def not_measured(claim: ClaimResult) -> bool:
    """Whether a run gave `claim` no measurement (refused here, not at its budget), rather than a result: not applicable,
    with no test and no record of code it ran."""
    return claim.verdict == "not applicable" and claim.detail is None and not claim.code


def refreshed(saved: SavedReproduction, lm: LM, eval_lm: LM | None, settings: CollectSettings,
              on_finished: Callable[[ClaimResult, bool], None] | None = None,
              on_merged: Callable[[ReproductionResult], None] | None = None) -> ReproductionResult:
    """`saved` with its stale claims measured again on `lm` (the model that measured them) and every claim judged again.
    `on_merged` receives the file as it stands after each claim finishes (measured now or from the cache): those finished
    so far merged in, the rest as they were."""
    if saved.result.model_fingerprint and lm.fingerprint != saved.result.model_fingerprint:
        raise InputError(f"{saved.path}: measured on a model with fingerprint {saved.result.model_fingerprint[:24]}..., but "
                         f"{saved.result.model_name} now loads {lm.fingerprint[:24]}...; measure it again whole: lincorr reproduce "
                         f"{saved.result.paper} --model {saved.result.model_name}")
    if saved.result.budget == DECIDE and saved.stale:  # its second look's units were planned from its first look's
        raise InputError(f"{saved.path}: a --budget decide reproduction is measured again whole: lincorr reproduce "
                         f"{saved.result.paper} --model {saved.result.model_name} --budget decide")
    started = time.perf_counter()
    earlier = {claim.id: claim for claim in saved.result.claims}
    finished: list[ClaimResult] = []
    measured_now: list[str] = []

    def merged(measured: int) -> ReproductionResult:
        # A claim this run did not measure (too little memory here) keeps its earlier measurement, stale, for a machine that can.
        by_id = {claim.id: claim for claim in finished if not not_measured(claim) or earlier[claim.id].detail is None}
        claims = [by_id.get(claim.id, claim) for claim in saved.result.claims]
        return dataclasses.replace(saved.result, claims=judged([retested(claim) for claim in claims], alpha_of(saved.result.budget)),
                                   seconds=round(time.perf_counter() - started, 1), measured=measured)

    def heard(claim: ClaimResult, measured: bool) -> None:
        finished.append(claim)
        if measured:
            measured_now.append(claim.id)
        if on_finished is not None:
            on_finished(claim, measured)
        if on_merged is None:
            return
        try:
            so_far = merged(len(measured_now))
        except ValueError:  # a claim still to measure whose stored test this code cannot make again: judged at the end
            return
        on_merged(so_far)

    again = reproduce(saved.result.paper, lm, only=",".join(c.id for c in saved.stale), budget=saved.result.budget or "quick",
                      settings=settings, eval_model=eval_lm, on_finished=heard)
    finished[:] = again.claims
    try:
        return merged(again.measured or 0)
    except ValueError as error:  # a claim not measured here whose stored test this code cannot make again
        raise InputError(f"{saved.path}: {error}; the current code cannot judge it, and this machine did not measure it "
                         f"again: measure it where it can be, lincorr reproduce {saved.result.paper} --model "
                         f"{shlex.quote(saved.result.model_name)}") from None


def write_refreshed(saved: SavedReproduction, result: ReproductionResult) -> None:
    """A run directory is saved again whole; a file of a tree like docs/reproductions/ is replaced by the new table."""
    if saved.path.name == RESULT_FILE:
        result.save(saved.path.parent)
    else:
        write_text_atomic(saved.path, dumps(result.summary(), indent=2) + "\n")


def checked_before_loading(saved: Sequence[SavedReproduction]) -> dict[Path, ReproductionResult]:
    """Every file checked before any model loads, so that a tree's last file fails in a second, not after hours of
    measuring the others: a file with stale claims names the model that measured them (a blank name would load the
    default model and measure them on another) and is no --budget decide run, and every claim not measured again is
    judged again now (one with a verdict and no test behind it cannot be). The files with no stale claim, judged again
    (`ReproductionResult.rejudged`); an `InputError` naming the file where one cannot be."""
    rejudged = {}
    for entry in saved:
        result, stale = entry.result, {claim.id for claim in entry.stale}
        again = (f"lincorr reproduce {result.paper} --model {shlex.quote(result.model_name.strip() or 'MODEL')}"
                 + (f" --budget {result.budget}" if result.budget else ""))
        if stale and not result.model_name.strip():
            raise InputError(f"{entry.path}: names no model (\"model\": {result.model_name!r}), so its stale claims would be "
                             f"measured on the default one; write the model that measured it there, or measure it again whole: {again}")
        if stale and result.budget == DECIDE:  # its second look's units were planned from its first look's
            raise InputError(f"{entry.path}: a --budget decide reproduction is measured again whole: {again}")
        try:
            if stale:
                for claim in (claim for claim in result.claims if claim.id not in stale):
                    retested(claim)
            else:
                rejudged[entry.path] = result.rejudged()
        except ValueError as error:
            raise InputError(f"{entry.path}: {error}; the current code cannot judge it: measure it again with {again}, "
                             f"or ask for the file again") from None
    return rejudged


def refresh(directory: str | Path, load: Callable[[str], LM], settings: CollectSettings = CollectSettings(),
            report: Callable[[str], None] = print) -> list[SavedReproduction]:
    """Measure again the stale claims of every reproduction under `directory`, one model loaded at a time (`load` takes a
    model name, as the files record it), and rewrite each file as each of its claims finishes; then judge every other file again
    (`ReproductionResult.rejudged`, nothing measured) and rewrite those the current tests and verdict rules read
    differently. The files whose claims were measured again."""
    saved = saved_reproductions(directory)
    rejudged = checked_before_loading(saved)
    for line in plan_lines(saved):
        report(line)
    stale = [s for s in saved if s.stale]
    models = sorted({(s.result.model_name, s.result.eval_model) for s in stale})
    progress = RefreshProgress(stale, report)
    for model, eval_model in models:
        lm, eval_lm = load(model), load(eval_model) if eval_model else None
        for entry in (s for s in stale if (s.result.model_name, s.result.eval_model) == (model, eval_model)):
            result = refreshed(entry, lm, eval_lm, settings, progress.listener(entry.path),
                               functools.partial(write_refreshed, entry))
            write_refreshed(entry, result)
            left = [c.id for c in result.claims if changed_code(c)]
            report(f"wrote {entry.path}: {result.measured} claims measured again in {duration_text(result.seconds or 0)}"
                   + (f"; still stale: {', '.join(left)}" if left else ""))
    for entry in (s for s in saved if not s.stale):
        again = rejudged[entry.path]
        if again.summary() != entry.result.summary():
            write_refreshed(entry, again)
            changed = sum(new.verdict != old.verdict for new, old in zip(again.claims, entry.result.claims))
            report(f"wrote {entry.path}: judged again, nothing measured ({changed} verdicts changed)")
    return stale
