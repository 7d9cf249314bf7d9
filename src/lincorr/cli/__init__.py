"""The `lincorr` command: parse arguments, call the library, print.

Each command group lives in its own module and adds its subcommands here; options shared
between groups are defined once in `options`. Handlers write no files: results save themselves.
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import re
import sys
import time

from collections.abc import Collection
from importlib import import_module
from typing import NoReturn

from lincorr import __version__
from lincorr.cli.config import with_config
from lincorr.cli.listing import MODULE, SYSTEMS
from lincorr.cli.options import CommandParser, check_output_directories, check_tracking, check_user_files
from lincorr.cli.spellings import add_global_options, apply_preset
from lincorr.errors import DeviceError, InputError, LincorrError, StorageError, UsageError, printable
from lincorr.progress import quiet

# What the machine, not lincorr, refused: a full disk or quota, a read-only disk, a missing permission.
SHARED_ERROR_GRACE_S = 30  # far longer than the two ranks of one launch drift apart, even on a loaded machine
ENVIRONMENT_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM}
# numpy's `tofile` (under `np.save`) reports a write the disk cut short with no errno, only the byte counts.
SHORT_WRITE = re.compile(r"\d+ requested and \d+ written")
# An error line quotes what a user gave (a path, a template), which can be thousands of characters long: each word is
# cut to its ends past QUOTED_WORD characters, and the line past MAX_LINE, so that it still says what to do.
QUOTED_WORD, MAX_LINE = 200, 2000
LONG_WORD = re.compile(rf"\S{{{QUOTED_WORD + 1},}}")
LINE_BREAK = re.compile(r"\r?\n")
# How torch's CPU allocator and safetensors' mmap say that an allocation failed (they raise a plain RuntimeError).
OUT_OF_MEMORY_WORDS = ("Cannot allocate memory", "can't allocate memory", "DefaultCPUAllocator: not enough memory")


def build_parser(built: Collection[str] | None = None) -> argparse.ArgumentParser:
    """The command line, with the options of the commands of every module in `built` (`listing.SYSTEMS`; all by default);
    every other command is listed by its help line and takes any arguments."""
    parser = CommandParser(prog="lincorr", description="Linear correlation between knowledge prompts of a language model.",
                           formatter_class=argparse.RawDescriptionHelpFormatter,
                           epilog="Run `lincorr COMMAND --help` for a command's options and defaults.")
    add_global_options(parser)
    parser.add_argument("--version", action="version", version=f"lincorr {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", help=argparse.SUPPRESS)
    listing = []
    for title, modules in SYSTEMS:
        before = len(commands._choices_actions)
        for module, lines in modules:
            if built is None or module in built:
                import_module(f"lincorr.cli.{module}").add_commands(commands)
            else:
                for name, line in lines.items():
                    commands.add_parser(name, help=line, add_help=False)
        listing.append((title, commands._choices_actions[before:]))
    parser.description = f"{parser.description}\n\n" + "\n\n".join(
        f"{title}:\n" + "\n".join(f"  {action.dest:<13} {action.help}" for action in actions) for title, actions in listing)
    return parser


def parser_for(argv: list[str]) -> argparse.ArgumentParser:
    """The parser of the command `argv` names, with only its module's options: its module alone imports torch and the
    studies it runs. `--help`, `--version`, and a missing or unknown command end here, before any module is imported."""
    named = build_parser(built=()).parse_known_args(argv)[0].command
    return build_parser(built={MODULE[named]})


def main(argv: list[str] | None = None) -> int:
    """Run one command; every mistake a user can fix ends in one `lincorr: error: ...` line and exit code 2.

    Ctrl-C, SIGTERM and a closed pipe propagate, once every `finally` here has run, to `lincorr.__main__`, which ends the process.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        parser = parser_for(argv)
        args = parser.parse_args(with_config(parser, argv))
    except SystemExit as done:  # --help or --version
        return done.code if isinstance(done.code, int) else 0
    except LincorrError as error:
        return report_error(error)
    configure_logging(getattr(args, "verbose", False))
    from lincorr.provenance import record_command

    record_command(argv)  # saved results name the command that wrote them
    team, finished, status, met = None, False, 0, False
    try:
        team = join_run(args)
        if team is not None and not team.is_main:
            serve_run(args, team)
        else:
            apply_preset(args)
            check_output_directories(args)
            check_tracking(args)
            check_user_files(args)
            with quiet(getattr(args, "quiet", False)):  # progress bars are decided here, once
                args.handler(args)
        finished = True
    except LincorrError as error:
        finished = True
        status = report_error(error, rank=team.rank if team is not None and not team.is_main else None)
    except BrokenPipeError:
        # The reader went away (`| head`): the command is over; `lincorr.__main__` ends the process quietly.
        finished = True
        raise
    except (MemoryError, RuntimeError) as error:
        if not out_of_memory(error):
            raise
        finished = True
        status = report_error(DeviceError(f"the machine ran out of memory ({' '.join(str(error).split())[:200] or 'MemoryError'}); "
                                          "nothing half-written was left; `lincorr models` says what each model needs: choose a "
                                          "smaller model, --batch-size 8, --dtype bfloat16, or a machine with more memory"))
    except OSError as error:
        refusal = machine_refusal(error)
        if refusal is None:
            raise
        finished = True
        status = report_error(refusal)
    finally:
        record_command(None)  # what this process saves later (as a library) was not written by this command
        met = end_run(team, finished)
    if met:
        end_rank_process(status)
    return status


