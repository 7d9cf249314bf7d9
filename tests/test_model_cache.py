"""What the cache keeps about models: a directory's fingerprint by the contents of its weights, and the records of
converted models read as data from whoever wrote the cache (names, file kinds, sizes and shapes checked before use)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
import torch
from helpers.tiny import WORDS, tiny_llama, tiny_tokenizer
from safetensors.torch import load_file, save_file

from lincorr.bundled import catalogue
from lincorr.cache import CONVERSION_RECORD, conversion_state, converted_model_directory, file_sha256, record_conversion
from lincorr.cli import main
from lincorr.errors import ModelError
from lincorr.filesystem import MAX_RECORD_BYTES, read_record_json
from lincorr.models import load_model

FINGERPRINT = "gguf-sha256:" + "0" * 64
CANARY = b"canary\n"


def save_tiny_model(directory: Path) -> Path:
    tokenizer = tiny_tokenizer(WORDS)
    tiny_llama(len(tokenizer)).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def negate_weights(directory: Path) -> None:
    weights = directory / "model.safetensors"
    save_file({name: -tensor for name, tensor in load_file(weights).items()}, weights, metadata={"format": "pt"})


def test_two_directories_whose_weights_differ_in_contents_alone_have_two_fingerprints(tmp_path):
    first, second = save_tiny_model(tmp_path / "first"), save_tiny_model(tmp_path / "second")
    negate_weights(second)
    for directory in (first, second):  # the same name, size and time: only the bytes differ
        os.utime(directory / "model.safetensors", ns=(1_577_836_800_000_000_000,) * 2)
    assert load_model(str(first)).fingerprint != load_model(str(second)).fingerprint


def test_a_file_rewritten_in_place_with_its_time_set_back_is_hashed_again(tmp_path):
    path = tmp_path / "weights"
    path.write_bytes(b"a" * 1000)
    before = file_sha256(path)
    times = path.stat().st_atime_ns, path.stat().st_mtime_ns
    path.write_bytes(b"b" * 1000)
    os.utime(path, ns=times)
    assert file_sha256(path) == hashlib.sha256(b"b" * 1000).hexdigest() != before


def fifo(path: Path) -> None:
    os.mkfifo(path)


@pytest.mark.parametrize("make", [
    fifo,
    lambda path: path.symlink_to("/dev/zero"),
    lambda path: path.write_text('{"a": 1}'.ljust(MAX_RECORD_BYTES + 1)),  # valid JSON: its size alone refuses it
    lambda path: path.write_text("[" * 100_000 + "]" * 100_000),  # json.loads would end in a RecursionError
    lambda path: path.write_text("[1, 2]"),
    lambda path: path.write_bytes(b'{"a": "\xff"}'),
], ids=["fifo", "link-to-dev-zero", "over-the-limit", "nested-deep", "not-an-object", "not-utf8"])
def test_a_cache_record_lincorr_never_writes_is_no_record(tmp_path, make):
    path = tmp_path / CONVERSION_RECORD
    make(path)
    assert read_record_json(path) is None


def outside_file(directory: Path) -> Path:
    outside = directory.parent / "outside" / "canary.txt"
    outside.parent.mkdir(exist_ok=True)
    outside.write_bytes(CANARY)
    return outside


def entry(content: bytes = CANARY, **changed) -> dict:
    # An old time: the file's own differs, so the checksum, which matches, would be read.
    return {"size": len(content), "mtime_ns": 1, "sha256": hashlib.sha256(content).hexdigest(), **changed}


def link_outside(directory: Path) -> dict:
    (directory / "model.safetensors").symlink_to(outside_file(directory))
    return {"model.safetensors": entry()}


# Each record would pass as an intact conversion (or raise) if its names, kinds and entries were taken on trust.
RECORDED_FILES = {
    "absolute-name": lambda d: {str(outside_file(d)): entry()},
    "dot-dot-name": lambda d: {f"../outside/{outside_file(d).name}": entry()},
    "link-out": link_outside,
    "no-size": lambda d: {"config.json": {"mtime_ns": 1, "sha256": "0"}},
    "files-as-list": lambda d: ["config.json"],
    "entry-as-list": lambda d: {"config.json": [1]},
}


@pytest.mark.parametrize("files", RECORDED_FILES.values(), ids=RECORDED_FILES.keys())
def test_a_conversion_record_naming_what_is_not_its_own_regular_file_is_a_damaged_conversion(tmp_path, files):
    directory = tmp_path / "converted"
    directory.mkdir()
    (directory / "config.json").write_text("{}")
    record = {"fingerprint": FINGERPRINT, "source": "x", "files": files(directory)}
    (directory / CONVERSION_RECORD).write_text(json.dumps(record))
    assert conversion_state(directory, FINGERPRINT) == "damaged"


def test_models_lists_a_model_with_a_malformed_record_as_not_converted(capsys):
    bundle = catalogue()["gemma-3-270m-q4km"]
    directory = converted_model_directory(bundle.alias, bundle.fingerprint)
    directory.mkdir(parents=True)
    (directory / "config.json").write_text("{}")
    (directory / CONVERSION_RECORD).write_text(json.dumps({"fingerprint": bundle.fingerprint, "files": {"config.json": [1]}}))
    assert main(["models", "--json"]) == 0
    listed = {row["alias"]: row for row in json.loads(capsys.readouterr().out)}
    assert listed[bundle.alias]["converted"] is False


def test_nan_weights_are_refused_by_what_they_are(tmp_path):
    directory = save_tiny_model(tmp_path / "model")
    weights = directory / "model.safetensors"
    save_file({name: torch.full_like(tensor, float("nan")) for name, tensor in load_file(weights).items()}, weights,
              metadata={"format": "pt"})
    with pytest.raises(ModelError, match="NaN or infinite values") as raised:
        load_model(str(directory))
    assert "--dtype" not in str(raised.value)


def test_models_lists_an_intact_conversion_as_converted(capsys):
    bundle = catalogue()["gemma-3-270m-q4km"]
    directory = converted_model_directory(bundle.alias, bundle.fingerprint)
    (directory / "config.json").parent.mkdir(parents=True)
    (directory / "config.json").write_text("{}")
    record_conversion(directory, bundle.fingerprint, Path("source.gguf"))
    assert main(["models", "--json"]) == 0
    assert {row["alias"]: row for row in json.loads(capsys.readouterr().out)}[bundle.alias]["converted"] is True


@pytest.mark.parametrize("cache", ["absent", "someone's files", "a link to them", "read-only"])
@pytest.mark.parametrize("command", [["models"], ["models", "--json"], ["cache", "list"], ["cache", "size"]])
def test_a_listing_writes_nothing_where_the_cache_variable_points(command, cache, tmp_path, monkeypatch, capsys):
    """`lincorr models` made the cache there, marker and models/ section: in `/` when LINCORR_CACHE_DIR named it, in a
    directory of someone's files; and it refused a read-only cache it only had to read."""
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "thesis.tex").write_text("mine")
    (tmp_path / "link").symlink_to(tmp_path / "mine")
    monkeypatch.setenv("LINCORR_CACHE_DIR", str(tmp_path / {"absent": "new", "a link to them": "link"}.get(cache, "mine")))
    if cache == "read-only":  # as root, who runs the tests, permission bits stop nothing: the check itself refuses
        monkeypatch.setattr("lincorr.cache.check_writable", lambda *args: pytest.fail("a listing asked to write the cache"))
    before = sorted(tmp_path.rglob("*"))
    assert main(command) == 0
    capsys.readouterr()
    assert sorted(tmp_path.rglob("*")) == before


