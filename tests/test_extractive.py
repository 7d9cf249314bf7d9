"""Extractive structures on tiny in-code models: the data, the metric, and each score against its own definition."""

from __future__ import annotations

import copy
import dataclasses
import json

import numpy as np
import pytest
import torch
from helpers.extractive import ANSWERS, CANDIDATES, PROMPTS, float64_pair
from helpers.tiny import WORDS, state_copy, tiny_llama, tiny_subword_tokenizer, tiny_tokenizer

from lincorr import finetune
from lincorr.domains import build_domain
from lincorr.errors import LincorrError
from lincorr.studies.extractive.ocr import (
    HOPS, PAPER_TRAIN, OcrConfig, QuerySet, Templates, chance_mean_rank, hop_data, load_world, made_up_names, ranks,
    measure_ocr, token_report, train_model,
)
from lincorr.studies.extractive.freeze import SETTINGS, FreezeConfig, choose_split, paper_split, reset_blocks, measure_freeze
from lincorr.studies.extractive.origins import (
    ORDERS, WEIGHT_SETS, OriginsConfig, graft_weights, novel_data, ordering_phases, measure_graft, measure_ordering,
)
from lincorr.studies.extractive.scores import SCORES
from lincorr.finetune import Fact, TrainConfig, train_on_facts
from lincorr.internals import run
from lincorr.knowledge import load_registry
from lincorr.models import wrap_model

pytestmark = pytest.mark.usefixtures("single_thread")

# ---------------------------------------------------------------- data and metric


def test_the_registry_world_has_twenty_cities_with_distinct_languages_and_unrevealing_landmarks():
    world = load_world(load_registry())
    assert len(world.cities) >= 20 and len(world.animals) >= 20
    assert len(set(world.languages)) == len(world.languages) == len(world.landmarks) == len(world.cities)
    for city, language, landmark in zip(world.cities, world.languages, world.landmarks):
        assert city not in landmark and language not in landmark


@pytest.fixture(scope="module")
def world_tokenizer():
    """Cities and languages are whole words; made-up names split into letters, so their first tokens are capitals."""
    world = load_world(load_registry())
    words = set(world.cities + world.languages + world.animals)
    for template in Templates().__dict__.values():
        words |= set(template.replace("{}", " ").split())
    for landmark in world.landmarks:
        words |= set(landmark.split())
    return tiny_subword_tokenizer(sorted(words))


@pytest.mark.parametrize("hop", ["first", "second"])
def test_hop_data_pairs_each_name_with_one_city_and_asks_the_documented_questions(world_tokenizer, hop):
    world = load_world(load_registry())
    data = hop_data(world, world_tokenizer, hop, n=8, seed=3)
    assert len(set(data.names)) == len(set(data.cities)) == 8
    language = dict(zip(world.cities, world.languages))
    landmark = dict(zip(world.cities, world.landmarks))
    for i, (name, city) in enumerate(zip(data.names, data.cities)):
        if hop == "first":
            assert data.facts.prompts[i] == f"{name} lives in" and data.facts.answer_words()[i] == city
            assert data.implications.prompts[i] == f"The people in the city {name} is from speak"
            assert data.implications.answer_words()[i] == language[city]
        else:
            assert data.facts.prompts[i] == f"The mayor of {city} is" and data.facts.answer_words()[i] == name
            assert data.implications.prompts[i] == f"The mayor of the city that contains {landmark[city]} is"
            assert data.implications.answer_words()[i] == name
    for queries in (data.facts, data.implications):
        assert len(set(queries.candidates.token_ids)) == len(queries.candidates) == 8
    assert chance_mean_rank(data.facts) == 3.5
    # The pairing is seeded.
    assert hop_data(world, world_tokenizer, hop, n=8, seed=3) == data
    assert hop_data(world, world_tokenizer, hop, n=8, seed=4).cities != data.cities


def test_templates_are_changeable_and_checked(world_tokenizer):
    world = load_world(load_registry())
    data = hop_data(world, world_tokenizer, "first", n=4, templates=Templates(first_fact="{} lives in the city of"))
    assert data.facts.prompts[0].endswith(" lives in the city of")
    with pytest.raises(LincorrError, match="exactly one"):
        Templates(first_fact="lives in")
    with pytest.raises(LincorrError, match="unknown hop"):
        hop_data(world, world_tokenizer, "third")


