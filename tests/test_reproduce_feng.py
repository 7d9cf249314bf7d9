"""`lincorr reproduce feng`: every claim resolves, the steps' verdicts follow from planted ranks and scores, and the
whole paper runs on a tiny model."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from test_extractive import tiny_world_registry, world_tokenizer  # noqa: F401 (world_tokenizer is a fixture)

import lincorr.reproduce.runner as runner
from lincorr.internals import layout
from lincorr.models import wrap_model
from lincorr.reproduce import BUDGETS, load_paper, reproduce
from lincorr.reproduce.claims import Paper
from lincorr.reproduce.feng.steps import TunedHop, block_mass, depth_offset, depth_test, freeze, hop_config, localisation, ocr
from lincorr.reproduce.step import Context
from lincorr.reproduce.decisions import decide
from lincorr.studies.extractive.ocr import hop_data, load_world
from lincorr.studies.extractive.positions import ROLES
from lincorr.studies.extractive.scores import score_components
from helpers.tiny import tiny_llama

pytestmark = pytest.mark.usefixtures("single_thread")

# Small enough for a 2-block model and the 5-city registry of `tiny_world_registry`.
SEEDS = (0, 1, 2)
TINY_HOPS = {"n_facts": 5, "seeds": list(SEEDS)}
TINY_ORIGINS = {"n_train": 6, "n_test": 3, "n_cities": 4}


def test_the_feng_claims_cover_every_table_and_figure_with_their_own_steps():
    """Each claim resolving to a step or a reason is tested for every paper in test_reproduce.py."""
    paper = load_paper("feng")
    assert all(c.step.startswith("feng_") for c in paper.claims if c.step)
    assert {c.id.split(".")[1] for c in paper.claims} == {f"table{n}" for n in range(1, 4)} | {f"fig{n}" for n in range(1, 7)}
    assert paper.claim("feng.table2").paper_numbers()["model"] == "OLMo-7B"


def test_the_claims_of_one_hop_share_its_training_settings():
    """Each hop is fine-tuned once per reproduction: every claim on it must ask for the same facts and training."""
    for budget in BUDGETS:
        keys = {(s.get("hop"), s["n_facts"], str(s["seeds"]), str(s["learning_rate_by_model"]))
                for c in load_paper("feng").claims if c.step and (s := c.settings_for(budget)) and "n_facts" in s}
        assert len({k[1:] for k in keys}) == 1, budget


def planted_runs(mass, n_runs: int = 3, n_prompts: int = 8, noise: float = 0.01) -> list[np.ndarray]:
    """`n_runs` fine-tuning runs, one component per block, each prompt's score the planted block `mass` plus noise:
    `[n_prompts, n_blocks]` each."""
    return [np.asarray(mass) + noise * np.random.default_rng(run).standard_normal((n_prompts, len(mass))) for run in range(n_runs)]


EARLY = [5.0, 4.0, 3.0, 1.0, 0.1, 0.0, 0.0, 0.0, 0.0, 0.0]


@pytest.mark.parametrize("runs, toward, expected", [
    (planted_runs(EARLY), "early", "reproduced"),
    (planted_runs(EARLY), "late", "not reproduced"),  # the mass sits the other way, and the test would have seen it
    (planted_runs(EARLY[::-1]), "late", "reproduced"),
    (planted_runs([1.0] * 10), "early", "not reproduced"),  # spread evenly: no direction, and the test would have seen one
    ([np.zeros((8, 10))] * 3, "early", "inconclusive"),  # no positive mass: no depth, and no spread to read a power from
    ([*planted_runs(EARLY, 1), *planted_runs(EARLY[::-1], 1), *planted_runs([1.0] * 10, 1)], "early", "inconclusive"),  # runs disagree
])
def test_the_depth_test_follows_where_the_mass_sits_over_the_runs(runs, toward, expected):
    offsets = [float(depth_offset(block_mass(scores, np.arange(10), 10), toward)) for scores in runs]
    test = depth_test(offsets, "planted mass", interest=0.1)
    assert decide(test).verdict == expected, test
    assert test.unit == "fine-tuning runs" and test.units == sum(np.isfinite(offsets)) == (3 if np.any(runs[0]) else 0)


@pytest.fixture
def tiny(world_tokenizer, tmp_path):  # noqa: F811 (the imported fixture)
    return wrap_model(tiny_llama(len(world_tokenizer)), world_tokenizer, name="tiny"), tiny_world_registry(tmp_path)


def planted_hop(lm, registry, settings: dict, before: list, after: list, hop: str = "first") -> dict:
    """`ctx.shared` holding a `hop` run per seed (the untrained model) whose implication ranks go from `before` to `after`,
    each a list over the runs of lists over the implications."""
    shared = {}
    for seed, (run_before, run_after) in zip(SEEDS, zip(before, after)):
        config = hop_config(Context(lm, registry, settings), hop, seed)
        data = hop_data(load_world(registry), lm.tokenizer, hop, config.n_facts, seed)
        ranks = {kind: {"before": np.array(run_before), "after": np.array(run_after)} for kind in ("facts", "implications")}
        shared[("feng.hop", config)] = TunedHop(config, data, lm.fingerprint, ranks)
    return shared


BEFORE = [[3, 4, 2, 4, 3]] * 3  # each run's implication ranks before training (mean 3.2)


@pytest.mark.parametrize("after, expected", [
    ([[0, 0, 1, 0, 0], [0, 0, 0, 0, 0], [0, 1, 0, 1, 0]], "reproduced"),  # each run's mean falls by about 3
    ([[4, 3, 2, 4, 3], [3, 3, 2, 4, 3], [4, 4, 2, 4, 3]], "not reproduced"),  # no run's falls, and the runs agree
    ([[0, 0, 1, 0, 0], [4, 6, 2, 5, 4], [2, 3, 1, 3, 2]], "inconclusive"),  # the runs disagree: 3, -1 and 1
])
def test_the_ocr_verdict_follows_the_planted_ranks_over_the_runs(tiny, after, expected):
    lm, registry = tiny
    settings = {**TINY_HOPS, "hop": "first"}
    shared = planted_hop(lm, registry, settings, BEFORE, after)
    measured = ocr(Context(lm, registry, settings, shared=shared, interest=2.0))
    assert decide(measured.test).verdict == expected and measured.test.unit == "fine-tuning runs" and measured.test.units == 3
    assert measured.ours["implications_mean_rank_after"] == pytest.approx(np.mean(after), abs=0.005)


def planted_scores(lm, shared: dict, layer_of_run) -> None:
    """Each run's informative scores in `shared`: every implication's mass on the MLP of block `layer_of_run(run)[0]` at
    the subject tokens, and a little, differing by run, on block `layer_of_run(run)[1]`."""
    components = score_components(lm)
    mlp_of = {c.layer: components.index(c) for c in components if c.kind == "mlp"}
    for run, config in enumerate([hop.config for hop in shared.values() if isinstance(hop, TunedHop)]):
        main, beside = layer_of_run(run, config.hop)
        by_prompt = np.zeros((5, len(components), len(ROLES)))
        by_prompt[:, mlp_of[main], ROLES.index("subject")] = 1.0
        by_prompt[:, mlp_of[beside], ROLES.index("subject")] = 0.05 * (run % 3 + 1)
        shared[("feng.scores", config, False)] = {"informative_by_role": by_prompt.mean(0), "informative_by_prompt": by_prompt,
                                                  "informative": by_prompt.sum(2).mean(0)}


@pytest.mark.parametrize("early, expected", [(True, "reproduced"), (False, "not reproduced")])
def test_the_localisation_verdict_follows_the_planted_scores(tiny, early, expected):
    """Informative mass planted in the first block's MLP at the subject tokens of every implication sits early; in the last
    block's, late, and with the runs differing a little (a share in the next block in), the test has the power to say so."""
    lm, registry = tiny
    settings = {**TINY_HOPS, "hop": "first", "score": "informative", "part": "mlp", "role": "subject", "toward": "early"}
    shared = planted_hop(lm, registry, settings, BEFORE, [[0] * 5] * 3)
    last = layout(lm).n_layers - 1
    planted_scores(lm, shared, lambda run, hop: (0, 1) if early else (last, last - 1))
    measured = localisation(Context(lm, registry, settings, shared=shared, interest=0.1))
    assert measured.ours["positive_mass_by_block"][0 if early else last] > 0.85
    assert measured.test.direction_holds == early and decide(measured.test).verdict == expected
    assert measured.test.units == 3 and len(measured.ours["depth_offset_by_run"]) == 3


