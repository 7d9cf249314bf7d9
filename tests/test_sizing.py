"""`--budget decide` (`lincorr.reproduce.sizing`): the claims the quick budget leaves undecided are measured again at the
units their tests need, within the hours allowed, and the two looks together keep the run's error rates."""

from __future__ import annotations

import time

import numpy as np
import pytest

import lincorr.reproduce.runner as runner
import lincorr.reproduce.sizing as sizing
from lincorr.cli import main
from lincorr.knowledge import load_registry
from lincorr.reproduce.claims import Claim, Growth, Paper
from lincorr.reproduce.decisions import INCONCLUSIVE, NOT_REPRODUCED, REPRODUCED, SMALLER, decide
from lincorr.reproduce.step import Context, Measured
from lincorr.reproduce.steps import STEPS
from lincorr.reproduce.verdicts import ALPHA, paired_greater
from helpers.cli_errors import one_error_line

INTEREST = 0.5  # Δ, in units of the draws' standard deviation


def drawn(effect: float, n: int, seed: int) -> np.ndarray:
    """`n` differences of mean `effect`, the first ones the same at every `n` (a second look keeps the first's units)."""
    return np.random.default_rng(seed).normal(effect, 1.0, 10_000)[:n]


def planted_paper() -> Paper:
    """A claim the quick budget's 8 units leave undecided (its units grow with `n`), one whose units its design fixes, and
    one decided at once."""
    def claim(claim_id: str, effect: float, n: int) -> Claim:
        return Claim(claim_id, "Table 0", "planted", None, (), None, "planted", "paired t", {"quick": {"effect": effect, "n": n}},
                     interest=INTEREST)

    return Paper("peng", "planted", (claim("peng.grows", 0.5, 8), claim("peng.fixed", 0.5, 8), claim("peng.clear", 2.0, 40)))


@pytest.fixture
def planted(monkeypatch):
    """The planted paper with its step (which records the units it was asked for) and its growth rules."""
    asked = []

    def planted_step(ctx: Context) -> Measured:
        n = int(ctx.settings["n"])
        asked.append(n)
        time.sleep(0.06)  # a measurable cost (seconds are kept to 0.1), for the hours a second look is planned within
        differences = drawn(float(ctx.settings["effect"]), n, seed=1)
        return Measured({"n": n}, f"{n} differences", paired_greater(differences, np.zeros(n), "difference", INTEREST, "runs"))

    planted_step.__module__ = "lincorr.reproduce.verdicts"
    monkeypatch.setitem(STEPS, "planted", planted_step)
    monkeypatch.setattr(runner, "load_paper", lambda name: planted_paper())
    monkeypatch.setattr(sizing, "load_paper", lambda name: planted_paper())
    monkeypatch.setattr(sizing, "growth", lambda name: {"peng.grows": Growth("n"), "peng.clear": Growth("n")})
    return asked


def test_an_undecided_claim_is_measured_again_at_the_units_its_tests_need(planted, llama_lm):
    plans = []
    result = sizing.decided("peng", llama_lm, max_hours=1.0, on_plan=plans.append, registry=load_registry())
    by_id = {p.id: p for p in plans[0]}
    grows, fixed, clear = by_id["peng.grows"], by_id["peng.fixed"], by_id["peng.clear"]
    assert (grows.outcome, fixed.outcome, clear.outcome) == (sizing.PLANNED, sizing.FIXED, sizing.DECIDED)
    assert grows.setting == "n" and grows.value == 8 and grows.planned_value == grows.planned_units > 8
    assert planted == [8, 8, 40, grows.planned_value], "the first look at the quick budget, then only the undecided claim that grows"
    claims = {c.id: c for c in result.claims}
    assert result.budget == "decide" and claims["peng.grows"].decision["units"] == grows.planned_value
    assert claims["peng.grows"].verdict != INCONCLUSIVE and claims["peng.fixed"].verdict == INCONCLUSIVE
    assert all(c.decision["level"] == pytest.approx(ALPHA / 2 / 3) for c in result.claims), "each look at half the level, over 3 claims"
    assert "0.025 / 3" in result.text() and result.rejudged().summary()["claims"] == result.summary()["claims"]


