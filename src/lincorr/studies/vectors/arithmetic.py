"""Merullo et al. (2024), "Language Models Implement Simple Word2Vec-style Vector Arithmetic", on lincorr's component layer.

- `lens`: the logit lens over a task's few-shot prompts: per layer, the reciprocal rank (over the
  full vocabulary) of the argument's and the answer's first token, at block boundaries (`resid[l]`)
  and between each block's attention and FFN (`resid[l] + attn[l]`), all from one forward.
- `ovector` (in `ovectors`, named here too): the o-vector applied to contexts where the model does not
  answer by itself, by the paper's protocol or lincorr's averaged variant (`protocol`), with controls.
- `ffn_ablate`: every FFN from a layer on ablated; accuracy on the task (answer from memory)
  and on its extractive control (answer in the context), before and after.

Layers: the lens reads `resid[l]`, l = 0..L (l = L is the model's output); `ovector` and
`ffn_ablate` name FFNs `mlp[l]`, l = 0..L-1, and `mlp[l]` writes into `resid[l+1]`.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar
import time
from collections.abc import Sequence

import numpy as np
import torch

from lincorr.errors import LincorrError
from lincorr.tasks import BoundTask, TaskScores, bind_task, extractive_prompts, fewshot_prompts, score_prompts
from lincorr.internals import Ablate, attn, hidden_ranks, layout, mlp, resid, run, special_ids
from lincorr.knowledge import TaskSpec
from lincorr.models import LM, left_pad, tokenize_prompts
from lincorr.outputs import staged_directory, write_csv, write_json
from lincorr.results import Stored, record
from lincorr.studies.vectors.ovectors import OVectorResult, OVectors, o_vectors, other_task, ovector
from lincorr.studies.vectors.protocol import OVECTOR_SCALE, check_layer, more_often, pair_order

__all__ = [
    "FLOOR", "OVECTOR_SCALE", "FFNAblationResult", "LensResult", "OVectorResult", "OVectors", "check_layer", "crossing_component", "crossing_layer",
    "ffn_ablate", "ffn_ablations", "right_first",
    "lens", "more_often", "o_vectors", "other_task", "ovector", "pair_order",
]

# Below a mean reciprocal rank of 0.1 (on average around rank 10) neither token is read by the lens:
# median ranks there are in the thousands, and which one is "ahead" flips from layer to layer.
FLOOR = 0.1
NOTHING = torch.empty(0, dtype=torch.long)  # as `token_ids`: activations only, no head


def crossing_layer(argument_rr: np.ndarray | Sequence[float], answer_rr: np.ndarray | Sequence[float], floor: float = FLOOR) -> int | None:
    """The first lens layer where the answer's mean RR exceeds the argument's, among layers where either reaches `floor`; None if none."""
    for layer, (argument, answer) in enumerate(zip(argument_rr, answer_rr)):
        if max(argument, answer) >= floor and answer > argument:
            return layer
    return None


def crossing_component(crossing: int | None, argument_rr, answer_rr, mid_argument_rr, mid_answer_rr) -> str | None:
    """Inside block crossing-1, which sub-layer made the answer overtake: "attn" or "mlp" (curves as in `LensResult`).

    "mlp" when the argument still led after the block's attention; "attn" when the attention put
    the answer ahead of an argument that led before the block; None when there is no crossing, it
    is resid[0], or the answer led both before the block (below the floor) and after its attention.
    """
    if crossing is None or crossing == 0:
        return None
    block = crossing - 1
    if mid_argument_rr[block] >= mid_answer_rr[block]:
        return "mlp"
    return "attn" if argument_rr[block] >= answer_rr[block] else None


def rr_list(values) -> list[float]:
    return [float(v) for v in values]


@dataclasses.dataclass(frozen=True)
class LensResult(Stored):
    """Per-layer logit-lens reciprocal ranks of a task's argument and answer over its few-shot prompts.

    Arrays over lens layers 0..L (`resid[l]`) are `[L + 1]`; `mid_*` are `[L]`, read between block l's
    attention and its FFN (`resid[l] + attn[l]`).
    """

    study: ClassVar[str] = "lens"

    task: str
    model: str
    model_fingerprint: str
    n_pairs: int
    argument_rr: np.ndarray
    answer_rr: np.ndarray
    answer_top1: np.ndarray
    mid_argument_rr: np.ndarray
    mid_answer_rr: np.ndarray
    crossing_layer: int | None
    # Inside block crossing-1, what made the answer overtake the argument: "mlp" (its FFN) or "attn" (its
    # attention); None when the answer led before the block and after its attention (see `crossing_component`).
    crossing_component: str | None
    final_accuracy: float
    example_prompt: str
    settings: dict
    seconds: float

    @property
    def layers(self) -> list[int]:
        return list(range(len(self.argument_rr)))

    @property
    def crossing_block(self) -> int | None:
        """The block whose sub-layer made the crossing (`crossing_layer` is the residual stream after it), or None.

        This is the layer `ovector` and `ffn-ablate` take: the crossing at resid[13] made by block 12's FFN is mlp[12].
        """
        return None if self.crossing_component is None or self.crossing_layer is None else self.crossing_layer - 1

    def summary(self) -> dict:
        """The JSON contract of `lincorr lens --json`."""
        return {
            "task": self.task, "model": self.model, "n_pairs": self.n_pairs, "layers": self.layers,
            "argument_rr": rr_list(self.argument_rr), "answer_rr": rr_list(self.answer_rr),
            "answer_top1": rr_list(self.answer_top1), "mid_argument_rr": rr_list(self.mid_argument_rr),
            "mid_answer_rr": rr_list(self.mid_answer_rr), "crossing_layer": self.crossing_layer,
            "crossing_block": self.crossing_block, "crossing_component": self.crossing_component, "final_accuracy": self.final_accuracy,
            "floor": self.settings["floor"], "example_prompt": self.example_prompt, "seed": self.settings["seed"],
            "seconds": self.seconds,
        }

    def rows(self) -> list[list]:
        """One row per lens layer: layer, argument RR, answer RR, answer top-1, and the mid-block RRs of block `layer`."""
        mid = len(self.mid_argument_rr)
        return [
            [layer, float(self.argument_rr[layer]), float(self.answer_rr[layer]), float(self.answer_top1[layer]),
             float(self.mid_argument_rr[layer]) if layer < mid else None, float(self.mid_answer_rr[layer]) if layer < mid else None]
            for layer in self.layers
        ]

    def text(self) -> str:
        """Aligned text for the terminal: the curves, one line per layer, and the crossing."""
        lines = [f"{self.task} on {self.model}: {self.n_pairs} few-shot prompts, model accuracy {self.final_accuracy:.2f}",
                 "layer  argument RR  answer RR  answer top-1   | after attention: argument RR  answer RR"]
        for layer, argument, answer, top1, mid_argument, mid_answer in self.rows():
            mark = "  <- crossing" if layer == self.crossing_layer else ""
            mid = f"   |                  {mid_argument:11.3f}  {mid_answer:9.3f}" if mid_argument is not None else "   |"
            lines.append(f"{layer:5d}  {argument:11.3f}  {answer:9.3f}  {top1:12.3f}{mid}{mark}")
        if self.crossing_layer is None:
            lines.append(f"no crossing: the answer's RR never exceeds the argument's where either reaches {self.settings['floor']}")
        elif self.crossing_component is None:
            lines.append(f"crossing at resid[{self.crossing_layer}]: the answer led already before block {self.crossing_layer - 1}, "
                         "below the floor, and after its attention")
        else:
            by = {"mlp": "the FFN", "attn": "the attention"}[self.crossing_component]
            lines.append(f"crossing at resid[{self.crossing_layer}]: made by {by} of block {self.crossing_layer - 1}")
        return "\n".join(lines)

    def save(self, directory) -> None:
        """lens.json, lens.csv and lens.png (both curves, dashed between attention and FFN, and the answer's top-1 share); written whole or not at all."""
        from lincorr.plots import layer_curves

        with staged_directory(directory) as out:
            record(out, self, model_fingerprint=self.model_fingerprint, settings=self.settings)
            write_json(out / "lens.json", self.summary())
            write_csv(out / "lens.csv", ["layer", "argument_rr", "answer_rr", "answer_top1", "mid_argument_rr", "mid_answer_rr"],
                      self.rows())
            # The state between block l's attention and its FFN sits at l + 0.5: from l to l + 0.5 a
            # curve shows what the attention did, from l + 0.5 to l + 1 what the FFN did.
            x = [position / 2 for position in range(2 * len(self.mid_argument_rr) + 1)]

            def interleaved(at_block, mid):
                return [value for pair in zip(at_block, mid) for value in pair] + [at_block[-1]]

            layer_curves({"argument RR": (x, interleaved(self.argument_rr, self.mid_argument_rr)),
                          "answer RR": (x, interleaved(self.answer_rr, self.mid_answer_rr)),
                          "answer top-1": (self.layers, self.answer_top1)},
                         out / "lens.png", f"logit lens, {self.task} on {self.model} ({self.n_pairs} prompts)",
                         y_label="mean reciprocal rank / share", x_label="layer l of resid[l] (l + 0.5: after block l's attention)",
                         dashed=("answer top-1",), mark=self.crossing_layer, mark_label="crossing")


def lens(lm: LM, task: TaskSpec, *, n_pairs: int | None = None, seed: int = 0, floor: float = FLOOR, batch_size: int = 16) -> LensResult:
    """The logit lens at the last position of `n_pairs` few-shot prompts (all kept pairs by default), one forward per batch.

    Ranks are over the full vocabulary; a pair's answer rank is its best answer's. `final_accuracy`
    is the answer's top-1 share at `resid[L]`, i.e. the model's own greedy first token.
    """
    started = time.perf_counter()
    bound = bind_task(task, lm.tokenizer)
    indices = pair_order(bound, seed)[:n_pairs]
    prompts = fewshot_prompts(bound, indices, seed)
    n_layers = layout(lm).n_layers
    streams, attention = [resid(layer) for layer in range(n_layers + 1)], [attn(layer) for layer in range(n_layers)]
    trace = run(lm, prompts, capture=streams + attention, token_ids=NOTHING, batch_size=batch_size)
    stack = torch.stack([trace[c] for c in streams] + [trace[s] + trace[a] for s, a in zip(streams, attention)], 1)
    targets = torch.cat([bound.argument_ids(indices)[:, None], bound.answer_ids(indices)], 1)
    ranks = hidden_ranks(lm, stack, targets, batch_size=batch_size).cpu().numpy()  # [n, 2L + 1, 1 + k]
    at_block, mid = (TaskScores(ranks[:, part, 0], ranks[:, part, 1:].min(-1))
                     for part in (slice(0, n_layers + 1), slice(n_layers + 1, None)))
    argument_rr, answer_rr = at_block.argument_rr(), at_block.answer_rr()
    crossing = crossing_layer(argument_rr, answer_rr, floor)
    component = crossing_component(crossing, argument_rr, answer_rr, mid.argument_rr(), mid.answer_rr())
    return LensResult(
        task=task.name, model=lm.name, model_fingerprint=lm.fingerprint, n_pairs=len(indices), argument_rr=argument_rr,
        answer_rr=answer_rr, answer_top1=at_block.answer_top1(), mid_argument_rr=mid.argument_rr(), mid_answer_rr=mid.answer_rr(),
        crossing_layer=crossing, crossing_component=component, final_accuracy=at_block.accuracy(), example_prompt=prompts[0],
        settings={"n_pairs": n_pairs, "seed": seed, "floor": floor}, seconds=time.perf_counter() - started,
    )


@dataclasses.dataclass(frozen=True)
class FFNAblationResult(Stored):
    """Accuracy on a task's few-shot prompts (abstractive) and its extractive controls, before and after ablating every FFN from `from_layer` on."""

    study: ClassVar[str] = "ffn-ablate"

    task: str
    model: str
    model_fingerprint: str
    from_layer: int
    how: str
    n_pairs: int
    n_layers_ablated: int
    abstractive_before: float
    abstractive_after: float
    extractive_before: float
    extractive_after: float
    p_abstractive_hurt_more: float  # one-sided exact McNemar: more pairs lose their right abstractive answer than their extractive one
    example_abstractive: str
    example_extractive: str
    settings: dict
    seconds: float

    def summary(self) -> dict:
        """The JSON contract of `lincorr ffn-ablate --json`."""
        return {
            "task": self.task, "model": self.model, "from_layer": self.from_layer, "how": self.how, "n_pairs": self.n_pairs,
            "n_layers_ablated": self.n_layers_ablated, "abstractive_before": self.abstractive_before,
            "abstractive_after": self.abstractive_after, "extractive_before": self.extractive_before,
            "extractive_after": self.extractive_after, "p_abstractive_hurt_more": self.p_abstractive_hurt_more,
            "example_abstractive": self.example_abstractive,
            "example_extractive": self.example_extractive, "seed": self.settings["seed"], "seconds": self.seconds,
        }

    def text(self) -> str:
        """Aligned text: both tasks before and after."""
        return "\n".join([
            f"{self.task} on {self.model}: {self.how}-ablating mlp[{self.from_layer}..] ({self.n_layers_ablated} FFNs), {self.n_pairs} pairs",
            "prompts        before  after   drop",
            f"abstractive    {self.abstractive_before:6.2f}  {self.abstractive_after:5.2f}  {self.abstractive_before - self.abstractive_after:5.2f}",
            f"extractive     {self.extractive_before:6.2f}  {self.extractive_after:5.2f}  {self.extractive_before - self.extractive_after:5.2f}",
            f"paired exact test, the ablation breaks more abstractive than extractive answers: p = {self.p_abstractive_hurt_more:.2g}",
        ])

    def save(self, directory) -> None:
        """ffn_ablation.json, ffn_ablation.csv and ffn_ablation.png; written whole or not at all."""
        from lincorr.plots import bar_plot

        with staged_directory(directory) as out:
            record(out, self, model_fingerprint=self.model_fingerprint, settings=self.settings)
            write_json(out / "ffn_ablation.json", self.summary())
            write_csv(out / "ffn_ablation.csv", ["prompts", "before", "after"],
                      [["abstractive", self.abstractive_before, self.abstractive_after],
                       ["extractive", self.extractive_before, self.extractive_after]])
            bar_plot(["abstractive (recall)", "extractive (answer in context)"],
                     {"before": [self.abstractive_before, self.extractive_before],
                      "after": [self.abstractive_after, self.extractive_after]},
                     out / "ffn_ablation.png", f"{self.task}, {self.model}: {self.how}-ablating mlp[{self.from_layer}..]",
                     y_label="accuracy")


def ffn_ablations(lm: LM, task: BoundTask, from_layer: int, how: str, reference: Sequence[int] = (), *, seed: int = 0,
                  batch_size: int = 16) -> list[Ablate]:
    """`mlp[l]` for every l >= `from_layer` ablated at every position but the special ones (BOS stays as the model made it):
    how="zero" by zeros, how="mean" by the mean output over the non-special tokens of the `reference` pairs' few-shot prompts."""
    check_layer(lm, from_layer, "--from-layer")
    if how not in ("zero", "mean"):
        raise LincorrError(f"ablation '{how}' is unknown; use 'zero' or 'mean'")
    ablated = [mlp(layer) for layer in range(from_layer, layout(lm).n_layers)]
    means = {c: None for c in ablated}
    if how == "mean":
        prompts = fewshot_prompts(task, reference, seed)
        trace = run(lm, prompts, capture=ablated, positions="all", token_ids=NOTHING, batch_size=batch_size)
        ids, _ = left_pad(tokenize_prompts(lm.tokenizer, prompts), lm.tokenizer.pad_token_id)
        content = trace.attention_mask.bool() & ~torch.isin(ids, special_ids(lm.tokenizer))
        real = content.to(trace[ablated[0]].device, trace[ablated[0]].dtype)[..., None]
        means = {c: (trace[c] * real).sum((0, 1)) / real.sum() for c in ablated}
    return [Ablate(c, how, means[c], position="content") for c in ablated]


def right_first(lm: LM, task: BoundTask, indices: Sequence[int], prompts: Sequence[str], interventions=(), batch_size: int = 16) -> np.ndarray:
    """`[n]` bool: the model's greedy first token on `prompts[i]` is one of pair `indices[i]`'s answers."""
    n_layers = layout(lm).n_layers
    return score_prompts(lm, task, indices, prompts, layers=[n_layers], interventions=interventions, batch_size=batch_size).answer_rank[:, -1] == 0


def ffn_ablate(lm: LM, task: TaskSpec, from_layer: int, how: str = "zero", *, n_pairs: int = 64, n_reference: int = 16,
               seed: int = 0, batch_size: int = 16) -> FFNAblationResult:
    """Ablate `mlp[l]` for every l >= `from_layer` (`ffn_ablations`); accuracy of the task and its extractive control.

    The mean of how="mean" is over `n_reference` few-shot prompts of other pairs. The same `n_pairs` pairs are asked both ways.
    """
    started = time.perf_counter()
    bound = bind_task(task, lm.tokenizer)
    order = pair_order(bound, seed)
    reference, evaluation = order[:n_reference], order[n_reference:][:n_pairs]
    if not evaluation:
        raise LincorrError(f"task '{task.name}' keeps {len(order)} pairs for this tokenizer, too few for {n_reference} reference prompts and an evaluation")
    interventions = ffn_ablations(lm, bound, from_layer, how, reference, seed=seed, batch_size=batch_size)
    abstractive, extractive = fewshot_prompts(bound, evaluation, seed), extractive_prompts(bound, evaluation, seed)
    right = {(kind, when): right_first(lm, bound, evaluation, prompts, added, batch_size)
             for kind, prompts in (("abstractive", abstractive), ("extractive", extractive))
             for when, added in (("before", ()), ("after", interventions))}
    broken = {kind: right[kind, "before"] & ~right[kind, "after"] for kind in ("abstractive", "extractive")}
    return FFNAblationResult(
        task=task.name, model=lm.name, model_fingerprint=lm.fingerprint, from_layer=from_layer, how=how, n_pairs=len(evaluation),
        n_layers_ablated=len(interventions), **{f"{kind}_{when}": float(value.mean()) for (kind, when), value in right.items()},
        p_abstractive_hurt_more=more_often(broken["abstractive"], broken["extractive"]),
        example_abstractive=abstractive[0], example_extractive=extractive[0],
        settings={"from_layer": from_layer, "how": how, "n_pairs": n_pairs, "n_reference": n_reference, "seed": seed},
        seconds=time.perf_counter() - started,
    )
