"""Logging saved results to MLflow's local file store (`--mlflow URI`, LINCORR_MLFLOW, `lincorr.log_result`), read back
with MLflow's own client; offline, on a tiny model."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.fit_workspace import fit_args, write_fit_workspace

import lincorr
from lincorr.cli import main
from lincorr.errors import OutputError
from lincorr.outputs import staged_directory, write_provenance


@pytest.fixture(scope="module", autouse=True)
def mlflow():
    """Imported when this file's tests run, not when the suite is collected (about 1.4 s in every pytest-xdist worker)."""
    return pytest.importorskip("mlflow", reason="the mlflow extra is not installed: pip install '.[mlflow]' (part of '.[test]')")


@pytest.fixture
def workspace(tmp_path, tokenizer):
    return write_fit_workspace(tmp_path, tokenizer)


@pytest.fixture
def store(tmp_path, monkeypatch):
    """A `file:` store under tmp_path, and a client that reads it (MLflow 3 reads its file store only when asked)."""
    monkeypatch.delenv("LINCORR_MLFLOW", raising=False)
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    uri = (tmp_path / "mlruns").as_uri()

    def runs():
        from mlflow.tracking import MlflowClient

        with monkeypatch.context() as patch:
            patch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
            client = MlflowClient(uri)
            experiment = client.get_experiment_by_name("lincorr")
            found = client.search_runs([experiment.experiment_id]) if experiment else []
            return client, found

    return uri, runs


def numbers(data, prefix=""):
    """Every number of a JSON summary under the key the run should log it by."""
    if isinstance(data, dict):
        return {k: v for key, value in data.items() for k, v in numbers(value, f"{prefix}{key}.").items()}
    if isinstance(data, list):
        return {k: v for i, value in enumerate(data) for k, v in numbers(value, f"{prefix}{i}.").items()}
    return {prefix[:-1]: data} if isinstance(data, (int, float)) and not isinstance(data, bool) else {}


def test_fit_logs_one_run_that_holds_the_saved_result(workspace, store, tmp_path, capsys):
    uri, runs = store
    out = tmp_path / "run"
    assert main(fit_args(workspace, "--json", "--out", str(out), "--mlflow", uri)) == 0
    summary = json.loads(capsys.readouterr().out)
    provenance = json.loads((out / "provenance.json").read_text(encoding="utf-8"))
    client, found = runs()
    assert len(found) == 1
    run = found[0]
    assert run.info.run_name == "fit" and run.info.status == "FINISHED"

    settings = provenance["settings"]
    assert settings and run.data.params == {key: value if isinstance(value, str) else json.dumps(value)
                                            for key, value in settings.items() if not isinstance(value, dict)}
    expected = numbers(summary)
    assert {"labelwise_r_mean", "labelwise_r_ci95.0", "n_test"} <= set(expected)
    assert run.data.metrics == pytest.approx(expected)

    assert run.data.tags["lincorr.version"] == lincorr.__version__ == provenance["lincorr_version"]
    assert run.data.tags["lincorr.model_fingerprint"] == provenance["model_fingerprint"] == summary["model_fingerprint"]
    assert run.data.tags["lincorr.command"] == provenance["command"] and provenance["command"].startswith("lincorr fit ")

    artifacts = sorted(a.path for a in client.list_artifacts(run.info.run_id))
    assert artifacts == sorted(p.name for p in out.iterdir())
    downloaded = Path(client.download_artifacts(run.info.run_id, "W.npy", str(tmp_path / "back")))
    assert downloaded.read_bytes() == (out / "W.npy").read_bytes()


def test_the_option_before_the_command_or_the_environment_variable_logs_too(workspace, store, tmp_path, monkeypatch):
    uri, runs = store
    assert main(["--mlflow", uri, *fit_args(workspace, "--out", str(tmp_path / "first"))]) == 0
    monkeypatch.setenv("LINCORR_MLFLOW", uri)
    assert main(fit_args(workspace, "--out", str(tmp_path / "second"))) == 0
    assert main(fit_args(workspace)) == 0  # saves nothing, so logs nothing
    assert len(runs()[1]) == 2


