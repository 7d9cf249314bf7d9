"""The values options take on the command line, as argparse types and actions: each checked while parsing, so a wrong
value is one error line before any work (whole numbers, lists of names each once, finite numbers, a ridge penalty)."""

from __future__ import annotations

import argparse
import json
import math
import re
from collections.abc import Callable
from pathlib import Path

from lincorr.choices import split_names
from lincorr.errors import UsageError
from lincorr.reading import json_depth

MODEL_HELP = "bundled alias (`lincorr models` lists them), .gguf file, local directory or hub id"


# The largest whole number an option takes: below 2**53, every count stays exact in the float arithmetic that sizes
# splits and budgets, and no option counts more of anything than that.
MOST_WHOLE = 10**15

# Numbers as a command line writes them: ASCII digits, grouped by underscores if you like (1_000, as Python writes
# them). Python's int() and float() also read surrounding spaces and other scripts' digits ("٥"), which a typo or a
# pasted value can bring and no one reading the command sees as a number.
DIGITS = r"[0-9]+(?:_[0-9]+)*"
WHOLE = re.compile(rf"[+-]?{DIGITS}")
DECIMAL = re.compile(rf"[+-]?(?:{DIGITS}(?:\.(?:{DIGITS})?)?|\.{DIGITS})(?:[eE][+-]?{DIGITS})?")
NOT_FINITE = ("inf", "infinity", "nan", ".inf", ".nan")  # .inf and .nan: YAML's


