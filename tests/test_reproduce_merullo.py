"""`lincorr reproduce merullo`: every claim resolves, the steps' verdicts follow from their statistics, and the claims run on a tiny model."""

from __future__ import annotations

import dataclasses
import inspect
from types import SimpleNamespace

import numpy as np
import pytest
from helpers.vectors import planted_task

from lincorr.knowledge import load_registry
from lincorr.reproduce import BUDGETS, load_paper, reproduce
from lincorr.reproduce.merullo.steps import CONTROLS, TASKS, ffn_block, ordered_tests, over_control
from lincorr.reproduce.step import Context
from lincorr.reproduce.steps import STEPS
from lincorr.reproduce.decisions import decide
from lincorr.reproduce.verdicts import all_of
from lincorr.reproduction_file import VERDICTS
from lincorr.studies.vectors.sources import SourceRuns

pytestmark = pytest.mark.usefixtures("single_thread")


def test_every_merullo_claim_resolves_to_a_step_or_a_stated_reason():
    paper = load_paper("merullo")
    assert paper.claims[1].id == "merullo.lens" and {"merullo.ffn-ablation", "merullo.transfer"} <= {c.id for c in paper.claims}
    for claim in paper.claims:
        if claim.step is None:
            assert claim.not_applicable and not claim.settings, claim.id
            continue
        assert claim.step.startswith("merullo_") and claim.step in STEPS, claim.id
        assert list(inspect.signature(STEPS[claim.step]).parameters) == ["ctx"], claim.id
        assert claim.settings and set(claim.settings) <= set(BUDGETS) and claim.test, claim.id


def verdict(test) -> str:
    return decide(test).verdict


def test_every_measured_merullo_claim_names_its_effect_of_interest_with_a_reason():
    for claim in load_paper("merullo").claims:
        if claim.step is not None:
            assert claim.interest is not None and claim.interest > 0 and len(claim.interest_reason) > 40, claim.id
            assert int(claim.settings["quick"].get("n_sources", 8)) >= 8 and int(claim.settings["quick"].get("n_contexts", 64)) >= 64, claim.id


def runs_of(task: str, with_rr: list[float], none: float = 0.01, other: float = 0.01, random: float = 0.01, n_contexts: int = 64) -> SourceRuns:
    """Source runs whose every context of a source has the same answer rank, giving each source's RR in `with_rr`; the
    contexts dealt out among the sources in turn."""
    owner = np.arange(n_contexts) % len(with_rr)

    def row(rr) -> np.ndarray:
        return np.broadcast_to(np.round(1 / np.asarray(rr, float)) - 1, (n_contexts,))

    answer = np.stack([row(none), row(np.asarray(with_rr)[owner]), row(other), row(random), row(none)])
    return SourceRuns(task, "other", 5, (4, 5), tuple(f"s{i}" for i in range(len(with_rr))), tuple(f"c{i}" for i in range(n_contexts)),
                      tuple(int(o) for o in owner), {"copy": answer}, {"copy": np.full_like(answer, 7)}, 1.0)


@pytest.mark.parametrize("runs, expected", [
    (runs_of("capitals", [0.5, 1, 0.5, 0.25, 1, 0.5, 0.2, 1]), "reproduced"),
    (runs_of("capitals", [0.5, 1, 0.5, 0.25, 1, 0.5, 0.2, 1], other=1.0), "not reproduced"),  # another task's vector does better on 8
    (runs_of("capitals", [0.5, 1 / 3] * 12, other=1.0), "not reproduced"),  # another task's vector does better, with power to see it
    (runs_of("capitals", [1 / r for r in (80, 120, 90, 110, 100, 85, 115, 95)] * 3), "not reproduced"),  # nothing moves, with power to see it
    (runs_of("capitals", [0.5, 1]), "inconclusive"),  # two sources cannot tell
])
def test_the_ovector_is_tested_over_sources_above_every_control(runs, expected):
    test = all_of([over_control(runs, "copy", control, 0.1) for control in CONTROLS], "controls")
    assert verdict(test) == expected and test.unit == "sources"


def test_contexts_within_a_source_do_not_count_as_independent():
    few, many = runs_of("capitals", [0.5, 1, 0.5], n_contexts=8), runs_of("capitals", [0.5, 1, 0.5], n_contexts=512)
    assert over_control(few, "copy", "none", 0.1).p_value == over_control(many, "copy", "none", 0.1).p_value
    assert over_control(many, "copy", "none", 0.1).units == 3


def test_easiest_and_hardest_compare_every_pair_of_tasks_over_sources():
    runs = {"uppercase": runs_of("uppercase", [1, 0.5, 1, 1, 0.5, 1, 1, 0.5] * 3),
            "capitals": runs_of("capitals", [0.2, 0.25, 0.1, 0.2, 0.1, 0.25, 0.2, 0.1] * 3),
            "past-tense": runs_of("past-tense", [0.02, 0.05, 0.01, 0.02, 0.05, 0.02, 0.01, 0.05] * 3)}
    assert verdict(ordered_tests(runs, "copy", [("uppercase", "capitals"), ("uppercase", "past-tense")], 0.25)) == "reproduced"
    assert verdict(ordered_tests(runs, "copy", [("capitals", "past-tense"), ("uppercase", "past-tense")], 0.25)) == "reproduced"
    test = ordered_tests(runs, "copy", [("capitals", "uppercase"), ("capitals", "past-tense")], 0.25)
    assert verdict(test) == "not reproduced" and len(test.parts) == 2  # capitals is not the easiest: each comparison its own line