def test_a_store_named_from_home_or_relatively_is_the_store_written(workspace, store, tmp_path, monkeypatch):
    """The check and the logging read the URI alike: `~` is the home directory for both, a relative path the directory
    the command started in."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    assert main(fit_args(workspace, "--out", str(tmp_path / "run"), "--mlflow", "file:~/mlruns")) == 0
    assert (tmp_path / "home" / "mlruns").is_dir() and not (tmp_path / "~").exists()


def test_a_tracker_in_the_environment_is_not_asked_by_a_command_that_saves_nothing(monkeypatch, capsys):
    """A listing never waits on a server that does not answer."""
    monkeypatch.setenv("LINCORR_MLFLOW", f"http://127.0.0.1:{closed_port()}")
    monkeypatch.setattr("lincorr.tracking.check_tracker", lambda *a, **k: pytest.fail("the tracker was asked"))
    assert main(["templates"]) == 0 and main(["cache", "list"]) == 0


def test_the_report_saves_no_result_for_a_tracker(tmp_path, monkeypatch, capsys):
    """Its --out is the HTML file, not a result: LINCORR_MLFLOW is not asked, and --mlflow is refused as logging nothing."""
    monkeypatch.setenv("LINCORR_MLFLOW", f"http://127.0.0.1:{closed_port()}")
    monkeypatch.setattr("lincorr.tracking.check_tracker", lambda *a, **k: pytest.fail("the tracker was asked"))
    assert main(["report", str(tmp_path / "no-run"), "--mlflow", "file:./runs"]) == 2
    assert "saves no result for --mlflow to log" in capsys.readouterr().err


def test_without_the_extra_one_line_exit_2_and_nothing_written(workspace, store, tmp_path, monkeypatch, capsys):
    uri, runs = store
    monkeypatch.setitem(sys.modules, "mlflow", None)  # `import mlflow` now fails as if it were not installed
    out = tmp_path / "run"
    assert main(fit_args(workspace, "--out", str(out), "--mlflow", uri)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("lincorr: error: ") and "pip install 'lincorr[mlflow]'" in err[0]
    assert not out.exists() and not (tmp_path / "mlruns").exists()


@pytest.mark.parametrize("argv, message", [(["--mlflow", ""], "needs a tracking URI"),
                                           (["--mlflow", "file:./x"], "give `lincorr fit` a directory with --out")])
def test_an_mlflow_option_that_cannot_log_is_one_line_and_exit_2(workspace, argv, message, capsys):
    assert main(fit_args(workspace, *argv)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


class Made:
    """A result as `log_result` sees one: its study and its summary."""

    study = "made"

    def summary(self):
        return {"hit@1": 0.25, "rows": [{"r": 0.5}, {"r": None}], "done": True, "name": "x", "nan": float("nan")}


def saved(directory: Path, settings: dict) -> Path:
    with staged_directory(directory) as out:
        write_provenance(out, study=Made.study, model_fingerprint={"a/b": "f1", "c": "f2"}, settings=settings)
    return directory


def test_log_result_from_python_keeps_to_mlflow_names_and_limits(store, tmp_path):
    from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH

    uri, runs = store
    directory = saved(tmp_path / "made", {"long": "y" * (MAX_PARAM_VAL_LENGTH + 10), "grid": {"sizes": [1, 2]}, "seed": 3})
    run_id = lincorr.log_result(Made(), directory, uri)
    run = runs()[0].get_run(run_id)
    assert run.data.params == {"long": "y" * MAX_PARAM_VAL_LENGTH, "grid.sizes": "[1, 2]", "seed": "3"}
    metrics = run.data.metrics
    assert set(metrics) == {"hit_1", "rows.0.r", "nan"} and metrics["hit_1"] == 0.25 and metrics["nan"] != metrics["nan"]
    assert run.data.tags["lincorr.model_fingerprint.a_b"] == "f1" and run.data.tags["lincorr.model_fingerprint.c"] == "f2"
    assert run.data.tags["lincorr.study"] == "made" and run.info.run_name == "made"


def test_a_store_mlflow_refuses_is_an_output_error_and_the_result_stays(tmp_path):
    directory = saved(tmp_path / "made", {"seed": 0})
    with pytest.raises(OutputError, match="did not take the run"):
        lincorr.log_result(Made(), directory, "nowhere-scheme://store")
    assert (directory / "provenance.json").is_file()


def closed_port() -> int:
    """A loopback port nothing listens on: one the system just gave out and took back."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def http_server(status: int, body: bytes) -> Iterator[str]:
    """A loopback HTTP server that answers every request with `status` and `body`; its address."""

    class Answer(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (the name http.server calls)
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Answer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_port_that_answers_but_not_as_mlflow_is_refused_before_any_work(workspace, tmp_path, capsys, monkeypatch):
    """An open port is no tracking server: a proxy's empty 404 ended the run only after the work (20 s of fitting, then
    'did not take the run'); it is asked MLflow's own question first."""
    monkeypatch.setattr("lincorr.fit.measure_relation", lambda *a, **k: pytest.fail("the fit ran before the tracker was checked"))
    out = tmp_path / "out"
    with http_server(404, b"") as address:
        assert main(fit_args(workspace, "--out", str(out), "--mlflow", address)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "does not answer as an MLflow tracking server" in err[0] and "404" in err[0], err
    assert not out.exists()


def test_a_server_that_answers_mlflow_s_question_passes_the_check(monkeypatch):
    """MLflow's answer for an experiment not made yet (404 with its error code) is a server that will take the run."""
    from lincorr.tracking import check_tracker

    missing = json.dumps({"error_code": "RESOURCE_DOES_NOT_EXIST", "message": "No experiment 'lincorr'"}).encode()
    with http_server(404, missing) as address:
        check_tracker(address)
    with http_server(401, b"") as address, pytest.raises(OutputError, match="401"):
        check_tracker(address)


def tracker_cases(tmp_path: Path) -> dict[str, tuple[str, str]]:
    (tmp_path / "a-file").write_text("not a store")
    (tmp_path / "mine" / "thesis").mkdir(parents=True)
    read_only = tmp_path / "read-only"
    read_only.mkdir()
    read_only.chmod(0o500)
    return {
        "unknown scheme": ("ftp://host/store", "lincorr logs to file:, http:, https: stores, not ftp:"),
        "database store": ("sqlite:///runs.db", "not sqlite:"),
        "a regular file": ((tmp_path / "a-file").as_uri(), "is not a directory"),
        "through ..": ("file:./runs/../elsewhere", "climbs out of a directory with .."),
        "enormous": ("file:" + "x" * 5000, "no tracking URI"),
        "no server": (f"http://127.0.0.1:{closed_port()}", "does not answer"),
        "a hosted service's word": ("databricks", "not databricks"),
        "file: alone": ("file:", "names no directory"),
        "another machine's file store": ("file://otherhost/runs", "on the machine otherhost"),
        "blank": (" ", "is no tracking URI"),
        "a NUL": ("file:runs%00x", "holds a NUL character"),
        "a line break": ("file:runs\nx", "holds a character that is not printable"),
        "escapes of no UTF-8": ("file:runs%C3%28", "%-escapes of bytes that are no UTF-8"),
        "inside --out": ((tmp_path / "out" / "mlruns").as_uri(), "lies inside --out"),
        "holding --out": (tmp_path.as_uri(), "lies inside MLflow's file store"),
        "the root": ("file:///", "lies inside MLflow's file store"),
        "a directory of someone's files": ((tmp_path / "mine").as_uri(), "holds files MLflow did not write"),
        "a password": ("http://me:secret@127.0.0.1:1", "http://me:***@127.0.0.1:1"),
        **({"read-only": (read_only.as_uri() + "/runs", "cannot write")} if os.geteuid() != 0 else {}),
    }


@pytest.mark.parametrize("case", ["unknown scheme", "database store", "a regular file", "through ..", "enormous", "no server", "read-only",
                                  "a hosted service's word", "file: alone", "another machine's file store", "blank", "a NUL",
                                  "a line break", "escapes of no UTF-8", "inside --out", "holding --out", "the root", "a directory of someone's files",
                                  "a password"])
def test_a_tracker_that_cannot_take_the_run_is_refused_before_any_work(case, mlflow, workspace, tmp_path, capsys, monkeypatch):
    """Checked before the fit: nothing is saved, the error is one line that quotes the URI briefly, and a server that
    does not answer is said within seconds."""
    cases = tracker_cases(tmp_path)
    if case not in cases:
        pytest.skip("root writes into a read-only directory")
    uri, message = cases[case]
    out = tmp_path / "out"
    monkeypatch.setattr("lincorr.fit.measure_relation", lambda *a, **k: pytest.fail("the fit ran before the tracker was checked"))
    started = time.monotonic()
    assert main(fit_args(workspace, "--out", str(out), "--mlflow", uri)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0] and len(err[0]) < 600 and err[0].isprintable() and "secret" not in err[0], err
    assert not out.exists() and time.monotonic() - started < 30


def test_a_server_that_stops_answering_while_logging_fails_within_seconds_and_the_result_stays(mlflow, tmp_path, monkeypatch):
    """MLflow's client retries a silent server for minutes; lincorr's logging gives it seconds."""
    monkeypatch.delenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", raising=False)
    directory = saved(tmp_path / "made", {"seed": 0})
    started = time.monotonic()
    with pytest.raises(OutputError, match="did not take the run"):
        lincorr.log_result(Made(), directory, f"http://127.0.0.1:{closed_port()}")
    # 1.5 s here, against 248 s with MLflow's own retries (2-core machine, 2026-11-28).
    assert time.monotonic() - started < 30 and (directory / "provenance.json").is_file()
