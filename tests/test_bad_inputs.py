"""The catalogue of mistakes a user can make, and of faults around them, at the command line.

Every mistake ends in exactly one stderr line starting `lincorr: error:`, exit code 2, no
traceback, and no new file in the workspace or the working directory. To add a case, add one
line to MISTAKES: an id, the arguments (`{name}` is a file of the workspace, see `assets`), the
kind of the error (its class in lincorr.errors, which stays when the message is reworded) and, when the case needs the machine changed first (a full
disk, a file where the cache should be), the name of a SETUPS entry. Runs that succeed must
print strict JSON (no NaN or Infinity); the faults and reproducibility tests follow the table.
"""

from __future__ import annotations

import errno
import shutil
import json
import os
import re
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.cli_errors import one_error_line, spy_on_errors
from helpers.tiny import CITIES, COUNTRIES, NAMES, tiny_llama, write_tiny_gguf

import lincorr.collection.pieces as collect
from lincorr.cli import main
from lincorr.errors import CacheError, DataError, DeviceError, InputError, ModelError, OutputError, StorageError, UsageError
from lincorr.filesystem import OUTPUT_MARKER, STALE_SECONDS, host_name

FIT = ["fit", "city", "country", "--model", "{model}", "--inputs", "{inputs}", "--quiet",
       "--source-template", "{} lives in the city of", "--source-domain", "{cities}",
       "--target-template", "{} lives in the country of", "--target-domain", "{countries}"]
FIT_N = [arg for arg in FIT if arg not in ("--inputs", "{inputs}")]  # inputs sampled from the vocabulary with -n
PRECISION = ["precision", "city", "country", "--model", "{model}", "--quiet"]

