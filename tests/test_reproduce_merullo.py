"""`lincorr reproduce merullo`: every claim resolves, the steps' verdicts follow from their statistics, and the claims run on a tiny model."""

from __future__ import annotations

import dataclasses
import inspect
from types import SimpleNamespace

import pytest
from helpers.vectors import planted_task

from lincorr.knowledge import load_registry
from lincorr.reproduce import BUDGETS, load_paper, reproduce
from lincorr.reproduce.merullo.steps import TASKS, easiest_test, mechanism_block, over_every_control, transfer_test
from lincorr.reproduce.step import Context
from lincorr.reproduce.steps import STEPS
from lincorr.reproduce.verdicts import VERDICTS, verdict

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


def run_of(task: str, n_pairs: int = 16, **accuracies) -> SimpleNamespace:
    """An o-vector run as the steps read it: one copy-context row of accuracies (0 unless given) and paired p-values."""
    row = {"context": "copy", **{f"accuracy_{key}": 0.0 for key in ("with", "without", "other_task", "random", "transfer")},
           "p_vs_without": 0.01, "p_over_every_control": 0.01, **{f"accuracy_{key}": value for key, value in accuracies.items()}}
    return SimpleNamespace(task=task, n_pairs=n_pairs, by_context=(row,))


@pytest.mark.parametrize("run, expected", [
    (run_of("capitals", **{"with": 0.5}), "reproduced"),
    (run_of("capitals", **{"with": 0.5, "other_task": 0.6}), "not reproduced"),  # another task's vector does better
    (run_of("capitals"), "not reproduced"),  # nothing moved
])
def test_the_ovector_verdict_needs_the_vector_above_every_control(run, expected):
    assert verdict(over_every_control(run, "copy")) == expected


def test_the_easiest_task_must_beat_every_other_one():
    runs = {"uppercase": run_of("uppercase", **{"with": 12 / 16}), "capitals": run_of("capitals", **{"with": 1 / 16}),
            "past-tense": run_of("past-tense", **{"with": 2 / 16})}
    assert verdict(easiest_test(runs, "uppercase", "copy")) == "reproduced"
    assert verdict(easiest_test(runs, "capitals", "copy")) == "not reproduced"
    runs["past-tense"] = run_of("past-tense", **{"with": 11 / 16})  # close behind: not significantly easier
    assert verdict(easiest_test(runs, "uppercase", "copy")) == "not reproduced"


def test_transfer_is_paired_under_the_papers_protocol_and_counted_under_the_averaged_one():
    moved = run_of("capitals", **{"with": 0.5, "transfer": 0.5})
    assert transfer_test("capitals", moved, "with").p_value == 0.01  # the run's own paired p-value
    assert verdict(transfer_test("capitals", moved, "transfer")) == "reproduced"
    assert verdict(transfer_test("capitals", run_of("capitals", **{"without": 0.5, "transfer": 0.5}), "transfer")) == "not reproduced"


def test_the_mechanism_block_is_the_crossing_block_else_the_one_before_the_crossing_stream():
    assert mechanism_block(SimpleNamespace(crossing_block=12, crossing_layer=13)) == 12
    assert mechanism_block(SimpleNamespace(crossing_block=None, crossing_layer=27)) == 26
    assert mechanism_block(SimpleNamespace(crossing_block=None, crossing_layer=None)) is None


@pytest.fixture
def planted_registry(llama_lm):
    """The registry with the paper's three task names planted on the tiny model's own answers, so every prompt is solved."""
    tasks = tuple(planted_task(llama_lm, 40 * i, 40, name) for i, name in enumerate(TASKS))
    return dataclasses.replace(load_registry(), tasks=tasks)


def test_the_steps_run_on_a_tiny_model(llama_lm, planted_registry):
    settings = {"n_pairs": 6, "n_source": 2, "lens_pairs": 8, "layers": {name: 1 for name in TASKS}}
    shared: dict = {}
    for step, extra in [("merullo_lens", {}), ("merullo_ovector", {"task": "capitals", "context": "zero-shot"}),
                        ("merullo_easiest", {}), ("merullo_transfer", {}), ("merullo_ffn_ablation", {})]:
        measured = STEPS[step](Context(llama_lm, planted_registry, {**settings, **extra}, shared=shared))
        assert measured.text and measured.test is not None and 0.0 <= measured.test.p_value <= 1.0, step
        assert step == "merullo_lens" or measured.variant is not None, step
    assert sum(key[0] == "merullo_ovector" for key in shared) == 2 * len(TASKS)  # each task and protocol once, shared


def test_reproduce_merullo_runs_end_to_end_on_a_tiny_model(llama_lm, planted_registry):
    result = reproduce("merullo", llama_lm, registry=planted_registry)
    assert [c.id for c in result.claims] == [c.id for c in load_paper("merullo").claims]
    assert all(c.verdict in VERDICTS for c in result.claims)
    assert result.claims[0].verdict == "not applicable" and result.claims[1].step == "merullo_lens"
