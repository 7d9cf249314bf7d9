"""`--config FILE`: a command's options from YAML, placed after the command's name, so the command line wins."""

from __future__ import annotations

import argparse

import pytest

from lincorr.cli import build_parser, main
from lincorr.cli.config import accumulates, with_config
from lincorr.errors import InputError, UsageError
from tests.helpers.cli_errors import one_error_line


def parsed(argv: list[str]):
    parser = build_parser()
    return parser.parse_args(with_config(parser, argv))


def test_the_files_options_reach_the_command_and_the_command_line_wins(tmp_path):
    study = tmp_path / "study.yaml"
    study.write_text("seed: 3\nn_inputs: 2000\nestimator: ols\ntop: [Tokyo, Paris]\nheatmap: true\n", encoding="utf-8")
    args = parsed(["fit", "city", "country", "--config", str(study)])
    assert (args.seed, args.n_inputs, args.estimator, args.top, args.heatmap) == (3, 2000, "ols", ["Tokyo", "Paris"], True)
    assert (args.source, args.target) == ("city", "country")
    args = parsed(["--config", str(study), "fit", "city", "country", "--seed", "5"])
    assert (args.seed, args.n_inputs) == (5, 2000), "the command line wins over the file, wherever --config stands"


@pytest.mark.parametrize("spelling", ["--conf", "--confi"])
def test_an_abbreviation_argparse_takes_for_config_reads_the_file(tmp_path, spelling):
    study = tmp_path / "study.yaml"
    study.write_text("seed: 3\n", encoding="utf-8")
    assert parsed(["fit", "city", "country", spelling, str(study)]).seed == 3
    assert parsed(["fit", "city", "country", f"{spelling}={study}"]).seed == 3


def test_a_group_commands_options_go_after_its_own_name(tmp_path):
    study = tmp_path / "study.yaml"
    study.write_text("n-facts: 7\n", encoding="utf-8")
    assert parsed(["extractive", "ocr", f"--config={study}"]).n_facts == 7


@pytest.mark.parametrize("text, message", [
    ("sed: 3\n", "'sed' is not an option of `lincorr fit`"),
    ("heatmap: false\n", "heatmap is a switch"),
    ("seed: [1, 2]\n", "seed takes one value, not a list"),
    ("seed: {a: 1}\n", "seed is a mapping, which no option takes; write text, a number, true or a list"),
    # A mapping's numbers are read as written text: it cannot stand for the JSON --model-kwargs reads.
    ("model_kwargs: {rms_norm_eps: 1e-6}\n", "model_kwargs is a mapping, which no option takes; write its JSON as quoted text"),
    ("- seed\n", "config file"),
    ("seed: [unclosed\n", "is not YAML"),
    ("seed: 1\nseed: 2\n", "duplicate key 'seed' (first on line 1)"),
    ("n_inputs: abc\n", "n-inputs:"),
    ("n_inputs: 1e400\n", "n-inputs:"),
    ("seed: -5\n", "seed:"),
    ("estimator: quantum\n", "estimator is 'quantum'; choose one of"),
    # YAML reads these as a date, bytes and a set, values no option takes: each is named, not a traceback.
    ("seed: 2024-01-01\n", "seed: "),
    ("seed: !!binary aGVsbG8=\n", "!!binary is not an option's value"),
    ("seed: !!set {1, 2}\n", "!!set is not an option's value"),
    # No command line can hold a NUL, and no path or word may: refused by the file, not by the first open() it reaches.
    ('out: "ab\\0cd"\n', "out holds a NUL character"),
    ('mlflow: "file:/tmp/ab\\0cd"\n', "mlflow holds a NUL character"),
    ('top: ["Paris", "a\\0b"]\n', "top holds a NUL character"),
    # One option written twice: the later would win silently.
    ("n_inputs: 10\nn-inputs: 20\n", "'n_inputs' and 'n-inputs' set the same option"),
    # YAML 1.1 reads 1:30 as 90 (base 60); here it is text, which a count is not.
    ("seed: 1:30\n", "seed: "),
    # a penalty's error quotes the value whole, within the line's 100 characters of it
    ("alpha: abc\n", "alpha: must be 'cv' or a number from 0 to 1e+100, got 'abc'"),
    ("test_fraction: .inf\n", "test-fraction: must be a finite number"),
])
def test_a_wrong_file_is_one_error_line_naming_it(text, message, tmp_path, capsys):
    study = tmp_path / "study.yaml"
    study.write_text(text, encoding="utf-8")
    assert main(["fit", "city", "country", "--config", str(study)]) == 2
    line = one_error_line(capsys)
    assert message in line and str(study) in line


