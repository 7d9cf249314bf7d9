"""Gradient correlation (§4.1, Table 4): does one optimiser step on source facts move target logits as W predicts?

After one AdamW step on "source_template(x_j) s_j" for training inputs x_j, the source-domain
logits of held-out inputs change by dS `[n_eval, n_source]` and the target-domain logits by dT
`[n_eval, n_target]`; if the update travels through the linear correlation, dS @ W predicts dT
(the paper's "W · ∇LogP" estimate of the target gradient from the source gradient).

Measured two ways. The paper's: label-wise r of dS @ W against dT, beside W with its rows
shuffled. A step also shifts every logit of an input by about the same amount, and a shuffled W
keeps its column sums, so a common shift makes the control as high as the measurement and can
hide or fake the effect. Ours: the same with each input's changes centred over its domain first
(what moves one answer against the others), where a common shift contributes nothing, and a
permutation p-value over row shuffles.
"""

from __future__ import annotations

import dataclasses
import time
from typing import ClassVar

import numpy as np

from lincorr.errors import LincorrError
from lincorr.cache import stored_row
from lincorr.collection import CollectSettings, entity_logits
from lincorr.fit import FitConfig, fit_relation
from lincorr.finetune import Fact, TrainConfig, single_step
from lincorr.metrics import labelwise_pearson, summarize
from lincorr.models import LM, wrap_model
from lincorr.outputs import settings_key, staged_directory, write_json
from lincorr.paper import paper_table
from lincorr.relations import RelationSpec, study_key
from lincorr.results import Stored, record
from lincorr.templates import fill

__all__ = [
    "ChangeCorrelation", "GradientConfig", "GradientCorrelation", "GradientTable", "centred_per_input", "gradient_correlation_from_changes", "measure_gradient_correlation", "measure_table4",
]


@dataclasses.dataclass(frozen=True)
class GradientConfig:
    """One step on `n_step_facts` training inputs, scored on `n_eval` held-out inputs; the paper's AdamW at 5e-6."""

    n_inputs: int = 1000
    n_step_facts: int = 32
    n_eval: int = 200
    fit: FitConfig = FitConfig(estimator="ridge", alpha="cv", n_boot=100)
    train: TrainConfig = TrainConfig(learning_rate=5e-6, batch_size=8, blocks_only=True)
    n_control: int = 200  # row shuffles of W: cheap, and enough for a p-value down to 1/201
    seed: int = 0


@dataclasses.dataclass(frozen=True)
class GradientCorrelation:
    """Label-wise r of dS @ W against dT on held-out inputs, beside a row-shuffled W and the logit correlation."""

    label: str
    model_name: str
    source: str
    target: str
    logit_r: float  # label-wise r of W on held-out logits (the usual fit)
    gradient_r: float  # the paper's: changes as they are
    control_r: float  # mean over W's with permuted rows
    labelwise_gradient_r: np.ndarray  # [n_target]
    centred_gradient_r: float  # ours: each input's changes centred over its domain
    centred_control_r: float
    centred_p_value: float  # share of row shuffles whose centred r reaches the observed one (the observed counted in)
    mean_abs_source_change: float
    mean_abs_target_change: float
    config: GradientConfig
    seconds: float
    n_constant_targets: int  # target words left out of logit_r (constant on the held-out inputs)

    @property
    def n_undefined_gradient_targets(self) -> int:
        """Target words whose change after the step has no r (constant over the evaluation inputs), left out of gradient_r."""
        return int(np.isnan(self.labelwise_gradient_r).sum())

    def summary(self) -> dict:
        """JSON-ready numbers and settings."""
        return {
            "relation": self.label, "model": self.model_name, "source": self.source, "target": self.target,
            "logit_r": self.logit_r, "gradient_r": self.gradient_r, "control_r": self.control_r,
            "centred_gradient_r": self.centred_gradient_r, "centred_control_r": self.centred_control_r,
            "centred_p_value": self.centred_p_value, "n_control": self.config.n_control,
            "n_constant_targets": self.n_constant_targets, "n_undefined_gradient_targets": self.n_undefined_gradient_targets,
            "mean_abs_source_change": self.mean_abs_source_change, "mean_abs_target_change": self.mean_abs_target_change,
            "n_step_facts": self.config.n_step_facts, "n_eval": self.config.n_eval, "n_inputs": self.config.n_inputs,
            "learning_rate": self.config.train.learning_rate, "trainable": self.config.train.trained_parts(),
            "max_grad_norm": self.config.train.max_grad_norm,
            "estimator": self.config.fit.estimator, "seed": self.config.seed, "seconds": self.seconds,
        }

    def to_row(self) -> dict:
        """The summary plus the per-target r: everything `from_row` needs."""
        return self.summary() | {"labelwise_gradient_r": self.labelwise_gradient_r.tolist()}

    @classmethod
    def from_row(cls, row: dict, config: GradientConfig) -> GradientCorrelation:
        """Rebuild a stored result (the settings are the caller's: they are part of the row's key)."""
        return cls(
            label=row["relation"], model_name=row["model"], source=row["source"], target=row["target"], logit_r=row["logit_r"],
            gradient_r=row["gradient_r"], control_r=row["control_r"], labelwise_gradient_r=np.array(row["labelwise_gradient_r"], float),
            mean_abs_source_change=row["mean_abs_source_change"], mean_abs_target_change=row["mean_abs_target_change"], config=config,
            centred_gradient_r=row["centred_gradient_r"], centred_control_r=row["centred_control_r"],
            centred_p_value=row["centred_p_value"], n_constant_targets=row["n_constant_targets"], seconds=row["seconds"],
        )


