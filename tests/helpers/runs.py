"""One run directory per study of lincorr on a tiny Llama saved to disk: what the report tests read (conftest's `tiny_runs`)."""

from __future__ import annotations

import numpy as np

from helpers.tiny import NAMES, REGISTRY_YAML, WORDS, one_thread, tiny_llama, tiny_subword_tokenizer
from lincorr.cli import main

# Small and quick: ridge with a fixed penalty, a short bootstrap, a few facts learned in a few epochs.
FIT = ["--estimator", "ridge", "--alpha", "1", "--bootstrap", "10"]
TRAIN = ["-n", "40", "--n-facts", "3", "--epochs", "8", "--lr", "1e-2", "--train-batch-size", "4"]
# Study directory -> how many figures its section draws: one directory per result type (`lincorr.studies.RESULT_TYPES`).
FIGURES = {"reproduce": 2, "fit": 2, "matrix": 3, "precision": 1, "precision-curve": 1, "lre": 1, "cases": 1, "resilience": 4, "scale": 3, "generalize": 1,
           "subwords": 1, "gradcorr": 1, "predict": 1, "table5": 1, "table7": 1, "widths": 1, "scores": 2, "ocr": 1, "freeze": 2,
           "ordering": 2, "graft": 1, "extractive-predict": 1, "lens": 1, "ovector": 1, "ffn-ablate": 1, "ovector-w": 1, "ripple": 4}
# The study each run directory's provenance.json names.
STUDIES = {"predict": "predict-edit", "table5": "generalize-table5", "table7": "ablate-table7", "widths": "ablate-widths",
           "scores": "extractive-scores", "ocr": "extractive-ocr", "freeze": "extractive-freeze", "ordering": "extractive-ordering",
           "graft": "extractive-graft"}


def write_extractive_and_lens_runs(root) -> None:
    """Results of the inside-path studies, saved without a model: planted score grids, the extractive studies and logit-lens curves."""
    from lincorr.studies.extractive.positions import ROLES
    from lincorr.studies.extractive.scores import SCORES, ScoresConfig, ScoresResult
    from lincorr.studies.vectors.arithmetic import LensResult

    rng = np.random.default_rng(0)
    checked = ("mlp[0]", "head[1,0]")
    ScoresResult(
        model_name="tiny-llama", config=ScoresConfig(), component_names=("mlp", "head 0", "head 1"),
        grids={key: rng.normal(size=(2, 3)) for key in SCORES}, checked=checked,
        linear_checked={key: rng.normal(size=2) for key in SCORES}, exact_checked={key: rng.normal(size=2) for key in SCORES},
        mean_ranks={"fact_mean_rank_before": 2.5, "fact_mean_rank_after": 1.0, "implication_mean_rank_before": 2.5,
                    "implication_mean_rank_after": 2.1},
        training={"epochs": 2}, seconds_train=0.0, seconds_scores=0.0, seconds_check=0.0,
        role_grids={key: rng.normal(size=(len(ROLES), 2, 3)) for key in SCORES},
    ).save(root / "scores")
    write_extractive_runs(root)
    LensResult(
        task="country_capital", model="tiny-llama", model_fingerprint="params:planted", n_pairs=4,
        argument_rr=np.array([0.9, 0.6, 0.2]), answer_rr=np.array([0.1, 0.4, 0.8]), answer_top1=np.array([0.0, 0.25, 0.75]),
        mid_argument_rr=np.array([0.7, 0.4]), mid_answer_rr=np.array([0.2, 0.6]), crossing_layer=2, crossing_component="mlp",
        final_accuracy=0.75, example_prompt="France: Paris\nJapan:", settings={"floor": 0.1, "seed": 0}, seconds=0.0,
    ).save(root / "lens")


def query_set(words: tuple[str, ...], prompts: tuple[str, ...]):
    """Prompts whose answers are the candidates in turn (the first token of each word is the word itself)."""
    from lincorr.domains import Domain
    from lincorr.studies.extractive.ocr import QuerySet

    domain = Domain("candidates", words, tuple(range(len(words))), words, ("whole_word",) * len(words), ())
    return QuerySet(prompts, tuple(i % len(words) for i in range(len(prompts))), domain)


