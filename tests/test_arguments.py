"""Arguments and output locations are checked before any work: a mistake in them ends in one `lincorr: error:` line,
exit code 2, with no model loaded and no file written.

Each case of ARGUMENT_MISTAKES runs through `lincorr.cli.main` with `load_model` replaced by a function that fails
the test, so a check that only happens after the model has loaded shows as a failure here, not as a slow pass. The
arguments name files of a small workspace (`{name}`, see `workspace`); no model is needed.
"""

from __future__ import annotations

import copy
import json
import os
import re
from pathlib import Path

import pytest
from helpers.cli_errors import one_error_line, spy_on_errors

import lincorr.models
from lincorr.cli import main
from lincorr.errors import CacheError, DataError, InputError, OutputError, UsageError
from lincorr.filesystem import OUTPUT_MARKER
from lincorr.knowledge import load_registry
from lincorr.knowledge.lre import LreRelation
from lincorr.models import wrap_model
from lincorr.reproduce import ReproductionResult, load_paper, reproduce

MODEL = ["--model", "{model}"]
LRE = ["lre", *MODEL, "--quiet"]
REPRODUCE = ["reproduce", "peng", *MODEL, "--quiet"]

ARGUMENT_MISTAKES = [
    # papers are names, never paths
    ("paper-is-a-relative-path", ["reproduce", "../paper", "--list"], UsageError),
    ("paper-is-a-yaml-elsewhere", ["reproduce", "{paper.yaml}", "--list"], UsageError),
    ("paper-is-its-own-file-name", ["reproduce", "peng.yaml", "--list"], UsageError),
    # list options: no empty item, no repeated one, every name known
    ("only-empty", [*REPRODUCE, "--only", ""], UsageError),
    ("only-empty-with-list", ["reproduce", "peng", "--list", "--only", ""], UsageError),
    ("only-trailing-comma", [*REPRODUCE, "--only", "peng.table2,"], UsageError),
    ("only-repeated", [*REPRODUCE, "--only", "peng.table2,peng.table2"], UsageError),
    ("only-unknown", [*REPRODUCE, "--only", "peng.table99"], UsageError),
    ("lre-relations-empty", [*LRE, "--relations", ""], UsageError),
    ("lre-relations-empty-item", [*LRE, "--relations", "country_capital_city,,"], UsageError),
    ("lre-relations-unknown", [*LRE, "--relations", "country_moon"], InputError),
    ("lre-types-empty", [*LRE, "--types", ""], UsageError),
    ("lre-types-repeated", [*LRE, "--types", "factual,factual"], UsageError),
    ("lre-types-unknown", [*LRE, "--types", "factual,folklore"], UsageError),
    ("matrix-prompts-repeated", ["matrix", "--prompts", "city,city", *MODEL], UsageError),
    ("matrix-languages-empty", ["matrix", "--cross-language", "--languages", "", *MODEL], UsageError),
    ("scale-models-empty-item", ["scale", "--models", "{model},,{model}"], UsageError),
    ("scale-relations-repeated", ["scale", "--models", "{model}", "--relations", "city:country,city:country"], UsageError),
    ("precision-n-curve-repeated", ["precision", "city", "country", "--n-curve", "1000,1000", *MODEL], UsageError),
    ("cases-word-repeated", ["cases", "city", "country", "--word", "Paris", "--word", "Paris", *MODEL], UsageError),
    ("fit-top-empty", ["fit", "city", "country", "--top", "", *MODEL], UsageError),
    ("ablate-seeds-repeated", ["ablate", "--paper-table", "7", "--seeds", "1", "1", *MODEL], UsageError),
    ("registry-repeated", ["fit", "city", "country", "--registry", "{paper.yaml}", "--registry", "{paper.yaml}", *MODEL], UsageError),
    ("report-run-dir-repeated", ["report", "{run}", "{run}"], UsageError),
    # filters that select nothing
    ("lre-filters-select-nothing", [*LRE, "--relations", "country_capital_city", "--types", "bias"], UsageError),
    ("only-claims-measured-at-no-budget", [*REPRODUCE, "--only", "peng.fig1"], UsageError),
    ("only-claims-that-need-an-eval-model", [*REPRODUCE, "--only", "peng.fig8,peng.fig24"], UsageError),
    # model specs
    ("model-empty", ["fit", "city", "country", "--model", ""], UsageError),
    ("eval-model-empty", [*REPRODUCE, "--eval-model", ""], UsageError),
    ("eval-model-blank", [*REPRODUCE, "--eval-model", "  "], UsageError),
    ("eval-model-is-the-model", [*REPRODUCE, "--eval-model", "{model}"], UsageError),
    ("eval-model-is-the-model-spelt-otherwise", [*REPRODUCE, "--eval-model", "{model}/../model/"], UsageError),
    ("eval-model-is-the-default-model", ["reproduce", "peng", "--eval-model", "gemma-3-270m"], UsageError),
    ("resilience-eval-model-is-the-fit-model", ["resilience", "--prompts", "city,country", "--fit-model", "{model}",
                                                "--eval-model", "{model}"], UsageError),
    # output directories: links followed only to a place that exists; never the directory the user stands in
    ("out-dangling-link", [*LRE, "--out", "{dangling}"], OutputError),
    ("out-under-a-dangling-link", [*LRE, "--out", "{dangling}/run"], OutputError),
    ("out-link-loop", [*REPRODUCE, "--only", "peng.table2", "--out", "{loop}"], OutputError),
    ("out-is-the-working-directory", [*REPRODUCE, "--only", "peng.table2", "--out", "."], OutputError),
    ("out-is-a-parent-of-the-working-directory", [*LRE, "--out", ".."], OutputError),
    ("out-is-a-link-to-the-working-directory", [*LRE, "--out", "{here_link}"], OutputError),
    ("fit-out-under-a-link-loop", ["fit", "city", "country", "--out", "{loop}/run", *MODEL], OutputError),
    ("out-empty", [*LRE, "--out", ""], UsageError),
    ("save-dir-empty", ["fit", "city", "country", "--save-dir", "", *MODEL], UsageError),
    ("out-of-a-user-this-machine-lacks", [*LRE, "--out", "~no-such-user-here/run"], UsageError),
    ("out-blank", ["fit", "city", "country", "--out", " ", *MODEL], UsageError),
    # numbers past what any option counts, or past what float64 arithmetic on them holds
    ("n-inputs-of-400-digits", ["fit", "city", "country", "-n", "9" * 400, *MODEL], UsageError),
    ("max-edits-of-4401-digits", ["ripple", "--max-edits", "9" * 4401, *MODEL], UsageError),
    ("bootstrap-of-ten-million", ["fit", "city", "country", "--bootstrap", "10000000", *MODEL], UsageError),
    ("ridge-alpha-past-float-squares", ["fit", "city", "country", "--alpha", "1e308", *MODEL], UsageError),
    # too few inputs to score W on, for a command that samples them after the model loads
    ("ripple-n-below-the-held-out-split", ["ripple", "-n", "18", *MODEL], DataError),
    ("ripple-n-5", ["ripple", "-n", "5", *MODEL], DataError),
    # the cache
    ("cache-dir-dangling-link", ["fit", "city", "country", *MODEL], CacheError, "dangling"),
    ("cache-dir-link-loop", ["fit", "city", "country", *MODEL], CacheError, "loop"),
    ("cache-dir-under-a-dangling-link", ["fit", "city", "country", *MODEL], CacheError, "dangling/cache"),
]


