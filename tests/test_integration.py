"""The real bundled models, offline: the paper's City->Country numbers with honest tolerances.

Converted weights are kept in the user's cache (converting gemma takes about a minute, once);
logit tables go to a fresh directory per test session, so collection always runs.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from lincorr.cli import main
from lincorr.collect import collect_logits, domain_scores, tokenize_prompts
from lincorr.experiments.correlation import FitConfig, fit_tables, measure_pair
from lincorr.inputs import sample_vocab_inputs
from lincorr.knowledge import load_registry
from lincorr.models import load_model
from lincorr.prompts import registry_prompt

pytestmark = pytest.mark.integration

N_INPUTS = 1000
PERSISTENT_MODELS = Path(os.environ.get("LINCORR_CACHE_DIR", Path.home() / ".cache" / "lincorr")) / "models"


@pytest.fixture(scope="session")
def session_cache(tmp_path_factory):
    """A cache whose models/ is the persistent one and whose logits/ is new for this session."""
    root = tmp_path_factory.mktemp("lincorr-cache")
    PERSISTENT_MODELS.mkdir(parents=True, exist_ok=True)
    (root / "models").symlink_to(PERSISTENT_MODELS, target_is_directory=True)
    return root


@pytest.fixture(autouse=True)
def isolated_cache(session_cache, monkeypatch):
    """Overrides the unit tests' per-test cache: integration tests share the session cache."""
    monkeypatch.setenv("LINCORR_CACHE_DIR", str(session_cache))


@pytest.fixture(scope="session")
def models():
    """Models loaded once per session, by name."""
    return {}


def get_model(models, name):
    if name not in models:
        models[name] = load_model(name)
    return models[name]


def city_country(lm):
    registry = load_registry()
    return registry_prompt(registry, "city", lm.tokenizer), registry_prompt(registry, "country", lm.tokenizer)


@pytest.mark.parametrize("name, floor", [("gemma-3-270m", 0.85), ("smollm2-135m-instruct", 0.75)])
def test_city_country_correlation(models, name, floor):
    lm = get_model(models, name)
    city, country = city_country(lm)
    inputs = sample_vocab_inputs(lm.tokenizer, N_INPUTS, seed=0)
    result = measure_pair(lm, city, country, inputs, FitConfig(seed=0), progress=False)
    summary = result.summary()
    assert summary["n_inputs"] == N_INPUTS and summary["n_train"] == summary["n_test"] == 500
    assert summary["labelwise_r_mean"] >= floor, summary
    assert abs(summary["control_labelwise_r_mean"]) < 0.1, summary
    low, high = summary["labelwise_r_ci95"]
    assert low <= summary["labelwise_r_mean"] <= high and high - low < 0.1
    ridge = fit_tables(result.source, result.target, FitConfig(seed=0, estimator="ridge", alpha="cv"))
    assert ridge.summary()["labelwise_r_mean"] >= floor
    assert abs(ridge.summary()["control_labelwise_r_mean"]) < 0.1


def test_gemma_w_links_capitals_to_their_countries(models):
    """With ridge, the row of a famous capital puts its country in the top 3 (3 of these 4 at least)."""
    lm = get_model(models, "gemma-3-270m")
    city, country = city_country(lm)
    inputs = sample_vocab_inputs(lm.tokenizer, N_INPUTS, seed=0)
    source = collect_logits(lm, city.template, city.domain, inputs, progress=False)
    target = collect_logits(lm, country.template, country.domain, inputs, progress=False)
    ridge = fit_tables(source, target, FitConfig(seed=0, estimator="ridge", alpha="cv"))
    pairs = {"Paris": "France", "Tokyo": "Japan", "Moscow": "Russia", "Madrid": "Spain"}
    hits = sum(answer in [w for w, _ in ridge.top_influenced(capital, 3)] for capital, answer in pairs.items())
    assert hits >= 3, {c: ridge.top_influenced(c, 3) for c in pairs}


@pytest.mark.parametrize("name", ["gemma-3-270m", "smollm2-135m-instruct"])
def test_real_model_batched_equals_single_and_model_logits(models, name):
    lm = get_model(models, name)
    city, _ = city_country(lm)
    inputs = ["Alice", "the old lighthouse keeper", "Zürich", "42"]
    rows = tokenize_prompts(lm.tokenizer, [city.template.replace("{}", x) for x in inputs])
    ids = torch.tensor(city.domain.token_ids)
    batched = domain_scores(lm, rows, ids, logprobs=False)
    for i, row in enumerate(rows):
        with torch.no_grad():
            full = lm.model(input_ids=torch.tensor([row])).logits[0, -1, ids]
        torch.testing.assert_close(batched[i], full, atol=1e-3, rtol=1e-4)


def test_cli_fit_json_and_save_dir(models, tmp_path, capsys):
    get_model(models, "gemma-3-270m")  # converted weights in place
    out = tmp_path / "run"
    code = main(["fit", "city", "country", "--model", "gemma-3-270m", "-n", str(N_INPUTS), "--seed", "0", "--estimator", "ridge",
                 "--alpha", "cv", "--json", "--quiet", "--save-dir", str(out), "--top", "Tokyo"])
    assert code == 0
    payload = json.loads(capsys.readouterr().out)
    for key in ("model", "source", "target", "n_inputs", "n_source_domain", "n_target_domain", "estimator", "alpha",
                "labelwise_r_mean", "labelwise_r_std", "labelwise_r_ci95", "instancewise_r_mean", "control_labelwise_r_mean", "seconds"):
        assert key in payload
    assert payload["labelwise_r_mean"] >= 0.85 and payload["alpha"] > 0
    coef = np.load(out / "W.npy", allow_pickle=False)
    assert coef.shape == (payload["n_source_domain"], payload["n_target_domain"])
    assert len(json.loads((out / "source_tokens.json").read_text())) == coef.shape[0]
    assert np.load(out / "target_logits.npy", allow_pickle=False).shape == (N_INPUTS, coef.shape[1])
    assert "Tokyo" in payload["top_influenced"]
