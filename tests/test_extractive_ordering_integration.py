"""Feng et al.'s §6 on gemma-3-270m-q4km: data ordering (Fig. 4), at the claims' sizes.

The context (`origins`, tests/conftest.py) keeps its models in the session's checkpoint cache.
"""

from __future__ import annotations

import dataclasses

import pytest

from lincorr.reproduce.feng import origins as feng_origins

pytestmark = pytest.mark.integration


def test_new_facts_imply_more_after_training_on_facts_mixed_with_implications_than_after_implications_first(origins):
    """Fig. 4, the direction that holds on gemma: continued training on facts and implications shuffled together, then
    fine-tuning on new facts, ranks the new facts' implications better than continued training with the implications first.

    Measured at these settings: test implications 1.85 (shuffled) against 5.45 (implications first) over 20 new names,
    chance 9.5; the paired Wilcoxon test over the 20 names gives p = 0.0048. Facts first, the paper's other order, gives
    6.45 on gemma and is not asserted. The test asks for the conventional one-sided p < 0.05, ten times the measured p,
    and a gap of one rank of the measured 3.6.
    """
    context = dataclasses.replace(origins, settings={**origins.settings, "orders": ["implications_then_facts", "shuffled"]})
    measured = feng_origins.ordering(context)
    orders = measured.ours["orders"]
    assert orders["shuffled"]["test_implications"] < orders["implications_then_facts"]["test_implications"] - 1, orders
    assert measured.test.direction_holds and measured.test.p_value < 0.05, measured.test
    for order in orders.values():  # the new facts themselves were learned in both orders
        assert order["test_facts"] <= 1, orders
