"""The cache: where it is, its one key scheme, and its stores (models, logit tables, study rows, fine-tuned checkpoints).

Sections: `models/` (GGUF files converted to safetensors, with `hashes.json`, the remembered
sha256 of GGUF files), `logits/` (logit tables and the finished pieces of unfinished ones),
`results/` (finished rows of the training studies' tables) and `checkpoints/` (models fine-tuned
on facts, the parameters training changed, as safetensors; written and read by `checkpoints.py`). Every entry is named by
`key_digest` of its key, a dict that holds everything its content depends on in data; tables, their pieces, rows and
checkpoints are stored with the record of the code that computed them (`recording`), served only while none of that code
has changed, and replayed into the record of whatever reuses them. Every write goes through `filesystem` (whole or not at
all); everything in the cache can be recomputed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import stat
import time
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from lincorr.errors import CacheError, FreeMemoryError, LincorrError, printable
from lincorr.filesystem import atomic_file, check_writable, link_trouble, read_json, ready_directory, write_json_atomic
from lincorr.filesystem import read_record_json
from lincorr import recording

MODELS, HASHES, TABLES, RESULTS, CHECKPOINTS = "models", "hashes.json", "logits", "results", "checkpoints"
SECTIONS = {"models": (MODELS, HASHES), "tables": (TABLES,), "results": (RESULTS,), "checkpoints": (CHECKPOINTS,)}
CONVERSION_RECORD = "lincorr.json"  # in a converted model's directory: its source fingerprint and every file's size and checksum
# In the root of a cache that lincorr made (or found empty): only such a cache has sections `cache clear` may remove.
CACHE_MARKER = ".lincorr-cache"
DEFAULT_ROOT = Path("~") / ".cache" / "lincorr"

_checked: set[Path] = set()


def cache_root() -> Path:
    """Where converted weights and logit tables live: LINCORR_CACHE_DIR, an absolute path, or ~/.cache/lincorr.

    A set but empty or relative LINCORR_CACHE_DIR is refused: either would make the cache the working directory (or
    move it with the working directory), where clearing it would remove the user's own files. So is a `~` that stands
    for a HOME set empty or relative (`check_home`), which would put the cache under `/` or the working directory.
    A path through a symbolic link that loops or points nowhere (an unmounted share) is refused too: creating the cache
    there would fail half-way.
    """
    configured = os.environ.get("LINCORR_CACHE_DIR")
    if configured is None:
        check_home("the cache cannot go under ~/.cache/lincorr")
        root = DEFAULT_ROOT.expanduser()
    elif not configured.strip():
        raise CacheError("LINCORR_CACHE_DIR is set but empty; unset it (the cache is then ~/.cache/lincorr) or set it to an absolute path")
    else:
        if configured == "~" or configured.startswith("~/"):
            check_home(f"LINCORR_CACHE_DIR '{printable(configured)}' has no home directory to start from")
        root = Path(configured).expanduser()
    if not root.is_absolute():
        raise CacheError(f"LINCORR_CACHE_DIR must be an absolute path, not '{configured}', which would move with the working directory")
    trouble = link_trouble(root)
    if trouble:
        raise CacheError(f"cache directory {root}: {trouble}; mount or fix it, or point LINCORR_CACHE_DIR at another directory")
    return root


def check_home(why: str) -> None:
    """A CacheError saying `why` where `~` stands for no usable directory: HOME set but empty (`~` would be `/`) or
    relative (it would move with the working directory), or HOME unset where the system knows no home for this user."""
    home = os.environ.get("HOME")
    if home is not None and not home.strip():
        problem = "HOME is empty"
    elif home is not None and not os.path.isabs(home):
        problem = f"HOME is the relative path '{printable(home)}'"
    else:
        try:
            Path("~").expanduser()
            return
        except RuntimeError:  # HOME unset and no entry for this user in the password database
            problem = "HOME is unset and this user has no home directory"
    raise CacheError(f"{problem}, so {why}; set HOME to an absolute path or LINCORR_CACHE_DIR to one")


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
    """The bytes of `path`, a file, or of the regular files under it, links neither counted nor followed. An explicit stack
    walks a tree of any depth: pathlib's rglob recursed into a RecursionError at 1,200 nested directories."""
    if path.is_file():
        return path.stat().st_size
    total, stack = 0, [os.fspath(path)]
    while stack:
        try:
            with os.scandir(stack.pop()) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                    elif entry.is_file(follow_symlinks=False):
                        total += entry.stat(follow_symlinks=False).st_size
        except (FileNotFoundError, PermissionError):  # gone meanwhile, or unreadable: not counted, as rglob skipped it
            continue
    return total


