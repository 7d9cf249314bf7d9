"""Which of lincorr's code a computation ran, recorded while it runs, so a result goes stale only when code it ran changed.

A record maps each unit of lincorr's source (`source_units`) that a computation ran or read to a short sha256 of its
computation (`provenance.computation`: comments, docstrings and argument annotations left out):

- a function or method it called (`lincorr.fit:fit_targets`, `lincorr.linear:LinearMap.fit`);
- the fields, decorators and constants of a class its code named or whose methods ran (`lincorr.fit:FitConfig`);
- a module-level value its code read (`lincorr.reproduce.runner:REJUDGED`), through `from ... import` and module
  attributes, and the functions such a value was computed by at import;
- each of the package's data files it opened (`file:knowledge/data/cities.yaml`, the sha256 of its bytes), and each
  package directory it listed (`dir:knowledge/data`);
- a choice it made that its result depends on and no key names (`memory-plan:adamw-float32`, by `note`), never changed.

`window()` records one computation: cProfile (the standard library's profiler, in C) counts the calls, an audit hook
sees the files opened. Windows nest. A value served from a memo (`cache`, `cached_property`, `SharedWork`) or from a
disk cache `replay`s the record it was stored with, so the record of a computation that reuses it still names the code
behind it. What the code that opens a window prepares for it is its caller's to name: in a key (settings, a model's
fingerprint) or by replaying the record of what it made (`record_of`).
`changed(record)` lists the units whose source is no longer what the record says; a unit that is gone counts as changed.
This module's and `source_units`' own code decides what is recorded and computes no result, so no record names it.
"""

from __future__ import annotations

import contextlib
import cProfile
import dataclasses
import functools
import os
import sys
import types
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from lincorr import source_units

# ---- windows ----


@dataclasses.dataclass
class Recording:
    """What a window saw: after it closes, `record` maps each unit to its hash (`complete` is False when another profiler
    held the interpreter, so nothing of it may be stored where it could be served later)."""

    codes: set = dataclasses.field(default_factory=set)
    replayed: dict = dataclasses.field(default_factory=dict)
    paths: set = dataclasses.field(default_factory=set)
    complete: bool = True
    record: dict = dataclasses.field(default_factory=dict)
    before: dict = dataclasses.field(default_factory=dict)  # the calls counted when the window opened


_open: list[Recording] = []
_profiler: list[cProfile.Profile] = []  # the one profiler, while any window is open
_hooked = False


def _counts() -> dict[types.CodeType, int]:
    profiler = _profiler[0]
    profiler.disable()  # flushes the frames still running, so their calls are counted
    counts = {entry.code: entry.callcount for entry in profiler.getstats() if isinstance(entry.code, types.CodeType)}
    profiler.enable(subcalls=False, builtins=False)
    return counts


def _audit(event: str, arguments: tuple) -> None:
    if not _open or event not in ("open", "os.listdir", "os.scandir"):
        return
    path = arguments[0] if arguments else None
    if path is None or isinstance(path, int):
        return
    try:
        resolved = Path(os.path.abspath(os.fsdecode(path)))
    except (TypeError, ValueError):
        return
    package = source_units.PACKAGE_DIRECTORY
    if package not in resolved.parents or resolved.suffix in (".py", ".pyc"):
        return
    kind = "file" if event == "open" else "dir"
    for recording in _open:
        recording.paths.add(f"{kind}:{resolved.relative_to(package).as_posix()}")


@contextlib.contextmanager
def window() -> Iterator[Recording]:
    """Record what runs inside the block; on leaving it, the yielded Recording's `record` holds the units."""
    global _hooked
    if not _hooked:
        sys.addaudithook(_audit)  # it cannot be removed; while no window is open it returns at once
        _hooked = True
    recording = Recording()
    if not _profiler:
        profiler = cProfile.Profile(subcalls=False, builtins=False)
        try:
            profiler.enable()
        except ValueError:  # another profiling tool holds the interpreter (Python 3.12+): what runs cannot be seen
            recording.complete = False
        else:
            _profiler.append(profiler)
    _open.append(recording)
    recording.before = _counts() if _profiler else {}
    try:
        yield recording
    finally:
        after = _counts() if _profiler else {}
        _open.remove(recording)
        if not _open and _profiler:
            _profiler.pop().disable()
        recording.complete = recording.complete and bool(after)
        recording.codes |= _ran_since(recording.before, after)
        recording.record = _record_of(recording)