MISTAKES = [
    # numbers: refused while parsing, before anything runs
    ("seed-negative", FIT + ["--seed", "-1"], UsageError),
    ("bootstrap-zero", FIT + ["--bootstrap", "0"], UsageError),
    ("bootstrap-negative", FIT + ["--bootstrap", "-1"], UsageError),
    ("alpha-nan", FIT + ["--estimator", "ridge", "--alpha", "nan"], UsageError),
    ("alpha-inf", FIT + ["--estimator", "ridge", "--alpha", "inf"], UsageError),
    ("alpha-negative", FIT + ["--estimator", "ridge", "--alpha", "-1"], UsageError),
    ("alpha-word", FIT + ["--alpha", "lots"], UsageError),
    ("top-k-negative", FIT + ["--top", "Paris", "-k", "-3"], UsageError),
    ("batch-size-zero", FIT + ["--batch-size", "0"], UsageError),
    ("batch-size-word", FIT + ["--batch-size", "fast"], UsageError),
    ("test-fraction-above-1", FIT + ["--test-fraction", "1.5"], UsageError),
    ("test-fraction-nan", FIT + ["--test-fraction", "nan"], UsageError),
    ("n-not-a-number", FIT_N + ["-n", "many"], UsageError),
    ("cases-top-k-negative", ["cases", "city", "country", "-k", "-1"], UsageError),
    ("generalize-no-seeds", ["generalize", "--n-seeds", "0"], UsageError),
    ("generalize-lr-inf", ["generalize", "--lr", "inf"], UsageError),
    ("predict-delta-nan", ["predict-edit", "city", "country", "--value", "Paris", "--delta", "nan"], UsageError),
    ("gradcorr-few-eval", ["gradcorr", "--n-eval", "3"], UsageError),
    ("ablate-seed-negative", ["ablate", "--paper-table", "7", "--seeds", "0", "-1"], UsageError),
    ("ablate-width-zero", ["ablate", "--embedding-width", "64", "0"], UsageError),
    ("ablate-width-and-table7", ["ablate", "--paper-table", "7", "--embedding-width", "64"], UsageError),
    ("ablate-width-past-the-model", ["ablate", "--model", "{model}", "--embedding-width", "999", "--quiet"], UsageError),
    ("demo-seed-negative", ["demo", "--seed", "-1"], UsageError),
    # usage
    ("fit-without-prompts", ["fit"], UsageError),
    ("unknown-command", ["fitt", "city", "country"], UsageError),
    ("cache-unknown-action", ["cache", "empty"], UsageError),
    # too few inputs to score on
    ("n-4", FIT_N + ["-n", "4"], DataError),
    ("inputs-file-of-8", FIT + ["--inputs", "{eight_inputs}"], DataError),
    ("test-fraction-small", FIT + ["--test-fraction", "0.1"], DataError),
    # an input far longer than a name
    ("input-of-2000-words", FIT + ["--inputs", "{long_inputs}"], InputError),
    # model specs
    ("gguf-garbage", FIT + ["--model", "{garbage.gguf}"], ModelError),
    ("gguf-a-directory", FIT + ["--model", "{folder.gguf}"], UsageError),
    ("gguf-missing", FIT + ["--model", "missing.gguf"], UsageError),
    ("model-path-missing", FIT + ["--model", "/nonexistent/model"], ModelError),
    ("gguf-truncated", FIT + ["--model", "{truncated.gguf}"], ModelError),
    ("model-dir-empty", FIT + ["--model", "{empty_dir}"], ModelError),
    ("model-dir-not-a-model", FIT + ["--model", "{notes_dir}"], ModelError),
    ("model-weights-pickled", FIT + ["--model", "{pickled_model}"], ModelError),
    ("model-needs-remote-code", FIT + ["--model", "{remote_code_model}"], ModelError),
    ("model-without-tokenizer", FIT + ["--model", "{no_tokenizer_model}"], ModelError),
    # devices and dtypes
    ("device-quantum", FIT + ["--device", "quantum"], DeviceError),
    ("device-cuda-without-cuda", FIT + ["--device", "cuda"], DeviceError, "cpu_only_torch"),
    ("float16-overflows-on-cpu", FIT + ["--model", "{overflowing_model}", "--dtype", "float16"], DeviceError),
    # reference files
    ("references-number", PRECISION + ["--references", "{refs_number.json}"], InputError),
    ("references-null", PRECISION + ["--references", "{refs_null.json}"], InputError),
    ("references-bare-scalar", PRECISION + ["--references", "{refs_scalar.json}"], InputError),
    ("references-nested-json", PRECISION + ["--references", "{refs_nested.json}"], InputError),
    ("references-sample-without-object", PRECISION + ["--references", "{refs_no_object.json}"], InputError),
    ("references-no-usable-pair", PRECISION + ["--inputs", "{inputs}", "--references", "{refs_unusable.tsv}"], DataError),
    ("fit-references-no-usable-pair", FIT + ["--references", "{refs_unusable.tsv}"], DataError),
    ("precision-own-prompts-without-references", PRECISION + FIT[FIT.index("--source-template"):], UsageError),
    ("precision-paper-with-own-inputs", PRECISION + ["--preset", "paper", "--inputs", "{inputs}"], UsageError),
    ("precision-n-curve-not-numbers", PRECISION + ["--n-curve", "1000,lots"], UsageError),
    ("precision-n-curve-too-few-test-inputs", PRECISION + ["--n-curve", "8,1000"], DataError),
    ("fit-unknown-interval", FIT + ["--ci", "jackknife"], UsageError),
    # output locations: checked before the model loads
    ("save-dir-is-a-file", FIT + ["--out", "{a_file}"], OutputError),
    ("save-dir-under-a-file", FIT + ["--out", "{a_file}/run"], OutputError),
    ("save-dir-read-only", FIT + ["--out", "{read_only}/run"], StorageError, "read_only_workspace_dir"),
    ("save-dir-full-disk", FIT + ["--out", "{read_only}/run"], StorageError, "full_workspace_dir"),
    ("save-dir-of-other-files", FIT + ["--out", "{notes_dir}"], OutputError),
    ("out-is-a-file", ["matrix", "--prompts", "city,country", "--model", "{model}", "--out", "{a_file}"], OutputError),
    ("demo-out-of-other-files", ["demo", "--out", "{notes_dir}"], OutputError),
    ("disk-fills-during-save", FIT + ["--out", "{ws}/run"], StorageError, "disk_fills_while_saving"),
    # paths no file system takes: refused before the work, not by the save after it
    ("out-name-longer-than-a-file-name", FIT + ["--out", "{ws}/" + "b" * 300], OutputError),
    ("out-deeper-than-lincorr-makes", FIT + ["--out", "{ws}/" + "a/" * 300], OutputError),
    # a prompt template is a sentence: a 40,000-character one is refused while parsing, and quoted briefly
    ("template-of-40000-characters", FIT + ["--source-template", "ab" * 20_000], UsageError),
    # trackers whose address or store cannot work: refused before the work
    ("mlflow-unclosed-ipv6-address", FIT + ["--out", "{ws}/run", "--mlflow", "http://[::1"], OutputError),
    ("mlflow-store-name-too-long", FIT + ["--out", "{ws}/run", "--mlflow", "file:{ws}/" + "b" * 300], OutputError),
    ("mlflow-store-through-a-link-loop", FIT + ["--out", "{ws}/run", "--mlflow", "file:{loop_one}/mlruns"], OutputError),
    # the cache
    ("cache-dir-is-a-file", FIT, CacheError, "cache_dir_is_a_file"),
    ("cache-dir-read-only", FIT, StorageError, "read_only_cache"),
    ("cache-dir-full", FIT, StorageError, "full_cache"),
]


# ---- the workspace the arguments name ----

def save_tiny_model(directory: Path, tokenizer, *, weights: str = "safetensors", tokenizer_files: bool = True, scale_head: float = 1.0) -> None:
    model = tiny_llama(len(tokenizer))
    model.lm_head.weight.data[:, 0] *= scale_head
    model.save_pretrained(directory)
    if weights == "pickle":  # written with torch.save; lincorr must refuse it unread
        torch.save(model.state_dict(), directory / "pytorch_model.bin")
        (directory / "model.safetensors").unlink()
    if tokenizer_files:
        tokenizer.save_pretrained(directory)