def remove_tree(path: Path) -> None:
    """Remove the directory `path` and all under it, a link removed and never followed. An explicit stack walks a tree of
    any depth: shutil.rmtree recursed into a RecursionError at 1,200 nested directories, leaving the tree half removed."""
    found, stack = [], [os.fspath(path)]  # every directory after the one holding it
    while stack:
        found.append(stack.pop())
        with os.scandir(found[-1]) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                else:
                    os.unlink(entry.path)
    for directory in reversed(found):
        os.rmdir(directory)


def cache_usage() -> list[SectionUsage]:
    """Each section's top-level entries and size on disk."""
    root = cache_root()
    usage = []
    for section, names in SECTIONS.items():
        # A section that is a link is not followed: what it points to is not the cache's (`clear_cache` removes the link).
        paths = [root / name for name in names if (root / name).exists() and not (root / name).is_symlink()]
        directory = root / names[0]
        entries = len(list(directory.iterdir())) if directory in paths and directory.is_dir() else 0
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
                remove_tree(path)
            elif path.exists() or path.is_symlink():
                path.unlink()
            else:
                continue
            removed.append(path)
    return removed


# ---- the one key scheme ----

def canonical_json(key: Mapping) -> str:
    """A key as one canonical string: sorted keys, anything not JSON as its text."""
    return json.dumps(key, sort_keys=True, default=str)


def key_digest(key: Mapping) -> str:
    """The name of a key's entry: the sha256 of its canonical JSON (32 hex digits)."""
    return hashlib.sha256(canonical_json(key).encode()).hexdigest()[:32]


# ---- logit tables ----

def array_sha256(values: np.ndarray) -> str:
    """Checksum of an array's bytes."""
    return hashlib.sha256(np.ascontiguousarray(values).tobytes()).hexdigest()


def save_arrays_atomic(path: Path, **arrays: np.ndarray) -> None:
    """Write an `.npz` whole or not at all."""
    with atomic_file(path, "wb") as out:
        np.savez(out, **arrays)  # type: ignore[arg-type]  # numpy's stub takes **arrays for its allow_pickle flag


def load_arrays(path: Path) -> dict[str, np.ndarray] | None:
    """Arrays of an `.npz` (never unpickling), or None when missing or unreadable."""
    try:
        with np.load(path, allow_pickle=False) as data:
            return {name: data[name] for name in data.files}
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
        return None


class TableStore:
    """Finished tables and the finished pieces of unfinished ones under `<root>/logits/`, named by `key_digest` of their key."""

    def __init__(self, root: Path | None = None):
        self.directory = Path(root) / TABLES if root else cache_directory(TABLES)

    @property
    def root(self) -> Path:
        """The directory to pass to `TableStore(root)` for this same cache (another rank's, say)."""
        return self.directory.parent

    def paths(self, key: dict) -> tuple[Path, Path]:
        base = self.directory / key_digest(key)
        return base.with_suffix(".json"), base.with_suffix(".npz")

    def load(self, key: dict) -> np.ndarray | None:
        """A finished table whose header, checksum and code all match; anything else is ignored (and so recomputed)."""
        header_path, values_path = self.paths(key)
        header = read_json(header_path)
        arrays = load_arrays(values_path)
        if not header or arrays is None or header.get("key") != key or "values" not in arrays:
            return None
        if header.get("sha256") != array_sha256(arrays["values"]) or not recording.reused(header.get("code")):
            return None
        return arrays["values"]

    def store(self, key: dict, values: np.ndarray, record: Mapping[str, str]) -> None:
        """The finished table, computed by the code of `record` (its pieces are removed: the table holds them)."""
        header_path, values_path = self.paths(key)
        save_arrays_atomic(values_path, values=values)
        write_json_atomic(header_path, {"key": key, "sha256": array_sha256(values), "shape": list(values.shape), "code": dict(record)})
        for piece in self.directory.glob(f"{key_digest(key)}.piece*.npz"):
            piece.unlink(missing_ok=True)

    def piece_path(self, key: dict, index: int) -> Path:
        return self.directory / f"{key_digest(key)}.piece{index}.npz"

    def load_piece(self, key: dict, index: int, rows: np.ndarray) -> np.ndarray | None:
        """Scores of a finished piece `[len(rows), n_domain]`, if one was stored for exactly these rows of this table by
        code that has not changed since."""
        arrays = load_arrays(self.piece_path(key, index))
        if arrays is None or not {"values", "rows", "key", "code"} <= arrays.keys():
            return None
        if str(arrays["key"]) != canonical_json(key) or not np.array_equal(arrays["rows"], rows):
            return None
        try:
            record = json.loads(str(arrays["code"]))
        except ValueError:
            return None
        return arrays["values"] if recording.reused(record) else None

    def store_piece(self, key: dict, index: int, rows: np.ndarray, values: np.ndarray, record: Mapping[str, str]) -> None:
        save_arrays_atomic(self.piece_path(key, index), values=values, rows=rows, key=np.array(canonical_json(key)),
                           code=np.array(canonical_json(record)))


