"""Claims over a bundled size series (`peng.fig4`, `merullo.scale`): measured on a member with the other sizes loaded by the
step, not applicable elsewhere with the command to run, keyed by every member's fingerprint, and judged as the paper reads
them. The series is monkeypatched to two tiny in-code models of one tokenizer."""

from __future__ import annotations

import copy
import dataclasses
from types import SimpleNamespace

import pytest
import torch
from helpers.tiny import tiny_llama
from helpers.vectors import planted_task

import lincorr.reproduce.runner as runner
import lincorr.reproduce.series as series
from lincorr.knowledge import load_registry
from lincorr.models import wrap_model
from lincorr.reproduce import load_paper, reproduce
from lincorr.reproduce.claims import Paper
from lincorr.reproduce.merullo.steps import TASKS
from lincorr.reproduce.peng.scale import SizePrecision, fig4_test
from lincorr.reproduce.series import Member, is_member, series_members
from lincorr.reproduce.step import Context
from lincorr.reproduce.steps import STEPS
from lincorr.reproduce.decisions import decide
from lincorr.reproduction_file import VERDICTS

pytestmark = pytest.mark.usefixtures("single_thread")

# The tiny tokenizer knows cities and countries only, so City->Country stands in for the relation that stays low too.
FIG4 = {"series": "tiny", "grows": "City->Country", "stays_low": "City->Country", "estimator": "ridge-std", "n_inputs": 60}


@pytest.fixture
def sizes(tokenizer, monkeypatch):
    """Two tiny Llamas of one tokenizer as the series "tiny" (small first); the step's loads are recorded."""
    models = {"tiny-small": wrap_model(tiny_llama(len(tokenizer), seed=0), tokenizer, name="tiny-small"),
              "tiny-large": wrap_model(tiny_llama(len(tokenizer), seed=1), tokenizer, name="tiny-large")}
    loads = []

    def load(alias, **options):
        loads.append((alias, options))
        return models[alias]

    monkeypatch.setattr(series, "series_members", lambda name: tuple(Member(alias, lm.fingerprint) for alias, lm in models.items()))
    monkeypatch.setattr(series, "load_model", load)
    return SimpleNamespace(models=models, loads=loads)


def one_claim(paper: str, claim_id: str, settings: dict) -> Paper:
    """The paper with only its claim `claim_id`, at `settings` for the quick budget."""
    claims = load_paper(paper)
    return Paper(paper, claims.title, (dataclasses.replace(claims.claim(claim_id), settings={"quick": settings}),))


def test_fig4_is_measured_on_a_member_with_the_other_size_loaded_by_the_step(sizes):
    small = sizes.models["tiny-small"]
    measured = STEPS["precision_by_size"](Context(small, load_registry(), FIG4, interest=0.1))
    assert measured.ours["series"] == "tiny" and [row["model"] for row in measured.ours["sizes"]] == ["tiny-small", "tiny-large"]
    assert sizes.loads == [("tiny-large", {"device": "cpu", "dtype": "float32"})], "only the other size is loaded, on the model's device"
    assert decide(measured.test).verdict in VERDICTS[:4] and measured.test.interest == 0.1
    assert len(measured.test.parts) == 3, "one rise (small -> large) and the low relation at each of the two sizes"
    assert "tiny-small -> tiny-large" in measured.test.parts[0].name and measured.test.parts[0].unit == "reference subjects"
    assert "ridge-std" in measured.test.name and "ols" in measured.variant.name
    row = measured.ours["sizes"][1]["ridge-std"]["City->Country"]
    assert row["n_pairs"] == 5 and 0.0 <= row["hit_at_1"] <= 1.0, "the five cities the tiny tokenizer knows"


def test_a_model_in_no_series_is_not_applicable_with_the_command_to_run(llama_lm):
    result = reproduce("peng", llama_lm, only="peng.fig4", registry=load_registry())
    claim = result.claims[0]
    assert claim.verdict == "not applicable" and "bundled size series qwen2.5-coder" in claim.reason
    assert "lincorr reproduce peng --model qwen2.5-coder-0.5b-instruct-q4km --only peng.fig4" in claim.reason
    scale = reproduce("merullo", llama_lm, only="merullo.scale", registry=load_registry()).claims[0]
    assert scale.verdict == "not applicable" and "--only merullo.scale" in scale.reason


def test_a_member_is_known_by_its_weights_its_alias_or_its_former_alias(llama_lm):
    small, large = series_members("qwen2.5-coder")
    assert small.alias == "qwen2.5-coder-0.5b-instruct-q4km" and large.fingerprint.startswith("gguf-sha256:cc324af0")
    by_alias = dataclasses.replace(llama_lm, name="qwen2.5-coder-1.5b-instruct-q4km")
    assert is_member(by_alias, large) and not is_member(by_alias, small)
    assert is_member(dataclasses.replace(llama_lm, fingerprint=small.fingerprint), small)
    assert is_member(dataclasses.replace(llama_lm, name="gemma-3-270m"), Member("gemma-3-270m-q4km", "other weights"))
    assert not is_member(llama_lm, small)


