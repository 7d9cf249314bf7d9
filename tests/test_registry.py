"""Self-tests of the bundled knowledge registry and of the registry file loader (offline, no model)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lincorr.errors import InputError, LincorrError
from lincorr.knowledge import FAMILIES, load_registry
from lincorr.knowledge.report import domains_report, references_table, templates_table


@pytest.fixture(scope="module")
def registry():
    return load_registry()


# --- the bundled data -----------------------------------------------------------------


def test_111_prompts_in_the_papers_four_families(registry):
    counts = {family: len(registry.family(family)) for family in FAMILIES}
    assert counts == {"attribute": 23, "cross-language": 55, "simile": 17, "math": 16}
    # Besides the paper's 111: the target prompt of country -> capital (docs/mechanisms.md).
    assert [spec.name for spec in registry.family("mechanisms")] == ["capital"]
    assert len(registry.prompts) == 112
    assert len({spec.name for spec in registry.prompts}) == 112


def test_cross_language_covers_11_prompts_in_each_language(registry):
    for language in ("es", "fr", "de", "zh", "ja"):
        names = [spec.name for spec in registry.family("cross-language") if spec.language == language]
        assert len(names) == 11 and all(name.startswith(f"{language}/") for name in names)


def test_every_template_has_exactly_one_placeholder(registry):
    for spec in registry.prompts:
        assert spec.template.count("{}") == 1, spec.name
        assert spec.fill("Ann").count("Ann") >= 1 and "{}" not in spec.fill("Ann")


def test_answer_prefix_matches_how_the_answer_follows_the_prompt(registry):
    for spec in registry.prompts:
        expected = "" if spec.language in ("zh", "ja") or spec.family == "math" else " "
        assert spec.answer_prefix == expected, spec.name


def test_domains_have_no_empty_or_duplicate_words(registry):
    for name, words in registry.domains.items():
        assert words, name
        assert all(word and word == word.strip() for word in words), name
        assert len({word.casefold() for word in words}) == len(words), name


def test_every_prompt_domain_exists_with_about_the_papers_size(registry):
    sizes = {spec.name: len(registry.domain_words(spec.domain)) for spec in registry.prompts}
    assert sizes["city"] >= 240 and sizes["birthplace"] == sizes["city"]
    assert 120 <= sizes["country"] <= 150
    assert sizes["continent"] == 6 and sizes["gender"] == 3 and sizes["color"] == 15
    assert sizes["math/x+1"] == 11


def test_every_reference_pair_lies_in_its_domains(registry):
    for relation in registry.references:
        source = set(registry.domain_words(relation.source_domain))
        target = set(registry.domain_words(relation.target_domain))
        for subject, objects in relation.pairs:
            assert subject in source, (relation.name, subject)
            assert objects and set(objects) <= target, (relation.name, subject, objects)


@pytest.mark.parametrize(
    "name, at_least",
    [
        ("city->country", 150),
        ("country->continent", 100),
        ("country->language", 100),
        ("language->continent", 100),
        ("ceo->company", 90),
        ("fruit->color", 30),
        ("food->taste", 30),
        ("math/x+1->math/x+2", 10),
        ("math/x+1->math/x*2", 6),
        *[(f"city->{language}/city", 200) for language in ("es", "fr", "de", "zh", "ja")],
    ],
)
def test_the_papers_reference_relations_are_present(registry, name, at_least):
    assert len(registry.reference(name).pairs) >= at_least


def test_city_to_country_accepts_aliases(registry):
    relation = registry.reference("city->country")
    assert {"USA", "America", "US"} <= set(relation.objects("Boston"))
    assert relation.objects("Shanghai") == ("China",)
    assert relation.objects("Atlantis") == ()


def test_demo_cities_are_in_the_city_domain(registry):
    assert {"Tokyo", "Paris", "Shanghai", "Moscow", "Madrid"} <= set(registry.domain_words("city"))


def test_math_references_follow_arithmetic(registry):
    plus_two = registry.reference("math/x+1->math/x+2")
    assert all(int(objects[0]) == int(k) + 1 for k, objects in plus_two.pairs)
    times_two = registry.reference("math/x+1->math/x*2")
    assert all(int(objects[0]) == 2 * (int(k) - 1) for k, objects in times_two.pairs)


def test_references_are_found_by_domains_or_by_prompts(registry):
    assert registry.find_reference("city", "country").name == "city->country"
    # All math prompts share one domain, so only the prompt pair identifies the relation.
    assert registry.find_reference("number", "number") is None
    relation = registry.reference_for(registry.prompt("math/x+1"), registry.prompt("math/x*2"))
    assert relation.name == "math/x+1->math/x*2"
    assert registry.reference_for(registry.prompt("birthplace"), registry.prompt("country")).name == "city->country"


def test_unknown_names_suggest_close_matches(registry):
    with pytest.raises(LincorrError, match="did you mean.*es/city"):
        registry.prompt("es/citty")
    with pytest.raises(LincorrError, match="unknown family"):
        registry.family("atribute")
    with pytest.raises(LincorrError, match="unknown domain"):
        registry.domain_words("planets")


# --- user files -----------------------------------------------------------------------

USER_FILE = """\
prompts:
  - name: planet
    family: astronomy
    language: en
    template: "{} lives on the planet"
    domain: planet
  - name: city
    family: attribute
    language: en
    template: "{} resides in the city of"
    domain: city
domains:
  planet: [Mercury, Venus, Earth, Mars]
  city: [Paris, Tokyo, Atlantis]
references:
  - name: planet->country
    source_domain: planet
    target_domain: country
    pairs:
      Earth: [France, Japan]
