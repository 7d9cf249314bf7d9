"""Every reader of a file lincorr did not write in this run, fed damaged variants of a valid file: one InputError naming the file.

The variants are derived, not listed: from each reader's valid example, every field replaced by a value of each other JSON
kind (and by a 401-digit integer, NaN and ±Infinity); from its declared shape (`schema.FileKind`), a refused value at every
field, whose error must name that field; and for every reader special files (a directory, a FIFO, `/dev/zero`, dangling and
looping links), a file over the size limit, UTF-16 and non-UTF-8 bytes, nesting beyond MAX_NESTING, and the valid file
behind a byte-order mark, which must still read. A reader cannot escape the sweep: every call of a reading function in
lincorr must be a site listed in READ_SITES, every FileKind must belong to a reader here, and a parser called on its own
(json.loads, yaml, np.load, open) is allowed only where OWN_FILES says why the file is lincorr's own.
"""

from __future__ import annotations

import ast
import codecs
import copy
import dataclasses
import importlib
import json
import os
import pkgutil
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import lincorr
from lincorr.errors import InputError
from lincorr.fit import PAIR_FILE, PairResult
from lincorr.inputs import read_inputs_file
from lincorr.cli import build_parser
from lincorr.cli.config import CONFIG_FILE, command_parser, options_of
from lincorr.domains import read_word_file
from lincorr.knowledge.files import read_registry_file
from lincorr.knowledge.lre import LRE_FILE, read_lre_relation
from lincorr.ripple.edits import EDITS, EDITS_FILE, read_edits
from lincorr.linear import MAP_FILE, LinearMap
from lincorr.model_directory import MODEL_CONFIG, check_model_directory
from lincorr.reading import MAX_FILE_BYTES, MAX_NESTING, read_json
from lincorr.relations import read_reference_file
from lincorr.report import read_run
from lincorr.report.files import RUN_FILE
from lincorr.reproduce.judging import judged
from lincorr.reproduce.runner import ClaimResult, ReproductionResult
from lincorr.reproduce.verdicts import binomial_above
from lincorr.reproduction_file import REPRODUCTION
from lincorr.results import PROVENANCE, STATE
from lincorr.schema import Entries, FileKind, Items, Maybe, mismatch
from lincorr.studies import load_result
from lincorr.studies.logits.resilience import text_facts

SOURCE = Path(lincorr.__file__).parent
HUGE = 10**400  # json.dumps writes all 401 digits
REPLACEMENTS = (None, True, 7, HUGE, float("nan"), float("-inf"), "x", [], {}, [{"deep": [1]}])


@dataclasses.dataclass(frozen=True)
class Reader:
    """A reader: `read` takes the damaged file's path; `example` writes a valid file there (and what it needs beside it)."""

    read: Callable[[Path], object]
    example: Callable[[Path], None]
    kind: FileKind | None = None  # its declared shape, when it has one
    structured: bool = True  # JSON or YAML: nesting variants apply
    json: bool = True  # JSON: field variants apply
    text: bool = True  # a text file: a byte-order mark before it loses nothing


def write_json(path: Path, document) -> None:
    path.write_text(json.dumps(document), encoding="utf-8")


def reproduction_document() -> dict:
    published = {"where": "Table 2", "model": "llama-3-8b", "setting": "ols",
                 "rows": [{"label": "A->B", "source": "a", "target": "b", "hit": [0.4, 0.5]}], "values": {"r": 0.9}}
    claims = (ClaimResult("peng.table2", "Table 2", "W is precise", published, {"relations": {"A->B": {"ols": {"hit": [0.3]}}}},
                          "0.3", "binomial", 2.5, 0.01, "reproduced", "", {"test": "t", "p_value": 0.2}, "peng_logits.table2",
                          {"lincorr.reproduce.steps:STEPS": "abc"}, "2026-01-01T00:00:00+00:00", 1.5,
                          binomial_above(12, 40, 0.1, "hits", interest=0.3).summary(), 0.02, "the paper's Hit@1"),
              ClaimResult("peng.fig2", "Fig. 2", "a diagram", {}, {}, "", "", None, None, "not applicable", "a diagram"))
    return ReproductionResult("peng", "Peng et al.", "tiny", "f" * 16, "quick", judged(claims)).summary()


