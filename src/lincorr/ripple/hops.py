"""Edits read as the predictors read them: each two-hop query as templates over the edit's subject, and answer domains.

A country edit ("The name of the country of citizenship of Leonardo DiCaprio is Syria.") has a first hop, the edit's
fact as a template over its subject ("The name of the country of citizenship of {} is", answered by a country), and
queries whose second hop asks something of that country ("The name of the continent which the country of citizenship of
{} is part of is", answered "Asia" once the edit holds; alone: "The name of the continent which {} is part of is"). The
predictors and outcomes rank answers within a domain per relation, as W does: the countries, the continents, the
capitals. Edits of other relations (spouse, composer, director) reach their queries through people, where a map
between two prompts' logits over countries has no domain; they are counted and left out.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Mapping, Sequence

from lincorr.domains import Domain, build_domain
from lincorr.errors import InputError
from lincorr.ripple.edits import COUNTRY_RELATIONS, Edit, Problem

FIRST_HOP = "COUNTRY"  # the answer domain of every country edit's first hop
# Registry domains that hold answers a person would give for a second hop, added to the dataset's own answers.
REGISTRY_DOMAINS = {FIRST_HOP: "country", "CONTINENT": "continent", "OFFICIAL_LANGUAGE": "language", "CAPITAL": "city"}
NOT_A_COUNTRY_EDIT = "the edit changes no country: its queries go through a person, where W has no answer domain"
# The registry's prompts (the paper's Table 11 and the mechanisms study's `capital`) that ask of a person what a country
# edit and its queries ask: the variant `--phrasing registry` asks them in place of the dataset's sentences.
REGISTRY_PROMPTS = {FIRST_HOP: "country", "CONTINENT": "continent", "OFFICIAL_LANGUAGE": "language", "CAPITAL": "capital"}
PHRASINGS = ("dataset", "registry")
NOT_A_PERSON = "the registry's prompts are about people and this edit's subject is not one (a COUNTRY edit)"
NO_REGISTRY_PROMPT = "the registry has no prompt for this query's relation"


@dataclasses.dataclass(frozen=True)
class Hop:
    """One two-hop query of one edit: the edit's fact and the query as templates over the edit's subject, and the second
    hop alone as a template over the edit's new object."""

    edit: int  # the edit's place in the file
    problem: int  # the query's place in its edit
    subject: str  # "Leonardo DiCaprio"
    new_object: str  # "Syria"
    answer: str  # the query's answer once the edit holds: "Asia"
    relation: str  # the second hop's relation: "CONTINENT"
    fact_template: str  # "The name of the country of citizenship of {} is"
    query_template: str  # "The name of the continent which the country of citizenship of {} is part of is"
    condition_template: str  # "The name of the continent which {} is part of is"

    @property
    def pair(self) -> tuple[str, str]:
        """The two prompts W maps between: the edit's fact and the query."""
        return self.fact_template, self.query_template


def fact_prompt(edit: Edit) -> str:
    """The edit's sentence without its object and full stop: what the edit teaches the model to continue."""
    sentence = edit.prompt.rstrip().removesuffix(".").rstrip()
    return sentence.removesuffix(edit.new_object).rstrip()


def hops_of(edits: Sequence[Edit]) -> tuple[tuple[Hop, ...], dict[str, int]]:
    """Every query of the country edits as a `Hop`, and the queries left out by reason."""
    hops: list[Hop] = []
    skipped: collections.Counter[str] = collections.Counter()
    for index, edit in enumerate(edits):
        if edit.relation not in COUNTRY_RELATIONS:
            skipped[NOT_A_COUNTRY_EDIT] += len(edit.problems)
            continue
        for number, problem in enumerate(edit.problems):
            hop = hop_of(index, edit, number, problem)
            if isinstance(hop, str):
                skipped[hop] += 1
            else:
                hops.append(hop)
    return tuple(hops), dict(skipped.most_common())


def scorable_hops(edits: Sequence[Edit]) -> tuple[tuple[Hop, ...], dict[str, int]]:
    """`hops_of`, or an InputError where no query of the edits can be scored (no edit changes a country): said before any
    model loads."""
    hops, skipped = hops_of(edits)
    if not hops:
        reasons = "; ".join(f"{count} queries: {reason}" for reason, count in skipped.items())
        raise InputError(f"none of the {len(edits)} edits has a query lincorr can score ({reasons}); give edits whose relation "
                         f"is one of {', '.join(COUNTRY_RELATIONS)}")
    return hops, skipped


