"""Blocks of a documentation page that a script generates, each between an HTML comment that starts it and one that
ends it: read one back (the tests compare it with what the script makes now) or rewrite it in place."""

from __future__ import annotations

from pathlib import Path


def read_block(page: Path, start: str, end: str) -> str:
    """The text between the markers `start` and `end` of `page`, stripped."""
    text = page.read_text(encoding="utf-8")
    return text[text.index(start) + len(start):text.index(end)].strip()


def write_block(page: Path, start: str, end: str, block: str) -> None:
    """`page` with the text between its markers `start` and `end` replaced by `block`."""
    head, rest = page.read_text(encoding="utf-8").split(start, 1)
    page.write_text(f"{head}{start}\n{block}\n{end}{rest.split(end, 1)[1]}", encoding="utf-8")
