"""Testing a matrix of cells at the level of what is independent: the held-out inputs every cell shares.

Every cell of a family's matrix is scored on the same held-out inputs, and all target words of a
cell on the same inputs too, so neither cells nor words are independent trials. One resample of
the held-out inputs, the same for every cell, gives one value of the claim's effect; the spread
of those values is what the test reads (`verdicts.bootstrap_greater`), so twelve copies of one
cell say no more than the cell once. The shuffled control is refitted N_CONTROL times and the
mean of its label-wise r is the control.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from lincorr.fit import PairResult
from lincorr.held_out import control_predictions
from lincorr.metrics import bootstrap_counts, resampled_labelwise_r

N_CONTROL = 20  # shuffles the control is refitted with: one shuffle is a noisy null when target words co-vary
# Resamples of the held-out inputs: the smallest p-value a resampling test can give is 1/(N_RESAMPLES + 1), which Holm's
# adjustment across a run of up to 49 claims still keeps below 0.05.
N_RESAMPLES = 1000
RESAMPLE_SEED = 0


@dataclasses.dataclass(frozen=True)
class CellScores:
    """One cell on the held-out inputs: W's predictions and the actual values `[n_test, k]`, and the predictions of the
    Ws fitted on shuffled pairs `[n_control, n_test, k]`."""

    predicted: np.ndarray
    actual: np.ndarray
    control: np.ndarray


def cell_scores(fit: PairResult, fitted_on: tuple[np.ndarray, np.ndarray] | None = None) -> CellScores:
    """`fit`'s held-out scores, beside N_CONTROL refits of its W on shuffled pairs of `fitted_on` (the source and target
    values of every input W was fitted on; its training rows are `fit.train_index`); no control without `fitted_on`."""
    test_source = fit.source.values[fit.test_index]
    actual = fit.target.values[fit.test_index]
    config = dataclasses.replace(fit.config, n_control=N_CONTROL)
    control = (control_predictions(*fitted_on, test_source, fit.train_index, config, fit.alpha) if fitted_on is not None
               else np.zeros((0, *actual.shape), np.float32))
    return CellScores(fit.estimator.predict(test_source).astype(np.float32), actual, control)


def resamples(n_test: int) -> np.ndarray:
    """The resamples of `n_test` held-out inputs every cell of a claim shares, as counts `[N_RESAMPLES, n_test]`."""
    return bootstrap_counts(n_test, N_RESAMPLES, RESAMPLE_SEED)


def as_drawn(n_test: int) -> np.ndarray:
    """The held-out inputs as drawn, as one resample `[1, n_test]`: the point estimate of a resampled effect."""
    return np.ones((1, n_test))


def labelwise_gain(cells: Sequence[CellScores], counts: np.ndarray) -> np.ndarray:
    """Per resample `[n_resamples]`: the mean over cells of each cell's mean over target words of its label-wise r minus
    the shuffled controls' mean label-wise r."""
    gains = []
    for cell in cells:
        r = resampled_labelwise_r(counts, cell.predicted, cell.actual, np.float32)
        # Every shuffle scored by one set of matrix products: `[n_resamples, n_control, k]`.
        control = resampled_labelwise_r(counts, cell.control.transpose(1, 0, 2), cell.actual, np.float32)
        gains.append(np.nanmean(r - np.nanmean(control, axis=1), axis=1))
    return np.mean(gains, axis=0)


def labelwise_spread(cells: Sequence[CellScores], counts: np.ndarray) -> np.ndarray:
    """Per resample and cell `[n_resamples, n_cells]`: the std over target words of the cell's label-wise r."""
    return np.stack([np.nanstd(resampled_labelwise_r(counts, cell.predicted, cell.actual, np.float32), axis=1) for cell in cells], axis=1)


def mean_over_inputs(values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The mean of one value per held-out input `[n_test]` in each resample `[n_resamples]`."""
    return counts @ values / values.size