def test_table_2_judges_the_paper_split_and_stores_the_score_split_as_a_variant(tiny, monkeypatch):
    """Informative mass planted early for the first hop and late for the second: the scores choose block 1 of 2."""
    import lincorr.reproduce.feng.steps as feng_steps

    lm, registry = tiny
    monkeypatch.setattr(feng_steps, "tuned_model", lambda ctx, config: lm)  # every run's model the untrained one
    settings = {**TINY_HOPS, "pre": False}
    shared = {}
    for hop in ("first", "second"):
        planted = planted_hop(lm, registry, settings, BEFORE, [[0] * 5] * 3, hop)
        planted_scores(lm, planted, lambda run, hop: (0, 1) if hop == "first" else (1, 0))
        shared |= planted
    measured = freeze(Context(lm, registry, settings, shared=shared))
    assert measured.ours["split"] == measured.ours["score_split"] == 1 and measured.variant is not None
    assert measured.test.units == 3 and measured.test.unit == "fine-tuning runs"
    json.dumps({"ours": measured.ours, "variant": measured.variant.summary()})  # what the runner stores


def tiny_paper() -> Paper:
    """feng/claims.yaml with each measured claim's paper settings cut to the tiny model's size, run at the quick budget."""
    paper = load_paper("feng")
    claims = []
    for claim in paper.claims:
        if claim.step:
            tiny = TINY_ORIGINS if "n_train" in claim.settings["paper"] else TINY_HOPS
            claim = dataclasses.replace(claim, settings={"quick": {**claim.settings["paper"], **tiny}})
        claims.append(claim)
    return Paper(paper.name, paper.title, tuple(claims))