def _ran_since(before: Mapping, after: Mapping) -> set:
    return {code for code, count in after.items() if count > before.get(code, 0)}


def so_far() -> dict[str, str]:
    """The record of the innermost open window up to now (empty outside every window): what has computed anything
    this window has made so far."""
    if not _open or not _profiler:
        return {}
    recording = _open[-1]
    return _record_of(dataclasses.replace(recording, codes=recording.codes | _ran_since(recording.before, _counts())))


def _record_of(recording: Recording) -> dict[str, str]:
    found: set[str] = set(recording.paths)
    for code in recording.codes:
        found |= source_units.code_units(code)
    hashes = {unit: source_units.unit_hash(unit) for unit in found}
    record = {unit: digest for unit, digest in hashes.items() if digest is not None}
    record.update(recording.replayed)
    return dict(sorted(record.items()))


def replay(record: Mapping[str, str]) -> None:
    """A stored result is being reused: the record it was computed under joins every open window's."""
    for recording in _open:
        recording.replayed.update(record)


def note(kind: str, name: str) -> None:
    """A choice the running computation made that its result depends on beside its key and its code (`kind` one of
    `source_units.CHOICE_KINDS`): `kind:name` joins every open window's record, so every store and memo that keeps the
    record keeps it too, and whatever reuses the result names it (`noted`)."""
    assert kind in source_units.CHOICE_KINDS and source_units.CHOICE_NAME.fullmatch(name), (kind, name)
    replay({f"{kind}:{name}": source_units.CHOSEN})


def noted(record: Mapping[str, str] | None, kind: str) -> list[str]:
    """The names of the choices of `kind` that `record` notes, sorted."""
    return sorted(unit.partition(":")[2] for unit in record or {} if unit.partition(":")[0] == kind)


def changed(record: Mapping[str, str]) -> list[str]:
    """The units of `record` whose source is not what it was when recorded (gone ones included), sorted."""
    return sorted(unit for unit, digest in record.items() if source_units.unit_hash(unit) != digest)


def reused(record: Mapping[str, str] | None) -> bool:
    """Whether a stored result computed under `record` may be served now: it has one and none of it changed; it is then
    replayed into the open windows."""
    if not isinstance(record, Mapping) or not record or changed(record):
        return False
    replay(record)
    return True


# ---- memos that keep their records ----


# The values the memos of `cache` hold, by identity, with their records: what a caller hands a window (`record_of`).
_made: dict[int, tuple[object, dict]] = {}


def record_of(value: object) -> dict[str, str] | None:
    """The record of the call that made `value`, where a `cache`d function made it; else None."""
    made = _made.get(id(value))
    return made[1] if made is not None and made[0] is value else None


def cache(function: Callable) -> Callable:
    """functools.cache whose hits replay the record of the call that computed the value."""
    memo: dict = {}

    @functools.wraps(function)
    def cached(*args, **kwargs):
        key = (args, tuple(sorted(kwargs.items())))
        if key in memo:
            value, record = memo[key]
            replay(record)
            return value
        with window() as recording:
            value = function(*args, **kwargs)
        if recording.complete:
            memo[key] = (value, recording.record)
            _made[id(value)] = (value, recording.record)
        replay(recording.record)
        return value

    cached.cache_clear = memo.clear  # type: ignore[attr-defined]
    return cached


class SharedWork(dict):
    """What the claims of one run compute once and share (a model fine-tuned by the first claim that needs it): each
    value is stored with the record, so far, of the window that made it, and replayed whenever another reads it."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.records: dict = {}

    def __setitem__(self, key, value) -> None:
        self.records[key] = so_far()
        super().__setitem__(key, value)

    def __getitem__(self, key):
        value = super().__getitem__(key)
        replay(self.records.get(key, {}))
        return value


class cached_property:  # noqa: N801 - named as the functools descriptor it stands for
    """functools.cached_property whose later reads replay the record of the first."""

    def __init__(self, function: Callable):
        self.function = function
        self.__doc__ = function.__doc__

    def __set_name__(self, owner, name: str) -> None:
        self.slot = f"_recorded_{name}"

    def __get__(self, instance, owner=None):
        if instance is None:
            return self
        stored = instance.__dict__.get(self.slot)
        if stored is not None:
            replay(stored[1])
            return stored[0]
        with window() as recording:
            value = self.function(instance)
        if recording.complete:
            instance.__dict__[self.slot] = (value, recording.record)
        replay(recording.record)
        return value
