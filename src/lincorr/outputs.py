"""Writing results: a whole output directory appears at once or not at all, and replaces the previous run's whole."""

from __future__ import annotations

import contextlib
import dataclasses
import csv
import datetime
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from lincorr import strict_json
from lincorr.filesystem import OUTPUT_MARKER, atomic_file, check_output_directory, replaced_directory


@contextlib.contextmanager
def staged_directory(target):
    """Yield a staging directory; on success it replaces `target` whole (no file of an earlier run stays), on error nothing changes.

    `target` must be new, empty, or an earlier lincorr output (see `filesystem.check_output_directory`); through a link, the
    directory it points to is replaced, not the link.
    """
    with replaced_directory(check_output_directory(target)) as staging:
        yield staging
        (staging / OUTPUT_MARKER).write_text("written by lincorr; the next run that writes here replaces this directory whole\n",
                                             encoding="utf-8")


def write_json(path, payload) -> None:
    """Pretty UTF-8 strict JSON (undefined numbers as null, explained under "undefined")."""
    Path(path).write_text(strict_json.dumps(payload, indent=2) + "\n", encoding="utf-8")


def write_array(path, values: np.ndarray) -> None:
    """A float32 `.npy` (loads with allow_pickle=False)."""
    np.save(path, np.ascontiguousarray(values, dtype=np.float32), allow_pickle=False)


def none_if_nan(value) -> float | None:
    """A float for JSON/CSV, None for NaN."""
    value = float(value)
    return None if np.isnan(value) else value


def write_csv(path, header: Sequence[str], rows: Sequence[Sequence]) -> None:
    """A UTF-8 CSV with a header row; None becomes an empty field."""
    with open(path, "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows([["" if v is None else v for v in row] for row in rows])


def write_text_atomic(path, text: str) -> None:
    """Write a text file through a temporary file, so a crash never leaves half of it."""
    with atomic_file(path) as out:
        out.write(text)


def settings_key(config) -> dict:
    """A config dataclass as JSON-ready settings: what provenance.json records and what a stored study row is keyed by."""
    return dataclasses.asdict(config)


def write_provenance(directory, *, study: str, model_fingerprint=None, settings: dict | None = None) -> None:
    """provenance.json: the study, the command that wrote `directory` (from Python: None, and the Python call), lincorr's version,
    the model's fingerprint, the settings and their seed, the environment (versions, threads, dtype, device, batch size) and the time.

    Every study's `save` writes it under the same name (through `results.record`), so a reader (`lincorr report`,
    `lincorr.load_result`) finds which study wrote a directory and where its result came from. `model_fingerprint` is a string, or a mapping
    from model name to fingerprint for studies over several models.
    """
    from lincorr import __version__
    from lincorr.provenance import environment, python_call, running_command

    command = running_command()
    write_json(Path(directory) / "provenance.json", {
        "study": study,
        "command": command,
        "python_call": None if command else python_call(),
        "lincorr_version": __version__,
        "model_fingerprint": model_fingerprint,
        "settings": settings,
        "seed": (settings or {}).get("seed"),
        "environment": environment(),
        "written_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    })
