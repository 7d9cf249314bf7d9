"""The o-vector the authors' way, over many source prompts: Merullo et al.'s demo (Poland's vector turning China into
Beijing) repeated with each of `n_sources` solved prompts, so a claim about the o-vector is tested over sources.

Each source is a few-shot prompt the model solves; its o-vector is its FFN output `mlp[L]` at the last position, and it
replaces every FFN from block L - 1 to the last (`protocol.replaced_layers`), at every position but the special ones,
in contexts of OTHER pairs where the model does not answer by itself (`protocol.CONTEXTS`: copy and zero-shot). The
sources are the independent units, so no value serves two of them: the contexts are dealt out among the sources (each
source its own), and each source has its own controls on its own contexts: no vector, another task's o-vector (that
task's solved source of the same place, the same block) and a random vector of the source's own norm. lincorr's
averaged vector (the sources' mean, added once at `mlp[L]`, x `OVECTOR_SCALE`) is one vector, scored on every context.
Every condition of a kind of context runs in one batched pass, one value per prompt.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from lincorr.errors import LincorrError
from lincorr.internals import layout
from lincorr.knowledge import TaskSpec
from lincorr.models import LM
from lincorr.studies.vectors.ovectors import o_vectors
from lincorr.studies.vectors.protocol import (
    CONTEXTS, OVECTOR_SCALE, check_layer, context_prompts, o_interventions, pair_order,
    replaced_layers,
)
from lincorr.tasks import BoundTask, bind_task, score_prompts

__all__ = ["CONDITIONS", "SourceRuns", "source_pool", "source_runs"]

# Rows of `SourceRuns.answer_rank[kind]`, one value per context under each condition.
CONDITIONS = ("none", "with", "other_task", "random", "averaged")


@dataclasses.dataclass(frozen=True)
class SourceRuns:
    """Full-vocabulary ranks (0 = top) of the answer and of the argument on the contexts of each kind, per condition:
    `answer_rank[kind]` is `[len(CONDITIONS), n_contexts]`; context i belongs to source `context_source[i]`, and under
    "with", "other_task" and "random" it is given that source's vector, its other-task vector and its random one."""

    task: str
    other_task: str
    layer: int  # the block whose FFN output is the o-vector
    replaced: tuple[int, ...]  # the blocks whose FFN output it replaces
    sources: tuple[str, ...]  # the source prompts' arguments
    context_arguments: tuple[str, ...]
    context_source: tuple[int, ...]  # the source each context belongs to
    answer_rank: dict[str, np.ndarray]
    argument_rank: dict[str, np.ndarray]
    norm: float  # the sources' mean o-vector norm

    def ranks(self, kind: str, condition: str, of: str = "answer") -> np.ndarray:
        """`[n_contexts]` ranks of the answer (or the argument) under `condition`."""
        return (self.answer_rank if of == "answer" else self.argument_rank)[kind][CONDITIONS.index(condition)]

    def per_source_rr(self, kind: str, condition: str) -> np.ndarray:
        """`[n_sources]` the answer's mean reciprocal rank over each source's own contexts under `condition`."""
        rr, owner = 1.0 / (self.ranks(kind, condition) + 1), np.asarray(self.context_source)
        return np.array([rr[owner == source].mean() for source in range(len(self.sources))])

    def described(self, kind: str) -> dict:
        """Per condition: the answer's mean RR, median rank and top-1 share over the contexts; the argument's top-1 share
        (the context still copying); and each source's RR under its own vector on its own contexts."""
        rows = {}
        for condition in CONDITIONS:
            ranks = self.ranks(kind, condition)
            rows[condition] = {"rr": round(float((1.0 / (ranks + 1)).mean()), 4), "median_rank": float(np.median(ranks)),
                               "top1": round(float((ranks == 0).mean()), 4),
                               "repeats": round(float((self.ranks(kind, condition, "argument") == 0).mean()), 4)}
        return {**rows, "per_source_rr": dict(zip(self.sources, np.round(self.per_source_rr(kind, "with"), 4).tolist()))}


