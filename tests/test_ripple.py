"""RippleEdits-shaped files read as plain data (`lincorr.ripple.edits`): the bundled subset, and files that lie."""

from __future__ import annotations

import copy
import hashlib
import json
import re
from pathlib import Path

import pytest

import lincorr
from lincorr import strict_json

import lincorr.ripple.edits as edits_module
from lincorr.errors import InputError, UsageError
from lincorr.ripple import COUNTRY_RELATIONS, EDITS_FILE, read_edits, relation_counts
from lincorr.ripple.hops import REGISTRY_PROMPTS

SOURCE = EDITS_FILE.parent / "SOURCE.md"


def test_the_bundled_edits_are_the_recorded_subset_of_ripple_edits():
    digest = re.search(r"sha256\s+([0-9a-f]{64})", SOURCE.read_text(encoding="utf-8")).group(1)
    assert hashlib.sha256(EDITS_FILE.read_bytes()).hexdigest() == digest
    assert (EDITS_FILE.parent / "LICENSE").read_text(encoding="utf-8").startswith("MIT License")
    edits = read_edits()
    assert len(edits) == 140 and sum(len(edit.problems) for edit in edits) == 918
    counts = relation_counts(edits)
    assert counts["COUNTRY_OF_CITIZENSHIP"] == counts["COUNTRY"] == 31 and sum(counts.values()) == 140
    assert sum(edit.relation in COUNTRY_RELATIONS for edit in edits) == 62


def test_every_query_goes_through_the_edited_fact():
    """A two-hop query asks about the edit's subject; its condition query, about the edit's new object."""
    for edit in read_edits():
        assert edit.new_object != edit.old_object
        for problem in edit.problems:
            assert problem.query.subject == edit.subject and problem.condition.subject == edit.new_object


def test_max_edits_takes_the_first_ones():
    assert [edit.prompt for edit in read_edits(max_edits=3)] == [edit.prompt for edit in read_edits()[:3]]


@pytest.mark.parametrize("max_edits", [0, -1, True, 2.5, "3"])
def test_a_max_edits_that_is_no_count_is_the_users_to_fix(max_edits):
    with pytest.raises(UsageError, match="max_edits"):
        read_edits(max_edits=max_edits)


def bundled_record() -> dict:
    return json.loads(EDITS_FILE.read_text(encoding="utf-8"))[0]


