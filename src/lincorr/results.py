"""Results: the one contract of what a study returns (its study name, summary, text, save, load) and storing a result's fields.

Every result type a study returns keeps `Result`: `study` is the name provenance.json records,
`summary()` the JSON-ready dict that `--json` prints, `text()` what the terminal shows,
`save(directory)` writes the study's files and `load(directory)` rebuilds the typed result from them.
Most results are rebuilt from `result_state.json`, which `record` writes beside the study's own
files: every field of the dataclass by its annotation (nested dataclasses, arrays as dtype, shape
and values, undefined numbers tagged), so nothing is unpickled and nothing but lincorr's own
types is made. Which result type a study name stands for is `lincorr.studies.RESULT_TYPES`
(the core cannot import the studies).
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import ClassVar, Protocol

import numpy as np

from lincorr.errors import InputError, LincorrError
from lincorr.outputs import write_json, write_provenance
from lincorr.schema import ANY, NULL, TEXT, FileKind, Maybe, read_document

__all__ = ["Result", "Stored", "STATE_FILE", "record", "encode", "decode", "read_state", "read_study", "summary_frame", "require_pandas"]

STATE_FILE = "result_state.json"
WHAT = "saved result"
REMEDY = "rerun the command that wrote it"
STATE = FileKind(WHAT, {"study": TEXT, "fields": ANY}, REMEDY)  # the fields are checked as `decode` rebuilds them
PROVENANCE = FileKind(WHAT, {"study": Maybe((TEXT, NULL))}, REMEDY)
# Arrays hold numbers or truth values; anything else (objects, text) is never made from a file.
ARRAY_KINDS = "fiub"


class Result(Protocol):
    """What every study returns."""

    study: ClassVar[str]

    def summary(self) -> dict: ...

    def text(self) -> str: ...

    def save(self, directory) -> None: ...

    @classmethod
    def load(cls, directory): ...


class Stored:
    """A result rebuilt from the `result_state.json` that its `save` wrote through `record`."""

    study: ClassVar[str]

    def to_pandas(self):
        """The summary as a pandas DataFrame (see `summary_frame`); pandas is needed, not installed with lincorr."""
        return summary_frame(self.summary())

    @classmethod
    def load(cls, directory):
        """The result `save` wrote into `directory`; an InputError when it holds another study's or none."""
        return read_state(cls, directory)


def require_pandas():
    """pandas, which lincorr does not depend on; one clear error where it is missing."""
    try:
        import pandas
    except ImportError:
        raise LincorrError("to_pandas() needs pandas, which lincorr does not install: pip install pandas") from None
    return pandas


def summary_frame(summary: dict):
    """A result's summary as a DataFrame: its table (`rows`, or a reproduction's `claims`) one row per line, else one row
    whose nested keys are joined with '.'."""
    pandas = require_pandas()
    for key in ("rows", "claims"):
        table = summary.get(key)
        if isinstance(table, list) and table and all(isinstance(row, dict) for row in table):
            return pandas.DataFrame(table)
    return pandas.json_normalize(summary)


def record(out: Path, result, *, model_fingerprint=None, settings: dict | None = None, state: bool = True) -> None:
    """provenance.json naming `result.study`, and (unless `state` is False) `result_state.json` with every field of `result`."""
    write_provenance(out, study=result.study, model_fingerprint=model_fingerprint, settings=settings)
    if state:
        write_json(Path(out) / STATE_FILE, {"study": result.study, "fields": encode(result)})


def read_study(directory) -> str | None:
    """The study provenance.json names in `directory`; None for a run saved before lincorr recorded it."""
    return read_document(Path(directory) / "provenance.json", PROVENANCE).get("study")


def read_state(cls, directory):
    """The `cls` whose fields `record` wrote into `directory`."""
    path = Path(directory) / STATE_FILE
    state = read_document(path, STATE)
    if state["study"] != cls.study:
        raise InputError(f"{WHAT} {path} does not hold a '{cls.study}' result; {REMEDY}")
    try:
        return decode(cls, state["fields"])
    except (TypeError, ValueError, KeyError, AttributeError, OverflowError) as error:
        raise InputError(f"{WHAT} {path} is not what lincorr writes ({error}); {REMEDY}") from None


