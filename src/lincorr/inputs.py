"""Choosing the inputs X: a seeded vocabulary sample (the paper's default) or a user file."""

from __future__ import annotations

import numpy as np

from lincorr.errors import InputError, LincorrError
from lincorr.reading import read_lines


def usable_vocab_word(text: str) -> bool:
    """A decoded token usable as X: printable, no replacement character, some letter or digit."""
    return (
        bool(text)
        and text.isprintable()
        and "\ufffd" not in text
        and any(ch.isalnum() for ch in text)
        and not (text.startswith("<") and text.endswith(">"))
    )


def sample_vocab_inputs(tokenizer, n: int, seed: int = 0) -> list[str]:
    """`n` distinct vocabulary tokens, decoded and stripped, in a seeded random order.

    Special and added tokens are skipped, and so are tokens that decode to whitespace,
    punctuation only, byte fragments or markup like "<unused12>".
    """
    if n < 1:
        raise LincorrError(f"the number of inputs must be positive, got {n}")
    excluded = set(tokenizer.all_special_ids) | set(getattr(tokenizer, "added_tokens_decoder", {}) or {})
    order = np.random.default_rng(seed).permutation(len(tokenizer))
    chosen: list[str] = []
    seen: set[str] = set()
    for token_id in order:
        if int(token_id) in excluded:
            continue
        text = tokenizer.decode([int(token_id)]).strip()
        if usable_vocab_word(text) and text not in seen:
            seen.add(text)
            chosen.append(text)
            if len(chosen) == n:
                return chosen
    raise LincorrError(f"the vocabulary has only {len(chosen)} usable tokens; ask for at most that many inputs")


def read_inputs_file(path) -> list[str]:
    """One X per line (blank lines skipped, duplicates kept once, order kept)."""
    inputs = list(dict.fromkeys(read_lines(path, "inputs file")))
    if not inputs:
        raise InputError(f"inputs file {path} is empty; put one input X per line")
    return inputs