def field_paths(value, path=()):
    """Every (path, value) of a record's fields that hold text, walking its nested objects and lists."""
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from field_paths(inner, (*path, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value[:1]):
            yield from field_paths(inner, (*path, index))
    else:
        yield path, value


def edited(record: dict, path: tuple, value=...) -> dict:
    """`record` with the field at `path` set to `value`, or removed (`...`)."""
    changed = copy.deepcopy(record)
    holder = changed
    for key in path[:-1]:
        holder = holder[key]
    if value is ...:
        del holder[path[-1]]
    else:
        holder[path[-1]] = value
    return changed


def declared_text_fields(shape, path=()):
    """Every path to a text field that the reader's declared shape (`edits.EDITS`) names: what lincorr reads of a record."""
    from lincorr.schema import TEXT, Items

    if isinstance(shape, Items):
        yield from declared_text_fields(shape.shape, (*path, 0))
    elif isinstance(shape, dict):
        for key, inner in shape.items():
            yield from declared_text_fields(inner, (*path, key))
    elif shape is TEXT:
        yield path


READ_FIELDS = [path[1:] for path in declared_text_fields(edits_module.EDITS.shape)]  # within one record of the list


def test_the_fields_read_are_fields_of_ripple_edits_own_records():
    assert set(READ_FIELDS) <= {path for path, _ in field_paths(bundled_record())}
    assert ("edit", "original_fact", "target_id") in READ_FIELDS and ("compositional_I_problems", 0, "condition_query", "relation") in READ_FIELDS


@pytest.mark.parametrize("path", READ_FIELDS, ids=lambda path: ".".join(map(str, path)))
def test_every_field_read_is_checked_missing_or_of_the_wrong_kind(path, tmp_path):
    """Each field the reader uses, taken away or made a number: one InputError naming the field, nothing read on."""
    file = tmp_path / "edits.json"
    for value, problem in ((..., "is missing"), (7, "a whole number")):
        file.write_text(json.dumps([bundled_record(), edited(bundled_record(), path, value)]), encoding="utf-8")
        with pytest.raises(InputError, match=re.escape(str(path[-1]))) as error:
            read_edits(file)
        assert problem in str(error.value) and "RippleEdits" in str(error.value)


@pytest.mark.parametrize("field", ["prompt", "answer"])
def test_an_empty_prompt_or_answer_names_its_edit_and_query(field, tmp_path):
    record = edited(bundled_record(), ("compositional_I_problems", 0, "condition_query", field), "  ")
    file = tmp_path / "edits.json"
    file.write_text(json.dumps([record]), encoding="utf-8")
    with pytest.raises(InputError, match=f"edit 0 .*condition of query 0 has an empty {field}"):
        read_edits(file)


@pytest.mark.parametrize("path", READ_FIELDS, ids=lambda path: ".".join(map(str, path)))
def test_a_prompt_or_answer_of_a_page_is_refused_before_any_model_reads_it(path, tmp_path):
    """A prompt is a sentence: a page of one would be tokenised and run through the model for every edit and query. Every
    text field read is held to it: the old object and a condition query's relation of 5,000,000 characters were read."""
    from lincorr.ripple.edits import MOST_CHARACTERS

    file = tmp_path / "edits.json"
    for length, refused in ((MOST_CHARACTERS, False), (MOST_CHARACTERS + 1, True)):
        file.write_text(json.dumps([edited(bundled_record(), path, "x" * length)]), encoding="utf-8")
        if not refused:
            read_edits(file)
            continue
        with pytest.raises(InputError, match=f"edit 0 .*{path[-1]} is 1,001 characters"):
            read_edits(file)


@pytest.mark.parametrize("document, message", [
    ([], "holds no edits"), ({"edit": {}}, "is an object, not a list"),
    ([{**bundled_record(), "compositional_I_problems": []}], "has no queries"),
])
def test_a_file_with_no_edits_or_queries_is_refused(document, message, tmp_path):
    file = tmp_path / "edits.json"
    file.write_text(json.dumps(document), encoding="utf-8")
    with pytest.raises(InputError, match=message):
        read_edits(file)


def test_more_edits_than_lincorr_reads_are_refused_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(edits_module, "MOST_EDITS", 2)
    file = tmp_path / "edits.json"
    file.write_text(json.dumps([bundled_record()] * 3), encoding="utf-8")
    with pytest.raises(InputError, match="holds 3 edits, more than the 2") as error:
        read_edits(file)
    assert "\n" not in str(error.value)


def test_more_queries_than_lincorr_reads_are_refused_in_one_line_counting_only_the_edits_read(tmp_path, monkeypatch):
    """One edit with 120,000 queries was read: the queries of the edits read (all, or --max-edits of them) are capped."""
    queries = len(bundled_record()["compositional_I_problems"])
    monkeypatch.setattr(edits_module, "MOST_QUERIES", 2 * queries - 1)
    file = tmp_path / "edits.json"
    file.write_text(json.dumps([bundled_record()] * 2), encoding="utf-8")
    with pytest.raises(InputError, match=f"the 2 edits read hold {2 * queries} queries, more than the {2 * queries - 1}") as error:
        read_edits(file)
    assert "\n" not in str(error.value) and "--max-edits" in str(error.value)
    assert len(read_edits(file, max_edits=1)) == 1
    monkeypatch.setattr(edits_module, "MOST_QUERIES", queries - 1)
    with pytest.raises(InputError, match=f"the one edit read holds {queries} queries"):
        read_edits(file, max_edits=1)


def test_a_huge_subject_is_quoted_in_part(tmp_path):
    record = edited(edited(bundled_record(), ("edit", "subject_id"), "x" * 100_000),
                    ("compositional_I_problems", 0, "compositional_query", "answer"), "")
    file = tmp_path / "edits.json"
    file.write_text(json.dumps([record]), encoding="utf-8")
    with pytest.raises(InputError) as error:
        read_edits(file)
    assert len(str(error.value)) < 500


def test_a_path_reads_as_a_string_or_a_path():
    assert read_edits(str(EDITS_FILE), max_edits=1) == read_edits(Path(EDITS_FILE), max_edits=1)


def test_a_bad_edits_file_ends_in_one_line_before_the_model_loads(tmp_path, monkeypatch, capsys):
    from helpers.cli_errors import one_error_line
    from lincorr.cli import main

    def no_load(*args, **kwargs):
        raise AssertionError("the model loaded before the edits file was checked")

    monkeypatch.setattr("lincorr.models.load_model", no_load)
    file = tmp_path / "edits.json"
    file.write_text(json.dumps([{**bundled_record(), "compositional_I_problems": []}]), encoding="utf-8")
    assert main(["ripple", str(file), "--out", str(tmp_path / "run")]) == 2
    assert "has no queries" in one_error_line(capsys)
    assert not (tmp_path / "run").exists()


def test_edits_that_change_no_country_are_refused_in_one_line_before_the_model_loads(tmp_path, monkeypatch, capsys):
    from helpers.cli_errors import one_error_line
    from lincorr.cli import main

    monkeypatch.setattr("lincorr.models.load_model", lambda *args, **kwargs: pytest.fail("the model loaded"))
    file = tmp_path / "edits.json"
    spouses = [record for record in json.loads(EDITS_FILE.read_text(encoding="utf-8")) if record["edit"]["relation"] == "SPOUSE"]
    file.write_text(json.dumps(spouses), encoding="utf-8")
    assert main(["ripple", str(file), "--out", str(tmp_path / "run")]) == 2
    line = one_error_line(capsys)
    assert f"none of the {len(spouses)} edits" in line and "COUNTRY_OF_CITIZENSHIP" in line
    assert not (tmp_path / "run").exists()


def bundled_records() -> list[dict]:
    return json.loads(EDITS_FILE.read_text(encoding="utf-8"))


# Bundled edits of which `hops.registry_phrased` keeps no query, one set per reason it leaves a query out.
NOTHING_IN_THE_REGISTRYS_WORDS = {
    "a-country-edit-is-about-no-person": lambda records: [r for r in records if r["edit"]["relation"] == "COUNTRY"],
    "no-registry-prompt-for-the-query": lambda records: [
        {**r, "compositional_I_problems": [p for p in r["compositional_I_problems"]
                                           if p["condition_query"]["relation"] not in REGISTRY_PROMPTS]}
        for r in records if r["edit"]["relation"] == "COUNTRY_OF_CITIZENSHIP"
        and any(p["condition_query"]["relation"] not in REGISTRY_PROMPTS for p in r["compositional_I_problems"])],
}


@pytest.mark.parametrize("case", sorted(NOTHING_IN_THE_REGISTRYS_WORDS))
def test_edits_the_registry_has_no_words_for_are_refused_before_the_model_loads(case, tmp_path, monkeypatch, capsys):
    """With --phrasing registry, edits whose queries all fall out of `registry_phrased` reached the model load and ended
    in a DataError about the model's tokenizer."""
    from helpers.cli_errors import one_error_line
    from lincorr.cli import main
    from lincorr.knowledge import load_registry
    from lincorr.ripple.hops import registry_phrased, scorable_hops

    records = NOTHING_IN_THE_REGISTRYS_WORDS[case](bundled_records())
    file = tmp_path / "edits.json"
    file.write_text(json.dumps(records), encoding="utf-8")
    edits = read_edits(file)
    assert scorable_hops(edits)[0] and not registry_phrased(scorable_hops(edits)[0], edits, load_registry())[0]
    monkeypatch.setattr("lincorr.models.load_model", lambda *args, **kwargs: pytest.fail("the model loaded"))
    assert main(["ripple", str(file), "--phrasing", "registry", "--out", str(tmp_path / "run")]) == 2
    line = one_error_line(capsys)
    assert "--phrasing registry" in line and "COUNTRY_OF_CITIZENSHIP" in line and "--phrasing dataset" in line, line
    assert not (tmp_path / "run").exists()


@pytest.mark.integration  # the bundled model, converted once into the run's cache
def test_the_whole_benchmark_runs_at_a_tiny_budget_on_the_bundled_model(bundled, tmp_path, capsys):
    """Predictors, edits and benchmark end to end on the first eight bundled edits: three of them change a country the
    default model's tokenizer can rank; the rest are counted out with their reasons."""
    from lincorr.cli import main
    from lincorr.ripple.benchmark import PREDICTORS
    from lincorr.ripple.study import RippleResult

    bundled("gemma-3-270m-q4km")
    assert main(["ripple", "--max-edits", "8", "-n", "300", "--n-boot", "100", "--out", str(tmp_path / "run"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["n_edits"] == 8 and summary["n_edits_scored"] >= 2
    assert summary["n_queries_scored"] + sum(summary["skipped"].values()) == sum(len(e.problems) for e in read_edits(max_edits=8))
    every = summary["benchmark"]["subsets"]["all"]
    assert [row["predictor"] for row in every["predictors"]] == list(PREDICTORS)
    assert all(-1 <= row["spearman"] <= 1 for row in every["predictors"])
    assert {claim["decision"]["unit"] for claim in every["claims"]} == {"edits"}
    assert summary["seconds_per_edit"]["edit"] > 0 and summary["gradient_parameters"] == "all parameters"
    loaded = lincorr.load_result(tmp_path / "run")
    # Compared as the JSON lincorr writes: an undefined number (NaN) equals no other, itself included.
    assert isinstance(loaded, RippleResult)
    assert strict_json.dumps(loaded.summary()) == strict_json.dumps(RippleResult.load(tmp_path / "run").summary())
    assert len(loaded.rows) == summary["n_queries_scored"] and all(row["learned"] in (True, False) for row in loaded.rows)
    assert main(["report", str(tmp_path / "run"), "--out", str(tmp_path / "report.html")]) == 0
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "ripple effects on gemma-3-270m-q4km" in page and "Spearman with Δ log p" in page


def test_the_ripple_page_shows_the_committed_runs():
    """docs/ripple.md's results are the committed runs under docs/ripple/: regenerate with `python docs/ripple.py --write`."""
    import importlib.util

    root = Path(__file__).resolve().parents[1]
    tool = importlib.util.spec_from_file_location("ripple_page", root / "docs" / "ripple.py")
    page = importlib.util.module_from_spec(tool)
    tool.loader.exec_module(page)
    assert page.current_block() == page.block().strip()
    for path in sorted((root / "docs" / "ripple").glob("*/ripple.json")):
        run = json.loads(path.read_text(encoding="utf-8"))
        every = run["benchmark"]["subsets"]["all"]
        assert run["n_queries_scored"] == every["n_queries"] + run["benchmark"]["n_undefined"]
        assert all(claim["decision"]["unit"] == "edits" for claim in every["claims"])
