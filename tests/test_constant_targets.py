"""A target word whose held-out logits are constant has no label-wise r: the mean leaves it out, and says how many it left out."""

from __future__ import annotations

import json

import numpy as np
import pytest

from lincorr.collection import LogitTable
from lincorr.domains import Domain
from lincorr.fit import FitConfig, fit_tables
from lincorr.studies.training.gradients import gradient_correlation_from_changes
from lincorr.studies.logits.matrix import Grid, matrix_from_tables
from lincorr.metrics import summarize
from lincorr.report.page import KeyNumbers
from lincorr.report.logits import read_pair
from lincorr.strict_json import dumps


def table(values: np.ndarray, prefix: str) -> LogitTable:
    words = tuple(f"{prefix}{i}" for i in range(values.shape[1]))
    domain = Domain(prefix, words, tuple(range(len(words))), words, ("whole_word",) * len(words), ())
    return LogitTable(values.astype(np.float32), tuple(f"x{i}" for i in range(len(values))), "{} " + prefix, domain, "logits", "m")


def planted(constant_columns: tuple[int, ...]):
    """Targets that are noisy linear images of the sources, except `constant_columns`, which never move."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 4))
    y = x @ rng.normal(size=(4, 5)) + 0.3 * rng.normal(size=(200, 5))
    y[:, list(constant_columns)] = 2.5
    return fit_tables(table(x, "s"), table(y, "t"), FitConfig(n_boot=50))


def test_constant_target_columns_are_counted_and_left_out_of_the_mean():
    result = planted((1, 3))
    summary = result.summary()
    assert summary["n_constant_targets"] == 2 and np.isnan(result.labelwise_r[[1, 3]]).all()
    # The mean is over the three defined columns only (not a NaN, and not dragged towards 0 by the constant ones).
    assert summary["labelwise_r_mean"] == pytest.approx(np.mean(result.labelwise_r[[0, 2, 4]]))
    assert summary["labelwise_r_mean"] > 0.9
    # Strict JSON: the count is a plain number; the undefined per-word r become null with a reason.
    saved = json.loads(dumps({**summary, "labelwise_r": result.labelwise_by_word()}))
    assert saved["n_constant_targets"] == 2 and saved["labelwise_r"]["t1"] is None and "labelwise_r.t1" in saved["undefined"]
    assert "left out: 2 target words constant" in result.text()


def test_no_constant_target_prints_no_left_out_line():
    result = planted(())
    assert result.summary()["n_constant_targets"] == 0
    assert "left out" not in result.text()


def test_the_report_shows_the_count_beside_the_labelwise_r(tmp_path):
    planted((1,)).save(tmp_path / "run")
    numbers = next(block for block in read_pair(tmp_path / "run").blocks if isinstance(block, KeyNumbers))
    assert "1 constant target words left out" in dict(numbers.items)["label-wise r"]


def test_a_matrix_cell_counts_its_constant_target_words(tmp_path):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(200, 4))
    y = x @ rng.normal(size=(4, 5)) + 0.3 * rng.normal(size=(200, 5))
    y[:, 2] = -1.0
    tables = {"s": table(x, "s"), "t": table(y, "t")}
    result = matrix_from_tables(Grid.rectangle(["s"], ["t", "s"]), tables, FitConfig(n_boot=10))
    assert result.n_constant_targets.tolist() == [[1, 0]]
    assert result.summary()["n_constant_targets"] == 1
    assert {p["target"]: p["n_constant_targets"] for p in result.pairs()} == {"t": 1, "s": 0}
    # The cell's mean is over the four defined words, not NaN.
    assert result.value("s", "t") > 0.9
    result.save(tmp_path / "m")
    assert "n_constant_targets" in (tmp_path / "m" / "pairs.csv").read_text().splitlines()[0]


def test_the_gradient_correlation_counts_target_words_that_did_not_move():
    rng = np.random.default_rng(2)
    W = rng.normal(size=(4, 3))
    source_change = rng.normal(size=(50, 4))
    target_change = source_change @ W + 0.1 * rng.normal(size=(50, 3))
    target_change[:, 1] = 0.0
    labelwise = gradient_correlation_from_changes(W, source_change, target_change, n_control=2).labelwise
    assert np.isnan(labelwise[1]) and np.isfinite(labelwise[[0, 2]]).all()
    assert summarize(labelwise)["mean"] > 0.9
