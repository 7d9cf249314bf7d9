"""Relations: one vocabulary for "a source prompt, a target prompt, and the pairs that are right".

`RelationSpec` is pure data (prompt names, a label, a reference name); `bind_relation` binds it
to one tokenizer as a `BoundRelation` (both prompts with their domains, the reference pairs and
their domain columns), and `experiments.correlation.fit_relation` adds W fitted on one model.
`knowledge.Reference` stays what the registry stores: a named set of pairs between two domains.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from lincorr.errors import LincorrError
from lincorr.metrics import reference_columns
from lincorr.outputs import settings_key
from lincorr.prompts import Prompt, registry_prompt

if TYPE_CHECKING:
    from lincorr.experiments.correlation import PairResult

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
    reference: str  # the reference's name, or USER_FILE
    pairs: ReferencePairs
    columns: Mapping[int, tuple[int, ...]]  # source row -> right target columns
    fit: PairResult | None = None

    @property
    def label(self) -> str:
        return self.spec.label

    def token_pairs(self) -> tuple[tuple[int, tuple[int, ...]], ...]:
        """The reference as token ids: each source token with its right target tokens."""
        source_ids, target_ids = self.source.domain.token_ids, self.target.domain.token_ids
        return tuple((source_ids[row], tuple(target_ids[c] for c in columns)) for row, columns in self.columns.items())


def registry_reference(registry, spec: RelationSpec) -> tuple[ReferencePairs, str]:
    """The registry's pairs for a relation and the reference's name; `((), "")` when it has none."""
    found = (registry.reference(spec.reference) if spec.reference
             else registry.reference_for(registry.prompt(spec.source), registry.prompt(spec.target)))
    return (found.pairs, found.name) if found else ((), "")


def bind_relation(registry, spec: RelationSpec, tokenizer, *, keep_subwords: bool = False,
                  reference_pairs: ReferencePairs | None = None, require_pairs: bool = True) -> BoundRelation:
    """Tokenize both prompts' domains and map the reference pairs (the registry's, or `reference_pairs`) to columns.

    With `require_pairs`, a relation with no reference, or none that survives the tokenizer, is a LincorrError.
    """
    source = registry_prompt(registry, spec.source, tokenizer, keep_subwords=keep_subwords)
    target = registry_prompt(registry, spec.target, tokenizer, keep_subwords=keep_subwords)
    pairs, name = (reference_pairs, USER_FILE) if reference_pairs is not None else registry_reference(registry, spec)
    if require_pairs and not pairs:
        raise LincorrError(f"the registry has no reference pairs for {spec.source} -> {spec.target}; see `lincorr references`")
    columns = reference_columns(pairs, source.domain.words, target.domain)
    if require_pairs and not columns:
        raise LincorrError(f"no reference pair of {name} survives this tokenizer; try another model or relation")
    return BoundRelation(spec, source, target, name, tuple(pairs), columns)


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


def read_reference_file(path) -> ReferencePairs:
    """Reference pairs from a TSV (`subject<TAB>object` per line) or JSON file.

    JSON is either a mapping {subject: object or [objects]} or a list of [subject, object]
    pairs. A subject given several times keeps all of its objects: any of them counts as right.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise LincorrError(f"cannot read reference file {path} ({error}); pass a UTF-8 TSV or JSON file") from None
    pairs: list[tuple[str, str]] = []
    if path.suffix.lower() == ".json" or text.lstrip()[:1] in ("{", "["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise LincorrError(f"{path}:{error.lineno}: not valid JSON ({error.msg}); write {{\"subject\": [\"object\", ...]}}") from None
        shape = '{"subject": ["object", ...]} or [["subject", "object"], ...]'
        if not isinstance(data, (dict, list)):
            raise LincorrError(f"{path}: the JSON is {json.dumps(data)[:40]}, not reference pairs; write {shape}")
        for item in data.items() if isinstance(data, dict) else data:
            if not (isinstance(item, (list, tuple)) and len(item) == 2 and isinstance(item[0], str)):
                raise LincorrError(f"{path}: entry {item!r} is not a subject with its object(s); write {shape}")
            subject, objects = item
            if not isinstance(objects, (str, list)):
                raise LincorrError(f"{path}: the object of '{subject}' is {json.dumps(objects)}, not text or a list of text; write {shape}")
            for obj in [objects] if isinstance(objects, str) else objects:
                if not isinstance(obj, str):
                    raise LincorrError(f"{path}: object {json.dumps(obj)} of '{subject}' is not text; write {shape}")
                pairs.append((subject.strip(), obj.strip()))
    else:
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            fields = line.split("\t")
            if len(fields) != 2 or not fields[0].strip() or not fields[1].strip():
                raise LincorrError(f"{path}:{number}: expected 'subject<TAB>object', got {line!r}; separate the two words with one tab")
            pairs.append((fields[0].strip(), fields[1].strip()))
    if not pairs:
        raise LincorrError(f"reference file {path} has no pairs; write one subject<TAB>object per line")
    merged: dict[str, list[str]] = {}
    for subject, obj in pairs:
        merged.setdefault(subject, [])
        if obj not in merged[subject]:
            merged[subject].append(obj)
    return tuple((subject, tuple(objects)) for subject, objects in merged.items())
