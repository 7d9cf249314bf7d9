"""Predicting an edit before making it (§5): what W and b, fitted on the untouched model, say an edit "source answer = s" does to a target answer."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import ClassVar

import numpy as np
from scipy.special import softmax

from lincorr.collection import CollectSettings, entity_logits
from lincorr.errors import LincorrError
from lincorr.fit import FitConfig, fit_relation
from lincorr.models import LM
from lincorr.names import pseudo_names
from lincorr.outputs import settings_key, staged_directory, write_json
from lincorr.relations import FittedRelation, RelationSpec
from lincorr.results import Stored, record
from lincorr.templates import fill

__all__ = ["DEFAULT_MARGIN", "STUDY_FIT", "EditPrediction", "EditPredictionResult", "edit_delta", "predicted_target_logits", "predict_from_logits",
           "predict_edit", "predict_relation_edit"]

# Gap (in logits) by which the edited source answer is assumed to lead the runner-up after the
# edit. Fixed a priori, not fitted to outcomes; the study also calibrates the rise on held-out facts.
DEFAULT_MARGIN = 5.0
# The training studies' W: ridge with a cross-validated penalty reads cleanly where ols on 1,000 inputs is nearly saturated.
STUDY_FIT = FitConfig(estimator="ridge", alpha="cv", n_boot=100)


@dataclasses.dataclass(frozen=True)
class EditPrediction:
    """What W predicts an edit "source answer = s" does to one entity's target answer."""

    source_answer: str
    delta: float  # assumed rise of the source answer's logit
    predicted_target: str
    confidence: float  # softmax probability of the predicted target over the predicted target logits
    runner_up: str
    margin: float  # predicted top-1 minus runner-up logit
    current_target: str  # top-1 before the edit
    references: tuple[str, ...]  # the reference answers of s (empty when the registry has none)
    success_probability: float  # softmax mass on the reference answers (NaN without references)

    @property
    def predicts_reference(self) -> bool | None:
        """True: W expects the edit to generalize; False: to hallucinate; None: no reference known."""
        return self.predicted_target in self.references if self.references else None

    def summary(self) -> dict:
        """JSON-ready fields."""
        return {**dataclasses.asdict(self), "references": list(self.references), "predicts_reference": self.predicts_reference}


def edit_delta(source_before: np.ndarray, source_index: int, margin: float) -> float:
    """How far the source logit must rise for answer `source_index` to lead the others by `margin`."""
    others = np.delete(source_before, source_index)
    return float(max(others.max() - source_before[source_index], 0.0) + margin) if others.size else float(margin)


def predicted_target_logits(W: np.ndarray, target_before: np.ndarray, source_index: int, delta: float) -> np.ndarray:
    """Target logits after raising source logit `source_index` by `delta`: t + delta * W[s, :] -> `[n_target]`."""
    return np.asarray(target_before, np.float64) + delta * np.asarray(W[source_index], np.float64)


def predict_from_logits(
    W: np.ndarray, source_before: np.ndarray, target_before: np.ndarray, source_index: int, source_words: Sequence[str],
    target_words: Sequence[str], reference_columns_of_s: Sequence[int] = (), margin: float = DEFAULT_MARGIN,
    delta: float | None = None,
) -> EditPrediction:
    """Predict the edit from W `[n_source, n_target]` and one entity's current logits `[n_source]`, `[n_target]`.

    The source logit rises by `delta` when given (e.g. calibrated from training), else by `edit_delta(..., margin)`.
    """
    if delta is None:
        delta = edit_delta(np.asarray(source_before, np.float64), source_index, margin)
    predicted = predicted_target_logits(W, target_before, source_index, delta)
    order = np.argsort(-predicted, kind="stable")
    probabilities = softmax(predicted, axis=-1)
    columns = list(reference_columns_of_s)
    return EditPrediction(
        source_answer=source_words[source_index],
        delta=delta,
        predicted_target=target_words[order[0]],
        confidence=float(probabilities[order[0]]),
        runner_up=target_words[order[1]] if len(order) > 1 else "",
        margin=float(predicted[order[0]] - predicted[order[1]]) if len(order) > 1 else float("inf"),
        current_target=target_words[int(np.argmax(target_before))],
        references=tuple(target_words[c] for c in columns),
        success_probability=float(probabilities[columns].sum()) if columns else float("nan"),
    )


