"""RippleEdits-shaped files read as plain data: each edit, the new fact it teaches, and the two-hop queries through it.

An edit teaches a model a new fact ("The name of the country of citizenship of Leonardo DiCaprio is Syria."); each of
its problems is a two-hop query through the edited fact ("The name of the continent which the country of citizenship
of Leonardo DiCaprio is part of is", answered "Asia" once the edit holds) with its condition query, the second hop
alone about the new object ("The name of the continent which Syria is part of is"): whether the model knows the second
hop before any edit. `data/edits.json` is the bundled subset of RippleEdits (SOURCE.md and LICENSE beside it); a file
of the same shape from anyone reads the same way, checked field by field before anything uses it.
"""

from __future__ import annotations

import collections
import dataclasses
from pathlib import Path

from lincorr.errors import InputError, UsageError
from lincorr.schema import TEXT, FileKind, Items, read_document

EDITS_FILE = Path(__file__).parent / "data" / "edits.json"
# The edits that change a country: their second hops (continent, capital, currency, language, ...) ask about countries.
COUNTRY_RELATIONS = ("COUNTRY", "COUNTRY_OF_CITIZENSHIP")
# More edits than any edit benchmark holds (RippleEdits: 5,000): a file of a million is a mistake, refused before reading on.
MOST_EDITS = 100_000
# A prompt or answer is a sentence (RippleEdits' longest: 126 characters); a page of one would be tokenised, and run
# through the model, for every edit and query.
MOST_CHARACTERS = 1000
# RippleEdits' popular subset holds under 7 compositional queries an edit (918 over the 140 bundled), some 35,000 over
# its 5,000 edits: a file of more is a mistake (one edit with 120,000 queries was read), refused before it is read on.
MOST_QUERIES = 100_000
QUERY = {"prompt": TEXT, "answer": TEXT, "relation": TEXT, "subject": TEXT}
EDIT = {"prompt": TEXT, "subject_id": TEXT, "relation": TEXT, "target_id": TEXT, "original_fact": {"target_id": TEXT}}
EDITS = FileKind(
    "RippleEdits file",
    Items({"edit": EDIT, "compositional_I_problems": Items({"compositional_query": QUERY, "condition_query": QUERY})}),
    'write a list of {"edit": {"prompt", "subject_id", "relation", "target_id", "original_fact": {"target_id", ...}}, '
    '"compositional_I_problems": [{"compositional_query": {"prompt", "answer", "relation", "subject"}, "condition_query": {...}}]} '
    "as RippleEdits does", "RippleEdits")


@dataclasses.dataclass(frozen=True)
class Query:
    """A prompt whose next words should be `answer`, about `subject` through `relation`."""

    prompt: str
    answer: str
    relation: str  # RippleEdits' name of the relation asked ("CONTINENT")
    subject: str


@dataclasses.dataclass(frozen=True)
class Problem:
    """A two-hop query through an edited fact, and its second hop alone about the edit's new object."""

    query: Query
    condition: Query


@dataclasses.dataclass(frozen=True)
class Edit:
    """One counterfactual edit: the sentence that teaches it, the fact it changes, and the queries its ripple reaches."""

    prompt: str  # "The name of the country of citizenship of Leonardo DiCaprio is Syria."
    subject: str
    relation: str  # "COUNTRY_OF_CITIZENSHIP"
    new_object: str
    old_object: str
    problems: tuple[Problem, ...]


def read_edits(path: str | Path | None = None, max_edits: int | None = None) -> tuple[Edit, ...]:
    """The edits of a RippleEdits-shaped file (the bundled subset by default), the first `max_edits` of them where given;
    an InputError naming the edit and field where the file is not of that shape or a prompt or answer is empty."""
    if max_edits is not None and (isinstance(max_edits, bool) or not isinstance(max_edits, int) or max_edits < 1):
        raise UsageError(f"max_edits is {max_edits!r}; give a whole number of at least 1, or none for every edit")
    path = Path(path) if path is not None else EDITS_FILE
    document = read_document(path, EDITS)
    if len(document) > MOST_EDITS:
        raise InputError(f"{path} holds {len(document):,} edits, more than the {MOST_EDITS:,} lincorr reads; "
                         "split it, or pass --max-edits for a first look")
    if not document:
        raise InputError(f"{path} holds no edits; {EDITS.remedy}")
    queries = sum(len(record["compositional_I_problems"]) for record in document[:max_edits])
    if queries > MOST_QUERIES:
        n_read = min(len(document), max_edits or len(document))
        raise InputError(f"{path}: {'the one edit' if n_read == 1 else f'the {n_read:,} edits'} read hold{'s' if n_read == 1 else ''} "
                         f"{queries:,} queries, "
                         f"more than the {MOST_QUERIES:,} lincorr reads; split it, or pass --max-edits for a first look")
    return tuple(edit_from(record, index, path) for index, record in enumerate(document[:max_edits]))


def too_long(record: dict, shape: dict, prefix: str = "") -> tuple[str, int] | None:
    """The first text field of `record` that `shape` declares (and so that lincorr reads) and that is longer than
    MOST_CHARACTERS: its dotted name and length; None where there is none."""
    for key, inner in shape.items():
        if isinstance(inner, dict):
            found = too_long(record[key], inner, f"{prefix}{key}.")
            if found is not None:
                return found
        elif inner is TEXT and len(record[key]) > MOST_CHARACTERS:
            return f"{prefix}{key}", len(record[key])
    return None


def edit_from(record: dict, index: int, path: Path) -> Edit:
    fact = record["edit"]
    where = f"{path}: edit {index} ({fact['subject_id'][:100]!r}, {fact['relation'][:100]})"
    long = too_long(fact, EDIT)
    if long is not None:
        raise InputError(f"{where}: its {long[0]} is {long[1]:,} characters, more than the {MOST_CHARACTERS:,} "
                         "of a sentence that teaches one fact; shorten it")
    if not record["compositional_I_problems"]:
        raise InputError(f"{where} has no queries; give it at least one compositional query, or leave the edit out")
    problems = tuple(Problem(query_from(problem["compositional_query"], f"{where}, query {number}"),
                             query_from(problem["condition_query"], f"{where}, condition of query {number}"))
                     for number, problem in enumerate(record["compositional_I_problems"]))
    return Edit(fact["prompt"], fact["subject_id"], fact["relation"], fact["target_id"], fact["original_fact"]["target_id"], problems)


def query_from(query: dict, where: str) -> Query:
    for field in ("prompt", "answer"):
        if not query[field].strip():
            raise InputError(f"{where} has an empty {field}; every query needs a prompt and the answer it should lead to")
    long = too_long(query, QUERY)
    if long is not None:
        raise InputError(f"{where}: its {long[0]} is {long[1]:,} characters, more than the {MOST_CHARACTERS:,} "
                         "of a sentence; shorten it")
    return Query(query["prompt"], query["answer"], query["relation"], query["subject"])


def relation_counts(edits: tuple[Edit, ...]) -> dict[str, int]:
    """How many edits change each relation, most first."""
    return dict(collections.Counter(edit.relation for edit in edits).most_common())
