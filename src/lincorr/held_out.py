"""Scoring a fitted map on held-out inputs: the seeded train/test split, the shuffled-pairs control and the pairs bootstrap."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from lincorr.errors import DataError, LincorrError
from lincorr.linear import LinearMap
from lincorr.metrics import labelwise_pearson

if TYPE_CHECKING:
    from lincorr.fit import FitConfig

__all__ = ["MIN_TEST_INPUTS", "split_indices", "split_sizes", "control_labelwise_r", "control_predictions", "pairs_bootstrap_labelwise_ci",
           "pairs_bootstrap_intervals"]

# Every r, interval and control is scored on held-out inputs; over fewer than this many a
# correlation is mostly noise (with 2 points |r| is always 1), so such a result is refused.
MIN_TEST_INPUTS = 10


def split_indices(n: int, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeded train/test split of `n` rows (the paper: half and half)."""
    n_test = split_sizes(n, test_fraction)[1]
    order = np.random.default_rng(seed).permutation(n)
    return np.sort(order[n_test:]), np.sort(order[:n_test])


def split_sizes(n: int, test_fraction: float) -> tuple[int, int]:
    """(n_train, n_test) of a split of `n` inputs; refused when it leaves fewer than MIN_TEST_INPUTS to score on."""
    if not 0 < test_fraction < 1:
        raise LincorrError(f"test fraction must be between 0 and 1, got {test_fraction}")
    n_test = int(round(n * test_fraction))
    if n_test < MIN_TEST_INPUTS:
        needed = math.ceil(MIN_TEST_INPUTS / test_fraction)
        raise DataError(f"{n} inputs hold out {n_test} to score on (test fraction {test_fraction:g}), and every r needs at least "
                           f"{MIN_TEST_INPUTS}; use -n {needed} or more (or --inputs with that many lines)")
    if n - n_test < 2:
        raise LincorrError(f"{n} inputs leave {n - n_test} to fit W on; lower the test fraction or use more inputs")
    return n - n_test, n_test


def control_labelwise_r(source: np.ndarray, target: np.ndarray, test_source: np.ndarray, actual: np.ndarray, train: np.ndarray,
                        config: FitConfig, alpha: float) -> np.ndarray:
    """Label-wise r `[n_target]` of the same fit after shuffling which input each training target row belongs to, mean of `n_control`.

    `source` `[n, n_source]` and `target` `[n, n_target]` are fitted on their `train` rows; `test_source` is
    what the shuffled W predicts from, `actual` `[n_test, n_target]` what it is scored against.
    """
    predictions = control_predictions(source, target, test_source, train, config, alpha)
    return np.mean([labelwise_pearson(predicted, actual) for predicted in predictions], axis=0)


def control_predictions(source: np.ndarray, target: np.ndarray, test_source: np.ndarray, train: np.ndarray, config: FitConfig,
                        alpha: float) -> np.ndarray:
    """What each of `config.n_control` Ws fitted on shuffled training pairs predicts from `test_source` `[n_control, n_test, n_target]`."""
    rng = np.random.default_rng(config.seed + 1)
    return np.stack([
        LinearMap(estimator=config.estimator, alpha=alpha, standardize=config.standardize)
        .fit(source[train], target[rng.permutation(train)])
        .predict(test_source).astype(np.float32)
        for _ in range(config.n_control)
    ])


def pairs_bootstrap_labelwise_ci(source: np.ndarray, target: np.ndarray, train: np.ndarray, test: np.ndarray,
                                 config: FitConfig, alpha: float, level: float = 0.95) -> tuple[float, float]:
    """Percentile interval of the mean label-wise r when the inputs themselves are redrawn.

    Each of `config.n_boot` resamples draws the train rows and the test rows with replacement,
    refits W on the first (ridge keeps the penalty `alpha` chosen on the real train half, since
    cross-validating it again per resample would multiply the cost by the folds) and scores it on
    the second, so the interval also covers how W varies with the inputs it was fitted on.
    `source` `[n, n_source]`, `target` `[n, n_target]`; `train`, `test` are row indices.
    """
    tables = (source, target)
    return pairs_bootstrap_intervals(tables, tables, train, test, config, alpha, [slice(None)], level)[0]


def pairs_bootstrap_intervals(fit_on: tuple[np.ndarray, np.ndarray], evaluate_on: tuple[np.ndarray, np.ndarray], train: np.ndarray,
                              test: np.ndarray, config: FitConfig, alpha: float, groups: Sequence[slice],
                              level: float = 0.95) -> list[tuple[float, float]]:
    """`pairs_bootstrap_labelwise_ci` of each group of target columns, W fitted on `fit_on` and scored on `evaluate_on` rows.

    Every resample refits all groups at once (each column is solved on its own), so a group's interval is
    the one its columns alone would give.
    """
    rng = np.random.default_rng(config.seed + 2)
    means = []  # [n_boot][n_groups]
    for _ in range(config.n_boot):
        drawn_train, drawn_test = rng.choice(train, train.size), rng.choice(test, test.size)
        refitted = LinearMap(estimator=config.estimator, alpha=alpha, standardize=config.standardize).fit(
            fit_on[0][drawn_train], fit_on[1][drawn_train])
        r = labelwise_pearson(refitted.predict(evaluate_on[0][drawn_test]).astype(np.float32), evaluate_on[1][drawn_test])
        means.append([np.nanmean(r[group]) if np.isfinite(r[group]).any() else np.nan for group in groups])
    tail = (1 - level) / 2 * 100
    bounds = np.nanpercentile(np.array(means), [tail, 100 - tail], axis=0)  # [2, n_groups]
    return [(float(low), float(high)) for low, high in bounds.T]
