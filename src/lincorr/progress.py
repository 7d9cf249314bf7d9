"""Progress bars, decided once per process and never passed around: shown at a terminal, hidden in logs, pipes and under `--quiet`."""

from __future__ import annotations

import contextlib
import sys

from tqdm.auto import tqdm

_hidden = False


@contextlib.contextmanager
def quiet(hidden: bool = True):
    """Hide every progress bar inside the block (`lincorr --quiet` runs its command inside one)."""
    global _hidden
    before, _hidden = _hidden, hidden
    try:
        yield
    finally:
        _hidden = before


def progress_bar(iterable=None, **options) -> tqdm:
    """A tqdm bar that disappears when done: tqdm's own `disable=None` shows it only when stderr is a terminal."""
    return tqdm(iterable, disable=True if _hidden else None, leave=False, **options)


def shown() -> bool:
    """Whether progress bars are shown: for the notes a person at the terminal sees beside them."""
    return not _hidden and sys.stderr.isatty()
