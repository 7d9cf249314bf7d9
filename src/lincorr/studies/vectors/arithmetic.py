"""Merullo et al. (2024), "Language Models Implement Simple Word2Vec-style Vector Arithmetic", on lincorr's component layer.

- `lens`: the logit lens over a task's few-shot prompts: per layer, the reciprocal rank (over the
  full vocabulary) of the argument's and the answer's first token, at block boundaries (`resid[l]`)
  and between each block's attention and FFN (`resid[l] + attn[l]`), all from one forward.
- `ovector`: the o-vector (mean FFN output `mlp[L]` at the last position of solved prompts) added to
  the stream of copy contexts, against no vector, another task's o-vector and a random vector of
  the same norm; a sweep over layers; the vector of one pair applied to the others.
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
from scipy.stats import binomtest

from lincorr.errors import LincorrError
from lincorr.tasks import (
    BoundTask,
    TaskScores,
    bind_task,
    copy_prompts,
    extractive_prompts,
    fewshot_prompts,
    score_prompts,
)
from lincorr.internals import Ablate, Patch, attn, hidden_ranks, layout, mlp, resid, run
from lincorr.knowledge import TaskSpec, load_registry
from lincorr.models import LM
from lincorr.outputs import staged_directory, write_csv, write_json
from lincorr.progress import progress_bar
from lincorr.results import Stored, record

__all__ = [
    "FLOOR", "OVECTOR_SCALE", "FFNAblationResult", "LensResult", "OVectorResult", "OVectors", "check_layer", "crossing_component", "crossing_layer",
    "ffn_ablate",
    "lens", "more_often", "o_vectors", "other_task", "ovector", "pair_order",
]

# Below a mean reciprocal rank of 0.1 (on average around rank 10) neither token is read by the lens:
# median ranks there are in the thousands, and which one is "ahead" flips from layer to layer.
FLOOR = 0.1
NOTHING = torch.empty(0, dtype=torch.long)  # as `token_ids`: activations only, no head


# Added once at one layer, the o-vector stands in for the paper's substitution at every layer from the crossing on; at
# x1 it moves the answer's rank but rarely to the top (docs/mechanisms.md: capitals on gemma-3-270m, accuracy 0.02 at
# x1 and 0.53 at x3, every control 0.00), so x3 is the default.
OVECTOR_SCALE = 3.0


def crossing_layer(argument_rr: Sequence[float], answer_rr: Sequence[float], floor: float = FLOOR) -> int | None:
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


def pair_order(task: BoundTask, seed: int) -> list[int]:
    """A seeded order of the kept pairs: studies take source, reference and evaluation pairs from it in turn."""
    return [int(i) for i in np.random.default_rng(seed).permutation(len(task.pairs))]


def check_layer(lm: LM, layer: int, what: str) -> int:
    """`layer` as an FFN index of this model, or a one-line LincorrError."""
    n_layers = layout(lm).n_layers
    if not 0 <= layer < n_layers:
        raise LincorrError(f"{what} {layer} is outside this {n_layers}-block model; use 0..{n_layers - 1}")
    return layer


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
        return None if self.crossing_component is None else self.crossing_layer - 1

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
class OVectors:
    """FFN outputs at the last position of a task's few-shot prompts, and which prompts the model solved.

    `outputs` is `[n_prompts, L, d_model]` (`mlp[l]` for every l), rows in `indices` order.
    """

    task: BoundTask
    indices: tuple[int, ...]
    solved: np.ndarray  # [n_prompts] bool: the model's greedy first token is a right answer's
    outputs: np.ndarray

    def mean(self, layer: int, n_source: int) -> np.ndarray:
        """The o-vector `[d_model]`: mean `mlp[layer]` over the first `n_source` solved prompts."""
        return self.outputs[np.flatnonzero(self.solved)[:n_source], layer].mean(0)

    def sources(self, n_source: int) -> list[int]:
        """Pair indices of the prompts `mean` averages."""
        return [self.indices[row] for row in np.flatnonzero(self.solved)[:n_source]]


def o_vectors(lm: LM, task: BoundTask, indices: Sequence[int], *, seed: int = 0, batch_size: int = 16) -> OVectors:
    """Every FFN's output on the few-shot prompts of `indices` and whether each is solved, from one forward per batch."""
    components = [mlp(layer) for layer in range(layout(lm).n_layers)]
    trace = run(lm, fewshot_prompts(task, indices, seed), capture=components, batch_size=batch_size)
    top = trace.logits.argmax(-1).cpu()
    solved = (top[:, None] == task.answer_ids(indices)).any(1).numpy()
    if not solved.any():
        raise LincorrError(f"the model answers none of the {len(indices)} '{task.name}' prompts it was shown; an o-vector needs solved prompts")
    outputs = torch.stack([trace[c] for c in components], 1).float().cpu().numpy()
    return OVectors(task, tuple(indices), solved, outputs)


