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

from scipy.stats import binomtest

from lincorr.cli import main
from lincorr.collect import collect_logits, domain_scores, tokenize_prompts
from lincorr.experiments.correlation import FitConfig, fit_tables, measure_pair
from lincorr.inputs import sample_vocab_inputs
from lincorr.knowledge import load_registry
from lincorr.metrics import chance_hit_at_k, hit_at_k, invert_reference
from lincorr.models import load_model
from lincorr.prompts import registry_prompt
from lincorr.relations import RelationSpec, bind_relation

pytestmark = pytest.mark.integration

N_INPUTS = 1000
# The phenomenon: W's held-out label-wise r is large and no artefact of the fit. Large: above 0.5, a large correlation by
# Cohen's convention; no artefact: measured as the bootstrap 95% interval's lower bound minus the shuffled-pairing control.
# Measured (seed 0, 1000 inputs), interval and control: gemma ols [0.894, 0.934], -0.004; ridge [0.935, 0.955], -0.004;
# smollm2 ols [0.712, 0.789], 0.021; ridge [0.758, 0.825], 0.021. The closest, smollm2 ols, clears 0.5 by 0.19: five times its
# interval's half-width (0.039), so resampling noise cannot fail it and a W no better than its control cannot pass.
MIN_GAP_OVER_CONTROL = 0.5
# The control refits W after shuffling which input each training row belongs to: it should be a null. One target word's r
# under no relation has standard error 1/sqrt(500) = 0.045 over 500 test inputs, and the control averages over every target
# word and 5 shuffles, so a mean beyond 0.1 is not noise.
CONTROL_BOUND = 0.1
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


def assert_strong_and_real(summary: dict) -> None:
    """The label-wise r of one fit: its interval clears the control by MIN_GAP_OVER_CONTROL, and the control is a null."""
    low, high = summary["labelwise_r_ci95"]
    assert low <= summary["labelwise_r_mean"] <= high and low < high, summary
    assert low - summary["control_labelwise_r_mean"] >= MIN_GAP_OVER_CONTROL, summary
    assert abs(summary["control_labelwise_r_mean"]) < CONTROL_BOUND, summary
    assert summary["n_constant_targets"] == 0, summary  # every country's r is in the mean


@pytest.mark.parametrize("name", ["gemma-3-270m", "smollm2-135m-instruct"])
def test_city_country_correlation(models, name):
    lm = get_model(models, name)
    city, country = city_country(lm)
    inputs = sample_vocab_inputs(lm.tokenizer, N_INPUTS, seed=0)
    result = measure_pair(lm, city, country, inputs, FitConfig(seed=0), progress=False)
    summary = result.summary()
    assert summary["n_inputs"] == N_INPUTS and summary["n_train"] == summary["n_test"] == 500
    assert_strong_and_real(summary)
    assert_strong_and_real(fit_tables(result.source, result.target, FitConfig(seed=0, estimator="ridge", alpha="cv")).summary())


def above_chance_p(rate: float, n: int, chance: float) -> float:
    """One-sided binomial p-value of `rate` * `n` hits in `n` trials against the mean chance rate `chance`.

    Under a random ranking the hits are independent Bernoulli trials with per-subject chances (a subject with aliases has
    more); beyond its mean such a sum's tail is at most the binomial's with the mean chance (Hoeffding 1956), so this p
    errs on the large side.
    """
    return binomtest(round(rate * n), n, chance, alternative="greater").pvalue


def test_gemma_w_ranks_the_right_country_above_chance_over_all_pairs(models):
    """Every usable City->Country reference pair, in both directions: right answers in W's top 1 and top 3 far more often
    than a random ranking would put them there (binomial p < 0.01). Measured with ridge (seed 0, 1000 inputs): influenced
    Hit@1 127 of 247 pairs against chance 0.012 (p ~ 1e-173), influencing Hit@1 53 of 101 against 0.016 (p ~ 1e-66)."""
    lm = get_model(models, "gemma-3-270m")
    city, country = city_country(lm)
    inputs = sample_vocab_inputs(lm.tokenizer, N_INPUTS, seed=0)
    source = collect_logits(lm, city.template, city.domain, inputs, progress=False)
    target = collect_logits(lm, country.template, country.domain, inputs, progress=False)
    ridge = fit_tables(source, target, FitConfig(seed=0, estimator="ridge", alpha="cv"))
    right = bind_relation(load_registry(), RelationSpec("city", "country"), lm.tokenizer).columns
    assert len(right) >= 100  # the test means something only over many pairs; gemma keeps 247
    for scores, pairs in ((ridge.coef, right), (ridge.coef.T, invert_reference(right))):
        hits, chance = hit_at_k(scores, pairs, (1, 3)), chance_hit_at_k(scores.shape[1], pairs, (1, 3))
        for k in (1, 3):
            assert above_chance_p(hits[k], len(pairs), chance[k]) < 0.01, (k, hits, chance, len(pairs))


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
    assert payload["alpha"] > 0
    assert_strong_and_real(payload)
    coef = np.load(out / "W.npy", allow_pickle=False)
    assert coef.shape == (payload["n_source_domain"], payload["n_target_domain"])
    assert len(json.loads((out / "source_tokens.json").read_text())) == coef.shape[0]
    assert np.load(out / "target_logits.npy", allow_pickle=False).shape == (N_INPUTS, coef.shape[1])
    assert "Tokyo" in payload["top_influenced"]
