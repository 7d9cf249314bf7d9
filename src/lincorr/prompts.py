"""A prompt bound to one model: its template and its answer domain as that tokenizer sees it."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from lincorr.domains import Domain, build_domain
from lincorr.errors import LincorrError
from lincorr.templates import validate_template


@dataclasses.dataclass(frozen=True)
class Prompt:
    """A template with one "{}" and its tokenized answer domain."""

    name: str
    template: str
    domain: Domain
    answer_prefix: str = " "  # what joins the prompt and its answer ("Paris" follows "... city of" after a space)


def custom_prompt(
    template: str, words: Sequence[str], tokenizer, *, name: str | None = None, answer_prefix: str = " ", keep_subwords: bool = False
) -> Prompt:
    """A prompt from a template and a list of answer words."""
    validate_template(template)
    label = name or template
    domain = build_domain(words, tokenizer, name=label, answer_prefix=answer_prefix, keep_subwords=keep_subwords)
    return Prompt(label, template, domain, answer_prefix)


def registry_prompt(registry, name: str, tokenizer, *, keep_subwords: bool = False) -> Prompt:
    """A registry prompt by name (e.g. "city"), its domain tokenized for `tokenizer`."""
    spec = registry.prompt(name)
    domain = build_domain(
        registry.domain_words(spec.domain), tokenizer, name=spec.domain, answer_prefix=spec.answer_prefix, keep_subwords=keep_subwords
    )
    return Prompt(spec.name, spec.template, domain, spec.answer_prefix)


def registry_prompts(registry, names: Sequence[str], tokenizer) -> tuple[dict[str, Prompt], tuple[tuple[str, str], ...]]:
    """Registry prompts for `tokenizer`, and (name, reason) for those whose domain has no usable word."""
    prompts: dict[str, Prompt] = {}
    skipped: list[tuple[str, str]] = []
    for name in names:
        registry.prompt(name)  # an unknown name is the user's mistake: let it raise
        try:
            prompts[name] = registry_prompt(registry, name, tokenizer)
        except LincorrError as error:
            skipped.append((name, str(error)))
    return prompts, tuple(skipped)
