"""The power of the tests of `verdicts`: the chance each would see the effect of interest, over a grid of significance
levels (a claim is judged at ALPHA over the claims of its run, known only once the run is done), exact for the exact
tests (McNemar, Fisher), simulated for the signed-rank test, each with its large-sample approximation where the exact
computation would cost more than a claim's units justify.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.stats

ALPHA = 0.05
# The significance levels a test's power is computed at: the level a claim is judged at, ALPHA / claims in the run, for every
# run of up to MOST_CLAIMS_ON_THE_GRID claims (a paper measures 12 to 26), then coarser down to Bonferroni's over 500. An
# exact test's power is a step function of the level, so it is read at a level of the grid, never interpolated between two
# (`Test.power_at`).
MOST_CLAIMS_ON_THE_GRID = 30
POWER_ALPHAS = tuple(ALPHA / claims for claims in (*range(1, MOST_CLAIMS_ON_THE_GRID + 1), 40, 50, 100, 200, 500))

# Exact powers sum over the outcomes a test's arms can have; a stored recipe may come from anyone, and counts of billions
# asked for 15 GiB. The sums run over the outcomes of probability above LIKELY (binomial windows, exact to 1e-11), Fisher's
# over at most FISHER_EXACT_CELLS pairs of outcomes (two arms of about 40,000 at rate 0.5) before its normal approximation
# with a continuity correction; the signed-rank power is simulated over at most SIMULATED_PAIRS pairs (39 s for 10,000 on
# a loaded 2-core machine) before Pitman's approximation. lincorr's claims count tens to hundreds of units.
LIKELY = 1e-12
FISHER_EXACT_CELLS = 4_000_000
SIMULATED_PAIRS = 2_000


def power_grid(power_of) -> tuple[tuple[float, float], ...]:
    """`power_of(alpha)` at every level of POWER_ALPHAS."""
    return tuple((alpha, float(min(max(power_of(alpha), 0.0), 1.0))) for alpha in POWER_ALPHAS)


def normal_power(noncentrality: float) -> tuple[tuple[float, float], ...]:
    """The power of a one-sided z-test whose statistic has mean `noncentrality` under the effect of interest."""
    return power_grid(lambda alpha: scipy.stats.norm.sf(scipy.stats.norm.isf(alpha) - noncentrality))


def mcnemar_power(n: int, loss_rate: float, rise: float, alpha: float) -> float:
    """The exact power of the one-sided McNemar test on `n` items when a rate `loss_rate` turns wrong and `rise` more turn right."""
    gain_rate = min(loss_rate + rise, 1.0 - loss_rate)
    discordant = gain_rate + loss_rate
    if discordant <= 0:
        return 0.0
    counts, chances = likely_outcomes(n, discordant)
    # Given d discordant items, the smallest count of gains whose p-value clears alpha, and the chance of reaching it.
    reach = scipy.stats.binom.sf(scipy.stats.binom.isf(alpha, counts, 0.5), counts, gain_rate / discordant)
    return float(np.sum(chances * np.where(counts > 0, reach, 0.0)))


def likely_outcomes(trials: int, p: float) -> tuple[np.ndarray, np.ndarray]:
    """The counts of Binomial(trials, p) whose probability is above LIKELY, and their probabilities: found in a window
    around the mean, so that the cost follows the spread, not the number of trials."""
    low = int(scipy.stats.binom.ppf(LIKELY / 10, trials, p))
    high = int(min(scipy.stats.binom.isf(LIKELY / 10, trials, p) + 1, trials))
    outcomes = np.arange(low, high + 1)
    chances = scipy.stats.binom.pmf(outcomes, trials, p)
    return outcomes[chances > LIKELY], chances[chances > LIKELY]


def fisher_power(n: int, control_n: int, rate: float, control_rate: float) -> tuple[tuple[float, float], ...]:
    """The chance that the one-sided Fisher exact test of Binomial(n, rate) hits against Binomial(control_n, control_rate)
    reaches p <= alpha, at every level of POWER_ALPHAS (summed over the likely outcomes of each arm); beyond
    FISHER_EXACT_CELLS pairs of them, the normal approximation with a continuity correction, which errs low as the exact
    test does (Casagrande, Pike and Smith)."""
    hits, hit_chances = likely_outcomes(n, rate)
    control_hits, control_chances = likely_outcomes(control_n, control_rate)
    if hits.size * control_hits.size > FISHER_EXACT_CELLS:
        pooled = (n * rate + control_n * control_rate) / (n + control_n)
        null_se = math.sqrt(pooled * (1 - pooled) * (1 / n + 1 / control_n))
        effect_se = math.sqrt(rate * (1 - rate) / n + control_rate * (1 - control_rate) / control_n)
        corrected = rate - control_rate - (1 / n + 1 / control_n) / 2
        return power_grid(lambda alpha: scipy.stats.norm.cdf((corrected - scipy.stats.norm.isf(alpha) * null_se) / effect_se))
    # Fisher's one-sided p of every (hits, control hits): the hypergeometric chance of at least `hits` of the table's
    # successes in the first row.
    p_values = scipy.stats.hypergeom.sf(hits[:, None] - 1, n + control_n, hits[:, None] + control_hits[None, :], n)
    chances = hit_chances[:, None] * control_chances[None, :]
    return power_grid(lambda alpha: float(chances[p_values <= alpha].sum()))


SIMULATED_SAMPLES = 4000  # a simulated power's standard error is at most 0.008


def signed_rank_power(n: int, shift: float, sd: float) -> tuple[tuple[float, float], ...]:
    """The power of the one-sided signed-rank test, as `paired_greater` runs it, on `n` normal differences of mean `shift`
    and standard deviation `sd`: simulated with a fixed seed, so a stored test is judged the same each time. With few
    pairs the exact test's p-values are coarse and cannot go below 1 / 2^n (7 pairs: 0.0078), where a normal approximation
    of its power still promises much; there, at a smaller level, the power is 0. Over more than SIMULATED_PAIRS pairs, the
    t-test's normal power at the signed-rank test's efficiency for normal differences, 3/pi (Pitman)."""
    if n > SIMULATED_PAIRS:
        return normal_power(shift / sd * math.sqrt(3 * n / math.pi))
    samples = np.random.default_rng(0).normal(shift, sd, size=(SIMULATED_SAMPLES, n))
    p_values = scipy.stats.wilcoxon(samples, axis=1, alternative="greater").pvalue
    return power_grid(lambda alpha: float(np.mean(p_values <= alpha)))
