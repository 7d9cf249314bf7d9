"""Ours: does lincorr's W, fitted on the untrained model, predict which first-hop implications OCR gets right?

W maps the logits of the registry prompt `city` ("{} lives in the city of") to those of `language`
("{} speaks the language of"), fitted on vocabulary inputs of the untouched model and judged by
the reference `extractive/city->language`. For each taught fact "name lives in city", three
scores are read before any training:

- `w_ref`: W[city, language], the weight from the taught city to the right language;
- `w_rank_score`: minus the rank of the right language among the dataset's candidate languages
  in the prediction t + delta * W[city, :] (the edit predictor of `generalization.predict_edit`:
  t the name's current language logits, delta the rise that puts the city `DEFAULT_MARGIN` ahead);
- `predicted_success`: that prediction's softmax mass on the right language over the whole domain.

After fine-tuning on the facts (as the OCR study), an implication counts as right when its
language ranks first among the candidates. Each score's ROC AUC for "right" is reported beside
the AUCs of random scores (their mean and 95% range over `n_random` draws).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar
import time

import numpy as np

from lincorr.collection import CollectSettings, entity_logits
from lincorr.fit import FitConfig, fit_relation
from lincorr.studies.extractive.ocr import (
    FactsConfig, hop_data, load_world, ranks, saved_figure, train_model, training_settings,
)
from lincorr.studies.training.edit_prediction import DEFAULT_MARGIN, predict_from_logits
from lincorr.metrics import roc_auc
from lincorr.models import LM
from lincorr.outputs import settings_key, staged_directory, write_csv, write_json
from lincorr.results import Stored, record
from lincorr.relations import RelationSpec

__all__ = ["PREDICTORS", "PredictConfig", "PredictResult", "measure_ocr_prediction"]

PREDICTORS = ("w_ref", "w_rank_score", "predicted_success")


@dataclasses.dataclass(frozen=True)
class PredictConfig(FactsConfig):
    """The first-hop facts and their training (`FactsConfig`), and how W is fitted."""

    relation: RelationSpec = RelationSpec("city", "language", "City->Language", "extractive/city->language")
    n_inputs: int = 1000
    fit: FitConfig = FitConfig(estimator="ridge", alpha="cv", n_boot=100)
    margin: float = DEFAULT_MARGIN
    n_random: int = 1000


@dataclasses.dataclass(frozen=True)
class PredictResult(Stored):
    """Per fact: the scores W gives before training and whether the implication came out right after it."""

    study: ClassVar[str] = "extractive-predict"

    model_name: str
    config: PredictConfig
    rows: tuple[dict, ...]
    labelwise_r_mean: float
    seconds: float
    n_constant_targets: int = 0  # target words left out of labelwise_r_mean (constant on the held-out inputs)

    def usable(self) -> list[dict]:
        """The facts whose city and language are both columns of W (the others have no prediction)."""
        return [r for r in self.rows if r["w_ref"] is not None]

    def aucs(self) -> dict:
        """ROC AUC of each predictor for "right after training", and of random scores (mean, 2.5% and 97.5% quantiles)."""
        rows = self.usable()
        labels = [r["right_after"] for r in rows]
        out: dict[str, float | dict[str, float]] = {name: roc_auc([r[name] for r in rows], labels) for name in PREDICTORS}
        rng = np.random.default_rng(self.config.seed)
        random = np.array([roc_auc(rng.random(len(rows)), labels) for _ in range(self.config.n_random)])
        finite = random[np.isfinite(random)]
        out["random"] = ({"mean": float(finite.mean()), "low": float(np.quantile(finite, 0.025)), "high": float(np.quantile(finite, 0.975))}
                         if finite.size else {"mean": float("nan"), "low": float("nan"), "high": float("nan")})
        return out

    def summary(self) -> dict:
        """The JSON record of the study."""
        rows = self.usable()
        return {"model": self.model_name, "relation": dataclasses.asdict(self.config.relation), "n_facts": len(self.rows),
                "n_predicted": len(rows), "n_right_after": int(sum(r["right_after"] for r in rows)),
                "n_right_before": int(sum(r["implication_rank_before"] == 0 for r in rows)), "auc": self.aucs(),
                "labelwise_r_mean": self.labelwise_r_mean, "n_constant_targets": self.n_constant_targets, "n_inputs": self.config.n_inputs, "estimator": self.config.fit.estimator,
                "margin": self.config.margin, "training": training_settings(self.config.train), "seed": self.config.seed,
                "facts": [dict(r) for r in self.rows], "seconds": self.seconds}

    def text(self) -> str:
        """The AUCs beside the random baseline."""
        s, auc = self.summary(), self.aucs()
        lines = [f"W ({self.config.relation.label}, label-wise r {self.labelwise_r_mean:.2f}) as a predictor of first-hop OCR on "
                 f"{self.model_name}: {s['n_right_after']} of {s['n_predicted']} implications right after training "
                 f"({s['n_right_before']} before)"]
        lines += [f"AUC {name:<18} {auc[name]:.3f}" for name in PREDICTORS]
        lines.append(f"AUC random scores      {auc['random']['mean']:.3f} (95% of draws in {auc['random']['low']:.3f}..{auc['random']['high']:.3f})")
        return "\n".join(lines)

    def plot(self, path) -> None:
        """Each fact's W[city, language] against its implication rank after training."""
        rows = self.usable()
        with saved_figure(path, figsize=(4.5, 3.4)) as (_, axis):
            axis.scatter([r["w_ref"] for r in rows], [r["implication_rank_after"] for r in rows], s=14,
                         c=["C2" if r["right_after"] else "C3" for r in rows])
            axis.set_xlabel("W[city, language] (untrained model)")
            axis.set_ylabel("implication rank after training")
            axis.set_title(f"{self.model_name}: AUC of W[city, language] {self.aucs()['w_ref']:.2f}", fontsize=9)

    def save(self, directory) -> None:
        """ocr_prediction.json (summary with every fact), ocr_prediction.csv, ocr_prediction.png."""
        with staged_directory(directory) as out:
            record(out, self, settings=settings_key(self.config))
            write_json(out / "ocr_prediction.json", self.summary())
            header = list(self.rows[0])
            write_csv(out / "ocr_prediction.csv", header, [[r[k] for k in header] for r in self.rows])
            self.plot(out / "ocr_prediction.png")


