"""Made-up entity names: fresh subjects that no model has facts about."""

from __future__ import annotations

import numpy as np

from lincorr.errors import LincorrError

_ONSETS = ("b", "br", "c", "d", "dr", "f", "g", "gr", "h", "j", "k", "l", "m", "n", "p", "r", "s", "st", "t", "tr", "v", "w", "z")
_VOWELS = ("a", "e", "i", "o", "u", "a", "e", "i", "ai")
_CODAS = ("", "", "", "", "n", "r", "l", "s", "m")


def pseudo_names(n: int, tokenizer, seed: int) -> list[str]:
    """`n` distinct made-up first names whose token bags differ, so mean pooling tells them apart."""
    rng = np.random.default_rng(seed)
    names: list[str] = []
    bags: set[tuple[int, ...]] = set()
    for _ in range(100 * n):
        syllables = "".join(
            rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS) for _ in range(rng.integers(2, 4))
        )
        bag = tuple(sorted(tokenizer(syllables.capitalize(), add_special_tokens=False)["input_ids"]))
        if bag not in bags:
            bags.add(bag)
            names.append(syllables.capitalize())
            if len(names) == n:
                return names
    raise LincorrError(f"could not make {n} distinct names with this tokenizer; ask for fewer")
