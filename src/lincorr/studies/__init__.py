"""The studies, one sub-package per system: each composes the core stages and returns a result that saves, prints and reloads itself.

`RESULT_TYPES` maps the study name that provenance.json records to the result type that study
returns; `load_result(directory)` gives back the typed result of any saved run. A type's module is
imported only when a directory of that study is loaded, so `import lincorr.studies` stays light.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from lincorr.errors import InputError
from lincorr.results import read_study

__all__ = ["RESULT_TYPES", "result_type", "load_result"]

RESULT_TYPES = {
    "fit": "lincorr.fit:PairResult",
    "matrix": "lincorr.studies.logits.matrix:MatrixResult",
    "precision": "lincorr.studies.logits.precision:PrecisionTable",
    "precision-curve": "lincorr.studies.logits.precision_curve:PrecisionCurve",
    "lre": "lincorr.studies.logits.lre:LreTable",
    "cases": "lincorr.studies.logits.cases:CaseTables",
    "resilience": "lincorr.studies.logits.resilience:ResilienceResult",
    "scale": "lincorr.studies.logits.scale:ScaleResult",
    "gradcorr": "lincorr.studies.training.gradients:GradientTable",
    "generalize": "lincorr.studies.training.generalization:GeneralizationResult",
    "generalize-table5": "lincorr.studies.training.table5:GeneralizationTable",
    "predict-edit": "lincorr.studies.training.edit_prediction:EditPredictionResult",
    "subwords": "lincorr.studies.training.subwords:SubwordResult",
    "ablate-table7": "lincorr.studies.training.ablation_tables:AblationTable",
    "ablate-widths": "lincorr.studies.training.ablation_tables:WidthSweep",
    "lens": "lincorr.studies.vectors.arithmetic:LensResult",
    "ovector": "lincorr.studies.vectors.ovectors:OVectorResult",
    "ffn-ablate": "lincorr.studies.vectors.arithmetic:FFNAblationResult",
    "ovector-w": "lincorr.studies.vectors.ovector_w:OVectorWResult",
    "extractive-ocr": "lincorr.studies.extractive.ocr:OcrResult",
    "extractive-scores": "lincorr.studies.extractive.scores:ScoresResult",
    "extractive-freeze": "lincorr.studies.extractive.freeze:FreezeResult",
    "ripple": "lincorr.ripple.study:RippleResult",
    "extractive-ordering": "lincorr.studies.extractive.origins:OrderingResult",
    "extractive-graft": "lincorr.studies.extractive.origins:GraftResult",
    "extractive-predict": "lincorr.studies.extractive.predict:PredictResult",
    "reproduce": "lincorr.reproduce.runner:ReproductionResult",
}


def result_type(study: str) -> type:
    """The result type of `study` (a name provenance.json records); an InputError for a name no study has."""
    if study not in RESULT_TYPES:
        raise InputError(f"no lincorr study is called {study!r}; known: {', '.join(RESULT_TYPES)}")
    module, name = RESULT_TYPES[study].split(":")
    return getattr(importlib.import_module(module), name)


def load_result(directory):
    """The typed result of the run saved in `directory` (the --out or --save-dir of any study), as its `save` wrote it."""
    directory = Path(directory)
    if not (directory / "provenance.json").is_file():
        raise InputError(f"{directory} holds no provenance.json; pass the --out or --save-dir directory of a lincorr run")
    study = read_study(directory)
    if study is None:
        raise InputError(f"{directory} was saved by a lincorr that did not record its study; rerun the command that wrote it")
    try:
        kind = result_type(study)
    except InputError as error:
        raise InputError(f"{directory}: {error}") from None
    try:
        return kind.load(directory)
    except InputError:
        raise  # a reader's error, which names the file and what is wrong in it
    except (KeyError, TypeError, ValueError, AttributeError, OSError) as error:
        raise InputError(f"{directory} does not hold the '{study}' result lincorr writes ({error}); "
                         "rerun the command that wrote it") from None
