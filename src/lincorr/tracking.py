"""Logging saved results to MLflow (the `mlflow` extra): one run per saved result, with its settings, numbers, files and provenance.

    lincorr.log_result(result, "runs/fit", "file:./mlruns")     # after result.save("runs/fit")

What is logged is read from the saved directory and the result's `summary()`, so the run holds what the directory holds.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import time
from collections.abc import Callable, Iterator, Mapping
from numbers import Real
from pathlib import Path
from typing import TypeVar

from lincorr.errors import LincorrError, OutputError, printable
from lincorr.results import PROVENANCE
from lincorr.schema import read_document

T = TypeVar("T")

__all__ = ["log_result", "require_mlflow", "check_tracker", "EXPERIMENT"]

# The experiment runs go to, unless MLFLOW_EXPERIMENT_NAME names another (MLflow's own variable for it).
EXPERIMENT = "lincorr"
INSTALL = "pip install 'lincorr[mlflow]'"
# The stores lincorr logs to: MLflow's local file store and a tracking server. (The database stores need SQLAlchemy,
# which the skinny client of the `mlflow` extra does not bring.)
SCHEMES = ("file", "http", "https")
MLFLOW_SERVICES = ("databricks", "databricks-uc", "uc")
MOST_URI_CHARACTERS = 2000  # a URI longer than a browser takes is no tracking address
MOST_STORE_ENTRIES_LOOKED_AT = 1000  # a store's experiments, enough to find one; `/` or a home directory has no .trash
ANSWER_SECONDS = 3.0  # how long a tracking server has to accept a connection, before and while logging
# What MLflow's client does with a server that does not answer: retries for minutes, unless told otherwise.
HTTP_SETTINGS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": str(int(ANSWER_SECONDS) + 2)}
# What MLflow accepts in a param or metric key on every system (a colon not on Windows, a slash would make a path).
KEY_CHARACTERS = re.compile(r"[^\w.\- ]")


def require_mlflow():
    """The mlflow module; one clear error when the `mlflow` extra is not installed."""
    try:
        import mlflow
    except ImportError:
        raise LincorrError(f"logging to MLflow needs the mlflow extra, which is not installed: {INSTALL}") from None
    return mlflow


def check_tracker(tracking_uri: str, out=None) -> str:
    """Before any work: the URI to log to, once `tracking_uri` is a store lincorr can log to now, a `file:` store it can
    write (a directory, or where one can be made, outside `out`, whose files the run logs) or a tracking server that
    accepts a connection within ANSWER_SECONDS; an OutputError where it is not. A file store comes back as an absolute
    `file:` URI, so that the logging writes where the check looked (a `~` expanded, the working directory fixed)."""
    import socket
    import urllib.parse

    shown = printable(without_password(tracking_uri))
    shown = shown if len(shown) <= 200 else f"{shown[:200]}... ({len(tracking_uri):,} characters)"
    example = "give a store such as file:./mlruns or http://host:5000"
    if len(tracking_uri) > MOST_URI_CHARACTERS or tracking_uri != tracking_uri.strip() or not tracking_uri:
        raise OutputError(f"--mlflow '{shown}' is no tracking URI; {example}")
    if not tracking_uri.isprintable():  # urllib drops line breaks and tabs silently; a NUL names no file
        raise OutputError(f"--mlflow {shown} holds a character that is not printable (a control character, or a byte "
                          f"that is no UTF-8); {example}")
    if tracking_uri in MLFLOW_SERVICES:  # MLflow reads these plain words as hosted services, not as directories
        raise OutputError(f"--mlflow {shown}: lincorr logs to {', '.join(f'{s}:' for s in SCHEMES)} stores, not {tracking_uri}; {example}")
    try:
        parts = urllib.parse.urlparse(tracking_uri)
    except ValueError as error:  # an unclosed "[" of an IPv6 address
        raise OutputError(f"--mlflow {shown} is no URI ({error}); {example}") from None
    scheme = parts.scheme or "file"  # a plain path is a file store to MLflow
    if scheme not in SCHEMES:
        raise OutputError(f"--mlflow {shown}: lincorr logs to {', '.join(f'{s}:' for s in SCHEMES)} stores, not {scheme}:; {example}")
    if scheme == "file":
        return file_store(tracking_uri, parts, shown, out)
    try:
        with socket.create_connection((parts.hostname or "", parts.port or (443 if scheme == "https" else 80)), ANSWER_SECONDS):
            pass
    except (OSError, ValueError) as error:
        raise OutputError(f"the MLflow server at {shown} does not answer ({error}); start it, or log to a file store: "
                          "--mlflow file:./mlruns") from None
    check_server(tracking_uri, shown)
    return tracking_uri


def without_password(uri: str) -> str:
    """`uri` with the password of `user:password@host` replaced by ***, for messages."""
    return re.sub(r"^([A-Za-z][\w+.-]*://[^/@:]*:)[^/@]*@", r"\1***@", uri)


def is_file_store(path: Path) -> bool:
    """Whether the directory `path` is empty or one MLflow's file store made: its `.trash`, or an experiment's meta.yaml."""
    entries = list(itertools.islice(path.iterdir(), MOST_STORE_ENTRIES_LOOKED_AT))
    return not entries or (path / ".trash").is_dir() or any((entry / "meta.yaml").is_file() for entry in entries)


def file_store(tracking_uri: str, parts, shown: str, out) -> str:
    """The `file:` URI of the store `tracking_uri` names, once lincorr can write it; an OutputError where it cannot."""
    import urllib.parse

    from lincorr.filesystem import check_writable, lies_within, link_trouble, path_trouble

    if parts.scheme and parts.netloc not in ("", "localhost"):
        raise OutputError(f"--mlflow {shown} names a store on the machine {parts.netloc}; lincorr writes file: stores on this "
                          "one: give file:/path or file:./relative")
    try:
        text = urllib.parse.unquote(parts.path if parts.scheme else tracking_uri, errors="strict")
    except UnicodeDecodeError:  # unquote's default would write into a directory named with U+FFFD, not the one meant
        raise OutputError(f"--mlflow {shown} holds %-escapes of bytes that are no UTF-8 text; write the directory's name "
                          "as it is, e.g. file:./mlruns") from None
    if not text:
        raise OutputError(f"--mlflow {shown} names no directory; give one, e.g. file:./mlruns")
    try:
        path = Path(text).expanduser().absolute()
    except RuntimeError:  # ~user of a user this machine does not have
        raise OutputError(f"--mlflow {shown} starts with a home directory this machine does not know; give the path in full") from None
    trouble = path_trouble(path)
    trouble = f"{printable(str(path))} {trouble}" if trouble else link_trouble(path)
    if trouble:
        raise OutputError(f"--mlflow {shown}: {trouble}; name another directory for MLflow's file store")
    if ".." in path.parts:
        raise OutputError(f"--mlflow {shown} climbs out of a directory with ..; name the store's directory directly")
    if path.exists() and not path.is_dir():
        raise OutputError(f"--mlflow {shown}: {path} is not a directory; name a directory for MLflow's file store")
    if out is not None and lies_within(path, out, f"--mlflow {shown}"):
        raise OutputError(f"--mlflow {shown} lies inside --out {out}, whose every file the run logs into the store; "
                          "put the store elsewhere, e.g. file:./mlruns beside --out")
    if out is not None and lies_within(out, path, f"--out {out}"):
        raise OutputError(f"--out {out} lies inside MLflow's file store {path}, which MLflow reads as its experiments; "
                          "put the store beside --out, e.g. file:./mlruns")
    if path.is_dir() and not is_file_store(path):
        raise OutputError(f"--mlflow {shown}: {path} holds files MLflow did not write (MLflow would read each directory there "
                          "as an experiment, and write into it); name a new or empty directory, or an MLflow store")
    check_writable(path if path.is_dir() else path.parent, f"MLflow's file store {path}")
    return path.as_uri()


def check_server(tracking_uri: str, shown: str) -> None:
    """An OutputError unless the server at `tracking_uri` answers MLflow's API, with the credentials MLflow's client sends
    (MLFLOW_TRACKING_TOKEN, ...), within seconds: an open port is not yet a tracking server (a proxy or another service
    can hold it, and would refuse the run only after the work)."""
    mlflow = require_mlflow()
    from mlflow.exceptions import MlflowException

    try:
        with http_without_retries():
            mlflow.tracking.MlflowClient(tracking_uri).get_experiment_by_name(experiment_name())
    except (MlflowException, OSError) as error:
        raise OutputError(f"{shown} does not answer as an MLflow tracking server ({' '.join(str(error).split())[:300]}); "
                          "check the address and MLflow's credentials (MLFLOW_TRACKING_TOKEN), or log to a file store: "
                          "--mlflow file:./mlruns") from None


def experiment_name() -> str:
    return os.environ.get("MLFLOW_EXPERIMENT_NAME") or EXPERIMENT


def log_result(result, directory, tracking_uri: str) -> str:
    """Log the result that `result.save(directory)` wrote as one MLflow run at `tracking_uri`; returns the run's id.

    The run is named after `result.study` and goes to the experiment "lincorr" (or MLFLOW_EXPERIMENT_NAME). Params: the
    settings provenance.json records, nested keys joined with '.', values cut to MLflow's length limit. Metrics: every
    number of `result.summary()`, list items by their index ("labelwise_r_ci95.0"). Artifacts: every file of
    `directory`. Tags: the study, lincorr's version, the model's fingerprint and the command that wrote the directory.
    A `file:` URI is MLflow's local file store. An OutputError when MLflow refuses the run; the saved directory stays.
    """
    mlflow = require_mlflow()
    from mlflow.exceptions import MlflowException

    directory = Path(directory)
    provenance = read_document(directory / "provenance.json", PROVENANCE)
    try:
        with file_store_allowed(), http_without_retries():
            return write_run(mlflow.tracking.MlflowClient(tracking_uri), result.study, directory, provenance, result.summary())
    except (MlflowException, OSError) as error:
        raise OutputError(f"MLflow at {tracking_uri} did not take the run ({' '.join(str(error).split())[:300]}); "
                          f"the result is saved in {directory}; check the tracking URI, e.g. file:./mlruns") from None


def write_run(client, study: str, directory: Path, provenance: dict, summary: dict) -> str:
    """One run in `client`'s store: params, metrics and tags in batches of MLflow's size, then the directory's files."""
    from mlflow.entities import Metric, Param, RunTag
    from mlflow.utils import validation

    name = experiment_name()
    experiment = client.get_experiment_by_name(name)
    run = client.create_run(experiment.experiment_id if experiment else client.create_experiment(name), run_name=study)
    run_id, status = run.info.run_id, "FAILED"
    try:
        params = [Param(key, value[:validation.MAX_PARAM_VAL_LENGTH])
                  for key, value in flat_keys(provenance.get("settings") or {}, as_text)]
        now = int(time.time() * 1000)
        metrics = [Metric(key, value, now, 0) for key, value in flat_keys(summary, number)]
        tags = [RunTag(mlflow_key(key), value[:validation.MAX_TAG_VAL_LENGTH])
                for key, value in provenance_tags(study, provenance).items()]
        for start in range(0, len(params), validation.MAX_PARAMS_TAGS_PER_BATCH):
            client.log_batch(run_id, params=params[start:start + validation.MAX_PARAMS_TAGS_PER_BATCH])
        for start in range(0, len(metrics), validation.MAX_METRICS_PER_BATCH):
            client.log_batch(run_id, metrics=metrics[start:start + validation.MAX_METRICS_PER_BATCH])
        client.log_batch(run_id, tags=tags)
        client.log_artifacts(run_id, str(directory))
        status = "FINISHED"
    finally:
        client.set_terminated(run_id, status)
    return run_id


