"""Extractive scores (Feng et al. §4, eqs. 1-6, Fig. 3): where fine-tuning stores a fact and what extracts it.

For every MLP (`mlp[l]`, its output as added to the residual stream) and attention head
(`head[l,h]`, query head h before the output projection) c, with original weights W, fine-tuned
weights W', output y_c = f_c(z_c, W_c) at every position of an implication prompt:

- reward R = z_answer - mean_j z_j over the candidate answers' first-token logits z (higher is
  better; the positive version), averaged over the implication prompts;
- informative  I_c = dR/dW_c . (W'_c - W_c)                                      (eq. 4)
- downstream   D_c = dR/dy_c . (f_c(z'_c, W_c) - y_c), z'_c the input of c in the fine-tuned model (eq. 5)
- upstream     U_c = (dR/dy_c[W_late <- W'_late] - dR/dy_c) . (y_c - y*_c)        (eq. 6)

Dots sum over features; over positions they are kept apart by token role (Fig. 3: the subject's
tokens, the other tokens, the last token; `positions.ROLES`), and each score is the sum of its roles.
The informative score splits by where c's weights are used (`positions.weight_steps`). "Late" is every component after c in the forward order:
for mlp[l] the blocks after l, for head[l,h] block l's MLP and the blocks after l. Parameters
outside the blocks (embeddings, final norm) keep their original values in the late-weight model;
the default training (`extractive.SMALL_TRAIN`) does not change them. y*_c is the dataset mean
of y_c at each position counted from the prompt's end, over the prompts that reach it.

A head's weights W_c are its query rows, its key/value head's rows and the output-projection
columns that read it (`internals.head_indices`); with grouped-query attention the key/value rows
are shared, so the heads of one group all count them.

The paper's decomposition: for W' = W + t D, (I_c + D_c + U_c) / t -> d/dt [dR/dy_c . (y_c - y*_c)]
as t -> 0 (gradient under the moved late weights at the original activations, y_c under the
moved earlier and own weights, y* fixed). It needs c's weights to reach R only through y_c: true
for MLPs, and for heads only with their own key/value head and unchanged projection columns
(those act after y_c, which is taken before the projection). tests/test_extractive.py checks it there.

Cost: one backward through the original model per batch gives dR/dy_c for every component and
dR/dW for every parameter (informative and downstream); the downstream inputs z'_c come from one
forward of the fine-tuned model and one of the original model with every sub-layer input
replaced. Upstream needs the gradient under each late-weight model: one backward per split point
(2 per block), shared by the components at that point. `exact_scores` computes eqs. 1-3 by
intervention, one component at a time, to check the linearisation.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import ClassVar, cast
import time
from collections.abc import Sequence

import numpy as np
import torch

from lincorr.errors import LincorrError
from lincorr.studies.extractive.ocr import (
    OcrConfig, QuerySet, hop_data, load_world, train_and_measure, training_settings,
)
from lincorr.internals import Component, Patch, head, layout, mlp, run
from lincorr.internals.trace import NO_TOKENS
from lincorr.studies.extractive.positions import PADDING, ROLES, role_sums, token_roles, weight_steps
from lincorr.studies.extractive.score_figures import plot_linearization, plot_role_grids, plot_score_grids
from lincorr.studies.extractive.slices import Slices, component_weights, mixed_copy, shifted_outputs, weights_from
from lincorr.metrics import pearson
from lincorr.models import LM
from lincorr.outputs import settings_key, staged_directory, write_csv, write_json
from lincorr.results import Stored, record

__all__ = [
    "SCORES", "ScoresConfig", "ScoresResult", "score_components", "checked_components", "linearized_scores", "exact_scores", "rewards",
    "measure_scores", "scores_from_models", "component_grid",
]

SCORES = ("informative", "downstream", "upstream")


def score_components(lm: LM) -> list[Component]:
    """Every MLP and query head, block by block: `mlp[l]`, `head[l,0]` .. `head[l,H-1]`."""
    parts = layout(lm)
    return [c for l in range(parts.n_layers) for c in [mlp(l)] + [head(l, h) for h in range(parts.n_heads)]]


def rewards(logits: torch.Tensor, answers: torch.Tensor) -> torch.Tensor:
    """R per prompt from candidate logits `[n, k]` and right columns `[n]`: z_answer - mean_j z_j, `[n]`."""
    logits = _wide(logits)
    return logits[torch.arange(len(answers), device=logits.device), answers.to(logits.device)] - logits.mean(1)


def _wide(tensor: torch.Tensor) -> torch.Tensor:
    """float32 for sums over many terms (bfloat16 would lose them), float64 kept (the tests' exact checks)."""
    return tensor if tensor.dtype == torch.float64 else tensor.float()


def _real(tensor: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """`tensor [b, w, d]` with padding columns zeroed (whatever a padded position computed, even NaN)."""
    return torch.where(mask.to(tensor.device, torch.bool)[..., None], tensor, torch.zeros((), dtype=tensor.dtype, device=tensor.device))


def _right_aligned_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of left-padded `values [n, w, d]` over the real rows of each column: `[w, d]`."""
    counts = mask.to(values.device, values.dtype).sum(0).clamp(min=1)[:, None]
    return _real(values, mask).sum(0) / counts


def _chunks(queries: QuerySet, batch_size: int, roles: torch.Tensor | None = None) -> list[tuple]:
    """(prompts, answers `[b]`) per batch, with the batch's columns of `roles` `[b, w]` (left-padded to its own width) when given."""
    answers = torch.tensor(queries.answers)
    chunks: list[tuple] = []
    for s in range(0, len(queries), batch_size):
        prompts = list(queries.prompts[s:s + batch_size])
        if roles is None:
            chunks.append((prompts, answers[s:s + batch_size]))
        else:
            rows = roles[s:s + batch_size]
            width = int((rows != PADDING).sum(1).max())
            chunks.append((prompts, answers[s:s + batch_size], rows[:, rows.shape[1] - width:]))
    return chunks


def linearized_scores(original: LM, tuned: LM, queries: QuerySet, *, components: Sequence[Component | str] | None = None,
                      upstream: bool = True, batch_size: int = 32) -> dict[str, np.ndarray]:
    """Eqs. 4-6 averaged over `queries`, by token role and summed.

    For each key of `SCORES`: `f"{key}_by_role"` `[n_components, len(ROLES)]` (the positions of each
    role of `positions.ROLES`; the subjects are `queries.subjects`), `key` `[n_components]`, its sum
    over the roles, and `f"{key}_by_prompt"` `[n_prompts, n_components, len(ROLES)]`, each prompt's own
    share (not divided by the number of prompts: the mean over prompts is `{key}_by_role`), so a
    test can resample the prompts. `components` default to `score_components(original)`; `upstream=False` skips the
    per-split backward passes (the entries are then NaN). `original` and `tuned` must share an architecture.
    """
    chosen = [Component.parse(c) if isinstance(c, str) else c for c in (components or score_components(original))]
    token_ids = torch.tensor(queries.candidates.token_ids)
    weights = [component_weights(original, c) for c in chosen]
    _check_same_shapes(original, tuned, weights)
    full = run(original, list(queries.prompts), capture=chosen, positions="all", token_ids=NO_TOKENS, batch_size=batch_size)
    y_star = {c: _right_aligned_mean(_wide(full[c]), full.attention_mask) for c in chosen}
    roles = token_roles(original, queries.prompts, queries.subjects)
    by_prompt = {key: torch.zeros(len(queries), len(chosen), len(ROLES), dtype=torch.float64) for key in SCORES}
    saved = []  # per chunk: (activations y, gradients dR/dy), both {c: [b, w, d]}, the mask and the roles [b, w]
    with weight_steps(original, tuned, weights) as steps:
        for start, (prompts, answers, chunk_roles) in zip(range(0, len(queries), batch_size), _chunks(queries, batch_size, roles)):
            rows = slice(start, start + len(prompts))
            shifted = shifted_outputs(original, tuned, prompts, chosen, batch_size=len(prompts))
            steps.clear()
            trace = run(original, prompts, capture=chosen, positions="all", token_ids=token_ids, grad=True)
            mask = trace.attention_mask
            grads = torch.autograd.grad(rewards(trace.logits, answers).sum(),
                                        [trace[c] for c in chosen] + [steps[i] for i in range(len(chosen))])
            activation_grads = {c: _real(_wide(g), mask) for c, g in zip(chosen, grads)}
            values = {c: _wide(trace[c].detach()) for c in chosen}
            for i, c in enumerate(chosen):
                by_prompt["informative"][rows, i] = role_sums(_real(grads[len(chosen) + i][..., None], mask)[..., 0], chunk_roles)
                by_prompt["downstream"][rows, i] = role_sums((activation_grads[c] * _real(_wide(shifted[c]) - values[c], mask)).sum(-1),
                                                             chunk_roles)
            saved.append((values, activation_grads, mask, chunk_roles))
    if upstream:
        _upstream(original, tuned, queries, chosen, saved, y_star, token_ids, batch_size, by_prompt["upstream"])
    else:
        by_prompt["upstream"].fill_(float("nan"))
    scores = {f"{key}_by_role": (by_prompt[key].sum(0) / len(queries)).numpy() for key in SCORES}
    return {**{key: scores[f"{key}_by_role"].sum(1) for key in SCORES}, **scores,
            **{f"{key}_by_prompt": by_prompt[key].numpy() for key in SCORES}}


def _check_same_shapes(original: LM, tuned: LM, weights: Sequence[Slices]) -> None:
    own, other = dict(original.model.named_parameters()), dict(tuned.model.named_parameters())
    missing = [n for w in weights for n in w if n not in other or other[n].shape != own[n].shape]
    if missing:
        raise LincorrError(f"the fine-tuned model lacks {missing[0]} (or its shape differs); score a fine-tuned copy of the same model")


def _split_points(original: LM, components: Sequence[Component]) -> list[tuple[list[int], list[Slices]]]:
    """Upstream's late-weight models, last first: (indices of the components scored there, weights to make fine-tuned after).

    Walking back through the blocks, mlp[l] is scored with the blocks after l fine-tuned, then
    block l's FFN joins the late weights, the heads of block l are scored, and block l's attention joins.
    """
    by_point: dict[tuple[int, int], list[int]] = {}
    for i, c in enumerate(components):
        by_point.setdefault((c.layer, 1 if c.kind == "mlp" else 0), []).append(i)
    n_layers = layout(original).n_layers
    points = []
    for layer in reversed(range(n_layers)):
        for stage, kind in ((1, "mlp"), (0, "attn")):
            then_late = [component_weights(original, Component(kind, layer))]
            points.append((by_point.get((layer, stage), []), then_late))
    return points


def _upstream(original, tuned, queries, components, saved, y_star, token_ids, batch_size, upstream: torch.Tensor) -> None:
    """Eq. 6 by prompt and role into `upstream` `[n_prompts, n_components, len(ROLES)]`."""
    hybrid = mixed_copy(original)
    chunks = _chunks(queries, batch_size)
    with contextlib.ExitStack() as late:
        for indices, then_late in _split_points(original, components):
            if indices:
                scored = [components[i] for i in indices]
                for start, (prompts, answers), (values, base_grads, mask, roles) in zip(range(0, len(queries), batch_size), chunks, saved):
                    trace = run(hybrid, prompts, capture=scored, positions="all", token_ids=token_ids, grad=True)
                    grads = torch.autograd.grad(rewards(trace.logits, answers).sum(), [trace[c] for c in scored])
                    width = mask.shape[1]
                    for i, c, g in zip(indices, scored, grads):
                        centred = _real(values[c] - y_star[c][-width:], mask)
                        upstream[start:start + len(prompts), i] = role_sums(((_real(_wide(g), mask) - base_grads[c]) * centred).sum(-1),
                                                                            roles)
            late.enter_context(weights_from(hybrid.model, tuned.model, then_late))


def _mean_reward(lm: LM, queries: QuerySet, token_ids: torch.Tensor, interventions=(), batch_size: int = 32) -> float:
    logits = run(lm, list(queries.prompts), interventions=interventions, token_ids=token_ids, batch_size=batch_size).logits
    return float(rewards(logits, torch.tensor(queries.answers)).mean())


def exact_scores(original: LM, tuned: LM, queries: QuerySet, components: Sequence[Component | str], *,
                 batch_size: int = 32) -> dict[str, np.ndarray]:
    """Eqs. 1-3 by intervention, one component at a time: {"informative", "downstream", "upstream"} each `[n_components]`.

    informative: R with c's weights fine-tuned minus R; downstream: R with y_c replaced by
    f_c(z'_c, W_c) minus R; upstream: the drop from mean-ablating y_c (to y*_c) with the late
    weights fine-tuned, minus the same drop with the original weights (the late split as above).
    """
    chosen = [Component.parse(c) if isinstance(c, str) else c for c in components]
    token_ids = torch.tensor(queries.candidates.token_ids)
    prompts = list(queries.prompts)
    base = _mean_reward(original, queries, token_ids, batch_size=batch_size)
    full = run(original, prompts, capture=chosen, positions="all", token_ids=NO_TOKENS, batch_size=batch_size)
    shifted = shifted_outputs(original, tuned, prompts, chosen, batch_size)
    hybrid = mixed_copy(original)
    out = {key: np.zeros(len(chosen)) for key in SCORES}
    for i, c in enumerate(chosen):
        with weights_from(hybrid.model, tuned.model, [component_weights(original, c)]):
            out["informative"][i] = _mean_reward(hybrid, queries, token_ids, batch_size=batch_size) - base
        out["downstream"][i] = _mean_reward(original, queries, token_ids, [Patch(c, shifted[c], "all")], batch_size) - base
        mean = _right_aligned_mean(_wide(full[c]), full.attention_mask).to(full[c].dtype)
        ablated = _mean_reward(original, queries, token_ids, [Patch(c, mean, "all")], batch_size)
        with weights_from(hybrid.model, tuned.model, _latecomponent_weights(original, c)):
            late = _mean_reward(hybrid, queries, token_ids, batch_size=batch_size)
            late_ablated = _mean_reward(hybrid, queries, token_ids, [Patch(c, mean, "all")], batch_size)
        out["upstream"][i] = (late - late_ablated) - (base - ablated)
    return out


def _latecomponent_weights(lm: LM, component: Component) -> list[Slices]:
    """The weights after `component` in the forward order (see the module docstring)."""
    n_layers = layout(lm).n_layers
    later = [Component(kind, l) for l in range(component.layer + 1, n_layers) for kind in ("attn", "mlp")]
    if component.kind == "head":
        later.insert(0, mlp(component.layer))
    return [component_weights(lm, c) for c in later]


def component_grid(lm: LM, components: Sequence[Component], values: np.ndarray) -> np.ndarray:
    """Per-component values `[n_components]` as a heatmap `[n_layers, 1 + n_heads]`: column 0 the MLP, then heads (NaN: not scored)."""
    parts = layout(lm)
    grid = np.full((parts.n_layers, 1 + parts.n_heads), np.nan)
    for c, value in zip(components, values):
        grid[c.layer, 0 if c.kind == "mlp" else 1 + cast(int, c.head)] = value  # else a head
    return grid


def checked_components(lm: LM, n_checked: int) -> list[Component]:
    """About `n_checked` components for the linearisation check: MLPs and heads (half each) at evenly spaced layers."""
    parts = layout(lm)
    if n_checked <= 0:
        return []
    layers = np.unique(np.linspace(0, parts.n_layers - 1, max(n_checked // 2, 1)).round().astype(int))
    heads = [head(int(l), i % parts.n_heads) for i, l in enumerate(layers)]
    return [mlp(int(l)) for l in layers] + heads


@dataclasses.dataclass(frozen=True)
class ScoresConfig:
    """The update to score (dataset and training, as in the OCR study), how many components to check by intervention, the batch size."""

    update: OcrConfig = OcrConfig()
    n_checked: int = 12
    batch_size: int = 32


@dataclasses.dataclass(frozen=True)
class ScoresResult(Stored):
    """The three linearised scores per layer and component (Fig. 3) and the check against their exact versions."""

    study: ClassVar[str] = "extractive-scores"

    model_name: str
    config: ScoresConfig
    component_names: tuple[str, ...]  # heatmap columns: "mlp", "head 0", ...
    grids: dict  # score -> [n_layers, n_columns]
    checked: tuple[str, ...]
    linear_checked: dict  # score -> [n_checked], the linearised values of the checked components
    exact_checked: dict  # score -> [n_checked], eqs. 1-3
    mean_ranks: dict  # fact/implication mean rank before and after training
    training: dict
    seconds_train: float
    seconds_scores: float
    seconds_check: float
    role_grids: dict = dataclasses.field(default_factory=dict)  # score -> [n_roles, n_layers, n_columns] by `ROLES`; sums to grids

    def linearization_r(self) -> dict:
        """Pearson r of exact against linearised scores over the checked components, per score."""
        return {key: pearson(self.exact_checked[key], self.linear_checked[key]) for key in SCORES}

    def summary(self) -> dict:
        """The JSON contract of `lincorr extractive scores --json`."""
        n_layers = next(iter(self.grids.values())).shape[0]
        return {
            "hop": self.config.update.hop, "model": self.model_name, "reward": "R = z_answer - mean_j z_j over the candidates' first-token logits",
            "layers": list(range(n_layers)), "components": list(self.component_names),
            **{key: [[None if np.isnan(v) else float(v) for v in row] for row in self.grids[key]] for key in SCORES},
            "linearization_r": self.linearization_r(), "n_checked": len(self.checked),
            "checked": [{"component": c, **{f"{key}_linear": float(self.linear_checked[key][i]) for key in SCORES},
                         **{f"{key}_exact": float(self.exact_checked[key][i]) for key in SCORES}} for i, c in enumerate(self.checked)],
            **self.mean_ranks, "n_facts": self.config.update.n_facts, "seed": self.config.update.seed, "training": self.training,
            "seconds_train": self.seconds_train, "seconds_scores": self.seconds_scores, "seconds_check": self.seconds_check,
            **({"roles": list(ROLES), "by_role": {key: _json_grid(grids) for key, grids in self.role_grids.items()}} if self.role_grids else {}),
        }

    def role_mass(self) -> dict:
        """Per score and token role, the sum over the MLPs and over the heads: {score: {role: {"mlp": x, "heads": y}}}."""
        return {key: {role: {"mlp": float(np.nansum(grids[r][:, 0])), "heads": float(np.nansum(grids[r][:, 1:]))}
                      for r, role in enumerate(ROLES)} for key, grids in self.role_grids.items()}

    def top(self, key: str, k: int = 5) -> list[tuple[str, float]]:
        """The `k` components with the largest score."""
        grid = self.grids[key]
        order = np.argsort(-np.nan_to_num(grid, nan=-np.inf), axis=None)[:k]
        return [(f"head[{i},{j - 1}]" if j else f"mlp[{i}]", float(grid[i, j])) for i, j in zip(*np.unravel_index(order, grid.shape))]

    def text(self) -> str:
        """The top components of each score and the linearisation check."""
        r = self.linearization_r()
        lines = [f"{self.config.update.hop}-hop extractive scores on {self.model_name} (implication mean rank "
                 f"{self.mean_ranks['implication_mean_rank_before']:.2f} -> {self.mean_ranks['implication_mean_rank_after']:.2f})"]
        for key in SCORES:
            top = ", ".join(f"{name} {value:+.3f}" for name, value in self.top(key))
            lines.append(f"{key:<12} top: {top}")
        for key, by_role in self.role_mass().items():
            lines.append(f"{key:<12} by role, MLPs / heads: " + ", ".join(f"{role} {m['mlp']:+.3f} / {m['heads']:+.3f}" for role, m in by_role.items()))
        lines.append("linearisation r over " + str(len(self.checked)) + " components: "
                     + ", ".join(f"{key} {r[key]:.3f}" for key in SCORES))
        return "\n".join(lines)

    def save(self, directory) -> None:
        """scores.json (summary), scores.csv (one row per layer, component and score), scores.png, linearization.png,
        and with scores by role scores_by_role.csv and scores_by_role.png (Fig. 3's grid)."""
        title = f"{self.config.update.hop}-hop update, {self.model_name}"
        with staged_directory(directory) as out:
            record(out, self, settings=settings_key(self.config))
            write_json(out / "scores.json", self.summary())
            rows = [[key, layer, name, float(self.grids[key][layer, j])]
                    for key in SCORES for layer in range(self.grids[key].shape[0]) for j, name in enumerate(self.component_names)]
            write_csv(out / "scores.csv", ["score", "layer", "component", "value"], rows)
            plot_score_grids(out / "scores.png", self.grids, self.component_names, title)
            if self.checked:
                plot_linearization(out / "linearization.png", self.linear_checked, self.exact_checked, self.linearization_r())
            if self.role_grids:
                rows = [[key, role, layer, name, float(grids[r, layer, j])] for key, grids in self.role_grids.items()
                        for r, role in enumerate(ROLES) for layer in range(grids.shape[1]) for j, name in enumerate(self.component_names)]
                write_csv(out / "scores_by_role.csv", ["score", "role", "layer", "component", "value"], rows)
                plot_role_grids(out / "scores_by_role.png", self.role_grids, self.component_names, title)


def _json_grid(values: np.ndarray) -> list:
    """An array as nested lists, NaN (not scored) as null."""
    return np.where(np.isnan(values), None, values).tolist()  # type: ignore[call-overload]  # numpy's stub refuses None, JSON's null


def scores_from_models(original: LM, tuned: LM, queries: QuerySet, *, n_checked: int = 12, upstream: bool = True,
                       batch_size: int = 32) -> tuple[list[Component], dict, list[Component], dict, dict, float, float]:
    """Linearised scores of every component and exact ones of `checked_components(n_checked)`.

    Returns (components, scores, checked, linearised scores of the checked, exact scores of the checked, seconds
    for the scores, seconds for the check).
    """
    started = time.perf_counter()
    components = score_components(original)
    scores = linearized_scores(original, tuned, queries, components=components, upstream=upstream, batch_size=batch_size)
    seconds_scores = time.perf_counter() - started
    checked = checked_components(original, n_checked)
    index = {c: i for i, c in enumerate(components)}
    linear = {key: np.array([scores[key][index[c]] for c in checked]) for key in SCORES}
    exact = exact_scores(original, tuned, queries, checked, batch_size=batch_size) if checked else {k: np.zeros(0) for k in SCORES}
    return components, scores, checked, linear, exact, seconds_scores, time.perf_counter() - started - seconds_scores


def measure_scores(lm: LM, registry, config: ScoresConfig = ScoresConfig()) -> ScoresResult:
    """Fine-tune on the update's facts, then score every MLP and head on the implications and check a subset by intervention."""
    update = config.update
    data = hop_data(load_world(registry), lm.tokenizer, update.hop, update.n_facts, update.seed, update.templates)
    started = time.perf_counter()
    tuned, per_epoch, _ = train_and_measure(lm, data, update.train)
    seconds_train = time.perf_counter() - started
    components, scores, checked, linear, exact, seconds_scores, seconds_check = scores_from_models(
        lm, tuned, data.implications, n_checked=config.n_checked, batch_size=config.batch_size)
    mean_ranks = {f"{kind}_mean_rank_{when}": row[f"{kind}_mean_rank"] for kind in ("fact", "implication")
                  for when, row in (("before", per_epoch[0]), ("after", per_epoch[-1]))}
    n_heads = layout(lm).n_heads
    return ScoresResult(
        model_name=lm.name, config=config, component_names=("mlp",) + tuple(f"head {h}" for h in range(n_heads)),
        grids={key: component_grid(lm, components, scores[key]) for key in SCORES}, checked=tuple(str(c) for c in checked),
        role_grids={key: np.stack([component_grid(lm, components, scores[f"{key}_by_role"][:, r]) for r in range(len(ROLES))]) for key in SCORES},
        linear_checked=linear, exact_checked=exact, mean_ranks=mean_ranks, training=training_settings(update.train),
        seconds_train=seconds_train, seconds_scores=seconds_scores, seconds_check=seconds_check,
    )
