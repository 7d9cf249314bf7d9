"""How an o-vector is applied (Merullo et al.'s protocol and lincorr's averaged variant), on which contexts, and the tests of the claims.

- `paper`: the FFN output `mlp[L]` of ONE solved few-shot prompt, at the last position, replaces
  the output of every FFN from block L - 1 to the last, at every position but the special ones
  (BOS) — the authors' demo takes GPT2-medium's `mlp_19` and replaces blocks 18-23 of 24, L being
  the block whose FFN makes the answer overtake the argument in the lens; GPT-2 has no BOS to spare.
  Scale 1 by default: the vector as the model computed it.
- `averaged` (lincorr's): the mean `mlp[L]` of several solved prompts, added once to `mlp[L]` at
  the last position, scaled (3 by default: docs/mechanisms.md, "o-vectors").

Contexts where the model does not answer by itself: `copy` (it repeats the argument, the paper's
"table mug free China" demo) and `zero-shot` (the task's question with no demonstrations).

Claims are paired over the same contexts: an exact one-sided McNemar test per control, and "over
every control" holds only if each does, so its p-value is the largest of the three (an
intersection-union test). Comparing tasks ("upper-casing is the easiest") pairs nothing, since
the tasks' contexts differ: Fisher's exact test on the counts.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from scipy.stats import binomtest, fisher_exact

from lincorr.errors import LincorrError
from lincorr.internals import Patch, layout, mlp
from lincorr.models import LM
from lincorr.tasks import BoundTask, copy_prompts

__all__ = [
    "PROTOCOLS", "CONTEXTS", "CONTROLS", "OVECTOR_SCALE", "check_choice", "check_layer", "pair_order", "more_often",
    "over_every_control", "default_scale", "replaced_layers", "o_interventions", "zero_shot_prompts", "context_prompts",
    "easier_than",
]

PROTOCOLS = ("paper", "averaged")
CONTEXTS = ("copy", "zero-shot")
CONTROLS = ("without", "other_task", "random")
# Added once at one layer, the averaged o-vector stands in for the paper's substitution at every layer from the crossing on;
# at x1 it moves the answer's rank but rarely to the top (docs/mechanisms.md: capitals on gemma-3-270m-q4km, accuracy 0.02 at
# x1 and 0.53 at x3, every control 0.00), so x3 is its default.
OVECTOR_SCALE = 3.0


def check_choice(value: str, choices: Sequence[str], what: str) -> str:
    """`value` if it is one of `choices`, else a one-line LincorrError naming them."""
    if value not in choices:
        raise LincorrError(f"{what} '{value}' is unknown; use one of {', '.join(choices)}")
    return value


def check_layer(lm: LM, layer: int, what: str) -> int:
    """`layer` as an FFN index of this model, or a one-line LincorrError."""
    n_layers = layout(lm).n_layers
    if not 0 <= layer < n_layers:
        raise LincorrError(f"{what} {layer} is outside this {n_layers}-block model; use 0..{n_layers - 1}")
    return layer


def pair_order(task: BoundTask, seed: int) -> list[int]:
    """A seeded order of the kept pairs: studies take source, reference and evaluation pairs from it in turn."""
    return [int(i) for i in np.random.default_rng(seed).permutation(len(task.pairs))]


def more_often(first: np.ndarray, second: np.ndarray) -> float:
    """One-sided exact McNemar p-value that `first` (bool per pair) holds on more pairs than `second`, over the same pairs."""
    wins, losses = int((first & ~second).sum()), int((second & ~first).sum())
    return 1.0 if wins + losses == 0 else float(binomtest(wins, wins + losses, 0.5, alternative="greater").pvalue)


def over_every_control(right: dict[str, np.ndarray]) -> dict[str, float]:
    """Paired p-values that the o-vector ("with") is right on more contexts than each control, and their maximum ("every")."""
    p = {key: more_often(right["with"], right[key]) for key in CONTROLS}
    return {**{f"p_vs_{key}": value for key, value in p.items()}, "p_over_every_control": max(p.values())}


def default_scale(protocol: str) -> float:
    """The scale a protocol uses unless told: 1 for the paper's substitution, `OVECTOR_SCALE` for the averaged addition."""
    return 1.0 if check_choice(protocol, PROTOCOLS, "o-vector protocol") == "paper" else OVECTOR_SCALE


def replaced_layers(n_layers: int, layer: int) -> range:
    """The FFNs the paper's protocol replaces with `mlp[layer]`'s vector: from one block before it to the last (the authors'
    demo: `mlp_19`'s output replacing blocks 18..23 of GPT2-medium's 24)."""
    return range(max(layer - 1, 0), n_layers)


def o_interventions(protocol: str, layer: int, n_layers: int, vector: np.ndarray | None, scale: float) -> list[Patch]:
    """The patches that apply `scale * vector` by `protocol` from `mlp[layer]`: `[d_model]` for every prompt, `[n_prompts,
    d_model]` one per prompt; None: no vector. Special positions (BOS) are never written."""
    if vector is None:
        return []
    value = torch.from_numpy(np.asarray(scale * vector, dtype=np.float32))
    if protocol == "paper":
        value = value[:, None, :] if value.dim() == 2 else value  # one row per prompt, the same at each of its positions
        return [Patch(mlp(at), value, position="content") for at in replaced_layers(n_layers, layer)]
    return [Patch(mlp(layer), value, mode="add")]


def zero_shot_prompts(task: BoundTask, indices: Sequence[int]) -> list[str]:
    """The task's question about each pair's argument, with no demonstrations."""
    return [task.spec.query(task.pairs[i].argument) for i in indices]


def context_prompts(task: BoundTask, indices: Sequence[int], contexts: Sequence[str]) -> dict[str, list[str]]:
    """The prompts of each context kind in `contexts` ("copy", "zero-shot"), one per pair of `indices`."""
    makers = {"copy": copy_prompts, "zero-shot": zero_shot_prompts}
    if not contexts:
        raise LincorrError(f"no contexts given; use one or more of {', '.join(CONTEXTS)}")
    return {kind: makers[check_choice(kind, CONTEXTS, "context")](task, indices) for kind in contexts}


def easier_than(right: int, n: int, other_right: int, other_n: int) -> float:
    """One-sided Fisher exact p-value that a task's share of right contexts (`right` of `n`) exceeds another's."""
    table = [[right, n - right], [other_right, other_n - other_right]]
    return float(fisher_exact(table, alternative="greater").pvalue)
