"""The o-vector study (Merullo et al.): a task's FFN output applied to contexts where the model does not answer by itself, with controls.

The protocols and contexts are `protocol`'s: the paper's (one solved prompt's `mlp[L]` replacing
every FFN from block L - 1 on, BOS kept) and lincorr's averaged variant (the mean of several, added once at L),
on copy and zero-shot contexts. Controls, each applied the same way: no vector, another task's
o-vector made the same way, and a seeded random vector of the o-vector's norm.
"""

from __future__ import annotations

import dataclasses
import time
from typing import ClassVar
from collections.abc import Sequence

import numpy as np
import torch

from lincorr.errors import LincorrError
from lincorr.internals import layout, mlp, run
from lincorr.knowledge import TaskSpec, load_registry
from lincorr.models import LM
from lincorr.outputs import staged_directory, write_csv, write_json
from lincorr.progress import progress_bar
from lincorr.results import Stored, record
from lincorr.studies.vectors.protocol import (
    CONTROLS, check_layer, context_prompts, default_scale, o_interventions, over_every_control, pair_order,
)
from lincorr.tasks import BoundTask, TaskScores, bind_task, fewshot_prompts, score_prompts

__all__ = ["OVectors", "o_vectors", "other_task", "OVectorResult", "ovector"]


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

    def vector(self, protocol: str, layer: int, n_source: int, row: int) -> np.ndarray:
        """The o-vector `[d_model]` of a protocol: prompt `row`'s own `mlp[layer]` (paper), or `mean` (averaged)."""
        return self.outputs[row, layer] if protocol == "paper" else self.mean(layer, n_source)


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


@dataclasses.dataclass(frozen=True)
class OVectorResult(Stored):
    """The o-vector of one task applied from `mlp[layer]` by `protocol` (scaled by `scale`), with its controls.

    Accuracy: share of evaluation pairs whose greedy first token is a right answer's; RR: the answer's
    mean reciprocal rank over the full vocabulary. `copy_without` is the share that repeats the
    argument with no vector (the context works); `per_layer` is the sweep, empty unless asked. The
    flat fields are the first context's; `by_context` holds every context's (`protocol.CONTEXTS`).
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
    protocol: str = "averaged"
    by_context: tuple[dict, ...] = ()  # per context: its name, each condition's accuracy and RR, the paired p-values

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
            "protocol": self.protocol, "by_context": list(self.by_context),
        }

    def text(self) -> str:
        """Aligned text: one line per condition, the paired tests, and the sweep when there is one."""
        made = (f"mlp[{self.layer}] of one solved prompt, replacing mlp[{max(self.layer - 1, 0)}..] but BOS" if self.protocol == "paper"
                else f"mean mlp[{self.layer}] of {len(self.source_arguments)} solved prompts, added at mlp[{self.layer}]")
        lines = [f"{self.task} o-vector x {self.scale:g} ({self.protocol}: {made}) on {self.n_pairs} pairs of {self.model} "
                 f"(without it the model repeats the argument of a copy context in {self.copy_without:.2f})"]
        for row in self.by_context[1:]:
            lines.append(f"{row['context']} contexts: " + ", ".join(f"{key} {row[f'accuracy_{key}']:.2f}" for key, _ in self.CONDITIONS[:4])
                         + f"; p over every control {row['p_over_every_control']:.2g}")
        lines.append(f"{self.by_context[0]['context'] if self.by_context else 'copy'} contexts: {'condition':<26} accuracy  answer RR")
        for key, label in self.CONDITIONS:
            accuracy, rr = self.condition(key)
            label = f"{label} ({self.transfer_argument})" if key == "transfer" else f"{label} ({self.other_task})" if key == "other_task" else label
            lines.append(f"{label:<26} {accuracy:8.2f}  {rr:9.3f}")
        first = self.by_context[0] if self.by_context else {"p_vs_without": float("nan"), "p_over_every_control": float("nan")}
        lines.append(f"paired exact test, o-vector above: no vector p = {first['p_vs_without']:.2g}, other task p = {self.p_vs_other_task:.2g}, "
                     f"random p = {self.p_vs_random:.2g}; every control p = {first['p_over_every_control']:.2g}")
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
            title = f"{self.task} o-vector x {self.scale:g} ({self.protocol}), {self.model}"
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


def _pairs(bound: BoundTask, n_source: int, n_pairs: int, seed: int, transfer_from: str | None) -> tuple[list[int], list[int]]:
    """(source pool, evaluation pairs) from the seeded order, `transfer_from`'s pair first in the pool when given."""
    order = pair_order(bound, seed)
    if transfer_from is not None:
        arguments = [pair.argument for pair in bound.pairs]
        if transfer_from not in arguments:
            raise LincorrError(f"'{transfer_from}' is not a kept argument of task '{bound.name}' for this tokenizer; pick one of {', '.join(arguments[:8])} …")
        order.remove(arguments.index(transfer_from))
        order.insert(0, arguments.index(transfer_from))
    pool, evaluation = order[:3 * n_source], order[3 * n_source:][:n_pairs]
    if not evaluation:
        raise LincorrError(f"task '{bound.name}' keeps {len(order)} pairs for this tokenizer, too few for {3 * n_source} source prompts and an evaluation; lower n_source")
    return pool, evaluation


