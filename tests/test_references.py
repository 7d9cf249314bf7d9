"""Reference pairs from anyone: one matching rule for subjects and objects, every dropped pair with its reason,
the file shapes lincorr reads, the check before collection, and `precision` / `fit --references` at the command line."""

from __future__ import annotations

import csv
import hashlib
import json

import pytest
from helpers.tiny import CITIES, COUNTRIES, NAMES, city_country_registry, tiny_llama

import lincorr.collection.pieces as collect_module
from lincorr.cli import main
from lincorr.domains import Domain, Dropped
from lincorr.errors import LincorrError
from lincorr.relations import DroppedPair, match_reference, read_reference_file

pytestmark = pytest.mark.usefixtures("single_thread")

INPUTS = list(NAMES[:60])
REGISTRY_YAML = city_country_registry(CITIES, COUNTRIES, "{Paris: France, London: England, Tokyo: Japan, Rome: Italy, Berlin: Germany}")


def domain(name, words, dropped=()):
    """A tokenized domain as `build_domain` returns it; a phrase's first token is its first word."""
    tokens = tuple(word.split()[0] for word in words)
    return Domain(name, tuple(words), tuple(range(len(words))), tokens, ("whole_word",) * len(words), tuple(dropped))


FOOD = domain("food", ["pizza", "sushi", "paella"])
COUNTRY = domain("country", ["Italy", "Japan", "Spain", "North Korea"],
                 [Dropped("Brunei", "first token 'Br' is a fragment of the word"), Dropped("USA", "shares first token 'US' with 'US'")])


# ---- the matching rule ----

def test_subjects_and_objects_match_by_one_rule_case_and_first_token():
    capitalised = match_reference((("Pizza", ("Italy",)), ("Sushi", ("JAPAN",)), ("PAELLA", ("spain",))), FOOD, COUNTRY)
    lower = match_reference((("pizza", ("italy",)), ("sushi", ("japan",)), ("paella", ("Spain",))), FOOD, COUNTRY)
    assert capitalised.columns == lower.columns == {0: (0,), 1: (1,), 2: (2,)}
    assert capitalised.dropped == lower.dropped == () and capitalised.n_read == 3
    # "North" is the first token of "North Korea", on the object side as on the subject side.
    assert match_reference((("pizza", ("north",)),), FOOD, COUNTRY).columns == {0: (3,)}
    assert match_reference((("North", ("pizza",)),), COUNTRY, FOOD).columns == {3: (0,)}


def test_every_dropped_pair_has_its_reason_and_aliases_all_count():
    pairs = (
        ("pizza", ("Italy", "Spain")),   # two acceptable objects (aliases): both are right
        ("Pizza", ("italy",)),           # the same two columns again
        ("burger", ("Italy",)),          # a subject the domain never had
        ("sushi", ("Brunei",)),          # an object the tokenizer dropped: a fragment
        ("sushi", ("usa", "Japan")),     # an alias the tokenizer dropped beside one that is kept
        ("taco", ("Mexico",)),           # neither word in its domain
    )
    match = match_reference(pairs, FOOD, COUNTRY)
    assert match.columns == {0: (0, 2), 1: (1,)} and match.n_read == 8
    assert match.dropped == (
        DroppedPair("Pizza", "italy", "duplicate of pizza -> Italy"),
        DroppedPair("burger", "Italy", "subject not in the food domain"),
        DroppedPair("sushi", "Brunei", "object dropped from the country domain by this tokenizer: first token 'Br' is a fragment of the word"),
        DroppedPair("sushi", "usa", "object dropped from the country domain by this tokenizer: shares first token 'US' with 'US'"),
        DroppedPair("taco", "Mexico", "subject not in the food domain; object not in the country domain"),
    )


