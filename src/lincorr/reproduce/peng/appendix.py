"""The steps behind Peng et al.'s appendix figures on the correlation metric itself: instance-wise r (Fig. 10) and the
spread of the label-wise r over target words (Fig. 23).

Both read the fits of a family's off-diagonal cells that Fig. 3's claims read (`peng_logits.cell_fits`: ols, half the
inputs held out, fitted once per reproduction), so the two claims and Fig. 3 speak of one set of Ws.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from lincorr.fit import PairResult
from lincorr.metrics import instancewise_pearson
from lincorr.reproduce.peng.logits import PAPER_FIT, cell_fits, mean
from lincorr.reproduce.step import Context, Measured
from lincorr.reproduce.verdicts import binomial_above, paired_greater

# Appendix J: "a std generally lower than 0.05".
PAPER_SPREAD = 0.05


def bias_only_instancewise_r(fit: PairResult) -> np.ndarray:
    """Per held-out input, r across target words between its logits and the training mean: what the bias alone predicts. `[n_test]`"""
    actual = fit.target.values[fit.test_index]
    prior = np.broadcast_to(fit.target.values[fit.train_index].mean(axis=0), actual.shape)
    return instancewise_pearson(prior, actual)


def instancewise(ctx: Context) -> Measured:
    """Fig. 10: instance-wise r of W on held-out inputs, tested against the prediction of the bias alone (the paper's caveat)."""
    fits = cell_fits(ctx)
    with_w = np.concatenate([fit.instancewise_r for fit in fits.values()])
    bias_only = np.concatenate([bias_only_instancewise_r(fit) for fit in fits.values()])
    ours = {"n_inputs": len(ctx.inputs()), "estimator": PAPER_FIT, "n_cells": len(fits), "instancewise_r_mean": mean(with_w),
            "bias_only_r_mean": mean(bias_only),
            "cells": {f"{s}->{t}": mean(fit.instancewise_r) for (s, t), fit in fits.items()}}
    text = (f"{len(fits)} cells: instance-wise r of W {ours['instancewise_r_mean']:.2f}, of the bias alone "
            f"{ours['bias_only_r_mean']:.2f}")
    return Measured(ours, text, paired_greater(with_w, bias_only, "instance-wise r of each held-out input: W vs the bias alone"))


def spread_of(labelwise: Mapping[str, np.ndarray], what: str, **about) -> Measured:
    """The std over target words of each cell's label-wise r (`labelwise`, by cell), tested as most cells below the paper's 0.05."""
    stds = {cell: float(np.std(r[np.isfinite(r)])) for cell, r in labelwise.items()}
    below = sum(std < PAPER_SPREAD for std in stds.values())
    ours = {**about, "n_cells": len(stds), "cells_below": below, "median_std": round(float(np.median(list(stds.values()))), 3),
            "cells": {cell: round(std, 3) for cell, std in stds.items()}}
    text = f"std of the {what} below {PAPER_SPREAD} in {below} of {len(stds)} cells (median {ours['median_std']:.3f})"
    return Measured(ours, text, binomial_above(below, len(stds), 0.5, f"cells with std below {PAPER_SPREAD}"))


def spread(ctx: Context) -> Measured:
    """Fig. 23: the spread of each cell's label-wise r over its target words (`spread_of`)."""
    labelwise = {f"{s}->{t}": fit.labelwise_r for (s, t), fit in cell_fits(ctx).items()}
    return spread_of(labelwise, "label-wise r", n_inputs=len(ctx.inputs()), estimator=PAPER_FIT)


STEPS = {"instancewise": instancewise, "spread": spread}