def reproduction_run(path: Path) -> None:
    write_json(path, reproduction_document())
    write_json(path.parent / "provenance.json", {"study": "reproduce"})


def lre_relation(path: Path) -> None:
    write_json(path, {"name": "capital", "prompt_templates": ["The capital of {} is"],
                      "properties": {"relation_type": "factual", "domain_name": "country", "range_name": "city"},
                      "samples": [{"subject": "France", "object": "Paris"}, {"subject": "Japan", "object": "Tokyo"}]})


def model_directory(path: Path) -> None:
    write_json(path, {"model_type": "llama", "hidden_size": 8})
    for name in ("model.safetensors", "tokenizer.json"):
        (path.parent / name).write_bytes(b"")


def copied_run(study: str, name: str):
    """An example that is a file of one of the tiny runs (conftest's `tiny_runs`), with the rest of its directory beside it."""
    def example(path: Path) -> None:
        source = Path(os.environ["LINCORR_TEST_TINY_RUNS"]) / study
        for item in source.iterdir():
            if item.is_file():
                shutil.copy(item, path.parent / item.name)
        assert (path.parent / name).exists()
    return example


def text(content: str):
    return lambda path: path.write_text(content, encoding="utf-8")


READERS = {
    "saved reproduction": Reader(ReproductionResult.load, lambda path: write_json(path, reproduction_document()), REPRODUCTION),
    "report of a reproduction": Reader(lambda path: read_run(path.parent), reproduction_run, REPRODUCTION),
    "LRE relation file": Reader(read_lre_relation, lre_relation, LRE_FILE),
    "RippleEdits file": Reader(read_edits, lambda path: shutil.copy(EDITS_FILE, path), EDITS),
    "model config": Reader(lambda path: check_model_directory(path.parent, trust_remote_code=False), model_directory, MODEL_CONFIG),
    "saved pair": Reader(lambda path: PairResult.load(path.parent), copied_run("fit", "result.json"), PAIR_FILE),
    "saved result state": Reader(lambda path: load_result(path.parent), copied_run("matrix", "result_state.json"), STATE),
    "saved result provenance": Reader(lambda path: load_result(path.parent), copied_run("matrix", "provenance.json"), PROVENANCE),
    "reference file": Reader(read_reference_file, lambda path: write_json(path, {"samples": [{"subject": "Paris", "object": "France"}]})),
    "registry file": Reader(read_registry_file, text("domains:\n  city: [Paris, Tokyo]\n"), json=False),
    "inputs file": Reader(read_inputs_file, text("Alice\nBob\n"), structured=False, json=False),
    "word file": Reader(read_word_file, text("Paris\nTokyo\n"), structured=False, json=False),
    "training text": Reader(text_facts, text("Paris is in France.\n"), structured=False, json=False),
    "config file": Reader(lambda path: options_of(str(path), command_parser(build_parser(), ["fit"])[0]), text("seed: 3\n"),
                          CONFIG_FILE, json=False),
    "linear map file": Reader(LinearMap.load, lambda path: LinearMap(alpha=1.0).fit(np.eye(4), np.eye(4)[:, :2]).save(path),
                              MAP_FILE, structured=False, json=False, text=False),
}
FILE_NAMES = {"saved pair": "result.json", "saved result state": "result_state.json", "saved result provenance": "provenance.json",
              "model config": "config.json", "report of a reproduction": "reproduction.json"}
NEEDS_RUNS = {"saved pair", "saved result state", "saved result provenance"}