# ---- study rows ----

def stored_result(section: str, key: Mapping, compute: Callable[[], dict], *, use_cache: bool = True) -> dict:
    """The stored JSON result for `key`, or `compute()` stored under it: finished rows of a long table survive an interruption.

    `key` must name everything the result depends on in data (model fingerprint, prompts, settings); the code is checked
    by the record stored beside the result (`recorded_result`). Studies are seeded and deterministic, so a stored row is
    what a rerun would compute. Without `use_cache` nothing is read or stored.
    """
    return recorded_result(section, key, compute, use_cache=use_cache)[0]


def recorded_result(section: str, key: Mapping, compute: Callable[[], dict], *, leaving_out: tuple[str, ...] = (),
                    use_cache: bool = True) -> tuple[dict, dict[str, str]]:
    """`stored_result` with the record of the code behind the result: the stored one while none of it has changed, else
    `compute()`'s, recorded as it runs. `leaving_out` names modules whose part of a result is computed again whenever it
    is read (the reproduction's tests): their units are left out of the record."""
    key = json.loads(canonical_json(key))  # as JSON reads it back (tuples become lists), to compare with the stored key
    path = cache_directory(RESULTS, section) / f"{key_digest(key)}.json" if use_cache else None
    stored = read_json(path) if path is not None else None
    if stored is not None and stored.get("key") == key and isinstance(stored.get("result"), dict) and recording.reused(stored.get("code")):
        return stored["result"], stored["code"]
    with recording.window() as ran:
        result = compute()
    record = {unit: digest for unit, digest in ran.record.items() if unit.partition(":")[0] not in leaving_out}
    if path is not None and ran.complete:
        write_json_atomic(path, {"key": key, "code": record, "result": result})
    return result, record


def stored_row(section: str, key: Mapping, label: str, compute: Callable[[], dict], *, use_cache: bool = True) -> dict:
    """`stored_result` for one relation of a table; a LincorrError becomes a row {"relation": label, "skipped": reason},
    except a FreeMemoryError: the memory free at one moment says nothing of the relation, so it stops the table unstored."""

    def guarded() -> dict:
        try:
            return compute()
        except FreeMemoryError:
            raise
        except LincorrError as error:
            return {"relation": label, "skipped": str(error)}

    return stored_result(section, key, guarded, use_cache=use_cache)


# ---- converted models ----

def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


RACY_NS = 2_000_000_000  # the coarsest file-system clock in use (FAT's two seconds)


def identity(path: Path) -> dict:
    """What identifies a regular file's contents without reading them: real path, device, inode, size, mtime and ctime."""
    info = os.stat(path)
    if not stat.S_ISREG(info.st_mode):
        raise CacheError(f"{path} is not a regular file (a FIFO, device or directory); only a file's contents can be hashed")
    return {"path": str(Path(path).resolve()), "device": info.st_dev, "inode": info.st_ino, "size": info.st_size,
            "mtime_ns": info.st_mtime_ns, "ctime_ns": info.st_ctime_ns}


