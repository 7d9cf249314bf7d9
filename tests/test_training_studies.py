"""Training studies on tiny models: generalization bookkeeping on planted cases, edit prediction, gradient correlation, AUC."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch
from helpers.tiny import WORDS, city_country_registry, one_thread, state_copy, tiny_gpt2, tiny_llama, tiny_subword_tokenizer

from lincorr.collection import CollectSettings
from lincorr.fit import FitConfig, fit_relation
from lincorr.studies.training.generalization import (
    DEFAULT_TRAIN,
    PAPER_MAX_EPOCHS,
    PAPER_PRESET,
    diagnose,
    GeneralizationConfig,
    GeneralizationResult,
    calibrate_predictions,
    held_out_deltas,
    planned_facts,
    measure_generalization,
    score_outcomes,
)
from lincorr.studies.training.edit_prediction import edit_delta, predict_edit, predict_from_logits
from lincorr.studies.training.table5 import measure_table5
import lincorr.studies.training.generalization as generalization_module
import lincorr.studies.training.table5 as table5_module
import lincorr.studies.training.gradients as gradients_module
from lincorr.studies.training.gradients import GradientConfig, gradient_correlation_from_changes, measure_table4, measure_gradient_correlation
from lincorr.studies.training.subwords import measure_subwords
from lincorr.finetune import TrainConfig
from lincorr.knowledge import load_registry
from lincorr.metrics import chance_top1, roc_auc
from lincorr.models import wrap_model
from lincorr.relations import RelationSpec

CITIES = ("Paris", "London", "Tokyo", "Rome", "Berlin")
COUNTRIES = ("France", "England", "Japan", "Italy", "Germany")
REGISTRY_YAML = city_country_registry(CITIES, COUNTRIES, "{Paris: France, London: [England, Japan], Tokyo: Japan, Rome: Italy, Berlin: Germany}")
RIDGE = FitConfig(estimator="ridge", alpha=1.0, n_boot=10)
QUICK_TRAIN = TrainConfig(learning_rate=1e-2, epochs=8, batch_size=4)


@pytest.fixture(autouse=True)
def single_thread():
    with one_thread():
        yield


@pytest.fixture
def registry(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(REGISTRY_YAML, encoding="utf-8")
    return load_registry([path])


@pytest.fixture
def lm():
    """A tiny Llama whose WordPiece tokenizer spells made-up names in letters, so fresh entity names exist."""
    tokenizer = tiny_subword_tokenizer(WORDS)
    return wrap_model(tiny_llama(len(tokenizer)), tokenizer, name="tiny-llama")


@pytest.fixture
def relation(lm, registry):
    return fit_relation(lm, registry, RelationSpec("tiny_city", "tiny_country"), n_inputs=40, fit=RIDGE)


# ---- predicting an edit ----

def test_edit_delta_lifts_the_answer_past_the_runner_up_by_the_margin():
    assert edit_delta(np.array([1.0, 4.0, 2.0]), 0, margin=2.0) == pytest.approx(5.0)
    assert edit_delta(np.array([6.0, 4.0, 2.0]), 0, margin=2.0) == pytest.approx(2.0)


def test_prediction_follows_the_weight_unless_the_prior_wins():
    W = np.array([[1.0, 0.0, 0.2], [0.0, 0.1, 1.0]])  # W [n_source=2, n_target=3]
    source_before = np.array([0.0, 0.0])
    words_s, words_t = ("Paris", "Rome"), ("France", "Italy", "Spain")
    weak_prior = predict_from_logits(W, source_before, np.array([0.0, 1.0, 0.0]), 0, words_s, words_t, (0,), margin=4.0)
    assert weak_prior.predicted_target == "France" and weak_prior.predicts_reference
    assert weak_prior.delta == pytest.approx(4.0) and weak_prior.margin == pytest.approx(3.0)
    assert weak_prior.current_target == "Italy" and 0.5 < weak_prior.confidence < 1
    strong_prior = predict_from_logits(W, source_before, np.array([0.0, 10.0, 0.0]), 0, words_s, words_t, (0,), margin=4.0)
    assert strong_prior.predicted_target == "Italy" and strong_prior.predicts_reference is False
    assert strong_prior.success_probability < weak_prior.success_probability
    unknown = predict_from_logits(W, source_before, np.zeros(3), 1, words_s, words_t, (), margin=4.0)
    assert unknown.predicted_target == "Spain" and unknown.predicts_reference is None and np.isnan(unknown.success_probability)


def test_predict_edit_on_a_model_uses_its_current_logits(lm, relation):
    prediction = predict_edit(lm, relation, "Tokyo", "Zorbak")
    assert prediction.source_answer == "Tokyo" and prediction.references == ("Japan",)
    assert prediction.predicted_target in COUNTRIES and prediction.delta >= 5.0
    with pytest.raises(Exception, match="not a usable word"):
        predict_edit(lm, relation, "Atlantis", "Zorbak")


# ---- generalization bookkeeping on a planted case ----

def planted(relation):
    """W sends each city to its own country (London also to Germany, more than to England); the bias favours Germany."""
    W = np.zeros((5, 5))
    for i in range(5):
        W[i, i] = 1.0
    W[1, 4] = 2.0  # London -> Germany outweighs London -> England
    return dataclasses.replace(relation, fit=dataclasses.replace(relation.fit, W=W, intercept=np.array([0, 0, 0, 0, 3.0])))


def test_score_outcomes_on_a_planted_case(relation):
    relation = planted(relation)
    rows = [0, 1, 2, 3]  # Paris, London, Tokyo, Rome
    source_before = np.zeros((4, 5))
    source_after = np.eye(5)[rows] * 10
    source_after[3] = np.eye(5)[0] * 10  # Rome did not take: the model still says Paris
    target_before = np.zeros((4, 5))
    target_before[:, 4] = 1.0  # everyone lives in Germany before the edit
    target_after = np.zeros((4, 5))
    target_after[0, 0] = 5  # Paris -> France: generalized
    target_after[1, 2] = 5  # London -> Japan: an alias of the reference, generalized
    target_after[2, 4] = 5  # Tokyo -> Germany although W[Tokyo, Japan] = 1 > W[Tokyo, Germany] = 0: low prior
    target_after[3, 4] = 5  # Rome never learned
    outcomes = score_outcomes(relation, 0, ["A", "B", "C", "D"], rows, source_before, source_after, target_before, target_after, margin=5.0)
    assert [o.generalized for o in outcomes] == [True, True, False, False]
    assert [o.learned for o in outcomes] == [True, True, True, False]
    assert [o.category for o in outcomes] == ["generalized", "generalized", "low prior", "not learned"]
    assert [o.generated for o in outcomes] == ["France", "Japan", "Germany", "Germany"]
    assert outcomes[1].references == ("England", "Japan") and outcomes[1].w_ref == 1.0  # the best alias by weight: England
    assert outcomes[1].w_gen == 0.0 and outcomes[1].w_max == 2.0 and outcomes[2].bias_gen == 3.0
    assert not any(o.generalized_before for o in outcomes)
    assert outcomes[0].source_delta == 10.0
    # W predicts Paris -> France (delta 5 beats the prior of 1), London -> Germany (W 2 there), Tokyo -> Japan.
    assert [o.predicted for o in outcomes] == ["France", "Germany", "Japan", "Italy"]

    # A wrong weight: London taught, model says Germany, where W points.
    target_after[1] = 0
    target_after[1, 4] = 5
    wrong = score_outcomes(relation, 0, ["B"], [1], source_before[1:2], source_after[1:2], target_before[1:2], target_after[1:2])
    assert wrong[0].category == "wrong weight" and wrong[0].predicted == wrong[0].generated == "Germany"
    # W favoured the reference and so did the bias: nothing in (W, b) explains the failure.
    assert diagnose(False, True, w_ref=1.0, w_gen=0.0, bias_ref=2.0, bias_gen=0.0) == "unexplained"

    result = GeneralizationResult(
        label="planted", model_name="tiny", source="tiny_city", target="tiny_country", source_template="", target_template="",
        n_target_domain=5, labelwise_r_mean=0.0, config=GeneralizationConfig(n_facts=4, seeds=(0,)), outcomes=tuple(outcomes),
        losses=((1.0,),), seconds_fit=0.0, seconds_train=0.0, seconds=0.0,
    )
    summary = result.summary()
    assert summary["generalization_rate"] == 0.5 and summary["rate_before"] == 0.0 and summary["source_learned_rate"] == 0.75
    assert summary["generalization_rate_learned"] == pytest.approx(2 / 3)
    assert summary["random_baseline"] == pytest.approx((1 + 2 + 1 + 1) / 4 / 5)
    assert summary["prediction_accuracy"] == 0.25  # only Paris -> France was predicted right
    assert summary["categories"] == {"generalized": 2, "wrong weight": 0, "low prior": 1, "unexplained": 0, "not learned": 1}
    # London generalized through an alias W did not favour: its predicted success (0.002) is below both failures' (0.96),
    # so only Paris's two pairs can count (Paris, Tokyo and Rome share weight and prior: ties up to rounding): AUC <= 2/4.
    assert 0.25 <= summary["prediction_success_auc"] <= 0.5
    assert "| A | Paris | France | France |" in result.diagnosis_markdown()


def test_calibration_uses_only_other_seeds_and_changes_the_prediction(relation):
    relation = planted(relation)
    # Seed 0 teaches Paris twice (rises 2 and 4), seed 1 teaches London (rise 20; Rome, rise 100, did not take).
    base = score_outcomes(relation, 0, ["A", "B"], [0, 0], np.zeros((2, 5)), np.eye(5)[[0, 0]] * [[2], [4]],
                          np.zeros((2, 5)), np.zeros((2, 5)))
    other = score_outcomes(relation, 1, ["C", "D"], [1, 3], np.zeros((2, 5)), np.eye(5)[[1, 0]] * [[20], [100]],
                           np.zeros((2, 5)), np.zeros((2, 5)))
    outcomes = base + other
    assert [o.learned for o in outcomes] == [True, True, True, False]
    # A seed-0 fact is calibrated by seed 1's learned facts only, and the other way round; unlearned rises never count.
    assert held_out_deltas(outcomes).tolist() == [20.0, 20.0, 3.0, 3.0]
    # With one seed, each fact is calibrated by the other facts.
    assert held_out_deltas(base).tolist() == [4.0, 2.0]

    # C (taught London) leans to Japan by 5 logits; W[London] = (0, 1, 0, 0, 2), so a rise of 3 puts Germany (6) past it.
    target_before = np.zeros((4, 5))
    target_before[2, 2] = 5.0
    calibrated = calibrate_predictions(relation, outcomes, target_before)
    assert [o.calibrated_delta for o in calibrated] == [20.0, 20.0, 3.0, 3.0]
    assert [o.predicted_calibrated for o in calibrated] == ["France", "France", "Germany", "Italy"]
    assert calibrated[0].predicted_success_calibrated == pytest.approx(np.exp(20) / (np.exp(20) + 4))
    measured = ("generated", "learned", "source_delta", "predicted", "category")
    assert [[getattr(o, f) for f in measured] for o in calibrated] == [[getattr(o, f) for f in measured] for o in outcomes]


def test_balanced_plan_gives_a_rare_category_its_share(relation, lm):
    # Pretend England (London's first reference) is a subword: one subject in that category, four in the other.
    categories = ("whole_word", "subword", "whole_word", "whole_word", "whole_word")
    target = dataclasses.replace(relation.target, domain=dataclasses.replace(relation.target.domain, categories=categories))
    relation = dataclasses.replace(relation, target=target)
    london = relation.source.domain.words.index("London")
    _, plain = planned_facts(relation, 8, 0, lm.tokenizer)
    names, balanced = planned_facts(relation, 8, 0, lm.tokenizer, balance_categories=True)
    assert len(names) == len(balanced) == 8 and balanced.count(london) == 4
    assert sorted(set(balanced) - {london}) == sorted(set(range(5)) - {london})  # the other half: the four whole-word subjects
    assert plain.count(london) < 4


# ---- the whole study on a tiny model ----

def test_generalization_study_runs_and_leaves_the_model_alone(lm, registry, tmp_path):
    before = state_copy(lm.model)
    config = GeneralizationConfig(n_facts=3, seeds=(0, 1), n_inputs=40, fit=RIDGE, train=QUICK_TRAIN)
    result = measure_generalization(lm, registry, RelationSpec("tiny_city", "tiny_country"), config)
    assert all(torch_equal(before[name], p) for name, p in lm.model.named_parameters())
    summary = result.summary()
    assert len(result.outcomes) == 6 and summary["n_facts"] == 3 and summary["seeds"] == [0, 1]
    assert summary["source_learned_rate"] >= 2 / 3  # lr 1e-2 for 8 epochs memorises three facts on a tiny model
    # Training stops at the first epoch where every fact is learned, so a seed cut short has learned them all.
    for seed, epochs_run, learned in zip(summary["seeds"], summary["epochs_run_per_seed"], result.per_seed("learned")):
        assert 1 <= epochs_run <= QUICK_TRAIN.epochs and (epochs_run == QUICK_TRAIN.epochs or learned == 1.0)
    # Aliases count (a London fact has two right countries, twice the chance), by the ablation's rule.
    assert summary["random_baseline"] == pytest.approx(np.mean([len(o.references) / 5 for o in result.outcomes]))
    assert summary["random_baseline"] == chance_top1([o.references for o in result.outcomes], 5)
    assert len({o.entity for o in result.outcomes}) == 6  # fresh names per seed
    result.save(tmp_path / "out")
    saved = json.loads((tmp_path / "out" / "result.json").read_text())
    assert saved["generalization_rate"] == summary["generalization_rate"]
    assert (tmp_path / "out" / "fig5.png").stat().st_size > 0 and (tmp_path / "out" / "table6.md").exists()


def test_generalization_table_resumes_from_stored_rows(lm, registry, monkeypatch, tmp_path):
    config = GeneralizationConfig(n_facts=2, seeds=(0,), n_inputs=40, fit=RIDGE, train=QUICK_TRAIN)
    relations = [RelationSpec("tiny_city", "tiny_country", "tiny"), RelationSpec("tiny_country", "tiny_city", "no reference")]
    printed = []
    first = measure_table5(lm, registry, relations, config, on_row=printed.append)
    rows = first.summary()["rows"]
    assert printed == rows and rows[0]["n_facts"] == 2 and "no reference pairs" in rows[1]["skipped"]
    markdown = first.markdown().splitlines()
    assert len(markdown) == 4 and markdown[2].startswith(f"| tiny | {rows[0]['generalization_rate']:.1%} ±") and "skipped" in markdown[3]
    first.save(tmp_path / "table5")
    assert (tmp_path / "table5" / "table5.md").read_text(encoding="utf-8") == first.markdown() + "\n"
    assert (tmp_path / "table5" / "table5.json").read_text(encoding="utf-8") == json.dumps(rows, indent=2, ensure_ascii=False) + "\n"

    def no_training(*args, **kwargs):
        raise AssertionError("a stored row was computed again")

    monkeypatch.setattr(table5_module, "measure_generalization", no_training)
    assert json.dumps(measure_table5(lm, registry, relations, config).summary()["rows"]) == json.dumps(rows)  # NaN-safe comparison
    # Other settings are another row: it is computed, not read back.
    with pytest.raises(AssertionError, match="computed again"):
        measure_table5(lm, registry, relations[:1], dataclasses.replace(config, n_facts=3))
    # So are other collection settings (the batch size moves W), and without the cache no row is read back.
    for settings in (CollectSettings(batch_size=7), CollectSettings(use_cache=False)):
        with pytest.raises(AssertionError, match="computed again"):
            measure_table5(lm, registry, relations[:1], config, settings)


def test_subword_study_splits_by_category(lm, registry):
    config = GeneralizationConfig(n_facts=2, seeds=(0,), n_inputs=40, fit=RIDGE, train=QUICK_TRAIN)
    result = measure_subwords(lm, registry, RelationSpec("tiny_city", "tiny_country"), config)
    rows = {r["category"]: r for r in result.rows}
    assert rows["whole_word"]["n_target_words"] == 5 and rows["whole_word"]["n_facts"] == 2
    assert rows["subword"]["n_facts"] == 0 and np.isnan(rows["subword"]["generalization_rate"])
    whole = [o for o in result.generalization.outcomes if o.reference_category == "whole_word"]
    assert rows["whole_word"]["rate_before"] == np.mean([o.generalized_before for o in whole])
    assert "whole_word" in result.text()


# ---- which parameters train: the default's blocks on any architecture, the paper preset's everything ----

@pytest.fixture
def gpt2_lm():
    """A tiny GPT-2: blocks named "transformer.h.N.", absolute positions, the head tied to the embedding."""
    tokenizer = tiny_subword_tokenizer(WORDS)
    return wrap_model(tiny_gpt2(len(tokenizer)), tokenizer, name="tiny-gpt2")


@pytest.fixture
def training_runs(monkeypatch):
    """(weights before, TrainResult) of every training run the studies make."""
    runs = []

    def recorded(train):
        def run(model, *args, **kwargs):
            before = state_copy(model)
            result = train(model, *args, **kwargs)
            runs.append((before, result))
            return result
        return run

    monkeypatch.setattr(generalization_module, "train_on_facts", recorded(generalization_module.train_on_facts))
    monkeypatch.setattr(gradients_module, "single_step", recorded(gradients_module.single_step))
    return runs


def changed(before, result) -> set[str]:
    """Names of the parameters that training moved."""
    after = dict(result.model.named_parameters())
    return {name for name, old in before.items() if not torch.equal(old, after[name])}


def test_training_studies_train_only_the_blocks_of_a_gpt2(gpt2_lm, registry, training_runs):
    blocks = {n for n, _ in gpt2_lm.model.named_parameters() if n.startswith("transformer.h.")}
    assert blocks and {"transformer.wte.weight", "transformer.wpe.weight", "transformer.ln_f.weight"}.isdisjoint(blocks)
    spec = RelationSpec("tiny_city", "tiny_country")
    # The studies' own parameter selection, at a rate that moves a tiny model in a few epochs.
    config = GeneralizationConfig(n_facts=3, seeds=(0,), n_inputs=40, fit=RIDGE,
                                  train=dataclasses.replace(DEFAULT_TRAIN, learning_rate=1e-2, epochs=4))
    generalized = measure_generalization(gpt2_lm, registry, spec, config)
    subwords = measure_subwords(gpt2_lm, registry, spec, config)
    stepped = measure_gradient_correlation(gpt2_lm, registry, spec, GradientConfig(
        n_inputs=40, n_step_facts=8, n_eval=15, fit=RIDGE, train=dataclasses.replace(GradientConfig.train, learning_rate=1e-3)))
    assert len(training_runs) == 3  # generalize, subwords, gradcorr
    for before, result in training_runs:
        assert set(result.trained_parameters) == blocks
        assert changed(before, result) == blocks  # every block moved; embeddings, positions and final norm did not
    assert generalized.summary()["trainable"].startswith("transformer blocks") and len(generalized.outcomes) == 3
    assert len(subwords.generalization.outcomes) == 3 and stepped.summary()["mean_abs_source_change"] > 0


def test_paper_preset_trains_every_parameter_at_the_papers_rate(lm, registry, training_runs):
    train = PAPER_PRESET.apply(DEFAULT_TRAIN)
    assert (train.learning_rate, train.blocks_only, train.epochs) == (5e-6, False, PAPER_MAX_EPOCHS)
    # What the preset does not name stays the study's.
    assert (train.batch_size, train.max_grad_norm, train.schedule) == (DEFAULT_TRAIN.batch_size, DEFAULT_TRAIN.max_grad_norm, "constant")
    spec = RelationSpec("tiny_city", "tiny_country")
    config = GeneralizationConfig(n_facts=2, seeds=(0,), n_inputs=40, fit=RIDGE, train=dataclasses.replace(train, epochs=2))
    summary = measure_generalization(lm, registry, spec, config).summary()
    assert summary["learning_rate"] == 5e-6 and summary["trainable"] == "all parameters" and summary["epochs"] == 2
    assert summary["epochs_run_per_seed"] == [2] or summary["source_learned_rate"] == 1.0
    stepped = measure_gradient_correlation(lm, registry, spec, GradientConfig(
        n_inputs=40, n_step_facts=8, n_eval=15, fit=RIDGE, train=PAPER_PRESET.apply(GradientConfig.train)))
    assert stepped.summary()["learning_rate"] == 5e-6
    for before, result in training_runs:
        assert set(result.trained_parameters) == set(before)
        assert {"model.embed_tokens.weight", "lm_head.weight"} <= changed(before, result)
    # AdamW's first step moves a coordinate by lr * g / (|g| + eps): the largest change is the learning rate itself.
    before, step = training_runs[-1]
    largest = max(float((p.detach() - before[n]).abs().max()) for n, p in step.model.named_parameters())
    assert largest == pytest.approx(5e-6, rel=1e-2)


# ---- gradient correlation ----

def test_gradient_correlation_of_planted_changes():
    rng = np.random.default_rng(0)
    W = rng.normal(size=(6, 4))
    source_change = rng.normal(size=(50, 6))
    # float64 throughout: r of a planted relation with 1e-6 noise is 1 - O(1e-12).
    planted = gradient_correlation_from_changes(W, source_change, source_change @ W + 1e-6 * rng.normal(size=(50, 4)))
    assert np.allclose(planted.labelwise, 1.0, atol=1e-6) and abs(planted.control) < 0.6 and planted.p_value < 0.01
    unrelated = gradient_correlation_from_changes(W, source_change, rng.normal(size=(50, 4)))
    assert unrelated.r < 0.5 and unrelated.p_value > 0.05
    # Sign and direction: W's transpose or a negated W predicts nothing or the opposite.
    assert gradient_correlation_from_changes(-W, source_change, source_change @ W).r == pytest.approx(-1.0)
    swapped = gradient_correlation_from_changes(W, source_change, (source_change @ W) @ W.T @ rng.normal(size=(6, 4)))
    assert swapped.r < planted.r - 0.3


def test_a_shift_common_to_every_logit_passes_the_papers_control_but_not_the_centred_one():
    """One step moves every logit of an input by about the same amount: W with shuffled rows keeps its column sums, so
    under the paper's measure the control is as high as the measurement; centred per input, the shift contributes nothing."""
    rng = np.random.default_rng(1)
    n_eval, n_source, n_target = 200, 12, 8
    W = rng.normal(size=(n_source, n_target))
    shift = 10 * rng.normal(size=(n_eval, 1))  # per input, common to its whole domain, 10x the relation's size
    relation_change = rng.normal(size=(n_eval, n_source))
    source_change = relation_change + shift
    related = source_change @ W - shift @ W.sum(0, keepdims=True) + shift  # dT = (dS without the shift) @ W + shift
    shift_only = shift + 0.1 * rng.normal(size=(n_eval, n_target))
    for target_change, real in ((related, True), (shift_only, False)):
        paper = gradient_correlation_from_changes(W, source_change, target_change)
        ours = gradient_correlation_from_changes(W, source_change, target_change, centred=True)
        # The paper's measure follows the shift: its control is far from a null in both cases (measured -0.47, -0.49).
        assert abs(paper.control) > 0.3, (real, paper.r, paper.control)
        # Centred: the relation is found with a permutation p at its floor, the shift alone is not found at all.
        if real:
            assert ours.r > 0.8 and ours.p_value < 0.01 and abs(ours.control) < 0.2, (ours.r, ours.control, ours.p_value)
        else:
            assert abs(ours.r) < 0.2 and ours.p_value > 0.05, (ours.r, ours.control, ours.p_value)


