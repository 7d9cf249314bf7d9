"""`--config FILE`: a command's options written down as YAML, so a study can be shared as a file and run again.

    # study.yaml, for `lincorr fit city country --config study.yaml`
    n-inputs: 2000
    seed: 3
    estimator: ridge
    top: [Tokyo, Paris]

Each key is a long option of the command (`n-inputs` or `n_inputs` for `--n-inputs`), each value what the command
line would take: a number or text, `true` for a switch, a list for an option that takes several values. A number
is passed as it is written, as the command line would pass it (YAML 1.1 would read `010` as 8 and `1:30` as 90). The
options are read into the command line right after the command's name, so anything typed on the command line wins
over the file. A key the command does not know, one written twice (`n_inputs` and `n-inputs`), or a value of the wrong
kind, is one error line naming the file.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import yaml

from lincorr.cli.values import Distinct, json_object, user_path
from lincorr.errors import InputError
from lincorr.reading import FLOAT_DIGITS, check_nesting, human_size, read_text, regular_file_size, yaml_depth
from lincorr.schema import REAL, TEXT, Entries, FileKind, Items, checked

class ConfigLoader(yaml.SafeLoader):
    """Safe YAML that refuses a key written twice, which the last one would otherwise silently win."""


def unique_keys(loader: ConfigLoader, node: yaml.MappingNode) -> dict:
    first_lines: dict = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if isinstance(key, (str, int, float, bool)):
            if key in first_lines:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key '{key}' (first on line {first_lines[key]})",
                                                        key_node.start_mark)
            first_lines[key] = key_node.start_mark.line + 1
    return loader.construct_mapping(node, deep=True)


def as_written(loader: ConfigLoader, node: yaml.ScalarNode) -> str:
    """A date or time (`seed: 2024-01-01`) as the text written: an option's value is what the command line would take."""
    return loader.construct_scalar(node)


def number_as_written(loader: ConfigLoader, node: yaml.ScalarNode) -> str:
    """A number as the text written, for the option's own type to read as it reads the command line; one of more than
    FLOAT_DIGITS digits is refused here (Python reads no int of over 4,300)."""
    text = loader.construct_scalar(node)
    digits = sum(character.isdigit() for character in text)
    if digits > FLOAT_DIGITS:
        raise yaml.constructor.ConstructorError(None, None, f"a number of {digits:,} digits is no option's value", node.start_mark)
    return text


def refused(loader: ConfigLoader, node: yaml.Node):
    raise yaml.constructor.ConstructorError(None, None, f"!!{node.tag.rpartition(':')[2]} is not an option's value; "
                                            "write text, a number, true or a list", node.start_mark)


ConfigLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, unique_keys)
ConfigLoader.add_constructor("tag:yaml.org,2002:timestamp", as_written)
ConfigLoader.add_constructor("tag:yaml.org,2002:int", number_as_written)
ConfigLoader.add_constructor("tag:yaml.org,2002:float", number_as_written)
# Safe YAML's other values that are no JSON value (bytes, a set, pairs) would meet a check that knows only JSON's.
for tag in ("binary", "set", "omap", "pairs"):
    ConfigLoader.add_constructor(f"tag:yaml.org,2002:{tag}", refused)

CONFIG_FILE = FileKind("config file", Entries((TEXT, REAL, bool, Items((TEXT, REAL)))),
                       "write one `option: value` per line, the options of the command's --help", written_by="a config file")


# A command's options fill a page: a larger file is no config file, and YAML's parser would take minutes and gigabytes on it.
MAX_CONFIG_BYTES = 1024 * 1024
# How much of a key or value a config file's error quotes.
QUOTED = 100

# What argparse takes for --config: the option, or an abbreviation no other option shares (--con is also --contexts').
CONFIG_SPELLINGS = ("--conf", "--confi", "--config")