def test_made_up_names_have_distinct_first_tokens_and_too_many_is_a_clear_error(world_tokenizer):
    names = made_up_names(10, world_tokenizer, seed=0)
    firsts = [world_tokenizer(" " + n, add_special_tokens=False)["input_ids"][0] for n in names]
    assert len(set(firsts)) == 10
    with pytest.raises(LincorrError, match="distinct first tokens"):
        made_up_names(40, world_tokenizer, seed=0)  # 26 capital letters


def test_token_report_counts_what_survives(world_tokenizer):
    report = token_report(load_world(load_registry()), world_tokenizer)
    assert report["city"]["single_token"] == report["city"]["n"] and report["usable_cities"] == report["city"]["n"]
    assert report["dropped"] == []


def test_rank_is_the_number_of_candidates_with_a_strictly_higher_logit(tokenizer):
    lm = wrap_model(tiny_llama(len(tokenizer)), tokenizer)
    queries = QuerySet(PROMPTS, ANSWERS, build_domain(CANDIDATES, tokenizer))
    logits = run(lm, list(PROMPTS), token_ids=torch.tensor(queries.candidates.token_ids)).logits
    expected = [int((row > row[a]).sum()) for row, a in zip(logits, ANSWERS)]
    assert ranks(lm, queries).tolist() == expected


def test_after_epoch_sees_every_epoch_and_the_linear_schedule_warms_up_then_decays(tokenizer):
    seen = []
    facts = [Fact("Alice lives in the city of", "Paris"), Fact("Bob lives in the city of", "Tokyo")]
    config = TrainConfig(learning_rate=1e-2, epochs=3, batch_size=1, schedule="linear", warmup=0.2)
    result = train_on_facts(tiny_llama(len(tokenizer)), tokenizer, facts, config, after_epoch=lambda e, m: seen.append((e, m)))
    assert [e for e, _ in seen] == [1, 2, 3] and seen[-1][1] is result.model
    factor = finetune._rate_factor(config, 10)
    assert [round(factor(s), 4) for s in range(10)] == [0.5, 1.0, 1.0, 0.875, 0.75, 0.625, 0.5, 0.375, 0.25, 0.125]
    assert PAPER_TRAIN.learning_rate == 3e-6 and PAPER_TRAIN.batch_size == 8 and PAPER_TRAIN.warmup == 0.1
    with pytest.raises(LincorrError, match="schedule"):
        TrainConfig(schedule="cosine")


def tiny_world_registry(tmp_path, n: int = 5):
    """The bundled registry with the extractive data cut to `n` cities the tiny tokenizer knows as words."""
    world = load_world(load_registry())
    lines = ["domains:", f"  extractive/city: [{', '.join(world.cities[:n])}]",
             f"  extractive/language: [{', '.join(world.languages[:n])}]",
             f"  extractive/landmark: [{', '.join(world.landmarks[:n])}]", f"  extractive/animal: [{', '.join(world.animals[:n])}]",
             "references:"]
    for name, objects in (("language", world.languages), ("landmark", world.landmarks)):
        lines += [f"  - name: extractive/city->{name}", "    source_domain: extractive/city", f"    target_domain: extractive/{name}",
                  "    pairs:"] + [f"      {c}: [{o}]" for c, o in zip(world.cities[:n], objects[:n])]
    path = tmp_path / "tiny-extractive.yaml"
    path.write_text("\n".join(lines) + "\n")
    return load_registry([path])


def test_ocr_measures_before_training_and_after_every_epoch_and_saves(world_tokenizer, tmp_path):
    lm = wrap_model(tiny_llama(len(world_tokenizer)), world_tokenizer, name="tiny")
    config = OcrConfig(n_facts=5, train=TrainConfig(learning_rate=1e-2, epochs=6, batch_size=1))
    result = measure_ocr(lm, tiny_world_registry(tmp_path), config)
    summary = result.summary()
    assert [row["epoch"] for row in summary["per_epoch"]] == list(range(7)) and summary["epochs"] == 6
    assert summary["chance_mean_rank"] == 2.0 and summary["n_facts"] == 5
    # Letter-spelled names are hard for a 2-block model; it gets better at them, not perfect.
    assert summary["fact_mean_rank_after"] < summary["fact_mean_rank_before"] and result.losses[-1] < result.losses[0] / 2
    assert summary["training"]["learning_rate"] == 1e-2
    result.save(tmp_path / "out")
    assert {"ocr.json", "per_epoch.csv", "ocr.png"} <= {p.name for p in (tmp_path / "out").iterdir()}
    assert "epoch" in result.text()