def test_no_usable_pair_names_the_cause_and_what_to_do():
    match = match_reference((("burger", ("Italy",)), ("sushi", ("Brunei",))), FOOD, COUNTRY)
    message = match.unusable("food->country", "reference file mine.tsv", "write pairs of words from the two domains")
    assert message == ("no pair of reference file mine.tsv can be used for food->country (2 read): 'burger' -> 'Italy' (subject not in "
                       "the food domain), 'sushi' -> 'Brunei' (object dropped from the country domain by this tokenizer: first token "
                       "'Br' is a fragment of the word); write pairs of words from the two domains")


# ---- reading files ----

def test_relation_json_shape_is_read_with_its_sha256(tmp_path):
    path = tmp_path / "country_capital.json"
    data = {"name": "country capital city", "prompt_templates": ["The capital of {} is"], "properties": {"relation_type": "factual"},
            "samples": [{"subject": "France", "object": "Paris"}, {"subject": "Japan", "object": "Tokyo"},
                        {"subject": "Bolivia", "object": ["Sucre", "La Paz"]}]}
    path.write_text(json.dumps(data), encoding="utf-8")
    reference = read_reference_file(path)
    assert reference.pairs == (("France", ("Paris",)), ("Japan", ("Tokyo",)), ("Bolivia", ("Sucre", "La Paz")))
    assert reference.n_pairs == 4 and reference.path == str(path)
    assert reference.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("content, problem", [
    ('{"relation": {"samples": []}, "Paris": "France"}', "the object of 'relation' is {\"samples\": []}"),
    ('{"samples": [{"subject": "France"}]}', "sample 1 is {\"subject\": \"France\"}"),
    ('{"samples": {"subject": "France", "object": "Paris"}}', '"samples" is {"subject"'),
    ('[{"subject": "France", "object": "Paris"}]', 'entry {"subject": "France", "object": "Paris"} is not a [subject, object] pair'),
    ('{"Paris": []}', "the object of 'Paris' is []"),
])
def test_other_json_shapes_are_refused_with_the_shapes_that_work(tmp_path, content, problem):
    path = tmp_path / "pairs.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(LincorrError) as error:
        read_reference_file(path)
    assert problem in str(error.value) and '{"samples": [{"subject": ..., "object": ...}, ...]}' in str(error.value)


# ---- the command line ----

