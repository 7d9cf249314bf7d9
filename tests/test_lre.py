"""The LRE relations: every bundled file read as registry data, malformed files refused in one line, and the
`lre` study on a planted example (a tiny model whose logits hold a known map)."""

from __future__ import annotations

import glob
import json
import re
import tomllib
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.cli_errors import one_error_line
from helpers.tiny import INPUTS, NAMES, REGISTRY_YAML, tiny_llama

import lincorr.collection.pieces as collect_module
from lincorr.collection import UNCACHED
from lincorr.cli import main
from lincorr.errors import InputError
from lincorr.fit import FitConfig
from lincorr.knowledge.lre import LRE_DIR, lre_registry, lre_relations, read_lre_relation
from lincorr.models import wrap_model
from lincorr.studies.logits.lre import LRE_FITS, SIGNIFICANCE, hit_test, lre_precision
from lincorr.studies.logits.precision import precision_fits

ROOT = Path(__file__).resolve().parents[1]
SUBJECTS = NAMES[60:80]
OBJECTS = NAMES[80:100]


def test_every_bundled_relation_reads_as_two_prompts_two_domains_and_a_reference():
    relations = lre_relations()
    assert len(relations) == 47
    assert {r.relation_type for r in relations} == {"factual", "commonsense", "linguistic", "bias"}
    registry, specs = lre_registry(relations)
    assert len(registry.prompts) == 94 and len(registry.references) == 47 and len(specs) == 47
    capital = registry.reference("lre/country_capital_city")
    assert capital.objects("France") == ("Paris",) and capital.source_domain == "lre/country_capital_city/subjects"
    assert registry.prompt("lre/country_capital_city/source").fill("Ana") == "Ana's country is"
    assert registry.prompt("lre/country_capital_city/target").fill("Ana") == "The capital city of Ana's country is"
    assert "Japan" in registry.domain_words("lre/country_capital_city/subjects")
    for relation, spec in zip(relations, specs):
        pairs = registry.reference(spec.reference).pairs
        assert sum(len(objects) for _, objects in pairs) <= len(relation.samples)
        words = registry.domain_words(f"lre/{relation.name}/objects")
        assert len({w.casefold() for w in words}) == len(words)
    assert (LRE_DIR / "LICENSE").read_text().startswith("MIT License") and (LRE_DIR / "SOURCE.md").is_file()


def test_the_package_data_carries_every_lre_file():
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["lincorr"]
    package = ROOT / "src" / "lincorr"
    carried = {Path(path) for pattern in patterns for path in glob.glob(str(package / pattern)) if Path(path).is_file()}
    shipped = {path for path in LRE_DIR.rglob("*") if path.is_file()}
    assert len(shipped) == 49 and shipped <= carried


@pytest.mark.parametrize("text, problem", [
    ("{not json", "is not valid JSON"),
    ('["a list"]', "the whole file is a list of 1, not an object"),
    ('{"prompt_templates": ["{} is"], "properties": {"relation_type": "factual", "domain_name": "x", "range_name": "y"}}',
     "samples is missing"),
    ('{"prompt_templates": ["{} is"], "properties": {"relation_type": "factual", "domain_name": "x", "range_name": "y"}, "samples": []}',
     "samples is empty"),
    ('{"prompt_templates": ["no slot"], "properties": {"relation_type": "factual", "domain_name": "x", "range_name": "y"}, '
     '"samples": [{"subject": "a", "object": "b"}]}', "needs exactly one {}"),
    ('{"prompt_templates": ["{} is"], "properties": {"relation_type": "factual", "domain_name": "x", "range_name": "y"}, '
     '"samples": [{"subject": "a", "object": 3}]}', "samples[0].object is a whole number, not text"),
    ('{"prompt_templates": ["{} is"], "properties": {"domain_name": "x", "range_name": "y"}, "samples": [{"subject": "a", "object": "b"}]}',
     "properties.relation_type is missing"),
    # lincorr writes domain_name into both prompts ("{}'s x is"): a {} there was a second slot ("{}'s country {} of is")
    ('{"prompt_templates": ["{} is"], "properties": {"relation_type": "factual", "domain_name": "country {} of", "range_name": "y"}, '
     '"samples": [{"subject": "a", "object": "b"}]}', "properties.domain_name 'country {} of' holds a brace"),
    # ... and a lone brace there completes one with a template's stray brace ("of {}}" + "country {")
    ('{"prompt_templates": ["The capital city of {}} is"], "properties": {"relation_type": "factual", "domain_name": "x", '
     '"range_name": "y"}, "samples": [{"subject": "a", "object": "b"}]}', "and no other brace"),
    ('{"prompt_templates": ["{} is"], "properties": {"relation_type": "factual", "domain_name": "country {", "range_name": "y"}, '
     '"samples": [{"subject": "a", "object": "b"}]}', "properties.domain_name 'country {' holds a brace"),
    ('{"prompt_templates": ["{} is {}"], "properties": {"relation_type": "factual", "domain_name": "x", "range_name": "y"}, '
     '"samples": [{"subject": "a", "object": "b"}]}', "needs exactly one {}"),
])
def test_a_malformed_lre_file_is_one_input_error_line(tmp_path, text, problem):
    path = tmp_path / "broken.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputError) as error:
        read_lre_relation(path)
    assert problem in str(error.value) and str(path) in str(error.value) and "\n" not in str(error.value)