def whole_number(minimum: int, maximum: int = MOST_WHOLE, why: str = "") -> Callable[[str], int]:
    """An argparse type: an integer from `minimum` to `maximum` (`why` says where the maximum comes from)."""

    def parse(text: str) -> int:
        if not WHOLE.fullmatch(text):
            raise argparse.ArgumentTypeError(f"expected a whole number, written in the digits 0-9 (1000 or 1_000), got {shown(text)}")
        digits = text.lstrip("+-").replace("_", "").lstrip("0") or "0"
        if len(digits) > len(str(maximum)):  # Python's int() reads no more than 4,300 digits
            if text.startswith("-"):
                raise argparse.ArgumentTypeError(f"must be at least {minimum}, got a negative number of {len(digits):,} digits")
            raise argparse.ArgumentTypeError(f"must be at most {maximum:,}{why}, got a number of {len(digits):,} digits")
        value = int(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        if value > maximum:
            raise argparse.ArgumentTypeError(f"must be at most {maximum:,}{why}, got {value:,}")
        return value

    return parse


def shown(text: str) -> str:
    """A value as an error quotes it: at most 100 characters."""
    return repr(text) if len(text) <= 100 else f"{text[:100]!r}... ({len(text):,} characters)"


COUNT = whole_number(1)
NON_NEGATIVE = whole_number(0)
SEED = whole_number(0, 2**64 - 1, " (numpy's and torch's seeds are 64 bits)")
# A million resamples put a 95% interval's ends within about 0.003 standard errors of the estimate of where infinitely
# many would (the 2.5% quantile's Monte Carlo error: sqrt(0.025 * 0.975 / 1e6) / 0.058); more only cost memory.
RESAMPLES = whole_number(1, 1_000_000, " (more resamples change no interval's third digit)")


def batch_size_option(text: str) -> int | str:
    """An argparse type: a positive whole number or `auto`."""
    return "auto" if text == "auto" else COUNT(text)


def names(example: str) -> Callable[[str], tuple[str, ...]]:
    """An argparse type: comma-separated names, each once and none empty (`choices.split_names`); `example` shows a valid list."""

    def parse(text: str) -> tuple[str, ...]:
        try:
            return split_names(text, "", example)  # argparse names the option
        except UsageError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    return parse


def counts(text: str) -> tuple[int, ...]:
    """An argparse type: comma-separated positive whole numbers, each once, e.g. 1000,2000,5000; in increasing order."""
    values = [COUNT(part) for part in names("1000,2000,5000")(text)]
    if len(set(values)) < len(values):
        raise argparse.ArgumentTypeError(f"{text!r} gives a number more than once; give each once")
    return tuple(sorted(values))


def model_spec(text: str) -> str:
    """An argparse type: a model spec that is not blank (an empty one would silently mean a default or fail late)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"{text!r} names no model; {MODEL_HELP}")
    path = Path(text).expanduser()
    if text.endswith(".gguf") and not path.is_file():
        what = "is not a regular file" if path.exists() else "does not exist (or is a link loop)"
        raise argparse.ArgumentTypeError(f"{text} {what}; a .gguf model is one file")
    return text


def user_path(text: str) -> str:
    """An argparse type: a path to read, with a leading `~` read as the home directory, as the shell reads it unquoted and
    as a config file's `inputs: ~/inputs.txt` means (it was looked for in a directory named `~`, and did not exist)."""
    if not text.startswith("~"):
        return text
    try:
        return str(Path(text).expanduser())
    except RuntimeError:  # ~user of a user this machine does not have
        raise argparse.ArgumentTypeError(f"{shown(text)} starts with a home directory this machine does not know; "
                                         "give the path in full") from None


def output_directory(text: str) -> str:
    """An argparse type: a directory to write, not blank, with a leading `~` read as the home directory (as the shell
    reads it unquoted, and as a config file's `out: ~/runs` means)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"{text!r} names no directory; give one, e.g. runs/first")
    try:
        return str(Path(text).expanduser())
    except RuntimeError:  # ~user of a user this machine does not have
        raise argparse.ArgumentTypeError(f"{shown(text)} starts with a home directory this machine does not know; "
                                         "give the path in full") from None


class Distinct(argparse.Action):
    """A repeatable option (or one of several values) whose values are each given once and none empty: a repeated
    value would be measured or shown twice, an empty one means nothing."""

    def __call__(self, parser, namespace, values, option_string=None):
        current = getattr(namespace, self.dest)
        # Appended in place, each value checked against a set: a config file's list of 100,000 --top words takes a
        # moment, where copying and counting the list at every value took hours.
        given = current if isinstance(current, DistinctValues) and not isinstance(values, list) else DistinctValues()
        repeated = set()
        for value in values if isinstance(values, list) else [values]:
            if isinstance(value, str) and not value.strip():
                parser.error(f"argument {option_string or self.metavar}: an empty value; give a value or leave the option out")
            if str(value) in given.seen:
                repeated.add(str(value))
            given.append(value)
            given.seen.add(str(value))
        if repeated:
            shown = sorted(repeated)
            parser.error(f"argument {option_string or self.metavar}: {', '.join(shown[:10])}"
                         f"{f' and {len(shown) - 10} more' if len(shown) > 10 else ''} given more than once; give each once")
        setattr(namespace, self.dest, given)


class DistinctValues(list):
    """The values of a `Distinct` option so far, with the set of their spellings."""

    def __init__(self, *args):
        super().__init__(*args)
        self.seen: set[str] = set(map(str, self))


def prompt_template(text: str) -> str:
    """An argparse type: a prompt template of at most MAX_TEMPLATE characters (its one "{}" is checked with the prompt)."""
    if len(text) > MAX_TEMPLATE:
        raise argparse.ArgumentTypeError(f"a template of {len(text):,} characters, over {MAX_TEMPLATE:,}; a prompt template "
                                         "is a sentence with one {}")
    return text


# A prompt is a sentence; 20,000 words of one took over a minute to tokenize for every input, and as long to stop.
MAX_TEMPLATE = 1000


def finite_number(text: str) -> float:
    """An argparse type: a float written as a decimal number (1e-5, 0.25, -3), neither NaN nor infinite, and not so near
    0 that it reads as 0."""
    if not DECIMAL.fullmatch(text):
        what = "must be a finite number" if text.strip().lower().lstrip("+-") in NOT_FINITE else "expected a number"
        raise argparse.ArgumentTypeError(f"{what}, written as in 1e-5, 0.25 or -3, got {shown(text)}")
    value = float(text)
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {shown(text)}, which is beyond a float's range")
    if value == 0 and any(digit in "123456789" for digit in text.lower().partition("e")[0]):
        raise argparse.ArgumentTypeError(f"{shown(text)} is too near 0 for a float to tell from 0 (below about 5e-324)")
    return value


def finite_number_that(accepts: Callable[[float], bool], requirement: str) -> Callable[[str], float]:
    """An argparse type: a finite float for which `accepts` holds; `requirement` says which in the error."""

    def parse(text: str) -> float:
        value = finite_number(text)
        if not accepts(value):
            raise argparse.ArgumentTypeError(f"must be {requirement}, got {shown(text)}")
        return value

    return parse


positive_number = finite_number_that(lambda value: value > 0, "positive")
fraction = finite_number_that(lambda value: 0 < value < 1, "between 0 and 1 (exclusive)")


def ridge_alpha(text: str) -> float | str:
    """"cv" or a finite, non-negative penalty."""
    if text == "cv":
        return text
    # A number a float cannot hold gets finite_number's reason; anything else written is no number (NaN: refused below).
    value = finite_number(text) if DECIMAL.fullmatch(text) else math.nan
    if not 0 <= value <= MOST_RIDGE_ALPHA:
        raise argparse.ArgumentTypeError(f"must be 'cv' or a number from 0 to {MOST_RIDGE_ALPHA:g}, got {shown(text)}")
    return value


# A larger penalty shrinks W's predictions so far that their squares fall below float64's range, and every prediction
# would read as the same number.
MOST_RIDGE_ALPHA = 1e100


# ---- the options ----


# A few options for from_pretrained: more text, or deeper nesting, than that is no set of options (json.loads recurses
# once a level and ends in a RecursionError past about a thousand).
MOST_JSON_OPTION_CHARACTERS = 10_000
MOST_JSON_OPTION_DEPTH = 8


def json_object(text: str) -> dict:
    """An argparse type: a JSON object, e.g. '{"attn_implementation": "eager"}', of at most MOST_JSON_OPTION_CHARACTERS
    characters nested at most MOST_JSON_OPTION_DEPTH deep."""
    example = "write an object like '{\"attn_implementation\": \"eager\"}'"
    if len(text) > MOST_JSON_OPTION_CHARACTERS:
        raise argparse.ArgumentTypeError(f"is {len(text):,} characters, more than the {MOST_JSON_OPTION_CHARACTERS:,} options take; {example}")
    if json_depth(text) > MOST_JSON_OPTION_DEPTH:
        raise argparse.ArgumentTypeError(f"nests {json_depth(text)} levels deep, more than {MOST_JSON_OPTION_DEPTH}; {example}")
    try:
        value = json.loads(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"is not JSON ({error}); {example}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"must be a JSON object like '{{\"attn_implementation\": \"eager\"}}', not {shown(text)}")
    return value