def other_task(task: TaskSpec, registry=None) -> TaskSpec:
    """The control task for `task`'s o-vector: the registry's next task after it (the first other one when it is not listed)."""
    listed = (registry or load_registry()).tasks
    names = [t.name for t in listed]
    others = [t for t in listed if t.name != task.name]
    if not others:
        raise LincorrError(f"the registry has no task besides '{task.name}' to draw a control o-vector from; add one under `tasks:`")
    after = names.index(task.name) if task.name in names else -1
    return next((t for t in others if names.index(t.name) > after), others[0])


def more_often(first: np.ndarray, second: np.ndarray) -> float:
    """One-sided exact McNemar p-value that `first` (bool per pair) holds on more pairs than `second`, over the same pairs."""
    wins, losses = int((first & ~second).sum()), int((second & ~first).sum())
    return 1.0 if wins + losses == 0 else float(binomtest(wins, wins + losses, 0.5, alternative="greater").pvalue)


@dataclasses.dataclass(frozen=True)
class OVectorResult(Stored):
    """The o-vector of one task added at `mlp[layer]` (scaled by `scale`) on copy contexts, with its controls.

    Accuracy: share of evaluation pairs whose greedy first token is a right answer's; RR: the answer's
    mean reciprocal rank over the full vocabulary. `copy_without` is the share that repeats the
    argument with no vector (the context works); `per_layer` is the sweep, empty unless asked.
    """

    study: ClassVar[str] = "ovector"

    task: str
    other_task: str
    model: str
    model_fingerprint: str
    layer: int
    scale: float
    n_pairs: int
    source_arguments: tuple[str, ...]
    transfer_argument: str
    accuracy_with: float
    accuracy_without: float
    accuracy_other_task: float
    accuracy_random: float
    transfer_accuracy: float
    rr_with: float
    rr_without: float
    rr_other_task: float
    rr_random: float
    transfer_rr: float
    copy_without: float
    copy_with: float
    p_vs_other_task: float
    p_vs_random: float
    norm: float
    other_norm: float
    per_layer: tuple[dict, ...]
    example_prompt: str
    settings: dict
    seconds: float

    CONDITIONS = (("with", "o-vector"), ("without", "no vector"), ("other_task", "other task's o-vector"),
                  ("random", "random, same norm"), ("transfer", "one pair's vector"))

    def condition(self, key: str) -> tuple[float, float]:
        """(accuracy, RR) of one condition of CONDITIONS."""
        if key == "transfer":
            return self.transfer_accuracy, self.transfer_rr
        return getattr(self, f"accuracy_{key}"), getattr(self, f"rr_{key}")

    def summary(self) -> dict:
        """The JSON contract of `lincorr ovector --json`."""
        return {
            "task": self.task, "other_task": self.other_task, "model": self.model, "layer": self.layer, "scale": self.scale,
            "n_pairs": self.n_pairs, "source_arguments": list(self.source_arguments), "transfer_argument": self.transfer_argument,
            "accuracy_with": self.accuracy_with, "accuracy_without": self.accuracy_without,
            "accuracy_other_task": self.accuracy_other_task, "accuracy_random": self.accuracy_random,
            "transfer_accuracy": self.transfer_accuracy, "rr_with": self.rr_with, "rr_without": self.rr_without,
            "rr_other_task": self.rr_other_task, "rr_random": self.rr_random, "transfer_rr": self.transfer_rr,
            "copy_without": self.copy_without, "copy_with": self.copy_with, "p_vs_other_task": self.p_vs_other_task,
            "p_vs_random": self.p_vs_random, "norm": self.norm, "other_norm": self.other_norm, "per_layer": list(self.per_layer),
            "example_prompt": self.example_prompt, "seed": self.settings["seed"], "seconds": self.seconds,
        }

    def text(self) -> str:
        """Aligned text: one line per condition, the paired tests, and the sweep when there is one."""
        lines = [f"{self.task} o-vector at mlp[{self.layer}] x {self.scale:g} on {self.n_pairs} copy contexts of {self.model} "
                 f"(mean of {len(self.source_arguments)} solved prompts; without it the model repeats the argument in {self.copy_without:.2f})",
                 f"{'condition':<26} accuracy  answer RR"]
        for key, label in self.CONDITIONS:
            accuracy, rr = self.condition(key)
            label = f"{label} ({self.transfer_argument})" if key == "transfer" else f"{label} ({self.other_task})" if key == "other_task" else label
            lines.append(f"{label:<26} {accuracy:8.2f}  {rr:9.3f}")
        lines.append(f"paired exact test, o-vector above: other task p = {self.p_vs_other_task:.2g}, random p = {self.p_vs_random:.2g}")
        if self.per_layer:
            lines.append("sweep  layer  accuracy  answer RR")
            lines += [f"       {row['layer']:5d}  {row['accuracy_with']:8.2f}  {row['rr_with']:9.3f}" for row in self.per_layer]
        return "\n".join(lines)

    def save(self, directory) -> None:
        """ovector.json, ovector.csv (conditions, then the sweep) and ovector.png; written whole or not at all."""
        from lincorr.plots import bar_plot, layer_curves

        with staged_directory(directory) as out:
            record(out, self, model_fingerprint=self.model_fingerprint, settings=self.settings)
            write_json(out / "ovector.json", self.summary())
            rows = [[key, self.layer, *self.condition(key)] for key, _ in self.CONDITIONS]
            rows += [["sweep", row["layer"], row["accuracy_with"], row["rr_with"]] for row in self.per_layer]
            write_csv(out / "ovector.csv", ["condition", "layer", "accuracy", "answer_rr"], rows)
            title = f"{self.task} o-vector x {self.scale:g} on copy contexts, {self.model}"
            if self.per_layer:
                layers = [row["layer"] for row in self.per_layer]
                layer_curves({"accuracy with the o-vector": (layers, [row["accuracy_with"] for row in self.per_layer]),
                              "answer RR with the o-vector": (layers, [row["rr_with"] for row in self.per_layer]),
                              "answer RR without": (layers, [self.rr_without] * len(layers))},
                             out / "ovector.png", title, y_label="accuracy / mean RR", x_label="layer L: the o-vector of mlp[L], added there",
                             dashed=("answer RR without",), mark=self.layer, mark_label=f"layer of the controls ({self.layer})")
            else:
                labels = [label for _, label in self.CONDITIONS]
                values = [self.condition(key) for key, _ in self.CONDITIONS]
                bar_plot(labels, {"accuracy": [v[0] for v in values], "answer RR": [v[1] for v in values]},
                         out / "ovector.png", f"{title}, mlp[{self.layer}]", y_label="accuracy / mean RR")


