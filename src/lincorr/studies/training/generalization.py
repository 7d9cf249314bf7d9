"""Generalization vs hallucination (§5, Table 6, Fig. 5): teach made-up entities a source fact, read their target answer.

Fresh made-up entities Z are taught a source fact ("Z lives in the city of Dresden") by the
shared training loop; the study then reads the top-1 target answer ("Z lives in the country
of ...") over the target domain and asks whether it is the reference answer (Germany). W and b,
fitted on the untouched model, predict that answer without training (`edit_prediction.predict_edit`), and the
study scores those predictions against what training did. Table 5 over the paper's relations is `table5.py`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Collection, Sequence
from typing import ClassVar

import numpy as np

from lincorr.collection import CollectSettings, entity_logits
from lincorr.errors import LincorrError
from lincorr.fit import FitConfig, fit_relation
from lincorr.finetune import Fact, TrainConfig, train_on_facts
from lincorr.metrics import chance_top1, rate, roc_auc
from lincorr.models import LM, wrap_model
from lincorr.names import pseudo_names
from lincorr.outputs import settings_key, staged_directory, write_json, write_text_atomic
from lincorr.prompts import Prompt
from lincorr.relations import BoundRelation, FittedRelation, RelationSpec
from lincorr.results import Stored, record
from lincorr.studies.training.edit_prediction import DEFAULT_MARGIN, STUDY_FIT, predict_from_logits
from lincorr.templates import fill

__all__ = [
    "DEFAULT_TRAIN", "TrainingPreset", "PAPER_MAX_EPOCHS", "PAPER_PRESET", "CATEGORIES", "GeneralizationConfig", "FactOutcome",
    "GeneralizationResult", "measure_generalization",
]


# Blocks only: the 168M-parameter embedding of gemma-3-270m-q4km would triple the optimiser's cost.
# 60x the paper's 5e-6: on gemma-3-270m-q4km, 5e-5 for 3 epochs learned 1-3 of 16 facts and 3e-4 for 6 epochs 15 of 16.
# Training stops once every taught fact is learned (`GeneralizationConfig.until_learned`); `epochs` is the cap: at
# 8 epochs, country facts were learned only 73% of the time. Gradients are clipped at norm 1 (TrainConfig's default).
DEFAULT_TRAIN = TrainConfig(learning_rate=3e-4, epochs=24, batch_size=4, blocks_only=True)


@dataclasses.dataclass(frozen=True)
class TrainingPreset:
    """A named training recipe laid over a study's own TrainConfig; `help` is what `--help` says about it."""

    name: str
    learning_rate: float
    blocks_only: bool
    max_epochs: int
    help: str

    def apply(self, train: TrainConfig) -> TrainConfig:
        """`train` with this preset's rate, parameters and epoch cap; batch size, clipping, schedule and seed stay the study's."""
        return dataclasses.replace(train, learning_rate=self.learning_rate, blocks_only=self.blocks_only, layers=None, trainable=(),
                                   epochs=self.max_epochs)


# Peng et al. §4.1 and §5 fine-tune llama-3.2-3b with "AdamW with 5e-6 learning rate" and say nothing of
# frozen parts or epochs, so: every parameter (embeddings and the tied unembedding included, which §6
# credits for generalization), until every taught fact is the source top-1. The cap only bounds a run
# that never gets there: on gemma-3-270m-q4km, City->Country (16 facts, seed 0) was learned in 6 epochs, and
# 50 is about 8x that (docs/results.md).
PAPER_MAX_EPOCHS = 50
PAPER_PRESET = TrainingPreset(
    name="paper", learning_rate=5e-6, blocks_only=False, max_epochs=PAPER_MAX_EPOCHS,
    help="the paper's training: every parameter (embeddings and tied unembedding included), AdamW lr 5e-6",
)


