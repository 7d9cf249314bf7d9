"""A saved linear map's and a saved pair's arrays, checked on reading against each other and against the words, inputs and
parameters their files declare: a mismatch is one InputError naming the file, never a raw numpy error later or a W read
by the wrong words. `lincorr report` and `lincorr.load_result` refuse a damaged W in the same words (one check serves both).
"""

from __future__ import annotations

import json
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save

from helpers.cli_errors import one_error_line

from lincorr.cli import main
from lincorr.collection import LogitTable
from lincorr.domains import Domain
from lincorr.errors import InputError
from lincorr.fit import FitConfig, fit_tables
from lincorr.linear import LinearMap
from lincorr.studies import load_result

N_INPUTS, N_SOURCE, N_TARGET = 40, 5, 4
REMEDY = "rerun the command that wrote it"


# ---- a linear map file: its arrays against each other, its parameters against what the estimator allows ----

def saved_map(path: Path, settings: dict, *, one_d: bool) -> tuple[dict, dict]:
    """The header and arrays `LinearMap.save` writes for a map with `settings` of 4 sources onto 3 targets (or a 1-D target)."""
    from safetensors.numpy import load

    rng = np.random.default_rng(0)
    target = rng.normal(size=(30, 3))
    LinearMap(**{"alpha": 1.0, **settings}).fit(rng.normal(size=(30, 4)), target[:, 0] if one_d else target).save(path)
    raw = path.read_bytes()
    header = json.loads(json.loads(raw[8:8 + int.from_bytes(raw[:8], "little")])["__metadata__"]["lincorr"])
    return header, load(raw)


def params(**changed) -> Callable[[dict, dict], None]:
    return lambda header, arrays: header["params"].update(changed)


def header_field(**changed) -> Callable[[dict, dict], None]:
    return lambda header, arrays: header.update(changed)


def array(name: str, values) -> Callable[[dict, dict], None]:
    return lambda header, arrays: arrays.__setitem__(name, np.asarray(values))


def dropped(name: str) -> Callable[[dict, dict], None]:
    return lambda header, arrays: arrays.pop(name)


RIDGE, STANDARDIZED, OLS, ONE_D_TARGET = {}, {"standardize": True}, {"estimator": "ols"}, {"one_d": True}
# id: (the settings of the map saved, damage, what the error says)
MAP_DAMAGES = {
    "W-one-number": (RIDGE, array("W", np.float32(1.0)), "W is a single number, not a matrix"),
    "W-3-D": (RIDGE, array("W", np.ones((2, 2, 3), np.float32)), "W is 2 x 2 x 3, not a matrix"),
    "W-empty": (RIDGE, array("W", np.ones((0, 3), np.float32)), "W is 0 x 3, not a matrix"),
    "W-NaN": (RIDGE, array("W", np.full((4, 3), np.nan, np.float32)), "W: it holds 12 NaN weights"),
    "W-whole-numbers": (RIDGE, array("W", np.ones((4, 3), np.int8)), "it holds int8 arrays, not the floating-point numbers"),
    "intercept-of-7": (RIDGE, array("intercept", np.ones(7, np.float32)), "intercept: it is a list of 7, not 3 target columns"),
    "intercept-infinite": (RIDGE, array("intercept", np.array([0, np.inf, 0], np.float32)), "intercept: it holds 1 infinite weights"),
    "one-d-target-of-3": (RIDGE, header_field(one_d_target=True), "one_d_target is true but W has 3 target columns"),
    "estimator-banana": (RIDGE, params(estimator="banana"), "params.estimator is 'banana', not ols or ridge"),
    "cv-negative": (RIDGE, params(cv=-3), "params.cv is not a whole number of 2 folds or more"),
    "cv-true": (RIDGE, params(cv=True), "params.cv is not a whole number of 2 folds or more"),
    "seed-text": (RIDGE, params(seed="x"), "params.seed is text, not a whole number"),
    "seed-negative": (RIDGE, params(seed=-1), "params.seed is not a whole number >= 0"),
    "alpha-negative": (RIDGE, params(alpha=-1.0), "params.alpha is neither 'cv' nor a non-negative number"),
    "alpha-other-text": (RIDGE, params(alpha="auto"), "params.alpha is neither 'cv' nor a non-negative number"),
    "alphas-none": (RIDGE, params(alphas=[]), "params.alphas holds no alpha"),
    "standardize-text": (RIDGE, params(standardize="yes"), "params.standardize is text, not true or false"),
    "alpha_-negative": (RIDGE, header_field(alpha_=-5), "alpha_ is not the penalty a fit used"),
    "ols-with-a-penalty": (OLS, header_field(alpha_=0.5), "alpha_ is not the penalty a fit used: a non-negative number, 0 for ols"),
    "a-1-D-targets-intercept-of-2": (ONE_D_TARGET, array("intercept", np.ones(2, np.float32)),
                                     "intercept: it is a list of 2, not 1 target columns"),
    "no-intercept": (RIDGE, dropped("intercept"), "it holds the arrays ['W'], not the ['W', 'intercept'] of a map"),
    "standardized-without-its-W": (RIDGE, params(standardize=True), "not the ['W', 'W_standardized', 'intercept'] of a standardized map"),
    "W_standardized-unasked": (STANDARDIZED, params(standardize=False), "not the ['W', 'intercept'] of a map"),
    "W_standardized-transposed": (STANDARDIZED, array("W_standardized", np.ones((3, 4), np.float32)),
                                  "W_standardized: it is 3 x 4, not 4 source columns by 3 target columns"),
}