def machine_refusal(error: OSError) -> LincorrError | None:
    """The line for an OSError that the machine, not lincorr, raised (a full disk, a read-only one, a missing permission,
    a path too long for the file system); None for any other, which is a bug of lincorr's."""
    if error.errno == errno.ENAMETOOLONG:  # a path given with an option, or LINCORR_CACHE_DIR, each checked in most places
        return InputError(f"{error.filename or 'a path'} is too long a path, or holds too long a name, for the file system; "
                          "shorten it (--out, a file option, or LINCORR_CACHE_DIR)")
    short_write = error.errno is None and SHORT_WRITE.fullmatch(str(error)) is not None
    if error.errno not in ENVIRONMENT_ERRNOS and not short_write:
        return None
    # Raised while writing: staged outputs and cache temporaries were removed on the way out.
    what = f"the disk took fewer bytes than were written ({error}), as a full one does" if short_write else error.strerror
    return StorageError(f"{what}: {error.filename or 'while writing'}; nothing half-written was left; free space or choose "
                        "another location")


def out_of_memory(error: BaseException) -> bool:
    """Whether `error` says an allocation failed: Python's MemoryError, torch's on a GPU, or the CPU allocator's and
    safetensors' mmap under a memory limit (raised as RuntimeError with ENOMEM's words)."""
    if isinstance(error, MemoryError) or type(error).__name__ == "OutOfMemoryError":
        return True
    message = str(error)
    return any(words in message for words in OUT_OF_MEMORY_WORDS)


def join_run(args):
    """This process's team when started by torchrun/accelerate with several processes, else None."""
    if "WORLD_SIZE" not in os.environ:  # not launched: no team, and no torch to import for a listing
        return None
    from lincorr.distributed import join_team, launched_world_size

    if launched_world_size() > 1 and getattr(args, "device_map", None):
        raise UsageError("--device-map spreads one model over several GPUs in one process; under torchrun each process "
                           "takes one GPU: drop --device-map, or run one process")
    return join_team(getattr(args, "device", None))


def serve_run(args, team) -> None:
    """Ranks other than 0 collect the pieces of logit tables rank 0 hands them, loading models as this command does."""
    from lincorr.cli.options import load_lm
    from lincorr.collection import serve_collection

    serve_collection(team, lambda spec: load_lm(args, spec))


def end_run(team, finished: bool) -> bool:
    """Rank 0 tells the others to stop once its command is over; an interrupted or crashed run is ended by the launcher.

    Whether every rank got here normally and met the others: then this process ends through `end_rank_process`.
    """
    if team is None:
        return False
    from lincorr.distributed import leave_team

    if team.is_main and finished:
        team.broadcast({"op": "stop"})
    if finished:
        wait_for_every_rank()
    leave_team(together=False)
    return finished


def end_rank_process(status: int) -> NoReturn:
    """End a torchrun rank whose ranks have all met at the end of the command, skipping the interpreter's shutdown.

    `destroy_process_group` leaves gloo's threads running (its I/O loop and its two workers stop only with the process), so
    they would still run while the interpreter and the C++ runtime tear down around them; under load one of them can meet
    that teardown and abort the rank ("terminate called without an active exception", SIGABRT), and torchrun then stops
    every other rank, rank 0 included, before it has finished. No rank needs another any more, so the process ends here as
    a normal exit would for Python code (other threads joined, atexit handlers run, stdout and stderr flushed) and then
    at once, with `status`, before any of that teardown starts.
    """
    import atexit
    import threading

    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def wait_for_every_rank() -> None:
    """Return once every rank has got here, through the rendezvous store rather than a gloo barrier: a rank leaving a gloo
    barrier may close its connections while another is still reading the barrier's last message, and under load gloo then
    aborts the reader ("terminate called without an active exception", pytorch/gloo#155). Each rank reaches this after its
    last collective, so none tears down while another still reads from it."""
    import torch.distributed as dist

    store = dist.distributed_c10d._get_default_store()
    store.set(f"lincorr/done/{dist.get_rank()}", "1")
    store.wait([f"lincorr/done/{rank}" for rank in range(dist.get_world_size())])


def report_error(error: LincorrError, *, rank: int | None = None) -> int:
    """The one line every mistake ends in; exit code 2.

    Under torchrun every process meets the same mistake in the command line or its files, so rank 0 (or a process
    started alone) prints it; an error met by another rank while serving its share (`rank`) is its own and is printed.
    Another rank meeting a shared mistake waits for rank 0 to end the run first, because the launcher stops every
    process as soon as one exits with an error, and a rank leaving at once could stop rank 0 before it has spoken;
    if rank 0 has not ended the run within the grace period, the mistake was this rank's alone and it says so.
    """
    where = f"rank {rank}: " if rank is not None else ""
    launched_rank = os.environ.get("RANK", "0")
    if rank is None and launched_rank != "0":
        time.sleep(SHARED_ERROR_GRACE_S)
        where = f"rank {launched_rank}: "
    # Joined at its line breaks alone: splitlines() also splits at the separators a name may hold (U+2028, \x1c, ...),
    # and the line named a file with a space where it has one; `printable` shows those as their escapes.
    print(f"lincorr: error: {where}{printable(shortened(' '.join(LINE_BREAK.split(str(error)))))}", file=sys.stderr)
    return 2


def shortened(line: str) -> str:
    """An error line with each word of over QUOTED_WORD characters cut to its ends, and then the line to MAX_LINE."""
    line = LONG_WORD.sub(lambda word: f"{word[0][:60]}...{word[0][-30:]} ({len(word[0]):,} characters)", line)
    return line if len(line) <= MAX_LINE else f"{line[:MAX_LINE - 500]} ... ({len(line):,} characters) ... {line[-400:]}"


def configure_logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="lincorr: %(message)s")
    if not verbose:
        # transformers and huggingface_hub read these when first imported; a command that loads no model never imports them
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        if "transformers" in sys.modules:
            from transformers.utils import logging as hf_logging

            hf_logging.set_verbosity_error()
            hf_logging.disable_progress_bar()