def test_claims_past_the_hours_allowed_keep_the_first_look(planted, llama_lm):
    plans = []
    result = sizing.decided("peng", llama_lm, max_hours=1e-9, on_plan=plans.append, registry=load_registry())
    assert {p.id: p.outcome for p in plans[0]}["peng.grows"] == sizing.OVER_CAP
    assert planted == [8, 8, 40] and {c.id: c.verdict for c in result.claims}["peng.grows"] == INCONCLUSIVE
    assert "over the cap" in sizing.plan_text(plans[0], 1e-9)


def test_the_command_prints_the_plan_before_the_second_look(planted, llama_lm, tmp_path, monkeypatch, capsys):
    import lincorr.reproduce
    from lincorr.cli import reproduce as command

    monkeypatch.setattr(command, "load_lm", lambda args: llama_lm)
    monkeypatch.setattr(lincorr.reproduce, "load_paper", lambda name: planted_paper())
    assert main(["reproduce", "peng", "--budget", "decide", "--max-hours", "0.5", "--out", str(tmp_path / "run")]) == 0
    printed = capsys.readouterr()
    assert "--budget decide: 1 claims measured again" in printed.err and "peng.grows: planned, 8 ->" in printed.err
    assert "(budget decide)" in printed.out


@pytest.mark.parametrize("argv", [["reproduce", "peng", "--max-hours", "2"], ["reproduce", "peng", "--budget", "decide", "--max-hours", "0"]])
def test_max_hours_belongs_to_budget_decide_and_is_positive(argv, capsys):
    assert main(argv) == 2
    assert "max-hours" in one_error_line(capsys)


def test_a_list_of_seeds_grows_by_the_next_unused_seeds_and_a_count_stops_at_its_data():
    assert Growth("seeds").grown([0, 1, 2], 5) == [0, 1, 2, 3, 4]
    assert Growth("n_sources", most=32).grown(8, 53) == 32 and Growth("n_test").grown(20, 175) == 175


def two_looks(effect: float, rng: np.random.Generator, first_units: int, claims: int) -> str:
    """One claim of a run of `claims` through `--budget decide`: decided at its first look's units if it can be at half the
    level, else measured again at the units `sizing.wanted_units` asks (the first look's among them) and decided there."""
    draws = rng.normal(effect, 1.0, first_units * 100)
    level = ALPHA / 2 / claims
    first = paired_greater(draws[:first_units], np.zeros(first_units), interest=INTEREST)
    verdict = decide(first, claims, ALPHA / 2).verdict
    if verdict != INCONCLUSIVE:
        return verdict
    wanted = sizing.wanted_units(first, level)
    if wanted is None:
        return verdict
    return decide(paired_greater(draws[:wanted], np.zeros(wanted), interest=INTEREST), claims, ALPHA / 2).verdict


def test_two_looks_keep_each_error_below_alpha_and_decide_where_one_look_did_not():
    """Simulated: a claim in a run of 15, 10 units at the first look, effect 0 or Δ. A false `reproduced` (at 0) and a false
    `not reproduced` (at Δ) each happen at most ALPHA / 15 of the time plus the Monte-Carlo margin (3 standard errors of
    that rate over 4,000 runs); measured 0.0032 and 0.0055 against 0.0033 (+ 0.0027), and 0.0032 for the second over 30,000
    runs of other seeds. At effect 0 the claim ends `not reproduced` 72% of the time and at Δ `reproduced` 71% (asked: 65%;
    below the 0.8 planned, as a standard error from 10 units is itself noisy), where one look at 10 units finds
    `reproduced` at Δ under 10% of the time."""
    rng, runs, claims = np.random.default_rng(0), 4000, 15
    margin = 3 * np.sqrt(ALPHA / claims / runs)
    at_zero = [two_looks(0.0, rng, 10, claims) for _ in range(runs)]
    at_interest = [two_looks(INTEREST, rng, 10, claims) for _ in range(runs)]
    assert np.mean([v in (REPRODUCED, SMALLER) for v in at_zero]) <= ALPHA / claims + margin
    assert np.mean([v == NOT_REPRODUCED for v in at_interest]) <= ALPHA / claims + margin
    assert np.mean([v == NOT_REPRODUCED for v in at_zero]) >= 0.65 and np.mean([v == REPRODUCED for v in at_interest]) >= 0.65
    one_look = [decide(paired_greater(rng.normal(INTEREST, 1.0, 10), np.zeros(10), interest=INTEREST), claims).verdict for _ in range(500)]
    assert np.mean([v == REPRODUCED for v in one_look]) < 0.1
