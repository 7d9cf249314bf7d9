"""The registry of steps: a claim names its step here, and the step's module is what its code digest covers."""

from __future__ import annotations

from lincorr.reproduce import feng_steps, merullo_steps, peng_appendix, peng_logits, peng_lre, peng_resilience, peng_training

STEPS = {**peng_logits.STEPS, **peng_appendix.STEPS, **peng_lre.STEPS, **peng_resilience.STEPS, **peng_training.STEPS, **merullo_steps.STEPS, **feng_steps.STEPS}


def step_module(name: str) -> str:
    """The module defining step `name` ("lincorr.reproduce.peng_logits"): a change to it, or to what it imports, makes the claim stale."""
    return STEPS[name].__module__
