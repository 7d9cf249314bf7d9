"""Where lincorr may write, and writing there so that nothing is ever half-written or left behind.

Every file and directory lincorr makes (cache entries, converted models, output directories)
is first written under a temporary name next to its target and renamed into place only when
complete; on failure the temporary is removed. A temporary's name carries the process id and
host that own it, so one left behind by a process that could not clean up (SIGKILL, power loss)
is removed the next time lincorr uses that directory: when its owner is no longer running on
this host, or when it is older than STALE_SECONDS whatever its host (a cache shared between
machines, or a pid reused since). New files and directories get the modes the user's umask
allows, as `open` and `mkdir` would give them, not the private modes of `tempfile`.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import socket
import stat
import tempfile
import time
from pathlib import Path

from lincorr.errors import OutputError, StorageError
from lincorr.reading import MAX_NESTING, json_depth

# Longer than any conversion or save takes, so a live temporary on another host is never taken for a stale one.
STALE_SECONDS = 24 * 3600
TEMPORARY_PATTERN = re.compile(r"\.lincorr-tmp\.(?P<pid>\d+)@(?P<host>[A-Za-z0-9_-]*)\.")
# Marks a directory lincorr wrote as an output, so the next run may replace it whole.
OUTPUT_MARKER = ".lincorr-output"

_swept: set[Path] = set()


def host_name() -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", socket.gethostname())


def temporary_prefix(name: str) -> str:
    """The start of a temporary's name for `name`: hidden, and naming this process and host."""
    return f".{name}.lincorr-tmp.{os.getpid()}@{host_name()}."