def source_pool(task: BoundTask, n_sources: int, seed: int, first: str | None = None) -> tuple[list[int], list[int]]:
    """(source pool, the rest) of the seeded pair order, the pool twice `n_sources` long (not every prompt is solved),
    `first`'s pair at its head when the task keeps it (the authors' example: Poland)."""
    order = pair_order(task, seed)
    arguments = [pair.argument for pair in task.pairs]
    if first in arguments:
        order.remove(arguments.index(first))
        order.insert(0, arguments.index(first))
    return order[:2 * n_sources], order[2 * n_sources:]


def solved_vectors(lm: LM, task: BoundTask, pool: Sequence[int], layer: int, n_sources: int, seed: int, batch_size: int):
    """(pair indices, `[n, d_model]` o-vectors) of the first `n_sources` solved prompts of `pool` (at least two, the
    least a test over sources can rest on; one for a control)."""
    vectors = o_vectors(lm, task, pool, seed=seed, batch_size=batch_size)
    rows = np.flatnonzero(vectors.solved)[:n_sources]
    if len(rows) < min(n_sources, 2):
        raise LincorrError(f"the model solves {len(rows)} of {len(pool)} '{task.name}' prompts; the o-vector's test needs at least two sources")
    return [vectors.indices[row] for row in rows], vectors.outputs[rows, layer]


def source_runs(lm: LM, task: TaskSpec, layer: int, control: TaskSpec, *, n_sources: int = 8, n_contexts: int = 64,
                contexts: Sequence[str] = CONTEXTS, first: str | None = None, seed: int = 0, batch_size: int = 32) -> SourceRuns:
    """Each source's o-vector from `mlp[layer]` and its controls on its own share of `n_contexts` contexts of each kind,
    and the averaged vector on all of them (see the module)."""
    check_layer(lm, layer, "o-vector layer")
    bound, control_bound = bind_task(task, lm.tokenizer), bind_task(control, lm.tokenizer)
    pool, rest = source_pool(bound, n_sources, seed, first)
    evaluation = rest[:n_contexts]
    sources, vectors = solved_vectors(lm, bound, pool, layer, n_sources, seed, batch_size)
    if len(evaluation) < 2 * len(sources):
        raise LincorrError(f"task '{task.name}' keeps {len(bound.pairs)} pairs, too few for {2 * n_sources} source prompts and two "
                           "contexts a source; lower n_sources")
    _, others = solved_vectors(lm, control_bound, source_pool(control_bound, n_sources, seed)[0], layer, n_sources, seed, batch_size)
    owner = np.arange(len(evaluation)) % len(sources)  # dealt out in turn: each source its own contexts
    norms = np.linalg.norm(vectors, axis=1)
    random = np.random.default_rng(seed).standard_normal(vectors.shape).astype(np.float32)
    random *= (norms / np.linalg.norm(random, axis=1))[:, None]
    given = {"with": vectors[owner], "other_task": others[owner % len(others)], "random": random[owner]}
    n_layers = layout(lm).n_layers
    prompts = context_prompts(bound, evaluation, contexts)
    answer, argument = {}, {}
    for kind, kind_prompts in prompts.items():
        def scored(interventions):
            return score_prompts(lm, bound, list(evaluation), list(kind_prompts), layers=[n_layers], interventions=interventions,
                                 batch_size=batch_size)

        runs = [scored([]), *(scored(o_interventions("paper", layer, n_layers, given[condition], 1.0)) for condition in CONDITIONS[1:4]),
                scored(o_interventions("averaged", layer, n_layers, vectors.mean(0), OVECTOR_SCALE))]
        answer[kind], argument[kind] = (np.stack([getattr(run, field)[:, -1] for run in runs]) for field in ("answer_rank", "argument_rank"))
    return SourceRuns(task.name, control.name, layer, tuple(replaced_layers(n_layers, layer)), tuple(bound.pairs[i].argument for i in sources),
                      tuple(bound.pairs[i].argument for i in evaluation), tuple(int(source) for source in owner), answer, argument,
                      float(norms.mean()))