@pytest.mark.parametrize("case", MAP_DAMAGES)
def test_a_linear_map_file_at_odds_with_itself_is_one_error_naming_it(case, tmp_path):
    settings, damage, message = MAP_DAMAGES[case]
    path = tmp_path / "map.safetensors"
    settings = dict(settings)
    one_d = settings.pop("one_d", False)
    header, arrays = saved_map(path, settings, one_d=one_d)
    LinearMap.load(path).predict(np.ones((2, 4)))  # the undamaged file loads and predicts
    damage(header, arrays)
    path.write_bytes(save(arrays, metadata={"lincorr": json.dumps(header)}))
    with pytest.raises(InputError) as refused:
        LinearMap.load(path)
    assert str(path) in str(refused.value) and message in str(refused.value) and "\n" not in str(refused.value), str(refused.value)


# ---- a saved pair: every array against the words of its domains and the inputs of inputs.json ----

def table(values: np.ndarray, prefix: str) -> LogitTable:
    words = tuple(f"{prefix}{i}" for i in range(values.shape[1]))
    domain = Domain(prefix, words, tuple(range(len(words))), words, ("whole_word",) * len(words), ())
    return LogitTable(values.astype(np.float32), tuple(f"x{i}" for i in range(len(values))), "{} " + prefix, domain, "logits", "m")


@pytest.fixture(scope="module")
def saved_pair(tmp_path_factory) -> Path:
    """A standardized fit of 5 source onto 4 target words over 40 inputs, saved as `lincorr fit --out` saves it."""
    rng = np.random.default_rng(0)
    run = tmp_path_factory.mktemp("pair") / "run"
    source = rng.normal(size=(N_INPUTS, N_SOURCE))
    fit_tables(table(source, "s"), table(source[:, :N_TARGET] + rng.normal(size=(N_INPUTS, N_TARGET)), "t"),
               FitConfig(n_boot=10, n_control=1, standardize=True)).save(run)
    return run


def saved_array(values) -> Callable[[Path], None]:
    return lambda path: np.save(path, np.asarray(values))


def rewritten(change) -> Callable[[Path], None]:
    def damage(path: Path) -> None:
        document = json.loads(path.read_text(encoding="utf-8"))
        path.write_text(json.dumps(change(document)), encoding="utf-8")
    return damage


def nan_from(path: Path) -> None:
    np.save(path, np.full(np.load(path).shape, np.nan, np.float32))