@dataclasses.dataclass(frozen=True)
class GeneralizationConfig:
    """Study settings: facts per seed, seeds, how W is fitted, how the model is trained, the prediction margin."""

    n_facts: int = 16
    seeds: tuple[int, ...] = (0, 1, 2)
    n_inputs: int = 1000
    fit: FitConfig = STUDY_FIT
    train: TrainConfig = DEFAULT_TRAIN
    margin: float = DEFAULT_MARGIN
    keep_subwords: bool = False
    until_learned: bool = True  # stop training after the first epoch at which every taught source answer is the top-1
    balance_categories: bool = False  # draw the taught answers evenly over the token categories of their references

    def __post_init__(self) -> None:
        if self.n_facts < 1 or not self.seeds:
            raise LincorrError("the generalization study needs n_facts >= 1 and at least one seed")


@dataclasses.dataclass(frozen=True)
class FactOutcome:
    """One edited fact: what was taught, what the model answered before and after, what W predicted, and why."""

    seed: int
    entity: str
    source_answer: str
    references: tuple[str, ...]
    reference_category: str  # token category of the (first) reference answer: whole_word / word_in_phrase / subword
    learned: bool  # after training, the source top-1 is the taught answer
    source_delta: float  # observed rise of the taught answer's source logit
    target_before: str
    generated: str  # target top-1 after training
    generalized_before: bool
    generalized: bool
    predicted: str
    predicted_confidence: float
    predicted_success: float  # predicted softmax mass on the reference answers
    w_ref: float  # W[s, ref] (the best alias)
    w_gen: float  # W[s, generated]
    w_max: float  # max W[s, :]
    bias_ref: float  # b[ref], the prior of the reference answer
    bias_gen: float
    category: str  # one of CATEGORIES
    # The same prediction with the rise calibrated on other facts' training (filled by `calibrate_predictions`).
    calibrated_delta: float = float("nan")
    predicted_calibrated: str = ""
    predicted_success_calibrated: float = float("nan")


CATEGORIES = ("generalized", "wrong weight", "low prior", "unexplained", "not learned")


def diagnose(generalized: bool, learned: bool, w_ref: float, w_gen: float, bias_ref: float, bias_gen: float) -> str:
    """Table 6's reading of a fact: W favoured the wrong answer, or favoured the right one but the wrong one's bias (prior) was higher."""
    if generalized:
        return "generalized"
    if not learned:
        return "not learned"
    if w_ref < w_gen:
        return "wrong weight"
    return "low prior" if bias_gen > bias_ref else "unexplained"


def score_outcomes(
    relation: FittedRelation, seed: int, entities: Sequence[str], answer_rows: Sequence[int], source_before: np.ndarray, source_after: np.ndarray,
    target_before: np.ndarray, target_after: np.ndarray, margin: float = DEFAULT_MARGIN,
) -> list[FactOutcome]:
    """Bookkeeping for one seed: tables are `[n_entities, n_source]` / `[n_entities, n_target]` before and after training."""
    W, bias = relation.fit.W, relation.fit.intercept
    target_words = relation.target.domain.words
    outcomes = []
    for i, (entity, s) in enumerate(zip(entities, answer_rows)):
        right = relation.columns[s]
        generated = int(np.argmax(target_after[i]))
        ref = max(right, key=lambda c: W[s, c])
        prediction = predict_from_logits(W, source_before[i], target_before[i], s, relation.source.domain.words, target_words, right, margin)
        learned = int(np.argmax(source_after[i])) == s
        generalized = generated in right
        outcomes.append(FactOutcome(
            seed=seed, entity=entity, source_answer=relation.source.domain.words[s], references=tuple(target_words[c] for c in right),
            reference_category=relation.target.domain.categories[right[0]], learned=learned,
            source_delta=float(source_after[i, s] - source_before[i, s]), target_before=target_words[int(np.argmax(target_before[i]))],
            generated=target_words[generated], generalized_before=int(np.argmax(target_before[i])) in right, generalized=generalized,
            predicted=prediction.predicted_target, predicted_confidence=prediction.confidence, predicted_success=prediction.success_probability,
            w_ref=float(W[s, ref]), w_gen=float(W[s, generated]), w_max=float(W[s].max()), bias_ref=float(bias[ref]),
            bias_gen=float(bias[generated]),
            category=diagnose(generalized, learned, float(W[s, ref]), float(W[s, generated]), float(bias[ref]), float(bias[generated])),
        ))
    return outcomes


