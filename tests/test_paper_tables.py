"""The paper-table options (--table2, --table4, --table5, --table7, cases --paper-table) and --all-references on a
tiny model whose vocabulary holds every word of the bundled registry's paper prompts: each option runs the paper's
relations in the paper's order, and its rows equal the same relation measured on its own."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers.tiny import one_thread, tiny_llama, tiny_subword_tokenizer

from lincorr.cli import main
from lincorr.collection import collect
from lincorr.studies.logits.cases import paper_cases
from lincorr.fit import FitConfig, fit_tables
from lincorr.inputs import sample_vocab_inputs
from lincorr.knowledge import load_registry
from lincorr.metrics import hit_at_k
from lincorr.models import load_model
from lincorr.paper import paper_table
from lincorr.prompts import registry_prompts
from lincorr.relations import bind_relation, registry_relations

PAPER_TABLES = ("table2", "table4", "table5", "table7", "cases")
N_INPUTS = 60
RIDGE = FitConfig(estimator="ridge", alpha=1.0)  # ols cannot fit 264 cities on 30 training inputs
RIDGE_OPTIONS = ("-n", str(N_INPUTS), "--estimator", "ridge", "--alpha", "1", "--quiet")


@pytest.fixture(autouse=True)
def single_thread():
    with one_thread():
        yield


def paper_vocabulary() -> list[str]:
    """Every word of the bundled templates and answer domains of the paper tables' prompts, so each answer is a whole token."""
    registry = load_registry()
    names = sorted({name for table in PAPER_TABLES for r in paper_table(table).relations() for name in (r.source, r.target)})
    words: dict[str, None] = {}
    for name in names:
        spec = registry.prompt(name)
        for text in (spec.template.replace("{}", " "), *registry.domain_words(spec.domain)):
            words.update(dict.fromkeys(text.split()))
    return list(words)


@pytest.fixture(scope="module")
def paper_model(tmp_path_factory):
    """A tiny Llama saved with that vocabulary (WordPiece, so made-up names are spelled in letters)."""
    directory = tmp_path_factory.mktemp("paper-model")
    tokenizer = tiny_subword_tokenizer(paper_vocabulary())
    tiny_llama(len(tokenizer)).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def paper_labels(table: str) -> list[str]:
    return [relation.label for relation in paper_table(table).relations()]


def fresh_cache(monkeypatch, tmp_path, name: str) -> None:
    """A new cache directory, so a study computes a relation again instead of reading the row a table stored."""
    monkeypatch.setenv("LINCORR_CACHE_DIR", str(tmp_path / name))


def direct_pairs(lm, relations, config=RIDGE):
    """Each relation's PairResult, fitted here on tables collected over the CLI's vocabulary sample."""
    registry = load_registry()
    prompts, _ = registry_prompts(registry, {n for r in relations for n in (r.source, r.target)}, lm.tokenizer)
    tables = collect(lm, prompts, sample_vocab_inputs(lm.tokenizer, N_INPUTS, 0))
    return {r: fit_tables(tables[r.source], tables[r.target], config, source_name=r.source, target_name=r.target) for r in relations}


# ---- precision --table2 and --all-references ----

