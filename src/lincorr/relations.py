"""Relations: one vocabulary for "a source prompt, a target prompt, and the pairs that are right".

`RelationSpec` is pure data (prompt names, a label, a reference name); `bind_relation` binds it
to one tokenizer as a `BoundRelation` (both prompts with their domains, the reference pairs and
their match to the domain columns), `relate` does the same for prompts of the user's own, and
`fit.measure_relation` fits its W on one model (`fit.fit_relation` keeps that W in the relation).
`match_reference` is the one rule that binds word pairs to a tokenizer's domains.
`knowledge.Reference` stays what the registry stores: a named set of pairs between two domains.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from lincorr.domains import Domain
from lincorr.errors import DataError, InputError
from lincorr.reading import parse_json, read_bytes, read_text, visible
from lincorr.outputs import settings_key
from lincorr.prompts import Prompt, registry_prompt

if TYPE_CHECKING:
    from lincorr.fit import PairResult

ReferencePairs = tuple[tuple[str, tuple[str, ...]], ...]  # (subject, acceptable objects)
USER_FILE = "user file"


@dataclasses.dataclass(frozen=True)
class RelationSpec:
    """A relation as data: registry prompt names, a label ("City->Country"), and optionally the reference to judge it by.

    `reference=None` means the registry's reference for the prompt pair.
    """

    source: str
    target: str
    label: str = ""
    reference: str | None = None

    def __post_init__(self) -> None:
        if not self.label:
            object.__setattr__(self, "label", f"{self.source}->{self.target}")


@dataclasses.dataclass(frozen=True)
class BoundRelation:
    """A relation bound to one tokenizer: both prompts, the reference pairs and their columns, optionally a fitted W."""

    spec: RelationSpec
    source: Prompt
    target: Prompt
    reference: str  # the reference's name, or USER_FILE ("" when it has none)
    pairs: ReferencePairs
    match: ReferenceMatch  # the pairs on the two domains: right target columns of each source row, and what was dropped
    fit: PairResult | None = None

    @property
    def label(self) -> str:
        return self.spec.label

    @property
    def columns(self) -> Mapping[int, tuple[int, ...]]:
        """Source row -> right target columns."""
        return self.match.columns

    def token_pairs(self) -> tuple[tuple[int, tuple[int, ...]], ...]:
        """The reference as token ids: each source token with its right target tokens."""
        source_ids, target_ids = self.source.domain.token_ids, self.target.domain.token_ids
        return tuple((source_ids[row], tuple(target_ids[c] for c in columns)) for row, columns in self.columns.items())


if TYPE_CHECKING:
    class FittedRelation(BoundRelation):
        """A BoundRelation with its W fitted (what `fit.fit_relation` returns); at run time it is BoundRelation itself."""

        fit: PairResult
else:
    FittedRelation = BoundRelation


@dataclasses.dataclass(frozen=True)
class DroppedPair:
    """A reference pair that judges nothing, and why."""

    subject: str
    object: str
    reason: str

    @property
    def duplicate(self) -> bool:
        """Dropped only because an earlier pair already joined the same two columns."""
        return self.reason.startswith(DUPLICATE)


DUPLICATE = "duplicate of"


@dataclasses.dataclass(frozen=True)
class ReferenceMatch:
    """Reference pairs on two tokenized domains: the right target columns of each source row, and every pair left out."""

    columns: Mapping[int, tuple[int, ...]]  # source row -> right target columns
    dropped: tuple[DroppedPair, ...]
    n_read: int  # (subject, object) pairs given, one per object of each subject
    # Each given (subject, objects) entry with a row and a column, in the order given and repeats kept: its row and its
    # objects' distinct columns, first object first (what a study that teaches pairs teaches, as often as they are given).
    entries: tuple[tuple[int, tuple[int, ...]], ...] = ()

    @property
    def unmatched(self) -> tuple[DroppedPair, ...]:
        """The dropped pairs with a word in no column (duplicates left out)."""
        return tuple(pair for pair in self.dropped if not pair.duplicate)

    def unusable(self, relation: str, reference: str, fix: str) -> str:
        """The error when no pair is left: how many were read, the first few dropped with why, and `fix`."""
        shown = ", ".join(f"{visible(d.subject)} -> {visible(d.object)} ({d.reason})" for d in self.dropped[:3])
        more = f" and {len(self.dropped) - 3} more" if len(self.dropped) > 3 else ""
        return f"no pair of {reference} can be used for {relation} ({self.n_read} read): {shown}{more}; {fix}"


def match_reference(pairs: ReferencePairs, source_domain: Domain, target_domain: Domain) -> ReferenceMatch:
    """Map (subject, objects) pairs to domain columns, keeping every pair that maps to none with the reason.

    The one matching rule, the same for subjects and objects (`Domain.find`): a word is the
    domain word spelled the same, else the word whose first token it spells ("North" is
    "North America"), else either of these ignoring case. Each object of a subject is a pair of its
    own, and any of a subject's objects (aliases) counts as right. A pair is dropped when a word is
    not in its domain, when this tokenizer dropped it from the domain (first token a fragment of the
    word, or shared with another word), or when an earlier pair already joined the same two columns.
    """
    columns: dict[int, list[int]] = {}
    first_pair: dict[tuple[int, int], tuple[str, str]] = {}
    dropped: list[DroppedPair] = []
    entries: list[tuple[int, tuple[int, ...]]] = []
    n_read = 0
    for subject, objects in pairs:
        row = source_domain.find(subject)
        entry: dict[int, None] = {}
        for obj in objects:
            n_read += 1
            column = target_domain.find(obj)
            reasons = [absence_reason(side, word, domain) for side, word, domain, found in
                       (("subject", subject, source_domain, row), ("object", obj, target_domain, column)) if found is None]
            if reasons or row is None or column is None:
                dropped.append(DroppedPair(subject, obj, "; ".join(reasons)))
                continue
            entry[column] = None
            if (row, column) in first_pair:
                dropped.append(DroppedPair(subject, obj, f"{DUPLICATE} {{}} -> {{}}".format(*first_pair[row, column])))
            else:
                first_pair[row, column] = (subject, obj)
                columns.setdefault(row, []).append(column)
        if entry and row is not None:  # an entry is kept only with its row
            entries.append((row, tuple(entry)))
    return ReferenceMatch({row: tuple(found) for row, found in columns.items()}, tuple(dropped), n_read, tuple(entries))


def absence_reason(side: str, word: str, domain: Domain) -> str:
    """Why a word has no column: the tokenizer dropped it from the domain (and why), or the domain never had it."""
    reason = domain.dropped_reasons.get(word.lower())
    if reason is not None:
        return f"{side} dropped from the {domain.name} domain by this tokenizer: {reason}"
    return f"{side} not in the {domain.name} domain"


def registry_reference(registry, spec: RelationSpec) -> tuple[ReferencePairs, str]:
    """The registry's pairs for a relation and the reference's name; `((), "")` when it has none."""
    found = (registry.reference(spec.reference) if spec.reference
             else registry.reference_for(registry.prompt(spec.source), registry.prompt(spec.target)))
    return (found.pairs, found.name) if found else ((), "")


def bind_relation(registry, spec: RelationSpec, tokenizer, *, keep_subwords: bool = False,
                  reference_pairs: ReferencePairs | None = None, require_pairs: bool = True) -> BoundRelation:
    """Tokenize both prompts' domains and map the reference pairs (the registry's, or `reference_pairs`) to columns.

    With `require_pairs`, a relation with no reference, or none that survives the tokenizer, is a DataError.
    """
    source = registry_prompt(registry, spec.source, tokenizer, keep_subwords=keep_subwords)
    target = registry_prompt(registry, spec.target, tokenizer, keep_subwords=keep_subwords)
    pairs, name = (reference_pairs, USER_FILE) if reference_pairs is not None else registry_reference(registry, spec)
    if require_pairs and not pairs:
        raise DataError(f"the registry has no reference pairs for {spec.source} -> {spec.target}; see `lincorr references`")
    bound = relate(source, target, pairs, reference=name, label=spec.label)
    if require_pairs and not bound.columns:
        raise DataError(bound.match.unusable(spec.label, f"reference {name}", "try another model or relation"))
    return dataclasses.replace(bound, spec=spec)


def relate(source: Prompt, target: Prompt, pairs: ReferencePairs = (), *, reference: str = "", label: str = "") -> BoundRelation:
    """Two prompts bound to one tokenizer (the registry's or the user's own) as a relation, its `pairs` matched to their domains."""
    spec = RelationSpec(source.name, target.name, label)
    return BoundRelation(spec, source, target, reference, tuple(pairs), match_reference(pairs, source.domain, target.domain))


def registry_relations(registry) -> tuple[RelationSpec, ...]:
    """One prompt pair for every reference relation of the registry (relations no prompt pair fits are left out).

    A reference names domains, and several prompts may share a domain (city: `city`,
    `birthplace`; color: `color`, `simile_color`), so the pair is chosen by, in order: prompts
    named in the reference ("math/x+1->math/x+2"), the same family, the same knowledge word
    (object_color / simile_color, city / es/city), and prompts named after their domain.
    """
    names = {spec.name: spec for spec in registry.prompts}
    relations = []
    for reference in registry.references:
        named = reference.name.split("->")
        if len(named) == 2 and all(name in names for name in named):
            relations.append(RelationSpec(named[0], named[1], reference.name, reference.name))
            continue
        candidates = [
            (source, target)
            for source in registry.prompts if source.domain == reference.source_domain
            for target in registry.prompts if target.domain == reference.target_domain and target.name != source.name
        ]
        if candidates:
            source, target = max(candidates, key=lambda pair: pair_affinity(*pair))
            relations.append(RelationSpec(source.name, target.name, reference.name, reference.name))
    return tuple(relations)


def pair_affinity(source, target) -> tuple[bool, bool, bool, bool]:
    """How naturally two prompt specs form a relation's prompt pair (compared as a tuple, larger is better)."""

    def knowledge(name: str) -> str:
        return name.split("/")[-1].split("_")[-1]

    return (
        source.family == target.family,
        knowledge(source.name) == knowledge(target.name),
        source.name == source.domain,
        target.name == target.domain,
    )


