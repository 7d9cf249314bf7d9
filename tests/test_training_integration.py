"""Training studies on gemma-3-270m, kept small: a handful of facts, one seed, one gradient step."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from test_integration import get_model, isolated_cache, models, session_cache  # noqa: F401 - fixtures

from lincorr.experiments.correlation import FitConfig
from lincorr.experiments.correlation import fit_relation
from lincorr.experiments.generalization import DEFAULT_TRAIN, GeneralizationConfig, predict_edit, run_generalization
from lincorr.relations import RelationSpec
from lincorr.experiments.gradients import GradientConfig, measure_gradient_correlation
from lincorr.knowledge import load_registry

pytestmark = pytest.mark.integration

RIDGE = FitConfig(estimator="ridge", alpha="cv", n_boot=10)
N_INPUTS = 300  # the tables test_studies_integration collects for city and country


@pytest.fixture(scope="module")
def relation(models, session_cache):  # noqa: F811
    lm = get_model(models, "gemma-3-270m")
    return lm, fit_relation(lm, load_registry(), RelationSpec("city", "country"), n_inputs=N_INPUTS, fit=RIDGE, progress=False)


def test_edit_prediction_and_a_four_fact_generalization_run(relation):
    lm, bound = relation
    prediction = predict_edit(lm, bound, "Paris", "Brosji")
    assert prediction.references == ("France",) and prediction.predicted_target in bound.target.domain.words
    first_block = next(p for n, p in lm.model.named_parameters() if "layers.0." in n).detach().clone()
    config = GeneralizationConfig(n_facts=4, seeds=(0,), n_inputs=N_INPUTS, fit=RIDGE, train=dataclasses.replace(DEFAULT_TRAIN, epochs=6),
                                  progress=False)
    result = run_generalization(lm, load_registry(), bound, config)
    summary = result.summary()
    assert torch.equal(first_block, next(p for n, p in lm.model.named_parameters() if "layers.0." in n))
    assert summary["source_learned_rate"] >= 0.75 and summary["mean_source_delta"] > 0
    # Aliases (USA / America / US) make some facts right in several of the 139 columns.
    assert 0 <= summary["generalization_rate"] <= 1 and 1 / 139 <= summary["random_baseline"] <= 3 / 139


def test_one_step_gradient_correlation_beats_a_shuffled_w(relation):
    lm, _ = relation
    config = GradientConfig(n_inputs=N_INPUTS, n_step_facts=8, n_eval=40, fit=RIDGE, progress=False)
    result = measure_gradient_correlation(lm, load_registry(), RelationSpec("city", "country"), config)
    assert result.mean_abs_target_change > 0 and np.isfinite(result.gradient_r)
    assert result.gradient_r > result.control_r