def test_precision_table2_rows_are_the_papers_relations_and_hit_at_k_of_their_own_fit(paper_model, capsys):
    assert main(["precision", "--paper-table", "2", "--model", str(paper_model), *RIDGE_OPTIONS, "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    ridge = [row for row in payload["rows"] if row["estimator"] == "ridge"]
    assert [row["label"] for row in ridge] == paper_labels("table2")
    # ols fits only the small math domains on 30 training inputs; the others are reported as skipped, not silently dropped.
    ols = {row["label"] for row in payload["rows"] if row["estimator"] == "ols"}
    assert ols == {"X+1->X+2", "X+1->X*2"}
    assert {entry["relation"] for entry in payload["skipped"]} == {f"{label} (ols)" for label in paper_labels("table2") if label not in ols}

    registry = load_registry()
    lm = load_model(str(paper_model))
    for relation, pair in direct_pairs(lm, paper_table("table2").relations()).items():
        row = next(row for row in ridge if row["label"] == relation.label)
        bound = bind_relation(registry, relation, lm.tokenizer)  # the registry's pairs on this tokenizer's domains
        right = bound.columns
        assert row["reference"] == bound.reference and row["n_pairs_influenced"] == len(right)
        assert row["hit_influenced"] == {str(k): pytest.approx(v) for k, v in hit_at_k(pair.W, right).items()}


def test_all_references_measures_or_skips_every_registry_relation(paper_model, capsys):
    assert main(["precision", "--all-references", "--model", str(paper_model), *RIDGE_OPTIONS, "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    relations = registry_relations(load_registry())
    judged = {row["label"] for row in payload["rows"]}
    skipped = {entry["relation"].removesuffix(" (ols)") for entry in payload["skipped"]}
    assert judged | skipped == {r.label for r in relations}
    # The paper prompts' references are judged; references whose words this vocabulary spells in letters are skipped.
    assert {"city->country", "ceo->company", "math/x+1->math/x+2"} <= judged and "job->es/job" in skipped - judged
    for row in payload["rows"]:
        relation = next(r for r in relations if r.label == row["label"])
        assert (row["source"], row["target"], row["reference"]) == (relation.source, relation.target, relation.reference)


def test_registry_relations_pair_each_reference_with_prompts_of_its_domains_same_family_first():
    registry = load_registry()
    relations = registry_relations(registry)
    by_reference = {r.reference: r for r in relations}
    assert len(by_reference) == len(relations)  # one prompt pair per reference
    for reference in registry.references:
        candidates = [(s, t) for s in registry.prompts if s.domain == reference.source_domain
                      for t in registry.prompts if t.domain == reference.target_domain and t.name != s.name]
        if not candidates:
            assert reference.name not in by_reference
            continue
        relation = by_reference[reference.name]
        source, target = registry.prompt(relation.source), registry.prompt(relation.target)
        assert (source.domain, target.domain) == (reference.source_domain, reference.target_domain) and source.name != target.name
        named = reference.name.split("->")
        if all(name in {p.name for p in registry.prompts} for name in named):
            # A reference named after its prompts takes exactly those (all math prompts share one number domain;
            # zh/company shares the English company domain).
            assert [relation.source, relation.target] == named
        elif any(s.family == t.family for s, t in candidates):
            assert source.family == target.family, reference.name


def test_registry_relations_prefers_a_same_family_target_over_an_earlier_other_family_one(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text("""
domains:
  tiny_places: [Paris, Tokyo]
  tiny_lands: [France, Japan]
prompts:
  - {name: tiny_place, family: tinyfam, language: en, template: "{} lives in", domain: tiny_places}
  - {name: other_land, family: otherfam, language: en, template: "{} is from", domain: tiny_lands}
  - {name: tiny_land, family: tinyfam, language: en, template: "{} lives in the land of", domain: tiny_lands}
references:
  - {name: tiny_places->tiny_lands, source_domain: tiny_places, target_domain: tiny_lands, pairs: {Paris: France, Tokyo: Japan}}
""", encoding="utf-8")
    relation = next(r for r in registry_relations(load_registry([path])) if r.reference == "tiny_places->tiny_lands")
    assert (relation.source, relation.target, relation.label) == ("tiny_place", "tiny_land", "tiny_places->tiny_lands")


# ---- cases --paper-table ----

@pytest.mark.parametrize("table", ["3", "16"])
def test_cases_paper_table_rows_are_the_top_words_of_their_own_fit(paper_model, capsys, table):
    assert main(["cases", "--paper-table", table, "--model", str(paper_model), *RIDGE_OPTIONS, "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)["tables"]
    specs = paper_cases(table)
    assert [(t["source"], t["target"], t["direction"], t["k"]) for t in payload] == [
        (s.relation.source, s.relation.target, s.direction, s.k) for s in specs]
    pairs = direct_pairs(load_model(str(paper_model)), [s.relation for s in specs])
    for spec, shown in zip(specs, payload):
        pair = pairs[spec.relation]
        domain = pair.source.domain if spec.direction == "influenced" else pair.target.domain
        # Each asked-for word is a row or listed as missing, never silently lost.
        assert len(shown["rows"]) + len(shown["missing"]) == len(spec.words) and set(shown["missing"]) <= set(spec.words)
        assert shown["rows"] and all(domain.find(w) is None for w in shown["missing"])
        for row in shown["rows"]:
            top = pair.top_influenced(row["word"], spec.k) if spec.direction == "influenced" else pair.top_influencing(row["word"], spec.k)
            assert [w for w, _ in row["top"]] == [w for w, _ in top]
            np.testing.assert_allclose([v for _, v in row["top"]], [v for _, v in top], rtol=1e-5)


# ---- gradcorr --table4 and generalize --table5: the training tables ----

def test_gradcorr_table4_rows_follow_the_paper_and_equal_a_single_pair_run(paper_model, capsys, monkeypatch, tmp_path):
    options = ("--model", str(paper_model), "-n", str(N_INPUTS), "--alpha", "1", "--lr", "1e-2", "--n-step-facts", "8", "--n-eval", "15",
               "--json", "--quiet")
    assert main(["gradcorr", "--paper-table", "4", *options]) == 0
    table = json.loads(capsys.readouterr().out)
    assert [row["relation"] for row in table["rows"]] + [s["relation"] for s in table["skipped"]] == paper_labels("table4")
    city = next(row for row in table["rows"] if row["relation"] == "City->Country")
    assert city["paper_gradient_r"] == paper_table("table4").row("City->Country")["gradient_r"]
    fresh_cache(monkeypatch, tmp_path, "cache-again")
    assert main(["gradcorr", "city", "country", *options]) == 0
    (single,) = json.loads(capsys.readouterr().out)["rows"]
    assert single["relation"] == "City->Country"  # a Table-4 pair keeps the paper's label on its own too
    for key in ("logit_r", "gradient_r", "control_r", "mean_abs_source_change", "mean_abs_target_change"):
        assert single[key] == pytest.approx(city[key]), key


def test_generalize_table5_rows_follow_the_paper_and_equal_a_single_pair_run(paper_model, capsys, monkeypatch, tmp_path):
    options = ("--model", str(paper_model), "-n", str(N_INPUTS), "--alpha", "1", "--lr", "1e-2", "--n-facts", "2", "--n-seeds", "1",
               "--epochs", "2", "--json", "--quiet")
    assert main(["generalize", "--paper-table", "5", *options]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [row["relation"] for row in rows] == paper_labels("table5")
    city = rows[0]
    assert city["paper_generalization_rate"] == paper_table("table5").row("City->Country")["generalization_rate"]
    fresh_cache(monkeypatch, tmp_path, "cache-again")
    assert main(["generalize", "city", "country", *options, "--out", str(tmp_path / "single")]) == 0
    single = json.loads(capsys.readouterr().out)
    for key in ("generalization_rate", "rate_before", "random_baseline", "source_learned_rate", "labelwise_r_mean"):
        assert single[key] == pytest.approx(city[key], nan_ok=True), key
    # The rates are the facts' own: the share generalized, and the share of the domain a random answer would get right.
    facts = json.loads((tmp_path / "single" / "facts.json").read_text(encoding="utf-8"))
    assert len(facts) == 2 and city["generalization_rate"] == np.mean([f["generalized"] for f in facts])
    assert city["random_baseline"] == pytest.approx(np.mean([len(f["references"]) for f in facts]) / city["n_target_domain"])


# ---- ablate --table7 ----

def test_ablate_table7_rows_follow_the_paper_and_average_single_runs_over_seeds(paper_model, capsys):
    options = ("--model", str(paper_model), "--stage1-epochs", "2", "--stage2-epochs", "2", "--json", "--quiet")
    assert main(["ablate", "--paper-table", "7", "--seeds", "0", "1", *options]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [(row["relation"], row["mapping"]) for row in rows] == [
        (f"{row.relation.source}->{row.relation.target}", row["mapping"]) for row in paper_table("table7").rows]
    shuffled = next(row for row in rows if row["relation"] == "city->country" and row["mapping"] == "shuffled")
    assert shuffled["seeds"] == [0, 1] and shuffled["paper"] == paper_table("table7").row("City->Country (shuffled)")["generalization"]
    singles = []
    for seed in ("0", "1"):
        assert main(["ablate", "city", "country", "--mapping", "shuffled", "--seed", seed, *options]) == 0
        singles.append(json.loads(capsys.readouterr().out))
    rates = 100 * np.array([s["generalization_rate"] for s in singles])
    assert shuffled["generalization_mean"] == pytest.approx(rates.mean()) and shuffled["generalization_std"] == pytest.approx(rates.std(ddof=1))
    assert shuffled["random_baseline"] == pytest.approx(100 * singles[0]["random_baseline"])


def test_feng_tables_are_data_with_their_source_and_cover_the_studies_settings():
    from lincorr.paper import published_values
    from lincorr.studies.extractive.freeze import SETTINGS
    from lincorr.studies.extractive.origins import WEIGHT_SETS

    table2, table3 = published_values("feng_table2"), published_values("feng_table3")
    assert table2.model == table3.model == "OLMo-7B" and table2.where.startswith("Table 2") and table3.where.startswith("Table 3")
    assert set(table2.values) == set(SETTINGS) and all(set(hops) == {"first", "second"} for hops in table2.values.values())
    assert all(len(ranks) == 2 for hops in table2.values.values() for ranks in hops.values())
    assert set(table3.values) <= set(WEIGHT_SETS) and all(len(ranks) == 3 for ranks in table3.values.values())
    # Spot checks against the paper's text: resetting every layer leaves facts and implications near chance (9.2, 9.25).
    assert table2.values["all"]["first"] == (9.20, 9.25) and table3.values["W_graft"] == (1.13, 3.30, 0.10)