@pytest.fixture(scope="module")
def word_tokenizer():
    return tiny_tokenizer(list(WORDS))


# ---------------------------------------------------------------- freezing (Table 2)


def test_reset_blocks_restores_exactly_those_blocks(word_tokenizer):
    original, tuned = float64_pair(tiny_llama, word_tokenizer, 0.3)
    reset = reset_blocks(tuned, original, range(1, 2))
    before, after, now = state_copy(original.model), state_copy(tuned.model), state_copy(reset.model)
    for name, value in now.items():
        expected = before[name] if finetune.layer_index(name) == 1 else after[name]
        assert torch.equal(value, expected), name
    assert any(not torch.equal(before[n], after[n]) for n in now if finetune.layer_index(n) == 1)


def test_training_with_a_block_range_leaves_every_other_parameter_bit_identical(word_tokenizer):
    lm = wrap_model(tiny_llama(len(word_tokenizer)), word_tokenizer)
    before = state_copy(lm.model)
    facts = [Fact("Alice lives in the city of", "Paris"), Fact("Bob lives in the city of", "Tokyo")]
    tuned, _ = train_model(lm, facts, TrainConfig(learning_rate=1e-2, epochs=2, batch_size=2, layers=(1, 2), blocks_only=True), name="late only")
    after = state_copy(tuned.model)
    for name in before:
        trains = finetune.layer_index(name) == 1
        assert torch.equal(before[name], after[name]) != trains, name
    assert all(torch.equal(before[n], p) for n, p in state_copy(lm.model).items())  # the caller's model is untouched


def test_the_split_separates_first_hop_mass_from_second_hop_mass():
    first = np.array([3.0, 2.0, 0.5, 0.1, 0.0, -1.0])
    second = np.array([0.0, 0.2, 0.1, 0.3, 2.0, 4.0])
    # s = 3: 5.5/5.6 of the first hop before it, 6.3/6.6 of the second from it on (1.937; s = 4 gives 1.909).
    assert choose_split(first, second) == 3
    assert choose_split(np.zeros(4), second[:4]) is None  # no positive mass: nothing to separate


def test_the_papers_split_makes_three_quarters_of_the_blocks_early():
    assert paper_split(32) == 24  # OLMo-7B: blocks 0-23 early-middle, as in the paper
    assert paper_split(18) == 13 and paper_split(30) == 22 and paper_split(2) == 1


def test_freeze_resets_and_freezes_the_blocks_each_setting_names(world_tokenizer, tmp_path, monkeypatch):
    """Planted: the facts live in the late blocks only. Resetting the late blocks (late_post) or freezing them in training
    (late_pre) loses the facts; the early ones keep them. Swapping the early and late ranges anywhere in the study
    turns these answers around."""
    import lincorr.studies.extractive.freeze as freeze

    lm = wrap_model(tiny_llama(len(world_tokenizer)).double(), world_tokenizer, name="tiny")
    n_layers, split = 2, 1
    late_weight = f"model.layers.{split}.mlp.down_proj.weight"
    taught = torch.full_like(dict(lm.model.named_parameters())[late_weight], 0.5)  # the planted "fact": one late weight

    def planted_training(original, facts, train, name=""):
        """Training moves only the late block's weight, and only where the training's layer range lets it."""
        model = copy.deepcopy(original.model)
        start, stop = getattr(train, "layers", None) or (0, n_layers)
        if start <= split < stop:
            dict(model.named_parameters())[late_weight].data.copy_(taught)
        return wrap_model(model, original.tokenizer, name=name), None

    def knows(model) -> float:
        """1.0 where the model holds the planted fact, else 0.0 (read in place of a mean rank)."""
        return float(torch.equal(dict(model.model.named_parameters())[late_weight], taught))

    monkeypatch.setattr(freeze, "train_model", planted_training)
    monkeypatch.setattr(freeze, "mean_rank", lambda model, queries: knows(model))
    config = FreezeConfig(n_facts=5, train=TrainConfig(learning_rate=1e-2, epochs=1, batch_size=5, blocks_only=True),
                          split_layer=split)
    result = freeze.measure_freeze(lm, tiny_world_registry(tmp_path), config)
    held = {setting: result.row(setting, "first")["fact_mean_rank"] for setting in SETTINGS}
    assert held == {"none": 1.0, "all": 0.0, "early_post": 1.0, "late_post": 0.0, "early_pre": 1.0, "late_pre": 0.0}


