"""A process killed at any step of a write leaves the old result, the new one or none, never a mixture, and the next
run writes it whole.

Every cache entry is written by `filesystem.atomic_file` and every output directory and converted model by
`filesystem.replaced_directory`. A child process writes through one of them and SIGKILLs itself at its k-th step: each
call of the file system functions they use (making the temporary, chmod, fsync, rename, removal) and between the
writes of the payload, for every k the write has. The parent then reads what is there and runs the write again.
"""

from __future__ import annotations

import errno
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from lincorr import filesystem
from lincorr.filesystem import TEMPORARY_PATTERN

SOURCE = str(Path(__file__).resolve().parents[1] / "src")

# argv: the step to die at (0: none), "file" or "directory", the target. Prints the number of steps of a whole write.
WRITER = """
import os, shutil, signal, sys, tempfile
from pathlib import Path

kill_at, kind, target = int(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
steps = 0


def step():
    global steps
    steps += 1
    if steps == kill_at:
        os.kill(os.getpid(), signal.SIGKILL)


def stepping(module, name):
    real = getattr(module, name)

    def wrapped(*arguments, **keywords):
        step()
        result = real(*arguments, **keywords)
        step()
        return result

    setattr(module, name, wrapped)


for module, name in ((os, "replace"), (os, "chmod"), (os, "fsync"), (os, "unlink"), (shutil, "rmtree"),
                     (tempfile, "mkstemp"), (tempfile, "mkdtemp")):
    stepping(module, name)

from lincorr import filesystem

if kind == "file":
    with filesystem.atomic_file(target) as out:
        out.write("new " * 10_000)
        out.flush()
        step()
        out.write("end")
else:
    with filesystem.replaced_directory(target) as staging:
        (staging / "a.txt").write_text("new a", encoding="utf-8")
        step()
        (staging / "b.txt").write_text("new b", encoding="utf-8")
print(steps)
"""

NEW = {"file": "new " * 10_000 + "end", "directory": {"a.txt": "new a", "b.txt": "new b"}}
OLD = {"file": "old", "directory": {"a.txt": "old a", "b.txt": "old b"}}


def write(kill_at: int, kind: str, target: Path) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": SOURCE + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-c", WRITER, str(kill_at), kind, str(target)], env=environment, capture_output=True,
                          text=True, timeout=120)


def state(kind: str, target: Path):
    """What a reader finds at `target`: a file's text, a directory's files and texts, or None."""
    if not target.exists():
        return None
    if kind == "file":
        return target.read_text(encoding="utf-8")
    return {item.name: item.read_text(encoding="utf-8") for item in target.iterdir()}


def earlier_result(kind: str, parent: Path) -> Path:
    """`parent`/target holding what an earlier write left (OLD), which the write replaces."""
    parent.mkdir()
    target = parent / "target"
    if kind == "file":
        target.write_text(OLD[kind], encoding="utf-8")
    else:
        target.mkdir()
        for name, text in OLD[kind].items():
            (target / name).write_text(text, encoding="utf-8")
    return target


def temporaries(directory: Path) -> list[str]:
    return [item.name for item in directory.iterdir() if TEMPORARY_PATTERN.search(item.name)]


@pytest.mark.parametrize("kind", ["file", "directory"])
def test_a_write_killed_at_any_step_leaves_old_new_or_nothing_and_the_next_write_is_whole(kind, tmp_path):
    whole = write(0, kind, earlier_result(kind, tmp_path / "whole"))
    assert whole.returncode == 0, whole.stderr
    steps = int(whole.stdout)
    assert steps >= (7 if kind == "file" else 20), f"the writer stepped through too little of the write: {steps} steps"
    seen = set()
    for kill_at in range(1, steps + 1):
        parent = tmp_path / f"killed-at-{kill_at}"
        target = earlier_result(kind, parent)
        killed = write(kill_at, kind, target)
        assert killed.returncode == -signal.SIGKILL, (kill_at, killed.returncode, killed.stderr)
        found = state(kind, target)
        assert found in (OLD[kind], NEW[kind], None), (kill_at, found if kind == "directory" else found[:40])
        assert not (kind == "file" and found is None), "a file is replaced in one rename: it is never missing"
        seen.add("old" if found == OLD[kind] else "new" if found == NEW[kind] else "none")
        again = write(0, kind, target)
        assert again.returncode == 0, (kill_at, again.stderr)
        assert state(kind, target) == NEW[kind], kill_at
        assert temporaries(parent) == [], (kill_at, "the next write removes what a killed writer left", os.listdir(parent))
    assert {"old", "new"} <= seen, f"the kills never landed both before and after the rename: {seen}"



