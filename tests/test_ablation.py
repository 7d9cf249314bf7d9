"""The vocabulary ablation on a planted vocabulary: the composition generalizes only when the words carry it."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from lincorr.errors import LincorrError
from lincorr.prompts import custom_prompt
from lincorr.relations import relate
from lincorr.studies.training.ablation import (
    AblationConfig,
    AblationResult,
    Vocabulary,
    pca_vocabularies,
    pooled_embeddings,
    measure_ablation,
    vocabulary_from_model,
)
from lincorr.studies.training.ablation_tables import AblationTable, WidthSweep
from lincorr.studies.training.token_pairs import resolve_pairs
from lincorr.metrics import chance_top1
from lincorr.names import pseudo_names
from helpers.precision import float32_atol
from helpers.tiny import tiny_gpt2, tiny_llama, tiny_subword_tokenizer

CITIES = ("Paris", "Tokyo", "Berlin", "Rome", "Madrid", "Cairo", "Lima", "Oslo", "Dublin", "Vienna", "Athens", "Prague")
COUNTRIES = ("France", "Japan", "Germany", "Italy", "Spain", "Egypt", "Peru", "Norway", "Ireland", "Austria", "Greece", "Czechia")
TEMPLATES = {"source_template": "{} lives in the city of", "target_template": "{} lives in the country of"}
# Small enough to run in about a second, large enough for the stage-2 names to be learned.
SMALL = AblationConfig(
    n_stage1=192, n_stage2=48, stage1_epochs=30, stage2_epochs=30, batch_size=16, learning_rate=1e-2
)


pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_subword_tokenizer("lives in the city country of".split() + list(CITIES) + list(COUNTRIES))


def planted_vocabulary(tokenizer, planted: bool) -> Vocabulary:
    """Random embeddings `[vocab, 32]`; if `planted`, each country is its city plus one shared offset (and noise)."""
    generator = torch.Generator().manual_seed(0)
    embeddings = torch.randn(len(tokenizer), 32, generator=generator)
    offset = torch.randn(32, generator=generator)
    if planted:
        for city, country in zip(CITIES, COUNTRIES):
            city_id, country_id = tokenizer.convert_tokens_to_ids([city, country])
            embeddings[country_id] = embeddings[city_id] + offset + 0.1 * torch.randn(32, generator=generator)
    return Vocabulary(embeddings, embeddings, intermediate_size=64, activation="silu", gated=True, name="planted")


def relation(tokenizer, pairs=tuple(zip(CITIES, COUNTRIES)), *, source_template=TEMPLATES["source_template"],
             target_template=TEMPLATES["target_template"]):
    """The pairs ((s, t) or (s, (t, alias, ...))) as a relation between two prompts whose domains are the pairs' words."""
    pairs = tuple((s, (t,) if isinstance(t, str) else tuple(t)) for s, t in pairs)
    source = custom_prompt(source_template, [s for s, _ in pairs], tokenizer, name="city")
    target = custom_prompt(target_template, [t for _, objects in pairs for t in objects], tokenizer, name="country")
    return relate(source, target, pairs)


def ablation(tokenizer, vocabulary, mapping, **kwargs) -> AblationResult:
    return measure_ablation(vocabulary, tokenizer, relation(tokenizer), mapping=mapping, config=SMALL, **kwargs)


@pytest.fixture(scope="module")
def planted_real(tokenizer) -> AblationResult:
    return ablation(tokenizer, planted_vocabulary(tokenizer, planted=True), "real")


def test_planted_composition_generalizes_with_the_real_mapping_only(tokenizer, planted_real):
    shuffled = ablation(tokenizer, planted_vocabulary(tokenizer, planted=True), "shuffled")
    for result in (planted_real, shuffled):
        assert result.source_learned_rate >= 0.95  # the edit took, so the rates mean something
        assert result.stage1_target_accuracy >= 0.9
        assert result.rate_before <= 0.25
        assert result.random_baseline == pytest.approx(1 / len(COUNTRIES))
    assert planted_real.generalization_rate >= 0.8
    assert shuffled.generalization_rate <= 0.3


