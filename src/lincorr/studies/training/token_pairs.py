"""The ablation's reference pairs as token ids under a mapping: real, shuffled (a derangement) or first letters.

The words are bound to the tokenizer by `relations.match_reference`, the one rule every study
uses, so a pair the ablation cannot teach is dropped with the reason, as everywhere else.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from lincorr.domains import build_domain
from lincorr.errors import LincorrError
from lincorr.prompts import Prompt
from lincorr.relations import BoundRelation, DroppedPair, relate

__all__ = ["MAPPINGS", "TokenPairs", "letters_relation", "resolve_pairs"]

MAPPINGS = ("real", "shuffled", "letters")


@dataclasses.dataclass(frozen=True)
class TokenPairs:
    """A relation's reference pairs as the ablation sees them: token ids under a mapping (real, shuffled, letters).

    Each source token comes with its accepted target tokens (first = the one taught), once per pair given. Not a
    relation type of its own: under "letters" and "shuffled" these pairs are deliberately not the relation's reference.
    """

    pairs: tuple[tuple[int, tuple[int, ...]], ...]
    source_domain: tuple[int, ...]
    target_domain: tuple[int, ...]
    dropped: tuple[DroppedPair, ...]  # pairs with a word the tokenizer cannot teach, with why


def resolve_pairs(relation: BoundRelation, tokenizer, *, mapping: str, rng: np.random.Generator) -> TokenPairs:
    """Token ids of the relation's pairs and domains under `mapping` ("real", "shuffled" = derangement, "letters" = first letters)."""
    if mapping not in MAPPINGS:
        raise LincorrError(f"mapping must be one of {', '.join(MAPPINGS)}, got '{mapping}'")
    bound = letters_relation(relation, tokenizer) if mapping == "letters" else relation
    source_ids, target_ids = bound.source.domain.token_ids, bound.target.domain.token_ids
    # Under "letters" many pairs share a source letter (Seattle, Sydney -> S): all of them stay.
    resolved = [(source_ids[row], tuple(target_ids[c] for c in columns)) for row, columns in bound.match.entries]
    if len(resolved) < 2:
        raise LincorrError(f"only {len(resolved)} reference pairs have whole-word tokens; the ablation needs at least 2")
    if mapping == "shuffled":
        resolved = _derange(resolved, rng)
    return TokenPairs(tuple(resolved), source_ids, target_ids, bound.match.unmatched)


def letters_relation(relation: BoundRelation, tokenizer) -> BoundRelation:
    """The relation with every word cut to its first letter: each pair teaches its subject's letter its first object's letter.

    Each domain is the first letters of the pairs' words and of every word of the prompt's domain
    (those this tokenizer dropped included: a letter is a token of its own).
    """
    pairs = tuple((subject.strip()[0], (objects[0].strip()[0],)) for subject, objects in relation.pairs)
    source = letters_prompt(relation.source, [subject for subject, _ in pairs], tokenizer)
    target = letters_prompt(relation.target, [objects[0] for _, objects in pairs], tokenizer)
    return relate(source, target, pairs, reference=f"{relation.reference} (first letters)", label=relation.label)


def letters_prompt(prompt: Prompt, letters: list[str], tokenizer) -> Prompt:
    """The prompt answered by first letters: `letters`, then those of its domain's words, as one domain."""
    words = [*prompt.domain.words, *(dropped.word for dropped in prompt.domain.dropped)]
    domain = build_domain(list(dict.fromkeys([*letters, *(word[0] for word in words)])), tokenizer,
                          name=f"{prompt.domain.name} first letters", answer_prefix=prompt.answer_prefix)
    return dataclasses.replace(prompt, domain=domain)


def _derange(pairs: list[tuple[int, tuple[int, ...]]], rng: np.random.Generator) -> list[tuple[int, tuple[int, ...]]]:
    """Give every source the taught target of another pair, never one of its own accepted answers."""
    targets = [accepted[0] for _, accepted in pairs]
    for _ in range(1000):
        order = rng.permutation(len(pairs))
        if all(targets[j] not in pairs[i][1] for i, j in enumerate(order)):
            return [(source, (targets[j],)) for (source, _), j in zip(pairs, order)]
    # Random permutations of a heavily repeated target (many cities -> USA) rarely derange; repair by swaps.
    order = list(rng.permutation(len(pairs)))
    for _ in range(100 * len(pairs)):
        bad = [i for i, j in enumerate(order) if targets[j] in pairs[i][1]]
        if not bad:
            return [(source, (targets[j],)) for (source, _), j in zip(pairs, order)]
        i, k = bad[0], int(rng.integers(len(pairs)))
        order[i], order[k] = order[k], order[i]
    raise LincorrError("cannot shuffle these pairs so that no source keeps its target; one target covers most sources")