def test_gradient_correlation_study_on_a_tiny_model_and_its_resumable_table(lm, registry, monkeypatch):
    config = GradientConfig(n_inputs=40, n_step_facts=8, n_eval=15, fit=RIDGE,
                            train=TrainConfig(learning_rate=1e-3, batch_size=4))
    result = measure_gradient_correlation(lm, registry, RelationSpec("tiny_city", "tiny_country"), config)
    summary = result.summary()
    # The headline is the mean over target words (that gradient r beats a shuffled W is test_study_commands' gradcorr test).
    assert result.labelwise_gradient_r.shape == (5,) and summary["gradient_r"] == pytest.approx(np.nanmean(result.labelwise_gradient_r))
    assert summary["mean_abs_source_change"] > 0 and summary["mean_abs_target_change"] > 0

    relations = [RelationSpec("tiny_city", "tiny_country", "tiny"), RelationSpec("tiny_country", "tiny_city", "no reference")]
    table = measure_table4(lm, registry, relations, config)
    assert table.rows[0].gradient_r == result.gradient_r and "no reference pairs" in table.skipped[0][1]

    def no_step(*args, **kwargs):
        raise AssertionError("a stored row was computed again")

    monkeypatch.setattr(gradients_module, "measure_gradient_correlation", no_step)
    again = measure_table4(lm, registry, relations, config)
    assert again.text() == table.text()
    np.testing.assert_array_equal(again.rows[0].labelwise_gradient_r, result.labelwise_gradient_r)


