"""Shared data of the extractive-structures tests: tiny prompts with candidate answers, and float64 model pairs."""

from __future__ import annotations

import copy
import re

import torch

from lincorr.models import wrap_model

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