def test_the_stored_claim_is_measured_again_when_a_member_changes(sizes, tokenizer, monkeypatch):
    monkeypatch.setattr(runner, "load_paper", lambda name: one_claim("peng", "peng.fig4", FIG4))
    small = sizes.models["tiny-small"]
    first = reproduce("peng", small, registry=load_registry())
    assert first.measured == 1 and first.claims[0].ours["series"] == "tiny"
    assert reproduce("peng", small, registry=load_registry()).measured == 0, "the same series: the stored claim"
    sizes.models["tiny-large"] = wrap_model(tiny_llama(len(tokenizer), seed=2), tokenizer, name="tiny-large")
    again = reproduce("peng", small, registry=load_registry())
    assert again.measured == 1 and len(sizes.loads) == 2, "new weights for a member: measured again, the stored claim loaded nothing"


def precision_at(label: str, right: dict[str, bool]) -> SizePrecision:
    row = SimpleNamespace(label=label, n_pairs_influenced=len(right), hit_influenced={1: sum(right.values()) / len(right)},
                          chance_influenced={1: 0.01})
    return SizePrecision(row, right)


def cities(n_right: int, n: int = 60, offset: int = 0) -> dict[str, bool]:
    """`n` cities, the `n_right` from `offset` on right at top-1."""
    return {f"city{i}": offset <= i < offset + n_right for i in range(n)}


def planted_sizes(small_city: dict, large_city: dict, small_ceo: int, large_ceo: int) -> list:
    return [(Member(alias, alias), {"City->Country": precision_at("City->Country", city),
                                    "CEO->Company": precision_at("CEO->Company", cities(ceo, len(city)))})
            for alias, city, ceo in (("small", small_city, small_ceo), ("large", large_city, large_ceo))]


@pytest.mark.parametrize("small_city, large_city, small_ceo, large_ceo, expected", [
    (cities(12), cities(36), 3, 4, "reproduced"),  # City->Country rises, CEO->Company stays near the floor
    (cities(36), cities(12), 3, 4, "not reproduced"),  # City->Country falls with size: 24 of 60 subjects lost, none gained
    (cities(360, 600), cities(120, 600), 30, 40, "not reproduced"),  # City->Country falls with size, 600 subjects could have seen it
    (cities(120, 600), cities(360, 600), 30, 400, "not reproduced"),  # CEO->Company precise on the larger size
    (cities(20), cities(20, offset=20), 3, 4, "inconclusive"),  # as many cities gained as lost: 60 cannot rule out a rise of 0.1
])
def test_fig4_needs_the_rise_with_size_and_the_low_relation_low_at_every_size(small_city, large_city, small_ceo, large_ceo, expected):
    test = fig4_test(planted_sizes(small_city, large_city, small_ceo, large_ceo), "City->Country", "CEO->Company", 0.1, "ols")
    assert len(test.parts) == 3 and decide(test).verdict == expected


def test_the_rise_is_paired_over_the_subjects_both_sizes_judge():
    small = cities(12)
    large = {**cities(36), "only-on-large": True}
    test = fig4_test(planted_sizes(small, large, 3, 4), "City->Country", "CEO->Company", 0.1, "ols").parts[0]
    assert test.units == 60 and test.effect == pytest.approx(24 / 60)
    swapped = fig4_test(planted_sizes(cities(20), cities(20, offset=20), 3, 4), "City->Country", "CEO->Company", 0.1, "ols").parts[0]
    assert swapped.effect == 0 and swapped.p_value > 0.5, "the same rate on both sizes by different cities is no rise"


@pytest.fixture
def planted_sizes_registry(sizes):
    """Tasks planted on the small model's answers; the large size is the small one nudged (other weights, the same answers)."""
    small = sizes.models["tiny-small"]
    large = copy.deepcopy(small.model)
    with torch.no_grad():
        for parameter in large.parameters():
            parameter.add_(1e-6)
    sizes.models["tiny-large"] = wrap_model(large, small.tokenizer, name="tiny-large")
    return dataclasses.replace(load_registry(), tasks=tuple(planted_task(small, 40 * i, 40, name) for i, name in enumerate(TASKS)))


def test_merullo_scale_runs_the_ovector_protocol_at_every_size(sizes, planted_sizes_registry):
    settings = {"series": "tiny", "task": "capitals", "context": "copy", "n_sources": 3, "n_contexts": 6, "lens_pairs": 8,
                "layers": {name: 1 for name in TASKS}}
    shared: dict = {}
    measured = STEPS["merullo_scale"](Context(sizes.models["tiny-small"], planted_sizes_registry, settings, shared=shared, interest=0.1))
    assert [row["model"] for row in measured.ours["sizes"]] == ["tiny-small", "tiny-large"] and measured.ours["series"] == "tiny"
    assert [part.name.split(":")[0] for part in measured.test.parts] == ["tiny-small", "tiny-large"]
    assert all("vs none" in part.name and part.unit == "sources" for part in measured.test.parts)
    assert [part.name.split(":")[0] for part in measured.variant.parts] == ["tiny-small", "tiny-large"]
    assert [key[0] for key in shared] == ["merullo_sources"], "the reproduced size's runs are shared with its other claims"
    assert [alias for alias, _ in sizes.loads] == ["tiny-large"]