def lens_of(crossing_layer, component, gains_at=None):
    """Lens curves of a 4-block model: flat, with the answer's lead raised by the FFN of `gains_at` where given."""
    flat = np.zeros(5)
    mid = np.zeros(4)
    answer = flat.copy()
    if gains_at is not None:
        answer[gains_at + 1:] = 0.5
    return SimpleNamespace(crossing_layer=crossing_layer, crossing_component=component, crossing_block=None if component is None else crossing_layer - 1,
                           argument_rr=flat, answer_rr=answer, mid_argument_rr=mid, mid_answer_rr=np.where(np.arange(4) > (gains_at or 9), 0.5, 0.0))


def test_the_ovector_block_is_the_ffn_made_crossing_else_the_largest_ffn_gain_else_none():
    assert ffn_block(lens_of(3, "mlp")) == (2, "FFN-made crossing")
    assert ffn_block(lens_of(3, "attn", gains_at=1)) == (1, "largest FFN gain (attention makes the crossing)")
    assert ffn_block(lens_of(None, None, gains_at=2)) == (2, "largest FFN gain (no sub-layer makes a crossing)")
    assert ffn_block(lens_of(3, "attn"))[0] is None  # no FFN raises the answer's lead: no block to take the o-vector from


@pytest.fixture
def planted_registry(llama_lm):
    """The registry with the paper's three task names planted on the tiny model's own answers, so every prompt is solved."""
    tasks = tuple(planted_task(llama_lm, 40 * i, 40, name) for i, name in enumerate(TASKS))
    return dataclasses.replace(load_registry(), tasks=tasks)


def test_the_steps_run_on_a_tiny_model(llama_lm, planted_registry):
    settings = {"n_pairs": 6, "n_sources": 3, "n_contexts": 6, "lens_pairs": 8, "layers": {name: 1 for name in TASKS}}
    shared: dict = {}
    for step, extra in [("merullo_lens", {}), ("merullo_ovector", {"task": "capitals", "context": "zero-shot"}),
                        ("merullo_ordering", {"easiest": "uppercase"}), ("merullo_ordering", {"hardest": "past-tense"}),
                        ("merullo_transfer", {}), ("merullo_ffn_ablation", {})]:
        measured = STEPS[step](Context(llama_lm, planted_registry, {**settings, **extra}, shared=shared, interest=0.1))
        assert measured.text and measured.test is not None and 0.0 <= measured.test.p_value <= 1.0, step
        assert step in ("merullo_lens", "merullo_transfer") or measured.variant is not None, step
        assert step == "merullo_ovector" or len(measured.test.parts) >= 2, step  # each task (or comparison) its own line
    assert sum(key[0] == "merullo_sources" for key in shared) == len(TASKS)  # each task's sources once, shared by every claim


def test_reproduce_merullo_runs_end_to_end_on_a_tiny_model(llama_lm, planted_registry):
    result = reproduce("merullo", llama_lm, registry=planted_registry)
    assert [c.id for c in result.claims] == [c.id for c in load_paper("merullo").claims]
    assert all(c.verdict in VERDICTS for c in result.claims)
    assert result.claims[0].verdict == "not applicable" and result.claims[1].step == "merullo_lens"


def test_transfer_restates_the_copy_claims_part_for_part_and_is_not_counted_again(llama_lm, planted_registry):
    """Each source's contexts are other pairs', so merullo.transfer's parts are the three copy claims' parts value for
    value: it is decided at the run's level without adding to the family; a transfer whose parts differ is counted."""
    from lincorr.reproduce.judging import judged, restating

    result = reproduce("merullo", llama_lm, registry=planted_registry)
    claims = {c.id: c for c in result.claims}
    copies = [f"merullo.ovector.{task}.copy" for task in TASKS]
    parts = lambda claim: sorted((p["name"], p["p_value"], p["effect"]) for p in claim.detail["parts"])  # noqa: E731
    assert parts(claims["merullo.transfer"]) == sorted(part for copy in copies for part in parts(claims[copy]))
    assert restating(result.claims) == {"merullo.transfer": tuple(copies)}
    family = sum(c.detail is not None for c in result.claims) - 1
    assert {c.decision["claims"] for c in result.claims if c.decision} == {family}
    assert "merullo.transfer restates" in result.family_text() and f"/ {family} (Bonferroni)" in result.family_text()

    detail = claims["merullo.transfer"].detail
    moved = {**detail, "parts": [{**detail["parts"][0], "p_value": 0.5}, *detail["parts"][1:]]}
    other = [dataclasses.replace(c, detail=moved) if c.id == "merullo.transfer" else c for c in result.claims]
    assert restating(other) == {}
    assert {c.decision["claims"] for c in judged(other) if c.decision} == {family + 1}