def ovector(lm: LM, task: TaskSpec, layer: int, *, control: TaskSpec | None = None, scale: float = OVECTOR_SCALE, n_source: int = 8,
            n_pairs: int = 64, sweep: bool = False, transfer_from: str | None = None, seed: int = 0, batch_size: int = 16) -> OVectorResult:
    """Add `scale` times the task's o-vector to `mlp[layer]` at the last position of copy contexts, with controls.

    The o-vector is the mean `mlp[layer]` output at the last position of the first `n_source` solved
    few-shot prompts among a pool of `3 * n_source` pairs; `n_pairs` other pairs are evaluated.
    Controls, each added the same way: the o-vector of `control` (default `other_task(task)`) made
    the same way from that task's prompts, and a seeded random vector of the o-vector's norm. The
    transfer vector is `mlp[layer]` of one pair's prompt (`transfer_from`, default the first
    solved source) applied to the evaluation pairs. `sweep` repeats the o-vector condition at every layer.
    """
    started = time.perf_counter()
    check_layer(lm, layer, "o-vector layer")
    bound = bind_task(task, lm.tokenizer)
    control = control or other_task(task)
    order = pair_order(bound, seed)
    if transfer_from is not None:
        arguments = [pair.argument for pair in bound.pairs]
        if transfer_from not in arguments:
            raise LincorrError(f"'{transfer_from}' is not a kept argument of task '{task.name}' for this tokenizer; pick one of {', '.join(arguments[:8])} …")
        order.remove(arguments.index(transfer_from))
        order.insert(0, arguments.index(transfer_from))
    pool, evaluation = order[:3 * n_source], order[3 * n_source:][:n_pairs]
    if not evaluation:
        raise LincorrError(f"task '{task.name}' keeps {len(order)} pairs for this tokenizer, too few for {3 * n_source} source prompts and an evaluation; lower n_source")
    vectors = o_vectors(lm, bound, pool, seed=seed, batch_size=batch_size)
    control_bound = bind_task(control, lm.tokenizer)
    control_vectors = o_vectors(lm, control_bound, pair_order(control_bound, seed)[:3 * n_source], seed=seed,
                                batch_size=batch_size)
    transfer_row = 0 if transfer_from is not None else int(np.flatnonzero(vectors.solved)[0])

    prompts = copy_prompts(bound, evaluation)
    n_layers = layout(lm).n_layers

    def scored(vector: np.ndarray | None, at: int = layer) -> TaskScores:
        added = [] if vector is None else [Patch(mlp(at), torch.from_numpy(scale * vector), mode="add")]
        return score_prompts(lm, bound, evaluation, prompts, layers=[n_layers], interventions=added, batch_size=batch_size)

    vector = vectors.mean(layer, n_source)
    random = np.random.default_rng(seed).standard_normal(vector.shape).astype(np.float32)
    random *= np.linalg.norm(vector) / np.linalg.norm(random)
    outcomes = {
        "with": scored(vector), "without": scored(None), "other_task": scored(control_vectors.mean(layer, n_source)),
        "random": scored(random), "transfer": scored(vectors.outputs[transfer_row, layer]),
    }
    per_layer = []
    for at in progress_bar(range(n_layers) if sweep else (), desc="sweep", unit="layer"):
        swept = scored(vectors.mean(at, n_source), at)
        per_layer.append({"layer": at, "accuracy_with": swept.accuracy(), "rr_with": float(swept.answer_rr()[-1])})
    top1 = {key: scores.answer_rank[:, -1] == 0 for key, scores in outcomes.items()}
    return OVectorResult(
        task=task.name, other_task=control.name, model=lm.name, model_fingerprint=lm.fingerprint, layer=layer, scale=scale,
        n_pairs=len(evaluation), source_arguments=tuple(bound.pairs[i].argument for i in vectors.sources(n_source)),
        transfer_argument=bound.pairs[pool[transfer_row]].argument,
        **{f"accuracy_{key}": outcomes[key].accuracy() for key in ("with", "without", "other_task", "random")},
        transfer_accuracy=outcomes["transfer"].accuracy(),
        **{f"rr_{key}": float(outcomes[key].answer_rr()[-1]) for key in ("with", "without", "other_task", "random")},
        transfer_rr=float(outcomes["transfer"].answer_rr()[-1]),
        copy_without=float((outcomes["without"].argument_rank[:, -1] == 0).mean()),
        copy_with=float((outcomes["with"].argument_rank[:, -1] == 0).mean()),
        p_vs_other_task=more_often(top1["with"], top1["other_task"]), p_vs_random=more_often(top1["with"], top1["random"]),
        norm=float(scale * np.linalg.norm(vector)), other_norm=float(scale * np.linalg.norm(control_vectors.mean(layer, n_source))),
        per_layer=tuple(per_layer), example_prompt=prompts[0],
        settings={"layer": layer, "scale": scale, "n_source": n_source, "n_pairs": n_pairs, "sweep": sweep,
                  "transfer_from": transfer_from, "control": control.name, "seed": seed},
        seconds=time.perf_counter() - started,
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


def ffn_ablate(lm: LM, task: TaskSpec, from_layer: int, how: str = "zero", *, n_pairs: int = 64, n_reference: int = 16,
               seed: int = 0, batch_size: int = 16) -> FFNAblationResult:
    """Ablate `mlp[l]` for every l >= `from_layer` at every position; accuracy of the task and its extractive control.

    how="zero" replaces the FFN outputs by zeros; how="mean" by their mean over the real tokens of
    `n_reference` few-shot prompts of other pairs. The same `n_pairs` pairs are asked both ways.
    """
    started = time.perf_counter()
    check_layer(lm, from_layer, "--from-layer")
    if how not in ("zero", "mean"):
        raise LincorrError(f"ablation '{how}' is unknown; use 'zero' or 'mean'")
    bound = bind_task(task, lm.tokenizer)
    order = pair_order(bound, seed)
    reference, evaluation = order[:n_reference], order[n_reference:][:n_pairs]
    if not evaluation:
        raise LincorrError(f"task '{task.name}' keeps {len(order)} pairs for this tokenizer, too few for {n_reference} reference prompts and an evaluation")
    ablated = [mlp(layer) for layer in range(from_layer, layout(lm).n_layers)]
    means = {c: None for c in ablated}
    if how == "mean":
        trace = run(lm, fewshot_prompts(bound, reference, seed), capture=ablated, positions="all", token_ids=NOTHING,
                    batch_size=batch_size)
        real = trace.attention_mask.to(trace[ablated[0]].device, trace[ablated[0]].dtype)[..., None]
        means = {c: (trace[c] * real).sum((0, 1)) / real.sum() for c in ablated}
    interventions = [Ablate(c, how, means[c], position="all") for c in ablated]
    n_layers = layout(lm).n_layers
    abstractive, extractive = fewshot_prompts(bound, evaluation, seed), extractive_prompts(bound, evaluation, seed)
    right = {  # [n_pairs] bool: the greedy first token is a right answer's
        (kind, when): score_prompts(lm, bound, evaluation, prompts, layers=[n_layers], interventions=added,
                                    batch_size=batch_size).answer_rank[:, -1] == 0
        for kind, prompts in (("abstractive", abstractive), ("extractive", extractive))
        for when, added in (("before", ()), ("after", interventions))
    }
    broken = {kind: right[kind, "before"] & ~right[kind, "after"] for kind in ("abstractive", "extractive")}
    return FFNAblationResult(
        task=task.name, model=lm.name, model_fingerprint=lm.fingerprint, from_layer=from_layer, how=how, n_pairs=len(evaluation),
        n_layers_ablated=len(ablated), **{f"{kind}_{when}": float(value.mean()) for (kind, when), value in right.items()},
        p_abstractive_hurt_more=more_often(broken["abstractive"], broken["extractive"]),
        example_abstractive=abstractive[0], example_extractive=extractive[0],
        settings={"from_layer": from_layer, "how": how, "n_pairs": n_pairs, "n_reference": n_reference, "seed": seed},
        seconds=time.perf_counter() - started,
    )