# id: (file damaged, damage, what the error says about it)
PAIR_DAMAGES = {
    "W-of-another-run": ("W.npy", saved_array(np.ones((2, 2), np.float32)), "it is 2 x 2, not 5 source words by 4 target words"),
    "W-one-number": ("W.npy", saved_array(np.float32(1.0)), "it is a 0-dimensional array, not a matrix of source words by target words"),
    "W-a-list": ("W.npy", saved_array(np.ones(20, np.float32)), "it is a 1-dimensional array, not a matrix"),
    "W-NaN": ("W.npy", nan_from, "it holds 20 NaN weights, which no fit writes"),
    "b-of-9": ("b.npy", saved_array(np.ones(9, np.float32)), "it is a list of 9, not 4 target words"),
    "b-infinite": ("b.npy", saved_array(np.array([0, np.inf, 0, 0], np.float32)), "it holds 1 infinite weights"),
    "W_standardized-transposed": ("W_standardized.npy", saved_array(np.ones((4, 5), np.float32)), "it is 4 x 5, not 5 source words"),
    "source-logits-of-7-inputs": ("source_logits.npy", saved_array(np.ones((7, 5), np.float32)),
                                  "it is 7 x 5, not 40 inputs in inputs.json by 5 source words"),
    "target-logits-of-2-words": ("target_logits.npy", saved_array(np.ones((40, 2), np.float32)), "it is 40 x 2, not 40 inputs"),
    "inputs-json-of-2": ("inputs.json", rewritten(lambda inputs: inputs[:2]), "source_logits.npy is not what lincorr writes: it is 40 x 5, "
                                                                              "not 2 inputs in inputs.json"),
    "a-word-without-r": ("result.json", rewritten(lambda r: {**r, "labelwise_r": dict(list(r["labelwise_r"].items())[1:])}),
                         "labelwise_r has 3 entries where the run lists 4 target words"),
    "control-of-5": ("result.json", rewritten(lambda r: {**r, "control_labelwise_r": [*r["control_labelwise_r"], 0.5]}),
                     "control_labelwise_r has 5 entries"),
    "instancewise-short": ("result.json", rewritten(lambda r: {**r, "instancewise_r": r["instancewise_r"][1:]}),
                           "instancewise_r has 19 entries where the run lists 20 test inputs"),
    "test-index-past-the-inputs": ("result.json", rewritten(lambda r: {**r, "test_index": [*r["test_index"][:-1], 40]}),
                                   "names an input outside the 40 of inputs.json"),
}


def damaged_copy(saved_pair: Path, directory: Path, case: str) -> tuple[Path, str]:
    name, damage, message = PAIR_DAMAGES[case]
    run = Path(shutil.copytree(saved_pair, directory / "run"))
    damage(run / name)
    return run, message


@pytest.mark.parametrize("case", PAIR_DAMAGES)
def test_load_result_checks_every_array_against_the_runs_words_and_inputs(case, saved_pair, tmp_path):
    load_result(saved_pair)  # the undamaged run loads
    run, message = damaged_copy(saved_pair, tmp_path, case)
    with pytest.raises(InputError) as refused:
        load_result(run)
    text = str(refused.value)
    assert message in text and str(run) in text and "\n" not in text, text
    assert text.count(REMEDY) == 1, f"wrapped in another error: {text}"


@pytest.mark.parametrize("case", ["W-of-another-run", "W-one-number", "W-NaN"])
def test_the_report_refuses_a_damaged_w_in_the_words_load_result_uses(case, saved_pair, tmp_path, capsys):
    run, message = damaged_copy(saved_pair, tmp_path, case)
    with pytest.raises(InputError) as refused:
        load_result(run)
    problem = str(refused.value).partition("is not what lincorr writes: ")[2].partition(";")[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an all-NaN W once drew nothing, with numpy's warning on stderr, and exited 0
        assert main(["report", str(run), "--out", str(tmp_path / "report.html")]) == 2
    line = one_error_line(capsys)
    assert f"{run / 'W.npy'} is not what lincorr writes: {problem};" in line and message in problem, line
    assert not (tmp_path / "report.html").exists()
