"""JSON-ready tables about the registry, behind `lincorr templates`, `domains`, `references` and `tasks`."""

from __future__ import annotations

import dataclasses

from lincorr.domains import Domain, build_domain
from lincorr.knowledge.registry import PromptSpec, Registry


def _selected(registry: Registry, family: str | None) -> tuple[PromptSpec, ...]:
    return registry.prompts if family is None else registry.family(family)


def templates_table(registry: Registry, family: str | None = None) -> list[dict]:
    """One row per prompt: name, family, language, template, answer prefix, domain and its size."""
    return [
        {
            "name": spec.name,
            "family": spec.family,
            "language": spec.language,
            "template": spec.template,
            "answer_prefix": spec.answer_prefix,
            "domain": spec.domain,
            "domain_size": len(registry.domain_words(spec.domain)),
        }
        for spec in _selected(registry, family)
    ]


def domains_report(registry: Registry, tokenizer, family: str | None = None) -> list[dict]:
    """One row per prompt: how many domain words survive the full-token filter, what was dropped and why."""
    built: dict[tuple[str, str], Domain] = {}
    rows = []
    for spec in _selected(registry, family):
        words = registry.domain_words(spec.domain)
        key = (spec.domain, spec.answer_prefix)
        if key not in built:
            built[key] = build_domain(words, tokenizer, name=spec.domain, answer_prefix=spec.answer_prefix, allow_empty=True)
        domain = built[key]
        rows.append(
            {
                "name": spec.name,
                "family": spec.family,
                "language": spec.language,
                "domain": spec.domain,
                "domain_size": len(words),
                "kept": len(domain),
                "dropped_count": len(domain.dropped),
                "kept_fraction": round(len(domain) / len(words), 3),
                "category_counts": domain.category_counts(),
                "dropped": [dataclasses.asdict(d) for d in domain.dropped],
            }
        )
    return rows


def references_table(registry: Registry, family: str | None = None) -> list[dict]:
    """One row per reference relation: its domains, the prompts that use them, and its pair count.

    With `family`, only the relations between domains that prompts of that family answer in.
    """
    prompts_of: dict[str, list[str]] = {}
    for spec in _selected(registry, family):
        prompts_of.setdefault(spec.domain, []).append(spec.name)
    return [
        {
            "name": relation.name,
            "source_domain": relation.source_domain,
            "source_prompts": prompts_of.get(relation.source_domain, []),
            "target_domain": relation.target_domain,
            "target_prompts": prompts_of.get(relation.target_domain, []),
            "n_pairs": len(relation.pairs),
        }
        for relation in registry.references
        if family is None or (relation.source_domain in prompts_of and relation.target_domain in prompts_of)
    ]


def tasks_table(registry: Registry) -> list[dict]:
    """One row per relational task of the vector-arithmetic studies: its pairs, template and where its pairs came from."""
    return [
        {
            "name": task.name,
            "n_pairs": len(task.pairs),
            "template": task.template,
            "extractive_template": task.extractive_template,
            "reference": task.reference,
            "example": f"{task.pairs[0][0]} -> {task.pairs[0][1][0]}" if task.pairs else "",
        }
        for task in registry.tasks
    ]
