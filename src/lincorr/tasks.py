"""Relational tasks (registry `tasks:`) bound to one tokenizer: kept pairs, first tokens and the prompts the studies run.

A pair is kept when its argument and at least one answer tokenize to something, and an answer's
first token differs from the argument's (" Mexico" -> " Mexico City" cannot tell recall from
repetition); answers whose first token repeats the argument's are left out of the pair.
Three kinds of prompt, each a list of strings in pair order:

- `fewshot_prompts`: `demonstrations` solved examples, then the question (abstractive: the
  answer comes from memory). Demonstrations are other kept pairs with no answer in common,
  drawn with a generator seeded by (seed, pair index), so a pair's prompt does not depend on
  which other pairs are asked.
- `extractive_prompts`: the same, in the task's `extractive_template` (the answer stated in the
  context), demonstrations included.
- `copy_prompts`: the paper's copy context with commas ("table, mug, China, table, mug, China,
  table, mug,"), where the model repeats the argument and nothing asks for the relation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import torch

from lincorr.domains import build_domain, tokenize_word
from lincorr.errors import DataError, LincorrError
from lincorr.internals import Ablate, Patch, token_ranks
from lincorr.knowledge import TaskSpec
from lincorr.models import LM
from lincorr.relations import match_reference
from lincorr.templates import fill

__all__ = [
    "COPY_TEMPLATE", "BoundTask", "TaskPair", "TaskScores", "bind_task", "copy_prompts", "extractive_prompts",
    "fewshot_prompts", "score_prompts", "task_survival",
]

# Merullo et al.'s demo context ("table mug free China table mug free China table mug free"): a
# repeated pattern of unrelated words around the argument, so the next token is the argument
# again. Commas, because without them gemma-3-270m-q4km often continues with a special token.
COPY_TEMPLATE = "table, mug, {}, table, mug, {}, table, mug,"


@dataclasses.dataclass(frozen=True)
class TaskPair:
    """One kept pair: the argument, its kept answers, and their first tokens (after the answer prefix)."""

    argument: str
    answers: tuple[str, ...]
    argument_id: int
    answer_ids: tuple[int, ...]  # distinct first tokens of `answers`, none equal to `argument_id`


@dataclasses.dataclass(frozen=True)
class BoundTask:
    """A task bound to one tokenizer: its kept pairs in registry order and the arguments left out, with why."""

    spec: TaskSpec
    pairs: tuple[TaskPair, ...]
    dropped: tuple[tuple[str, str], ...]  # (argument, reason)

    @property
    def name(self) -> str:
        return self.spec.name

    def select(self, indices: Sequence[int]) -> tuple[TaskPair, ...]:
        return tuple(self.pairs[i] for i in indices)

    def argument_ids(self, indices: Sequence[int]) -> torch.Tensor:
        """`[n]` first token of each pair's argument."""
        return torch.tensor([self.pairs[i].argument_id for i in indices], dtype=torch.long)

    def answer_ids(self, indices: Sequence[int]) -> torch.Tensor:
        """`[n, k]` first tokens of each pair's answers, short rows padded with their first answer (k = most answers)."""
        width = max(len(self.pairs[i].answer_ids) for i in indices)
        rows = [self.pairs[i].answer_ids + (self.pairs[i].answer_ids[0],) * (width - len(self.pairs[i].answer_ids)) for i in indices]
        return torch.tensor(rows, dtype=torch.long)

    def demonstrations(self, index: int, seed: int) -> tuple[TaskPair, ...]:
        """The solved examples shown before pair `index`: other pairs sharing no answer with it."""
        own = set(self.pairs[index].answers) | {self.pairs[index].argument}
        others = [i for i, p in enumerate(self.pairs) if i != index and not own & (set(p.answers) | {p.argument})]
        count = self.spec.demonstrations
        if len(others) < count:
            raise LincorrError(f"task '{self.name}' has {len(others)} pairs to demonstrate with, fewer than its {count} demonstrations; add pairs or lower `demonstrations`")
        rng = np.random.default_rng([seed, index])
        return tuple(self.pairs[i] for i in rng.choice(others, size=count, replace=False))