def write_extractive_runs(root) -> None:
    """OCR, freezing, ordering, grafting and W's predictions, each a planted result saved by its study's `.save`."""
    from lincorr.studies.extractive.freeze import SETTINGS, FreezeConfig, FreezeResult
    from lincorr.studies.extractive.ocr import HOPS, HopData, OcrConfig, OcrResult
    from lincorr.studies.extractive.origins import ORDERS, WEIGHT_SETS, GraftResult, NovelData, OrderingResult, OriginsConfig
    from lincorr.studies.extractive.predict import PredictConfig, PredictResult

    cities, names = ("Paris", "Tokyo", "Rome"), ("Alice", "Bob", "Carol")
    facts = query_set(cities, tuple(f"{name} lives in" for name in names))
    OcrResult("tiny-llama", OcrConfig(n_facts=3), HopData("first", names, cities, facts, query_set(("French", "Japanese"), names)), 1.0,
              tuple({"epoch": e, "fact_mean_rank": f, "implication_mean_rank": i} for e, f, i in ((0, 1.0, 0.5), (1, 0.6, 0.4), (2, 0.0, 0.3))),
              (2.0, 1.0), 0.0).save(root / "ocr")
    ranks = ({"fact_mean_rank": 0.5, "implication_mean_rank": 1.0},)
    FreezeResult("tiny-llama", FreezeConfig(n_facts=3), 2, 1, "paper", None, {hop: [0.5, -0.25] for hop in HOPS},
                 tuple({"setting": setting, "hop": hop, **ranks[0]} for setting in SETTINGS for hop in HOPS), 1.0, 0.0).save(root / "freeze")
    config = OriginsConfig(n_train=3, n_test=3, n_cities=3, orders=ORDERS)
    data = NovelData(cities, ("cat", "dog", "owl"), *(facts,) * 6)
    OrderingResult("tiny-llama", config, data, {order: ({"phase": "before", "epoch": 0, **ranks[0]}, {"phase": "facts", "epoch": 1, **ranks[0]})
                                                for order in ORDERS},
                   {order: ({"epoch": 0, **ranks[0]}, {"epoch": 1, "fact_mean_rank": 0.0, "implication_mean_rank": 0.5}) for order in ORDERS},
                   0.0).save(root / "ordering")
    components = ("mlp[0]", "mlp[1]", "mlp[2]", "head[0,0]", "head[0,1]", "head[1,0]")
    GraftResult("tiny-llama", config, tuple({"weights": w, "impl_counterfactual": 1.0, "impl_original": 0.5, "facts_counterfactual": 0.2,
                                            "facts_original": 0.1} for w in WEIGHT_SETS), components,
                np.array([0.1, 0.3, 0.2, -0.1, 0.0, 0.4]), np.array([0.2, 0.5, 0.1, -0.2, 0.1, 0.3]), 1.0, 0.0).save(root / "graft")
    PredictResult("tiny-llama", PredictConfig(n_facts=3, n_random=20), tuple(
        {"name": name, "city": city, "language": language, "implication_rank_before": 1, "implication_rank_after": after,
         "right_after": after == 0, "w_ref": w, "w_rank_score": score, "predicted_success": success, "predicted_language": language}
        for name, city, language, after, w, score, success in (("Alice", "Paris", "French", 0, 0.4, 0, 0.6),
                                                                ("Bob", "Tokyo", "Japanese", 1, -0.2, -1, 0.3),
                                                                ("Carol", "Rome", "Italian", 0, None, None, None))),
        0.5, 0.0).save(root / "extractive-predict")


