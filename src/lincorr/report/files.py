"""Reading the files of a run directory, which may come from anyone: JSON of the shape its reader expects, arrays, pictures.

Every JSON file is read as a `schema.FileKind` "run file" whose shape its reader declares beside it
(the keys the reader uses and what each holds, in the shape language of `lincorr.schema`); the first
difference is an InputError that names the file and the key (`source_domain.words[3] is a whole number,
not text`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from lincorr.errors import InputError
from lincorr import reading
from lincorr.reading import read_bytes
from lincorr.schema import ANY, NULL, NUMBER, REAL, SCALAR, TEXT, Entries, FileKind, Items, Maybe
from lincorr import schema

__all__ = ["ANY", "NULL", "NUMBER", "REAL", "SCALAR", "TEXT", "Entries", "Items", "Maybe", "WHAT", "REMEDY", "RUN_FILE",
           "read_document", "checked", "grid", "number_grid", "read_array", "read_picture"]

WHAT = "run file"
REMEDY = "rerun the command that wrote the run, or leave its directory out"
RUN_FILE = FileKind(WHAT, ANY, REMEDY)  # each reader gives its file's own shape


def read_document(path: Path, shape):
    """The JSON of `path`, once it has `shape`; an InputError naming the file (and the key) where it cannot be read or has not."""
    return checked(schema.read_document(path, RUN_FILE), shape, path)


def checked(document, shape, path: Path):
    """`document` (read from `path`), once it has `shape`; an InputError naming file and key where it has not."""
    return schema.checked(document, RUN_FILE, path, shape)


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
    """A numeric array saved with `np.save` (see `reading.read_array`)."""
    return reading.read_array(path, WHAT, REMEDY)


def read_picture(path: Path) -> bytes:
    """The bytes of a PNG a study wrote, once it is a regular file of at most MAX_FILE_BYTES."""
    return read_bytes(path, WHAT)
