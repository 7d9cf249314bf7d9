"""What the tests of the real bundled models share: the phenomenon's margins and the test against chance."""

from __future__ import annotations

from scipy.stats import binomtest

# The phenomenon: W's held-out label-wise r is large and no artefact of the fit. Large: above 0.5, a large correlation by
# Cohen's convention; no artefact: measured as the bootstrap 95% interval's lower bound minus the shuffled-pairing control.
# Measured (seed 0, 1000 inputs), interval and control: gemma ols [0.894, 0.934], -0.004; ridge [0.935, 0.955], -0.004;
# smollm2 ols [0.712, 0.789], 0.021; ridge [0.758, 0.825], 0.021. The closest, smollm2 ols, clears 0.5 by 0.19: five times its
# interval's half-width (0.039), so resampling noise cannot fail it and a W no better than its control cannot pass.
MIN_GAP_OVER_CONTROL = 0.5
# The control refits W after shuffling which input each training row belongs to: it should be a null. One target word's r
# under no relation has standard error 1/sqrt(500) = 0.045 over 500 test inputs, and the control averages over every target
# word and 5 shuffles, so a mean beyond 0.1 is not noise.
CONTROL_BOUND = 0.1


def above_chance_p(rate: float, n: int, chance: float) -> float:
    """One-sided binomial p-value of `rate` * `n` hits in `n` trials against the mean chance rate `chance`.

    Under a random ranking the hits are independent Bernoulli trials with per-subject chances (a subject with aliases has
    more); beyond its mean such a sum's tail is at most the binomial's with the mean chance (Hoeffding 1956), so this p
    errs on the large side.
    """
    return binomtest(round(rate * n), n, chance, alternative="greater").pvalue