@pytest.mark.parametrize("text, seed, n_inputs", [("seed: 010\nn_inputs: 1_000\n", 10, 1000), ("seed: 0\nn_inputs: 0o10\n", 0, None)])
def test_a_number_is_read_as_the_command_line_reads_it_not_as_yaml_1_1_does(text, seed, n_inputs, tmp_path, capsys):
    """YAML 1.1 reads 010 as 8 (octal) and 0o10 as text; `--seed 010` is 10, and `--n-inputs 0o10` no count."""
    study = tmp_path / "study.yaml"
    study.write_text(text, encoding="utf-8")
    if n_inputs is None:
        assert main(["fit", "city", "country", "--config", str(study)]) == 2 and "n-inputs" in one_error_line(capsys)
        return
    args = parsed(["fit", "city", "country", "--config", str(study)])
    assert (args.seed, args.n_inputs) == (seed, n_inputs)
    study.write_text("source_template: 0123 {}\ntop: [0123, -x]\n", encoding="utf-8")
    args = parsed(["fit", "city", "country", "--config", str(study)])
    assert args.source_template == "0123 {}" and args.top == ["0123", "-x"], "an item that starts with '-' is a value"


def test_an_item_of_a_many_valued_option_that_starts_with_a_dash_is_refused(tmp_path, capsys):
    """The command line would read it as the next option, whatever the file meant."""
    study = tmp_path / "study.yaml"
    study.write_text("seeds: [1, -x]\n", encoding="utf-8")
    assert main(["ablate", "--config", str(study)]) == 2
    assert "seeds's item '-x' starts with '-'" in one_error_line(capsys)


def test_an_option_of_several_values_leaves_the_positionals_to_the_command(tmp_path):
    """Placed after the command's name, `--seeds 1 2` would take `country` and `capital` as seeds."""
    study = tmp_path / "study.yaml"
    study.write_text("seeds: [1, 2]\nseed: 4\n", encoding="utf-8")
    args = parsed(["ablate", "country", "capital", "--config", str(study)])
    assert (args.source, args.target, list(args.seeds), args.seed) == ("country", "capital", [1, 2], 4)
    args = parsed(["ablate", "country", "capital", "--seeds", "7", "--config", str(study)])
    assert list(args.seeds) == [7], "the command line wins"


def commands(parser, names=()):
    """Every (sub)command's names and parser, read off the parsers, so that a new command is held too."""
    sub = next((action for action in parser._actions if isinstance(action, argparse._SubParsersAction)), None)
    if sub is None:
        yield list(names), parser
    for name, child in (sub.choices.items() if sub else ()):
        yield from commands(child, (*names, name))


def gathering_options(parser) -> dict[str, argparse.Action]:
    return {option: action for action in parser._actions for option in action.option_strings
            if option.startswith("--") and accumulates(action)}


def test_the_command_lines_values_of_a_repeatable_option_replace_the_files(tmp_path):
    """Appended after the file's, `--top Paris` over the file's `top: [Paris]` was refused as given twice, and any other
    word was added to the file's instead of winning."""
    parser, study = build_parser(), tmp_path / "study.yaml"
    for names, command in commands(parser):
        for option in gathering_options(command):
            study.write_text(f"{option[2:]}: ['1']\n", encoding="utf-8")
            assert with_config(parser, [*names, "--config", str(study), option, "2"]) == [*names, option, "2"], (names, option)
    study.write_text("top: [Paris, Tokyo]\n", encoding="utf-8")
    assert parsed(["fit", "city", "country", "--config", str(study), "--top", "Paris"]).top == ["Paris"]


def test_an_option_whose_name_begins_a_repeatable_ones_leaves_that_one_to_the_file(tmp_path):
    """`--seed 5` is not an abbreviation of `--seeds`: the file's `seeds: [1, 2]` was dropped, the default seeds run."""
    parser, study, met = build_parser(), tmp_path / "study.yaml", 0
    for names, command in commands(parser):
        options = {option: action for action in command._actions for option in action.option_strings}
        for longer, action in gathering_options(command).items():
            for shorter in (option for option in options if longer.startswith(option) and options[option] is not action):
                study.write_text(f"{longer[2:]}: ['1']\n", encoding="utf-8")
                argv = with_config(parser, [*names, "--config", str(study), shorter, "2"])
                met += 1
                assert any(token == longer or token.startswith(f"{longer}=") for token in argv), (names, shorter, longer)
    assert met, "no command has such a pair any more: this test holds nothing"
    study.write_text("seeds: [1, 2]\n", encoding="utf-8")
    assert list(parsed(["ablate", "country", "capital", "--config", str(study), "--seed", "5"]).seeds) == [1, 2]


