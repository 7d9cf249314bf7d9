"""Reading the files a user names: what a file is and how large, checked before a byte is parsed.

Every file lincorr reads on a user's behalf (registries, reference pairs, inputs, domains, texts to fine-tune on,
the JSON of run directories) goes through `read_text`: a directory, FIFO or device is refused by what it is, a file
over MAX_FILE_BYTES by its size, text that is not UTF-8 by where it stops being so, and a UTF-8 byte-order mark (as
Windows editors write) is removed rather than glued to the first word. Structured text is refused when it nests
deeper than MAX_NESTING, counted on the text before any parser recurses into it (a parser's recursion is where a
stranger's file would crash the process).
"""

from __future__ import annotations

import codecs
import contextlib
import functools
import json
import math
import re
import stat
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from lincorr.errors import InputError, printable

MAX_FILE_BYTES = 100 * 1024 * 1024  # 100.0 MB as `human_size` writes it
MAX_NESTING = 64
FLOAT_DIGITS = 308  # whole numbers up to 308 digits stay whole; the largest float is 1.8e308
UTF16_MARKS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")  # JSON's way to write half of a UTF-16 pair
# JSON strings, so that brackets inside them are not counted as nesting.
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
# YAML's quoted scalars, for the same reason.
_YAML_QUOTED = re.compile(r'"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\n]|\'\')*\'')


def regular_file_size(path, what: str) -> int:
    """The size of `path`, once it is a regular file: a directory, FIFO, device or socket is refused by what it is, unopened."""
    path = Path(path)
    try:
        info = path.stat()
    except FileNotFoundError:
        raise InputError(f"{what} {path} does not exist") from None
    except OSError as error:
        raise InputError(f"cannot read {what} {path}: {error.strerror}") from None
    if not stat.S_ISREG(info.st_mode):
        raise InputError(f"{what} {path} is {kind_of(info.st_mode)}, not a file; name a regular file")
    return info.st_size