@pytest.fixture(scope="module")
def assets(tmp_path_factory, tokenizer) -> dict[str, str]:
    """The files the catalogue's arguments name, made once: `{name}` in an argument is `assets[name]`."""
    ws = tmp_path_factory.mktemp("workspace")
    save_tiny_model(ws / "model", tokenizer)
    save_tiny_model(ws / "pickled_model", tokenizer, weights="pickle")
    save_tiny_model(ws / "no_tokenizer_model", tokenizer, tokenizer_files=False)
    # Beyond float16's range (65504): the head's column 0 becomes inf when the weights are cast.
    save_tiny_model(ws / "overflowing_model", tokenizer, scale_head=1e7)
    save_tiny_model(ws / "remote_code_model", tokenizer)
    config = json.loads((ws / "remote_code_model" / "config.json").read_text())
    config.update(model_type="my_own_model", auto_map={"AutoConfig": "configuration_mine.MyConfig", "AutoModelForCausalLM": "modeling_mine.MyModel"})
    (ws / "remote_code_model" / "config.json").write_text(json.dumps(config))
    (ws / "empty_dir").mkdir()
    (ws / "notes_dir").mkdir()
    (ws / "folder.gguf").mkdir()
    (ws / "notes_dir" / "notes.txt").write_text("my notes\n")
    (ws / "read_only").mkdir()
    write_tiny_gguf(ws / "tiny.gguf")
    (ws / "truncated.gguf").write_bytes((ws / "tiny.gguf").read_bytes()[:2000])
    (ws / "garbage.gguf").write_text("this is not a model\n")
    (ws / "a_file").write_text("a file\n")
    (ws / "loop_one").symlink_to(ws / "loop_two")
    (ws / "loop_two").symlink_to(ws / "loop_one")
    lines = {"inputs": NAMES[:60], "eight_inputs": NAMES[:8], "long_inputs": [*NAMES[:30], " ".join(["word"] * 2000)],
             "cities": CITIES, "countries": COUNTRIES, "one_country": COUNTRIES[:1]}
    for name, content in lines.items():
        (ws / f"{name}.txt").write_text("\n".join(content) + "\n", encoding="utf-8")
    for name, content in {"refs_number.json": '{"Paris": 5}', "refs_null.json": '{"Paris": null}', "refs_scalar.json": "42",
                          "refs_nested.json": '{"relation": {"samples": []}}', "refs_no_object.json": '{"samples": [{"subject": "Paris"}]}',
                          "refs_unusable.tsv": "Pizza\tItaly\n"}.items():
        (ws / name).write_text(content)
    named = {path.name.removesuffix(".txt"): str(path) for path in ws.iterdir()}
    return {**named, "ws": str(ws)}


def filled(argv: list[str], assets: dict[str, str]) -> list[str]:
    """The arguments with `{name}` replaced; a template's literal "{}" stays."""
    return [re.sub(r"\{([\w.]+)\}", lambda name: assets[name[1]], arg) for arg in argv]


def files_under(*roots) -> set[str]:
    return {str(path) for root in roots for path in Path(root).rglob("*")}


# ---- the machine changed: a read-only or full disk is simulated, since root (who runs CI) ignores permission bits ----

def refuse_creation_under(monkeypatch, root, code: int) -> None:
    """Creating a file or directory under `root` fails with `code`, as on a read-only (EROFS) or full (ENOSPC) disk."""
    root = Path(root).resolve()

    def refused(path) -> bool:
        return Path(os.path.abspath(path)).resolve().is_relative_to(root)

    def guard(real, path_of):
        def guarded(*args, **kwargs):
            path = path_of(*args, **kwargs)
            if path is not None and refused(path):
                raise OSError(code, os.strerror(code), str(path))
            return real(*args, **kwargs)
        return guarded

    monkeypatch.setattr(tempfile, "mkstemp", guard(tempfile.mkstemp, lambda *a, dir=None, **k: dir))
    monkeypatch.setattr(tempfile, "mkdtemp", guard(tempfile.mkdtemp, lambda *a, dir=None, **k: dir))
    monkeypatch.setattr(os, "mkdir", guard(os.mkdir, lambda path, *a, **k: path))


def fail_with_full_disk(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(args[0]))


SETUPS = {
    "cpu_only_torch": lambda assets, monkeypatch: monkeypatch.setattr(torch.cuda, "is_available", lambda: False),
    "read_only_workspace_dir": lambda assets, monkeypatch: refuse_creation_under(monkeypatch, assets["read_only"], errno.EROFS),
    "full_workspace_dir": lambda assets, monkeypatch: refuse_creation_under(monkeypatch, assets["read_only"], errno.ENOSPC),
    "disk_fills_while_saving": lambda assets, monkeypatch: monkeypatch.setattr(np, "save", fail_with_full_disk),
    "cache_dir_is_a_file": lambda assets, monkeypatch: monkeypatch.setenv("LINCORR_CACHE_DIR", assets["a_file"]),
    "read_only_cache": lambda assets, monkeypatch: refuse_creation_under(monkeypatch, os.environ["LINCORR_CACHE_DIR"], errno.EROFS),
    "full_cache": lambda assets, monkeypatch: refuse_creation_under(monkeypatch, os.environ["LINCORR_CACHE_DIR"], errno.ENOSPC),
}


@pytest.mark.parametrize("argv, kind, setup", [(case[1], case[2], case[3] if len(case) > 3 else None) for case in MISTAKES],
                         ids=[case[0] for case in MISTAKES])