def flat_keys(data, keep: Callable[[object], T | None], prefix: str = "") -> Iterator[tuple[str, T]]:
    """(key, value) of every leaf of nested mappings and lists that `keep` turns into something (not None), keys made MLflow's."""
    if isinstance(data, Mapping) or (isinstance(data, list) and keep is number):
        items = data.items() if isinstance(data, Mapping) else enumerate(data)
        for key, value in items:
            yield from flat_keys(value, keep, f"{prefix}{key}.")
        return
    kept = keep(data)
    if kept is not None and prefix:
        yield mlflow_key(prefix[:-1]), kept


def mlflow_key(key: str) -> str:
    """`key` as MLflow takes it: characters it refuses become '_', cut to its length limit."""
    from mlflow.utils.validation import MAX_ENTITY_KEY_LENGTH

    return KEY_CHARACTERS.sub("_", key)[:MAX_ENTITY_KEY_LENGTH]


def number(value) -> float | None:
    """A metric's value: a number, not a truth value (undefined numbers are None in a summary and are left out)."""
    return float(value) if isinstance(value, Real) and not isinstance(value, bool) else None


def as_text(value) -> str:
    """A param's value: text as it is, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value)


def provenance_tags(study: str, provenance: dict) -> dict[str, str]:
    """Where the result came from: its study, lincorr's version, the model's fingerprint (one tag per model) and the command."""
    tags = {"lincorr.study": study, "lincorr.version": str(provenance.get("lincorr_version"))}
    fingerprint = provenance.get("model_fingerprint")
    if isinstance(fingerprint, Mapping):
        tags.update({f"lincorr.model_fingerprint.{model}": str(value) for model, value in fingerprint.items()})
    elif fingerprint is not None:
        tags["lincorr.model_fingerprint"] = str(fingerprint)
    command = provenance.get("command") or provenance.get("python_call")
    if command:
        tags["lincorr.command"] = command
    return tags


@contextlib.contextmanager
def http_without_retries():
    """A server that stops answering fails the logging within seconds (HTTP_SETTINGS), not after minutes of retries; a
    variable the caller set is kept."""
    added = {name: value for name, value in HTTP_SETTINGS.items() if name not in os.environ}
    os.environ.update(added)
    try:
        yield
    finally:
        for name in added:
            os.environ.pop(name, None)


@contextlib.contextmanager
def file_store_allowed():
    """MLflow 3 refuses its local file store unless MLFLOW_ALLOW_FILE_STORE is set; a `file:` URI given to lincorr asks for
    it, so it is set for the call, unless the caller set it."""
    if "MLFLOW_ALLOW_FILE_STORE" in os.environ:
        yield
        return
    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
    try:
        yield
    finally:
        os.environ.pop("MLFLOW_ALLOW_FILE_STORE", None)