"""


def write(tmp_path: Path, text: str, name: str = "user.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_user_file_adds_and_replaces_entries(tmp_path):
    registry = load_registry([write(tmp_path, USER_FILE)])
    assert registry.prompt("planet").family == "astronomy"
    assert registry.family("astronomy") == (registry.prompt("planet"),)
    assert registry.prompt("city").template == "{} resides in the city of"
    assert registry.domain_words("city") == ("Paris", "Tokyo", "Atlantis")
    # The bundled relation keeps only the pairs that still lie in the replaced domain.
    assert dict(registry.reference("city->country").pairs) == {"Paris": ("France",), "Tokyo": ("Japan",)}
    assert registry.reference("planet->country").objects("Earth") == ("France", "Japan")
    assert len(registry.prompts) == 113 and registry.files[-1].endswith("user.yaml")


def test_json_user_files_are_accepted(tmp_path):
    text = '{"domains": {"planet": ["Mars", "Venus"]}}'
    assert load_registry([write(tmp_path, text, "user.json")]).domain_words("planet") == ("Mars", "Venus")


@pytest.mark.parametrize(
    "text, line, message",
    [
        ("prompts:\n  - name: x\n    family: f\n    language: en\n    template: \"no placeholder\"\n    domain: city\n",
         5, "placeholders"),
        ("prompts:\n  - name: x\n    family: f\n    language: en\n    template: \"{} and {}\"\n    domain: city\n",
         5, "placeholders"),
        ("prompts:\n  - name: x\n    family: f\n    language: en\n    templte: \"{} is\"\n    domain: city\n",
         5, "unknown prompt field 'templte'"),
        ("prompts:\n  - name: x\n    family: f\n    template: \"{} is\"\n    domain: city\n", 2, "missing prompt field 'language'"),
        ("prompts:\n  name: x\n", 1, "must be a list"),
        ("domain:\n  planet: [Mars]\n", 1, "unknown top-level key 'domain'"),
        ("domains:\n  planet: Mars\n", 2, "non-empty list"),
        ("domains:\n  planet:\n    - Mars\n    - Venus\n    - Mars\n", 5, "twice"),
        ("domains:\n  planet: [Mars]\n  planet: [Venus]\n", 3, "duplicate key"),
        ("domains:\n  planet: [Mars\n", 3, "not valid YAML"),
        ("- just\n- a list\n", 1, "must be a mapping"),
        ("prompts:\n  - name: x\n    family: f\n    language: en\n    template: \"{} is\"\n    domain: planets\n",
         2, "unknown domain 'planets'"),
        ("references:\n  - name: r\n    source_domain: city\n    target_domain: planets\n    pairs:\n      Paris: [Mars]\n",
         2, "unknown domain 'planets'"),
        ("references:\n  - name: r\n    source_domain: city\n    target_domain: country\n    pairs:\n"
         "      Paris: [France]\n      Gotham: [USA]\n", 7, "subject 'Gotham' is not in domain 'city'"),
        ("references:\n  - name: r\n    source_domain: city\n    target_domain: country\n    pairs:\n"
         "      Paris: [Narnia]\n", 6, "object 'Narnia'"),
    ],
)
def test_bad_user_files_name_file_and_line(tmp_path, text, line, message):
    path = write(tmp_path, text)
    with pytest.raises(LincorrError) as caught:
        load_registry([path])
    text = str(caught.value)
    assert "\n" not in text
    assert text.startswith(f"{path}:{line}: "), text
    assert re.search(re.escape(message), text), text


def test_unreadable_file_is_reported(tmp_path):
    missing = tmp_path / "missing.yaml"
    with pytest.raises(InputError, match=re.escape(str(missing))):
        load_registry([missing])


# --- reports --------------------------------------------------------------------------


class SplittingTokenizer:
    """A stand-in tokenizer: words in `whole` are one token, any other word splits after two letters."""

    def __init__(self, whole: set[str]):
        self.whole, self.pieces = whole, []

    def _id(self, piece: str) -> int:
        if piece not in self.pieces:
            self.pieces.append(piece)
        return self.pieces.index(piece)

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict:
        ids = []
        for index, word in enumerate(text.split()):
            space = " " if index or text.startswith(" ") else ""
            parts = [word] if word in self.whole else [word[:2], word[2:]]
            ids += [self._id(space + parts[0])] + [self._id(p) for p in parts[1:] if p]
        return {"input_ids": ids}

    def decode(self, ids: list[int]) -> str:
        return "".join(self.pieces[i] for i in ids)


def test_templates_table_lists_every_prompt(registry):
    rows = templates_table(registry)
    assert len(rows) == 112
    assert {"name", "family", "language", "template", "domain", "domain_size"} <= set(rows[0])
    assert [row["name"] for row in templates_table(registry, family="math")][:2] == ["math/x+1", "math/x+2"]


def test_domains_report_counts_survivors_and_reasons(registry):
    tokenizer = SplittingTokenizer({"Africa", "Asia", "Europe", "North", "South"})
    rows = {row["name"]: row for row in domains_report(registry, tokenizer, family="attribute")}
    continent = rows["continent"]
    assert (continent["domain_size"], continent["kept"]) == (6, 5)
    assert continent["category_counts"] == {"whole_word": 3, "word_in_phrase": 2, "subword": 0}
    assert [(d["word"], "fragment" in d["reason"]) for d in continent["dropped"]] == [("Oceania", True)]
    assert rows["gender"]["kept"] == 0 and len(rows["gender"]["dropped"]) == 3


def test_references_table_counts_pairs(registry):
    rows = {row["name"]: row for row in references_table(registry)}
    assert rows["city->country"]["n_pairs"] >= 150
    assert rows["city->country"]["source_prompts"] == ["birthplace", "city"]
    assert "name_country" in rows["city->country"]["target_prompts"]