def _context_row(context: str, outcomes: dict[str, TaskScores]) -> dict:
    """One context's accuracies, RRs, argument repeats and paired p-values (`protocol.over_every_control`)."""
    right = {key: scores.answer_rank[:, -1] == 0 for key, scores in outcomes.items()}
    return {
        "context": context, **{f"accuracy_{key}": scores.accuracy() for key, scores in outcomes.items()},
        **{f"rr_{key}": float(scores.answer_rr()[-1]) for key, scores in outcomes.items()},
        "repeat_without": float((outcomes["without"].argument_rank[:, -1] == 0).mean()),
        "repeat_with": float((outcomes["with"].argument_rank[:, -1] == 0).mean()), **over_every_control(right),
    }


def ovector(lm: LM, task: TaskSpec, layer: int, *, control: TaskSpec | None = None, protocol: str = "averaged",
            contexts: Sequence[str] = ("copy",), scale: float | None = None, n_source: int = 8, n_pairs: int = 64, sweep: bool = False,
            transfer_from: str | None = None, seed: int = 0, batch_size: int = 16) -> OVectorResult:
    """Apply the task's o-vector from `mlp[layer]` by `protocol` to the `contexts` of `n_pairs` pairs, with controls.

    Sources come from a pool of `3 * n_source` few-shot prompts: the paper's protocol takes one
    solved prompt's `mlp[layer]` (`transfer_from`'s, default the first solved), the averaged one the
    mean over the first `n_source` solved. `scale` defaults to `protocol.default_scale`. Controls:
    no vector, the o-vector of `control` (default `other_task(task)`) made the same way, and a
    seeded random vector of the o-vector's norm. The transfer condition applies one pair's vector
    (`transfer_from`, default the first solved source). `sweep` repeats the o-vector condition from every layer.
    """
    started = time.perf_counter()
    check_layer(lm, layer, "o-vector layer")
    scale = default_scale(protocol) if scale is None else scale
    bound, control = bind_task(task, lm.tokenizer), control or other_task(task)
    pool, evaluation = _pairs(bound, n_source, n_pairs, seed, transfer_from)
    prompts = context_prompts(bound, evaluation, contexts)
    vectors = o_vectors(lm, bound, pool, seed=seed, batch_size=batch_size)
    control_bound = bind_task(control, lm.tokenizer)
    control_vectors = o_vectors(lm, control_bound, pair_order(control_bound, seed)[:3 * n_source], seed=seed, batch_size=batch_size)
    row = 0 if transfer_from is not None else int(np.flatnonzero(vectors.solved)[0])
    n_layers = layout(lm).n_layers

    def scored(context: str, vector: np.ndarray | None, at: int = layer) -> TaskScores:
        return score_prompts(lm, bound, evaluation, prompts[context], layers=[n_layers], batch_size=batch_size,
                             interventions=o_interventions(protocol, at, n_layers, vector, scale))

    vector = vectors.vector(protocol, layer, n_source, row)
    control_vector = control_vectors.vector(protocol, layer, n_source, int(np.flatnonzero(control_vectors.solved)[0]))
    random = np.random.default_rng(seed).standard_normal(vector.shape).astype(np.float32)
    random *= np.linalg.norm(vector) / np.linalg.norm(random)
    applied = {"with": vector, "without": None, "other_task": control_vector, "random": random, "transfer": vectors.outputs[row, layer]}
    by_context = tuple(_context_row(context, {key: scored(context, v) for key, v in applied.items()}) for context in prompts)
    first = by_context[0]
    per_layer = []
    for at in progress_bar(range(n_layers) if sweep else (), desc="sweep", unit="layer"):
        swept = scored(first["context"], vectors.vector(protocol, at, n_source, row), at)
        per_layer.append({"layer": at, "accuracy_with": swept.accuracy(), "rr_with": float(swept.answer_rr()[-1])})
    sources = [pool[row]] if protocol == "paper" else vectors.sources(n_source)
    return OVectorResult(
        task=task.name, other_task=control.name, model=lm.name, model_fingerprint=lm.fingerprint, layer=layer, scale=scale,
        n_pairs=len(evaluation), source_arguments=tuple(bound.pairs[i].argument for i in sources), transfer_argument=bound.pairs[pool[row]].argument,
        **{f"{what}_{key}": first[f"{what}_{key}"] for what in ("accuracy", "rr") for key in CONTROLS + ("with",)},
        transfer_accuracy=first["accuracy_transfer"], transfer_rr=first["rr_transfer"], copy_without=first["repeat_without"],
        copy_with=first["repeat_with"], p_vs_other_task=first["p_vs_other_task"], p_vs_random=first["p_vs_random"],
        norm=float(scale * np.linalg.norm(vector)), other_norm=float(scale * np.linalg.norm(control_vector)), per_layer=tuple(per_layer),
        example_prompt=prompts[first["context"]][0], protocol=protocol, by_context=by_context,
        settings={"layer": layer, "scale": scale, "n_source": n_source, "n_pairs": n_pairs, "sweep": sweep, "transfer_from": transfer_from,
                  "control": control.name, "seed": seed, "protocol": protocol, "contexts": list(prompts)},
        seconds=time.perf_counter() - started,
    )