def predict_edit(lm: LM, relation: FittedRelation, value: str, subject: str, *, margin: float = DEFAULT_MARGIN,
                 delta: float | None = None) -> EditPrediction:
    """Predict, without training, what teaching "source_template(subject) value" does to the target answer.

    `delta` is the assumed rise of the taught source logit (a study's `mean_source_delta` for the same
    training settings); without it the rise is whatever makes `value` lead the other answers by `margin`.
    """
    index = relation.source.domain.find(value)
    if index is None:
        raise LincorrError(f"{value!r} is not a usable word of the {relation.source.name} domain for this tokenizer; "
                           f"see `lincorr domains` for the words it keeps")
    source_before = entity_logits(lm, relation.source, [subject])[0]
    target_before = entity_logits(lm, relation.target, [subject])[0]
    return predict_from_logits(relation.fit.W, source_before, target_before, index, relation.source.domain.words,
                               relation.target.domain.words, relation.columns.get(index, ()), margin, delta)


@dataclasses.dataclass(frozen=True)
class EditPredictionResult(Stored):
    """An `EditPrediction` for one subject with what it came from: the model, the relation's prompts and W's held-out fit."""

    study: ClassVar[str] = "predict-edit"

    model_name: str
    source: str
    target: str
    source_template: str
    target_template: str
    subject: str
    labelwise_r_mean: float  # of W, on held-out inputs
    prediction: EditPrediction
    model_fingerprint: str = ""
    n_constant_targets: int = 0  # target words left out of labelwise_r_mean (constant on the held-out inputs)
    settings: Mapping[str, object] = dataclasses.field(default_factory=dict)  # how W was fitted and the edit assumed

    def summary(self) -> dict:
        """The JSON of `lincorr predict-edit --json`."""
        return {"model": self.model_name, "source": self.source, "target": self.target, "subject": self.subject,
                **self.prediction.summary(), "labelwise_r_mean": self.labelwise_r_mean, "n_constant_targets": self.n_constant_targets}

    def save(self, directory) -> None:
        """prediction.json (the summary) and provenance.json."""
        with staged_directory(directory) as out:
            write_json(out / "prediction.json", self.summary())
            record(out, self, model_fingerprint=self.model_fingerprint, settings=dict(self.settings))

    def text(self) -> str:
        """The edit, the target answer now, and the one W predicts after the edit."""
        prediction = self.prediction
        verdict = {True: "the reference answer (generalization)", False: "not a reference answer (hallucination)", None: "no reference known"}
        return "\n".join([
            f"edit: {fill(self.source_template, self.subject)} {prediction.source_answer}",
            f"now:  {fill(self.target_template, self.subject)} {prediction.current_target}",
            f"predicted after the edit: {prediction.predicted_target} (confidence {prediction.confidence:.2f}, "
            f"runner-up {prediction.runner_up}, margin {prediction.margin:.2f} logits)",
            f"that is {verdict[prediction.predicts_reference]}; reference: {', '.join(prediction.references) or '-'}; "
            f"P(reference) {prediction.success_probability:.2f}",
        ])


def predict_relation_edit(lm: LM, registry, relation: RelationSpec, value: str, *, subject: str | None = None, seed: int = 0,
                          n_inputs: int = 1000, fit: FitConfig = STUDY_FIT, margin: float = DEFAULT_MARGIN,
                          delta: float | None = None, settings: CollectSettings = CollectSettings()) -> EditPredictionResult:
    """Fit W for `relation` on `n_inputs` vocabulary inputs and `predict_edit` teaching "source(subject) = value".

    Without a `subject`, a fresh made-up name drawn with `seed` is edited.
    """
    bound = fit_relation(lm, registry, relation, n_inputs=n_inputs, fit=fit, settings=settings)
    # Offset as in `planned_facts`: the name is one a study with the same seed would teach.
    subject = subject or pseudo_names(1, lm.tokenizer, seed + 10_000)[0]
    prediction = predict_edit(lm, bound, value, subject, margin=margin, delta=delta)
    return EditPredictionResult(
        model_name=lm.name, source=relation.source, target=relation.target, source_template=bound.source.template,
        target_template=bound.target.template, subject=subject, labelwise_r_mean=bound.fit.labelwise_r_mean,
        prediction=prediction, model_fingerprint=lm.fingerprint, n_constant_targets=bound.fit.n_constant_targets,
        settings={"n_inputs": n_inputs, "seed": seed, "fit": settings_key(fit), "margin": margin, "delta": delta},
    )
