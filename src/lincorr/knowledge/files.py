"""Reading registry files (YAML or JSON) with line numbers, checking them, and merging them."""

from __future__ import annotations

import dataclasses
import re
import types
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from lincorr.errors import InputError
from lincorr.reading import check_nesting, read_text, yaml_depth
from lincorr.knowledge.registry import PromptSpec, Reference, Registry, TaskSpec, suggest

TOP_LEVEL_KEYS = ("domains", "prompts", "references", "tasks")
PROMPT_KEYS = ("name", "family", "language", "template", "domain", "answer_prefix")
REFERENCE_KEYS = ("name", "source_domain", "target_domain", "pairs")
TASK_KEYS = ("name", "template", "extractive_template", "demonstrations", "answer_prefix", "pairs", "reference")
# Chinese and Japanese write the answer straight after the prompt; the others after a space.
LANGUAGES_WITHOUT_SPACES = frozenset({"zh", "ja"})


@dataclasses.dataclass(frozen=True)
class Where:
    """A file and line, for error messages."""

    path: Path
    line: int

    def error(self, problem: str, fix: str) -> InputError:
        """A one-line error naming this place, the problem and the fix."""
        return InputError(f"{self.path}:{self.line}: {problem}; {fix}")


class _Problem(Exception):
    """A mistake found while parsing, before the file name is attached."""

    def __init__(self, line: int, problem: str, fix: str):
        super().__init__(problem)
        self.line, self.problem, self.fix = line, problem, fix


class _Map(dict):
    """A YAML mapping that remembers its own line and each key's line."""

    line: int
    key_lines: dict[str, int]


class _Seq(list):
    """A YAML sequence that remembers its own line and each item's line."""

    line: int
    item_lines: list[int]


# The C parser, where PyYAML was built with it, loads the bundled data about 3x faster.
_SafeLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _LineLoader(_SafeLoader):
    """Safe YAML with line numbers, duplicate keys refused, and every plain scalar read as text."""


# Answers such as "No", "On" or "0" must stay words, not become booleans or numbers.
_LineLoader.yaml_implicit_resolvers = {}