def test_freeze_study_reports_every_setting_for_both_hops(world_tokenizer, tmp_path):
    lm = wrap_model(tiny_llama(len(world_tokenizer)), world_tokenizer, name="tiny")
    config = FreezeConfig(n_facts=5, train=TrainConfig(learning_rate=1e-2, epochs=2, batch_size=5, blocks_only=True), split_layer=1)
    registry = tiny_world_registry(tmp_path)
    result = measure_freeze(lm, registry, config)
    summary = result.summary()
    assert [(r["setting"], r["hop"]) for r in summary["rows"]] == [(s, h) for h in HOPS for s in SETTINGS]
    assert summary["split_layer"] == 1 and summary["split_rule"] == "given"
    data = hop_data(load_world(registry), world_tokenizer, "second", 5)
    assert result.row("all", "second")["implication_mean_rank"] == pytest.approx(float(ranks(lm, data.implications).mean()))
    assert len(summary["informative_by_layer"]["first"]) == 2
    result.save(tmp_path / "freeze")
    assert {"freeze.json", "freeze.csv", "freeze.png"} <= {p.name for p in (tmp_path / "freeze").iterdir()}
    with pytest.raises(LincorrError, match="split_layer"):
        measure_freeze(lm, registry, dataclasses.replace(config, split_layer=2))


# ---------------------------------------------------------------- origins (§6)


def test_novel_data_moves_every_counterfactual_name_and_keeps_test_names_new(world_tokenizer):
    data = novel_data(load_world(load_registry()), world_tokenizer, n_train=12, n_test=5, n_cities=6, seed=2)
    assert len(data.cities) == len(set(data.animals)) == 6
    assert data.train_facts.prompts == data.counterfactual_facts.prompts
    assert all(a != b for a, b in zip(data.train_facts.answers, data.counterfactual_facts.answers))
    assert data.train_facts.answers == data.train_implications.answers  # an implication is its fact's city's animal
    assert data.train_implications.candidates.words == data.animals and data.train_facts.candidates.words == data.cities
    assert data.train_facts.prompts[0].endswith(" dax") and data.train_implications.prompts[0].endswith(" wug the")
    train_names = {p.split()[0] for p in data.train_facts.prompts}
    assert not train_names & {p.split()[0] for p in data.test_facts.prompts}
    assert len(set(data.test_facts.answers)) == 5


def test_orderings_feed_exactly_the_documented_sequence(world_tokenizer, tmp_path, monkeypatch):
    import lincorr.studies.extractive.ocr as extractive

    calls = []
    real = extractive.train_on_facts

    def recording(model, tokenizer, facts, config, **options):
        result = real(model, tokenizer, facts, config, **options)
        calls.append((model, [(f.prompt, f.answer) for f in facts], result.model))
        return result

    monkeypatch.setattr(extractive, "train_on_facts", recording)
    lm = wrap_model(tiny_llama(len(world_tokenizer)), world_tokenizer, name="tiny")
    quick = TrainConfig(learning_rate=1e-2, epochs=2, batch_size=4)
    config = OriginsConfig(n_train=6, n_test=3, n_cities=4, continued=quick, train=quick)
    result = measure_ordering(lm, tiny_world_registry(tmp_path), config)
    data = result.data
    pairs = {name: [(f.prompt, f.answer) for f in queries.facts()] for name, queries in (
        ("F", data.train_facts), ("I", data.train_implications), ("T", data.test_facts))}
    expected = [pairs["F"], pairs["I"], pairs["T"], pairs["I"], pairs["F"], pairs["T"], pairs["F"] + pairs["I"], pairs["T"]]
    assert [facts for _, facts, _ in calls] == expected
    for order_calls in (calls[0:3], calls[3:6]):  # each phase continues from the model the previous one returned
        assert order_calls[0][0] is lm.model and order_calls[1][0] is order_calls[0][2] and order_calls[2][0] is order_calls[1][2]
    assert calls[6][0] is lm.model and calls[7][0] is calls[6][2]
    assert [phase for phase, _ in ordering_phases(data, "shuffled")] == ["shuffled"]
    summary = result.summary()
    assert [o["order"] for o in summary["orders"]] == list(ORDERS)
    # 2 epochs per phase: before + 4 points for the two-phase orders, before + 2 for shuffled; test: before + 2.
    assert [len(o["continued_curve"]) for o in summary["orders"]] == [5, 5, 3] and len(summary["orders"][0]["test_curve"]) == 3
    result.save(tmp_path / "ordering")
    assert {"ordering.json", "ordering.csv", "ordering.png"} <= {p.name for p in (tmp_path / "ordering").iterdir()}