def test_the_whole_paper_runs_on_a_tiny_model(tiny, monkeypatch):
    lm, registry = tiny
    monkeypatch.setattr(runner, "load_paper", lambda name: tiny_paper())
    result = reproduce("feng", lm, registry=registry)
    by_id = {c.id: c for c in result.claims}
    assert [c.id for c in result.claims] == [c.id for c in load_paper("feng").claims]
    assert {by_id[i].verdict for i in ("feng.fig1", "feng.table1", "feng.fig5")} == {"not applicable"}
    measured = [c for c in result.claims if c.step]
    assert all(c.verdict in ("reproduced", "not reproduced", "inconclusive") and 0.0 <= c.p_value <= 1.0 for c in measured), result.text()
    assert all(c.detail["unit"] for c in measured), result.text()  # every test names its independent units
    assert set(by_id["feng.table2"].ours["rows"]["first"]) >= {"none", "all", "early_post", "late_post", "early_pre", "late_pre"}
    assert set(by_id["feng.table3"].ours["rows"]) == {"W_F'", "W_graft", "W~_graft"}
    assert by_id["feng.fig6"].ours["mlp"]["n"] == 2 and by_id["feng.fig6"].ours["head"]["n"] == 2 * layout(lm).n_heads


def test_a_machine_with_too_little_memory_is_refused_the_fine_tuning_claims_with_the_figure(tiny, monkeypatch):
    """On a machine whose memory is below the paper's measured peak times the model's weights, less the 8 bytes a
    parameter of the blocks the leanest memory plan saves (no gradient held: 4; moments in bfloat16: 4), every claim that fine-tunes is
    `not applicable` with the memory it needs and the machine's, nothing is trained and nothing is stored; with one byte
    more it runs; and once measured there, the smaller machine is served the stored result."""
    lm, registry = tiny
    from lincorr.finetune import layer_index

    weights = sum(p.numel() * p.element_size() for p in lm.model.parameters())
    in_blocks = sum(p.numel() for name, p in lm.model.named_parameters() if layer_index(name) is not None)
    assert 0 < in_blocks < sum(p.numel() for p in lm.model.parameters())
    needed = int(load_paper("feng").claim("feng.fig2.first").fine_tuning_peak * weights) - 8 * in_blocks
    monkeypatch.setattr(runner, "load_paper", lambda name: tiny_paper())
    monkeypatch.setattr(runner, "machine_memory", lambda: needed - 1)
    real_measure = runner.measure_claim
    monkeypatch.setattr(runner, "measure_claim", lambda *args: pytest.fail("a refused claim was measured"))
    result = reproduce("feng", lm, registry=registry, only="feng.fig2.first,feng.fig4")
    for claim in result.claims:
        assert claim.verdict == "not applicable" and f"fine-tuning {lm.name} needs about" in claim.reason, claim.reason
        assert "more than this machine's" in claim.reason and "8.8 times its weights" in claim.reason, claim.reason
        assert "even with adamw-bfloat16-moments" in claim.reason, claim.reason
    assert runner.memory_reason(load_paper("merullo").claims[-1], lm) is None, "a claim that does not fine-tune is never refused"
    monkeypatch.setattr(runner, "machine_memory", lambda: needed)
    assert runner.memory_reason(load_paper("feng").claim("feng.fig2.first"), lm) is None
    monkeypatch.setattr(runner, "measure_claim", real_measure)
    measured = reproduce("feng", lm, registry=registry, only="feng.fig2.first")
    assert measured.claims[0].verdict != "not applicable" and measured.measured == 1, measured.text()
    monkeypatch.setattr(runner, "machine_memory", lambda: needed - 1)
    monkeypatch.setattr(runner, "measure_claim", lambda *args: pytest.fail("a stored claim was measured again"))
    served = reproduce("feng", lm, registry=registry, only="feng.fig2.first")
    assert served.claims == measured.claims and served.cached_count() == 1


def test_a_resumed_run_loads_the_hop_and_its_scores_instead_of_training_and_scoring_again(tiny, monkeypatch):
    """A fresh reproduction (empty `ctx.shared`) finds the hop's fine-tuned model and its scores in the cache."""
    import lincorr.checkpoints as checkpoints
    import lincorr.reproduce.feng.steps as feng_steps

    lm, registry = tiny
    work = {"trained": 0, "scored": 0}
    real_train, real_scores = checkpoints.train_on_facts, feng_steps.linearized_scores

    def counted(name: str, real):
        def call(*args, **kwargs):
            work[name] += 1
            return real(*args, **kwargs)
        return call

    monkeypatch.setattr(checkpoints, "train_on_facts", counted("trained", real_train))
    monkeypatch.setattr(feng_steps, "linearized_scores", counted("scored", real_scores))
    runs = [feng_steps.hop_scores(Context(lm, registry, TINY_HOPS), "first", 0) for _ in range(2)]
    assert work == {"trained": 1, "scored": 1}
    for key in ("informative", "downstream_by_prompt"):
        np.testing.assert_array_equal(runs[0][key], runs[1][key])
