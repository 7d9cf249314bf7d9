"""`python -m lincorr` and the `lincorr` command: the process around `cli.main`, so that signals and pipes end it the conventional way.

Everything heavy (torch, transformers, the commands) is imported inside `main`, after the handlers are in place, so
Ctrl-C during start-up ends like Ctrl-C during the work: every staged output and cache temporary removed on the
way out (their `finally` and `except BaseException` run), one line on stderr, exit 128 + the signal (130 for SIGINT,
143 for SIGTERM). A reader that goes away (`lincorr templates | head -1`) ends the command quietly with 141, what a
shell reports for a process SIGPIPE stopped; Python's own advice for this case is followed: stdout is pointed at
/dev/null so the flush at exit cannot raise again.
"""

import os
import signal
import sys

INTERRUPTED = "lincorr: interrupted; run the same command again to resume from the cache"


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the process stands so that it unwinds as Ctrl-C does."""


def terminate(signum, frame):
    raise Terminated


def main() -> int:
    signal.signal(signal.SIGTERM, terminate)
    try:
        from lincorr.cli import main as run_command

        status = run_command()
        sys.stdout.flush()  # a reader gone away shows here, inside the handlers, not in the flush at exit
        return status
    except KeyboardInterrupt as interrupt:
        for number in (signal.SIGINT, signal.SIGTERM):  # a second Ctrl-C while the line is written changes nothing
            signal.signal(number, signal.SIG_IGN)
        print(INTERRUPTED, file=sys.stderr)
        return 128 + (signal.SIGTERM if isinstance(interrupt, Terminated) else signal.SIGINT)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE


if __name__ == "__main__":
    sys.exit(main())
