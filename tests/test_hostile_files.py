"""Every file-reading option of every command, fed files a stranger could send: one error line, exit 2, nothing left.

The options are read off the parsers (every option whose metavar is FILE), so an option added later is swept too;
a command needs its positional arguments in POSITIONALS to be swept, and a test fails when one is missing. The model
named does not exist: a bad file must be reported before any model is looked for.
"""

from __future__ import annotations

import argparse
import codecs
import os
from pathlib import Path

import pytest

from helpers.cli_errors import one_error_line, spy_on_errors

from lincorr.cli import build_parser, main
from lincorr.errors import InputError
from lincorr.reading import MAX_FILE_BYTES, MAX_NESTING

# What each command needs besides the swept option to get as far as reading it.
POSITIONALS = {
    "demo": [], "fit": ["city", "country"], "templates": [], "domains": [], "references": [], "matrix": ["--prompts", "city,country"],
    "precision": ["city", "country"], "lre": [], "cases": ["city", "country"], "resilience": ["--prompts", "city,country"], "scale": ["--models", "a,b"],
    "ablate": ["city", "country"], "generalize": ["city", "country"], "diagnose": ["city", "country"],
    "subwords": ["city", "country"], "gradcorr": ["city", "country"], "predict-edit": ["city", "country", "--value", "Paris"],
    "lens": ["capitals"], "ovector": ["capitals", "--layer", "1"], "ffn-ablate": ["capitals", "--from-layer", "1"],
    "ovector-w": ["capitals", "--layer", "1"], "reproduce": ["peng", "--only", "peng.table2"], "tasks": [], "ripple": ["--max-edits", "4"],
}
WRITTEN = {("report", "--out")}  # FILE options lincorr writes, not reads
MODEL_FREE = {"templates", "references", "tasks"}  # listings that take no --model
STRUCTURED = {"--registry", "--references"}  # parsed as YAML or JSON; the others are lines of text, where any nesting is text


def subcommands() -> dict[str, argparse.ArgumentParser]:
    return next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices


def subcommand(name: str) -> argparse.ArgumentParser:
    return subcommands()[name]


def file_options() -> list[tuple[str, str]]:
    """Every (command, option) that reads a file; --config, one reader before any command parses, is swept once, on fit."""
    return [(name, action.option_strings[-1]) for name, parser in subcommands().items() for action in parser._actions
            if action.metavar == "FILE" and (name, action.option_strings[-1]) not in WRITTEN
            and (action.option_strings[-1] != "--config" or name == "fit")]


def hostile_files(directory: Path) -> dict[str, str]:
    """A stranger's files by name: each must be refused by what it is, never parsed into a crash or read forever."""
    files = {
        "empty": b"", "bom-only": codecs.BOM_UTF8, "binary": bytes(range(256)) * 4,
        "utf16": "Paris\nTokyo\n".encode("utf-16"), "deep-json": b"[" * (MAX_NESTING * 20) + b"]" * (MAX_NESTING * 20),
        "deep-yaml": ("domains:\n" + "".join(" " * (2 * i) + f"k{i}:\n" for i in range(1, MAX_NESTING * 2))).encode(),
        "deep-flow-yaml": b"domains: " + b"[" * 100_000,
    }
    directory.mkdir()
    paths = {}
    for name, content in files.items():
        (directory / name).write_bytes(content)
        paths[name] = str(directory / name)
    huge = directory / "huge"
    with open(huge, "wb") as handle:  # sparse: no disk is used
        handle.truncate(MAX_FILE_BYTES + 1)
    (directory / "a-directory").mkdir()
    os.mkfifo(directory / "fifo")
    return {**paths, "huge": str(huge), "directory": str(directory / "a-directory"), "fifo": str(directory / "fifo"),
            "device": "/dev/zero"}


def test_every_command_with_a_file_option_can_be_swept():
    assert {name for name, _ in file_options()} <= set(POSITIONALS)


