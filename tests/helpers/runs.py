"""One run directory per study of lincorr on a tiny Llama saved to disk: what the report tests read (conftest's `tiny_runs`)."""

from __future__ import annotations

import numpy as np

from helpers.tiny import NAMES, REGISTRY_YAML, WORDS, one_thread, tiny_llama, tiny_subword_tokenizer
from lincorr.cli import main

# Small and quick: ridge with a fixed penalty, a short bootstrap, a few facts learned in a few epochs.
FIT = ["--estimator", "ridge", "--alpha", "1", "--bootstrap", "10"]
TRAIN = ["-n", "40", "--n-facts", "3", "--epochs", "8", "--lr", "1e-2", "--train-batch-size", "4"]
# Study directory -> how many figures its section draws.
FIGURES = {"fit": 2, "matrix": 3, "precision": 0, "cases": 0, "resilience": 4, "scale": 3, "generalize": 1, "subwords": 1,
           "gradcorr": 0, "predict": 0, "table5": 0, "table7": 0, "scores": 1, "ocr": 1, "lens": 1}


def write_extractive_and_lens_runs(root) -> None:
    """Results of the inside-path studies, saved without a model: planted score grids, an OCR and logit-lens curves."""
    from lincorr.studies.extractive.scores import SCORES, ScoresConfig, ScoresResult
    from lincorr.studies.vectors.arithmetic import LensResult
    from lincorr.outputs import write_json

    rng = np.random.default_rng(0)
    checked = ("mlp[0]", "head[1,0]")
    ScoresResult(
        model_name="tiny-llama", config=ScoresConfig(), component_names=("mlp", "head 0", "head 1"),
        grids={key: rng.normal(size=(2, 3)) for key in SCORES}, checked=checked,
        linear_checked={key: rng.normal(size=2) for key in SCORES}, exact_checked={key: rng.normal(size=2) for key in SCORES},
        mean_ranks={"fact_mean_rank_before": 2.5, "fact_mean_rank_after": 1.0, "implication_mean_rank_before": 2.5,
                    "implication_mean_rank_after": 2.1},
        training={"epochs": 2}, seconds_train=0.0, seconds_scores=0.0, seconds_check=0.0,
    ).save(root / "scores")
    (root / "ocr").mkdir()
    write_json(root / "ocr" / "ocr.json", {
        "hop": "first", "model": "tiny-llama", "n_facts": 4, "epochs": 2, "chance_mean_rank": 2.5,
        "fact_mean_rank_before": 2.5, "fact_mean_rank_after": 1.0, "implication_mean_rank_before": 2.5, "implication_mean_rank_after": 2.2,
        "per_epoch": [{"epoch": e, "fact_mean_rank": f, "implication_mean_rank": i} for e, f, i in ((0, 2.5, 2.5), (1, 1.6, 2.4), (2, 1.0, 2.2))],
    })
    LensResult(
        task="country_capital", model="tiny-llama", model_fingerprint="params:planted", n_pairs=4,
        argument_rr=np.array([0.9, 0.6, 0.2]), answer_rr=np.array([0.1, 0.4, 0.8]), answer_top1=np.array([0.0, 0.25, 0.75]),
        mid_argument_rr=np.array([0.7, 0.4]), mid_answer_rr=np.array([0.2, 0.6]), crossing_layer=2, crossing_component="mlp",
        final_accuracy=0.75, example_prompt="France: Paris\nJapan:", settings={"floor": 0.1, "seed": 0}, seconds=0.0,
    ).save(root / "lens")


def write_tiny_runs(root) -> dict:
    """One directory per study of lincorr, written by the CLI on a tiny Llama saved to disk (or by the study's `.save`)."""
    from lincorr.studies.training.ablation import AblationResult, AblationTable
    from lincorr.fit import FitConfig
    from lincorr.studies.training.generalization import GeneralizationConfig, generalization_table
    from lincorr.finetune import TrainConfig
    from lincorr.knowledge import load_registry
    from lincorr.models import load_model
    from lincorr.relations import RelationSpec

    tokenizer = tiny_subword_tokenizer(list(WORDS) + list(NAMES))
    model, other_model, registry, inputs = root / "model", root / "model-2", root / "tiny.yaml", root / "inputs.txt"
    for seed, directory in enumerate((model, other_model)):
        tiny_llama(len(tokenizer), seed=seed).save_pretrained(directory)
        tokenizer.save_pretrained(directory)
    registry.write_text(REGISTRY_YAML, encoding="utf-8")
    inputs.write_text("\n".join(NAMES[:60]), encoding="utf-8")
    shared = ["--model", str(model), "--registry", str(registry), "--quiet"]
    commands = {
        "fit": ["fit", "tiny_city", "tiny_country", "--inputs", str(inputs), *FIT, "--heatmap", "--save-dir"],
        "matrix": ["matrix", "--family", "tiny", "--inputs", str(inputs), *FIT, "--out"],
        "precision": ["precision", "tiny_city", "tiny_country", "--inputs", str(inputs), "--out"],
        "cases": ["cases", "tiny_city", "tiny_country", "--word", "Paris", "--word", "Tokyo", "-k", "3", "--inputs", str(inputs), "--out"],
        "resilience": ["resilience", "--eval-model", str(model), "--prompts", "tiny_city,tiny_country", "--inputs", str(inputs), "--out"],
        "scale": ["scale", "--models", f"{model},{other_model}", "--relations", "tiny_city:tiny_country", "-n", "60", "--out"],
        "generalize": ["generalize", "tiny_city", "tiny_country", *TRAIN, "--n-seeds", "2", *FIT, "--out"],
        "subwords": ["subwords", "tiny_city", "tiny_country", *TRAIN, "--n-seeds", "1", *FIT, "--out"],
        "gradcorr": ["gradcorr", "tiny_city", "tiny_country", "-n", "40", "--n-step-facts", "8", "--n-eval", "15", "--lr", "1e-3",
                     "--train-batch-size", "4", *FIT, "--out"],
        "predict": ["predict-edit", "tiny_city", "tiny_country", "--value", "Paris", "-n", "40", *FIT, "--out"],
    }
    with one_thread():
        for name, command in commands.items():
            assert main([*command, str(root / name), *shared]) == 0, name
        lm = load_model(str(model))
        config = GeneralizationConfig(n_facts=2, seeds=(0,), n_inputs=40, fit=FitConfig(estimator="ridge", alpha=1.0, n_boot=10),
                                      train=TrainConfig(learning_rate=1e-2, epochs=8, batch_size=4))
        relations = [RelationSpec("tiny_city", "tiny_country", "City->Country"), RelationSpec("tiny_country", "tiny_city", "no reference")]
        generalization_table(lm, load_registry([registry]), relations, config).save(root / "table5")
    AblationTable(tuple(AblationResult("city->country", mapping, seed, rate, 0.0, 0.01, 1.0, 1.0, 1.0, 10, 128, 100, 1.0,
                                       {"vocabulary": "tiny-llama", "seed": seed})
                        for mapping, rate in (("real", 0.6), ("shuffled", 0.1)) for seed in (0, 1))).save(root / "table7")
    write_extractive_and_lens_runs(root)
    return {name: root / name for name in FIGURES}