def write_vector_runs(root) -> None:
    """An o-vector, an FFN ablation and the o-vector against W, planted and saved by their studies' `.save`."""
    from lincorr.studies.vectors.arithmetic import FFNAblationResult, OVectorResult
    from lincorr.studies.vectors.ovector_w import OVectorWResult

    OVectorResult("capitals", "uppercase", "tiny-llama", "params:planted", 1, 2.0, 8, ("France", "Japan"), "France", 0.6, 0.1, 0.2,
                  0.05, 0.5, 0.7, 0.2, 0.3, 0.1, 0.6, 0.8, 0.3, 0.01, 0.002, 3.5, 3.1, ({"layer": 0, "accuracy_with": 0.2, "rr_with": 0.3}, {"layer": 1, "accuracy_with": 0.6, "rr_with": 0.7}),
                  "France: Paris\nJapan:", {"seed": 0}, 0.0, protocol="paper",
                  by_context=tuple({"context": context, **{f"accuracy_{key}": value for key, value in zip(("with", "without", "other_task", "random"), values)},
                                    "p_vs_without": p / 10, "p_over_every_control": p} for context, values, p in (("copy", (0.6, 0.1, 0.2, 0.05), 0.01),
                                                                                          ("zero-shot", (0.4, 0.2, 0.1, 0.0), 0.2)))).save(root / "ovector")
    FFNAblationResult("capitals", "tiny-llama", "params:planted", 1, "zero", 8, 1, 0.75, 0.25, 0.75, 0.625, 0.03, "Japan:", "Japan Japan:",
                      {"seed": 0}, 0.0).save(root / "ffn-ablate")
    OVectorWResult("capitals", "Country->Capital", "tiny-llama", "params:planted", 1, 2.0, ("France", "Japan"), (("Paris",), ("Tokyo",)),
                   ("Paris", "Tokyo", "Rome"), np.array([[1.0, 0.0, 0.2], [0.1, 0.9, 0.0]]), np.array([[0.8, 0.1, 0.1], [0.0, 0.7, 0.2]]),
                   np.array([0.9, 0.8]), np.array([0.1, -0.2, 0.05, 0.3]), 0.2, 0.6, {"seed": 0}, 0.0).save(root / "ovector-w")


def write_tiny_runs(root) -> dict:
    """One directory per study of lincorr, written by the CLI on a tiny Llama saved to disk (or by the study's `.save`)."""
    from lincorr.studies.training.ablation import AblationResult
    from lincorr.studies.training.ablation_tables import AblationTable, WidthSweep
    from lincorr.studies import load_result
    from lincorr.studies.logits.lre import LreTable
    from lincorr.fit import FitConfig
    from lincorr.studies.training.generalization import GeneralizationConfig
    from lincorr.studies.training.table5 import measure_table5
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
        "fit": ["fit", "tiny_city", "tiny_country", "--inputs", str(inputs), *FIT, "--heatmap", "--out"],
        "matrix": ["matrix", "--family", "tiny", "--inputs", str(inputs), *FIT, "--out"],
        "precision": ["precision", "tiny_city", "tiny_country", "--inputs", str(inputs), "--out"],
        "cases": ["cases", "tiny_city", "tiny_country", "--word", "Paris", "--word", "Tokyo", "-k", "3", "--inputs", str(inputs), "--out"],
        "resilience": ["resilience", "--eval-model", str(other_model), "--prompts", "tiny_city,tiny_country", "--inputs", str(inputs), "--out"],
        "scale": ["scale", "--models", f"{model},{other_model}", "--relations", "tiny_city:tiny_country", "-n", "60", "--out"],
        "generalize": ["generalize", "tiny_city", "tiny_country", *TRAIN, "--n-seeds", "2", *FIT, "--out"],
        "subwords": ["subwords", "tiny_city", "tiny_country", *TRAIN, "--n-seeds", "1", *FIT, "--out"],
        "gradcorr": ["gradcorr", "tiny_city", "tiny_country", "-n", "40", "--n-step-facts", "8", "--n-eval", "15", "--lr", "1e-3",
                     "--train-batch-size", "4", *FIT, "--out"],
        "predict": ["predict-edit", "tiny_city", "tiny_country", "--value", "Paris", "-n", "40", *FIT, "--out"],
        "precision-curve": ["precision", "tiny_city", "tiny_country", "--inputs", str(inputs), "--n-curve", "40,60", "--out"],
    }
    with one_thread():
        for name, command in commands.items():
            assert main([*command, str(root / name), *shared]) == 0, name
        lm = load_model(str(model))
        config = GeneralizationConfig(n_facts=2, seeds=(0,), n_inputs=40, fit=FitConfig(estimator="ridge", alpha=1.0, n_boot=10),
                                      train=TrainConfig(learning_rate=1e-2, epochs=8, batch_size=4))
        relations = [RelationSpec("tiny_city", "tiny_country", "City->Country"), RelationSpec("tiny_country", "tiny_city", "no reference")]
        measure_table5(lm, load_registry([registry]), relations, config).save(root / "table5")
    precision = load_result(root / "precision")
    LreTable(precision.model_name, precision.n_inputs, precision.rows, {row.label: "factual" for row in precision.rows},
             (("word_first_letter", "fewer than 10 subjects keep a right object"),), 1.0).save(root / "lre")
    AblationTable(tuple(AblationResult("city->country", mapping, seed, rate, 0.0, 0.01, 1.0, 1.0, 1.0, 10, 128, 100, 1.0,
                                       {"vocabulary": "tiny-llama", "seed": seed})
                        for mapping, rate in (("real", 0.6), ("shuffled", 0.1)) for seed in (0, 1))).save(root / "table7")
    WidthSweep(tuple(AblationResult("city->country", mapping, seed, rate * width / 64, 0.0, 0.01, 1.0, 1.0, 1.0, 10, 128, 100, 1.0,
                                    {"vocabulary": "tiny-llama", "seed": seed, "embedding_width": width, "explained_variance": width / 64})
                     for width in (16, 32) for mapping, rate in (("real", 0.6), ("shuffled", 0.1)) for seed in (0, 1))).save(root / "widths")
    write_extractive_and_lens_runs(root)
    write_vector_runs(root)
    write_reproduction_run(root)
    write_ripple_run(root)
    return {name: root / name for name in FIGURES}