@pytest.mark.parametrize("command, option", file_options(), ids=[f"{c} {o}" for c, o in file_options()])
def test_a_hostile_file_ends_in_one_error_line_before_the_model(command, option, tmp_path, monkeypatch, capsys):
    hostile = hostile_files(tmp_path / "files")
    monkeypatch.chdir(tmp_path)
    reported = spy_on_errors(monkeypatch)
    model = [] if command in MODEL_FREE else ["--model", str(tmp_path / "no-such-model")]
    side = option.removeprefix("--").removesuffix("-domain")
    partner = [f"--{side}-template", "{} is"] if option.endswith("-domain") else []
    if option.endswith("-domain") and command == "precision":  # a prompt of one's own is judged by one's own pairs
        (tmp_path / "pairs.tsv").write_text("Paris\tFrance\n", encoding="utf-8")
        partner += ["--references", str(tmp_path / "pairs.tsv")]
    if command == "resilience" and option != "--finetune-text":  # model B: another model, or A fine-tuned on a text
        partner += ["--eval-model", str(tmp_path / "no-such-model")]
    quiet = ["--quiet"] if any("--quiet" in a.option_strings for a in subcommand(command)._actions) else []
    if option not in STRUCTURED:
        hostile = {name: path for name, path in hostile.items() if not name.startswith("deep")}
    before = sorted(tmp_path.rglob("*"))
    for name, path in hostile.items():
        assert main([command, *POSITIONALS[command], *model, *partner, option, path, *quiet]) == 2, name
        assert path in one_error_line(capsys), name
        assert isinstance(reported[-1], InputError), (name, reported[-1])
    assert sorted(tmp_path.rglob("*")) == before, "a refused file left files behind"


@pytest.mark.parametrize("template", ["lives in the city of", "{} and {} live in"])
def test_a_template_without_one_placeholder_is_reported_before_the_model(template, tmp_path, capsys):
    (tmp_path / "cities.txt").write_text("Paris\nTokyo\n", encoding="utf-8")
    argv = ["fit", "city", "country", "--model", str(tmp_path / "no-such-model"), "--source-template", template,
            "--source-domain", str(tmp_path / "cities.txt"), "--quiet"]
    assert main(argv) == 2
    line = one_error_line(capsys)
    assert "template" in line and "no-such-model" not in line, line


PATH_METAVARS = {"FILE", "DIR", "RUN_DIR", "EDITS_FILE"}


def path_actions(parser: argparse.ArgumentParser, names=()):
    """(command, action) of every option or positional that names a path, of every (sub)command."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from path_actions(child, (*names, name))
        elif action.metavar in PATH_METAVARS and action.default is not argparse.SUPPRESS:
            yield " ".join(names), action


def test_every_path_a_user_names_reads_a_leading_tilde_as_the_home_directory(tmp_path, monkeypatch, capsys):
    """A config file's `inputs: ~/inputs.txt`, and `--inputs=~/x`, which the shell does not expand, were looked for in a
    directory named `~` ("does not exist"), where `out: ~/runs` was the home directory."""
    monkeypatch.setenv("HOME", str(tmp_path))
    found = list(path_actions(build_parser()))
    assert {metavar for _, action in found for metavar in [action.metavar]} == PATH_METAVARS
    for command, action in found:
        assert callable(action.type) and action.type("~/x") == str(tmp_path / "x"), (command, action.dest)
        with pytest.raises(argparse.ArgumentTypeError, match="home directory this machine does not know"):
            action.type("~no-such-user-here/x")
    (tmp_path / "study.yaml").write_text("inputs: ~/inputs.txt\n", encoding="utf-8")
    (tmp_path / "inputs.txt").write_text("Paris\n", encoding="utf-8")
    assert main(["fit", "city", "country", "--model", str(tmp_path / "none"), "--config=~/study.yaml"]) == 2
    assert "1 inputs hold out 0 to score on" in one_error_line(capsys), "the file was found and read: one input is too few"
