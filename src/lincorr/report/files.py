"""Reading the files of a run directory, which may come from anyone: JSON of the shape its reader expects, arrays, pictures.

Every JSON file goes through `lincorr.reading.read_json` (what the file is, its size, encoding and
nesting are checked before it is parsed) and is then compared with the shape its reader declares:
the keys the reader uses and what each holds. The first difference is an InputError that names the
file and the key (`source_domain.words[3] is a whole number, not text`), so a reader may index
a checked document without guarding each lookup. Keys a reader does not use are not looked at:
results that gained fields since still read.

A shape is
- a type (`TEXT`, `NUMBER`, ...) or a tuple of shapes, any of which will do;
- a dict: an object holding those keys, each of its shape (`Maybe(shape)`: the key may be missing);
- a list: an array of exactly those items, in order;
- `Items(shape)`: an array of any length; `Entries(shape)`: an object of any keys.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np

from lincorr.errors import InputError
from lincorr.reading import read_bytes, read_json, regular_file_size

TEXT = str
NULL = type(None)
REAL = (int, float)
NUMBER = (int, float, NULL)  # results write an undefined number as null
SCALAR = (str, int, float, bool, NULL)  # what a table cell shows
ANY = object  # shown as it is written
WHAT = "run file"
REMEDY = "rerun the command that wrote the run, or leave its directory out"
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


def read_document(path: Path, shape):
    """The JSON of `path`, once it has `shape`; an InputError naming the file (and the key) where it cannot be read or has not."""
    return checked(read_json(path, WHAT), shape, path)


def checked(document, shape, path: Path, where: str = ""):
    """`document` (read from `path`; `where` is its key there), once it has `shape`; an InputError naming file and key where it has not."""
    problem = mismatch(document, shape, where)
    if problem:
        raise InputError(f"{WHAT} {path} is not what lincorr writes: {problem}; {REMEDY}")
    return document


def mismatch(value, shape, where: str) -> str | None:
    """The first way `value` differs from `shape`, naming its key; None where it does not."""
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


def grid(document, key: str, shape: tuple[int, int], path: Path) -> list:
    """document[key], a checked array of arrays, once it is `shape` (rows x columns); an InputError naming file and key where not."""
    rows = document[key]
    if len(rows) != shape[0] or any(len(row) != shape[1] for row in rows):
        raise InputError(f"{WHAT} {path} is not what lincorr writes: {key} is not {shape[0]} x {shape[1]} like its rows and columns; "
                         f"{REMEDY}")
    return rows


def number_grid(document, key: str, shape: tuple[int, int], path: Path) -> np.ndarray:
    """A JSON matrix of numbers and nulls (see `grid`) as a float array, null as NaN."""
    rows = grid(document, key, shape, path)
    return np.array([[np.nan if v is None else v for v in row] for row in rows], dtype=float).reshape(shape)


def read_array(path: Path) -> np.ndarray:
    """A numeric array saved with `np.save`; an InputError naming the file for pickled objects or anything else."""
    regular_file_size(path, WHAT)
    try:
        # Memory-mapped first: a header that claims more than the file holds is refused by the file's size, not by an allocation.
        values = np.load(path, mmap_mode="r", allow_pickle=False)
        if isinstance(values, np.ndarray) and values.dtype.kind in "fiu":
            return np.array(values)
        problem = f"it holds {values.dtype} values, not numbers" if isinstance(values, np.ndarray) else "it is an archive of arrays"
    except (OSError, ValueError, EOFError) as error:
        # numpy's first sentence says what it found (pickled objects, too little data); its second, how to
        # unpickle the file anyway, is no advice for a run from someone else.
        problem = f"numpy cannot load it as an array ({str(error).partition('. ')[0].rstrip('.')})"
    raise InputError(f"{WHAT} {path} is not what lincorr writes: {problem}; {REMEDY}")


def read_picture(path: Path) -> bytes:
    """The bytes of a PNG a study wrote, once it is a regular file of at most MAX_FILE_BYTES."""
    return read_bytes(path, WHAT)
