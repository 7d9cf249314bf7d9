"""The knowledge registry: prompt templates, answer domains, reference pairs and relational tasks, as data files."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from lincorr import recording
from lincorr.knowledge.files import merge, read_registry_file
from lincorr.knowledge.registry import FAMILIES, PromptSpec, Reference, Registry, TaskSpec

__all__ = ["DATA_DIR", "FAMILIES", "PromptSpec", "Reference", "Registry", "TaskSpec", "load_registry"]

DATA_DIR = Path(__file__).parent / "data"


def load_registry(extra_files: Sequence[str | Path] = ()) -> Registry:
    """The bundled registry with user files of the same schema on top (a same-named entry replaces)."""
    extra = [(read_registry_file(Path(path)), layer) for layer, path in enumerate(extra_files, start=1)]
    return merge([*bundled_files(), *extra])


@recording.cache
def bundled_files() -> tuple:
    """The bundled registry files, parsed once per process: they ship with the package and never change under it."""
    return tuple((read_registry_file(path), 0) for path in sorted(DATA_DIR.glob("*.yaml")))
