"""The LRE relations (Hernandez et al., ICLR 2024) read as registry data: two prompts over one input X per relation.

`data/lre/` holds the 47 relation files of the LRE dataset verbatim (MIT; LICENSE and SOURCE.md
beside them). Each file gives a relation's samples (subject, object), its prompt templates
("The capital city of {} is") and its properties (relation_type, domain_name, range_name).

Peng et al. judge W between two prompts over the SAME input X (§3.5): the source prompt's answers
are LRE's subjects and the target prompt's are LRE's objects, and the samples are the real-world
pairs W is judged against. lincorr's construction of the two prompts, for a relation whose
domain_name is D and whose first prompt template is T:

- source prompt `lre/<relation>/source`: "{}'s D is" (country_capital_city: "X's country is"),
  answered over the subject domain `lre/<relation>/subjects`;
- target prompt `lre/<relation>/target`: T with its "{}" replaced by "{}'s D" ("The capital city
  of X's country is"), answered over the object domain `lre/<relation>/objects`;
- reference `lre/<relation>`: each subject with every object the samples give it.

So X is a person or thing whose D the model is asked for, and the target asks for the relation's
object of that same D: if W is precise, the subject the source prompt favours points to its object.
Domains keep the samples' words once each (the first spelling of words equal ignoring case),
stripped of surrounding spaces; the tokenizer's first-token rule (`lincorr.domains.build_domain`)
is applied when a relation is bound, as for every registry prompt.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from lincorr.errors import InputError
from lincorr.knowledge.registry import PromptSpec, Reference, Registry
from lincorr.relations import RelationSpec
from lincorr.schema import TEXT, FileKind, Items, read_document

__all__ = ["LRE_DIR", "LRE_FAMILY", "LreRelation", "lre_registry", "lre_relations", "read_lre_relation"]

LRE_DIR = Path(__file__).parent / "data" / "lre"
LRE_FAMILY = "lre"
WHAT = "LRE relation file"
SHAPE = ('write {"name": ..., "prompt_templates": ["... {} ..."], "properties": {"relation_type": ..., "domain_name": ...}, '
         '"samples": [{"subject": ..., "object": ...}, ...]} as the LRE dataset does')
LRE_FILE = FileKind(WHAT, {"prompt_templates": Items(TEXT), "samples": Items({"subject": TEXT, "object": TEXT}),
                           "properties": {"relation_type": TEXT, "domain_name": TEXT, "range_name": TEXT}}, SHAPE, "the LRE dataset")


@dataclasses.dataclass(frozen=True)
class LreRelation:
    """One LRE relation file as read: `name` is the file's stem ("country_capital_city")."""

    name: str
    relation_type: str  # factual, commonsense, linguistic or bias
    domain_name: str  # what a subject is ("country")
    range_name: str  # what an object is ("city")
    templates: tuple[str, ...]  # each with one "{}" for the subject
    samples: tuple[tuple[str, str], ...]  # (subject, object) in file order
    path: str

    @property
    def source_template(self) -> str:
        """lincorr's source prompt: the input X's subject ("{}'s country is")."""
        return "{}'s " + self.domain_name + " is"

    @property
    def target_template(self) -> str:
        """lincorr's target prompt: LRE's first template asked about X's subject ("The capital city of {}'s country is")."""
        return self.templates[0].replace("{}", "{}'s " + self.domain_name)

    def sampled(self, max_subjects: int | None, seed: int = 0) -> LreRelation:
        """The relation with at most `max_subjects` subjects, drawn at random with `seed` (file order kept); all when None or fewer."""
        subjects = list(dict.fromkeys(subject for subject, _ in self.samples))
        if max_subjects is None or len(subjects) <= max_subjects:
            return self
        kept = {subjects[i] for i in np.random.default_rng(seed).choice(len(subjects), max_subjects, replace=False)}
        return dataclasses.replace(self, samples=tuple(sample for sample in self.samples if sample[0] in kept))

    def pairs(self) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """Each subject once, with every object the samples give it, in file order."""
        objects: dict[str, dict[str, None]] = {}  # ordered sets: one look-up per sample, however many objects a subject has
        for subject, obj in self.samples:
            objects.setdefault(subject.strip(), {})[obj.strip()] = None
        return tuple((subject, tuple(found)) for subject, found in objects.items())