def test_a_value_the_files_option_refuses_is_explained_as_the_command_line_explains_it(tmp_path):
    """The message was cut at 100 characters, remedy and all (`model: ''` ended "... or hub i... (101 characters)")."""
    parser, study, met = build_parser(), tmp_path / "study.yaml", 0
    for names, command in commands(parser):
        for action in (action for action in command._actions if callable(action.type) and action.nargs is None and action.option_strings):
            option = next(option for option in action.option_strings if option.startswith("--"))
            try:
                action.type("")
                continue
            except (argparse.ArgumentTypeError, ValueError):
                pass
            with pytest.raises(UsageError) as on_the_command_line:
                parser.parse_args([*names, f"{option}="])
            said = str(on_the_command_line.value).partition(": ")[2].rpartition(" (see ")[0]
            study.write_text(f"{option[2:]}: ''\n", encoding="utf-8")
            with pytest.raises(InputError) as refused:
                with_config(parser, [*names, "--config", str(study)])
            met += 1
            assert str(refused.value).endswith(f"{option[2:]}: {said}"), (names, option, str(refused.value))
    assert met > 50


def test_two_config_files_that_set_one_option_are_one_error_line(tmp_path, capsys):
    for name in ("a.yaml", "b.yaml"):
        (tmp_path / name).write_text("seed: 3\n", encoding="utf-8")
    assert main(["fit", "city", "country", "--config", str(tmp_path / "a.yaml"), "--config", str(tmp_path / "b.yaml")]) == 2
    assert "two --config files set --seed" in one_error_line(capsys)


def test_a_value_that_starts_with_a_dash_stays_the_options_value(tmp_path):
    study = tmp_path / "study.yaml"
    study.write_text("source_template: '-{}- lives in the city of'\n", encoding="utf-8")
    assert parsed(["fit", "a", "b", "--config", str(study)]).source_template == "-{}- lives in the city of"


def test_a_config_that_is_not_there_is_one_error_line(tmp_path, capsys):
    assert main(["fit", "city", "country", "--config", str(tmp_path / "none.yaml")]) == 2
    assert "none.yaml" in one_error_line(capsys)


@pytest.mark.parametrize("text, message", [
    ("seed: " + "1" * 5000 + "\n", "a number of 5,000 digits is no option's value"),  # Python reads no int of over 4,300
    ("estimator: " + "q" * 200_000 + "\n", "(200,002 characters); choose one of"),
    ("n_inputs: " + "z" * 200_000 + "\n", "n-inputs:"),
    ("x" * 1000 + ": 1\n", "is not an option of"),
    # Aliases of aliases: each level nine times the last; the first value that is no option's ends it.
    ("".join(f"{b}: &{b} [{', '.join([f'*{a}'] * 9)}]\n" for a, b in zip("abcdefg", "bcdefgh")).replace("b: &b [*a", "a: &a [x]\nb: &b [*a", 1),
     "is a list of"),
])
def test_user_input_in_a_config_is_quoted_briefly_and_never_a_traceback(text, message, tmp_path, capsys):
    study = tmp_path / "study.yaml"
    study.write_text(text, encoding="utf-8")
    assert main(["fit", "city", "country", "--config", str(study)]) == 2
    line = one_error_line(capsys)
    assert message in line and len(line) < 600, line[:600]


def test_a_config_larger_than_a_page_of_options_is_refused_before_it_is_parsed(tmp_path, capsys, monkeypatch):
    from lincorr.cli import config

    study = tmp_path / "study.yaml"
    study.write_text("seed: 3\n# " + "x" * config.MAX_CONFIG_BYTES + "\n", encoding="utf-8")
    monkeypatch.setattr(config.yaml, "load", lambda *args, **kwargs: pytest.fail("a file past the limit was parsed"))
    assert main(["fit", "city", "country", "--config", str(study)]) == 2
    assert "more than the 1.0 MB a config file may be" in one_error_line(capsys)


@pytest.mark.parametrize("kind", ["fifo", "device", "directory"])
def test_a_config_that_is_no_regular_file_is_refused_unopened(kind, tmp_path, capsys):
    import os

    path = {"fifo": tmp_path / "fifo.yaml", "device": "/dev/zero", "directory": tmp_path}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    assert main(["fit", "city", "country", "--config", str(path)]) == 2
    assert "not a file" in one_error_line(capsys)