def relation_key(registry, spec: RelationSpec) -> dict:
    """Everything a relation's numbers depend on in the registry: both prompts, their domains and the reference."""
    specs = [registry.prompt(spec.source), registry.prompt(spec.target)]
    pairs, name = registry_reference(registry, spec)
    return {
        "label": spec.label,
        "prompts": [dataclasses.asdict(s) for s in specs],
        "domains": [registry.domain_words(s.domain) for s in specs],
        "reference": {"name": name, "pairs": pairs},
    }


def study_key(study: str, model_fingerprint: str, registry, relation: RelationSpec, config) -> dict:
    """The data a stored study row depends on besides the code: the model's weights, the relation's registry data, the settings."""
    return {"study": study, "model": model_fingerprint, **relation_key(registry, relation), "config": settings_key(config)}


@dataclasses.dataclass(frozen=True)
class ReferenceFile:
    """A user's reference file as read: its path and sha256, which every output records, and its pairs."""

    path: str
    sha256: str
    pairs: ReferencePairs  # in file order, repeats kept, so that `match_reference` reports them

    @property
    def n_pairs(self) -> int:
        """(subject, object) pairs read: a TSV line, a JSON sample, or each object listed for a subject."""
        return sum(len(objects) for _, objects in self.pairs)

    def to_json(self) -> dict:
        return {"path": self.path, "sha256": self.sha256}