@pytest.fixture
def workspace(tmp_path, monkeypatch) -> dict[str, str]:
    """The files the cases name, and the working directory (`here`, an earlier lincorr output: only the rule about
    the working directory can refuse it) the command runs in."""
    ws = tmp_path / "ws"
    (ws / "model").mkdir(parents=True)
    (ws / "paper.yaml").write_text("title: mine\nclaims: []\n")
    (ws / "run").mkdir()
    (ws / "dangling").symlink_to(ws / "unmounted")
    (ws / "loop").symlink_to(ws / "loop2")
    (ws / "loop2").symlink_to(ws / "loop")
    here = tmp_path / "here"
    here.mkdir()
    (here / OUTPUT_MARKER).write_text("")
    (ws / "here_link").symlink_to(here)
    monkeypatch.chdir(here)
    return {**{path.name: str(path) for path in ws.iterdir()}, "ws": str(ws)}


def refuse_to_load(*args, **kwargs):
    raise AssertionError("the model was loaded before the arguments were checked")


def files_under(*roots) -> set[str]:
    return {str(path) for root in roots for path in Path(root).rglob("*")}


@pytest.mark.parametrize("argv, kind, cache", [(case[1], case[2], case[3] if len(case) > 3 else None) for case in ARGUMENT_MISTAKES],
                         ids=[case[0] for case in ARGUMENT_MISTAKES])
def test_an_argument_mistake_is_one_line_before_the_model_loads(argv, kind, cache, workspace, monkeypatch, capsys):
    monkeypatch.setattr(lincorr.models, "load_model", refuse_to_load)
    if cache:
        monkeypatch.setenv("LINCORR_CACHE_DIR", str(Path(workspace["ws"]) / cache))
    before = files_under(workspace["ws"], os.getcwd())
    reported = spy_on_errors(monkeypatch)
    assert main([re.sub(r"\{([\w.]+)\}", lambda name: workspace[name[1]], arg) for arg in argv]) == 2
    one_error_line(capsys)
    assert [type(error) for error in reported] == [kind], reported
    assert files_under(workspace["ws"], os.getcwd()) == before, "a refused command left files behind"


