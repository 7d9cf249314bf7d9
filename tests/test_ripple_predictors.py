"""The ripple predictors and benchmark (`lincorr.ripple`): each checked against a plain re-implementation on tiny models
built in code, the benchmark's statistics against scipy and scikit-learn, and its bootstrap clustered by edit."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr
from sklearn.metrics import roc_auc_score

from helpers.tiny import tiny_llama, tiny_tokenizer
from lincorr.domains import build_domain
from lincorr.models import wrap_model
from lincorr.ripple.benchmark import GRADSIM_EDITED, PREDICTORS, auc, benchmark, cluster_draws, improved, interval, spearman, statistics
from lincorr.finetune import Fact, train_on_facts
from lincorr.knowledge import load_registry
from lincorr.models import LM
from lincorr.ripple.hops import FIRST_HOP, NO_REGISTRY_PROMPT, NOT_A_PERSON, Hop, fact_prompt, hop_of, hops_of, registry_phrased
from lincorr.ripple.edits import Edit, Problem, Query
from lincorr.ripple.outcomes import EDIT_TRAINING, constrained_layers, edit_outcomes, learned
from lincorr.ripple.predictors import answer_scores, clare_similarities, grad_sims, gradient_parameters, prior

COUNTRIES = ("France", "Japan", "Italy", "Germany")
CONTINENTS = ("Europe", "Asia")
SUBJECTS = ("Alice", "Bob", "Carol")
WORDS = ("The name of the country of citizenship is continent which part capital city language "
         + " ".join(COUNTRIES + CONTINENTS + SUBJECTS)).split()


@pytest.fixture(scope="module")
def lm():
    tokenizer = tiny_tokenizer(WORDS)
    return wrap_model(tiny_llama(len(tokenizer)), tokenizer, name="tiny-ripple")


def edit(subject: str, new: str, old: str, answers: tuple[str, ...]) -> Edit:
    problems = tuple(Problem(
        Query(f"The name of the continent which the country of citizenship of {subject} is part of is", answer, "COUNTRY_OF_CITIZENSHIP", subject),
        Query(f"The name of the continent which {new} is part of is", answer, "CONTINENT", new)) for answer in answers)
    return Edit(f"The name of the country of citizenship of {subject} is {new}.", subject, "COUNTRY_OF_CITIZENSHIP", new, old, problems)


def domains(tokenizer):
    return {FIRST_HOP: build_domain(COUNTRIES, tokenizer, name=FIRST_HOP), "CONTINENT": build_domain(CONTINENTS, tokenizer, name="CONTINENT")}


def test_an_edit_becomes_templates_over_its_subject_and_new_object():
    hops, skipped = hops_of([edit("Alice", "Japan", "France", ("Asia",))])
    assert skipped == {}
    (hop,) = hops
    assert hop.fact_template == "The name of the country of citizenship of {} is"
    assert hop.query_template == "The name of the continent which the country of citizenship of {} is part of is"
    assert hop.condition_template == "The name of the continent which {} is part of is"
    assert (hop.subject, hop.new_object, hop.answer, hop.relation) == ("Alice", "Japan", "Asia", "CONTINENT")


def test_the_registry_phrasing_asks_a_citizenship_edit_in_the_papers_prompts_and_counts_out_the_rest():
    citizen = edit("Alice", "Japan", "France", ("Asia",))
    thing = dataclasses.replace(edit("Bob", "Italy", "France", ("Europe",)), relation="COUNTRY")
    currency = edit("Carol", "Japan", "France", ("Yen",))
    currency = dataclasses.replace(currency, problems=(Problem(currency.problems[0].query,
                                                               dataclasses.replace(currency.problems[0].condition, relation="CURRENCY")),))
    edits = [citizen, thing, currency]
    hops, _ = hops_of(edits)
    phrased, skipped = registry_phrased(hops, edits, load_registry())
    (hop,) = phrased
    assert (hop.fact_template, hop.query_template) == ("{} lives in the country of", "{} lives in the continent of")
    assert hop.condition_template == hops[0].condition_template and (hop.subject, hop.new_object, hop.answer) == ("Alice", "Japan", "Asia")
    assert skipped == {NOT_A_PERSON: 1, NO_REGISTRY_PROMPT: 1}


def test_edits_that_change_no_country_or_do_not_name_their_subject_are_counted_out():
    person = dataclasses.replace(edit("Alice", "Japan", "France", ("Asia", "Europe")), relation="SPOUSE")
    unnamed = edit("Alice", "Japan", "France", ("Asia",))
    unnamed = dataclasses.replace(unnamed, problems=(Problem(dataclasses.replace(unnamed.problems[0].query, prompt="Where is it?"),
                                                             unnamed.problems[0].condition),))
    hops, skipped = hops_of([person, unnamed])
    assert hops == () and sum(skipped.values()) == 3 and len(skipped) == 2
    assert isinstance(hop_of(0, dataclasses.replace(unnamed, prompt="Alice moved."), 0, unnamed.problems[0]), str)
    assert fact_prompt(unnamed) == "The name of the country of citizenship of Alice is"


def test_answer_scores_are_log_probabilities_within_the_domain_from_a_plain_forward(lm):
    domain = domains(lm.tokenizer)[FIRST_HOP]
    logprob, rank = answer_scores(lm, "The name of the country of citizenship of {} is", domain, "Alice", "Italy")
    ids = torch.tensor([lm.tokenizer("The name of the country of citizenship of Alice is")["input_ids"]])
    with torch.no_grad():
        logits = lm.model(input_ids=ids).logits[0, -1].double()
    within = logits[list(domain.token_ids)].log_softmax(-1)
    column = domain.index("Italy")
    assert logprob == pytest.approx(float(within[column]), abs=1e-5)
    assert rank == 1 + int((within > within[column]).sum())


def plain_gradient(model, tokenizer, prompt: str, answer: str) -> torch.Tensor:
    """The gradient of the answer token's cross-entropy, every parameter flattened, by loss.backward()."""
    ids = tokenizer(f"{prompt} {answer}")["input_ids"]
    model.zero_grad()
    logits = model(input_ids=torch.tensor([ids])).logits[0, -2].double()
    torch.nn.functional.cross_entropy(logits[None], torch.tensor([ids[-1]])).backward()
    return torch.cat([p.grad.reshape(-1).double() for p in model.parameters()])


