"""The steps behind Peng et al.'s appendix figures on the correlation metric itself: instance-wise r (Fig. 10) and the
spread of the label-wise r over target words (Fig. 23).

Both read the fits of a family's off-diagonal cells that Fig. 3's claims read (`logits.cell_fits`: ols, half the
inputs held out, fitted once per reproduction), so the two claims and Fig. 3 speak of one set of Ws.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from lincorr.fit import PairResult
from lincorr.metrics import instancewise_pearson
from lincorr.reproduce.peng.logits import PAPER_FIT, cell_fits, mean, shared_test_size
from lincorr.reproduce.peng.units import RESAMPLE_SEED, CellScores, as_drawn, cell_scores, labelwise_spread, mean_over_inputs, resamples
from lincorr.reproduce.step import Context, Measured
from lincorr.reproduce.verdicts import bootstrap_greater, studentized_greater

# Appendix J: "a std generally lower than 0.05".
PAPER_SPREAD = 0.05
# The spread is judged by the bootstrap-t, not the BC bootstrap: a resample repeats inputs, so each word's r is noisier
# and the std over words larger, and the estimate sits above most of its resamples (the 76% point on
# smollm2-135m-instruct-q41); the BC bounds cannot pass the draws there, the bootstrap-t's move the other way. Each
# resample's standard error comes from INNER_RESAMPLES resamples of it.
INNER_RESAMPLES = 50


def bias_only_instancewise_r(fit: PairResult) -> np.ndarray:
    """Per held-out input, r across target words between its logits and the training mean: what the bias alone predicts. `[n_test]`"""
    actual = fit.target.values[fit.test_index]
    prior = np.broadcast_to(fit.target.values[fit.train_index].mean(axis=0), actual.shape)
    return instancewise_pearson(prior, actual)


def instancewise(ctx: Context) -> Measured:
    """Fig. 10: instance-wise r of W on held-out inputs above the prediction of the bias alone (the paper's caveat); each
    input's gain is averaged over the cells first, and the inputs (the independent units) are resampled."""
    fits = cell_fits(ctx)
    n_test = shared_test_size(list(fits.values()))
    with_w = np.stack([fit.instancewise_r for fit in fits.values()])  # [n_cells, n_test]
    bias_only = np.stack([bias_only_instancewise_r(fit) for fit in fits.values()])
    gain = np.nanmean(with_w - bias_only, axis=0)
    gain = gain[np.isfinite(gain)]
    ours = {"n_inputs": len(ctx.inputs()), "estimator": PAPER_FIT, "n_cells": len(fits), "instancewise_r_mean": mean(with_w),
            "bias_only_r_mean": mean(bias_only), "cells": {f"{s}->{t}": mean(fit.instancewise_r) for (s, t), fit in fits.items()}}
    text = (f"{len(fits)} cells: instance-wise r of W {ours['instancewise_r_mean']:.2f}, of the bias alone "
            f"{ours['bias_only_r_mean']:.2f}, on {n_test} held-out inputs")
    test = bootstrap_greater(float(gain.mean()), mean_over_inputs(gain, resamples(gain.size)),
                             f"instance-wise r of W minus the bias alone's, each input's mean over {len(fits)} cells", ctx.interest,
                             int(gain.size), "held-out inputs")
    return Measured(ours, text, test)


def spread_of(cells: Mapping[str, CellScores], what: str, interest: float | None, **about) -> Measured:
    """The std over target words of each cell's label-wise r (`cells`, by name), tested as the median over cells below
    the paper's 0.05 by resampling the held-out inputs the cells share."""
    scores = list(cells.values())
    n_test = scores[0].actual.shape[0]
    stds = labelwise_spread(scores, as_drawn(n_test))[0]
    below = int(np.sum(stds < PAPER_SPREAD))
    median = float(np.median(stds))
    ours = {**about, "n_cells": len(stds), "cells_below": below, "median_std": round(median, 3),
            "cells": {cell: round(float(std), 3) for cell, std in zip(cells, stds)}}
    text = f"std of the {what} below {PAPER_SPREAD} in {below} of {len(stds)} cells (median {ours['median_std']:.3f})"
    counts = resamples(n_test)
    resampled = PAPER_SPREAD - np.median(labelwise_spread(scores, counts), axis=1)
    return Measured(ours, text, studentized_greater(PAPER_SPREAD - median, float(np.std(resampled, ddof=1)), resampled,
                                                    spread_standard_errors(scores, counts),
                                                    f"{PAPER_SPREAD} minus the median over {len(stds)} cells of the std of the {what}",
                                                    interest, n_test, "held-out inputs"))


def spread_standard_errors(scores: list[CellScores], counts: np.ndarray) -> list[float]:
    """Per resample `[n_resamples, n_test]` of the held-out inputs, the standard error of its median spread over
    INNER_RESAMPLES resamples of that resample."""
    inner = np.random.default_rng(RESAMPLE_SEED)
    n_test = counts.shape[1]
    return [float(np.std(np.median(labelwise_spread(scores, inner.multinomial(n_test, row / n_test, INNER_RESAMPLES).astype(np.float64)),
                                   axis=1), ddof=1)) for row in counts]


def spread(ctx: Context) -> Measured:
    """Fig. 23: the spread of each cell's label-wise r over its target words (`spread_of`)."""
    cells = {f"{s}->{t}": cell_scores(fit) for (s, t), fit in cell_fits(ctx).items()}
    return spread_of(cells, "label-wise r", ctx.interest, n_inputs=len(ctx.inputs()), estimator=PAPER_FIT)


STEPS = {"instancewise": instancewise, "spread": spread}
