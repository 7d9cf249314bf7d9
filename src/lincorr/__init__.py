"""lincorr: linear correlation between knowledge prompts of a language model.

    import lincorr
    lm = lincorr.load_model()                                   # gemma-3-270m-q4km, bundled
    city, country = lincorr.prompt(lm, "city"), lincorr.prompt(lm, "country")
    inputs = lincorr.sample_vocab_inputs(lm.tokenizer, 1000, seed=0)
    result = lincorr.measure_pair(lm, city, country, inputs, lincorr.FitConfig(estimator="ridge", alpha="cv"))
    result.summary()["labelwise_r_mean"], result.top_influenced("Tokyo")
"""

from __future__ import annotations

import importlib

__version__ = "0.2.0"

# Names resolve on first use, so `import lincorr` (and the CLI) stay fast until torch is needed.
_EXPORTS = {
    "LincorrError": "lincorr.errors",
    "load_model": "lincorr.models",
    "wrap_model": "lincorr.models",
    "LM": "lincorr.models",
    "load_registry": "lincorr.knowledge",
    "build_domain": "lincorr.domains",
    "Domain": "lincorr.domains",
    "Prompt": "lincorr.prompts",
    "custom_prompt": "lincorr.prompts",
    "registry_prompt": "lincorr.prompts",
    "sample_vocab_inputs": "lincorr.inputs",
    "read_inputs_file": "lincorr.inputs",
    "collect": "lincorr.collection",
    "CollectSettings": "lincorr.collection",
    "LogitTable": "lincorr.collection",
    "LinearMap": "lincorr.linear",
    "labelwise_pearson": "lincorr.metrics",
    "instancewise_pearson": "lincorr.metrics",
    "bootstrap_labelwise_ci": "lincorr.metrics",
    "FitConfig": "lincorr.fit",
    "PairResult": "lincorr.fit",
    "fit_tables": "lincorr.fit",
    "measure_pair": "lincorr.fit",
    "load_result": "lincorr.studies",
    # The studies the notebooks in examples/ use, so they import nothing from deeper modules.
    "RelationSpec": "lincorr.relations",
    "bind_relation": "lincorr.relations",
    "measure_precision": "lincorr.studies.logits.precision",
    "Grid": "lincorr.studies.logits.matrix",
    "measure_matrix": "lincorr.studies.logits.matrix",
    "GeneralizationConfig": "lincorr.studies.training.generalization",
    "measure_generalization": "lincorr.studies.training.generalization",
    "build_report": "lincorr.report",
    "log_result": "lincorr.tracking",
    "lens": "lincorr.studies.vectors.arithmetic",
    "ovector": "lincorr.studies.vectors.ovectors",
    "ffn_ablate": "lincorr.studies.vectors.arithmetic",
    "OcrConfig": "lincorr.studies.extractive.ocr",
    "measure_ocr": "lincorr.studies.extractive.ocr",
    "read_edits": "lincorr.ripple",
    "measure_ripple": "lincorr.ripple",
    "RippleConfig": "lincorr.ripple",
    "RippleResult": "lincorr.ripple",
}

__all__ = ["prompt", *_EXPORTS]


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'lincorr' has no attribute {name!r}")


def prompt(lm, name: str, *, registry=None):
    """A registry prompt ("city", "es/city", "math/x+1") with its domain tokenized for `lm`."""
    from lincorr.knowledge import load_registry
    from lincorr.prompts import registry_prompt

    return registry_prompt(registry or load_registry(), name, lm.tokenizer)