def test_gradsim_is_the_cosine_of_plainly_computed_gradients(lm):
    (hop, other), _ = hops_of([edit("Alice", "Japan", "France", ("Asia", "Europe"))])
    model = lm.model
    edit_gradient = plain_gradient(model, lm.tokenizer, "The name of the country of citizenship of Alice is", "Japan")
    expected = [float(torch.nn.functional.cosine_similarity(edit_gradient, plain_gradient(
        model, lm.tokenizer, h.query_template.replace("{}", "Alice"), h.answer), dim=0)) for h in (hop, other)]
    model.zero_grad(set_to_none=True)
    assert grad_sims(lm, [hop, other]) == pytest.approx(expected, abs=1e-4)
    assert gradient_parameters(lm)[0] == "all parameters"
    assert all(not p.requires_grad or p.grad is None for p in model.parameters())


def test_gradsim_and_clare_rank_a_query_that_restates_its_edit_above_other_edits_queries(lm):
    """A planted pair: a query whose sentence is the edit's own scores 1 on both; paired with another edit, it does not."""
    planted = Hop(0, 0, "Alice", "Japan", "Japan", FIRST_HOP, "The name of the country of citizenship of {} is",
                  "The name of the country of citizenship of {} is", "{}")
    shuffled = dataclasses.replace(planted, subject="Bob", new_object="Italy")
    assert grad_sims(lm, [planted])[0] == pytest.approx(1.0, abs=1e-6)
    assert clare_similarities(lm, [planted])[0][-1] == pytest.approx(1.0, abs=1e-6)
    assert grad_sims(lm, [shuffled, planted])[1] < 0.99
    assert clare_similarities(lm, [shuffled, planted])[1][-1] < 0.99


@pytest.mark.parametrize("training", ["paper", "constrained"])
def test_an_edit_is_taught_to_a_copy_and_its_queries_asked_again(lm, training):
    (hop,), _ = hops_of([edit("Alice", "Japan", "France", ("Asia",))])
    before = {name: p.detach().clone() for name, p in lm.model.named_parameters()}
    config = dataclasses.replace(EDIT_TRAINING[training], learning_rate=0.05, epochs=30)
    if training == "constrained":
        config = constrained_layers(lm, config)
        assert config.layers == (0, 2) and config.trainable == (r"\.mlp\.",)
    known = prior(lm, hop, domains(lm.tokenizer))
    outcome = edit_outcomes(lm, [hop], [known["held_answer"]], domains(lm.tokenizer), config)
    assert outcome["learned"] and 1 <= outcome["steps"] <= 30
    assert all(torch.equal(p, before[name]) for name, p in lm.model.named_parameters())
    assert known["held_answer"] in CONTINENTS and known["held_logprob"] >= known["prior"]
    (after,) = outcome["after"]
    assert after["rank_after"] in (1, 2) and after["held_rank_after"] in (1, 2)
    assert (after["rank_after"] == after["held_rank_after"]) == (known["held_answer"] == "Asia")
    # The authors' GradSim: both gradients on the edited model, the same model training it again with the same seed gives
    trained = train_on_facts(lm.model, lm.tokenizer, [Fact("The name of the country of citizenship of Alice is", "Japan")], config,
                             stop_when=learned(lm, hop, domains(lm.tokenizer)[FIRST_HOP]))
    edited = LM("edited", trained.model, lm.tokenizer, fingerprint="edited", head_verified=lm.head_verified)
    assert after[GRADSIM_EDITED] == pytest.approx(grad_sims(edited, [hop])[0], abs=1e-6)
    assert after[GRADSIM_EDITED] != pytest.approx(grad_sims(lm, [hop])[0], abs=1e-3)


