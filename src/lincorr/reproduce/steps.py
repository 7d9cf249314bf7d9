"""The registry of steps: a claim names its step here, and the step's module is what its code digest covers."""

from __future__ import annotations

from lincorr.reproduce.feng import steps as feng_steps
from lincorr.reproduce.merullo import scale as merullo_scale
from lincorr.reproduce.merullo import steps as merullo_steps
from lincorr.reproduce.peng import appendix, logits, lre, resilience, scale, training

STEPS = {**logits.STEPS, **appendix.STEPS, **lre.STEPS, **resilience.STEPS, **scale.STEPS, **training.STEPS, **merullo_steps.STEPS,
         **merullo_scale.STEPS, **feng_steps.STEPS}


def step_module(name: str) -> str:
    """The module defining step `name` ("lincorr.reproduce.peng.logits"): a change to it, or to what it imports, makes the claim stale."""
    return STEPS[name].__module__