def measure_ocr_prediction(lm: LM, registry, config: PredictConfig = PredictConfig(), settings: CollectSettings = CollectSettings()) -> PredictResult:
    """Fit W on the untrained model, score every first-hop fact with it, train as the OCR study, and compare."""
    started = time.perf_counter()
    data = hop_data(load_world(registry), lm.tokenizer, "first", config.n_facts, config.seed, config.templates)
    bound = fit_relation(lm, registry, config.relation, n_inputs=config.n_inputs, fit=config.fit, settings=settings)
    W = bound.fit.W
    target_words = bound.target.domain.words
    # The candidates W can see: the dataset's languages that are columns of the language domain.
    candidates = [c for w in data.implications.candidates.words if (c := bound.target.domain.find(w)) is not None]
    source_before = entity_logits(lm, bound.source, data.names)
    target_before = entity_logits(lm, bound.target, data.names).astype(np.float64)
    before = ranks(lm, data.implications)
    tuned, _ = train_model(lm, data.facts.facts(), config.train, name=f"{lm.name}+first-hop facts")
    after = ranks(tuned, data.implications)
    del tuned
    rows = []
    for i, (name, city, language) in enumerate(zip(data.names, data.cities, data.implications.answer_words())):
        source, right = bound.source.domain.find(city), bound.target.domain.find(language)
        row = {"name": name, "city": city, "language": language, "implication_rank_before": int(before[i]),
               "implication_rank_after": int(after[i]), "right_after": bool(after[i] == 0),
               "w_ref": None, "w_rank_score": None, "predicted_success": None, "predicted_language": None}
        if source is not None and right is not None:
            prediction = predict_from_logits(W, source_before[i], target_before[i], source, bound.source.domain.words, target_words,
                                             bound.columns.get(source, ()), config.margin)
            predicted = target_before[i] + prediction.delta * W[source]
            row |= {"w_ref": float(W[source, right]), "w_rank_score": -int((predicted[candidates] > predicted[right]).sum()),
                    "predicted_success": prediction.success_probability, "predicted_language": prediction.predicted_target}
        rows.append(row)
    return PredictResult(lm.name, config, tuple(rows), bound.fit.labelwise_r_mean, time.perf_counter() - started,
                         n_constant_targets=bound.fit.n_constant_targets)
