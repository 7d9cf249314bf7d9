"""`python -m lincorr` and the `lincorr` command: the process around `cli.main`, so that signals and pipes end it the conventional way.

Everything heavy (torch, transformers, the commands) is imported inside `main`, after the handlers are in place, so
Ctrl-C during start-up ends like Ctrl-C during the work: every staged output and cache temporary removed on the
way out (their `finally` and `except BaseException` run), one line on stderr, exit 128 + the signal (130 for SIGINT,
143 for SIGTERM). A reader that goes away (`lincorr templates | head -1`) ends the command quietly with 141, what a
shell reports for a process SIGPIPE stopped; Python's own advice for this case is followed: stdout is pointed at
/dev/null so the flush at exit cannot raise again.
"""

import ctypes
import ctypes.util
import os
import signal
import sys

INTERRUPTED = "lincorr: interrupted; run the same command again to resume from the cache"


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the process stands so that it unwinds as Ctrl-C does."""


def terminate(signum, frame):
    raise Terminated


# glibc's mallopt parameter, and the block size from which malloc maps each block apart, so that freeing it gives the
# memory back to the system. By default the threshold rises (up to 32 MiB) as big blocks are freed, and a model's trained
# copy then stays in the heap once freed: MemAvailable, which fine-tuning chooses its memory plan by, fell by 3-7 GiB
# after one training of qwen2.5-coder-0.5b and stayed there (0.3-0.5 GiB with the threshold fixed, at the same speed;
# 2026-11-29), and the 1.5B's second training of a run found too little memory for any plan.
M_MMAP_THRESHOLD, MAPPED_FROM_BYTES = -3, 128 * 1024


def hand_back_freed_memory() -> bool:
    """Fix glibc malloc's mapping threshold at 128 KiB (its starting value), so that a freed model copy returns to the
    system; False where the C library is not glibc (musl, macOS and Windows give big blocks back on their own terms)."""
    name = ctypes.util.find_library("c")
    try:
        mallopt = ctypes.CDLL(name).mallopt if name else None
    except (OSError, AttributeError):
        return False
    return bool(mallopt and mallopt(M_MMAP_THRESHOLD, MAPPED_FROM_BYTES))


def main() -> int:
    signal.signal(signal.SIGTERM, terminate)
    hand_back_freed_memory()
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
