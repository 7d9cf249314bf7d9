"""The study commands on tiny models, each checked against a computation of its own: demo's printed r against a
plain numpy refit, diagnose's per-fact weights, priors and Table-6 readings against W and b, subwords' category rows
against the fit and the facts, gradcorr's row against the library call (and a shuffled W), and scale's rows against
precision measured model by model."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from helpers.tiny import CITIES, COUNTRIES, NAMES, WORDS, city_country_registry, one_thread, tiny_gpt2, tiny_llama, tiny_subword_tokenizer, tiny_tokenizer

import lincorr.studies.training.gradients as gradients_module
import lincorr.studies.logits.scale as scale_module
from lincorr.cli import main
from lincorr.fit import FitConfig, fit_relation
from lincorr.studies.logits.precision import measure_precision
from lincorr.inputs import sample_vocab_inputs
from lincorr.knowledge import load_registry
from lincorr.metrics import hit_at_k
from lincorr.models import load_model
from lincorr.relations import RelationSpec


@pytest.fixture(autouse=True)
def single_thread():
    with one_thread():
        yield


def saved_model(directory, tokenizer, build=tiny_llama):
    build(len(tokenizer)).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


# ---- demo ----

def numpy_fit(source: np.ndarray, target: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """target = source @ W + b by least squares plus alpha * |W|^2 (0: ols); centring first leaves b unpenalised."""
    source, target = source.astype(np.float64), target.astype(np.float64)
    source_mean, target_mean = source.mean(0), target.mean(0)
    centred = source - source_mean
    W = np.linalg.solve(centred.T @ centred + alpha * np.eye(source.shape[1]), centred.T @ (target - target_mean))
    return W, target_mean - source_mean @ W


def numpy_labelwise_r(fit, source: np.ndarray, target: np.ndarray) -> float:
    """Mean over target columns of Pearson r between the prediction and the truth."""
    W, intercept = fit
    predicted = source.astype(np.float64) @ W + intercept
    return float(np.mean([np.corrcoef(predicted[:, j], target[:, j])[0, 1] for j in range(target.shape[1])]))


# The demo prints the rows of these cities (cli.core.DEMO_CITIES), so the tiny vocabulary and city domain need them.
DEMO_CITIES = (*CITIES, "Shanghai", "Moscow", "Madrid")
DEMO_COUNTRIES = (*COUNTRIES, "China", "Russia", "Spain")


def test_demo_prints_the_labelwise_r_of_a_plain_numpy_refit(tmp_path, capsys):
    model = saved_model(tmp_path / "model", tiny_tokenizer([*WORDS, *DEMO_CITIES[5:], *DEMO_COUNTRIES[5:], *NAMES]))
    # The bundled city and country prompts with their domains cut to the tiny tokenizer's words.
    registry = tmp_path / "tiny.yaml"
    registry.write_text(f"domains:\n  city: [{', '.join(DEMO_CITIES)}]\n  country: [{', '.join(DEMO_COUNTRIES)}]\n", encoding="utf-8")
    inputs = tmp_path / "inputs.txt"
    inputs.write_text("\n".join(NAMES[:80]), encoding="utf-8")
    out = tmp_path / "demo"
    assert main(["demo", "--model", str(model), "--registry", str(registry), "--inputs", str(inputs), "--out", str(out),
                 "--bootstrap", "50", "--quiet"]) == 0
    text = capsys.readouterr().out
    printed_ridge = float(re.search(r"^label-wise r\s+(-?\d+\.\d+)", text, re.MULTILINE).group(1))
    printed_ols = float(re.search(r"paper's ols\s+label-wise r (-?\d+\.\d+)", text).group(1))

    result = json.loads((out / "result.json").read_text(encoding="utf-8"))
    source = np.load(out / "source_logits.npy", allow_pickle=False)
    target = np.load(out / "target_logits.npy", allow_pickle=False)
    train, test = np.array(result["train_index"]), np.array(result["test_index"])
    assert result["estimator"] == "ridge" and result["alpha"] > 0 and source.shape == (80, 8)
    ridge = numpy_fit(source[train], target[train], result["alpha"])
    np.testing.assert_allclose(np.load(out / "W.npy", allow_pickle=False), ridge[0], atol=1e-4)
    # Printed with 3 decimals: the rounding alone moves it by up to 5e-4.
    assert printed_ridge == pytest.approx(numpy_labelwise_r(ridge, source[test], target[test]), abs=6e-4)
    assert printed_ols == pytest.approx(numpy_labelwise_r(numpy_fit(source[train], target[train], 0.0), source[test], target[test]), abs=6e-4)
    assert printed_ols != printed_ridge  # two fits, not one number printed twice
    assert (out / "report.html").stat().st_size > 0


def test_a_demo_on_too_few_inputs_for_ols_saves_and_says_why_ols_is_left_out(tmp_path, capsys):
    model = saved_model(tmp_path / "model", tiny_tokenizer([*WORDS, *DEMO_CITIES[5:], *DEMO_COUNTRIES[5:], *NAMES]))
    registry = tmp_path / "tiny.yaml"
    registry.write_text(f"domains:\n  city: [{', '.join(DEMO_CITIES)}]\n  country: [{', '.join(DEMO_COUNTRIES)}]\n", encoding="utf-8")
    inputs = tmp_path / "inputs.txt"
    inputs.write_text("\n".join(NAMES[:20]), encoding="utf-8")  # 8 training inputs against 8 cities: ridge fits, ols cannot
    out = tmp_path / "demo"
    assert main(["demo", "--model", str(model), "--registry", str(registry), "--inputs", str(inputs), "--out", str(out),
                 "--test-fraction", "0.6", "--alpha", "1", "--bootstrap", "10", "--quiet"]) == 0
    assert re.search(r"paper's ols\s+not fitted: ols needs more training inputs", capsys.readouterr().out)
    assert (out / "result.json").exists() and (out / "report.html").exists()


# ---- diagnose and subwords: the generalization study per fact and per token category ----

# Kenya, Peru and Chile are not in the tokenizer's vocabulary: they are spelled in letters, so their first token is a fragment.
SUBWORD_COUNTRIES = ("France", "England", "Japan", "Italy", "Germany", "Kenya", "Peru", "Chile")
TRAINING_REGISTRY = city_country_registry(CITIES, SUBWORD_COUNTRIES, "{Paris: France, London: [England, Japan], Tokyo: Japan, Rome: Kenya, Berlin: Peru}")
RELATION = RelationSpec("tiny_city", "tiny_country")
RIDGE = FitConfig(estimator="ridge", alpha=1.0, n_boot=100)  # what `-n 40 --alpha 1` asks the training commands for


@pytest.fixture
def training_workspace(tmp_path):
    """A tiny Llama whose WordPiece tokenizer spells made-up names (and three countries) in letters, and the registry above."""
    saved_model(tmp_path / "model", tiny_subword_tokenizer(WORDS))
    (tmp_path / "tiny.yaml").write_text(TRAINING_REGISTRY, encoding="utf-8")
    return tmp_path


def training_command(ws, command, *extra):
    return [command, "tiny_city", "tiny_country", "--model", str(ws / "model"), "--registry", str(ws / "tiny.yaml"), "-n", "40",
            "--alpha", "1", "--lr", "1e-2", "--quiet", *extra]


def test_diagnose_per_fact_weights_priors_and_cases_agree_with_w(training_workspace, capsys):
    ws = training_workspace
    assert main(training_command(ws, "diagnose", "--n-facts", "4", "--n-seeds", "1", "--epochs", "8", "--json")) == 0
    payload = json.loads(capsys.readouterr().out)
    # The W and b the study judged by: the same fit, made again (seeded inputs and split, closed-form ridge).
    bound = fit_relation(load_model(str(ws / "model")), load_registry([ws / "tiny.yaml"]), RELATION, n_inputs=40, fit=RIDGE)
    W, bias = bound.fit.W, bound.fit.intercept
    sources, targets = bound.source.domain.words, bound.target.domain.words
    facts = payload["facts"]
    assert len(facts) == 4
    for fact in facts:
        s, generated = sources.index(fact["source_answer"]), targets.index(fact["generated"])
        assert fact["references"] == [targets[c] for c in bound.columns[s]]
        ref = max(bound.columns[s], key=lambda c: W[s, c])  # the reference alias W favours most
        assert fact["w_ref"] == pytest.approx(W[s, ref], rel=1e-5) and fact["w_gen"] == pytest.approx(W[s, generated], rel=1e-5)
        assert fact["w_max"] == pytest.approx(W[s].max(), rel=1e-5)
        assert fact["bias_ref"] == pytest.approx(bias[ref], rel=1e-5) and fact["bias_gen"] == pytest.approx(bias[generated], rel=1e-5)
        assert fact["generalized"] == (fact["generated"] in fact["references"])
        # Table 6's reading: a learned fact that did not generalize had W favour the wrong answer, or the wrong answer's prior win.
        expected = ("generalized" if fact["generalized"] else "not learned" if not fact["learned"]
                    else "wrong weight" if W[s, ref] < W[s, generated] else "low prior" if bias[generated] > bias[ref] else "unexplained")
        assert fact["category"] == expected
    assert payload["categories"] == {c: sum(f["category"] == c for f in facts) for c in payload["categories"]}
    # Fig. 5's bins hold every learned fact once, so their rates weighted by size give the rate over the learned facts.
    learned = [f["generalized"] for f in facts if f["learned"]]
    curve = payload["weight_curve"]
    assert sum(row["n"] for row in curve) == len(learned)
    assert sum(row["n"] * row["generalization_rate"] for row in curve) == pytest.approx(sum(learned))


def test_subwords_rows_split_the_fit_and_the_facts_by_token_category(training_workspace, capsys):
    ws = training_workspace
    assert main(training_command(ws, "subwords", "--n-facts", "2", "--n-seeds", "1", "--epochs", "8", "--json", "--out", str(ws / "out"))) == 0
    payload = json.loads(capsys.readouterr().out)
    rows = {row["category"]: row for row in payload["rows"]}
    tokenizer = tiny_subword_tokenizer(WORDS)
    first_tokens = {w: tokenizer.decode(tokenizer(" " + w, add_special_tokens=False)["input_ids"][:1]) for w in SUBWORD_COUNTRIES}
    whole = [w for w, token in first_tokens.items() if token == w]
    assert len(whole) == 5 and rows["whole_word"]["n_target_words"] == 5 and rows["subword"]["n_target_words"] == 3
    assert rows["word_in_phrase"]["n_target_words"] == 0

    bound = fit_relation(load_model(str(ws / "model")), load_registry([ws / "tiny.yaml"]), RELATION, n_inputs=40, fit=RIDGE,
                         keep_subwords=True)
    is_whole = np.array([w in whole for w in bound.target.domain.words])
    assert rows["whole_word"]["labelwise_r"] == pytest.approx(np.nanmean(bound.fit.labelwise_r[is_whole]))
    assert rows["subword"]["labelwise_r"] == pytest.approx(np.nanmean(bound.fit.labelwise_r[~is_whole]))
    whole_subjects = {s: c for s, c in bound.columns.items() if is_whole[c[0]]}
    assert rows["whole_word"]["n_subjects"] == 3 and rows["subword"]["n_subjects"] == 2  # Rome -> Kenya, Berlin -> Peru
    assert rows["whole_word"]["hit_at_5"] == hit_at_k(bound.fit.W, whole_subjects, (5,))[5]
    # Facts are spread evenly over the categories that have subjects, and each row's rate is over its own facts.
    facts = json.loads((ws / "out" / "generalization" / "facts.json").read_text(encoding="utf-8"))
    assert rows["whole_word"]["n_facts"] == rows["subword"]["n_facts"] == 1
    for category in ("whole_word", "subword"):
        mine = [f for f in facts if f["reference_category"] == category]
        assert rows[category]["generalization_rate"] == np.mean([f["generalized"] for f in mine])
        assert rows[category]["rate_before"] == np.mean([f["generalized_before"] for f in mine])


# ---- gradcorr ----

def test_gradcorr_reports_the_library_measurement_with_the_options_given(training_workspace, capsys, monkeypatch):
    ws = training_workspace
    measured = []
    real = gradients_module.measure_gradient_correlation
    monkeypatch.setattr(gradients_module, "measure_gradient_correlation",
                        lambda *args, **kwargs: measured.append(real(*args, **kwargs)) or measured[-1])
    assert main(training_command(ws, "gradcorr", "--n-step-facts", "8", "--n-eval", "15", "--json")) == 0
    payload = json.loads(capsys.readouterr().out)
    (result,) = measured
    assert result.config.n_step_facts == 8 and result.config.n_eval == 15 and result.config.train.learning_rate == 1e-2
    assert result.config.fit.alpha == 1.0 and result.config.n_inputs == 40
    (row,) = payload["rows"]
    assert row["gradient_r"] == pytest.approx(result.gradient_r) and row["control_r"] == pytest.approx(result.control_r)
    assert row["gradient_r"] == pytest.approx(np.nanmean(result.labelwise_gradient_r))
    # The step moved the logits it is judged on, so the correlation is of real changes.
    assert row["mean_abs_source_change"] > 0 and row["mean_abs_target_change"] > 0
    # Even on a random tiny model one step moves the target logits as W predicts and a row-shuffled W does not: with these
    # settings, seeds 0, 1, 2 measured gradient r 0.57, 0.52, 0.55 against controls -0.01, -0.17, -0.00 (gaps 0.55 to 0.69);
    # a gap of 0.25 is under half the smallest.
    assert row["gradient_r"] > row["control_r"] + 0.25


# ---- scale ----

def test_scale_rows_equal_precision_measured_on_each_model_alone(tmp_path, tokenizer, capsys, monkeypatch):
    small = saved_model(tmp_path / "small", tokenizer)
    big = saved_model(tmp_path / "big", tokenizer, tiny_gpt2)
    registry_file = tmp_path / "tiny.yaml"
    registry_file.write_text(TRAINING_REGISTRY, encoding="utf-8")
    # Only the fits the command asks for are read from its call; the inputs and the measurement are made again here.
    asked = []
    monkeypatch.setattr(scale_module, "measure_precision", lambda *args, **kwargs: asked.append(args[4]) or measure_precision(*args, **kwargs))
    assert main(["scale", "--models", f"{big},{small}", "--relations", "tiny_city:tiny_country", "-n", "60", "--registry",
                 str(registry_file), "--json", "--quiet"]) == 0
    payload = json.loads(capsys.readouterr().out)
    registry = load_registry([registry_file])
    sizes = []
    for spec, configs in zip((big, small), asked):
        lm = load_model(str(spec))
        sizes.append(sum(p.numel() for p in lm.model.parameters()))
        alone = measure_precision(lm, registry, [RELATION], sample_vocab_inputs(lm.tokenizer, 60, 0), configs)
        rows = [r for r in payload["rows"] if r["model"] == lm.name]
        assert len(rows) >= 2 and {r["n_parameters"] for r in rows} == {sizes[-1]}  # ols beside ridge at least
        assert [r["estimator"] for r in rows] == [row.estimator for row in alone.rows]
        for row, expected in zip(rows, alone.rows):
            assert row["labelwise_r_mean"] == pytest.approx(expected.labelwise_r_mean)
            assert row["hit_influenced"] == {str(k): pytest.approx(v) for k, v in expected.hit_influenced.items()}
            assert row["hit_influencing"] == {str(k): pytest.approx(v) for k, v in expected.hit_influencing.items()}
    # Smallest model first, whatever order --models named them in.
    assert [m["n_parameters"] for m in payload["models"]] == sorted(sizes)
