"""A list of names given in one string ("peng.table2,peng.table4"): each name once, none empty.

An empty item used to mean "everything" (`--only ''` ran every claim) and a repeated one to be
measured twice; both are the user's slip, refused here for the command line and the library alike.
"""

from __future__ import annotations

from collections import Counter

from lincorr.errors import UsageError


def split_names(text: str, what: str, example: str) -> tuple[str, ...]:
    """The comma-separated names of `text`, stripped, in order; an empty item or a name given twice is a UsageError.

    `what` names the list in the error ("--only"; "" where the caller names it), `example` shows a valid one.
    """
    given = f"{what} {text!r}".lstrip()
    names = tuple(name.strip() for name in text.split(","))
    if not all(names):
        raise UsageError(f"{given} has an empty name; give comma-separated names, e.g. {example}")
    repeated = [name for name, count in Counter(names).items() if count > 1]
    if repeated:
        raise UsageError(f"{given} names {', '.join(repeated)} more than once; name each once")
    return names