def test_unplanted_vocabulary_generalizes_far_less(tokenizer, planted_real):
    # Stage 1 alone lets the block learn some of the 12-pair map; the vocabulary adds most of it.
    unplanted = ablation(tokenizer, planted_vocabulary(tokenizer, planted=False), "real")
    assert unplanted.source_learned_rate >= 0.95
    assert unplanted.generalization_rate <= planted_real.generalization_rate - 0.4


def test_result_is_reproducible_and_json_ready(tokenizer):
    vocabulary = planted_vocabulary(tokenizer, planted=True)
    config = AblationConfig(n_stage1=32, n_stage2=8, stage1_epochs=2, stage2_epochs=2)
    first = measure_ablation(vocabulary, tokenizer, relation(tokenizer), config=config, seed=3)
    second = measure_ablation(vocabulary, tokenizer, relation(tokenizer), config=config, seed=3)
    summary = json.loads(json.dumps(first.summary()))
    assert {"generalization_rate", "random_baseline", "source_learned_rate", "mapping", "seed", "settings"} <= set(summary)
    assert summary["settings"]["hidden_size"] == 64 and summary["settings"]["gated"] is True
    assert dataclass_rates(first) == dataclass_rates(second)


def test_random_baseline_counts_aliases_as_the_generalization_study_does(tokenizer):
    assert chance_top1([{1}, {2, 3}, {4, 5, 6}], 12) == pytest.approx((1 + 2 + 3) / 3 / 12)
    assert np.isnan(chance_top1([], 12))
    vocabulary = planted_vocabulary(tokenizer, planted=True)
    config = AblationConfig(n_stage1=32, n_stage2=8, stage1_epochs=1, stage2_epochs=1)
    # Every city accepts its own country and the next one: two right answers out of twelve.
    aliased = [(city, (country, COUNTRIES[(i + 1) % len(COUNTRIES)])) for i, (city, country) in enumerate(zip(CITIES, COUNTRIES))]
    real = measure_ablation(vocabulary, tokenizer, relation(tokenizer, aliased), config=config)
    assert real.random_baseline == pytest.approx(2 / len(COUNTRIES))
    # Deranged, a city keeps one taught answer: one right answer out of twelve.
    shuffled = measure_ablation(vocabulary, tokenizer, relation(tokenizer, aliased), mapping="shuffled", config=config)
    assert shuffled.random_baseline == pytest.approx(1 / len(COUNTRIES))


def dataclass_rates(result: AblationResult) -> tuple[float, ...]:
    return (result.generalization_rate, result.rate_before, result.source_learned_rate, result.stage1_source_accuracy)


def test_shuffled_mapping_is_a_derangement_that_respects_aliases(tokenizer):
    pairs = [(city, (country,)) for city, country in zip(CITIES, COUNTRIES)]
    pairs[0] = ("Paris", ("France", "Spain"))  # Spain counts as an answer for Paris, so it must not be its shuffled target
    real = resolve_pairs(relation(tokenizer, pairs), tokenizer, mapping="real", rng=np.random.default_rng(0))
    ids = dict(zip(CITIES, tokenizer.convert_tokens_to_ids(list(CITIES))))
    for seed in range(20):
        shuffled = resolve_pairs(relation(tokenizer, pairs), tokenizer, mapping="shuffled", rng=np.random.default_rng(seed))
        assert [s for s, _ in shuffled.pairs] == [s for s, _ in real.pairs]
        assert sorted(a[0] for _, a in shuffled.pairs) == sorted(a[0] for _, a in real.pairs)
        assert all(new[0] not in old for (_, new), (_, old) in zip(shuffled.pairs, real.pairs))
    assert real.pairs[0] == (ids["Paris"], tuple(tokenizer.convert_tokens_to_ids(["France", "Spain"])))


