"""The exception types for mistakes a user can fix: one base class, and one subclass per kind of mistake.

The kind is what callers and tests match on (`except InputError`, `error.kind`); the message, one line that says
what to do, may be reworded at any time.
"""


class LincorrError(ValueError):
    """A user-facing error: the message is one line that says what to do."""

    kind = "error"


class UsageError(LincorrError):
    """The command line: an unknown command or option, a value out of range, options that exclude each other."""

    kind = "usage"


class InputError(LincorrError):
    """A file or a word the user gave (registry, references, inputs, domains, templates) that cannot be read or used."""

    kind = "input"


class DataError(LincorrError):
    """Too little to measure: too few inputs to hold some out, no usable pair or word left."""

    kind = "data"


class ModelError(LincorrError):
    """A model that cannot be loaded as asked, or whose outputs lincorr cannot use."""

    kind = "model"


class DeviceError(LincorrError):
    """A device or dtype this machine or this model cannot run."""

    kind = "device"


class FreeMemoryError(DeviceError):
    """Too little memory free at this moment for the work asked (fine-tuning under every memory plan): a later moment or
    another machine may have it, so nothing it stopped is stored as a result."""


class OutputError(LincorrError):
    """Where results would be written: a file in the way, a directory of someone else's files."""

    kind = "output"


class CacheError(LincorrError):
    """The cache directory: unset wrongly, a file in its place, not lincorr's to clear."""

    kind = "cache"


class StorageError(LincorrError):
    """The disk refuses to store: read-only, full, no permission."""

    kind = "storage"


def printable(text: str) -> str:
    """`text` (from a file or an option: anyone's) as lincorr shows it: each character a terminal would act on (a NUL,
    a line break, an escape sequence's ESC) written as its escape, so that it can neither forge a line nor move the cursor."""
    return "".join(character if character.isprintable() else ascii(character)[1:-1] for character in text)