def write_ripple_run(root) -> None:
    """A planted ripple run: four queries of each of eight edits, W tracking the change, benchmarked by the study's own
    `benchmark` (its ROC curves and W against the change on both sets of queries: four figures)."""
    from lincorr.ripple.benchmark import CLARE, PREDICTORS, PRIOR, W_PAPER, benchmark
    from lincorr.ripple.study import RippleResult

    rng = np.random.default_rng(0)
    rows = []
    for edit in range(8):
        for query in range(4):
            change, before = rng.normal(), int(rng.integers(2, 5))
            row = {"edit": edit, "problem": query, "subject": f"subject {edit}", "new_object": "Japan", "relation": "CONTINENT",
                   "answer": "Asia", PRIOR: float(rng.normal() - 3), f"{W_PAPER} rank": int(rng.integers(1, 6)),
                   "condition_rank": 1 + query % 2, "clare_layers": [float(x) for x in rng.normal(size=3)], "rank_before": before,
                   "rank_after": 1 if change > 0 else before, "held_answer": "Europe", "held_logprob": -1.0,
                   "held_rank_after": 2 if change > 0 else 1, "held_logprob_after": -1.0 - change, "learned": True}
            row["logprob_after"] = row[PRIOR] + change
            row.update({name: float(rng.normal()) for name in PREDICTORS if name not in (PRIOR, CLARE)})
            row[W_PAPER] = float(change + rng.normal())
            rows.append(row)
    RippleResult("tiny-llama", "params:planted", "planted edits", 8, {"changes no country": 3}, tuple(rows), (),
                 benchmark(rows, n_boot=50), {W_PAPER: 1.0, "edit": 2.0}, "all parameters",
                 {"max_edits": 8, "n_boot": 50}).save(root / "ripple")


def write_reproduction_run(root) -> None:
    """A planted claim table: one claim measured and tested, one that no step measures."""
    from lincorr.reproduce.runner import ClaimResult, ReproductionResult

    measured = ClaimResult("peng.table2", "Table 2", "W ranks the right target first", {"model": "llama-3-8b", "rows": [
        {"label": "City->Country", "source": "city", "target": "country", "hit_influenced": [0.42, 0.6, 0.7]}]},
        {"City->Country": {"ols": {"hit_influenced": [0.3, 0.5, 0.6]}}}, "City->Country Hit@1 ols 0.30 (chance 0.010)",
        "binomial: 6/20 hits vs chance 0.01", 0.3, 1e-8, "reproduced", "", step="precision", code={"lincorr.reproduce.steps:STEPS": "planted"},
        measured_at="2026-01-01T00:00:00+00:00", seconds=1.0)
    diagram = ClaimResult("peng.fig2", "Figure 2", "the hypothesis", {}, {}, "", "", None, None, "not applicable",
                          "a diagram of the hypothesis, nothing measured")
    ReproductionResult("peng", "Peng et al.", "tiny-llama", "params:planted", "quick", (measured, diagram)).save(root / "reproduce")