def with_config(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """`argv` with every `--config FILE` replaced by the options FILE holds, placed right after the command's name."""
    if not any(token.split("=", 1)[0] in CONFIG_SPELLINGS for token in argv):
        return argv
    rest, files = [], []
    tokens = iter(argv)
    for token in tokens:
        if token in CONFIG_SPELLINGS:
            files.append(next(tokens, ""))
        elif token.split("=", 1)[0] in CONFIG_SPELLINGS:
            files.append(token.split("=", 1)[1])
        else:
            rest.append(token)
    command, at = command_parser(parser, rest)
    written = [option for path in files for option in options_of(path, command)]
    twice = next((action for index, (action, _) in enumerate(written) if any(action.dest == other.dest for other, _ in written[:index])), None)
    if twice is not None:  # the later file would win without a word
        raise InputError(f"two --config files set {twice.option_strings[-1]}; keep it in one")
    end = rest.index("--") if "--" in rest else len(rest)
    # A single value the command line gives later wins by argparse's own rule; the values of a repeatable option or an
    # option of several values would add to the command line's (`--top Paris` then refused as given twice), so the
    # command line's replace them.
    given = given_in(command, rest[at:end])
    written = [(action, tokens) for action, tokens in written if not (accumulates(action) and action in given)]
    # An option of several values would take the positionals after it (`ablate --seeds 1 2 country capital`): those go
    # last, before any "--".
    leading = [tokens for action, tokens in written if action.nargs not in ("+", "*")]
    trailing = [tokens for action, tokens in written if action.nargs in ("+", "*")]
    return rest[:at] + [t for tokens in leading for t in tokens] + rest[at:end] + [t for tokens in trailing for t in tokens] + rest[end:]


def long_options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """`parser`'s options by their long spellings (`--seed`, `--save-dir`)."""
    return {option: action for action in parser._actions for option in action.option_strings if option.startswith("--")}


def accumulates(action: argparse.Action) -> bool:
    """Whether `action` gathers values rather than keeping the last one given."""
    return action.nargs in ("+", "*") or isinstance(action, (argparse._AppendAction, Distinct))


def given_in(parser: argparse.ArgumentParser, tokens: list[str]) -> set[argparse.Action]:
    """The options of `parser` that `tokens` give, spelt in full, with "=", or as an abbreviation, resolved as argparse
    resolves them: a full name is that option even where it begins another (`--seed` is not `--seeds`)."""
    options = long_options(parser)
    given = set()
    for name in {token.split("=", 1)[0] for token in tokens if token.startswith("--") and len(token) > 2}:
        meant = {options[name]} if name in options else {action for option, action in options.items() if option.startswith(name)}
        if len(meant) == 1:  # more would be argparse's "ambiguous option" error
            given |= meant
    return given


def command_parser(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[argparse.ArgumentParser, int]:
    """The parser of the (sub)command `argv` names, and the position just after its name in `argv`."""
    at = 0
    while True:
        choices = next((a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        named = next((i for i in range(at, len(argv)) if choices and argv[i] in choices), None)
        if named is None or not choices:
            return parser, at
        parser, at = choices[argv[named]], named + 1


def options_of(path: str, parser: argparse.ArgumentParser) -> list[tuple[argparse.Action, list[str]]]:
    """The command-line tokens of the config file `path` for `parser`'s command, option by option."""
    if not path:
        raise InputError("--config needs a file: --config study.yaml")
    try:
        path = user_path(path)  # `--config=~/study.yaml` reaches lincorr as written: the shell expands no ~ after "="
    except argparse.ArgumentTypeError as error:
        raise InputError(f"--config {error}") from None
    size = regular_file_size(path, CONFIG_FILE.what)
    if size > MAX_CONFIG_BYTES:
        raise InputError(f"{CONFIG_FILE.what} {path} is {human_size(size)}, more than the {human_size(MAX_CONFIG_BYTES)} a config file "
                         f"may be; {CONFIG_FILE.remedy}")
    text = read_text(path, CONFIG_FILE.what)
    check_nesting(path, CONFIG_FILE.what, yaml_depth(text))
    try:
        document = yaml.load(text, Loader=ConfigLoader)
    except yaml.YAMLError as error:
        raise InputError(f"{CONFIG_FILE.what} {path} is not YAML ({' '.join(str(error).split())[:200]}); {CONFIG_FILE.remedy}") from None
    known = long_options(parser)
    check_no_mapping(document, known, path)
    document = checked({} if document is None else document, CONFIG_FILE, Path(path))
    if not document:
        raise InputError(f"{CONFIG_FILE.what} {path} holds no options; {CONFIG_FILE.remedy}")
    tokens: list[tuple[argparse.Action, list[str]]] = []
    keys: dict[str, object] = {}  # by destination: an option and its older spelling (`out`, `save_dir`) are one
    for key, value in document.items():
        option = "--" + str(key).replace("_", "-")
        action = known.get(option)
        if action is None or option in ("--config", "--help"):
            raise InputError(f"{CONFIG_FILE.what} {path}: '{quoted(key)}' is not an option of `{parser.prog}`; see `{parser.prog} --help`")
        if action.dest in keys:  # the later one would win without a word
            raise InputError(f"{CONFIG_FILE.what} {path}: '{quoted(keys[action.dest])}' and '{quoted(key)}' set the same option; keep one")
        keys[action.dest] = key
        given = option_tokens(option, action, value, path)
        if any("\0" in token for token in given):  # no command line can hold one, and no path or word may
            raise InputError(f"{CONFIG_FILE.what} {path}: {quoted(key)} holds a NUL character (\\0); remove it")
        tokens.append((action, given))
    return tokens


def check_no_mapping(document, known: dict[str, argparse.Action], path: str) -> None:
    """Refuse a value written as a YAML mapping, saying how to write an option that takes a JSON object: YAML's mapping
    would hold its numbers as written text (`number_as_written`), so it cannot stand for the JSON the option reads."""
    for key, value in document.items() if isinstance(document, dict) else ():
        if isinstance(value, dict):
            option = "--" + str(key).replace("_", "-")
            takes_json = option in known and known[option].type is json_object
            how = (f"write its JSON as quoted text, as the command line takes it: {option[2:]}: '{{\"attn_implementation\": \"eager\"}}'"
                   if takes_json else "write text, a number, true or a list")
            raise InputError(f"{CONFIG_FILE.what} {path}: {quoted(key)} is a mapping, which no option takes; {how}")


def quoted(value) -> str:
    """A key or value of the file as an error quotes it: at most QUOTED characters."""
    text = str(value)
    return text if len(text) <= QUOTED else f"{text[:QUOTED]}... ({len(text):,} characters)"


def option_tokens(option: str, action: argparse.Action, value, path: str) -> list[str]:
    """`value` as the command line spells it for `action`: a switch alone, a list as several values."""
    if action.nargs == 0:
        if value is not True:
            raise InputError(f"{CONFIG_FILE.what} {path}: {option[2:]} is a switch; write `{option[2:]}: true` or leave it out")
        return [option]
    if isinstance(value, list):
        if action.nargs in ("+", "*") or isinstance(action.nargs, int):
            dashed = next((str(item) for item in value if str(item).startswith("-") and not is_number(str(item))), None)
            if dashed is not None:  # the command line would read it as an option, whatever the file meant
                raise InputError(f"{CONFIG_FILE.what} {path}: {option[2:]}'s item '{quoted(dashed)}' starts with '-', which "
                                 f"{option} reads as the next option; remove the '-'")
            return [option, *map(str, value)]
        if isinstance(action, (argparse._AppendAction, Distinct)):  # a repeatable option: once per value
            return [f"{option}={item}" for item in value]  # one token each: an item that starts with "-" stays a value
        raise InputError(f"{CONFIG_FILE.what} {path}: {option[2:]} takes one value, not a list")
    if isinstance(value, bool):
        raise InputError(f"{CONFIG_FILE.what} {path}: {option[2:]} takes a value, not true or false")
    check_value(option, action, str(value), path)
    return [f"{option}={value}"]  # one token: a value that starts with "-" stays the option's value


def is_number(text: str) -> bool:
    """Whether argparse reads `text` as a (negative) number rather than an option: a finite one."""
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def check_value(option: str, action: argparse.Action, text: str, path: str) -> None:
    """`text` as `action` would convert and check it, refused here so that the error names the file, not the command line."""
    try:
        converted = action.type(text) if callable(action.type) else text
    except (argparse.ArgumentTypeError, ValueError, TypeError) as error:
        # Whole, as the command line's: each type quotes the value briefly itself, and `report_error` cuts a long line.
        raise InputError(f"{CONFIG_FILE.what} {path}: {option[2:]}: {error}") from None
    if action.choices is not None and converted not in action.choices:
        raise InputError(f"{CONFIG_FILE.what} {path}: {quoted(option[2:])} is {quoted(repr(text))}; choose one of "
                         f"{', '.join(map(str, action.choices))}")