def touched(directory: Path) -> None:
    os.utime(directory / "config.json", ns=(1, 1))


def truncated(directory: Path) -> None:
    (directory / "config.json").write_text("{")


def removed(directory: Path) -> None:
    (directory / "config.json").unlink()


@pytest.mark.parametrize("change, converted", [(touched, True), (truncated, False), (removed, False)],
                         ids=["touched-since", "truncated", "a-file-removed"])
def test_a_listing_neither_hashes_nor_rewrites_a_conversion_it_lists(change, converted, monkeypatch, capsys):
    """`lincorr models` ran the load's check, which hashes a file whose time moved (over 20 s for a 12 GB one) and
    rewrites the record, and so refused a read-only cache: a listing compares presence and sizes, and writes nothing."""
    bundle = catalogue()["gemma-3-270m-q4km"]
    directory = converted_model_directory(bundle.alias, bundle.fingerprint)
    directory.mkdir(parents=True)
    (directory / "config.json").write_text("{}")
    record_conversion(directory, bundle.fingerprint, Path("source.gguf"))
    change(directory)
    record = directory / CONVERSION_RECORD
    before = (record.read_bytes(), record.stat().st_mtime_ns, sorted(directory.iterdir()))
    for name in ("sha256_of", "write_json_atomic", "check_writable"):
        monkeypatch.setattr(f"lincorr.cache.{name}", lambda *args, name=name, **kwargs: pytest.fail(f"a listing called {name}"))
    assert main(["models", "--json"]) == 0
    assert {row["alias"]: row for row in json.loads(capsys.readouterr().out)}[bundle.alias]["converted"] is converted
    assert (record.read_bytes(), record.stat().st_mtime_ns, sorted(directory.iterdir())) == before
