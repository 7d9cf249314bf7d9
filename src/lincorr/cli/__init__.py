"""The `lincorr` command: parse arguments, call the library, print.

Each command group lives in its own module and adds its subcommands here; options shared
between groups are defined once in `options`. Handlers write no files: results save themselves.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from lincorr import __version__
from lincorr.cli.ablation import add_ablation_command
from lincorr.cli.core import add_core_commands
from lincorr.cli.registry import add_registry_commands
from lincorr.cli.studies import add_study_commands
from lincorr.cli.training import add_training_commands
from lincorr.errors import LincorrError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lincorr", description="Linear correlation between knowledge prompts of a language model.")
    parser.add_argument("-v", "--verbose", action="store_true", help="show library log messages")
    parser.add_argument("--version", action="version", version=f"lincorr {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_core_commands(commands)
    add_registry_commands(commands)
    add_study_commands(commands)
    add_ablation_command(commands)
    add_training_commands(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args.verbose)
    try:
        args.handler(args)
    except LincorrError as error:
        print(f"lincorr: error: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader went away (e.g. `| head`); silence the flush at exit too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print("lincorr: interrupted; run the same command again to resume from the cache", file=sys.stderr)
        return 130
    return 0


def configure_logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="lincorr: %(message)s")
    if not verbose:
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