@pytest.mark.parametrize("argv, message", [
    (["fit", "city", "country", "-n", " 500"], "expected a whole number, written in the digits 0-9 (1000 or 1_000), got ' 500'"),
    (["fit", "city", "country", "--seed", "\u0665"], "expected a whole number, written in the digits 0-9"),
    (["resilience", "--lr", "\u0665e-5"], "expected a number, written as in 1e-5, 0.25 or -3"),
    (["fit", "city", "country", "--test-fraction", "0.5 "], "expected a number, written as in 1e-5"),
    (["fit", "city", "country", "--alpha", "1e-400"], "'1e-400' is too near 0 for a float to tell from 0"),
    (["resilience", "--lr", "infinity"], "must be a finite number"),
])
def test_a_number_is_read_as_written_in_ascii_and_never_silently_as_0(argv, message, monkeypatch, capsys):
    """int() and float() also read surrounding spaces and other scripts' digits, and float() reads 1e-400 as 0: each
    refused in one line that says how to write the number."""
    monkeypatch.setattr(lincorr.models, "load_model", refuse_to_load)
    assert main([*argv, "--model", "nothing-is-loaded"]) == 2
    assert message in one_error_line(capsys)


def test_a_number_grouped_by_underscores_is_read_as_python_reads_it():
    from lincorr.cli.values import COUNT, finite_number

    assert COUNT("1_000") == 1000 and finite_number("2_500.5e-1_0") == 2500.5e-10
    assert finite_number("0e5") == 0 and finite_number(".5") == 0.5 and finite_number("1.") == 1


def test_argument_catalogue_ids_are_unique():
    assert len({case[0] for case in ARGUMENT_MISTAKES}) == len(ARGUMENT_MISTAKES)


def test_list_json_is_every_claim_as_json(capsys):
    assert main(["reproduce", "peng", "--list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [claim["id"] for claim in listed["claims"]] == [claim.id for claim in load_paper("peng").claims]
    assert listed["paper"] == "peng" and {"where", "step", "not_applicable", "budgets", "eval_model"} <= set(listed["claims"][0])


def test_the_same_weights_under_another_name_are_refused_before_any_claim_runs(llama_lm, tokenizer, monkeypatch):
    import lincorr.reproduce.runner as runner

    monkeypatch.setattr(runner, "measure_claim", refuse_to_load)
    again = wrap_model(copy.deepcopy(llama_lm.model), tokenizer, name="the same, copied")
    with pytest.raises(UsageError, match="same weights"):
        reproduce("peng", llama_lm, only="peng.fig8", eval_model=again, registry=load_registry())


def test_an_output_through_a_link_replaces_the_directory_it_points_to(tmp_path):
    target, link = tmp_path / "runs" / "today", tmp_path / "latest"
    ReproductionResult("peng", "t", "m", "fp", "quick", ()).save(target)
    (target / "stale.txt").write_text("from an earlier run")
    (target / "stale.txt").unlink()
    link.symlink_to(target)
    ReproductionResult("peng", "t", "m2", "fp", "quick", ()).save(link)
    assert link.is_symlink() and json.loads((target / "reproduction.json").read_text())["model"] == "m2"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest", "runs"], "nothing staged or moved aside is left"


def test_saving_into_the_working_directory_is_refused_from_python_too(tmp_path, monkeypatch):
    ReproductionResult("peng", "t", "m", "fp", "quick", ()).save(tmp_path / "run")
    monkeypatch.chdir(tmp_path / "run")
    with pytest.raises(OutputError, match="working directory"):
        ReproductionResult("peng", "t", "m2", "fp", "quick", ()).save(".")
    assert Path.cwd().exists() and json.loads(Path("reproduction.json").read_text())["model"] == "m"


def test_pairs_keep_each_subjects_objects_once_in_file_order():
    samples = (("Atlantis ", "Poseidonia"), ("Lemuria", "Mu"), ("Atlantis", " Poseidonia"), ("Atlantis", "Ys"), ("Lemuria", "Mu"))
    relation = LreRelation("myth", "factual", "land", "city", ("The capital of {} is",), samples, "myth.json")
    assert relation.pairs() == (("Atlantis", ("Poseidonia", "Ys")), ("Lemuria", ("Mu",)))


def test_an_output_directory_from_home_is_the_home_directorys(tmp_path, monkeypatch):
    """As the shell reads `--out ~/runs` unquoted, and as a config file's `out: ~/runs` means: never ./~/runs."""
    from lincorr.cli import build_parser

    monkeypatch.setenv("HOME", str(tmp_path))
    assert build_parser().parse_args(["fit", "city", "country", "--out", "~/runs"]).out == str(tmp_path / "runs")


def test_a_seed_takes_any_64_bit_value_as_numpy_and_torch_do():
    """A seed is no count: `--seed $(date +%s%N)` (about 1.7e18) is a seed."""
    from lincorr.cli import build_parser

    assert build_parser().parse_args(["fit", "city", "country", "--seed", str(2**64 - 1)]).seed == 2**64 - 1
    with pytest.raises(UsageError, match="64 bits"):
        build_parser().parse_args(["fit", "city", "country", "--seed", str(2**64)])