def held_out_deltas(outcomes: Sequence[FactOutcome]) -> np.ndarray:
    """Per fact, the mean observed source-logit rise of the learned facts of the other seeds (of the other facts with one seed)."""
    rises = np.array([o.source_delta for o in outcomes])
    learned = np.array([o.learned for o in outcomes])
    seeds = np.array([o.seed for o in outcomes])
    # Other seeds are separate training runs, so a fact's own run never calibrates its prediction.
    groups = seeds if np.unique(seeds).size > 1 else np.arange(len(outcomes))
    deltas = []
    for group in groups:
        pool = (groups != group) & learned
        deltas.append(float(rises[pool].mean()) if pool.any() else float("nan"))
    return np.array(deltas)


def calibrate_predictions(relation: FittedRelation, outcomes: Sequence[FactOutcome], target_before: np.ndarray) -> list[FactOutcome]:
    """Redo each fact's prediction with the rise training produced on held-out facts; `target_before` is `[n_facts, n_target]`."""
    W, target_words = relation.fit.W, relation.target.domain.words
    source_index = {word: i for i, word in enumerate(relation.source.domain.words)}
    calibrated = []
    for outcome, logits, delta in zip(outcomes, target_before, held_out_deltas(outcomes)):
        if np.isnan(delta):
            calibrated.append(outcome)
            continue
        s = source_index[outcome.source_answer]
        prediction = predict_from_logits(W, np.zeros(0), logits, s, relation.source.domain.words, target_words,
                                         relation.columns[s], delta=delta)
        calibrated.append(dataclasses.replace(outcome, calibrated_delta=delta, predicted_calibrated=prediction.predicted_target,
                                              predicted_success_calibrated=prediction.success_probability))
    return calibrated


def all_learned(lm: LM, source: Prompt, entities: Sequence[str], answer_rows: Sequence[int]):
    """A `stop_when` for training: True once each entity's top-1 source answer is the one it was taught."""
    def check(model) -> bool:
        # No fingerprint: these logits are never cached, and hashing 1 GB of weights every epoch is not free.
        probe = LM(f"{lm.name}+training", model, lm.tokenizer, fingerprint="in-training", head_verified=lm.head_verified)
        return bool((entity_logits(probe, source, entities).argmax(1) == np.asarray(answer_rows)).all())

    return check


def planned_facts(relation: BoundRelation, n_facts: int, seed: int, tokenizer, *, balance_categories: bool = False,
                  taken_rows: Collection[int] = (), taken_names: Collection[str] = ()) -> tuple[list[str], list[int]]:
    """Fresh entity names and the source rows they are taught (distinct while the reference has enough subjects), none of
    `taken_rows` and `taken_names` (what earlier runs taught: a subject in two runs would enter a test over runs twice)
    while enough others are left. Without anything taken, a seed draws what it always drew.

    With `balance_categories`, the facts are split evenly over the token categories of the subjects'
    reference answers, so that a rare category (subwords) still gets facts.
    """
    rng = np.random.default_rng(seed)
    subjects = sorted(relation.columns)
    groups = [np.array(subjects)]
    if balance_categories:
        category = {s: relation.target.domain.categories[relation.columns[s][0]] for s in subjects}
        groups = [np.array([s for s in subjects if category[s] == c]) for c in sorted(set(category.values()))]
    shares = np.diff(np.linspace(0, n_facts, len(groups) + 1).round().astype(int))
    taken = set(taken_rows)
    groups = [fresh if (fresh := np.array([s for s in group if s not in taken], dtype=group.dtype)).size >= share else group
              for group, share in zip(groups, shares)]
    rows = np.concatenate([rng.choice(group, size=share, replace=share > group.size) for group, share in zip(groups, shares)])
    return fresh_names(n_facts, tokenizer, seed, set(taken_names)), [int(r) for r in rows]


def fresh_names(n: int, tokenizer, seed: int, taken: set[str]) -> list[str]:
    """`n` made-up names of `seed`, none in `taken`: the seed's first names that are not taken (its first `n` when none is)."""
    drawn = n
    while True:
        # Offset keeps a seed's names apart from other studies that draw pseudo names with small seeds.
        names = [name for name in pseudo_names(drawn, tokenizer, seed + 10_000) if name not in taken]
        if len(names) >= n:
            return names[:n]
        drawn += n - len(names)