def test_mistake_ends_in_one_error_line(argv, kind, setup, assets, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    if setup:
        SETUPS[setup](assets, monkeypatch)
    before = files_under(assets["ws"], tmp_path)
    reported = spy_on_errors(monkeypatch)
    assert main(filled(argv, assets)) == 2
    one_error_line(capsys)
    assert [type(error) for error in reported] == [kind], reported
    assert files_under(assets["ws"], tmp_path) == before, "a failed command left files behind"


@pytest.mark.parametrize("option", ["--top", "--top-influencing"])
def test_a_word_outside_its_domain_is_refused_before_the_model_loads(option, assets, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)

    def no_load(*args, **kwargs):
        raise AssertionError("the model loaded before the word was checked")

    monkeypatch.setattr("lincorr.models.load_model", no_load)
    assert main(filled(FIT + [option, "Atlantis"], assets)) == 2
    assert "'Atlantis' is not in the" in one_error_line(capsys)


def test_catalogue_ids_are_unique():
    ids = [case[0] for case in MISTAKES]
    assert len(ids) == len(set(ids)) and all(case[3] in SETUPS for case in MISTAKES if len(case) > 3)


# ---- runs that succeed print and save strict JSON ----

def strict_loads(text: str):
    def refuse(constant):
        raise AssertionError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_undefined_numbers_are_null_with_a_reason(assets, tmp_path, capsys):
    """A one-word target domain has no instance-wise r: null, and "undefined" says why, in stdout and result.json."""
    argv = filled(FIT + ["--target-domain", "{one_country}", "--json", "--out", str(tmp_path / "run")], assets)
    assert main(argv) == 0
    for payload in (strict_loads(capsys.readouterr().out), strict_loads((tmp_path / "run" / "result.json").read_text())):
        assert payload["instancewise_r_mean"] is None and payload["n_target_domain"] == 1
        assert "at least 2" in payload["undefined"]["instancewise_r_mean"]
        assert isinstance(payload["labelwise_r_mean"], float)


def test_strict_json_replaces_every_non_finite_number():
    from lincorr import strict_json

    text = strict_json.dumps({"r": float("nan"), "rows": [{"hit": {"1": float("inf")}}], "undefined": {"r": "one value"}})
    assert strict_loads(text) == {"r": None, "rows": [{"hit": {"1": None}}],
                                  "undefined": {"r": "one value", "rows.0.hit.1": strict_json.UNDEFINED_REASON}}
    assert strict_loads(strict_json.dumps([{"a": float("-inf")}, 1.5])) == [{"a": None, "undefined": {"a": strict_json.UNDEFINED_REASON}}, 1.5]


# ---- output directories ----

def test_an_output_directory_is_replaced_whole_with_the_umasks_mode(assets, tmp_path, capsys, umask_022):
    out = tmp_path / "run"
    assert main(filled(FIT + ["--out", str(out), "--heatmap"], assets)) == 0
    assert (out / "W.png").is_file() and (out / OUTPUT_MARKER).is_file()
    assert out.stat().st_mode & 0o777 == 0o755
    assert main(filled(FIT + ["--out", str(out), "--seed", "1"], assets)) == 0
    assert not (out / "W.png").exists(), "a file of the earlier run survived"
    assert json.loads((out / "result.json").read_text())["seed"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"], "staging or the old directory was left beside it"


# ---- faults: damaged caches, interrupted writes ----

@pytest.fixture
def umask_022():
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def run_on_gguf(assets, capsys) -> None:
    assert main(["domains", "--model", assets["tiny.gguf"], "--family", "math", "--json"]) == 0
    strict_loads(capsys.readouterr().out)


def converted_directory() -> Path:
    (directory,) = (Path(os.environ["LINCORR_CACHE_DIR"]) / "models").glob("tiny-*")
    return directory


def test_damaged_converted_weights_are_converted_again(assets, capsys, monkeypatch, umask_022):
    run_on_gguf(assets, capsys)
    weights = converted_directory() / "model.safetensors"
    intact = weights.read_bytes()
    assert converted_directory().stat().st_mode & 0o777 == 0o755
    weights.write_bytes(intact[: len(intact) // 2])  # truncated: the size no longer matches the record
    run_on_gguf(assets, capsys)
    assert weights.read_bytes() == intact
    flipped = bytearray(intact)
    flipped[-1] ^= 0xFF  # same size, written later: the checksum catches it
    weights.write_bytes(bytes(flipped))
    run_on_gguf(assets, capsys)
    assert weights.read_bytes() == intact
    import lincorr.models as models

    monkeypatch.setattr(models, "convert_gguf", lambda *a: pytest.fail("an intact conversion was redone"))
    os.utime(weights)  # touched but unchanged: hashed once, recorded, and kept
    run_on_gguf(assets, capsys)


def test_a_failed_conversion_leaves_no_staging_and_stale_ones_are_removed(assets, capsys, monkeypatch):
    import transformers

    models_dir = Path(os.environ["LINCORR_CACHE_DIR"]) / "models"
    models_dir.mkdir(parents=True)
    # pid 2**22 + 1 is above Linux's pid_max: never a running process.
    dead, old, live = (models_dir / f".tiny-0.lincorr-tmp.{pid}@{host}.{suffix}" for pid, host, suffix in
                       ((2**22 + 1, host_name(), "dead"), (os.getppid(), "elsewhere", "old"), (os.getppid(), "elsewhere", "live")))
    for staging in (dead, old, live):
        staging.mkdir()
        (staging / "model.safetensors").write_bytes(b"half")
    two_days_ago = time.time() - 2 * STALE_SECONDS
    os.utime(old, (two_days_ago, two_days_ago))

    def full_disk(self, directory, **kwargs):
        (Path(directory) / "model.safetensors").write_bytes(b"partial")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(directory))

    monkeypatch.setattr(transformers.PreTrainedModel, "save_pretrained", full_disk)
    assert main(["domains", "--model", assets["tiny.gguf"], "--json"]) == 2
    assert "No space left on device" in capsys.readouterr().err
    assert sorted(p.name for p in models_dir.iterdir()) == [live.name], "the failed staging, or a stale one, is still there"


def test_a_short_write_numpy_reports_without_errno_is_a_full_disk(assets, tmp_path, capsys, monkeypatch):
    def short_write(*args, **kwargs):
        raise OSError("34333 requested and 2016 written")  # numpy's words for a write the disk cut short

    monkeypatch.setattr(np, "save", short_write)
    assert main(filled(FIT, assets) + ["--out", str(tmp_path / "run")]) == 2
    assert "fewer bytes than were written" in one_error_line(capsys)
    assert not (tmp_path / "run").exists()


def test_a_full_disk_leaves_no_temporary_table(assets, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(np, "savez", fail_with_full_disk)
    for _ in range(2):  # a retry must not add another orphan
        assert main(filled(FIT, assets)) == 2
        assert "No space left on device" in capsys.readouterr().err
    logits = Path(os.environ["LINCORR_CACHE_DIR"]) / "logits"
    assert not any(logits.iterdir())


def test_a_killed_writers_temporary_table_is_removed_at_the_next_start(assets, capsys):
    logits = Path(os.environ["LINCORR_CACHE_DIR"]) / "logits"
    logits.mkdir(parents=True)
    orphan = logits / f".0123.npz.lincorr-tmp.{2**22 + 1}@{host_name()}.x1y2"
    orphan.write_bytes(b"partial")
    assert main(filled(FIT, assets)) == 0
    assert not orphan.exists() and any(logits.glob("*.npz"))


# ---- the cache command ----

def test_cache_list_size_and_clear(assets, capsys):
    run_on_gguf(assets, capsys)
    assert main(filled(FIT, assets)) == 0
    capsys.readouterr()
    assert main(["cache", "list", "--json"]) == 0
    sections = {s["section"]: s for s in strict_loads(capsys.readouterr().out)["sections"]}
    assert sections["models"]["entries"] == 1 and sections["tables"]["entries"] >= 2 and sections["results"]["bytes"] == 0
    assert main(["cache", "list"]) == 0
    rows = capsys.readouterr().out.splitlines()[1:]
    assert len(rows) == len(sections) and len({row.index(" entries") for row in rows}) == 1, "the columns line up"
    assert main(["cache", "size"]) == 0 and "KB" in capsys.readouterr().out
    assert main(["cache", "clear", "--tables"]) == 0
    root = Path(os.environ["LINCORR_CACHE_DIR"])
    assert not (root / "logits").exists() and converted_directory().is_dir()
    assert main(["cache", "clear"]) == 0
    assert not (root / "models").exists() and not (root / "hashes.json").exists()


@pytest.mark.parametrize("value", ["", " ", ".", "cache"])
def test_an_empty_or_relative_cache_variable_never_makes_the_working_directory_the_cache(assets, capsys, monkeypatch, tmp_path, value):
    project = tmp_path / "project"
    for mine in ("models", "results", "logits"):
        (project / mine).mkdir(parents=True)
        (project / mine / "notes.txt").write_text("mine", encoding="utf-8")
    monkeypatch.chdir(project)
    monkeypatch.setenv("LINCORR_CACHE_DIR", value)
    before = sorted(project.rglob("*"))
    reported = spy_on_errors(monkeypatch)
    for command in (["cache", "clear"], ["cache", "list"], filled(FIT, assets)):
        assert main(command) == 2, command
        one_error_line(capsys)
    assert [type(error) for error in reported] == [CacheError] * 3
    assert sorted(project.rglob("*")) == before


@pytest.mark.parametrize("home, says", [("", "HOME is empty"), ("  ", "HOME is empty"),
                                         ("dotfiles", "HOME is the relative path 'dotfiles'")])
@pytest.mark.parametrize("cache", [None, "~/lincorr-cache", "~"])
def test_a_home_set_empty_or_relative_is_named_where_the_cache_would_go_under_it(home, says, cache, capsys, monkeypatch, tmp_path):
    """`~` under HOME="" is `/` and under a relative HOME the working directory: the cache went to /.cache/lincorr, or the
    error quoted LINCORR_CACHE_DIR as 'None'. Now HOME is named, and nothing is made."""
    from lincorr.cache import cache_root

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", home)
    if cache is None:
        monkeypatch.delenv("LINCORR_CACHE_DIR")
    else:
        monkeypatch.setenv("LINCORR_CACHE_DIR", cache)
    with pytest.raises(CacheError) as refusal:
        cache_root()
    message = str(refusal.value)
    assert message.startswith(says) and "None" not in message, message
    assert "set HOME to an absolute path or LINCORR_CACHE_DIR to one" in message, message
    assert ("~/.cache/lincorr" if cache is None else f"LINCORR_CACHE_DIR '{cache}'") in message, message
    reported = spy_on_errors(monkeypatch)
    assert main(["cache", "list"]) == 2 and says in one_error_line(capsys)
    assert [type(error) for error in reported] == [CacheError] and list(tmp_path.iterdir()) == []


def test_the_cache_variables_messages_quote_its_value_and_an_absolute_home_holds_the_default(monkeypatch, tmp_path):
    from lincorr.cache import cache_root

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("LINCORR_CACHE_DIR", "cache")
    with pytest.raises(CacheError, match="LINCORR_CACHE_DIR must be an absolute path, not 'cache'"):
        cache_root()
    monkeypatch.setenv("LINCORR_CACHE_DIR", "~/mine")
    assert cache_root() == tmp_path / "mine"
    monkeypatch.delenv("LINCORR_CACHE_DIR")
    assert cache_root() == tmp_path / ".cache" / "lincorr"


@pytest.mark.parametrize("under", ["", "/sub"])
@pytest.mark.parametrize("command", [["cache", "list"], ["cache", "list", "--json"], ["cache", "size"], ["cache", "clear"], ["models"]])
def test_every_cache_command_refuses_a_cache_variable_that_names_a_file(command, under, capsys, monkeypatch, tmp_path):
    """A cache named under a file could never be made: it is refused, not listed as empty."""
    (tmp_path / "a-file").write_text("mine", encoding="utf-8")
    monkeypatch.setenv("LINCORR_CACHE_DIR", str(tmp_path / "a-file") + under)
    reported = spy_on_errors(monkeypatch)
    assert main(command) == 2
    assert ("not a directory" if not under else "lies under") in one_error_line(capsys)
    assert [type(error) for error in reported] == [CacheError]
    assert (tmp_path / "a-file").read_text(encoding="utf-8") == "mine"


@pytest.mark.parametrize("too_long", ["a-name", "a-path"])
@pytest.mark.parametrize("command", [["cache", "list"], ["cache", "size"], ["cache", "clear"], ["models"], "fit"])
def test_a_cache_variable_too_long_for_the_file_system_is_one_line(command, too_long, assets, capsys, monkeypatch, tmp_path):
    """Every command that looks at the cache ended in an `OSError: File name too long` traceback."""
    monkeypatch.setenv("LINCORR_CACHE_DIR", str(tmp_path / ("x" * 300 if too_long == "a-name" else "x/" * 2100)))
    reported = spy_on_errors(monkeypatch)
    assert main(filled(FIT, assets) if command == "fit" else command) == 2
    assert "too long a path, or holds too long a name" in one_error_line(capsys)
    assert [type(error) for error in reported] == [InputError]


def test_cache_clear_leaves_a_directory_lincorr_did_not_make(capsys, monkeypatch, tmp_path):
    for mine in ("models", "logits", "results"):
        (tmp_path / mine).mkdir()
        (tmp_path / mine / "thesis.tex").write_text("mine", encoding="utf-8")
    monkeypatch.setenv("LINCORR_CACHE_DIR", str(tmp_path))
    reported = spy_on_errors(monkeypatch)
    assert main(["cache", "clear"]) == 2
    one_error_line(capsys)
    assert [type(error) for error in reported] == [CacheError]
    assert all((tmp_path / mine / "thesis.tex").is_file() for mine in ("models", "logits", "results"))


def test_a_cache_section_that_is_a_link_is_not_followed(capsys, monkeypatch, tmp_path):
    """What a link in the cache points to is someone's directory, not the cache: neither counted nor emptied."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "thesis.tex").write_text("mine" * 1000, encoding="utf-8")
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "results").symlink_to(elsewhere)
    monkeypatch.setenv("LINCORR_CACHE_DIR", str(cache))
    assert main(["cache", "list", "--json"]) == 0
    results = next(s for s in json.loads(capsys.readouterr().out)["sections"] if s["section"] == "results")
    assert (results["entries"], results["bytes"]) == (0, 0)


def test_a_cache_tree_deeper_than_pythons_recursion_is_listed_sized_and_cleared(capsys, monkeypatch, tmp_path):
    """pathlib's rglob (list, size) and shutil.rmtree (clear) recursed into a RecursionError traceback at 1,200 nested
    directories, and clear left the tree half removed; links inside are neither counted nor followed."""
    import shutil
    import sys

    from lincorr.cache import CACHE_MARKER

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "thesis.tex").write_text("mine" * 1000, encoding="utf-8")
    cache = tmp_path / "cache"
    deepest = cache / "logits"
    os.makedirs(deepest)
    (cache / CACHE_MARKER).write_text("", encoding="utf-8")
    # Python's default limit, whatever another test of this worker set: deeper than it, and shallow enough that the
    # deepest path (1,200 names of two characters) stays inside the system's 4,096 a path may hold.
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    for _ in range(1200):
        deepest = deepest / "d"
        os.mkdir(deepest)
    (deepest / "table.npz").write_bytes(b"x" * 1234)
    (deepest / "linked-file").symlink_to(elsewhere / "thesis.tex")
    (deepest / "linked-directory").symlink_to(elsewhere)
    monkeypatch.setenv("LINCORR_CACHE_DIR", str(cache))
    try:
        assert main(["cache", "list", "--json"]) == 0
        tables = next(s for s in json.loads(capsys.readouterr().out)["sections"] if s["section"] == "tables")
        assert (tables["entries"], tables["bytes"]) == (1, 1234)
        assert main(["cache", "size"]) == 0 and capsys.readouterr().out.startswith("1.2 KB")
        assert main(["cache", "clear", "--tables"]) == 0
        assert not (cache / "logits").exists() and (elsewhere / "thesis.tex").read_text(encoding="utf-8") == "mine" * 1000
    finally:  # pytest removes old temporary directories with shutil.rmtree too: a tree left behind would break that
        sys.setrecursionlimit(limit + 1000)
        shutil.rmtree(cache, ignore_errors=True)
        sys.setrecursionlimit(limit)


@pytest.mark.parametrize("variable", ["LINCORR_CACHE_DIR", "HOME"])
@pytest.mark.parametrize("command", [["cache", "list"], ["cache", "size"], ["cache", "clear"]])
def test_the_cache_commands_show_a_cache_path_of_terminal_escapes_and_line_breaks_escaped(command, variable, capsys,
                                                                                          monkeypatch, tmp_path):
    """A path from LINCORR_CACHE_DIR or HOME holding an escape sequence retitled the terminal, and a line break forged
    lines: every line the cache commands print shows them as escapes."""
    from lincorr.cache import CACHE_MARKER

    odd = tmp_path / "c\x1b]0;PWNED\x07\nlincorr: forged"
    cache = odd if variable == "LINCORR_CACHE_DIR" else odd / ".cache" / "lincorr"
    (cache / "logits").mkdir(parents=True)
    (cache / CACHE_MARKER).write_text("", encoding="utf-8")
    if variable == "HOME":
        monkeypatch.delenv("LINCORR_CACHE_DIR")
    monkeypatch.setenv(variable, str(odd))
    assert main(command) == 0
    printed = capsys.readouterr().out
    assert "\x1b" not in printed and "\x07" not in printed and "\\x1b]0;PWNED\\x07\\nlincorr: forged" in printed, printed
    assert not any(line.startswith("lincorr: forged") for line in printed.splitlines()), printed


# ---- reproducibility ----

def fit_json(assets, capsys, *extra) -> dict:
    assert main(filled(FIT + ["--json", "--estimator", "ridge", *extra], assets)) == 0
    payload = strict_loads(capsys.readouterr().out)
    payload.pop("seconds")
    return payload


def test_results_do_not_depend_on_the_cache(assets, capsys, monkeypatch, tmp_path):
    fresh = fit_json(assets, capsys)
    cached = fit_json(assets, capsys)
    uncached = fit_json(assets, capsys, "--no-cache")
    monkeypatch.setenv("LINCORR_CACHE_DIR", str(tmp_path / "another-cache"))
    assert fresh == cached == uncached == fit_json(assets, capsys)


def test_the_batch_size_is_part_of_a_tables_key(assets, capsys, monkeypatch):
    """Logits move by ~1e-5 with the batch they run in, so a table filled with one batch size is not reused for another."""
    fit_json(assets, capsys)
    computed = []
    real = collect.domain_scores
    monkeypatch.setattr(collect, "domain_scores", lambda lm, rows, *a, **k: computed.append(len(rows)) or real(lm, rows, *a, **k))
    fit_json(assets, capsys)
    assert computed == []
    with_seven = fit_json(assets, capsys, "--batch-size", "7")
    assert computed and max(computed) == 7
    assert with_seven == fit_json(assets, capsys, "--batch-size", "7", "--no-cache")


@pytest.fixture
def nearly_full_filesystem(tmp_path):
    """A 256 KiB tmpfs with 8 KiB left: a real full disk, whose short writes numpy reports with no errno. Needs root
    (CI runs as root); skipped where mounting is not allowed."""
    import subprocess

    mount_point = tmp_path / "full"
    mount_point.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount_point)],
                                           capture_output=True).returncode != 0:
        pytest.skip("mounting a small filesystem needs root")
    try:
        (mount_point / "filler").write_bytes(bytes(shutil.disk_usage(mount_point).free - 8192))
        yield mount_point
    finally:
        subprocess.run(["umount", str(mount_point)], check=True)


def test_a_really_full_filesystem_under_out_is_one_line_and_leaves_nothing(assets, nearly_full_filesystem, capsys):
    """The fit's files outgrow the 8 KiB left (Python's writes say ENOSPC; numpy's `tofile`, on arrays larger than what is
    left, says "N requested and M written" with no errno, as a fit on gemma-3-270m showed): one line, exit 2, no output
    directory; a rerun once space is freed succeeds."""
    out = nearly_full_filesystem / "run"
    assert main(filled(FIT, assets) + ["--out", str(out)]) == 2
    assert "nothing half-written was left" in one_error_line(capsys)
    assert sorted(p.name for p in nearly_full_filesystem.iterdir()) == ["filler"]
    (nearly_full_filesystem / "filler").unlink()
    assert main(filled(FIT, assets) + ["--out", str(out)]) == 0
    assert (out / "W.npy").is_file()


def allocate_beyond_memory(*args, **kwargs):
    torch.empty(2**50, dtype=torch.uint8)  # a PiB: the CPU allocator refuses it for real


def allocate_beyond_python_memory(*args, **kwargs):
    bytearray(2**60)


@pytest.mark.parametrize("allocate", [allocate_beyond_memory, allocate_beyond_python_memory])
def test_running_out_of_memory_is_one_line_and_leaves_nothing(allocate, assets, tmp_path, capsys, monkeypatch):
    """torch's allocator and safetensors' mmap under a memory limit raise RuntimeError with ENOMEM's words (a 1.5 GB
    `ulimit -v` on gemma-3-270m: "unable to mmap ... Cannot allocate memory (12)"), Python a MemoryError: one line naming
    what to change, exit 2, no output directory. Any other RuntimeError stays a bug's traceback."""
    monkeypatch.setattr("lincorr.fit.measure_relation", allocate)
    assert main(filled(FIT, assets) + ["--out", str(tmp_path / "run")]) == 2
    assert "ran out of memory" in one_error_line(capsys)
    assert not (tmp_path / "run").exists()
    monkeypatch.setattr("lincorr.fit.measure_relation", lambda *a, **k: torch.zeros(2) @ torch.zeros(3))
    with pytest.raises(RuntimeError, match="size"):
        main(filled(FIT, assets) + ["--out", str(tmp_path / "run")])


@pytest.mark.parametrize("kept", ["none", "half", "reshaped"])
def test_weights_that_leave_parameters_at_random_are_refused_naming_them(kept, assets, tmp_path, capsys):
    """A model directory whose model.safetensors holds none, or only some, of the model's tensors (or one in another
    shape) loaded with exit 0 on randomly initialised weights; it is refused before any work, naming the tensors."""
    from safetensors.torch import load_file, save_file

    directory = tmp_path / "model"
    shutil.copytree(assets["model"], directory)
    tensors = load_file(directory / "model.safetensors")
    names = sorted(tensors)
    if kept == "none":
        tensors = {"unrelated.weight": torch.zeros(3)}
    elif kept == "half":
        tensors = {name: tensors[name] for name in names[: len(names) // 2]}
    else:
        tensors[names[0]] = tensors[names[0]].flatten()[:5].clone()
    save_file(tensors, directory / "model.safetensors", metadata={"format": "pt"})
    out = tmp_path / "run"
    assert main(filled(FIT, {**assets, "model": str(directory)}) + ["--out", str(out)]) == 2
    line = one_error_line(capsys)
    assert ("other shapes" if kept == "reshaped" else "of the model's tensors") in line, line
    assert not out.exists()


@pytest.mark.parametrize("given", [["--inputs", "x" * 5000], ["--inputs", "/" + "y " * 3000]])
def test_an_error_quoting_a_huge_value_stays_a_short_line(given, assets, capsys):
    """What a user gave is quoted in the error line at its ends: a long word to 60 + 30 characters, a long line to 2,000."""
    assert main(filled(FIT, assets) + given) == 2
    line = one_error_line(capsys)
    assert len(line) <= 2100 and "characters)" in line, line[:300]


def test_an_error_quoting_a_name_that_holds_a_line_separator_shows_its_escape(capsys):
    """str.splitlines splits at more than line breaks: the line showed `we\u2028ird` as `we ird`, a name there is not."""
    from lincorr.cli import report_error
    from lincorr.errors import printable

    separators = [character for character in map(chr, range(0x3000)) if len(f"a{character}b".splitlines()) == 2]
    assert len(separators) > 5
    for separator in (character for character in separators if character != "\n"):
        assert report_error(InputError(f"we{separator}ird does not exist")) == 2
        assert one_error_line(capsys) == f"lincorr: error: we{printable(separator)}ird does not exist"
    assert report_error(InputError("two\nlines\r\nthree")) == 2
    assert one_error_line(capsys) == "lincorr: error: two lines three"


def test_a_repeatable_option_checks_each_value_once_against_the_values_before_it():
    """`Distinct` appends in place and checks a value against a set: 20,000 words parse, and a repeat among them is named."""
    from lincorr.cli.options import CommandParser, Distinct

    parser = CommandParser(prog="t")
    parser.add_argument("--top", action=Distinct, default=[])
    words = [f"w{i}" for i in range(20_000)]
    assert parser.parse_args([token for word in words for token in ("--top", word)]).top == words
    with pytest.raises(UsageError, match="w7 given more than once"):
        parser.parse_args([token for word in [*words[:10], "w7"] for token in ("--top", word)])
    assert parser.parse_args([]).top == [], "the default list is never appended to"


@pytest.mark.parametrize("how", ["extra-layer-in-the-weights", "model-kwargs-drop-a-layer"])
def test_weights_the_model_has_no_place_for_are_refused_naming_them(how, assets, tmp_path, capsys):
    """Weights of a larger model than the config describes (an extra layer's tensors, or `--model-kwargs` that drop a layer)
    loaded with exit 0, the tensors silently left out; they are refused before any work, naming them."""
    from safetensors.torch import load_file, save_file

    directory, extra = tmp_path / "model", []
    shutil.copytree(assets["model"], directory)
    if how == "extra-layer-in-the-weights":
        tensors = load_file(directory / "model.safetensors")
        last = max(int(name.split(".")[2]) for name in tensors if name.startswith("model.layers."))
        tensors.update({name.replace(f"layers.{last}.", f"layers.{last + 1}."): value.clone()
                        for name, value in tensors.items() if name.startswith(f"model.layers.{last}.")})
        save_file(tensors, directory / "model.safetensors", metadata={"format": "pt"})
    else:
        extra = ["--model-kwargs", '{"num_hidden_layers": 1}']
    assert main(filled(FIT, {**assets, "model": str(directory)}) + extra + ["--out", str(tmp_path / "run")]) == 2
    line = one_error_line(capsys)
    assert "tensors the model has no place for" in line and "model.layers." in line, line
    assert not (tmp_path / "run").exists()