def test_letters_mapping_uses_single_letter_tokens_and_drops_fragments(tokenizer):
    letters = resolve_pairs(relation(tokenizer), tokenizer, mapping="letters", rng=np.random.default_rng(0))
    decoded = [(tokenizer.decode([s]), tokenizer.decode(list(a))) for s, a in letters.pairs]
    assert decoded[:3] == [("P", "F"), ("T", "J"), ("B", "G")]
    assert len(letters.pairs) == len(CITIES)
    # "Quito" is not a word of this vocabulary: its first token "Q" is a fragment, so the pair is dropped.
    real = resolve_pairs(relation(tokenizer, [*zip(CITIES, COUNTRIES), ("Quito", "Ecuador")]), tokenizer, mapping="real",
                         rng=np.random.default_rng(0))
    assert len(real.pairs) == len(CITIES) and [pair.subject for pair in real.dropped] == ["Quito"]
    assert "fragment" in real.dropped[0].reason


def test_names_are_distinct_bags_of_tokens_and_seeded(tokenizer):
    names = pseudo_names(200, tokenizer, seed=1)
    bags = {tuple(sorted(tokenizer(n, add_special_tokens=False)["input_ids"])) for n in names}
    assert len(bags) == 200
    assert names == pseudo_names(200, tokenizer, seed=1) != pseudo_names(200, tokenizer, seed=2)


def test_pooled_embeddings_average_every_token_of_the_prompt(tokenizer):
    embeddings = torch.randn(len(tokenizer), 4)
    prompts = ["Tom lives in the city of", "Al lives in the country of"]
    pooled = pooled_embeddings(prompts, tokenizer, embeddings)
    for row, prompt in zip(pooled, prompts):
        torch.testing.assert_close(row, embeddings[tokenizer(prompt)["input_ids"]].mean(0))


@pytest.mark.parametrize("build, gated", [(tiny_llama, True), (tiny_gpt2, False)])
def test_vocabulary_from_model_reads_embeddings_head_and_mlp_shape(build, gated):
    model = build(50)
    vocabulary = vocabulary_from_model(model)
    assert vocabulary.input_embeddings.shape == vocabulary.output_embeddings.shape == (50, 32)
    torch.testing.assert_close(vocabulary.output_embeddings, model.get_output_embeddings().weight)
    assert vocabulary.gated is gated and vocabulary.intermediate_size == (64 if gated else 128)


def test_table_groups_seeds_and_prints_the_paper_beside_ours(tmp_path):
    def result(seed: int, rate: float) -> AblationResult:
        return AblationResult("city->country", "real", seed, rate, 0.0, 0.01, 1.0, 1.0, 1.0, 10, 128, 100, 1.0, {})

    table = AblationTable((result(0, 0.5), result(1, 0.7)))
    (row,) = table.rows()
    assert row["generalization_mean"] == pytest.approx(60.0) and row["generalization_std"] == pytest.approx(14.142, rel=1e-3)
    assert "| city->country | real | 60.00 ± 14.14 |" in table.text() and "97.66" in table.text()
    table.save(tmp_path / "table7")
    assert (tmp_path / "table7" / "table7.md").read_text(encoding="utf-8") == table.text()
    assert json.loads((tmp_path / "table7" / "table7.json").read_text(encoding="utf-8")) == table.rows()


def untied_vocabulary(tokenizer) -> Vocabulary:
    """Random input and output embeddings `[vocab, 32]` that differ (an untied head)."""
    generator = torch.Generator().manual_seed(1)
    inputs, outputs = (torch.randn(len(tokenizer), 32, generator=generator) for _ in range(2))
    return Vocabulary(inputs, outputs, intermediate_size=64, activation="silu", gated=True, name="untied")