@dataclasses.dataclass(frozen=True)
class GeneralizationResult(Stored):
    """Every edited fact of every seed, the W they were judged by, and timings."""

    study: ClassVar[str] = "generalize"

    label: str
    model_name: str
    source: str
    target: str
    source_template: str
    target_template: str
    n_target_domain: int
    labelwise_r_mean: float  # of the W fit, on held-out inputs
    config: GeneralizationConfig
    outcomes: tuple[FactOutcome, ...]
    losses: tuple[tuple[float, ...], ...]  # per seed, the mean loss of each epoch
    seconds_fit: float
    seconds_train: float
    seconds: float
    model_fingerprint: str = ""
    n_constant_targets: int = 0  # target words left out of labelwise_r_mean (constant on the held-out inputs)

    def per_seed(self, field: str) -> list[float]:
        """A boolean field's rate in each seed."""
        return [rate(getattr(o, field) for o in self.outcomes if o.seed == seed) for seed in self.config.seeds]

    def random_baseline(self) -> float:
        """Chance that a uniformly random target answer is right, aliases counted (`metrics.chance_top1`)."""
        return chance_top1((o.references for o in self.outcomes), self.n_target_domain)

    def prediction_scores(self) -> dict:
        """How well W's predictions matched training (top-1 accuracy, AUC for success): a priori, and with the calibrated rise."""
        outcomes = self.outcomes
        calibrated = [o for o in outcomes if o.predicted_calibrated]
        return {
            "prediction_accuracy": rate(o.predicted == o.generated for o in outcomes),
            "prediction_accuracy_learned": rate(o.predicted == o.generated for o in outcomes if o.learned),
            "prediction_success_auc": roc_auc([o.predicted_success for o in outcomes], [o.generalized for o in outcomes]),
            "predicted_generalization_rate": rate(o.predicted in o.references for o in outcomes),
            "calibrated_delta_mean": rate(o.calibrated_delta for o in calibrated),
            "calibrated_prediction_accuracy": rate(o.predicted_calibrated == o.generated for o in calibrated),
            "calibrated_prediction_success_auc": roc_auc([o.predicted_success_calibrated for o in calibrated],
                                                                  [o.generalized for o in calibrated]),
            "calibrated_predicted_generalization_rate": rate(o.predicted_calibrated in o.references for o in calibrated),
        }

    def summary(self) -> dict:
        """The JSON contract of `lincorr generalize --json`."""
        generalized, before, learned = self.per_seed("generalized"), self.per_seed("generalized_before"), self.per_seed("learned")
        return {
            "relation": self.label, "model": self.model_name, "source": self.source, "target": self.target,
            "source_template": self.source_template, "target_template": self.target_template,
            "generalization_rate": float(np.mean(generalized)), "generalization_rate_std": float(np.std(generalized)),
            "generalization_rate_per_seed": generalized,
            "generalization_rate_learned": rate(o.generalized for o in self.outcomes if o.learned),
            "rate_before": float(np.mean(before)), "random_baseline": self.random_baseline(),
            "source_learned_rate": float(np.mean(learned)), "source_learned_rate_std": float(np.std(learned)),
            "mean_source_delta": rate(o.source_delta for o in self.outcomes),
            **self.prediction_scores(),
            "categories": {c: sum(o.category == c for o in self.outcomes) for c in CATEGORIES},
            "n_facts": self.config.n_facts, "seeds": list(self.config.seeds), "n_target_domain": self.n_target_domain,
            "labelwise_r_mean": self.labelwise_r_mean, "n_constant_targets": self.n_constant_targets,
            "n_inputs": self.config.n_inputs, "estimator": self.config.fit.estimator,
            "learning_rate": self.config.train.learning_rate, "epochs": self.config.train.epochs, "batch_size": self.config.train.batch_size,
            "until_learned": self.config.until_learned, "epochs_run_per_seed": [len(l) for l in self.losses],
            "trainable": self.config.train.trained_parts(), "max_grad_norm": self.config.train.max_grad_norm, "margin": self.config.margin,
            "seconds_fit": self.seconds_fit, "seconds_train": self.seconds_train, "seconds": self.seconds,
        }

    def diagnosis_rows(self) -> list[dict]:
        """Table 6: one row per edited fact, generalized first, then by W[s, ref]."""
        rows = [dataclasses.asdict(o) | {"references": list(o.references)} for o in self.outcomes]
        return sorted(rows, key=lambda r: (not r["generalized"], -r["w_ref"]))

    def diagnosis_markdown(self, max_rows: int = 20) -> str:
        """Table 6 as Markdown (source answer, reference, generated, W weights, priors, category)."""
        lines = ["| entity | source | reference | generated | W[s,ref] | W[s,gen] | max W[s,:] | b[ref] | b[gen] | case |",
                 "|---|---|---|---|---|---|---|---|---|---|"]
        for r in self.diagnosis_rows()[:max_rows]:
            lines.append(f"| {r['entity']} | {r['source_answer']} | {'/'.join(r['references'])} | {r['generated']} | {r['w_ref']:.3f} | "
                         f"{r['w_gen']:.3f} | {r['w_max']:.3f} | {r['bias_ref']:.2f} | {r['bias_gen']:.2f} | {r['category']} |")
        return "\n".join(lines)

    def weight_curve(self, n_bins: int = 5) -> list[dict]:
        """Fig. 5: generalization rate in quantile bins of W[s, ref] (learned facts only)."""
        learned = [o for o in self.outcomes if o.learned]
        if not learned:
            return []
        weights = np.array([o.w_ref for o in learned])
        edges = np.unique(np.quantile(weights, np.linspace(0, 1, n_bins + 1)))
        bins = np.clip(np.searchsorted(edges, weights, side="right") - 1, 0, max(len(edges) - 2, 0))
        return [
            {"w_ref_low": float(edges[b]), "w_ref_high": float(edges[min(b + 1, len(edges) - 1)]), "n": int((bins == b).sum()),
             "generalization_rate": rate(o.generalized for o, k in zip(learned, bins) if k == b)}
            for b in sorted(set(bins.tolist()))
        ]

    def plot_weight_curve(self, path) -> None:
        """Fig. 5 as a PNG: each fact's outcome against W[s, ref], with the binned rate."""
        import lincorr.plots  # noqa: F401  (selects the Agg backend)
        import matplotlib.pyplot as plt

        figure, axis = plt.subplots(figsize=(5, 3.5))
        learned = [o for o in self.outcomes if o.learned]
        jitter = np.random.default_rng(0).uniform(-0.03, 0.03, len(learned))
        axis.scatter([o.w_ref for o in learned], np.array([float(o.generalized) for o in learned]) + jitter, s=10, alpha=0.5, label="facts")
        curve = self.weight_curve()
        axis.plot([(c["w_ref_low"] + c["w_ref_high"]) / 2 for c in curve], [c["generalization_rate"] for c in curve], "o-", color="C3",
                  label="rate per quantile bin")
        axis.set_xlabel("W[s, reference]")
        axis.set_ylabel("generalized")
        axis.set_title(f"{self.model_name}: {self.label}", fontsize=9)
        axis.legend(fontsize=7)
        figure.tight_layout()
        figure.savefig(path, dpi=120)
        plt.close(figure)

    def diagnosis_text(self, max_rows: int = 20) -> str:
        """`lincorr diagnose`: the headline numbers, Table 6 and the generalization rate by W[s, ref]."""
        return "\n".join([
            self.text(), "", self.diagnosis_markdown(max_rows=max_rows),
            "\ngeneralization rate by W[s, ref] (learned facts, quantile bins):",
            *(f"  W[s,ref] in [{row['w_ref_low']:+.3f}, {row['w_ref_high']:+.3f}]  n={row['n']:3d}  rate {row['generalization_rate']:.1%}"
              for row in self.weight_curve()),
        ])

    def diagnosis_summary(self) -> dict:
        """`lincorr diagnose --json`: the summary with every fact and the Fig. 5 bins."""
        return {**self.summary(), "facts": self.diagnosis_rows(), "weight_curve": self.weight_curve()}

    def text(self) -> str:
        """The headline numbers, one per line."""
        s = self.summary()
        lines = [f"{self.label} on {self.model_name}: {s['n_facts']} facts x {len(s['seeds'])} seeds"]
        for key in ("generalization_rate", "rate_before", "random_baseline", "source_learned_rate", "prediction_accuracy",
                    "prediction_success_auc", "calibrated_prediction_accuracy", "calibrated_prediction_success_auc", "labelwise_r_mean",
                    "seconds"):
            lines.append(f"{key:<24} {s[key]:.4f}" + (f" ± {s[key + '_std']:.4f}" if key + "_std" in s else ""))
        lines.append(f"{'categories':<24} {s['categories']}")
        return "\n".join(lines)

    def save(self, directory) -> None:
        """result.json (summary, config, Fig. 5 bins), facts.json (every outcome), table6.md, fig5.png and provenance.json."""
        with staged_directory(directory) as out:
            record(out, self, model_fingerprint=self.model_fingerprint, settings=settings_key(self.config))
            write_json(out / "result.json", {**self.summary(), "weight_curve": self.weight_curve(), "config": dataclasses.asdict(self.config),
                                             "losses": [list(l) for l in self.losses]})
            write_json(out / "facts.json", self.diagnosis_rows())
            write_text_atomic(out / "table6.md", self.diagnosis_markdown(max_rows=len(self.outcomes)) + "\n")
            self.plot_weight_curve(out / "fig5.png")