# ---- AUC ----

def test_roc_auc():
    assert roc_auc([1, 2, 3, 4], [0, 0, 1, 1]) == 1.0
    assert roc_auc([4, 3, 2, 1], [0, 0, 1, 1]) == 0.0
    assert roc_auc([1, 1, 1, 1], [0, 1, 0, 1]) == 0.5
    assert roc_auc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]) == 0.75
    assert np.isnan(roc_auc([1, 2], [1, 1]))


def torch_equal(a, b) -> bool:
    import torch

    return bool(torch.equal(a, b))


# ---- the command line ----

@pytest.fixture
def workspace(tmp_path, lm):
    lm.model.save_pretrained(tmp_path / "model")
    lm.tokenizer.save_pretrained(tmp_path / "model")
    (tmp_path / "tiny.yaml").write_text(REGISTRY_YAML, encoding="utf-8")
    return tmp_path


def cli(ws, command, *extra):
    return [command, "tiny_city", "tiny_country", "--model", str(ws / "model"), "--registry", str(ws / "tiny.yaml"), "-n", "40",
            "--alpha", "1", "--quiet", *extra]


def test_paper_flag_is_the_preset_and_options_still_override_it(workspace, capsys):
    from lincorr.cli import build_parser, main
    from lincorr.cli.training import generalization_config

    def train(*extra):
        return generalization_config(build_parser().parse_args(cli(workspace, "generalize", *extra))).train

    assert train() == dataclasses.replace(DEFAULT_TRAIN, seed=0)
    assert train("--preset", "paper") == dataclasses.replace(PAPER_PRESET.apply(DEFAULT_TRAIN), seed=0)
    assert (train("--preset", "paper", "--lr", "1e-4").learning_rate, train("--preset", "paper", "--lr", "1e-4").blocks_only) == (1e-4, False)
    assert (train("--full").learning_rate, train("--full").blocks_only) == (DEFAULT_TRAIN.learning_rate, False)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["generalize", "--help"])
    assert f"at most {PAPER_MAX_EPOCHS} epochs" in " ".join(capsys.readouterr().out.split())

    assert main(cli(workspace, "generalize", "--preset", "paper", "--epochs", "1", "--n-facts", "2", "--n-seeds", "1", "--json")) == 0
    payload = json.loads(capsys.readouterr().out)
    assert (payload["learning_rate"], payload["trainable"], payload["epochs"], payload["epochs_run_per_seed"]) == (5e-6, "all parameters", 1, [1])
    assert main(cli(workspace, "gradcorr", "--preset", "paper", "--n-step-facts", "8", "--n-eval", "15", "--json")) == 0
    row = json.loads(capsys.readouterr().out)["rows"][0]
    assert (row["learning_rate"], row["trainable"]) == (5e-6, "all parameters")


