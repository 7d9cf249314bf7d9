"""Feng et al.'s §6 on gemma-3-270m-q4km: data ordering (Fig. 4), at the claims' sizes and half their training.

The context (`origins`, tests/conftest.py) keeps its models in the session's checkpoint cache.
"""

from __future__ import annotations

import dataclasses

import pytest

from lincorr.reproduce.feng import origins as feng_origins

pytestmark = pytest.mark.integration


@pytest.fixture
def half_training(monkeypatch):
    """The step's two trainings (continued training, then fine-tuning on the new facts) at half their epochs and twice their
    rate: the step's own path, at half its cost."""
    for name in ("CONTINUED_TRAIN", "SMALL_TRAIN"):
        full = getattr(feng_origins, name)
        monkeypatch.setattr(feng_origins, name, dataclasses.replace(full, epochs=full.epochs // 2, learning_rate=2 * full.learning_rate))


def test_new_facts_imply_more_after_training_on_facts_mixed_with_implications_than_after_implications_first(origins, half_training):
    """Fig. 4, the direction that holds on gemma: continued training on facts and implications shuffled together, then
    fine-tuning on new facts, ranks the new facts' implications better than continued training with the implications first.

    Measured at these settings (4 epochs at 6e-5 for both trainings; 20 new names, chance 9.5), test implications shuffled
    against implications first, and the paired Wilcoxon test over the 20 names: seed 0 3.40 against 7.05 (p = 0.0064),
    seed 1 0.80 against 4.90 (p = 0.00055), seed 2 1.10 against 5.20 (p = 0.00058). At the claim's training (8 epochs at
    3e-5) seed 0 gave 1.85 against 5.45 (p = 0.0048). Facts first, the paper's other order, gives 6.45 on gemma at the
    claim's training and is not asserted. The test asks for the conventional one-sided p < 0.05, eight times the largest
    measured p, and a gap of one rank, against measured gaps of 3.65 to 4.1.
    """
    context = dataclasses.replace(origins, settings={**origins.settings, "orders": ["implications_then_facts", "shuffled"]})
    config = feng_origins.origins_config(context)
    assert (config.continued.epochs, config.train.epochs) == (4, 4), "the step does not read the halved trainings"
    measured = feng_origins.ordering(context)
    orders = measured.ours["orders"]
    assert orders["shuffled"]["test_implications"] < orders["implications_then_facts"]["test_implications"] - 1, orders
    assert measured.test.direction_holds and measured.test.p_value < 0.05, measured.test
    for order in orders.values():  # the new facts themselves were learned in both orders
        assert order["test_facts"] <= 1, orders