REFERENCE_SHAPES = ('a TSV of subject<TAB>object lines, or JSON as {"subject": "object" or ["object", ...]}, '
                    '[["subject", "object"], ...] or {"samples": [{"subject": ..., "object": ...}, ...]}')


def read_reference_file(path) -> ReferenceFile:
    """Reference pairs from a TSV (`subject<TAB>object` per line) or JSON file, with the file's sha256.

    JSON takes one of three shapes: a mapping {subject: object or [objects]}; a list of
    [subject, object] pairs; or the shape of public relation datasets, {"samples": [{"subject":
    ..., "object": ...}, ...], ...}, whose other keys ("prompt_templates", ...) are ignored. Any
    other shape is refused. A subject given several times keeps all of its objects: any of them
    counts as right.
    """
    path = Path(path)
    text = read_text(path, "reference file")
    if path.suffix.lower() == ".json" or text.lstrip()[:1] in ("{", "["):
        pairs = json_reference_pairs(path, parse_json(text, path, "reference file", f"write {REFERENCE_SHAPES}"))
    else:
        pairs = tsv_reference_pairs(path, text)
    if not pairs:
        raise InputError(f"reference file {path} has no pairs; write {REFERENCE_SHAPES}")
    return ReferenceFile(str(path), hashlib.sha256(read_bytes(path, "reference file")).hexdigest(), pairs)


