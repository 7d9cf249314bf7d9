"""W precision on LRE relations with a real bundled model: kept small (two factual relations, 300 inputs)."""

from __future__ import annotations

import pytest
from helpers.bundled import above_chance_p

from lincorr.collection import UNCACHED
from lincorr.fit import FitConfig
from lincorr.inputs import sample_vocab_inputs
from lincorr.knowledge.lre import lre_relations
from lincorr.studies.logits.lre import LRE_FITS, lre_precision
from lincorr.studies.logits.precision import precision_fits

pytestmark = pytest.mark.integration

N_INPUTS = 300
RELATIONS = ("country_capital_city", "city_in_country")


def test_gemma_w_ranks_lre_objects_above_chance(bundled):
    # Measured (seed 0, 1000 inputs): ols Hit@1 0.86 (country_capital_city) and 0.62 (city_in_country) against a chance of 0.05;
    # one relation above chance at p < 0.01 per fit is the phenomenon, the paper's ols included.
    lm = bundled("gemma-3-270m-q4km")
    configs = [config for config in precision_fits(FitConfig()) if config.label in LRE_FITS]
    table = lre_precision(lm, lre_relations(names=RELATIONS), sample_vocab_inputs(lm.tokenizer, N_INPUTS, seed=0), configs,
                          settings=UNCACHED)
    assert not table.skipped
    for fit in LRE_FITS:
        rows = [row for row in table.rows if row.estimator == fit]
        p_values = [above_chance_p(row.hit_influenced[1], row.n_pairs_influenced, row.chance_influenced[1]) for row in rows]
        assert min(p_values) < 0.01, (fit, p_values)
        assert all(table.relation_types[row.label] == "factual" for row in rows)
