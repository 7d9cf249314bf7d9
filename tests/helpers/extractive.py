"""Shared data of the extractive-structures tests: tiny prompts with candidate answers, float64 model pairs, and the §6
integration tests' reproduction context."""

from __future__ import annotations

import copy
import re

import torch

from lincorr.knowledge import load_registry
from lincorr.models import wrap_model
from lincorr.reproduce.step import Context

CANDIDATES = ("Paris", "London", "Tokyo", "Rome", "Berlin")
# Different lengths, so left padding and the right-aligned mean y* are exercised.
PROMPTS = ("Alice lives in the city of", "Bob capital is", "X Y Z lives in the country of")
ANSWERS = (0, 2, 4)


def float64_pair(builder, tokenizer, scale: float, keep: tuple[str, ...] = ()):
    """An original tiny model and a "fine-tuned" copy whose block weights (but those matching `keep`) moved by `scale` times their spread."""
    original = builder(len(tokenizer)).double()
    tuned = copy.deepcopy(original)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in tuned.named_parameters():
            if (".h." in name or "layers." in name) and not any(re.search(k, name) for k in keep):
                p.add_(scale * torch.randn(p.shape, generator=generator, dtype=p.dtype) * (p.std() if p.numel() > 1 else 1))
    return wrap_model(original, tokenizer, "original"), wrap_model(tuned, tokenizer, "tuned")


def origins_context(lm) -> Context:
    """A reproduction context for the §6 steps on `lm` at the claims' sizes (`feng/claims.yaml`: 80 training names, 20 test
    names, 20 cities).

    At 40 training names neither phenomenon is seen on gemma-3-270m-q4km (seed 0: grafting's paired tests p = 0.065; the
    ordering's gap 0.5 ranks, p = 0.21, and over seeds 1 and 2 gaps of 1.05 and 1.1 ranks, p = 0.055 and 0.26), so the
    tests train at the claims' sizes, each in a file of its own that pytest-xdist runs on a worker of its own.
    """
    return Context(lm, load_registry(), {"n_train": 80, "n_test": 20, "n_cities": 20, "seed": 0})
