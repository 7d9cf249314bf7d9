"""The package-level API a notebook uses."""

from __future__ import annotations

import numpy as np
from helpers.tiny import CITIES, COUNTRIES, NAMES

import lincorr


def test_every_export_resolves():
    for name in lincorr.__all__:
        assert getattr(lincorr, name) is not None


def test_notebook_flow_on_a_tiny_model(llama_lm):
    city = lincorr.prompt(llama_lm, "city")
    assert set(city.domain.words) == set(CITIES)  # the rest of the registry's cities are not in the tiny vocabulary
    country = lincorr.custom_prompt("{} lives in the country of", COUNTRIES, llama_lm.tokenizer, name="country")
    result = lincorr.measure_pair(llama_lm, city, country, NAMES[:40], lincorr.FitConfig(estimator="ridge", alpha=1.0))
    assert result.W.shape == (5, 5) and np.isfinite(result.labelwise_r).all()
    assert len(result.top_influenced("Tokyo", 2)) == 2