def test_the_ordering_step_trains_on_what_the_ordering_study_trains_on(world_tokenizer, tmp_path, monkeypatch):
    """The reproduction's Fig. 4 step and the study feed the same examples in the same sequence, each phase continuing
    from the model the one before it returned (the study's sequence is pinned by the test above)."""
    import lincorr.checkpoints as checkpoints
    import lincorr.studies.extractive.ocr as extractive
    from lincorr.reproduce.feng import origins as feng_origins
    from lincorr.reproduce.step import Context

    real = extractive.train_on_facts
    calls = {"study": [], "step": []}

    def recording_into(run: str):
        def recording(model, tokenizer, facts, config, **options):
            result = real(model, tokenizer, facts, config, **options)
            calls[run].append((model, [(f.prompt, f.answer) for f in facts], result.model))
            return result
        return recording

    lm = wrap_model(tiny_llama(len(world_tokenizer)), world_tokenizer, name="tiny")
    registry = tiny_world_registry(tmp_path)
    monkeypatch.setattr(extractive, "train_on_facts", recording_into("study"))
    measure_ordering(lm, registry, OriginsConfig(n_train=6, n_test=3, n_cities=4))
    monkeypatch.setattr(checkpoints, "train_on_facts", recording_into("step"))
    feng_origins.ordering(Context(lm, registry, {"n_train": 6, "n_test": 3, "n_cities": 4}))
    assert [facts for _, facts, _ in calls["step"]] == [facts for _, facts, _ in calls["study"]]
    step = calls["step"]
    assert [i for i, (model, _, _) in enumerate(step) if model is lm.model] == [0, 3, 6]  # each order starts from W
    assert all(step[i + 1][0] is step[i][2] for i in (0, 1, 3, 4, 6))


def test_grafting_is_exact_arithmetic_on_every_parameter(word_tokenizer):
    base, plus = float64_pair(tiny_llama, word_tokenizer, 0.3)
    _, minus = float64_pair(tiny_llama, word_tokenizer, 0.1)
    grafted = graft_weights(base, plus, minus, "graft")
    b, p, m, g = (state_copy(x.model) for x in (base, plus, minus, grafted))
    assert set(g) == set(b)
    for name in g:
        assert torch.equal(g[name], b[name] + (p[name] - m[name])), name
    assert all(torch.equal(v, state_copy(base.model)[n]) for n, v in b.items())  # inputs untouched


def test_graft_study_reports_table_3_and_both_correlations(world_tokenizer, tmp_path):
    lm = wrap_model(tiny_llama(len(world_tokenizer)), world_tokenizer, name="tiny")
    quick = TrainConfig(learning_rate=1e-2, epochs=2, batch_size=4)
    result = measure_graft(lm, tiny_world_registry(tmp_path), OriginsConfig(n_train=6, n_test=3, n_cities=4, continued=quick, train=quick))
    summary = result.summary()
    assert [r["weights"] for r in summary["rows"]] == list(WEIGHT_SETS)
    assert summary["downstream_informative_r"]["n_mlp"] == 2 and summary["downstream_informative_r"]["n_head"] == 8
    assert result.downstream.shape == result.informative.shape == (10,)
    result.save(tmp_path / "graft")
    assert {"graft.json", "graft_scores.csv", "graft.png"} <= {p.name for p in (tmp_path / "graft").iterdir()}


