"""JSON that every parser accepts: never NaN or Infinity; an undefined number is null, with the reason beside it.

Python's json writes NaN for an undefined correlation (constant values, one target word) and a
rate over nothing, which strict parsers (jq, JavaScript, most languages) reject. Every JSON
lincorr prints or saves goes through `dumps`: each non-finite number becomes null, and the object
it belongs to gains `"undefined": {"dotted.path": "reason"}`. A payload may give its own reasons
there for the fields it knows can be undefined; the others get UNDEFINED_REASON.
"""

from __future__ import annotations

import json
import math

UNDEFINED_REASON = "not defined for these data (a correlation over constant values or one value, or a rate over nothing)"


def finite_or_none(value, path: str, found: list[str]):
    """`value` with non-finite floats at any depth replaced by None; their dotted paths appended to `found`."""
    if isinstance(value, float) and not math.isfinite(value):
        found.append(path)
        return None
    if isinstance(value, dict):
        return {key: finite_or_none(item, f"{path}.{key}" if path else str(key), found) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_none(item, f"{path}.{i}" if path else str(i), found) for i, item in enumerate(value)]
    return value


def with_reasons(record: dict) -> dict:
    """A JSON object with its non-finite numbers nulled and listed under "undefined"."""
    found: list[str] = []
    given = record.get("undefined") or {}
    cleaned = finite_or_none({key: value for key, value in record.items() if key != "undefined"}, "", found)
    if found or given:
        cleaned["undefined"] = {**{path: UNDEFINED_REASON for path in found}, **given}
    return cleaned


def strict(payload):
    """`payload` ready for `json.dumps(..., allow_nan=False)`: an object, or each object of a list, explains its nulls."""
    if isinstance(payload, dict):
        return with_reasons(payload)
    if isinstance(payload, (list, tuple)):
        return [with_reasons(item) if isinstance(item, dict) else finite_or_none(item, str(i), []) for i, item in enumerate(payload)]
    return finite_or_none(payload, "", [])


def dumps(payload, *, indent: int | None = None) -> str:
    """Strict JSON text of `payload` (UTF-8 characters kept as they are)."""
    return json.dumps(strict(payload), allow_nan=False, ensure_ascii=False, indent=indent)