# Every call of a reading function, by module and function, and the reader above (or test) that sweeps it.
READ_SITES = {
    "lincorr.cli.config:options_of": "config file",
    "lincorr.cli.options:check_user_files": "training text",
    "lincorr.domains:read_word_file": "word file",
    "lincorr.fit:PairResult.load": "saved pair",
    "lincorr.fit:PairResult.from_saved": "saved pair",
    "lincorr.inputs:read_inputs_file": "inputs file",
    "lincorr.knowledge.files:read_registry_file": "registry file",
    "lincorr.knowledge.lre:read_lre_relation": "LRE relation file",
    "lincorr.linear:LinearMap.load": "linear map file",
    "lincorr.model_directory:check_model_directory": "model config",
    "lincorr.relations:read_reference_file": "reference file",
    "lincorr.ripple.edits:read_edits": "RippleEdits file",
    "lincorr.reproduction_file:read_reproduction_file": "saved reproduction",
    "lincorr.results:read_study": "saved result provenance",
    "lincorr.results:read_state": "saved result state",
    "lincorr.studies.logits.resilience:text_facts": "training text",
    "lincorr.tracking:log_result": "saved result provenance",
}
# The report's readers of run directories are swept by tests/test_report_hostile.py and test_every_field_of_every_run_file below.
RUN_DIRECTORY_MODULES = ("lincorr.report.",)
# Parsers called on their own, outside lincorr.reading: only on files lincorr wrote itself or ships.
OWN_FILES = {
    "lincorr.cli.values": "--model-kwargs, JSON typed on the command line, not a file",
    "lincorr.bundled": "bundled.yaml, shipped in the package, and the chunk packages' data files, each checked by its sha256",
    "lincorr.cache": "cache entries lincorr wrote; an unreadable one is recomputed",
    "lincorr.checkpoints": "fine-tuned checkpoints lincorr wrote in the cache; an unreadable one is trained again",
    "lincorr.distributed": "messages between lincorr's own ranks",
    "lincorr.filesystem": "the cache's own JSON and /proc/self/status",
    "lincorr.paper": "paper.yaml, shipped in the package",
    "lincorr.reproduce.claims": "the claims files shipped in the package (tests/test_reproduce.py reads every one)",
    "lincorr.provenance": "lincorr's own source, for what its code computes",
    "lincorr.source_units": "lincorr's own source and the package's data files, for the records of the code a result ran",
    "lincorr.models": "a GGUF's header, read by models.check_gguf_file against the file's size",
    "lincorr.outputs": "writing a CSV",
    "lincorr.cli": "/dev/null for stdout",
    "lincorr.collection.pieces": "the cache's table store",
    "lincorr.collection.tables": "the cache's table store",
    "lincorr.studies.logits.scale": "a model loaded by name",
    "lincorr.studies": "a saved result, by its result type's load (swept as the saved results above)",
}
READING_FUNCTIONS = {"read_json", "read_text", "read_lines", "read_bytes", "read_document", "parse_json", "read_array"}
PARSERS = {"json.loads", "json.load", "yaml.load", "yaml.safe_load", "np.load", "numpy.load", "open", "pickle.load", "torch.load"}


@pytest.fixture
def runs_for_examples(request, monkeypatch):
    if any(name in request.node.name for name in NEEDS_RUNS):
        monkeypatch.setenv("LINCORR_TEST_TINY_RUNS", str(Path(request.getfixturevalue("tiny_runs")["fit"]).parent))