def _construct_map(loader: _LineLoader, node: yaml.MappingNode) -> _Map:
    mapping = _Map()
    mapping.line, mapping.key_lines = node.start_mark.line + 1, {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        if not isinstance(key, str):
            raise _Problem(line, "a key must be plain text", "write keys as `name:`")
        if key in mapping:
            raise _Problem(line, f"duplicate key '{key}' (first on line {mapping.key_lines[key]})", "keep one of them")
        mapping[key] = loader.construct_object(value_node, deep=True)
        mapping.key_lines[key] = line
    return mapping


def _construct_seq(loader: _LineLoader, node: yaml.SequenceNode) -> _Seq:
    sequence = _Seq(loader.construct_object(child, deep=True) for child in node.value)
    sequence.line = node.start_mark.line + 1
    sequence.item_lines = [child.start_mark.line + 1 for child in node.value]
    return sequence


_LineLoader.add_constructor("tag:yaml.org,2002:map", _construct_map)
_LineLoader.add_constructor("tag:yaml.org,2002:seq", _construct_seq)


@dataclasses.dataclass(frozen=True)
class Entry:
    """One parsed domain, prompt, reference or task, with where it came from.

    `layer` is 0 for bundled files and counts up through user files; `lines` holds the line
    of each reference subject so a bad pair is reported where it is written.
    """

    value: Any  # by its kind: a domain's words, a PromptSpec, a Reference or a TaskSpec
    where: Where
    layer: int = 0
    lines: Mapping[str, int] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class FileContents:
    """What one registry file defines, by name."""

    path: Path
    domains: dict[str, Entry]
    prompts: dict[str, Entry]
    references: dict[str, Entry]
    tasks: dict[str, Entry] = dataclasses.field(default_factory=dict)


def read_registry_file(path: Path) -> FileContents:
    """Parse and check one file on its own; cross-file checks happen in `merge`."""
    text = read_text(path, "registry file")
    check_nesting(path, "registry file", yaml_depth(text))
    try:
        return _parse_document(path, yaml.load(text, Loader=_LineLoader))  # noqa: S506 - a SafeLoader
    except _Problem as problem:
        raise Where(path, problem.line).error(problem.problem, problem.fix) from None
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        line = mark.line + 1 if mark else 1
        raise Where(path, line).error(f"not valid YAML ({error.problem})", "fix the syntax (schema: docs/registry.md)") from None


def _parse_document(path: Path, document: object) -> FileContents:
    contents = FileContents(path, {}, {}, {})
    if document is None:
        raise _Problem(1, "the registry file is empty", f"add one of {', '.join(k + ':' for k in TOP_LEVEL_KEYS)} (schema: docs/registry.md)")
    if not isinstance(document, _Map):
        raise _Problem(1, "a registry file must be a mapping", f"start it with one of {', '.join(k + ':' for k in TOP_LEVEL_KEYS)}")
    _check_keys(document, TOP_LEVEL_KEYS, required=(), what="top-level key")
    domains = document.get("domains", _Map())
    if not isinstance(domains, _Map):
        raise _Problem(document.key_lines["domains"], "`domains:` must map names to word lists", "write `domains:` then `  name: [word, ...]`")
    for name, words in domains.items():
        line = domains.key_lines[name]
        contents.domains[name] = Entry(_parse_words(name, words, line), Where(path, line))
    for item, line in _items(document, "prompts"):
        spec = _parse_prompt(item)
        if spec.name in contents.prompts:
            raise _Problem(line, f"prompt '{spec.name}' is defined twice in this file", "rename or remove one")
        contents.prompts[spec.name] = Entry(spec, Where(path, line))
    for item, line in _items(document, "references"):
        relation = _parse_reference(item)
        if relation.name in contents.references:
            raise _Problem(line, f"reference '{relation.name}' is defined twice in this file", "rename or remove one")
        contents.references[relation.name] = Entry(relation, Where(path, line), lines=dict(item["pairs"].key_lines))
    for item, line in _items(document, "tasks"):
        task = _parse_task(item)
        if task.name in contents.tasks:
            raise _Problem(line, f"task '{task.name}' is defined twice in this file", "rename or remove one")
        contents.tasks[task.name] = Entry(task, Where(path, line), lines={"reference": item.key_lines.get("reference", line)})
    return contents


def _items(document: _Map, key: str) -> list[tuple[_Map, int]]:
    if key not in document:
        return []
    items = document[key]
    if not isinstance(items, _Seq):
        raise _Problem(document.key_lines[key], f"`{key}:` must be a list", f"write each entry as `  - name: ...` under `{key}:`")
    for item, line in zip(items, items.item_lines):
        if not isinstance(item, _Map):
            raise _Problem(line, f"each entry of `{key}:` must be a mapping", "write `- name: ...` with its fields indented below")
    return list(zip(items, items.item_lines))


def _check_keys(mapping: _Map, allowed: Sequence[str], required: Sequence[str], what: str) -> None:
    for key in mapping:
        if key not in allowed:
            raise _Problem(mapping.key_lines[key], f"unknown {what} '{key}'", f"use only {', '.join(allowed)}")
    for key in required:
        if key not in mapping:
            raise _Problem(mapping.line, f"missing {what} '{key}'", f"add `{key}:` (required: {', '.join(required)})")


def _text(mapping: _Map, key: str, allow_empty: bool = False) -> str:
    value, line = mapping[key], mapping.key_lines[key]
    if not isinstance(value, str):
        raise _Problem(line, f"`{key}` must be text", "write a single quoted value")
    if not allow_empty and not value.strip():
        raise _Problem(line, f"`{key}` is empty", "give it a value")
    return value


def _parse_words(name: str, words: object, line: int) -> tuple[str, ...]:
    if not isinstance(words, _Seq) or not words:
        raise _Problem(line, f"domain '{name}' must be a non-empty list of words", "write `name: [word, word, ...]`")
    first_seen: dict[str, int] = {}
    for word, word_line in zip(words, words.item_lines):
        if not isinstance(word, str) or not word.strip():
            raise _Problem(word_line, f"domain '{name}' has an empty or non-text entry", "remove it or write the word")
        if word != word.strip():
            raise _Problem(word_line, f"domain '{name}' word {word!r} has surrounding spaces", "write the bare word; answer_prefix supplies the space")
        # Case-folded so that "Turkey" and "turkey" cannot both become columns.
        key = word.casefold()
        if key in first_seen:
            raise _Problem(word_line, f"domain '{name}' lists '{word}' twice (first on line {first_seen[key]})", "remove the duplicate")
        first_seen[key] = word_line
    return tuple(words)


def _parse_prompt(item: _Map) -> PromptSpec:
    _check_keys(item, PROMPT_KEYS, required=PROMPT_KEYS[:-1], what="prompt field")
    name, template, language = _text(item, "name"), _text(item, "template"), _text(item, "language")
    if len(name.split()) != 1:
        raise _Problem(item.key_lines["name"], f"prompt name '{name}' contains spaces", "use a name like `city` or `es/city`")
    if template.count("{}") != 1:
        raise _Problem(item.key_lines["template"], f"template of '{name}' has {template.count('{}')} '{{}}' placeholders, not 1", "put exactly one {} where the input X goes")
    default_prefix = "" if language in LANGUAGES_WITHOUT_SPACES else " "
    prefix = _text(item, "answer_prefix", allow_empty=True) if "answer_prefix" in item else default_prefix
    return PromptSpec(name, _text(item, "family"), language, template, _text(item, "domain"), prefix)


def _parse_pairs(item: _Map) -> tuple[tuple[str, tuple[str, ...]], ...]:
    pairs = item["pairs"]
    if not isinstance(pairs, _Map) or not pairs:
        raise _Problem(item.key_lines["pairs"], "`pairs` must map each subject to its objects", "write `pairs:` then `  Paris: [France]`")
    parsed = []
    for subject, objects in pairs.items():
        objects = [objects] if isinstance(objects, str) else objects
        if not isinstance(objects, list) or not objects or not all(isinstance(o, str) and o.strip() for o in objects):
            raise _Problem(pairs.key_lines[subject], f"subject '{subject}' needs one or more objects", "write `subject: [object, alias, ...]`")
        parsed.append((subject, tuple(objects)))
    return tuple(parsed)


def _parse_reference(item: _Map) -> Reference:
    _check_keys(item, REFERENCE_KEYS, required=REFERENCE_KEYS, what="reference field")
    return Reference(_text(item, "name"), _text(item, "source_domain"), _text(item, "target_domain"), _parse_pairs(item))


def _parse_task(item: _Map) -> TaskSpec:
    _check_keys(item, TASK_KEYS, required=TASK_KEYS[:3], what="task field")
    name, template, extractive = _text(item, "name"), _text(item, "template"), _text(item, "extractive_template")
    if len(name.split()) != 1:
        raise _Problem(item.key_lines["name"], f"task name '{name}' contains spaces", "use a name like `capitals` or `past-tense`")
    if template.count("{}") != 1:
        raise _Problem(item.key_lines["template"], f"template of task '{name}' has {template.count('{}')} '{{}}' placeholders, not 1", "put exactly one {} where the argument goes")
    if "{x}" not in extractive or "{y}" not in extractive:
        raise _Problem(item.key_lines["extractive_template"], f"extractive_template of task '{name}' lacks {{x}} or {{y}}", "write the argument as {x} and the answer as {y}, e.g. \"The capital of {x} is {y}. Q: ...\"")
    if ("pairs" in item) == ("reference" in item):
        raise _Problem(item.line, f"task '{name}' needs either `pairs:` or `reference:`, not both or neither", "list `pairs:` (argument: [answer, alias, ...]) or name a registry reference")
    count = _text(item, "demonstrations") if "demonstrations" in item else "3"
    # ASCII digits only: str.isdigit() also accepts '²' and other digits int() refuses.
    if not re.fullmatch(r"[0-9]+", count):
        raise _Problem(item.key_lines["demonstrations"], f"`demonstrations` of task '{name}' is {count!r}", "write a whole number such as 3")
    prefix = _text(item, "answer_prefix", allow_empty=True) if "answer_prefix" in item else " "
    pairs, reference = (_parse_pairs(item), "") if "pairs" in item else ((), _text(item, "reference"))
    return TaskSpec(name, template, extractive, pairs, int(count), prefix, reference)


def merge(files: Sequence[tuple[FileContents, int]]) -> Registry:
    """Merge files in order: bundled (layer 0) names must be unique, user layers replace by name."""
    merged: dict[str, dict[str, Entry]] = {"domain": {}, "prompt": {}, "reference": {}, "task": {}}
    for contents, layer in files:
        kinds = (("domain", contents.domains), ("prompt", contents.prompts), ("reference", contents.references), ("task", contents.tasks))
        for kind, incoming in kinds:
            for name, entry in incoming.items():
                if layer == 0 and name in merged[kind]:
                    first = merged[kind][name].where
                    raise entry.where.error(f"{kind} '{name}' is already defined at {first.path.name}:{first.line}", "bundled names must be unique")
                merged[kind][name] = dataclasses.replace(entry, layer=layer)
    domains = merged["domain"]
    for entry in merged["prompt"].values():
        if entry.value.domain not in domains:
            raise entry.where.error(f"prompt '{entry.value.name}' names unknown domain '{entry.value.domain}'", f"define it under `domains:` ({suggest(entry.value.domain, list(domains))})")
    references = [relation for entry in merged["reference"].values() if (relation := _checked_reference(entry, domains)).pairs]
    return Registry(
        prompts=tuple(entry.value for entry in merged["prompt"].values()),
        domains=types.MappingProxyType({name: entry.value for name, entry in domains.items()}),
        references=tuple(references),
        files=tuple(str(contents.path) for contents, _ in files),
        tasks=tuple(_resolved_task(entry, references) for entry in merged["task"].values()),
    )


def _resolved_task(entry: Entry, references: Sequence[Reference]) -> TaskSpec:
    """A task with its pairs: its own, or those of the reference it names (as merged, so a user's override counts)."""
    task: TaskSpec = entry.value
    if not task.reference:
        return task
    for relation in references:
        if relation.name == task.reference:
            return dataclasses.replace(task, pairs=relation.pairs)
    where = Where(entry.where.path, entry.lines["reference"])
    raise where.error(f"task '{task.name}' names unknown reference '{task.reference}'", f"name one of the references ({suggest(task.reference, [r.name for r in references])}) or list `pairs:`")


def _checked_reference(entry: Entry, domains: Mapping[str, Entry]) -> Reference:
    """Every pair must lie in its domains, unless a later file replaced a domain: then misfits are left out."""
    relation: Reference = entry.value
    for domain in (relation.source_domain, relation.target_domain):
        if domain not in domains:
            raise entry.where.error(f"reference '{relation.name}' names unknown domain '{domain}'", f"define it under `domains:` ({suggest(domain, list(domains))})")
    source, target = domains[relation.source_domain], domains[relation.target_domain]
    if max(source.layer, target.layer) > entry.layer:
        kept = []
        for subject, objects in relation.pairs:
            objects = tuple(o for o in objects if o in target.value)
            if subject in source.value and objects:
                kept.append((subject, objects))
        return dataclasses.replace(relation, pairs=tuple(kept))
    for subject, objects in relation.pairs:
        where = Where(entry.where.path, entry.lines.get(subject, entry.where.line))
        if subject not in source.value:
            raise where.error(f"reference '{relation.name}' subject '{subject}' is not in domain '{relation.source_domain}'", "add it to the domain or drop the pair")
        for obj in objects:
            if obj not in target.value:
                raise where.error(f"reference '{relation.name}' object '{obj}' of '{subject}' is not in domain '{relation.target_domain}'", "add it to the domain or drop it")
    return relation
