"""The command surface a newcomer meets: one spelling per concept (older ones still work, with a note), global options on
either side of the subcommand, help grouped by system, defaults equal in the CLI and in Python, and results that are reused."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import numpy as np
import pytest
from helpers.fit_workspace import fit_args, write_fit_workspace
from helpers.tiny import CITIES, COUNTRIES, NAMES

from lincorr.cli import build_parser, main
from lincorr.cli.listing import HELP, SYSTEMS

ROOT = Path(__file__).resolve().parents[1]


def subcommands() -> dict:
    return next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices


# ---- older spellings: the same parsed options as the new one, and a note on stderr ----

ALIASES = [
    (["fit", "city", "country", "--save-dir", "run"], ["fit", "city", "country", "--out", "run"], "--out"),
    (["precision", "--paper"], ["precision", "--preset", "paper"], "--preset paper"),
    (["precision", "--table2"], ["precision", "--paper-table", "2"], "--paper-table 2"),
    (["generalize", "--paper"], ["generalize", "--preset", "paper"], "--preset paper"),
    (["generalize", "--table5"], ["generalize", "--paper-table", "5"], "--paper-table 5"),
    (["gradcorr", "--table4"], ["gradcorr", "--paper-table", "4"], "--paper-table 4"),
    (["ablate", "--table7"], ["ablate", "--paper-table", "7"], "--paper-table 7"),
    (["ovector", "capitals", "--protocol", "paper"], ["ovector", "capitals", "--preset", "paper"], "--preset"),
    (["ovector", "capitals", "--protocol", "averaged"], ["ovector", "capitals", "--preset", "lincorr"], "--preset"),
]


@pytest.mark.parametrize("old, new, canonical", ALIASES)
def test_an_older_spelling_parses_as_the_new_one_and_says_so(old, new, canonical, capsys):
    assert vars(build_parser().parse_args(old)) == vars(build_parser().parse_args(new))
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("lincorr: note: --") and f"is an older spelling of {canonical};" in err[0]


def test_older_spellings_are_left_out_of_help():
    for name, parser in subcommands().items():
        page = parser.format_help()
        for old in ("--save-dir", "--paper ", "--table2", "--table4", "--table5", "--table7", "--protocol"):
            assert old not in page, (name, old)


# ---- global options, help, errors ----

def test_global_options_before_or_after_the_subcommand():
    for argv in (["-v", "--quiet", "templates"], ["templates", "-v", "--quiet"], ["--quiet", "templates", "-v"]):
        args = build_parser().parse_args(argv)
        assert args.verbose and args.quiet
    assert not hasattr(build_parser().parse_args(["templates"]), "quiet")  # main reads it with a default of False


def test_help_lists_every_command_once_grouped_by_system(capsys):
    assert main(["--help"]) == 0
    page = capsys.readouterr().out
    titles = [title for title, _ in SYSTEMS]
    assert [line[:-1] for line in page.splitlines() if line[:-1] in titles] == titles
    listed = re.findall(r"^  ([a-z][a-z-]*) ", page, flags=re.MULTILINE)
    assert sorted(listed) == sorted(subcommands()) and len(listed) == len(set(listed))
    for word in ("correlation", "training studies", "vector arithmetic", "extractive structures", "reproduction", "registry",
                 "report", "cache"):
        assert any(title.startswith(word) for title in titles)


def test_each_module_builds_the_commands_the_listing_gives_it_and_no_other():
    """The listing is what `lincorr --help` shows without the modules: a command added by a module it does not name, or
    named and never added, would take no options or none of its own."""
    full = subcommands()
    assert list(full) == list(HELP) and all(full[name].description == line for name, line in HELP.items() if name != "extractive")
    for _, modules in SYSTEMS:
        for module, lines in modules:
            built = next(a for a in build_parser(built={module})._actions if isinstance(a, argparse._SubParsersAction)).choices
            assert {name for name, parser in built.items() if parser.add_help} == set(lines), module


@pytest.mark.parametrize("argv, prog", [(["fit", "city", "country", "--bogus"], "lincorr fit"),
                                        (["extractive", "ocr", "--bogus"], "lincorr extractive ocr"),
                                        (["fit", "city"], "lincorr fit")])
def test_a_subcommand_error_points_at_its_own_help(argv, prog, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.endswith(f"(see {prog} --help)")


# ---- defaults: the CLI's are Python's, and --help states the code's ----

def test_python_defaults_are_the_cli_defaults():
    from lincorr.fit import FitConfig
    from lincorr.linear import LinearMap

    fit = subcommands()["fit"]
    assert (FitConfig().estimator, FitConfig().alpha) == (fit.get_default("estimator"), fit.get_default("alpha")) == ("ridge", "cv")
    assert (LinearMap().estimator, LinearMap().alpha) == ("ridge", "cv")
    assert FitConfig().linear_map().get_params() == LinearMap().get_params()
    for name in ("fit", "matrix", "cases", "resilience", "scale", "demo", "generalize", "gradcorr", "predict-edit"):
        assert subcommands()[name].get_default("estimator") == "ridge", name


def test_preset_paper_fits_ols_on_every_fitting_command():
    from lincorr.cli.spellings import apply_preset

    for name in ("fit", "demo", "matrix", "cases", "resilience", "scale", "lre", "precision", "predict-edit"):
        parser = subcommands()[name]
        required = {"fit": ["a", "b"], "predict-edit": ["a", "b", "--value", "x"], "matrix": ["--family", "math"],
                    "resilience": ["--family", "math", "--eval-model", "m"], "scale": ["--models", "m"]}.get(name, [])
        args = parser.parse_args([*required, "--preset", "paper"])
        apply_preset(args)
        assert args.estimator == "ols", name


def test_help_states_the_defaults_the_code_has():
    """Every option's '(default: X)' in --help is the parser's default, and the families named are the registry's."""
    from lincorr.cli.options import FAMILIES
    from lincorr.knowledge import load_registry

    assert FAMILIES == ", ".join(load_registry([]).families())
    for name, parser in subcommands().items():
        page = " ".join(parser.format_help().split())
        for action in parser._actions:
            if action.help in (None, argparse.SUPPRESS) or action.default in (None, [], argparse.SUPPRESS) or action.nargs == 0:
                continue
            shown = action.default if not isinstance(action.default, list) else action.default
            assert f"(default: {shown})" in page, (name, action.dest)