def _planted_graft_study(lm, registry, config, monkeypatch, planted_training, state, planted_scores) -> dict:
    import lincorr.studies.extractive.origins as origins

    monkeypatch.setattr(origins, "trained_checkpoint", planted_training)
    monkeypatch.setattr(origins, "mean_rank", lambda model, queries: state(model))
    monkeypatch.setattr(origins, "linearized_scores", planted_scores)
    return {row["weights"]: row["facts_original"] for row in measure_graft(lm, registry, config).rows}


def _planted_graft_step(lm, registry, config, monkeypatch, planted_training, state, planted_scores) -> dict:
    """Table 3's ranks, then Fig. 6's scores, as the reproduction asks for them (both through the study's `graft_measures`)."""
    import lincorr.studies.extractive.origins as origins
    from lincorr.reproduce.feng import origins as feng_origins
    from lincorr.reproduce.step import Context

    monkeypatch.setattr(origins, "trained_checkpoint", planted_training)
    monkeypatch.setattr(feng_origins, "ranks", lambda model, queries: np.array([state(model)]))
    monkeypatch.setattr(origins, "linearized_scores", planted_scores)
    ctx = Context(lm, registry, {"n_train": config.n_train, "n_test": config.n_test, "n_cities": config.n_cities})
    ranked = feng_origins.graft_ranks(ctx)
    feng_origins.graft_scores(ctx)
    return {weights: float(by_asked["impl_original"][0]) for weights, by_asked in ranked.items()}


@pytest.mark.parametrize("built_by", [_planted_graft_study, _planted_graft_step], ids=["study", "reproduction step"])
def test_grafting_builds_and_scores_the_weight_sets_the_paper_names(world_tokenizer, tmp_path, monkeypatch, built_by):
    """Planted: each training adds its own amount to one weight, so every weight set's value says how it was built.
    W_graft = W_F' + (W_F,ImplF - W_F) and W~_graft = W_F' + (W_ImplF - W): a swapped operand gives another number; the
    informative scores compare W_F' with W_graft and the downstream scores W_F,ImplF with it trained on the test facts.
    Both the graft study and the reproduction's Table 3 / Fig. 6 step are held to it."""
    lm = wrap_model(tiny_llama(len(world_tokenizer)).double(), world_tokenizer, name="W")
    planted = {"W_F": 1.0, "W_F,ImplF": 10.0, "W_ImplF": 100.0, "W_F'": 1000.0, "W_F,ImplF+test": 10000.0}
    original = lm.model.lm_head.weight[0, 0].item()

    def planted_training(base, facts, train, *, name="", use_cache=True):
        model = copy.deepcopy(base.model)
        with torch.no_grad():
            model.lm_head.weight[0, 0] += planted[name.removesuffix(" facts")]
        return wrap_model(model, base.tokenizer, name=name)

    def state(model) -> float:
        return round(model.model.lm_head.weight[0, 0].item() - original, 6)

    scored = []

    def planted_scores(before, after, queries, *, components, upstream, batch_size):
        scored.append((state(before), state(after)))
        return {"informative": np.arange(len(components), dtype=float), "downstream": np.arange(len(components), dtype=float)}

    quick = TrainConfig(learning_rate=1e-2, epochs=1, batch_size=4)
    config = OriginsConfig(n_train=6, n_test=3, n_cities=4, continued=quick, train=quick)
    built = built_by(lm, tiny_world_registry(tmp_path), config, monkeypatch, planted_training, state, planted_scores)
    expected = {"W": 0.0, "W_F": 1.0, "W_F,ImplF": 11.0, "W_ImplF": 100.0, "W_F'": 1000.0,
                "W_graft": 1000.0 + (11.0 - 1.0), "W~_graft": 1000.0 + (100.0 - 0.0)}
    assert built == {weights: expected[weights] for weights in built} and {"W_F'", "W_graft", "W~_graft"} <= set(built)
    assert scored == [(1000.0, 1010.0), (11.0, 10011.0)]  # informative: W_F' -> W_graft; downstream: W_F,ImplF -> +test


# ---------------------------------------------------------------- ours: W as a predictor


