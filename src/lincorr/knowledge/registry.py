"""The registry's public types: prompts, reference relations and the merged registry."""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping, Sequence

from lincorr.errors import LincorrError
from lincorr.templates import fill

FAMILIES = ("attribute", "cross-language", "simile", "math")


@dataclasses.dataclass(frozen=True)
class PromptSpec:
    """A knowledge prompt: a template with one "{}" for the input X, and the domain of its answers."""

    name: str
    family: str
    language: str
    template: str
    domain: str
    answer_prefix: str = " "

    def fill(self, x: str) -> str:
        """The prompt for input `x`."""
        return fill(self.template, x)


@dataclasses.dataclass(frozen=True)
class Reference:
    """A real-world relation between two domains: each subject with its acceptable objects."""

    name: str
    source_domain: str
    target_domain: str
    pairs: tuple[tuple[str, tuple[str, ...]], ...]

    def objects(self, subject: str) -> tuple[str, ...]:
        """The acceptable objects of `subject`; empty when the relation says nothing about it."""
        for known, objects in self.pairs:
            if known == subject:
                return objects
        return ()


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """A relational task in the few-shot Q/A form of Merullo et al.: arguments with their right answers.

    `template` holds one "{}" for the argument; a demonstration is the filled template, then
    `answer_prefix`, the answer and a newline. `extractive_template` holds "{x}" (argument) and
    "{y}" (answer): the same question with the answer stated in the context. `pairs` lists each
    argument with its acceptable answers, the first being the one demonstrations show;
    `reference` names the registry reference they came from ("" when written inline).
    """

    name: str
    template: str
    extractive_template: str
    pairs: tuple[tuple[str, tuple[str, ...]], ...]
    demonstrations: int = 3
    answer_prefix: str = " "
    reference: str = ""

    def query(self, argument: str) -> str:
        """The question about `argument`, ending where the answer starts."""
        return fill(self.template, argument)

    def demonstration(self, argument: str, answer: str) -> str:
        """One solved example: the question, the answer and a newline."""
        return f"{self.query(argument)}{self.answer_prefix}{answer}\n"

    def extractive_query(self, argument: str, answer: str) -> str:
        """The question with `answer` stated in the context."""
        return self.extractive_template.replace("{x}", argument).replace("{y}", answer)


@dataclasses.dataclass(frozen=True)
class Registry:
    """All prompts, domains and references, after bundled data and user files are merged."""

    prompts: tuple[PromptSpec, ...]
    domains: Mapping[str, tuple[str, ...]]
    references: tuple[Reference, ...]
    files: tuple[str, ...]
    tasks: tuple[TaskSpec, ...] = ()

    def prompt(self, name: str) -> PromptSpec:
        """The prompt called `name`."""
        for spec in self.prompts:
            if spec.name == name:
                return spec
        raise LincorrError(f"unknown prompt '{name}'; {suggest(name, [p.name for p in self.prompts])}")

    def domain_words(self, domain: str) -> tuple[str, ...]:
        """The answer words of `domain`, in registry order."""
        if domain not in self.domains:
            raise LincorrError(f"unknown domain '{domain}'; {suggest(domain, list(self.domains))}")
        return self.domains[domain]

    def family(self, family: str) -> tuple[PromptSpec, ...]:
        """The prompts of one family, in registry order."""
        members = tuple(spec for spec in self.prompts if spec.family == family)
        if not members:
            raise LincorrError(f"unknown family '{family}'; {suggest(family, self.families())}")
        return members

    def families(self) -> list[str]:
        """Family names in order of first appearance."""
        return list(dict.fromkeys(spec.family for spec in self.prompts))

    def reference(self, name: str) -> Reference:
        """The reference relation called `name`, e.g. "city->country"."""
        for relation in self.references:
            if relation.name == name:
                return relation
        raise LincorrError(f"unknown reference '{name}'; {suggest(name, [r.name for r in self.references])}")

    def find_reference(self, source_domain: str, target_domain: str) -> Reference | None:
        """The relation named "source->target", else the only one between these domains, else None."""
        named = f"{source_domain}->{target_domain}"
        matches = [r for r in self.references if (r.source_domain, r.target_domain) == (source_domain, target_domain)]
        for relation in matches:
            if relation.name == named:
                return relation
        return matches[0] if len(matches) == 1 else None

    def reference_for(self, source: PromptSpec, target: PromptSpec) -> Reference | None:
        """The relation for a prompt pair: one named after the prompts ("math/x+1->math/x+2"), else by domains."""
        for relation in self.references:
            if relation.name == f"{source.name}->{target.name}":
                return relation
        return self.find_reference(source.domain, target.domain)

    def task(self, name: str) -> TaskSpec:
        """The relational task called `name`, e.g. "capitals"."""
        for spec in self.tasks:
            if spec.name == name:
                return spec
        raise LincorrError(f"unknown task '{name}'; {suggest(name, [t.name for t in self.tasks])}")


def suggest(name: str, known: Sequence[str]) -> str:
    """A hint for a mistyped name: the close matches, or else the first known names."""
    close = difflib.get_close_matches(name, known, n=5, cutoff=0.5)
    if close:
        return "did you mean " + ", ".join(close) + "?"
    return "known: " + ", ".join(list(known)[:12]) + (" …" if len(known) > 12 else "")