def test_counts_stated_in_the_docs_are_the_code_s():
    """Where README.md or docs/ state how many prompts, families or commands there are, the number is the code's."""
    from lincorr.knowledge import load_registry

    registry = load_registry([])
    paper_prompts = [spec for spec in registry.prompts if spec.family != "mechanisms"]
    expected = {
        r"paper's (\d[\d,]*) prompt": len(paper_prompts),
        r"\bthe (\d[\d,]*) prompts\b": len(registry.prompts),
        r"prompts \((\d+) families\)": len({spec.family for spec in paper_prompts}),
        r"\b(\d+) (?:sub)?commands\b": len(subcommands()),
    }
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("**/*.md"))]
    checked = 0
    for page in pages:
        text = " ".join(page.read_text(encoding="utf-8").split())
        for pattern, count in expected.items():
            for found in re.findall(pattern, text):
                assert int(found.replace(",", "")) == count, (page.name, pattern, found)
                checked += 1
    assert checked >= 1


# ---- listings ----

def test_tasks_lists_the_registry_tasks(capsys):
    from lincorr.knowledge import load_registry

    assert main(["tasks", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [row["name"] for row in rows] == [task.name for task in load_registry([]).tasks]
    assert all(row["n_pairs"] > 0 and "{}" in row["template"] for row in rows)


def test_references_family_filters(capsys):
    assert main(["references", "--json"]) == 0
    every = json.loads(capsys.readouterr().out)
    assert main(["references", "--family", "math", "--json"]) == 0
    math = json.loads(capsys.readouterr().out)
    assert math and len(math) < len(every) and all(row["source_domain"] == "number" for row in math)


# ---- a fit on a tiny model: checks before loading, reuse after saving ----

@pytest.fixture
def workspace(tmp_path, tokenizer):
    """A saved tiny model, custom domain files and an inputs file."""
    return write_fit_workspace(tmp_path, tokenizer)


def test_ols_too_few_inputs_fails_before_the_model_loads(workspace, capsys, monkeypatch):
    import lincorr.models

    monkeypatch.setattr(lincorr.models, "load_model", lambda *a, **k: pytest.fail("the model loaded before the size check"))
    (workspace / "few.txt").write_text("\n".join(NAMES[:20]), encoding="utf-8")
    args = fit_args(workspace, "--preset", "paper", "--test-fraction", "0.8")  # 4 training inputs for 5 source words
    args[args.index(str(workspace / "inputs.txt"))] = str(workspace / "few.txt")
    assert main(args) == 2
    assert "ols needs more training inputs" in capsys.readouterr().err


def test_a_reloaded_fit_predicts_exports_and_records_where_it_came_from(workspace, capsys):
    import lincorr
    from lincorr.linear import LinearMap

    out = workspace / "run"
    assert main(fit_args(workspace, "-v", "--out", str(out), "--json")) == 0
    capsys.readouterr()
    saved = lincorr.load_result(out)
    source = np.load(out / "source_logits.npy", allow_pickle=False)
    expected = source @ np.load(out / "W.npy", allow_pickle=False).astype(np.float64) + np.load(out / "b.npy", allow_pickle=False)
    np.testing.assert_allclose(saved.estimator.predict(source), expected, rtol=1e-5, atol=1e-5)

    saved.estimator.save(workspace / "map.safetensors")
    assert b"pickle" not in (workspace / "map.safetensors").read_bytes()[:200]
    again = LinearMap.load(workspace / "map.safetensors")
    np.testing.assert_array_equal(again.predict(source), saved.estimator.predict(source))
    assert again.get_params() == saved.estimator.get_params()

    frame = saved.to_pandas()
    assert list(frame.index) == list(CITIES) and list(frame.columns) == list(COUNTRIES)
    np.testing.assert_array_equal(frame.to_numpy(), saved.W)

    provenance = json.loads((out / "provenance.json").read_text())
    environment = provenance["environment"]
    assert provenance["command"].startswith("lincorr fit") and provenance["python_call"] is None and provenance["seed"] == 0
    assert {"lincorr", "torch", "transformers", "python"} <= environment.keys() and all(environment[k] for k in ("torch", "python"))
    assert environment["torch_threads"] >= 1
    model = environment["models"][str(workspace / "model")]
    assert model["dtype"] == "float32" and model["device"] == "cpu" and environment["batch_sizes"][str(workspace / "model")] == 128


def test_a_result_saved_from_python_records_the_python_call(tmp_path):
    from lincorr.collection import LogitTable
    from lincorr.domains import Domain
    from lincorr.fit import fit_tables

    def table(values, prefix):
        words = tuple(f"{prefix}{i}" for i in range(values.shape[1]))
        domain = Domain(prefix, words, tuple(range(len(words))), words, ("whole_word",) * len(words), ())
        return LogitTable(values.astype(np.float32), tuple(f"x{i}" for i in range(len(values))), "{} " + prefix, domain, "logits", "m")

    rng = np.random.default_rng(0)
    fit_tables(table(rng.normal(size=(40, 5)), "s"), table(rng.normal(size=(40, 4)), "t")).save(tmp_path / "run")
    provenance = json.loads((tmp_path / "run" / "provenance.json").read_text())
    assert provenance["command"] is None and provenance["python_call"].startswith("python ")


def test_linear_map_load_refuses_other_files(tmp_path):
    from lincorr.errors import InputError
    from lincorr.linear import LinearMap

    (tmp_path / "bad.safetensors").write_bytes(b"\x00" * 16)
    with pytest.raises(InputError, match="linear map file is not valid JSON.*pass a file written by LinearMap.save"):
        LinearMap.load(tmp_path / "bad.safetensors")
    with pytest.raises(InputError, match="does not exist"):
        LinearMap.load(tmp_path / "missing.safetensors")


def test_to_pandas_of_a_table_result_is_its_rows():
    from lincorr.results import summary_frame

    frame = summary_frame({"rows": [{"label": "a", "r": 0.5}, {"label": "b", "r": 0.7}], "model": "m"})
    assert list(frame["label"]) == ["a", "b"]
    assert summary_frame({"model": "m", "n": {"train": 3}})["n.train"].tolist() == [3]
