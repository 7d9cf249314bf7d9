"""The shape of a JSON document a reader expects, declared beside the reader, and the check that names the first difference.

Every JSON file lincorr did not write in this run (a saved reproduction, an LRE relation, the files of
a run directory, a model's config.json) is read with `read_document`: `lincorr.reading` checks what the
file is, its size, encoding and nesting, then the document is compared with the `FileKind`'s shape. The
first difference is one InputError that names the file and the field (`claims[3].p_value is text, not
a number or null`), so a reader may index a checked document without guarding each lookup. Keys a
shape does not name are not looked at: files that gained fields since still read.

A shape is
- a type (`TEXT`, `NUMBER`, ...) or a tuple of shapes, any of which will do;
- a dict: an object holding those keys, each of its shape (`Maybe(shape)`: the key may be missing);
- a list: an array of exactly those items, in order;
- `Items(shape)`: an array of any length; `Entries(shape)`: an object of any keys.

Shapes are checked here rather than with JSON Schema (jsonschema 4.26 is installed, through nbformat):
checking a 200,000-sample LRE relation took 0.46 s here against jsonschema's 6.1 s (one shared 2-core
machine under load, 2026; docs/architecture.md), and the messages are lincorr's own words, naming the
field as a reader writes it.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from lincorr.errors import InputError
from lincorr.reading import read_json

TEXT = str
NULL = type(None)
REAL = (int, float)
NUMBER = (int, float, NULL)  # results write an undefined number as null
SCALAR = (str, int, float, bool, NULL)  # what a table cell shows
ANY = object  # shown as it is written
TYPE_NAMES = {str: "text", int: "a whole number", float: "a number", bool: "true or false", NULL: "null", dict: "an object",
              list: "a list", object: "a value"}


@dataclasses.dataclass(frozen=True)
class Items:
    """An array of any length whose every item has `shape`."""

    shape: object


@dataclasses.dataclass(frozen=True)
class Entries:
    """An object of any keys whose every value has `shape`."""

    shape: object


@dataclasses.dataclass(frozen=True)
class Maybe:
    """A key of an object that may be missing; where present, its value has `shape`."""

    shape: object


@dataclasses.dataclass(frozen=True)
class FileKind:
    """A kind of JSON file a reader takes: what errors call it, the shape it must have, and what to do when it has not."""

    what: str  # "saved reproduction"
    shape: object
    remedy: str  # "pass the --out directory of `lincorr reproduce`"
    written_by: str = "lincorr"  # who writes such files, for the error: "lincorr", "the LRE dataset"


def read_document(path, kind: FileKind):
    """The JSON of `path`, once it has `kind`'s shape; an InputError naming the file (and the field) where it cannot be read or has not."""
    return checked(read_json(path, kind.what), kind, Path(path))


def checked(document, kind: FileKind, path: Path, shape=None):
    """`document` (read from `path`), once it has `shape` (the kind's own by default); an InputError naming file and field where not."""
    problem = mismatch(document, kind.shape if shape is None else shape, "")
    if problem:
        raise InputError(f"{kind.what} {path} is not what {kind.written_by} writes: {problem}; {kind.remedy}")
    return document


def mismatch(value, shape, where: str) -> str | None:
    """The first way `value` differs from `shape`, naming its field; None where it does not."""
    if isinstance(shape, tuple):
        if any(mismatch(value, alternative, where) is None for alternative in shape):
            return None
        return wrong(value, shape, where)
    if isinstance(shape, dict):
        if not isinstance(value, dict):
            return wrong(value, shape, where)
        for key, inner in shape.items():
            if key not in value:
                if isinstance(inner, Maybe):
                    continue
                return f"{joined(where, key)} is missing"
            if problem := mismatch(value[key], inner.shape if isinstance(inner, Maybe) else inner, joined(where, key)):
                return problem
        return None
    if isinstance(shape, list):
        if not isinstance(value, list) or len(value) != len(shape):
            return wrong(value, shape, where)
        return first(mismatch(item, inner, f"{where}[{i}]") for i, (item, inner) in enumerate(zip(value, shape)))
    if isinstance(shape, Items):
        if not isinstance(value, list):
            return wrong(value, shape, where)
        return first(mismatch(item, shape.shape, f"{where}[{i}]") for i, item in enumerate(value))
    if isinstance(shape, Entries):
        if not isinstance(value, dict):
            return wrong(value, shape, where)
        return first(mismatch(item, shape.shape, joined(where, key)) for key, item in value.items())
    return None if isinstance(value, shape) else wrong(value, shape, where)


def first(problems) -> str | None:
    return next((problem for problem in problems if problem), None)


def joined(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def wrong(value, shape, where: str) -> str:
    if isinstance(shape, tuple):
        # An object whose inside differs from the one object shape offered: that difference, not "an object, not an object".
        alike = [alternative for alternative in shape if described(alternative) == described_value(value).split(" of ")[0]]
        if len(alike) == 1 and not isinstance(alike[0], type):
            return mismatch(value, alike[0], where) or ""
    return f"{where or 'the whole file'} is {described_value(value)}, not {described(shape)}"


def described(shape) -> str:
    """What a shape asks for, in words."""
    if isinstance(shape, tuple):
        # A number or null, not "a whole number or a number or null".
        names = (described(s) for s in shape if not (s is int and float in shape))
        return " or ".join(dict.fromkeys(names))
    if isinstance(shape, list):
        return f"a list of {len(shape)}"
    if isinstance(shape, Items):
        return "a list"
    if isinstance(shape, (dict, Entries)):
        return "an object"
    return TYPE_NAMES[shape]


def described_value(value) -> str:
    """What a parsed JSON value is, in words; never the value itself, which may be long."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, list):
        return f"a list of {len(value)}" if value else "an empty list"
    return TYPE_NAMES[type(value)]