def test_pca_keeps_the_requested_rank_and_the_full_width_is_the_original(tokenizer):
    vocabulary = untied_vocabulary(tokenizer)
    narrow, wide, full = pca_vocabularies(vocabulary, [4, 16, 32])
    for reduced, width in ((narrow, 4), (wide, 16)):
        for matrix, original in ((reduced.input_embeddings, vocabulary.input_embeddings),
                                 (reduced.output_embeddings, vocabulary.output_embeddings)):
            assert matrix.shape == original.shape  # same coordinates, so the block is the same size at every width
            centered = (matrix - original.mean(0)).double()
            assert torch.linalg.matrix_rank(centered, atol=1e-4).item() == width
        assert reduced.pca_width == width and reduced.name == f"untied (PCA {width})"
    # The kept share of variance grows with the width and is all of it at the full width.
    assert 0 < narrow.explained_variance < wide.explained_variance < full.explained_variance == pytest.approx(1.0)
    # Projected onto all 32 principal directions and back: two float32 products of 32 terms each.
    for projected, original in ((full.input_embeddings, vocabulary.input_embeddings), (full.output_embeddings, vocabulary.output_embeddings)):
        torch.testing.assert_close(projected, original, atol=float32_atol(original.abs().max(), 2 * 32), rtol=0)
    # The rank-4 rows are the closest rank-4 approximation: no worse than keeping 4 random directions.
    basis, _ = torch.linalg.qr(torch.randn(32, 4, generator=torch.Generator().manual_seed(2), dtype=torch.float64))
    centered = (vocabulary.input_embeddings - vocabulary.input_embeddings.mean(0)).double()
    random_error = (centered - centered @ basis @ basis.T).norm()
    assert (narrow.input_embeddings.double() - vocabulary.input_embeddings.double()).norm() < random_error
    with pytest.raises(LincorrError, match="between 1 and the model's embedding width 32"):
        pca_vocabularies(vocabulary, [8, 33])


def test_the_full_width_reproduces_the_unprojected_ablation(tokenizer, planted_real):
    (full,) = pca_vocabularies(planted_vocabulary(tokenizer, planted=True), [32])
    projected = ablation(tokenizer, full, "real")
    assert dataclass_rates(projected) == dataclass_rates(planted_real)
    assert projected.generalization_rate == planted_real.generalization_rate
    assert projected.settings["embedding_width"] == 32 and planted_real.settings["embedding_width"] == 32
    # Two components cannot hold the planted city -> country offset in 32 dimensions: the composition is lost.
    (narrow,) = pca_vocabularies(planted_vocabulary(tokenizer, planted=True), [2])
    assert ablation(tokenizer, narrow, "real").generalization_rate < planted_real.generalization_rate


def test_width_sweep_groups_widths_and_mappings(tmp_path):
    def result(width: int, mapping: str, seed: int, rate: float) -> AblationResult:
        settings = {"embedding_width": width, "explained_variance": width / 640}
        return AblationResult("city->country", mapping, seed, rate, 0.0, 0.01, 1.0, 1.0, 0.8, 10, 128, 100, 1.0, settings)

    sweep = WidthSweep(tuple(result(w, m, s, 0.1 * s + (0.5 if m == "real" else 0.0)) for w in (640, 64) for m in ("letters", "real")
                             for s in (0, 1)))
    rows = sweep.rows()
    assert [(r["embedding_width"], r["mapping"]) for r in rows] == [(64, "real"), (64, "letters"), (640, "real"), (640, "letters")]
    assert rows[0]["generalization_mean"] == pytest.approx(55.0) and rows[1]["generalization_mean"] == pytest.approx(5.0)
    lines = sweep.text().splitlines()
    assert lines[0].startswith("| width | variance kept | generalization % (real / letters) |")
    assert lines[2].startswith("| 64 | 10.0% | 55.00 ± 7.07 / 5.00 ± 7.07 | 80 / 80 |")
    sweep.save(tmp_path / "widths")
    assert json.loads((tmp_path / "widths" / "widths.json").read_text(encoding="utf-8")) == rows
    assert (tmp_path / "widths" / "widths.md").read_text(encoding="utf-8") == sweep.text()


def test_mistakes_raise_one_clear_error(tokenizer):
    vocabulary = planted_vocabulary(tokenizer, planted=True)
    with pytest.raises(LincorrError, match="mapping must be one of"):
        ablation(tokenizer, vocabulary, "reversed")
    with pytest.raises(LincorrError, match="exactly one"):
        measure_ablation(vocabulary, tokenizer, relation(tokenizer, [("Paris", "France")], source_template="lives in", target_template="{}"))
    with pytest.raises(LincorrError, match="softmax_over"):
        AblationConfig(softmax_over="some")