def tsv_reference_pairs(path: Path, text: str) -> ReferencePairs:
    """One (subject, (object,)) per line; blank lines and lines starting with '#' are skipped."""
    pairs = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        fields = line.split("\t")
        if len(fields) != 2 or not fields[0].strip() or not fields[1].strip():
            raise InputError(f"{path}:{number}: expected 'subject<TAB>object', got {line!r}; separate the two words with one tab")
        pairs.append((fields[0].strip(), (fields[1].strip(),)))
    return tuple(pairs)


def json_reference_pairs(path: Path, data) -> ReferencePairs:
    """(subject, objects) entries of a JSON reference in one of the three shapes of `read_reference_file`."""
    if isinstance(data, dict) and "samples" in data:
        samples = data["samples"]
        if not isinstance(samples, list):
            raise InputError(f"{path}: \"samples\" is {json.dumps(samples)[:40]}, not a list of samples; write {REFERENCE_SHAPES}")
        entries = []
        for number, sample in enumerate(samples, 1):
            if not (isinstance(sample, dict) and isinstance(sample.get("subject"), str) and "object" in sample):
                raise InputError(f"{path}: sample {number} is {json.dumps(sample)[:60]}, not {{\"subject\": ..., \"object\": ...}}; "
                                   f"write {REFERENCE_SHAPES}")
            entries.append((sample["subject"], sample["object"]))
    elif isinstance(data, dict):
        entries = list(data.items())
    elif isinstance(data, list):
        entries = data
        for item in entries:
            if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)):
                raise InputError(f"{path}: entry {json.dumps(item)[:60]} is not a [subject, object] pair; write {REFERENCE_SHAPES}")
    else:
        raise InputError(f"{path}: the JSON is {json.dumps(data)[:40]}, not reference pairs; write {REFERENCE_SHAPES}")
    return tuple((subject.strip(), json_objects(path, subject, objects)) for subject, objects in entries)


def json_objects(path: Path, subject: str, objects) -> tuple[str, ...]:
    """The object(s) of one JSON subject: text, or a non-empty list of text."""
    listed = [objects] if isinstance(objects, str) else objects
    if not (isinstance(listed, list) and listed and all(isinstance(obj, str) for obj in listed)):
        raise InputError(f"{path}: the object of '{subject}' is {json.dumps(objects)[:40]}, not text or a list of text; "
                           f"write {REFERENCE_SHAPES}")
    return tuple(obj.strip() for obj in listed)