def test_auc_and_spearman_agree_with_scikit_learn_and_scipy():
    rng = np.random.default_rng(0)
    scores = np.round(rng.normal(size=60), 1)  # ties on purpose
    labels = rng.integers(0, 2, 60)
    change = scores + rng.normal(size=60)
    assert auc(scores, labels) == pytest.approx(roc_auc_score(labels, scores), abs=1e-12)
    assert spearman(scores, change) == pytest.approx(spearmanr(scores, change).statistic, abs=1e-12)
    assert np.isnan(auc(scores, np.ones(60))) and np.isnan(spearman(np.ones(5), change[:5]))


def rows_for(n_edits: int, per_edit: int, seed: int, strength: float = 1.0) -> list[dict]:
    """Synthetic benchmark rows: W tracks the change of log-probability with `strength`, the others are noise."""
    rng = np.random.default_rng(seed)
    rows = []
    for edit_index in range(n_edits):
        shared = rng.normal()  # the edit's own effect, shared by its queries: what makes them a cluster
        for _ in range(per_edit):
            change = shared + rng.normal()
            before = int(rng.integers(2, 6))
            row = {"edit": edit_index, "prior": rng.normal() - 3, "rank_before": before, "condition_rank": int(rng.integers(1, 3)),
                   "clare_layers": list(rng.normal(size=3))}
            row["logprob_after"] = row["prior"] + change
            row["rank_after"] = 1 if change > 0.5 else before
            row.update(answer="Asia", held_answer="Europe", held_rank_after=2 if change > 0.5 else 1)
            row.update({name: rng.normal() for name in PREDICTORS if name not in ("prior", "CLaRE-style")})
            row["W (ols, the paper's)"] = strength * change + rng.normal()
            rows.append(row)
    return rows


def test_the_bootstrap_resamples_edits_so_duplicated_queries_do_not_narrow_the_interval():
    rows = rows_for(30, 3, seed=1)
    doubled = sorted(rows + [dict(row) for row in rows], key=lambda row: row["edit"])
    widths = []
    for table in (rows, doubled):
        edits = np.array([row["edit"] for row in table])
        values = {"W": np.array([row["W (ols, the paper's)"] for row in table])}
        change = np.array([row["logprob_after"] - row["prior"] for row in table])
        label = improved(table, 1)
        draws = np.array([statistics({"W": values["W"][d]}, change[d], label[d])["W"] for d in cluster_draws(edits, 400, 0)])
        widths.append([np.diff(interval(draws[:, column]))[0] for column in (0, 1)])
    assert widths[1][0] == pytest.approx(widths[0][0], rel=1e-9)  # AUC does not change when every row is doubled
    assert widths[1][1] == pytest.approx(widths[0][1], rel=0.1)
    assert all(np.all(np.isin(np.unique(edits[d]), edits)) for d in cluster_draws(edits, 3, 0))


def test_the_benchmark_finds_a_planted_predictor_and_decides_the_claims_on_edits():
    result = benchmark(rows_for(60, 4, seed=2, strength=2.0), n_boot=400)
    every = result["subsets"]["all"]
    table = {row["predictor"]: row for row in every["predictors"]}
    assert table["W (ols, the paper's)"]["spearman"] > 0.6 and abs(table["GradSim"]["spearman"]) < 0.2
    assert table["W (ols, the paper's)"]["spearman_ci95"][0] > 0.4
    assert every["n_edits"] == 60 and every["n_queries"] == 240
    for claim in every["claims"]:
        assert claim["decision"]["units"] == 60 and claim["decision"]["unit"] == "edits"
        assert claim["decision"]["verdict"] == "reproduced"
    null = benchmark(rows_for(60, 4, seed=3, strength=0.0), n_boot=400)["subsets"]["all"]
    assert all(claim["decision"]["verdict"] != "reproduced" for claim in null["claims"])


def test_w_reads_the_new_objects_row_at_the_answers_column(lm, monkeypatch):
    """A W with planted pairs (Japan -> Asia, France -> Europe): the planted hops rank their answer first in the new
    object's row, the same hops with the answers swapped do not, whatever order the domains keep their words in."""
    import types

    import lincorr.ripple.predictors as predictors

    def planted_fit(lm, source, target, inputs, config, settings):
        W = np.zeros((len(source.domain), len(target.domain)))
        for country, continent in (("Japan", "Asia"), ("France", "Europe")):
            W[source.domain.index(country), target.domain.index(continent)] = 1.0
        return types.SimpleNamespace(W=W, labelwise_r=np.array([0.5]))

    monkeypatch.setattr(predictors, "measure_pair", planted_fit)
    hops, _ = hops_of([edit("Alice", "Japan", "France", ("Asia", "Europe")), edit("Bob", "France", "Italy", ("Europe", "Asia"))])
    scores, fits = predictors.w_predictions(lm, hops, domains(lm.tokenizer), n_inputs=20)
    planted = [(hop.new_object, hop.answer) in (("Japan", "Asia"), ("France", "Europe")) for hop in hops]
    for name in predictors.W_FITS:
        assert [row[name] for row in scores] == [1.0 if p else 0.0 for p in planted]
        assert [row[f"{name} rank"] for row in scores] == [1 if p else 2 for p in planted]
    assert len(fits) == len(predictors.W_FITS)  # both edits ask through the same pair of prompts: W fitted once per fit