@pytest.fixture
def workspace(tmp_path, tokenizer):
    tiny_llama(len(tokenizer)).save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    files = {"inputs.txt": INPUTS, "cities.txt": [*CITIES, "Gotham"], "countries.txt": COUNTRIES, "registry.yaml": [REGISTRY_YAML]}
    for name, lines in files.items():
        (tmp_path / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return tmp_path


def run(ws, *arguments):
    return main([*arguments, "--model", str(ws / "model"), "--inputs", str(ws / "inputs.txt"), "--registry", str(ws / "registry.yaml"),
                 "--quiet"])


CUSTOM = ["--source-template", "{} lives in the city of", "--source-domain", "{ws}/cities.txt",
          "--target-template", "{} lives in the country of", "--target-domain", "{ws}/countries.txt"]


def custom(ws):
    return [argument.replace("{ws}", str(ws)) for argument in CUSTOM]


def test_cli_precision_reports_pairs_read_used_and_dropped_and_records_the_file(workspace, capsys):
    pairs = workspace / "pairs.tsv"
    pairs.write_text("paris\tfrance\nPARIS\tFrance\nGotham\tFrance\nTokyo\tjapan\n", encoding="utf-8")
    sha256 = hashlib.sha256(pairs.read_bytes()).hexdigest()
    out = workspace / "out"
    assert run(workspace, "precision", "tiny_city", "tiny_country", "--references", str(pairs), "--json", "--out", str(out)) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["reference_file"] == {"path": str(pairs), "sha256": sha256}
    assert payload["n_reference_lines"] == 4 and payload["n_pairs_influenced"] == 2 and payload["n_pairs_influencing"] == 2
    assert payload["dropped_pairs"] == [
        {"subject": "PARIS", "object": "France", "reason": "duplicate of paris -> france"},
        {"subject": "Gotham", "object": "France", "reason": "subject not in the tiny_cities domain"},
    ]
    assert "only 2 reference subject(s) could be judged" in payload["warnings"][0]
    saved = json.loads((out / "precision.json").read_text())
    assert saved["reference_file"]["sha256"] == sha256 and {row["reference_file"]["sha256"] for row in saved["rows"]} == {sha256}
    assert json.loads((out / "provenance.json").read_text())["settings"]["reference_file"]["sha256"] == sha256
    assert {row["reference_sha256"] for row in csv.DictReader((out / "precision.csv").open())} == {sha256}
    assert sha256 in (out / "precision.md").read_text()

    assert run(workspace, "precision", "tiny_city", "tiny_country", "--references", str(pairs)) == 0
    text = capsys.readouterr().out
    assert f"reference file {pairs} (sha256 {sha256}): 4 pairs read, 2 subjects / 2 objects judged; 2 dropped:" in text
    assert "  - Gotham -> France: subject not in the tiny_cities domain" in text and "warning: tiny_city->tiny_country: only 2" in text


def test_cli_reference_without_a_usable_pair_fails_once_before_any_collection(workspace, capsys, monkeypatch):
    def no_forward(*args, **kwargs):
        raise AssertionError("logits were collected for a reference that cannot be used")

    monkeypatch.setattr(collect_module, "domain_scores", no_forward)
    pairs = workspace / "pairs.tsv"
    pairs.write_text("Pizza\tItaly\nGotham\tFrance\n", encoding="utf-8")
    for command in (["precision", "tiny_city", "tiny_country"], ["fit", "city", "country", *custom(workspace)]):
        assert run(workspace, *command, "--references", str(pairs), "--out",
                   str(workspace / "out")) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"lincorr: error: no pair of reference file {pairs} can be used for")
        assert "'Pizza' -> 'Italy' (subject not in the" in err[0] and "(2 read)" in err[0] and "--references" not in err[0]
        assert not (workspace / "out").exists()
    # A word the tokenizer dropped is named as such: "Gotham" is in the custom city domain, but not in the tiny vocabulary.
    assert run(workspace, "fit", "city", "country", *custom(workspace), "--references", str(pairs)) == 2
    assert "subject dropped from the city domain by this tokenizer: first token '<unk>'" in capsys.readouterr().err


def test_cli_precision_takes_the_custom_prompts_of_fit(workspace, capsys):
    pairs = workspace / "pairs.json"
    pairs.write_text(json.dumps({"samples": [{"subject": city, "object": country} for city, country in zip(CITIES, COUNTRIES)]}))
    assert run(workspace, "precision", "city", "country", *custom(workspace), "--references", str(pairs), "--json") == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["source"] == "city" and payload["n_pairs_influenced"] == 5 and payload["dropped_pairs"] == []
    assert set(payload["by_estimator"]) == {"ridge-std", "ols", "ridge"}
    assert run(workspace, "precision", "city", "country", *custom(workspace)) == 2
    assert "pass --references FILE" in capsys.readouterr().err


def test_cli_fit_references_prints_hit_at_k(workspace, capsys):
    pairs = workspace / "pairs.tsv"
    pairs.write_text("".join(f"{city}\t{country}\n" for city, country in zip(CITIES, COUNTRIES)), encoding="utf-8")
    sha256 = hashlib.sha256(pairs.read_bytes()).hexdigest()
    assert run(workspace, "fit", "city", "country", *custom(workspace), "--references", str(pairs)) == 0
    text = capsys.readouterr().out
    assert "Hit@1/3/5        influenced " in text and f"city->country: reference file {pairs} (sha256 {sha256}): 5 pairs read" in text
    save_dir = workspace / "run"
    assert run(workspace, "fit", "city", "country", *custom(workspace), "--references", str(pairs), "--json", "--out", str(save_dir)) == 0
    precision = json.loads(capsys.readouterr().out)["precision"]
    assert set(precision["hit_influenced"]) == {"1", "3", "5"} and precision["n_pairs_influenced"] == 5
    assert json.loads((save_dir / "result.json").read_text())["precision"]["reference_file"]["sha256"] == sha256