def bind_task(spec: TaskSpec, tokenizer) -> BoundTask:
    """Tokenize every argument and answer as the model sees them after the prompt (with the answer prefix).

    Arguments and answers are bound by `relations.match_reference`, as reference pairs are, onto
    domains that keep subwords and shared first tokens (a task ranks tokens over the whole
    vocabulary, so neither is ambiguous); an answer whose first token is its argument's is left out.
    """
    arguments, answers = (
        build_domain(list(dict.fromkeys(words)), tokenizer, name=f"{spec.name} {side}", answer_prefix=spec.answer_prefix,
                     keep_subwords=True, allow_empty=True, one_word_per_token=False)
        for side, words in (("arguments", [a for a, _ in spec.pairs]), ("answers", [x for _, xs in spec.pairs for x in xs]))
    )
    kept, dropped = [], []
    for argument, objects in spec.pairs:
        match = match_reference(((argument, tuple(objects)),), arguments, answers)
        if not match.entries:
            dropped.append((argument, "; ".join(dict.fromkeys(pair.reason for pair in match.unmatched))))
            continue
        row, columns = match.entries[0]
        good: dict[int, str] = {}
        for column in columns:
            if answers.token_ids[column] != arguments.token_ids[row]:
                good.setdefault(answers.token_ids[column], answers.words[column])
        if not good:
            dropped.append((argument, f"every answer starts with the argument's first token {arguments.tokens[row].strip()!r}"))
            continue
        kept.append(TaskPair(argument, tuple(a for a in objects if a in good.values()), arguments.token_ids[row], tuple(good)))
    if not kept:
        raise DataError(f"no pair of task '{spec.name}' survives this tokenizer ({len(dropped)} dropped); add pairs whose answers start differently from their arguments")
    return BoundTask(spec, tuple(kept), tuple(dropped))


def fewshot_prompts(task: BoundTask, indices: Sequence[int], seed: int = 0) -> list[str]:
    """The abstractive prompts: demonstrations, then the question about each pair's argument."""
    spec = task.spec
    return [
        "".join(spec.demonstration(d.argument, d.answers[0]) for d in task.demonstrations(i, seed)) + spec.query(task.pairs[i].argument)
        for i in indices
    ]


def extractive_prompts(task: BoundTask, indices: Sequence[int], seed: int = 0) -> list[str]:
    """The extractive controls: the same demonstrations and question, each with its answer stated in the context."""
    spec = task.spec
    return [
        "".join(f"{spec.extractive_query(d.argument, d.answers[0])}{spec.answer_prefix}{d.answers[0]}\n" for d in task.demonstrations(i, seed))
        + spec.extractive_query(task.pairs[i].argument, task.pairs[i].answers[0])
        for i in indices
    ]


def copy_prompts(task: BoundTask, indices: Sequence[int]) -> list[str]:
    """Copy contexts (`COPY_TEMPLATE`) whose next token is each pair's argument."""
    return [fill(COPY_TEMPLATE, task.pairs[i].argument) for i in indices]


@dataclasses.dataclass(frozen=True)
class TaskScores:
    """Full-vocabulary ranks (0 = top) of each prompt's argument and best answer per lens layer, `[n, n_layers]`."""

    argument_rank: np.ndarray
    answer_rank: np.ndarray

    def answer_top1(self) -> np.ndarray:
        """`[n_layers]` share of prompts whose best answer is the top token."""
        return (self.answer_rank == 0).mean(0)

    def accuracy(self) -> float:
        """Share of prompts whose model output (the last lens layer) starts with an answer."""
        return float(self.answer_top1()[-1])

    def answer_rr(self) -> np.ndarray:
        """`[n_layers]` mean reciprocal rank of the best answer (1 = top)."""
        return (1.0 / (self.answer_rank + 1)).mean(0)

    def argument_rr(self) -> np.ndarray:
        """`[n_layers]` mean reciprocal rank of the argument."""
        return (1.0 / (self.argument_rank + 1)).mean(0)


def score_prompts(lm: LM, task: BoundTask, indices: Sequence[int], prompts: Sequence[str], *, layers: Sequence[int] | None = None,
                  interventions: Sequence[Patch | Ablate] = (), batch_size: int = 16) -> TaskScores:
    """Ranks of pair `indices[i]`'s argument and answers on `prompts[i]`, from one forward per batch.

    `layers` are lens layers (resid[l]; all 0..L by default, the last one being the model's
    output); a pair's answer rank is the best over its answers' first tokens.
    """
    targets = torch.cat([task.argument_ids(indices)[:, None], task.answer_ids(indices)], 1)
    ranks = token_ranks(lm, list(prompts), targets, layers, interventions=interventions, batch_size=batch_size).cpu().numpy()
    return TaskScores(argument_rank=ranks[:, :, 0], answer_rank=ranks[:, :, 1:].min(-1))


def task_survival(spec: TaskSpec, tokenizer) -> dict:
    """How many of a task's pairs a tokenizer keeps, how many answers start with a whole word, and what was dropped."""
    bound = bind_task(spec, tokenizer)
    whole = sum(
        1 for pair in bound.pairs
        if any((word := tokenize_word(a, tokenizer, spec.answer_prefix)) is not None and word.category != "subword" for a in pair.answers)
    )
    return {"task": spec.name, "n_pairs": len(spec.pairs), "kept": len(bound.pairs), "whole_word_answers": whole,
            "dropped": [{"argument": a, "reason": r} for a, r in bound.dropped]}