@dataclasses.dataclass(frozen=True)
class ChangeCorrelation:
    """How well dS @ W predicts dT: per target word, and the same with W's rows shuffled among source words."""

    labelwise: np.ndarray  # [n_target] r across the evaluation inputs (NaN for a word that did not move)
    control_means: np.ndarray  # [n_control] mean label-wise r of each row-shuffled W

    @property
    def r(self) -> float:
        return summarize(self.labelwise)["mean"]

    @property
    def control(self) -> float:
        return float(np.mean(self.control_means))

    @property
    def p_value(self) -> float:
        """Permutation p: the observed mean r counts as one of the shuffles it is compared with."""
        return float((1 + np.sum(self.control_means >= self.r)) / (1 + len(self.control_means)))


def centred_per_input(changes: np.ndarray) -> np.ndarray:
    """`[n, k]` changes minus each input's mean over its k domain words: a shift common to all of them is removed."""
    return changes - changes.mean(axis=1, keepdims=True)


def gradient_correlation_from_changes(W: np.ndarray, source_change: np.ndarray, target_change: np.ndarray, *, centred: bool = False,
                                      n_control: int = 200, seed: int = 0) -> ChangeCorrelation:
    """Label-wise r of `source_change @ W` against `target_change` `[n_eval, n_target]`, and with row-shuffled W's.

    `centred`: both changes centred per input first (ours); else as they are (the paper's).
    """
    if centred:
        source_change, target_change = centred_per_input(source_change), centred_per_input(target_change)
    rng = np.random.default_rng(seed)
    control = [np.nanmean(labelwise_pearson(source_change @ W[rng.permutation(W.shape[0])], target_change)) for _ in range(n_control)]
    return ChangeCorrelation(labelwise_pearson(source_change @ W, target_change), np.array(control))


def measure_gradient_correlation(lm: LM, registry, relation: RelationSpec, config: GradientConfig = GradientConfig(),
                                 settings: CollectSettings = CollectSettings()) -> GradientCorrelation:
    """Fit W, take one optimiser step on source facts with random source answers, and correlate dS @ W with dT."""
    started = time.perf_counter()
    relation = fit_relation(lm, registry, relation, n_inputs=config.n_inputs, fit=config.fit, settings=settings)
    inputs = relation.fit.source.inputs
    train_rows, test_rows = relation.fit.train_index, relation.fit.test_index
    if config.n_step_facts > train_rows.size or config.n_eval > test_rows.size:
        raise LincorrError(f"{config.n_step_facts} step facts and {config.n_eval} evaluation inputs need more inputs than {len(inputs)}; raise -n")
    rng = np.random.default_rng(config.seed)
    step_inputs = [inputs[i] for i in rng.choice(train_rows, config.n_step_facts, replace=False)]
    eval_inputs = [inputs[i] for i in rng.choice(test_rows, config.n_eval, replace=False)]
    answers = rng.choice(len(relation.source.domain), config.n_step_facts)
    facts = [Fact(fill(relation.source.template, x), relation.source.domain.words[a], relation.source.answer_prefix)
             for x, a in zip(step_inputs, answers)]

    before = [entity_logits(lm, p, eval_inputs) for p in (relation.source, relation.target)]
    stepped = single_step(lm.model, lm.tokenizer, facts, dataclasses.replace(config.train, seed=config.seed))
    tuned = wrap_model(stepped.model, lm.tokenizer, name=f"{lm.name}+step")
    after = [entity_logits(tuned, p, eval_inputs) for p in (relation.source, relation.target)]
    source_change, target_change = after[0] - before[0], after[1] - before[1]
    paper, ours = (gradient_correlation_from_changes(relation.fit.W, source_change, target_change, centred=centred,
                                                     n_control=config.n_control, seed=config.seed) for centred in (False, True))
    return GradientCorrelation(
        label=relation.label, model_name=lm.name, source=relation.source.name, target=relation.target.name, logit_r=relation.fit.labelwise_r_mean,
        gradient_r=paper.r, n_constant_targets=relation.fit.n_constant_targets, control_r=paper.control, labelwise_gradient_r=paper.labelwise,
        centred_gradient_r=ours.r, centred_control_r=ours.control, centred_p_value=ours.p_value,
        mean_abs_source_change=float(np.abs(source_change).mean()), mean_abs_target_change=float(np.abs(target_change).mean()),
        config=config, seconds=time.perf_counter() - started,
    )