def read_bytes(path, what: str) -> bytes:
    """The bytes of the regular file `path`, at most MAX_FILE_BYTES of them (`what` names it in errors, e.g. "reference file")."""
    size = regular_file_size(path, what)
    if size > MAX_FILE_BYTES:
        raise InputError(f"{what} {path} is {human_size(size)}; lincorr reads files up to {human_size(MAX_FILE_BYTES)}")
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)  # a file that grows while it is read is still bounded
    except OSError as error:
        raise InputError(f"cannot read {what} {path}: {error.strerror}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise InputError(f"{what} {path} is over {human_size(MAX_FILE_BYTES)}; lincorr reads files up to {human_size(MAX_FILE_BYTES)}")
    return raw


def file_start(path, length: int) -> bytes:
    """The first `length` bytes of a regular file (a magic number), never more; b"" for anything else or a file that
    cannot be read: a caller tells what a path holds before it chooses a reader."""
    path = Path(path)
    with contextlib.suppress(OSError):
        if stat.S_ISREG(path.stat().st_mode):
            with open(path, "rb") as handle:
                return handle.read(length)
    return b""


def read_text(path, what: str) -> str:
    """The text of the file `path` (see `read_bytes`), BOM removed, newlines as read."""
    raw = read_bytes(path, what)
    if raw.startswith(UTF16_MARKS):
        raise InputError(f"{what} {path} is UTF-16 text; save it as UTF-8")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise InputError(f"{what} {path} is not UTF-8 text (byte {error.start} is {raw[error.start]:#04x}); save it as UTF-8") from None


def read_lines(path, what: str) -> list[str]:
    """The file's non-empty lines, stripped (CRLF or LF endings alike)."""
    return [line.strip() for line in read_text(path, what).splitlines() if line.strip()]


def read_json(path, what: str):
    """The parsed JSON of the file, refused with the line where it goes wrong or where it nests too deep."""
    return parse_json(read_text(path, what), path, what)


def parse_json(text: str, path, what: str, fix: str = ""):
    """`text`, read from `path`, parsed as JSON once its nesting is checked, each object's keys once (`unique_keys`);
    `fix` ends the error where it is not JSON."""
    check_nesting(path, what, json_depth(text))
    try:
        document = json.loads(text, parse_int=json_int, object_pairs_hook=functools.partial(unique_keys, path, what, fix))
    except json.JSONDecodeError as error:
        raise InputError(f"{path}:{error.lineno}: {what} is not valid JSON ({error.msg}){'; ' + fix if fix else ''}") from None
    if _SURROGATE_ESCAPE.search(text):
        try:  # a half pair ("\ud800" alone) parses, but is no text: printing or saving it fails far from here
            json.dumps(document, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise InputError(f"{path}: {what} holds text that is not Unicode (an escape \\ud800-\\udfff that is half of a "
                             f"pair){'; ' + fix if fix else ''}") from None
    return document


def unique_keys(path, what: str, fix: str, pairs: list[tuple[str, object]]) -> dict:
    """One JSON object of `pairs`, refused where a key appears twice: Python's parser keeps the last silently, so a
    file saying `"verdict": "a", "verdict": "b"` would read as whichever its writer put second."""
    document = dict(pairs)
    if len(document) < len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise InputError(f"{path}: {what} holds the key '{printable(key)}' twice in one object; each key may appear "
                                 f"once{'; ' + fix if fix else ''}")
            seen.add(key)
    return document


def json_int(digits: str) -> int | float:
    """A JSON whole number; one of more digits than a float's range holds is read as a float (±inf beyond 1.8e308),
    so that no reader's arithmetic or formatting overflows on it, and Python's 4,300-digit limit on int() is never reached."""
    return float(digits) if len(digits.lstrip("-")) > FLOAT_DIGITS else int(digits)


def read_array(path, what: str, fix: str) -> np.ndarray:
    """A numeric array saved with `np.save`, never unpickled; an InputError naming the file for objects or anything else."""
    size = regular_file_size(path, what)
    try:
        # Counted in Python's integers before numpy reads the header: numpy's own count of a huge declared shape overflows
        # (with a RuntimeWarning). Memory-mapped then, so nothing is allocated by what the header claims.
        declared = declared_array_bytes(path)
        if declared is not None and declared > size:
            problem = f"its header declares {declared:,} bytes of values but the file holds {size:,}"
        else:
            values = np.load(path, mmap_mode="r", allow_pickle=False)
            if isinstance(values, np.ndarray) and values.dtype.kind in "fiu":
                return np.array(values)
            problem = f"it holds {values.dtype} values, not numbers" if isinstance(values, np.ndarray) else "it is an archive of arrays"
    except (OSError, ValueError, EOFError) as error:
        # numpy's first sentence says what it found (pickled objects, too little data); its second, how to
        # unpickle the file anyway, is no advice for a file from someone else.
        problem = f"numpy cannot load it as an array ({str(error).partition('. ')[0].rstrip('.')})"
    raise InputError(f"{what} {path} is not what lincorr writes: {problem}; {fix}")


def array_problem(values: np.ndarray, axes: Sequence[tuple[int, str]], *, weights: bool = False) -> str | None:
    """How `values` differ from one axis per (length, what the axis counts) in `axes`, and with `weights` from finite
    numbers; None where they do not.

    A run's arrays are sized by the words and inputs it lists: an array of another shape is another run's file (or
    none), and indexing it by those words would label its numbers wrongly rather than fail. No fit writes a NaN or an
    infinite weight (fitting refuses non-finite logits), so such a weight is a damaged file, not a result.
    """
    if values.ndim != len(axes):
        layout = "a matrix of " if len(axes) == 2 else "a list of " if len(axes) == 1 else f"a {len(axes)}-dimensional array of "
        return f"it is a {values.ndim}-dimensional array, not {layout}{' by '.join(name for _, name in axes)}"
    if values.shape != tuple(length for length, _ in axes):
        size = f"a list of {values.shape[0]}" if values.ndim == 1 else " x ".join(map(str, values.shape))
        return f"it is {size}, not {' by '.join(f'{length} {name}' for length, name in axes)}"
    if weights and not np.isfinite(values).all():
        counts = {"NaN": int(np.isnan(values).sum()), "infinite": int(np.isinf(values).sum())}
        return f"it holds {' and '.join(f'{n} {kind}' for kind, n in counts.items() if n)} weights, which no fit writes"
    return None


def check_array(values: np.ndarray, path, what: str, fix: str, axes: Sequence[tuple[int, str]], *, weights: bool = False) -> np.ndarray:
    """`values`, read from `path`, once `array_problem` finds nothing; an InputError naming the file where it does."""
    problem = array_problem(values, axes, weights=weights)
    if problem:
        raise InputError(f"{what} {path} is not what lincorr writes: {problem}; {fix}")
    return values


def declared_array_bytes(path) -> int | None:
    """How many bytes of values an `.npy` file's header declares (shape times item size, in Python's integers); None for a
    file that is no `.npy` or a header version without a public reader, which np.load then checks. A malformed header is a
    ValueError."""
    readers = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
    with open(path, "rb") as handle:
        try:
            reader = readers.get(np.lib.format.read_magic(handle))
        except ValueError:
            return None  # not an .npy file at all: np.load says what it is
        if reader is None:
            return None
        shape, _, dtype = reader(handle)
    return math.prod(int(n) for n in shape) * dtype.itemsize


def check_nesting(path, what: str, depth: int) -> None:
    if depth > MAX_NESTING:
        raise InputError(f"{what} {path} nests {depth} levels deep; lincorr reads structures up to {MAX_NESTING} levels deep")


def json_depth(text: str) -> int:
    """How deep the brackets of a JSON text nest (strings ignored)."""
    return _bracket_depth(_JSON_STRING.sub('""', text))


def yaml_depth(text: str) -> int:
    """An upper bound on how deep a YAML text nests: flow brackets, plus one level per indentation step and per "- " run."""
    deepest = 0
    indents: list[int] = []
    for line in _YAML_QUOTED.sub("''", text).splitlines():
        content = line.lstrip(" ")
        if not content or content.startswith("#"):
            continue
        indent = len(line) - len(content)
        while indents and indents[-1] >= indent:
            indents.pop()
        indents.append(indent)
        run = re.match(r"(?:-\s+)*", content)
        dashes = run.group(0).count("-") if run else 0
        deepest = max(deepest, len(indents) + dashes + _bracket_depth(content))
    return deepest


def _bracket_depth(text: str) -> int:
    depth = deepest = 0
    for character in re.findall(r"[\[\]{}]", text):
        depth += 1 if character in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def kind_of(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def human_size(n_bytes: int) -> str:
    """A size for people: 512 B, 1.5 KB, 95.4 MB (powers of 1024)."""
    size = float(n_bytes)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TB"


def visible(word: str) -> str:
    """`word` quoted with invisible characters shown (a byte-order mark, a zero-width space, a tab): for error messages."""
    return ascii(word) if any(not c.isprintable() or c in "\ufeff\u200b\u200c\u200d\u2060" for c in word) else repr(word)
