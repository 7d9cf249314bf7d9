"""The real bundled models, offline: the paper's City->Country numbers with honest tolerances.

The bundled models are converted once per test run into the session's cache (conftest); logit tables
are collected fresh in every run.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from helpers.bundled import CONTROL_BOUND, MIN_GAP_OVER_CONTROL, above_chance_p

from lincorr.cli import main
from lincorr.collection import collect
from lincorr.collection.forward import domain_scores
from lincorr.models import tokenize_prompts
from lincorr.fit import FitConfig, fit_tables, measure_pair
from lincorr.inputs import sample_vocab_inputs
from lincorr.knowledge import load_registry
from lincorr.metrics import chance_hit_at_k, hit_at_k, invert_reference
from lincorr.prompts import registry_prompt
from lincorr.relations import RelationSpec, bind_relation

pytestmark = pytest.mark.integration

N_INPUTS = 1000


def city_country(lm):
    registry = load_registry()
    return registry_prompt(registry, "city", lm.tokenizer), registry_prompt(registry, "country", lm.tokenizer)


def assert_strong_and_real(summary: dict) -> None:
    """The label-wise r of one fit: its interval clears the control by MIN_GAP_OVER_CONTROL, and the control is a null."""
    low, high = summary["labelwise_r_ci95"]
    assert low <= summary["labelwise_r_mean"] <= high and low < high, summary
    assert low - summary["control_labelwise_r_mean"] >= MIN_GAP_OVER_CONTROL, summary
    assert abs(summary["control_labelwise_r_mean"]) < CONTROL_BOUND, summary
    assert summary["n_constant_targets"] == 0, summary  # every country's r is in the mean


@pytest.mark.parametrize("name", ["gemma-3-270m-q4km", "smollm2-135m-instruct-q41"])
def test_city_country_correlation(bundled, name):
    lm = bundled(name)
    city, country = city_country(lm)
    inputs = sample_vocab_inputs(lm.tokenizer, N_INPUTS, seed=0)
    result = measure_pair(lm, city, country, inputs, FitConfig(seed=0))
    summary = result.summary()
    assert summary["n_inputs"] == N_INPUTS and summary["n_train"] == summary["n_test"] == 500
    assert_strong_and_real(summary)
    assert_strong_and_real(fit_tables(result.source, result.target, FitConfig(seed=0, estimator="ridge", alpha="cv")).summary())


def test_gemma_w_ranks_the_right_country_above_chance_over_all_pairs(bundled):
    """Every usable City->Country reference pair, in both directions: right answers in W's top 1 and top 3 far more often
    than a random ranking would put them there (binomial p < 0.01). Measured with ridge (seed 0, 1000 inputs): influenced
    Hit@1 127 of 247 pairs against chance 0.012 (p ~ 1e-173), influencing Hit@1 53 of 101 against 0.016 (p ~ 1e-66)."""
    lm = bundled("gemma-3-270m-q4km")
    city, country = city_country(lm)
    inputs = sample_vocab_inputs(lm.tokenizer, N_INPUTS, seed=0)
    tables = collect(lm, {"city": city, "country": country}, inputs)
    source, target = tables["city"], tables["country"]
    ridge = fit_tables(source, target, FitConfig(seed=0, estimator="ridge", alpha="cv"))
    right = bind_relation(load_registry(), RelationSpec("city", "country"), lm.tokenizer).columns
    assert len(right) >= 100  # the test means something only over many pairs; gemma keeps 247
    for scores, pairs in ((ridge.W, right), (ridge.W.T, invert_reference(right))):
        hits, chance = hit_at_k(scores, pairs, (1, 3)), chance_hit_at_k(scores.shape[1], pairs, (1, 3))
        for k in (1, 3):
            assert above_chance_p(hits[k], len(pairs), chance[k]) < 0.01, (k, hits, chance, len(pairs))


@pytest.mark.parametrize("name", ["gemma-3-270m-q4km", "smollm2-135m-instruct-q41"])
def test_real_model_batched_equals_single_and_model_logits(bundled, name):
    lm = bundled(name)
    city, _ = city_country(lm)
    inputs = ["Alice", "the old lighthouse keeper", "Zürich", "42"]
    rows = tokenize_prompts(lm.tokenizer, [city.template.replace("{}", x) for x in inputs])
    ids = torch.tensor(city.domain.token_ids)
    batched = domain_scores(lm, rows, ids, logprobs=False)
    for i, row in enumerate(rows):
        with torch.no_grad():
            full = lm.model(input_ids=torch.tensor([row])).logits[0, -1, ids]
        torch.testing.assert_close(batched[i], full, atol=1e-3, rtol=1e-4)


def test_cli_fit_json_and_save_dir(bundled, tmp_path, capsys):
    bundled("gemma-3-270m-q4km")  # converted weights in place
    out = tmp_path / "run"
    code = main(["fit", "city", "country", "--model", "gemma-3-270m-q4km", "-n", str(N_INPUTS), "--seed", "0", "--estimator", "ridge",
                 "--alpha", "cv", "--json", "--quiet", "--out", str(out), "--top", "Tokyo"])
    assert code == 0
    payload = json.loads(capsys.readouterr().out)
    for key in ("model", "source", "target", "n_inputs", "n_source_domain", "n_target_domain", "estimator", "alpha",
                "labelwise_r_mean", "labelwise_r_std", "labelwise_r_ci95", "instancewise_r_mean", "control_labelwise_r_mean", "seconds"):
        assert key in payload
    assert payload["alpha"] > 0
    assert_strong_and_real(payload)
    W = np.load(out / "W.npy", allow_pickle=False)
    assert W.shape == (payload["n_source_domain"], payload["n_target_domain"])
    assert len(json.loads((out / "source_tokens.json").read_text())) == W.shape[0]
    assert np.load(out / "target_logits.npy", allow_pickle=False).shape == (N_INPUTS, W.shape[1])
    assert "Tokyo" in payload["top_influenced"]