@dataclasses.dataclass(frozen=True)
class GradientTable(Stored):
    """Table 4: one GradientCorrelation per relation, with the paper's numbers beside ours."""

    study: ClassVar[str] = "gradcorr"

    rows: tuple[GradientCorrelation, ...]
    skipped: tuple[tuple[str, str], ...]  # (relation, why)
    model_fingerprint: str = ""
    config: GradientConfig | None = None

    def summary(self) -> dict:
        paper = paper_table("table4")

        def with_paper(row: GradientCorrelation) -> dict:
            published = paper.row(row.label)
            return row.summary() | ({"paper_logit_r": published["logit_r"], "paper_gradient_r": published["gradient_r"],
                                     "paper_model": paper.model} if published else {})

        return {
            "rows": [with_paper(r) for r in self.rows],
            "skipped": [{"relation": label, "reason": why} for label, why in self.skipped],
        }

    @staticmethod
    def row_line(row: dict) -> str:
        """One finished row of `measure_table4` (its `on_row` argument) in one line."""
        done = (f"skipped: {row['skipped']}" if "skipped" in row else
                f"gradient r {row['gradient_r']:.2f} (control {row['control_r']:.2f}); centred {row['centred_gradient_r']:.2f} "
                f"(control {row['centred_control_r']:.2f}, p {row['centred_p_value']:.2g})")
        return f"{row['relation']}: {done}"

    def text(self) -> str:
        """Our logit and gradient correlation (and the shuffled-W control) next to the paper's, as a Markdown table."""
        paper = paper_table("table4")
        lines = [f"| relation | logit r | gradient r | control (shuffled W) | centred: gradient r | control | p "
                 f"| {paper.column_title} logit r | {paper.column_title} gradient r |",
                 "|---|---|---|---|---|---|---|---|---|"]
        for r in self.rows:
            published = paper.row(r.label)
            theirs = f"{published['logit_r']:.2f} | {published['gradient_r']:.2f}" if published else " | "
            lines.append(f"| {r.label} | {r.logit_r:.2f} | {r.gradient_r:.2f} | {r.control_r:.2f} | {r.centred_gradient_r:.2f} "
                         f"| {r.centred_control_r:.2f} | {r.centred_p_value:.2g} | {theirs} |")
        lines += [f"| {label} | skipped: {why} | | | | | | | |" for label, why in self.skipped]
        return "\n".join(lines)

    def save(self, directory) -> None:
        """gradcorr.json, table4.md and provenance.json."""
        with staged_directory(directory) as out:
            record(out, self, model_fingerprint=self.model_fingerprint, settings=settings_key(self.config) if self.config else None)
            write_json(out / "gradcorr.json", self.summary())
            (out / "table4.md").write_text(self.text() + "\n", encoding="utf-8")


def measure_table4(lm: LM, registry, relations=None, config: GradientConfig = GradientConfig(), settings: CollectSettings = CollectSettings(),
                   *, on_row=None) -> GradientTable:
    """Table 4 over `relations` (default: the paper's eight); a relation this tokenizer cannot express is skipped with its reason.

    Finished rows are stored in the cache, so an interrupted table resumes where it stopped.
    """
    rows, skipped = [], []
    for relation in relations or paper_table("table4").relations():
        key = {**study_key("gradcorr", lm.fingerprint, registry, relation, config), "collection": settings.key()}
        row = stored_row("gradcorr", key, relation.label, lambda: measure_gradient_correlation(lm, registry, relation, config, settings).to_row(),
                         use_cache=settings.use_cache)
        if "skipped" in row:
            skipped.append((relation.label, row["skipped"]))
        else:
            rows.append(GradientCorrelation.from_row(row, config))
        if on_row is not None:
            on_row(row)
    return GradientTable(tuple(rows), tuple(skipped), lm.fingerprint, config)