def test_generalize_and_predict_edit_json(workspace, capsys):
    from lincorr.cli import main

    training = ("--n-facts", "2", "--n-seeds", "2", "--lr", "1e-2", "--epochs", "2")
    assert main(cli(workspace, "generalize", *training, "--json", "--out", str(workspace / "out"))) == 0
    payload = json.loads(capsys.readouterr().out)
    assert {"generalization_rate", "rate_before", "random_baseline", "source_learned_rate", "n_facts", "seeds",
            "prediction_accuracy", "prediction_success_auc", "calibrated_prediction_accuracy", "epochs_run_per_seed"} <= payload.keys()
    assert payload["n_facts"] == 2 and payload["seeds"] == [0, 1] and (workspace / "out" / "facts.json").exists()
    assert main(cli(workspace, "predict-edit", "--value", "Rome", "--subject", "Zorbak", "--json", "--out", str(workspace / "edit"))) == 0
    prediction = json.loads(capsys.readouterr().out)
    assert json.loads((workspace / "edit" / "prediction.json").read_text(encoding="utf-8")) == prediction
    assert prediction["subject"] == "Zorbak" and prediction["references"] == ["Italy"] and prediction["predicted_target"] in COUNTRIES
    assert main(cli(workspace, "predict-edit", "--value", "Rome", "--subject", "Zorbak", "--delta", "40", "--json")) == 0
    pushed = json.loads(capsys.readouterr().out)
    assert pushed["delta"] == 40.0 != prediction["delta"] and pushed["current_target"] == prediction["current_target"]
    assert main(cli(workspace, "predict-edit", "--value", "Atlantis")) == 2
    assert "not a usable word" in capsys.readouterr().err
    assert main(cli(workspace, "predict-edit", "--value", "Rome", "--delta", "9", "--margin", "2")) == 2
    assert "not both" in capsys.readouterr().err