def test_a_directory_another_writer_puts_in_place_meanwhile_is_replaced_as_an_earlier_one(tmp_path, monkeypatch):
    """Two commands writing one --out at once: the other's rename lands between this one's look and its rename. This
    one's whole result replaces it, as it replaces an earlier output, and nothing of either is left beside it."""
    target, raced = tmp_path / "out", []
    real_replace = os.replace

    def rename_after_the_other_writer(source, destination):
        if Path(destination) == target and not target.exists() and not raced:
            raced.append(True)
            target.mkdir()
            (target / "theirs.txt").write_text("theirs", encoding="utf-8")
        return real_replace(source, destination)

    monkeypatch.setattr(os, "replace", rename_after_the_other_writer)
    with filesystem.replaced_directory(target) as staging:
        (staging / "ours.txt").write_text("ours", encoding="utf-8")
    assert raced and [item.name for item in target.iterdir()] == ["ours.txt"]
    assert temporaries(tmp_path) == []


def test_an_output_stopped_between_its_two_renames_is_the_earlier_one(tmp_path, monkeypatch):
    """`put_in_place` moves the earlier output aside, then renames the new one in: a stop between the two (Ctrl-C) puts
    the earlier one back instead of leaving only its moved-aside copy."""
    target, staging = tmp_path / "run", tmp_path / ".run.staging"
    target.mkdir()
    (target / "result.json").write_text("earlier")
    staging.mkdir()
    (staging / "result.json").write_text("new")
    rename = os.replace

    def stopped_before_the_new_one(source, destination):
        if Path(source) == staging:
            raise KeyboardInterrupt
        rename(source, destination)

    monkeypatch.setattr(filesystem.os, "replace", stopped_before_the_new_one)
    with pytest.raises(KeyboardInterrupt):
        filesystem.put_in_place(staging, target)
    assert (target / "result.json").read_text() == "earlier"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".run.staging", "run"]


def test_a_file_reaches_the_disk_before_its_rename_and_the_rename_after_it(tmp_path, monkeypatch):
    """Without the first fsync a power loss just after the rename can leave the name on an empty file; without the
    second, the rename itself can be lost while the old file is already gone from the cache's view."""
    target, events = tmp_path / "entry.json", []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(handle):
        info = os.fstat(handle)
        events.append(("fsync", "directory" if stat.S_ISDIR(info.st_mode) else "file", info.st_ino))
        return real_fsync(handle)

    def replace(source, destination):
        events.append(("replace", os.stat(source).st_ino))
        return real_replace(source, destination)

    monkeypatch.setattr(filesystem.os, "fsync", fsync)
    monkeypatch.setattr(filesystem.os, "replace", replace)
    with filesystem.atomic_file(target) as out:
        out.write("new")
    written, directory = target.stat().st_ino, tmp_path.stat().st_ino
    assert events == [("fsync", "file", written), ("replace", written), ("fsync", "directory", directory)], events
    assert target.read_text(encoding="utf-8") == "new"


def test_a_directory_the_system_will_not_fsync_still_gets_its_file(tmp_path, monkeypatch):
    """Some systems refuse to open or fsync a directory: the file is whole by then, so the write stands."""
    real_fsync = os.fsync

    def fsync(handle):
        if stat.S_ISDIR(os.fstat(handle).st_mode):
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_fsync(handle)

    monkeypatch.setattr(filesystem.os, "fsync", fsync)
    with filesystem.atomic_file(tmp_path / "entry.json") as out:
        out.write("new")
    assert (tmp_path / "entry.json").read_text(encoding="utf-8") == "new" and temporaries(tmp_path) == []