def measure_generalization(lm: LM, registry, relation: RelationSpec | FittedRelation,
                       config: GeneralizationConfig = GeneralizationConfig(), settings: CollectSettings = CollectSettings()
                       ) -> GeneralizationResult:
    """Teach fresh entities source facts (one training run per seed) and read their target answers before and after.

    A `RelationSpec` is bound and its W fitted here; a `BoundRelation` with a fit is used as it is.
    """
    started = time.perf_counter()
    if isinstance(relation, RelationSpec):
        relation = fit_relation(lm, registry, relation, n_inputs=config.n_inputs, fit=config.fit, keep_subwords=config.keep_subwords,
                                settings=settings)
    seconds_fit = time.perf_counter() - started
    outcomes, target_before, losses, seconds_train = [], [], [], 0.0
    taught_rows: list[int] = []
    taught_names: list[str] = []
    for seed in config.seeds:
        entities, rows = planned_facts(relation, config.n_facts, seed, lm.tokenizer, balance_categories=config.balance_categories,
                                       taken_rows=taught_rows, taken_names=taught_names)
        taught_rows += rows
        taught_names += entities
        facts = [Fact(fill(relation.source.template, e), relation.source.domain.words[r], relation.source.answer_prefix)
                 for e, r in zip(entities, rows)]
        before = [entity_logits(lm, p, entities) for p in (relation.source, relation.target)]
        stop_when = all_learned(lm, relation.source, entities, rows) if config.until_learned else None
        trained = train_on_facts(lm.model, lm.tokenizer, facts, dataclasses.replace(config.train, seed=seed), stop_when=stop_when)
        seconds_train += trained.seconds
        losses.append(trained.losses)
        tuned = wrap_model(trained.model, lm.tokenizer, name=f"{lm.name}+edit")
        after = [entity_logits(tuned, p, entities) for p in (relation.source, relation.target)]
        del tuned, trained  # one trained copy at a time: a 270M model in float32 is 1 GB, plus AdamW state
        outcomes += score_outcomes(relation, seed, entities, rows, before[0], after[0], before[1], after[1], config.margin)
        target_before.append(before[1])
    outcomes = calibrate_predictions(relation, outcomes, np.concatenate(target_before))
    return GeneralizationResult(
        label=relation.label, model_name=lm.name, source=relation.source.name, target=relation.target.name,
        source_template=relation.source.template,
        target_template=relation.target.template, n_target_domain=len(relation.target.domain),
        labelwise_r_mean=relation.fit.labelwise_r_mean, n_constant_targets=relation.fit.n_constant_targets, config=config, outcomes=tuple(outcomes), losses=tuple(losses),
        seconds_fit=seconds_fit, seconds_train=seconds_train, seconds=time.perf_counter() - started, model_fingerprint=lm.fingerprint,
    )