def file_sha256(path: Path) -> str:
    """sha256 of a regular file, remembered in `hashes.json` so a second load skips the hashing.

    Remembered per `identity` (real path, device, inode, size, mtime, ctime): rewriting a file in place and setting its
    time back (`touch -d`) still moves its ctime, which no user call can set, so new contents never get the old digest.
    Not remembered are a file that changed while it was hashed, and one changed within RACY_NS of the hashing: the
    file system's clock ticks coarsely, and a second write in the same tick would leave every field as it was.
    """
    before = identity(path)
    memo_path = cache_directory() / HASHES
    key = key_digest(before)
    memo = read_record_json(memo_path) or {}
    if isinstance(memo.get(key), str):
        return memo[key]
    digest = sha256_of(path)
    if identity(path) == before and time.time_ns() - max(before["mtime_ns"], before["ctime_ns"]) > RACY_NS:
        memo[key] = digest
        write_json_atomic(memo_path, memo)
    return digest


def converted_model_directory(name: str, fingerprint: str) -> Path:
    """Where the conversion of a GGUF file with `fingerprint` lives.

    Its key is the file's fingerprint alone, without a code digest: a conversion is transformers'
    work on the file, and redoing it (a minute) after every change to lincorr would buy nothing.
    """
    return cache_directory(MODELS) / f"{name}-{key_digest({'fingerprint': fingerprint})[:16]}"


def conversion_location(name: str, fingerprint: str) -> Path:
    """Where `converted_model_directory` keeps the conversion, found without creating or claiming anything: for a listing,
    which writes nothing into whatever directory LINCORR_CACHE_DIR names and lists a read-only cache."""
    return cache_root() / MODELS / f"{name}-{key_digest({'fingerprint': fingerprint})[:16]}"


def file_record(path: Path) -> dict:
    info = path.stat()
    return {"size": info.st_size, "mtime_ns": info.st_mtime_ns, "sha256": sha256_of(path)}


def record_conversion(directory: Path, fingerprint: str, source: Path) -> None:
    """The record of a conversion, written last: its source fingerprint and every file's size, time and checksum."""
    files = {item.name: file_record(item) for item in sorted(directory.iterdir()) if item.is_file()}
    write_json_atomic(directory / CONVERSION_RECORD, {"fingerprint": fingerprint, "source": str(source), "files": files})


def conversion_state(directory: Path, fingerprint: str) -> str:
    """"intact", "missing" (never converted, or from another file) or "damaged" (a file differs from what was written,
    or the record is not one lincorr writes: either way the model is converted again)."""
    record = read_record_json(directory / CONVERSION_RECORD) or {}
    if record.get("fingerprint") != fingerprint:
        return "missing"
    return "intact" if conversion_intact(directory, record) else "damaged"


def recorded_file(directory: Path, name: object, entry: object) -> os.stat_result | None:
    """The status of a file a conversion record names, when the record's entry is one lincorr writes and names a regular
    file directly inside `directory`; else None.

    A record is data from whoever wrote the cache: a name with a path in it ("/dev/zero", "../../elsewhere") would have
    files outside the conversion hashed, and a link, FIFO or device could be read forever.
    """
    if not (isinstance(name, str) and name not in ("", ".", "..") and Path(name).name == name and isinstance(entry, dict)):
        return None
    if not (isinstance(entry.get("size"), int) and isinstance(entry.get("mtime_ns"), int) and isinstance(entry.get("sha256"), str)):
        return None
    try:
        found = os.lstat(directory / name)
    except OSError:
        return None
    return found if stat.S_ISREG(found.st_mode) else None


def conversion_intact(directory: Path, record: dict) -> bool:
    """Whether every converted file is as it was written.

    The size is compared on every load (one stat per file): truncation, the damage an interrupted
    copy or a full disk leaves, always changes it. The sha256 (seconds for a gigabyte, as long as
    the load itself) is recomputed only when the modification time differs from the record, i.e.
    when something wrote the file after the conversion; a match then updates the record so the
    next load is cheap again. Bit rot that keeps size and time is not caught.
    """
    files = record.get("files")
    if not files or not isinstance(files, dict):
        return False
    touched = False
    for name, entry in files.items():
        found = recorded_file(directory, name, entry)
        if found is None or found.st_size != entry["size"]:
            return False
        if found.st_mtime_ns != entry["mtime_ns"]:
            if sha256_of(directory / name) != entry["sha256"]:
                return False
            entry["mtime_ns"], touched = found.st_mtime_ns, True
    if touched:
        write_json_atomic(directory / CONVERSION_RECORD, record)
    return True
