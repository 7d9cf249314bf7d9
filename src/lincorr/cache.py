"""The cache directory: where it is, whether it can be used, and what it holds (`lincorr cache`).

Sections: `models/` (GGUF files converted to safetensors, with `hashes.json`, the remembered
sha256 of GGUF files), `logits/` (logit tables and collection checkpoints) and `results/`
(finished rows of the training studies' tables). Everything in it can be recomputed.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path

from lincorr.errors import LincorrError
from lincorr.filesystem import check_writable, ready_directory

SECTIONS = {"models": ("models", "hashes.json"), "tables": ("logits",), "results": ("results",)}

_checked: set[Path] = set()


def cache_root() -> Path:
    """Where converted weights and logit tables live (override with LINCORR_CACHE_DIR)."""
    return Path(os.environ.get("LINCORR_CACHE_DIR", Path.home() / ".cache" / "lincorr"))


def check_cache() -> Path:
    """The cache root, once it is known to be usable: a file there, no permission or a full disk is one clear error, before any work."""
    root = cache_root()
    if root not in _checked:
        where = f"cache directory {root} (set LINCORR_CACHE_DIR to move it)"
        if root.exists() and not root.is_dir():
            raise LincorrError(f"{where} is a file; point LINCORR_CACHE_DIR at a directory")
        check_writable(root, where)
        _checked.add(root)
    return root


def cache_directory(*parts: str) -> Path:
    """A directory inside the checked cache root, created if missing and cleared of stale temporaries."""
    return ready_directory(check_cache().joinpath(*parts))


@dataclasses.dataclass(frozen=True)
class SectionUsage:
    section: str
    path: Path
    entries: int
    bytes: int


def tree_size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(item.stat().st_size for item in path.rglob("*") if item.is_file() and not item.is_symlink())


def cache_usage() -> list[SectionUsage]:
    """Each section's top-level entries and size on disk."""
    root = cache_root()
    usage = []
    for section, names in SECTIONS.items():
        paths = [root / name for name in names if (root / name).exists()]
        directory = root / names[0]
        entries = len(list(directory.iterdir())) if directory.is_dir() else 0
        usage.append(SectionUsage(section, directory, entries, sum(tree_size(p) for p in paths)))
    return usage


def clear_cache(sections) -> list[Path]:
    """Remove the named sections of the cache; the paths removed."""
    root = cache_root()
    removed = []
    for section in sections:
        for name in SECTIONS[section]:
            path = root / name
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            elif path.exists() or path.is_symlink():
                path.unlink()
            else:
                continue
            removed.append(path)
    return removed
