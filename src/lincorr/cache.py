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

from lincorr.errors import CacheError
from lincorr.filesystem import check_writable, ready_directory

SECTIONS = {"models": ("models", "hashes.json"), "tables": ("logits",), "results": ("results",)}
# In the root of a cache that lincorr made (or found empty): only such a cache has sections `cache clear` may remove.
CACHE_MARKER = ".lincorr-cache"
DEFAULT_ROOT = Path("~") / ".cache" / "lincorr"

_checked: set[Path] = set()


def cache_root() -> Path:
    """Where converted weights and logit tables live: LINCORR_CACHE_DIR, an absolute path, or ~/.cache/lincorr.

    A set but empty or relative LINCORR_CACHE_DIR is refused: either would make the cache the working directory (or
    move it with the working directory), where clearing it would remove the user's own files.
    """
    configured = os.environ.get("LINCORR_CACHE_DIR")
    if configured is None:
        return DEFAULT_ROOT.expanduser()
    if not configured.strip():
        raise CacheError("LINCORR_CACHE_DIR is set but empty; unset it (the cache is then ~/.cache/lincorr) or set it to an absolute path")
    root = Path(configured).expanduser()
    if not root.is_absolute():
        raise CacheError(f"LINCORR_CACHE_DIR must be an absolute path, not '{configured}', which would move with the working directory")
    return root


def check_cache() -> Path:
    """The cache root, once it is known to be usable: a file there, no permission or a full disk is one clear error, before any work."""
    root = cache_root()
    if root not in _checked:
        where = f"cache directory {root} (set LINCORR_CACHE_DIR to move it)"
        if root.exists() and not root.is_dir():
            raise CacheError(f"{where} is a file; point LINCORR_CACHE_DIR at a directory")
        check_writable(root, where)
        claim(root)
        _checked.add(root)
    return root


def claim(root: Path) -> None:
    """Mark `root` as lincorr's when lincorr creates it, finds it empty, or it is the default location."""
    owned = not root.exists() or not any(root.iterdir()) or root == DEFAULT_ROOT.expanduser()
    if owned and not (root / CACHE_MARKER).exists():
        ready_directory(root)
        (root / CACHE_MARKER).write_text("lincorr's cache: `lincorr cache clear` removes its sections\n", encoding="utf-8")


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
    """Remove the named sections of the cache; the paths removed.

    Only from a directory lincorr marked as its cache: a directory someone pointed LINCORR_CACHE_DIR at, holding files
    of their own, is never emptied because some of its entries are called `models` or `results`.
    """
    root = cache_root()
    if root.is_dir() and not (root / CACHE_MARKER).is_file():
        raise CacheError(f"{root} was not made by lincorr (it has no {CACHE_MARKER} marker), so `cache clear` leaves it alone; "
                           "remove what you no longer need there by hand")
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