def umask() -> int:
    """The process's umask, read from /proc where Linux shows it; elsewhere by setting and restoring it (a brief change)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def file_mode() -> int:
    return 0o666 & ~umask()


def directory_mode() -> int:
    return 0o777 & ~umask()


def process_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def is_stale(name: str, modified: float) -> bool:
    """Whether a directory entry is a temporary its owner will never finish."""
    match = TEMPORARY_PATTERN.search(name)
    if match is None:
        return False
    if time.time() - modified > STALE_SECONDS:
        return True
    return match["host"] == host_name() and int(match["pid"]) != os.getpid() and not process_running(int(match["pid"]))


def remove_path(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def remove_stale_temporaries(directory: Path) -> None:
    """Remove the temporaries in `directory` whose owners are gone (see the module's docstring)."""
    try:
        entries = list(os.scandir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return
    for entry in entries:
        with contextlib.suppress(FileNotFoundError):
            if is_stale(entry.name, entry.stat(follow_symlinks=False).st_mtime):
                remove_path(Path(entry.path))


def ready_directory(directory) -> Path:
    """`directory`, created if missing (with the umask's mode), cleared of stale temporaries on its first use in this process."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    resolved = directory.resolve()
    if resolved not in _swept:
        remove_stale_temporaries(directory)
        _swept.add(resolved)
    return directory


@contextlib.contextmanager
def atomic_file(path, mode: str = "w"):
    """Yield a file object open on a temporary next to `path`; on success it becomes `path`, on failure it is removed.

    The data reaches the disk before the rename and the rename after it: otherwise a machine that loses power just
    after the rename may come back with the new name on an empty file, and nothing of the old one.
    """
    path = Path(path)
    handle, temporary = tempfile.mkstemp(prefix=temporary_prefix(path.name), dir=ready_directory(path.parent))
    try:
        with os.fdopen(handle, mode, encoding=None if "b" in mode else "utf-8") as out:
            yield out
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, file_mode())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    synced_directory(path.parent)


def synced_directory(directory: Path) -> None:
    """`directory`'s entries (a rename into it) flushed to the disk where the system allows it: some refuse to open or
    fsync a directory (Windows, some network file systems), and the file is whole by then either way."""
    with contextlib.suppress(OSError):
        synced(directory)


def write_json_atomic(path, payload) -> None:
    """A cache file read back only by lincorr: JSON written whole or not at all."""
    with atomic_file(path) as out:
        json.dump(payload, out, indent=2, ensure_ascii=False)


def read_json(path) -> dict | None:
    """A JSON file's object, or None when it is missing or unreadable."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


# The most a JSON file lincorr keeps for itself holds: a conversion record lists a model's dozen files (~2 KB), and
# hashes.json ~200 bytes per file ever hashed, so 16 MB is 80,000 hashes, parsed in well under a second. Anything larger
# (a link to /dev/zero, a stranger's file) is no file lincorr wrote, and reading it whole could exhaust memory.
MAX_RECORD_BYTES = 16 * 1024 * 1024


def read_record_json(path) -> dict | None:
    """A JSON object lincorr wrote into its cache, or None when it is missing, unreadable or no such object.

    The cache is data from whoever wrote it: a FIFO or device there is never opened for reading (it could block or
    never end), a file over MAX_RECORD_BYTES is not read, and one nested deeper than MAX_NESTING is not parsed (the
    parser recurses once a level).
    """
    try:
        # Non-blocking: opening a FIFO with no writer would otherwise wait forever before fstat could refuse it.
        handle = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(handle, "rb") as opened:
        try:
            info = os.fstat(handle)
            if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_RECORD_BYTES:
                return None
            raw = opened.read(MAX_RECORD_BYTES + 1)  # a file growing while read is still bounded
        except OSError:
            return None
    try:
        text = raw.decode("utf-8")
        value = json.loads(text) if len(raw) <= MAX_RECORD_BYTES and json_depth(text) <= MAX_NESTING else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


@contextlib.contextmanager
def replaced_directory(target):
    """Yield an empty staging directory next to `target`; on success it becomes `target` whole, on failure it is removed.

    A `target` that exists is moved aside and removed only once the new one is in place, so at
    no moment does `target` hold a mixture of an old and a new run.
    """
    target = Path(target)
    staging = Path(tempfile.mkdtemp(prefix=temporary_prefix(target.name), dir=ready_directory(target.parent)))
    try:
        os.chmod(staging, directory_mode())
        yield staging
        synced_tree(staging)
        put_in_place(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


# How often a staged directory is put in place again when another writer's appears at its target meanwhile.
PLACING_ATTEMPTS = 5


def put_in_place(staging: Path, target: Path) -> None:
    """`staging` renamed to `target`, an earlier `target` moved aside first and removed after. Two commands writing one
    output at once race between the look and the rename: a directory another writer put there since (the rename finds
    it not empty), or moved aside since, is taken as an earlier one, so one writer's whole result stays."""
    moved_aside = []
    try:
        for attempt in range(PLACING_ATTEMPTS):
            try:
                if target.exists():
                    old = staging.with_name(f"{staging.name}old{attempt}")
                    os.replace(target, old)
                    moved_aside.append(old)
                os.replace(staging, target)
                break
            except OSError as error:
                if error.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT) or attempt == PLACING_ATTEMPTS - 1:
                    raise
    except BaseException:  # stopped between the two renames (Ctrl-C, a full disk): the earlier output goes back
        if moved_aside and not os.path.lexists(target):
            with contextlib.suppress(OSError):
                os.replace(moved_aside.pop(), target)
        raise
    synced(target.parent)
    for old in moved_aside:
        shutil.rmtree(old, ignore_errors=True)


def synced_tree(directory: Path) -> None:
    """Every file and directory under `directory` flushed to the disk: after a crash of the machine, not only of the
    process, a renamed directory then holds what was written into it, not empty or truncated files."""
    for root, _, files in os.walk(directory):
        for name in files:
            if not os.path.islink(os.path.join(root, name)):
                synced(Path(root, name))
        synced(Path(root))


def synced(path: Path) -> None:
    """`path` (a file, or a directory's entries) flushed to the disk."""
    handle = os.open(path, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


def resolved(path, what: str) -> Path:
    """`path` with its links and `..` resolved, also where it does not exist yet; an OutputError for a link loop or a path
    the system cannot resolve."""
    try:
        return Path(path).resolve()
    except (RuntimeError, OSError) as error:
        raise OutputError(f"{what} cannot be resolved ({error}); remove the link loop or name another path") from None


def lies_within(path, directory, what: str) -> bool:
    """Whether `path` is `directory` or inside it, however either is spelt (links and `..` resolved)."""
    target, root = resolved(path, what), resolved(directory, what)
    return target == root or root in target.parents


def nearest_existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_writable(directory: Path, what: str) -> None:
    """Fail now, not after the work, when nothing could be written in `directory` (or where it would be created).

    Catches a file in the way, a missing permission, a read-only disk and a full one, by creating,
    syncing and removing a small temporary in the nearest directory that exists.
    """
    existing = nearest_existing(Path(directory))
    if not existing.is_dir():
        raise OutputError(f"cannot write {what}: {existing} is a file, not a directory; choose another location")
    try:
        handle, probe = tempfile.mkstemp(prefix=temporary_prefix("probe"), dir=existing)
    except OSError as error:
        raise StorageError(f"cannot write {what}: {error.strerror} in {existing}; choose another location") from None
    try:
        os.write(handle, b"lincorr")
        os.fsync(handle)  # a full disk may accept the name and refuse only the data
    except OSError as error:
        raise StorageError(f"cannot write {what}: {error.strerror} in {existing}; free space or choose another location") from None
    finally:
        os.close(handle)
        os.unlink(probe)


def link_trouble(path) -> str | None:
    """Why `path` cannot be followed: a symbolic link on the way to it that loops or points nowhere; None when none does.

    A path that does not exist yet is fine (it is created); a dangling link (an unmounted share) or a loop would let
    the checks pass and the creation fail after the work.
    """
    parts = (Path.cwd() / path).parts  # not normalised: a ".." after a link is the kernel's to follow
    for end in range(1, len(parts) + 1):
        prefix = Path(*parts[:end])
        if not os.path.islink(prefix):
            continue
        try:
            os.stat(prefix)
        except OSError as error:
            if error.errno == errno.ELOOP:
                return f"{prefix} is a symbolic link that loops back on itself"
            return f"{prefix} is a symbolic link to {os.readlink(prefix)}, which does not exist"
    return None


def holds_working_directory(directory: Path) -> bool:
    """Whether the (resolved) `directory` is the working directory or one of its parents: replacing it would pull the floor from under the shell."""
    try:
        here = Path(os.path.realpath(os.getcwd()))
    except FileNotFoundError:  # the working directory was removed already
        return False
    return directory == here or directory in here.parents


# Path.mkdir(parents=True), which makes an output's parents, recurses once a directory: a path of 2,000 of them ended a
# finished run in a RecursionError. No output needs more than this many.
MAX_DEPTH = 200


def path_trouble(path) -> str | None:
    """Why `path` can name no file here (None when it can): a NUL character, a name longer than the file system takes, a
    path longer than the system takes, or more than MAX_DEPTH directories deep."""
    text = os.fspath(path)
    if "\0" in text:
        return "holds a NUL character (\\0), which no file name may"
    longest = max((len(os.fsencode(part)) for part in Path(text).parts), default=0)
    if longest > NAME_MAX:
        return f"has a name of {longest:,} bytes, and a file name may have at most {NAME_MAX}"
    absolute = os.path.abspath(text)
    if len(os.fsencode(absolute)) >= PATH_MAX:
        return f"is {len(os.fsencode(absolute)):,} bytes long, and a path may have fewer than {PATH_MAX:,}"
    if len(Path(absolute).parts) > MAX_DEPTH:
        return f"lies {len(Path(absolute).parts):,} directories deep, more than the {MAX_DEPTH} lincorr makes"
    return None


NAME_MAX, PATH_MAX = 255, 4096  # Linux's and macOS's limits (os.pathconf reads them only of a path that exists)


def check_output_directory(path, option: str = "output directory") -> Path:
    """Fail before any work when `path` cannot become an output directory; its real path (links resolved) when it can.

    Each run replaces its output directory whole, so that it never mixes files of two runs (a
    stale W.png beside new arrays); lincorr therefore writes only into a new or empty directory,
    or one that it wrote itself, never the directory the user stands in or one holding it, and
    through a link only to a place that exists.
    """
    trouble = path_trouble(path)
    if trouble:
        raise OutputError(f"{option} {path} {trouble}; name another directory")
    trouble = link_trouble(path)
    if trouble:
        raise OutputError(f"{option} {path}: {trouble}; fix the link or name another directory")
    real = Path(os.path.realpath(path))
    if holds_working_directory(real):
        raise OutputError(f"{option} {path} is the working directory or holds it, and each run replaces its output directory whole; "
                          f"name a new directory, e.g. {option} run1")
    if real.exists() and not real.is_dir():
        raise OutputError(f"{option} {path} is a file; name a directory (it will be created)")
    if real.is_dir() and any(real.iterdir()) and not (real / OUTPUT_MARKER).is_file():
        raise OutputError(f"{option} {path} holds files lincorr did not write, and each run replaces its output directory whole; "
                           "name a new or empty directory")
    # The new directory is staged beside it, in its parent.
    check_writable(real.parent, f"{option} {path}")
    return real