def write_relation(directory: Path, name: str, relation_type: str, pairs) -> None:
    folder = directory / relation_type
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.json").write_text(json.dumps({
        "name": name, "prompt_templates": ["the capital of {} is"], "prompt_templates_zs": [],
        "properties": {"relation_type": relation_type, "domain_name": "city", "range_name": "country", "symmetric": False},
        "samples": [{"subject": s, "object": o} for s, o in pairs]}), encoding="utf-8")


def planted_scores(lm, rows, token_ids, logprobs):
    """Logits with a known W, by word: input nameI scores subject name(60+j) and object name(80+j) alike, z_I[j] (+ noise on objects)."""
    slots = [int(re.search(r"name(\d+)", lm.tokenizer.decode([int(token)])).group(1)) % 20 for token in token_ids]
    out = []
    for row in rows:
        text = lm.tokenizer.decode(row, skip_special_tokens=True)
        number = int(re.search(r"name(\d+)", text).group(1))
        z = np.random.default_rng(number).normal(size=20)[slots]
        if "capital" in text:
            z = z + 0.05 * np.random.default_rng(1000 + number).normal(size=len(slots))
        out.append(z)
    return torch.tensor(np.array(out), dtype=torch.float32)


@pytest.fixture
def planted(tmp_path, tokenizer, monkeypatch):
    """Three relations: `planted` (subject j -> object j, the map in the logits), `rotated` (subject j -> object j+1) and `small` (5 subjects)."""
    write_relation(tmp_path, "planted", "factual", zip(SUBJECTS, OBJECTS))
    write_relation(tmp_path, "rotated", "bias", zip(SUBJECTS, OBJECTS[1:] + OBJECTS[:1]))
    write_relation(tmp_path, "small", "linguistic", zip(SUBJECTS[:5], OBJECTS[:5]))
    monkeypatch.setattr(collect_module, "domain_scores", planted_scores)
    lm = wrap_model(tiny_llama(len(tokenizer)), tokenizer)
    lm.head_verified = True  # the planted scores are not the model's, by design
    configs = [c for c in precision_fits(FitConfig()) if c.label in LRE_FITS]
    return lre_precision(lm, lre_relations(tmp_path), INPUTS, configs, settings=UNCACHED)


def test_lre_precision_finds_the_planted_map_and_no_rotated_one(planted, tmp_path):
    rows = {(row.label, row.estimator): row for row in planted.rows}
    assert set(rows) == {(name, fit) for name in ("planted", "rotated") for fit in LRE_FITS}
    for fit in LRE_FITS:
        right, wrong = rows["planted", fit], rows["rotated", fit]
        assert right.hit_influenced[1] == 1.0 and right.hit_influencing[1] == 1.0 and right.n_pairs_influenced == 20
        assert wrong.hit_influenced[1] == 0.0 and wrong.hit_influencing[1] == 0.0
        assert right.chance_influenced[1] == pytest.approx(1 / 20)
    [(label, reason)] = planted.skipped
    assert label == "small" and "5 reference subjects" in reason
    types = {(s["relation_type"], s["estimator"]): s for s in planted.type_summary()}
    assert types["factual", "ols"]["n_above_chance_influenced"] == 1 and types["bias", "ols"]["n_above_chance_influenced"] == 0
    planted.save(tmp_path / "out")
    saved = json.loads((tmp_path / "out" / "lre.json").read_text())
    assert saved["rows"][0]["relation_type"] in ("factual", "bias") and saved["skipped"][0]["relation"] == "small"
    assert "| planted | factual | ols |" in (tmp_path / "out" / "lre.md").read_text()


def test_hit_test_against_chance():
    perfect, coin = hit_test(1.0, 20, 0.05), hit_test(0.5, 20, 0.5)
    assert perfect.hits == 20 and perfect.p_value == pytest.approx(0.05 ** 20) and perfect.p_value < SIGNIFICANCE
    assert coin.p_value > 0.5 and 0.27 < coin.ci_low < 0.5 < coin.ci_high < 0.73  # exact 95%: 0.272-0.728


@pytest.mark.parametrize("argv, message", [
    (["--types", "nonsense"], "unknown LRE relation type nonsense"),
    (["--relations", "no_such_relation"], "unknown LRE relation no_such_relation"),
    (["--registry", "REGISTRY"], "drop --registry"),
])
def test_cli_refuses_unknown_relations_types_and_registry_files(argv, message, capsys, tmp_path):
    registry = tmp_path / "mine.yaml"
    registry.write_text(REGISTRY_YAML, encoding="utf-8")
    assert main(["lre", *(str(registry) if arg == "REGISTRY" else arg for arg in argv)]) == 2
    assert message in one_error_line(capsys)


def test_sampled_keeps_at_most_k_subjects_with_every_sample_of_each_in_file_order():
    [father] = lre_relations(names=("person_father",))
    sampled = father.sampled(50, seed=0)
    subjects = [subject for subject, _ in sampled.samples]
    assert len(set(subjects)) == 50 and sampled == father.sampled(50, seed=0) != father.sampled(50, seed=1)
    assert [s for s in father.samples if s[0] in set(subjects)] == list(sampled.samples)
    assert father.sampled(None) is father and father.sampled(10_000) is father