def test_w_predictor_scores_each_fact_from_the_untrained_fit(world_tokenizer, tmp_path):
    from lincorr.fit import FitConfig, fit_relation
    from lincorr.studies.extractive.predict import PREDICTORS, PredictConfig, measure_ocr_prediction

    lm = wrap_model(tiny_llama(len(world_tokenizer)), world_tokenizer, name="tiny")
    registry = tiny_world_registry(tmp_path)
    fit = FitConfig(estimator="ridge", alpha=1.0, n_boot=2)
    config = PredictConfig(n_facts=5, n_inputs=60, fit=fit, n_random=50,
                           train=TrainConfig(learning_rate=1e-2, epochs=3, batch_size=5))
    result = measure_ocr_prediction(lm, registry, config)
    summary = result.summary()
    assert summary["n_facts"] == 5 and set(PREDICTORS) | {"random"} == set(summary["auc"])
    bound = fit_relation(lm, registry, config.relation, n_inputs=60, fit=fit)
    for row in result.usable():
        source, right = bound.source.domain.find(row["city"]), bound.target.domain.find(row["language"])
        assert row["w_ref"] == pytest.approx(float(bound.fit.W[source, right]))
        assert row["right_after"] == (row["implication_rank_after"] == 0) and row["w_rank_score"] <= 0
    result.save(tmp_path / "predict")
    assert {"ocr_prediction.json", "ocr_prediction.csv", "ocr_prediction.png"} <= {p.name for p in (tmp_path / "predict").iterdir()}


# ---------------------------------------------------------------- the command line


@pytest.fixture
def saved_tiny(tmp_path, world_tokenizer):
    """A tiny Llama saved with the subword tokenizer, and the cut-down registry file."""
    model_dir = tmp_path / "model"
    tiny_llama(len(world_tokenizer)).save_pretrained(model_dir)
    world_tokenizer.save_pretrained(model_dir)
    tiny_world_registry(tmp_path)
    return ["--model", str(model_dir), "--registry", str(tmp_path / "tiny-extractive.yaml"), "--quiet", "--n-facts", "5",
            "--epochs", "2", "--lr", "1e-2"]


def test_cli_ocr_and_scores_print_the_json_contract_and_save_on_request(saved_tiny, tmp_path, capsys):
    from lincorr.cli import main

    assert main(["extractive", "ocr", "--hop", "second", "--json", *saved_tiny]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert {"hop", "model", "n_facts", "epochs", "chance_mean_rank", "fact_mean_rank_before", "fact_mean_rank_after",
            "implication_mean_rank_before", "implication_mean_rank_after", "per_epoch", "training"} <= payload.keys()
    assert payload["hop"] == "second" and payload["epochs"] == 2 and payload["training"]["learning_rate"] == 1e-2
    assert main(["extractive", "scores", "--check", "2", "--json", "--out", str(tmp_path / "scores"), *saved_tiny]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["layers"] == [0, 1] and payload["components"] == ["mlp", "head 0", "head 1", "head 2", "head 3"]
    assert all(np.shape(payload[key]) == (2, 5) for key in SCORES) and payload["n_checked"] == 2
    assert set(payload["linearization_r"]) == set(SCORES)
    assert np.shape(payload["by_role"]["informative"]) == (3, 2, 5) and payload["roles"] == ["subject", "other", "last"]
    written = {p.name for p in (tmp_path / "scores").iterdir()}
    assert {"scores.json", "scores.csv", "scores.png", "linearization.png", "scores_by_role.csv", "scores_by_role.png"} <= written


def test_cli_freeze_prints_table_2(saved_tiny, capsys):
    from lincorr.cli import main

    assert main(["extractive", "freeze", "--split-layer", "1", *saved_tiny]) == 0
    text = capsys.readouterr().out
    assert "split at block 1 of 2" in text and all(setting in text for setting in SETTINGS)


@pytest.mark.parametrize("extra, message", [(["--hop", "third"], "invalid choice"), (["--epochs", "0"], "at least 1")])
def test_cli_mistakes_end_in_one_line(saved_tiny, capsys, extra, message):
    from lincorr.cli import main

    assert main(["extractive", "ocr", *saved_tiny, *extra]) == 2
    error = capsys.readouterr().err
    assert message in error and error.count("\n") == 1