def _filled(value: str, path: Path, where: str) -> str:
    if not value.strip():
        raise InputError(f"{WHAT} {path}: {where} is empty; {SHAPE}")
    return value


def _named(value: str, path: Path, where: str) -> str:
    """A property lincorr writes into a prompt ("{}'s country is"): a brace in it would make or complete a second slot for
    the subject ("country {" beside a template's "{}}")."""
    if "{" in _filled(value, path, where) or "}" in value:
        raise InputError(f"{WHAT} {path}: {where} {value[:100]!r} holds a brace, which would put the subject in the prompt "
                         "twice; name what a subject is in words")
    return value


def read_lre_relation(path) -> LreRelation:
    """One LRE JSON file, checked against LRE_FILE: any departure from LRE's shape is one InputError line naming the file and the field."""
    path = Path(path)
    data = read_document(path, LRE_FILE)
    templates, properties, samples = data["prompt_templates"], data["properties"], data["samples"]
    if not templates or not samples:
        raise InputError(f"{WHAT} {path}: {'prompt_templates' if not templates else 'samples'} is empty; {SHAPE}")
    for number, template in enumerate(templates):
        if template.count("{}") != 1 or template.count("{") != 1 or template.count("}") != 1:
            raise InputError(f"{WHAT} {path}: prompt_templates[{number}] {template[:100]!r} needs exactly one {{}} where the "
                             f"subject goes, and no other brace; {SHAPE}")
    pairs = tuple((_filled(sample["subject"], path, f"samples[{number}].subject"), _filled(sample["object"], path, f"samples[{number}].object"))
                  for number, sample in enumerate(samples))
    return LreRelation(
        name=path.stem,
        relation_type=_filled(properties["relation_type"], path, "properties.relation_type"),
        domain_name=_named(properties["domain_name"], path, "properties.domain_name"),
        range_name=_filled(properties["range_name"], path, "properties.range_name"),
        templates=tuple(templates),
        samples=pairs,
        path=str(path),
    )


def lre_relations(directory=LRE_DIR, names: Sequence[str] = ()) -> tuple[LreRelation, ...]:
    """Every `<type>/<relation>.json` under `directory`, by relation name; only `names` when given (an unknown one is an InputError)."""
    paths = {path.stem: path for path in sorted(Path(directory).glob("*/*.json"))}
    unknown = [name for name in names if name not in paths]
    if unknown:
        raise InputError(f"unknown LRE relation {', '.join(unknown)}; known: {', '.join(sorted(paths))}")
    return tuple(read_lre_relation(paths[name]) for name in (names or sorted(paths)))


def unique_words(words: Sequence[str]) -> tuple[str, ...]:
    """`words` stripped, each once (the first spelling of words equal ignoring case), in order."""
    kept: dict[str, str] = {}
    for word in words:
        kept.setdefault(word.strip().casefold(), word.strip())
    return tuple(kept.values())


def lre_registry(relations: Sequence[LreRelation]) -> tuple[Registry, tuple[RelationSpec, ...]]:
    """A registry with each relation's two prompts, two domains and reference, and one `RelationSpec` per relation (label = its name)."""
    prompts, domains, references, specs = [], {}, [], []
    for relation in relations:
        base = f"{LRE_FAMILY}/{relation.name}"
        subjects, objects = f"{base}/subjects", f"{base}/objects"
        domains[subjects] = unique_words([subject for subject, _ in relation.samples])
        domains[objects] = unique_words([obj for _, obj in relation.samples])
        prompts += [PromptSpec(f"{base}/source", LRE_FAMILY, "en", relation.source_template, subjects),
                    PromptSpec(f"{base}/target", LRE_FAMILY, "en", relation.target_template, objects)]
        references.append(Reference(base, subjects, objects, relation.pairs()))
        specs.append(RelationSpec(f"{base}/source", f"{base}/target", relation.name, base))
    registry = Registry(tuple(prompts), types.MappingProxyType(domains), tuple(references),
                        tuple(relation.path for relation in relations))
    return registry, tuple(specs)
