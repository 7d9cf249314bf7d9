"""The CLI on a tiny model saved to disk: the JSON contract, saved files, and clean failures."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from helpers.fit_workspace import fit_args, write_fit_workspace
from helpers.tiny import CITIES, COUNTRIES, NAMES, tiny_llama

from lincorr.cli import main


@pytest.fixture
def workspace(tmp_path, tokenizer):
    """A saved tiny model, custom domain files and an inputs file."""
    return write_fit_workspace(tmp_path, tokenizer)


def test_fit_json_contract_and_saved_files(workspace, capsys):
    out = workspace / "out"
    assert main(fit_args(workspace, "--json", "--preset", "paper", "--out", str(out), "--heatmap", "--top", "Tokyo",
                         "--top-influencing", "Japan")) == 0
    payload = json.loads(capsys.readouterr().out)
    required = {"model", "source", "target", "n_inputs", "n_source_domain", "n_target_domain", "estimator", "alpha",
                "labelwise_r_mean", "labelwise_r_std", "labelwise_r_ci95", "instancewise_r_mean", "control_labelwise_r_mean", "seconds"}
    assert required <= payload.keys()
    assert payload["n_inputs"] == 60 and payload["n_source_domain"] == 5 and payload["estimator"] == "ols"
    assert [w for w, _ in payload["top_influenced"]["Tokyo"]] and len(payload["top_influencing"]["Japan"]) == 5
    W = np.load(out / "W.npy", allow_pickle=False)
    source_logits = np.load(out / "source_logits.npy", allow_pickle=False)
    assert W.shape == (5, 5) and source_logits.shape == (60, 5)
    assert np.load(out / "b.npy", allow_pickle=False).shape == (5,)
    assert json.loads((out / "inputs.json").read_text()) == list(NAMES[:60])
    assert json.loads((out / "target_tokens.json").read_text()) == list(COUNTRIES)
    result = json.loads((out / "result.json").read_text())
    assert result["labelwise_r_mean"] == pytest.approx(payload["labelwise_r_mean"])
    assert (out / "W.png").stat().st_size > 0
    # W on disk really is the map: refitting the saved logits gives it back.
    target_logits = np.load(out / "target_logits.npy", allow_pickle=False)
    from lincorr.linear import LinearMap

    train = np.array(result["train_index"])
    np.testing.assert_allclose(LinearMap("ols").fit(source_logits[train], target_logits[train]).W_, W, atol=1e-4)


def test_fit_table_output_with_ridge_cv(workspace, capsys):
    assert main(fit_args(workspace, "--estimator", "ridge", "--alpha", "cv", "--top", "Paris")) == 0
    text = capsys.readouterr().out
    assert "label-wise r" in text and "ridge (alpha" in text and "Paris" in text


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--source-template", "no slot here"], "exactly one"),
        (["-n", "2"], "at least 10"),
        (["--alpha", "lots", "--estimator", "ridge"], "argument --alpha: must be"),
        (["--top", "Atlantis"], "not in the"),
        (["--heatmap"], "--out"),
    ],
)
def test_bad_input_exits_2_with_one_line_and_no_output(workspace, capsys, extra, message):
    out = workspace / "out"
    args = fit_args(workspace, "--out", str(out), *extra) if "--heatmap" not in extra else fit_args(workspace, *extra)
    if "-n" in extra:
        args = [a for a in args if a not in ("--inputs", str(workspace / "inputs.txt"))]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and err.startswith("lincorr: error:")
    assert not out.exists()


def test_ols_with_too_few_inputs_fails_before_collecting(workspace, capsys, monkeypatch):
    import lincorr.collection.pieces as collect

    monkeypatch.setattr(collect, "domain_scores", lambda *a, **k: pytest.fail("collected before checking sizes"))
    (workspace / "few.txt").write_text("\n".join(NAMES[:20]), encoding="utf-8")
    args = fit_args(workspace, "--test-fraction", "0.8", "--estimator", "ols")  # 4 training inputs for 5 source words
    args[args.index(str(workspace / "inputs.txt"))] = str(workspace / "few.txt")
    assert main(args) == 2
    assert "--estimator ridge" in capsys.readouterr().err


def test_missing_files_and_unknown_prompts(workspace, capsys):
    assert main(["fit", "city", "nowhere", "--model", str(workspace / "model")]) == 2
    assert "unknown prompt" in capsys.readouterr().err
    assert main(fit_args(workspace)[:-1] + ["--inputs", str(workspace / "missing.txt")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["fit", "city", "country", "--model", "not-a-model"]) == 2
    assert "unknown model" in capsys.readouterr().err


def test_registry_listings(capsys):
    assert main(["templates", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 112 and {"name", "family", "language", "template", "domain_size"} <= rows[0].keys()
    assert main(["references", "--json"]) == 0
    assert any(r["name"] == "city->country" for r in json.loads(capsys.readouterr().out))


def test_ablate_json_on_a_tiny_model(tmp_path, capsys):
    from helpers.tiny import tiny_subword_tokenizer

    tokenizer = tiny_subword_tokenizer("lives in the city country of".split() + list(CITIES) + list(COUNTRIES))
    tiny_llama(len(tokenizer)).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    args = ["ablate", "city", "country", "--model", str(tmp_path), "--mapping", "shuffled", "--seed", "1",
            "--stage1-epochs", "2", "--stage2-epochs", "2", "--json", "--quiet"]
    assert main(args) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["mapping"] == "shuffled" and summary["seed"] == 1 and summary["relation"] == "city->country"
    assert {"generalization_rate", "random_baseline", "source_learned_rate"} <= summary.keys()
    assert summary["random_baseline"] == pytest.approx(1 / len(COUNTRIES))


# ---- the command surface ----

# Every command with --estimator, and its default: ridge, except the precision studies' ridge-std (Hit@Top-N, read in standard units).
ESTIMATOR_DEFAULTS = {
    "fit": "ridge", "matrix": "ridge", "precision": "ridge-std", "lre": "ridge-std", "cases": "ridge", "resilience": "ridge",
    "scale": "ridge", "demo": "ridge", "generalize": "ridge", "diagnose": "ridge", "subwords": "ridge", "gradcorr": "ridge",
    "predict-edit": "ridge",
}


def subcommands() -> dict:
    import argparse

    from lincorr.cli import build_parser

    return next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices


def option_help(page: str, option: str, next_option: str) -> str:
    """The help of `option` in a --help page: the words from it up to `next_option` (past the usage lines, which name both)."""
    words = " ".join(page.split())
    start = words.rindex(option)
    return words[start:words.index(next_option, start)]


@pytest.mark.parametrize("command", sorted(subcommands()))
def test_help_shows_the_real_estimator_and_alpha_defaults(command):
    parser = subcommands()[command]
    if parser.get_default("estimator") is None:
        assert command not in ESTIMATOR_DEFAULTS
        return
    estimator = ESTIMATOR_DEFAULTS[command]
    assert parser.get_default("estimator") == estimator and parser.get_default("alpha") == "cv"
    page = parser.format_help()
    choices = next(action.choices for action in parser._actions if action.dest == "estimator")
    estimator_option = "--estimator {" + ",".join(choices) + "}"
    assert f"(default: {estimator})" in option_help(page, estimator_option, "--alpha ALPHA")
    alpha_help = option_help(page, "--alpha ALPHA", "--test-fraction")
    assert "(default: cv)" in alpha_help and "ols ignores it" in alpha_help
    if estimator == "ridge":
        assert "saturated" in option_help(page, estimator_option, "--alpha ALPHA")
    if estimator == "ridge-std":
        assert "docs/results.md" in option_help(page, estimator_option, "--alpha ALPHA")


# Every command that fits W on logit tables it collects.
COLLECTING = ("demo", "fit", "matrix", "precision", "cases", "resilience", "scale", "generalize", "diagnose", "subwords", "gradcorr",
              "predict-edit", "ovector-w", "ripple")


REQUIRED = {"fit": ["city", "country"], "predict-edit": ["city", "country", "--value", "Paris"], "matrix": ["--family", "spatial"],
            "resilience": ["--family", "spatial", "--eval-model", "smollm2-135m-instruct"], "scale": ["--models", "gemma-3-270m"]}


@pytest.mark.parametrize("command", COLLECTING)
def test_every_collecting_command_takes_the_collection_settings(command):
    from lincorr.cli.options import collect_settings
    from lincorr.collection import CollectSettings

    parser = subcommands()[command]
    args = parser.parse_args([*REQUIRED.get(command, []), "--logprobs", "--no-cache", "--compile"])
    assert collect_settings(args) == CollectSettings(logprobs=True, use_cache=False, compile=True)
    if command != "ovector-w":  # its --batch-size is the o-vector runs'; W's tables keep the default
        assert collect_settings(parser.parse_args([*REQUIRED.get(command, []), "--batch-size", "auto"])).batch_size == "auto"
        assert "(default: 128)" in option_help(parser.format_help(), "--batch-size", "--logprobs")


def test_the_extractive_predict_study_takes_the_collection_settings():
    from lincorr.cli.options import collect_settings

    import argparse

    studies = next(a for a in subcommands()["extractive"]._actions if isinstance(a, argparse._SubParsersAction)).choices
    predict = studies["predict"]
    assert collect_settings(predict.parse_args(["--batch-size", "7", "--no-cache"])).batch_size == 7


def test_python_dash_m_lincorr_prints_the_version():
    import subprocess
    import sys

    from lincorr import __version__

    done = subprocess.run([sys.executable, "-m", "lincorr", "--version"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == f"lincorr {__version__}"


def test_the_help_and_the_listings_start_without_torch(tmp_path):
    """Only the named command's module is built, so `lincorr --help` and the commands that load no model start in a
    fraction of a second rather than the seconds torch and transformers take to import."""
    import subprocess
    import sys

    code = ("import sys; from lincorr.cli import main\n"
            "for arguments in (['--help'], ['templates'], ['tasks', '--json'], ['models'], ['cache', 'size']):\n"
            "    status = main(arguments)\n"
            "    print(arguments, status, sorted({'torch', 'transformers', 'sklearn'} & set(sys.modules)), file=sys.stderr)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "LINCORR_CACHE_DIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert [line.split("] ", 1)[1] for line in done.stderr.splitlines()] == ["0 []"] * 5, done.stderr


def test_listing_a_papers_claims_loads_no_step():
    """`lincorr reproduce peng --list` reads the claims alone: the runner imports every step and every study."""
    import subprocess
    import sys

    code = ("import sys; from lincorr.cli import main\n"
            "status = main(['reproduce', 'peng', '--list'])\n"
            "print(status, 'lincorr.reproduce.runner' in sys.modules, 'lincorr.studies.extractive.origins' in sys.modules, file=sys.stderr)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "peng.table18" in done.stdout and done.stderr.splitlines()[-1] == "0 False False", done.stderr


def test_handlers_write_no_files_themselves():
    """Every file a command writes comes from a result's .save(directory), which stages it atomically."""
    import ast
    from pathlib import Path

    import lincorr.cli

    writers = {"write_text", "write_bytes", "write_json", "write_csv", "write_array", "write_text_atomic", "staged_directory", "savefig",
               "mkdir", "np.save", "np.savez", "numpy.save", "np.savetxt"}
    package = Path(lincorr.cli.__file__).parent
    found = []
    for path in sorted(package.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == "lincorr.outputs":
                found.append(f"{path.name}:{node.lineno} imports lincorr.outputs")
            if not isinstance(node, ast.Call):
                continue
            called = ast.unparse(node.func)
            name = called.rpartition(".")[2]
            # os.open is the one allowed: main points stdout at /dev/null when the reader of a pipe has gone.
            opens_a_file = name == "open" and called != "os.open"
            if opens_a_file or name in writers or called in writers:
                found.append(f"{path.name}:{node.lineno} calls {called}")
    assert len(list(package.glob("*.py"))) >= 7 and not found, found
