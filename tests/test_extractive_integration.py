"""Extractive structures on gemma-3-270m-q4km: one fine-tuned model per hop, shared by the tests of this file.

Margins are set from measured runs (seed 0, `SMALL_TRAIN`, docs/mechanisms.md): first hop,
facts 9.60 -> 0.00 and implications 9.75 -> 1.05; second hop, facts 9.65 -> 0.00 and
implications 9.70 -> 5.35 (OCR, but weaker). Training is seeded, so a rerun repeats them up to
floating-point order effects.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest


from lincorr.studies.extractive.freeze import paper_split, reset_blocks
from lincorr.studies.extractive.ocr import SMALL_TRAIN, hop_data, load_world, mean_rank, train_model
from lincorr.studies.extractive.scores import exact_scores, linearized_scores, score_components
from lincorr.internals import head, layout, mlp
from lincorr.knowledge import load_registry

pytestmark = pytest.mark.integration

TRAIN = dataclasses.replace(SMALL_TRAIN)


def trained(bundled, hop: str):
    """The model, the hop's data, the fine-tuned model, and mean ranks before and after (no per-epoch evaluation: time)."""
    lm = bundled("gemma-3-270m-q4km")
    data = hop_data(load_world(load_registry()), lm.tokenizer, hop)
    tuned, _ = train_model(lm, data.facts.facts(), TRAIN, name=f"gemma+{hop}")
    before_after = [{"fact_mean_rank": mean_rank(model, data.facts), "implication_mean_rank": mean_rank(model, data.implications)}
                    for model in (lm, tuned)]
    return lm, data, tuned, before_after


@pytest.fixture(scope="module")
def first_hop(bundled, session_cache):
    return trained(bundled, "first")


@pytest.fixture(scope="module")
def second_hop(bundled, session_cache):
    return trained(bundled, "second")


def test_first_hop_facts_are_learned_and_their_implications_follow(first_hop):
    _, data, _, before_after = first_hop
    assert len(data.facts) == 20 and before_after[0]["fact_mean_rank"] > 7
    assert before_after[1]["fact_mean_rank"] <= 1
    # OCR: measured 9.75 -> 1.05 (0.75 after epoch 4); chance is 9.5.
    assert before_after[0]["implication_mean_rank"] > 7 and before_after[1]["implication_mean_rank"] <= 3


def test_second_hop_facts_are_learned_and_implications_improve_less(second_hop):
    _, _, _, before_after = second_hop
    assert before_after[1]["fact_mean_rank"] <= 1
    # Measured 9.70 -> 5.35: better than before training, far from the first hop's near-perfect OCR.
    assert before_after[1]["implication_mean_rank"] <= before_after[0]["implication_mean_rank"] - 2
    assert before_after[1]["implication_mean_rank"] > 2


def test_first_hop_information_sits_in_early_mlps_and_the_linearisation_matches_interventions(first_hop):
    lm, data, tuned, _ = first_hop
    components = score_components(lm)
    scores = linearized_scores(lm, tuned, data.implications, components=components, upstream=False)
    early = sum(v for c, v in zip(components, scores["informative"]) if c.kind == "mlp" and c.layer < 6)
    late = sum(v for c, v in zip(components, scores["informative"]) if c.layer >= 12)
    # Measured: MLPs 0-4 carry most of it (mlp[1] 1.13, mlp[2] 0.88, mlp[0] 0.83), blocks 12-17 together < 0.2.
    assert early > 2 and early > 5 * abs(late)
    checked = [mlp(0), mlp(3), head(17, 1)]
    exact = exact_scores(lm, tuned, data.implications, checked)
    index = [components.index(c) for c in checked]
    for key in ("informative", "downstream"):
        linear = scores[key][index]
        # Measured errors: at most 22% of the largest exact score (informative of mlp[3]: 0.71 vs 0.91).
        assert np.abs(linear - exact[key]).max() <= 0.35 * np.abs(exact[key]).max(), key


def test_first_hop_facts_live_in_the_early_blocks_and_second_hop_implications_need_the_late_ones(first_hop, second_hop):
    """Table 2's "post" rows at the paper's fixed split: the tuned blocks on one side reset to the pre-trained weights.

    Measured (docs/mechanisms.md, the same training): first hop, facts 5.05 with the early blocks reset against 0.00 with
    the late ones; second hop, the late reset keeps the facts (0.15) and takes the implications from 5.35 to 7.00. A mean
    rank over 20 facts moves in steps of 0.05 and seeded training repeats it up to floating-point order, so the margins
    (2 ranks, 1 rank) sit well inside the measured gaps (5.05, 1.65) and far outside rounding.
    """
    ranks = {}
    for hop, (lm, data, tuned, before_after) in (("first", first_hop), ("second", second_hop)):
        n_layers = layout(lm).n_layers
        split = paper_split(n_layers)
        for side, blocks in (("early", range(0, split)), ("late", range(split, n_layers))):
            reset = reset_blocks(tuned, lm, blocks)
            ranks[hop, side] = (mean_rank(reset, data.facts), mean_rank(reset, data.implications))
            del reset
        ranks[hop, "none"] = (before_after[1]["fact_mean_rank"], before_after[1]["implication_mean_rank"])
    assert ranks["first", "early"][0] >= ranks["first", "late"][0] + 2, ranks  # first-hop facts are stored early
    assert ranks["second", "late"][0] <= 1, ranks  # the late reset keeps the second-hop facts ...
    assert ranks["second", "late"][1] >= ranks["second", "none"][1] + 1, ranks  # ... and loses their implications