def example_file(name: str, directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / FILE_NAMES.get(name, "file.json" if READERS[name].json else "file.txt")
    READERS[name].example(path)
    return path


def refused(reader: Reader, path: Path, variant: str, field: str | None = None) -> None:
    """The reader refuses `path` with one InputError line naming it (and `field`); anything else fails with the variant."""
    try:
        reader.read(path)
    except InputError as error:
        message = str(error)
        assert "\n" not in message and str(path.parent) in message, (variant, message)
        assert message.count(str(path)) <= 1, ("one error, not one wrapped in another", variant, message)
        assert field is None or field in message, (variant, field, message)
        return
    except Exception as error:  # noqa: BLE001 - any other exception is the failure this sweep looks for
        pytest.fail(f"{variant}: {type(error).__name__}: {error}")
    pytest.fail(f"{variant}: read without an error")


def read_or_refused(reader: Reader, path: Path, variant: str) -> None:
    try:
        reader.read(path)
    except InputError as error:
        assert "\n" not in str(error) and str(path.parent) in str(error), (variant, str(error))
    except Exception as error:  # noqa: BLE001
        pytest.fail(f"{variant}: {type(error).__name__}: {error}")


def special_files(path: Path, good: bytes) -> dict[str, Callable[[], None]]:
    def replace(make):
        def damage():
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
            make()
        return damage

    def huge():
        with open(path, "wb") as handle:  # sparse: no disk is used
            handle.truncate(MAX_FILE_BYTES + 1)

    return {"a directory": replace(path.mkdir), "a FIFO": replace(lambda: os.mkfifo(path)),
            "a link to /dev/zero": replace(lambda: path.symlink_to("/dev/zero")),
            "a dangling link": replace(lambda: path.symlink_to(path.parent / "nowhere")),
            "a link loop": replace(lambda: path.symlink_to(path)), "over the size limit": replace(huge),
            "UTF-16": replace(lambda: path.write_bytes(good.decode("utf-8", errors="replace").encode("utf-16"))),
            "Latin-1": replace(lambda: path.write_bytes(good + "é".encode("latin-1"))),
            "binary": replace(lambda: path.write_bytes(bytes(range(256))))}


@pytest.mark.parametrize("name", READERS)
def test_special_files_encodings_size_and_nesting_are_refused(name, tmp_path, runs_for_examples):
    reader = READERS[name]
    path = example_file(name, tmp_path / "run")
    good = path.read_bytes()
    reader.read(path)  # the example itself reads
    variants = special_files(path, good)
    if reader.structured:
        variants["nested too deep"] = lambda: path.write_bytes(b"[" * 100_000 + b"]" * 100_000)
    for variant, damage in variants.items():
        damage()
        refused(reader, path, variant)
    if reader.text:
        path.unlink()
        path.write_bytes(codecs.BOM_UTF8 + good)
        reader.read(path)  # a byte-order mark loses nothing


def paths_of(value, where: tuple = ()):
    """Every place in a JSON document: each key of an object, the first item of a list."""
    yield where
    if isinstance(value, dict):
        for key, item in value.items():
            yield from paths_of(item, (*where, key))
    elif isinstance(value, list) and value:
        yield from paths_of(value[0], (*where, 0))


def replaced(document, where: tuple, value):
    if not where:
        return value
    changed = copy.deepcopy(document)
    target = changed
    for step in where[:-1]:
        target = target[step]
    target[where[-1]] = value
    return changed


@pytest.mark.parametrize("name", [name for name, reader in READERS.items() if reader.json])
def test_every_field_replaced_by_any_json_value_reads_or_is_one_error_line(name, tmp_path, runs_for_examples):
    reader = READERS[name]
    path = example_file(name, tmp_path / "run")
    document = json.loads(path.read_text(encoding="utf-8"))
    places = list(paths_of(document))
    for where in places:
        for value in REPLACEMENTS:
            path.write_text(json.dumps(replaced(document, where, value)), encoding="utf-8")
            read_or_refused(reader, path, f"{'.'.join(map(str, where)) or 'the whole file'} = {str(value)[:20]}")
    assert len(places) > 2


@pytest.mark.parametrize("name", [name for name, reader in READERS.items() if reader.json])
def test_half_a_surrogate_pair_anywhere_is_one_error_line(name, tmp_path, runs_for_examples):
    """JSON may write "\\ud800" alone; Python parses it into a string that no file or terminal takes (UTF-8 refuses it),
    so a reader that let it through would fail later, while printing or saving."""
    reader = READERS[name]
    path = example_file(name, tmp_path / "run")
    document = json.loads(path.read_text(encoding="utf-8"))
    for where in paths_of(document):
        path.write_text(json.dumps(replaced(document, where, "\ud800")), encoding="utf-8")
        refused(reader, path, f"{'.'.join(map(str, where)) or 'the whole file'} = half a pair", "not Unicode")
    path.write_text(json.dumps(replaced(document, (), {"\udfff": 1})), encoding="utf-8")
    refused(reader, path, "a key that is half a pair", "not Unicode")


def nested(document, where: tuple):
    for step in where:
        document = document[step]
    return document


def with_a_key_twice(document, where: tuple) -> tuple[str, str]:
    """The JSON of `document` with the object at `where` holding its first key twice (which json.dumps never writes), and
    that key."""
    inner = nested(document, where)
    key, value = next(iter(inner.items()))
    doubled = "{" + json.dumps(key) + ": " + json.dumps(value) + ", " + json.dumps(inner)[1:]
    marker = "lincorr-test: the object written with a key twice"
    return json.dumps(replaced(document, where, marker)).replace(json.dumps(marker), doubled, 1), key


@pytest.mark.parametrize("name", [name for name, reader in READERS.items() if reader.json])
def test_a_key_written_twice_in_any_object_is_one_error_line_naming_it(name, tmp_path, runs_for_examples):
    """Python's parser keeps the last of two equal keys without a word: a file saying "verdict" twice would read as
    whichever its writer put second."""
    reader = READERS[name]
    path = example_file(name, tmp_path / "run")
    document = json.loads(path.read_text(encoding="utf-8"))
    objects = [where for where in paths_of(document) if isinstance(nested(document, where), dict) and nested(document, where)]
    for where in objects:
        text, key = with_a_key_twice(document, where)
        path.write_text(text, encoding="utf-8")
        refused(reader, path, f"{'.'.join(map(str, where)) or 'the whole file'} holds {key!r} twice", f"'{key}' twice")
    assert objects


def test_a_json_file_with_a_verdict_written_twice_is_refused_and_a_normal_one_reads(tmp_path):
    path = tmp_path / "claim.json"
    for text in ('{"verdict": "a", "verdict": "b"}', '{"claims": [{"id": "x", "verdict": "a", "verdict": "b"}]}'):
        path.write_text(text, encoding="utf-8")
        with pytest.raises(InputError) as refusal:
            read_json(path, "claim file")
        message = str(refusal.value)
        assert str(path) in message and "'verdict' twice" in message and "each key may appear once" in message, message
    path.write_text('{"verdict": "a", "claims": [{"verdict": "b"}, {"verdict": "c"}]}', encoding="utf-8")
    assert read_json(path, "claim file") == {"verdict": "a", "claims": [{"verdict": "b"}, {"verdict": "c"}]}


def shaped_fields(shape, value, where: str = ""):
    """(dotted field, path, a value the shape refuses there) for every field of `shape` present in the example `value`."""
    inner = shape.shape if isinstance(shape, Maybe) else shape
    wrong = next((c for c in (7, "x", [], {}, None) if mismatch(c, inner, "") is not None), None)
    if wrong is not None:
        yield where or "the whole file", (), wrong
    children = []
    if isinstance(inner, dict) and isinstance(value, dict):
        children = [(key, key, inner[key]) for key in inner if key in value]
    elif isinstance(inner, Items) and isinstance(value, list) and value:
        children = [(0, "[0]", inner.shape)]
    elif isinstance(inner, Entries) and isinstance(value, dict) and value:
        key = next(iter(value))
        children = [(key, key, inner.shape)]
    elif isinstance(inner, list) and isinstance(value, list):
        children = [(i, f"[{i}]", item) for i, item in enumerate(inner)]
    for step, name, child in children:
        label = f"{where}{name}" if name.startswith("[") or not where else f"{where}.{name}"
        for field, path, refused_value in shaped_fields(child, value[step], label):
            yield field, (step, *path), refused_value


@pytest.mark.parametrize("name", [name for name, reader in READERS.items() if reader.kind is not None and reader.json])
def test_a_wrong_kind_of_value_at_every_declared_field_is_named(name, tmp_path, runs_for_examples):
    reader = READERS[name]
    path = example_file(name, tmp_path / "run")
    document = json.loads(path.read_text(encoding="utf-8"))
    fields = list(shaped_fields(reader.kind.shape, document))
    for field, where, value in fields:
        path.write_text(json.dumps(replaced(document, where, value)), encoding="utf-8")
        refused(reader, path, f"{field} = {value!r}", field)
    assert fields


def test_every_file_kind_has_a_reader_in_the_sweep():
    kinds = {}
    for info in pkgutil.walk_packages([str(SOURCE)], prefix="lincorr."):
        if info.name == "lincorr.__main__":
            continue
        module = importlib.import_module(info.name)
        kinds |= {f"{info.name}.{name}": value for name, value in vars(module).items()
                  if isinstance(value, FileKind) and value.__class__.__module__ == "lincorr.schema"}
    swept = [reader.kind for reader in READERS.values()] + [RUN_FILE]
    assert [name for name, kind in kinds.items() if not any(kind is other for other in swept)] == []


def call_sites(path: Path):
    """(function, callee as written) for every call in a module; methods as Class.method."""
    def walk(node, owner: str):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                yield from walk(child, child.name)
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield from walk(child, f"{owner}.{child.name}" if owner and "." not in owner else owner or child.name)
            else:
                if isinstance(child, ast.Call):
                    yield owner, ast.unparse(child.func)
                yield from walk(child, owner)
    yield from walk(ast.parse(path.read_text(encoding="utf-8")), "")


def test_every_reading_call_is_a_swept_site_and_no_parser_reads_a_strangers_file():
    unswept, unexplained = [], []
    for info in pkgutil.walk_packages([str(SOURCE)], prefix="lincorr."):
        if info.name in ("lincorr.reading", "lincorr.schema"):
            continue
        path = Path(importlib.util.find_spec(info.name).origin)
        # filesystem.read_json reads lincorr's own cache files, forgiving what it cannot parse: never a stranger's file.
        own_readers = {alias.asname or alias.name for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                       if isinstance(node, ast.ImportFrom) and node.module == "lincorr.filesystem" for alias in node.names
                       if alias.name.startswith("read")}
        for function, called in call_sites(path):
            site = f"{info.name}:{function}"
            name = called.rpartition(".")[2]
            if (name in READING_FUNCTIONS and site not in READ_SITES and not info.name.startswith(RUN_DIRECTORY_MODULES)
                    and info.name not in OWN_FILES):
                unswept.append(site)
            # A swept site may parse the text its reading call returned (the registry's YAML).
            parses = called in PARSERS or name in ("read_text", "read_bytes") and "." in called
            if called in own_readers and info.name not in OWN_FILES:
                unexplained.append(f"{site} reads with lincorr.filesystem.{called}, which is for lincorr's own files")
            elif parses and info.name not in OWN_FILES and site not in READ_SITES and not info.name.startswith(RUN_DIRECTORY_MODULES):
                unexplained.append(f"{site} calls {called}")
    assert unswept == []
    assert unexplained == []
    assert set(READ_SITES.values()) <= set(READERS)


# ---- the commands: `reproduce --status` and the report of a stranger's reproduction ----

def edited_reproduction(change) -> bytes:
    document = reproduction_document()
    change(document)
    return json.dumps(document).encode("utf-8")


STATUS_CASES = {
    "claims-text": (edited_reproduction(lambda d: d.__setitem__("claims", "peng.table2")), "claims is text, not a list"),
    "claims-a-number": (edited_reproduction(lambda d: d.__setitem__("claims", 5)), "claims is a whole number, not a list"),
    "no-paper": (edited_reproduction(lambda d: d.pop("paper")), "paper is missing"),
    "step-a-list": (edited_reproduction(lambda d: d["claims"][0].__setitem__("step", ["peng_logits"])),
                    "claims[0].step is a list of 1, not text or null"),
    # a claim twice, or another paper's, would join the run's family of p-values
    "a-claim-twice": (edited_reproduction(lambda d: d["claims"].append(d["claims"][0])), "the claim peng.table2 is there twice"),
    "another-papers-claims": (edited_reproduction(lambda d: d.__setitem__("paper", "feng")), "the claim peng.table2 is not one of feng's"),
    "no-such-paper": (edited_reproduction(lambda d: d.update(paper="smith", claims=[{**c, "id": "smith." + c["id"]} for c in d["claims"]])),
                      "the paper 'smith' is none of feng, merullo, peng"),
    "nested-100000": (b"[" * 100_000, f"lincorr reads structures up to {MAX_NESTING} levels"),
    "fifo": ("fifo", "is a FIFO (named pipe), not a file"),
    "link-to-dev-zero": ("/dev/zero", "is a character device, not a file"),
}


@pytest.mark.parametrize("case", STATUS_CASES)
def test_reproduce_status_of_a_damaged_reproduction_is_one_error_line(case, tmp_path, monkeypatch, capsys):
    from helpers.cli_errors import one_error_line, spy_on_errors

    from lincorr.cli import main

    content, message = STATUS_CASES[case]
    run = tmp_path / "run"
    run.mkdir()
    path = run / "reproduction.json"
    if content == "fifo":
        os.mkfifo(path)
    elif content == "/dev/zero":
        path.symlink_to("/dev/zero")
    else:
        path.write_bytes(content)
    reported = spy_on_errors(monkeypatch)
    assert main(["reproduce", "--status", str(run)]) == 2
    line = one_error_line(capsys)
    assert str(path) in line and message in line, line
    assert [type(error) for error in reported] == [InputError]


def test_reproduce_status_reads_a_reproduction_behind_a_byte_order_mark(tmp_path, capsys):
    from lincorr.cli import main

    (tmp_path / "reproduction.json").write_bytes(codecs.BOM_UTF8 + json.dumps(reproduction_document()).encode("utf-8"))
    assert main(["reproduce", "--status", str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"file": str(tmp_path / "reproduction.json"), "paper": "peng", "model": "tiny",
                                                   "stale": ["peng.table2"], "changed": {"peng.table2": ["its step peng_logits.table2 (gone)"]}}


def test_the_report_shows_any_json_number_and_any_published_rows(tmp_path):
    from lincorr.report import build_report
    from lincorr.report.page import Table

    document = reproduction_document()
    claim = document["claims"][0]
    claims = [{**claim, "id": f"peng.c{i}", "p_value": p, "decision": {**claim["decision"], "effect": p, "p_effect": p, "adjusted_p_effect": p}}
              for i, p in enumerate((HUGE, float("nan"), float("inf"), float("-inf"), -0.5, 2.0))]
    claims.append({**claim, "id": "peng.row-value-an-object", "paper": {**claim["paper"], "rows": [{"label": "A->B", "hit": {"r": [HUGE]}}]},
                   "ours": {"relations": {"A->B": {"hit": {"r": -HUGE}}}}})
    run = tmp_path / "run"
    run.mkdir()
    write_json(run / "reproduction.json", {**document, "claims": claims})
    write_json(run / "provenance.json", {"study": "reproduce"})
    report = build_report([run])
    table = next(block for block in report.sections[0].blocks if isinstance(block, Table))
    names = [column.name for column in table.columns]
    effect, tests, paper = names.index("effect [interval] vs Δ"), names.index("tests"), names.index("paper")
    # 401 digits are beyond a float (infinity), NaN is undefined: no effect is shown for them; the rest as written.
    assert [row[effect] for row in table.rows[:4]] == [""] * 4
    assert table.rows[4][effect].startswith("-0.5 [") and "T+ p 2 (adj 2)" in table.rows[5][tests]
    assert "T+" not in table.rows[1][tests]
    assert table.rows[-1][paper] == "llama-3-8b: A->B r inf; r 0.9"
    assert "<html" in report.html().lower()
    write_json(run / "reproduction.json", {**document, "claims": [{**claim, "paper": {**claim["paper"], "rows": 5}}]})
    with pytest.raises(InputError, match=r"claims\[0\]\.paper\.rows is a whole number, not a list"):
        build_report([run])


def test_a_wrong_kind_of_value_in_a_linear_maps_header_is_named(tmp_path):
    from safetensors.numpy import save

    path = tmp_path / "map.safetensors"
    LinearMap(alpha=1.0).fit(np.eye(4), np.eye(4)[:, :2]).save(path)
    header = json.loads(json.loads(path.read_bytes()[8:8 + int.from_bytes(path.read_bytes()[:8], "little")])["__metadata__"]["lincorr"])
    arrays = {"W": np.zeros((4, 2), np.float32), "intercept": np.zeros(2, np.float32)}
    for field, value in (("alpha_", "big"), ("one_d_target", 3), ("params.alphas", {"a": 1}), ("format", None)):
        damaged = replaced(header, tuple(field.split(".")), value)
        path.write_bytes(save(arrays, metadata={"lincorr": json.dumps(damaged)}))
        refused(READERS["linear map file"], path, f"{field} = {value!r}", field)


@pytest.mark.parametrize("shape", [(2**40, 2**40), (2**62, 4), (10**30,)])
def test_an_array_whose_header_declares_more_than_the_file_holds_is_refused_without_a_warning(tmp_path, shape):
    """The declared size is counted in Python's integers: numpy's count overflows int64 and warns before it refuses."""
    import io
    import warnings

    from lincorr.reading import read_array

    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": shape})
    path = tmp_path / "W.npy"
    path.write_bytes(header.getvalue() + b"\0" * 64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(InputError, match="its header declares .* bytes of values but the file holds"):
            read_array(path, "linear map file", "fit it again")


@pytest.mark.parametrize(("path", "inside"), [("run", True), ("run/x/report.html", True), ("elsewhere/../run/r.html", True),
                                              ("link/r.html", True), ("runs/r.html", False), ("r.html", False)])
def test_a_path_lies_within_a_directory_however_it_is_spelt(tmp_path, monkeypatch, path, inside):
    from lincorr.filesystem import lies_within

    (tmp_path / "run").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "run")
    monkeypatch.chdir(tmp_path)
    assert lies_within(path, "run", "a path") is inside
    assert lies_within(tmp_path / path, tmp_path / "link", "a path") is inside


def test_a_path_through_a_link_loop_is_one_output_error(tmp_path):
    from lincorr.errors import OutputError
    from lincorr.filesystem import lies_within

    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    with pytest.raises(OutputError, match="cannot be resolved"):
        lies_within(tmp_path / "a" / "report.html", tmp_path, "the report")


@pytest.mark.parametrize("value, says", [
    ({"code": {"lincorr.fit:f": 7}}, "code.lincorr.fit:f is a whole number, not text"),  # not "an object, not an object or null"
    ({"code": [1]}, "code is a list of 1, not an object or null"),
    ({"rows": [[1, "x"]]}, "rows[0][1] is text, not a number or null"),
])
def test_a_value_of_the_right_kind_with_a_wrong_inside_names_the_inside(value, says):
    shape = {"code": Maybe((Entries(str), type(None))), "rows": Maybe((Items(Items((int, float, type(None)))), type(None)))}
    assert mismatch(value, shape, "") == says
