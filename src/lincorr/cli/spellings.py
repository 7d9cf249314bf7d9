"""One spelling per concept on the command line: the options every command shares (-v, --quiet, --mlflow, --preset, --paper-table),
and the older spellings kept working as aliases that say, in one line, what they are now."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

# The environment variable that stands for --mlflow when the command line does not give it.
MLFLOW_VARIABLE = "LINCORR_MLFLOW"


class Alias(argparse.Action):
    """An older spelling that keeps working: it sets what `canonical` sets and says so in one line on stderr.

    `value`: what a switch (`--paper`) stands for; `convert`: how an option's value (`--protocol averaged`) becomes the canonical one's.
    """

    def __init__(self, option_strings, dest, *, canonical: str, value=None, convert: Callable[[str], object] | None = None, **kwargs):
        super().__init__(option_strings, dest, nargs=0 if value is not None else None, help=argparse.SUPPRESS, **kwargs)
        self.canonical, self.value, self.convert = canonical, value, convert

    def __call__(self, parser, namespace, values, option_string=None):
        if self.value is not None:
            setattr(namespace, self.dest, self.value)
        else:
            setattr(namespace, self.dest, self.convert(values) if self.convert else values)
        print(f"lincorr: note: {option_string} is an older spelling of {self.canonical}; it still works", file=sys.stderr)


def add_alias(parser, option: str, dest: str, canonical: str, **kwargs) -> None:
    """`option`, kept working as an alias of `canonical` (see `Alias`), and left out of --help."""
    parser.add_argument(option, dest=dest, action=Alias, canonical=canonical, default=argparse.SUPPRESS, **kwargs)


def add_global_options(parser) -> None:
    """-v/--verbose, --quiet and --mlflow, accepted before or after the subcommand.

    Their default is to leave the attribute unset, so a subcommand that does not see one keeps what `lincorr -v` set.
    """
    group = parser.add_argument_group("global options")
    group.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help="show library log messages")
    group.add_argument("--quiet", action="store_true", default=argparse.SUPPRESS, help="no progress bars")
    group.add_argument("--mlflow", metavar="URI", default=argparse.SUPPRESS,
                       help=f"log every result the command saves as an MLflow run at URI, e.g. file:./mlruns (or set {MLFLOW_VARIABLE}; "
                            "needs pip install 'lincorr[mlflow]')")
    # Read into the command line before parsing (`cli.config.with_config`); declared here for --help.
    group.add_argument("--config", metavar="FILE", default=argparse.SUPPRESS,
                       help="the command's options from a YAML file (option: value); the command line wins over it")


def add_preset_option(parser, paper: str, *, settings: dict | None = None, choices: Sequence[str] = ("lincorr", "paper"),
                      other: str = "lincorr's defaults, as every option below shows them") -> None:
    """--preset: the one way to ask for the paper's setting (`paper`, what it does in words).

    `settings`: the options `--preset paper` sets, {dest: value}; `apply_preset` sets them after parsing.
    """
    parser.add_argument("--preset", choices=tuple(choices), default=choices[0], help=f"{choices[0]}: {other}; paper: {paper}")
    parser.set_defaults(paper_settings=settings or {})


def add_paper_table_option(parser, tables: Sequence[str], help_text: str) -> None:
    """--paper-table N: the rows of one of the paper's tables; a command with one table also keeps its older --tableN."""
    parser.add_argument("--paper-table", choices=tuple(tables), default=None, metavar="N" if len(tables) > 1 else tables[0],
                        help=f"{help_text} ({', '.join(tables)})" if len(tables) > 1 else help_text)
    if len(tables) == 1:
        add_alias(parser, f"--table{tables[0]}", "paper_table", f"--paper-table {tables[0]}", value=tables[0])


def apply_preset(args) -> None:
    """Under `--preset paper`, the options the command's preset sets (`add_preset_option`); the preset wins over them."""
    if getattr(args, "preset", None) != "paper":
        return
    for dest, value in args.paper_settings.items():
        setattr(args, dest, value)