def registry_phrased(hops: Sequence[Hop], edits: Sequence[Edit], registry) -> tuple[tuple[Hop, ...], dict[str, int]]:
    """The hops of citizenship edits asked in the registry's words: the edit taught as "{} lives in the country of", each
    query as the registry's prompt of its relation about the same person ("{} lives in the continent of"); the condition
    query (about the country) stays the dataset's. The hops the registry has no words for, counted by reason."""
    phrased: list[Hop] = []
    skipped: collections.Counter[str] = collections.Counter()
    for hop in hops:
        if edits[hop.edit].relation != "COUNTRY_OF_CITIZENSHIP":
            skipped[NOT_A_PERSON] += 1
        elif hop.relation not in REGISTRY_PROMPTS:
            skipped[NO_REGISTRY_PROMPT] += 1
        else:
            phrased.append(dataclasses.replace(hop, fact_template=registry.prompt(REGISTRY_PROMPTS[FIRST_HOP]).template,
                                               query_template=registry.prompt(REGISTRY_PROMPTS[hop.relation]).template))
    return tuple(phrased), dict(skipped.most_common())


def asked_hops(edits: Sequence[Edit], registry, phrasing: str = "dataset") -> tuple[tuple[Hop, ...], dict[str, int]]:
    """`scorable_hops` in the `phrasing` asked (`registry_phrased` for "registry"), and the queries left out by reason; an
    InputError where the registry phrasing leaves none (said before any model loads)."""
    hops, skipped = scorable_hops(edits)
    if phrasing == "dataset":
        return hops, skipped
    phrased, left_out = registry_phrased(hops, edits, registry)
    if not phrased:
        reasons = "; ".join(f"{count} queries: {reason}" for reason, count in left_out.items())
        *most, last = (relation for relation in REGISTRY_PROMPTS if relation != FIRST_HOP)
        raise InputError(f"--phrasing registry leaves none of the {len(hops)} scorable queries of these edits ({reasons}): "
                         f"it asks only the {', '.join(most)} and {last} queries of COUNTRY_OF_CITIZENSHIP edits, about a person; "
                         "give such edits, or use --phrasing dataset")
    return phrased, {**skipped, **left_out}


def hop_of(index: int, edit: Edit, number: int, problem: Problem) -> Hop | str:
    """The query as a `Hop`, or why it cannot be one."""
    fact = fact_prompt(edit)
    if fact == edit.prompt.rstrip().removesuffix(".").rstrip():
        return "the edit's sentence does not end with its new object"
    for text, entity in ((fact, edit.subject), (problem.query.prompt, edit.subject), (problem.condition.prompt, edit.new_object)):
        if text.count(entity) != 1 or "{" in text or "}" in text:
            return "a prompt does not name its subject exactly once, or holds a brace"
    return Hop(index, number, edit.subject, edit.new_object, problem.query.answer, problem.condition.relation,
               fact.replace(edit.subject, "{}"), problem.query.prompt.replace(edit.subject, "{}"),
               problem.condition.prompt.replace(edit.new_object, "{}"))


def domain_words(hops: Sequence[Hop], edits: Sequence[Edit], registry) -> dict[str, tuple[str, ...]]:
    """The answer words of the first hop (every new and old object of the country edits) and of each second-hop relation
    (every answer the file gives it), with the registry's words for relations it has a domain of."""
    words: dict[str, list[str]] = collections.defaultdict(list)
    for edit in edits:
        if edit.relation in COUNTRY_RELATIONS:
            words[FIRST_HOP] += [edit.new_object, edit.old_object]
    for hop in hops:
        words[hop.relation].append(hop.answer)
    for relation, domain in REGISTRY_DOMAINS.items():
        if relation in words:
            words[relation] += registry.domain_words(domain)
    return {relation: tuple(dict.fromkeys(listed)) for relation, listed in words.items()}


def answer_domains(words: Mapping[str, Sequence[str]], tokenizer) -> dict[str, Domain]:
    """Each relation's words as a domain of this tokenizer (words whose first token is a fragment or shared are dropped)."""
    return {relation: build_domain(listed, tokenizer, name=relation, allow_empty=True) for relation, listed in words.items()}


def usable(hop: Hop, domains: Mapping[str, Domain]) -> str | None:
    """None where both the new object and the answer have a column of their domain for this tokenizer, else why not."""
    if domains[FIRST_HOP].find(hop.new_object) is None:
        return f"the new object is not a usable word of the {FIRST_HOP} domain for this tokenizer"
    if domains[hop.relation].find(hop.answer) is None:
        return "the answer is not a usable word of its relation's domain for this tokenizer"
    return None
