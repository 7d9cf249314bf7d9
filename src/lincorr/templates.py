"""Prompt templates: text with one "{}" where the input X goes."""

from __future__ import annotations

from lincorr.errors import InputError


def validate_template(template: str) -> str:
    """A template must hold exactly one "{}" where the input X goes."""
    if template.count("{}") != 1:
        raise InputError(f"template {template!r} must contain exactly one '{{}}' where the input goes, e.g. '{{}} lives in the city of'")
    return template


def fill(template: str, x: str) -> str:
    """The prompt for input `x` (plain replacement: X may itself contain braces)."""
    return template.replace("{}", x)
