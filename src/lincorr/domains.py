"""Answer domains: words -> first-token ids, with the paper's full-token filter (Appendix E)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Literal

from lincorr import recording
from lincorr.errors import InputError, LincorrError
from lincorr.reading import read_lines

Category = Literal["whole_word", "word_in_phrase", "subword"]
CATEGORIES: tuple[Category, ...] = ("whole_word", "word_in_phrase", "subword")


@dataclasses.dataclass(frozen=True)
class DomainWord:
    """How one answer word tokenizes: its first token and that token's category."""

    word: str
    token_id: int
    token: str
    category: Category


@dataclasses.dataclass(frozen=True)
class Dropped:
    """A word left out of the domain, and why."""

    word: str
    reason: str


@dataclasses.dataclass(frozen=True)
class Domain:
    """An answer domain: kept words in column order, their token ids, and what was dropped."""

    name: str
    words: tuple[str, ...]
    token_ids: tuple[int, ...]
    tokens: tuple[str, ...]
    categories: tuple[Category, ...]
    dropped: tuple[Dropped, ...]

    def __len__(self) -> int:
        return len(self.words)

    @recording.cached_property
    def lookups(self) -> tuple[dict[str, int], ...]:
        """The columns by word, by decoded token, and both ignoring case (each name's first column): `find` in one look-up
        per table, so matching a reference is linear in its pairs, not pairs x domain."""
        stripped = [token.strip() for token in self.tokens]
        tables: tuple[dict[str, int], ...] = ({}, {}, {}, {})
        for column, (word, token) in enumerate(zip(self.words, stripped)):
            for table, key in zip(tables, (word, token, word.lower(), token.lower())):
                table.setdefault(key, column)
        return tables

    def find(self, word: str) -> int | None:
        """Column of `word` (matched on the word, then its decoded token, then case-blind), or None."""
        for table, key in zip(self.lookups, (word, word, word.lower(), word.lower())):
            if key in table:
                return table[key]
        return None

    @recording.cached_property
    def dropped_reasons(self) -> dict[str, str]:
        """Why each dropped word (lower-cased) was left out of the domain: the first reason given for it."""
        reasons: dict[str, str] = {}
        for dropped in self.dropped:
            reasons.setdefault(dropped.word.lower(), dropped.reason)
        return reasons

    def index(self, word: str) -> int:
        """Column of `word`; a clear error when it is not in the domain."""
        column = self.find(word)
        if column is None:
            raise LincorrError(
                f"'{word}' is not in the {self.name} domain; pick one of its words, e.g. {', '.join(self.words[:5])}"
            )
        return column

    def category_counts(self) -> dict[str, int]:
        """How many kept words fall in each token category."""
        return {c: sum(1 for k in self.categories if k == c) for c in CATEGORIES}

    def to_json(self) -> dict:
        """A JSON-ready description: kept words with tokens, and dropped words with reasons."""
        return {
            "name": self.name,
            "size": len(self),
            "words": list(self.words),
            "token_ids": list(self.token_ids),
            "tokens": list(self.tokens),
            "categories": list(self.categories),
            "category_counts": self.category_counts(),
            "dropped": [dataclasses.asdict(d) for d in self.dropped],
        }


def classify_first_token(word: str, first_token: str) -> Category:
    """Whole word, first word of a phrase ("North" of "North America"), or a subword fragment."""
    piece = first_token.strip()
    if piece == word.strip():
        return "whole_word"
    # Hyphens join words too: "Coca" of "Coca-Cola" stands for the brand, like "North" of "North America".
    words = re.split(r"[\s\-]+", word.strip())
    if len(words) > 1 and piece == words[0]:
        return "word_in_phrase"
    return "subword"


def tokenize_word(word: str, tokenizer, answer_prefix: str = " ") -> DomainWord | None:
    """First token of `answer_prefix + word` as the model would see it after the prompt."""
    return tokenize_words([word], tokenizer, answer_prefix)[0]


def tokenize_words(words: Sequence[str], tokenizer, answer_prefix: str = " ") -> list[DomainWord | None]:
    """`tokenize_word` of each word, tokenized in one call and each first token decoded once: a tokenizer call costs far more
    than its words, and a domain may hold a large relation's every object."""
    if not words:
        return []
    decoded: dict[int, str] = {}

    def decode(token_id: int) -> str:
        if token_id not in decoded:
            decoded[token_id] = tokenizer.decode([token_id])
        return decoded[token_id]

    texts = [answer_prefix + word for word in words]
    if callable(getattr(tokenizer, "batch_encode_plus", None)):  # a transformers tokenizer: one call for the list
        encoded = tokenizer(texts, add_special_tokens=False)["input_ids"]
    else:  # any other tokenizer is only known to take one text
        encoded = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts]
    entries: list[DomainWord | None] = []
    for word, ids in zip(words, encoded):
        if answer_prefix and ids and not decode(ids[0]).strip():
            # SentencePiece may emit a lone "▁" before some words; the answer starts after it.
            ids = ids[1:]
        entries.append(DomainWord(word, int(ids[0]), decode(ids[0]), classify_first_token(word, decode(ids[0]))) if ids else None)
    return entries


def build_domain(
    words: Sequence[str],
    tokenizer,
    *,
    name: str = "domain",
    answer_prefix: str = " ",
    keep_subwords: bool = False,
    allow_empty: bool = False,
    one_word_per_token: bool = True,
) -> Domain:
    """Map `words` to first-token ids, dropping fragments and merging words that share a token.

    The paper keeps only first tokens that are whole words (or the first word of a phrase):
    "Brunei" -> ["Br", "unei"] is dropped because "Br" carries no meaning of its own.
    `keep_subwords=True` keeps them, for the subword analysis; `allow_empty=True` returns an
    empty domain (for reports) instead of raising; `one_word_per_token=False` keeps words that share
    a first token (for tasks, which rank tokens over the whole vocabulary and need no columns).
    """
    kept: list[DomainWord] = []
    dropped: list[Dropped] = []
    seen: dict[int, str] = {}
    stripped = [word for word in (raw.strip() for raw in words) if word]
    for word, entry in zip(stripped, tokenize_words(stripped, tokenizer, answer_prefix)):
        if entry is None:
            dropped.append(Dropped(word, "tokenizes to nothing"))
            continue
        if entry.category == "subword" and not keep_subwords:
            dropped.append(
                Dropped(word, f"first token {entry.token.strip()!r} is a fragment of the word")
            )
            continue
        if entry.token_id in seen and one_word_per_token:
            dropped.append(
                Dropped(word, f"shares first token {entry.token.strip()!r} with '{seen[entry.token_id]}'")
            )
            continue
        seen.setdefault(entry.token_id, word)
        kept.append(entry)
    if not kept and not allow_empty:
        raise LincorrError(
            f"domain '{name}' has no usable word for this tokenizer ({len(dropped)} dropped); "
            "add whole-word answers (one per line) or pass keep_subwords=True"
        )
    return Domain(
        name=name,
        words=tuple(k.word for k in kept),
        token_ids=tuple(k.token_id for k in kept),
        tokens=tuple(k.token for k in kept),
        categories=tuple(k.category for k in kept),
        dropped=tuple(dropped),
    )


def read_word_file(path) -> list[str]:
    """One word or phrase per line; blank lines and lines starting with '#' are skipped."""
    words = [line for line in read_lines(path, "word file") if not line.startswith("#")]
    if not words:
        raise InputError(f"word file {path} has no words; put one answer per line")
    return words