def encode(value):
    """`value` as JSON-ready data that `decode` turns back into it, given its annotation."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: encode(getattr(value, field.name)) for field in dataclasses.fields(value)}
    if isinstance(value, np.ndarray):
        return {"dtype": value.dtype.str, "shape": list(value.shape), "values": [encode(v) for v in value.ravel().tolist()]}
    if isinstance(value, np.generic):
        return encode(value.item())
    if isinstance(value, float) and not math.isfinite(value):
        return {"non_finite": repr(value)}
    if isinstance(value, Mapping):
        return {str(key): encode(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode(item) for item in value]
    return value


def decode(hint, data):
    """The value of annotation `hint` that `encode` wrote as `data`."""
    origin, arguments = typing.get_origin(hint), typing.get_args(hint)
    if hint is typing.Any or hint is object:
        return untyped(data)
    if origin in (typing.Union, types.UnionType):
        return decode_union(arguments, data)
    if origin is typing.Literal:
        if data not in arguments:
            raise ValueError(f"{data!r} is none of {arguments}")
        return data
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return decode_dataclass(hint, data)
    if hint is np.ndarray:
        return decode_array(data)
    if origin in (tuple, list, Sequence) or hint in (tuple, list):
        return decode_sequence(origin or hint, arguments, data)
    if origin in (dict, Mapping) or hint in (dict, Mapping):
        key, item = arguments or (str, typing.Any)
        # JSON keys are text: a whole-number key (Hit@k's k) comes back as the number it was.
        return {int(k) if key is int else decode(key, k): decode(item, v) for k, v in expect(data, dict).items()}
    if hint is float:
        return float(untyped(data)) if not isinstance(data, bool) else bad(data, hint)
    if hint in (int, str, bool):
        return data if type(data) is hint else bad(data, hint)
    if hint is type(None):
        return data if data is None else bad(data, hint)
    raise TypeError(f"no stored form for {hint}")


def decode_union(arguments, data):
    if data is None and type(None) in arguments:
        return None
    for choice in arguments:
        try:
            return decode(choice, data)
        except (TypeError, ValueError, KeyError, AttributeError, OverflowError):
            continue
    raise ValueError(f"{data!r} is none of {arguments}")


def decode_dataclass(cls, data):
    data = expect(data, dict)
    hints = typing.get_type_hints(cls)
    return cls(**{field.name: decode(hints[field.name], data[field.name]) for field in dataclasses.fields(cls)
                  if field.init and field.name in data})


def decode_sequence(kind, arguments, data):
    items = expect(data, list)
    if kind is tuple and arguments and arguments[-1] is not Ellipsis:
        if len(arguments) != len(items):
            raise ValueError(f"expected {len(arguments)} items, found {len(items)}")
        return tuple(decode(argument, item) for argument, item in zip(arguments, items))
    decoded = [decode(arguments[0], item) if arguments else untyped(item) for item in items]
    return tuple(decoded) if kind in (tuple, Sequence) else decoded


def decode_array(data) -> np.ndarray:
    data = expect(data, dict)
    dtype = np.dtype(expect(data["dtype"], str))
    if dtype.kind not in ARRAY_KINDS:
        raise ValueError(f"arrays of {dtype} are never stored")
    values = [untyped(v) for v in expect(data["values"], list)]
    return np.array(values, dtype=dtype).reshape([int(n) for n in expect(data["shape"], list)])


def untyped(data):
    """JSON as it is, with what `encode` tagged made what it was: undefined numbers floats again, arrays arrays."""
    if isinstance(data, dict):
        if set(data) == {"non_finite"}:
            return float(data["non_finite"])
        if set(data) == {"dtype", "shape", "values"}:
            return decode_array(data)
        return {key: untyped(value) for key, value in data.items()}
    if isinstance(data, list):
        return [untyped(item) for item in data]
    return data


def expect(data, kind: type):
    return data if isinstance(data, kind) else bad(data, kind)


def bad(data, hint):
    raise TypeError(f"{type(data).__name__} where {getattr(hint, '__name__', hint)} belongs")
