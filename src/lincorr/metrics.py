"""Pearson correlations (label-wise, instance-wise), bootstrap intervals and W inspection."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence

import numpy as np
from numpy.typing import ArrayLike


def columnwise_pearson(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pearson r between matching columns of `a` and `b` `[n, k]` -> `[k]` (NaN where constant)."""
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    a = a - a.mean(0)
    b = b - b.mean(0)
    denominator = np.sqrt((a * a).sum(0) * (b * b).sum(0))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denominator > 0, (a * b).sum(0) / denominator, np.nan)


def labelwise_pearson(predicted: np.ndarray, actual: np.ndarray) -> np.ndarray:
    """Per target label, r across instances: `[n, k]` -> `[k]`."""
    return columnwise_pearson(predicted, actual)


def instancewise_pearson(predicted: np.ndarray, actual: np.ndarray) -> np.ndarray:
    """Per instance, r across labels: `[n, k]` -> `[n]`."""
    return columnwise_pearson(np.asarray(predicted).T, np.asarray(actual).T)


def bootstrap_labelwise_ci(
    predicted: np.ndarray, actual: np.ndarray, *, n_boot: int = 1000, level: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """Percentile interval of the mean label-wise r, resampling instances with replacement (`resampled_labelwise_r`)."""
    n = np.asarray(predicted).shape[0]
    r = resampled_labelwise_r(bootstrap_counts(n, n_boot, seed), predicted, actual)
    means = np.nanmean(r, axis=1)
    tail = (1 - level) / 2 * 100
    low, high = np.nanpercentile(means, [tail, 100 - tail])
    return float(low), float(high)


def bootstrap_counts(n: int, n_boot: int, seed: int) -> np.ndarray:
    """`n_boot` resamples of `n` instances with replacement, each as the count of every instance `[n_boot, n]`."""
    return np.random.default_rng(seed).multinomial(n, np.full(n, 1.0 / n), size=n_boot).astype(np.float64)


def resampled_labelwise_r(counts: np.ndarray, predicted: np.ndarray, actual: np.ndarray, dtype=np.float64) -> np.ndarray:
    """Label-wise r of every resample at once: each resample is a row of instance `counts` `[n_boot, n]`, and the weighted
    sums Pearson needs are matrix products with those counts (NaN where a column is constant).

    `predicted` is `[n, k]` -> `[n_boot, k]`, or several predictions of the same `actual` `[n, c, k]` -> `[n_boot, c, k]`,
    whose sums of `actual` are computed once. float32 (`dtype`) halves the time of the products at about 1e-5 in r.
    """
    a = np.asarray(actual, dtype)
    n, k = a.shape
    shape = np.asarray(predicted).shape
    # Centre first: it changes nothing in r and keeps the sums well conditioned.
    p = np.asarray(predicted, dtype).reshape(n, -1, k)
    p = p - p.mean(0)
    a = a - a.mean(0)
    counts = np.asarray(counts, dtype)
    wide = p.reshape(n, -1)
    mean_p = (counts @ wide / n).reshape(-1, p.shape[1], k)
    cov = (counts @ (p * a[:, None, :]).reshape(n, -1) / n).reshape(mean_p.shape)
    var_p = (counts @ (wide * wide) / n).reshape(mean_p.shape) - mean_p**2
    mean_a = (counts @ a / n)[:, None, :]
    var_a = (counts @ (a * a) / n)[:, None, :] - mean_a**2
    with np.errstate(invalid="ignore", divide="ignore"):
        r = (cov - mean_p * mean_a) / np.sqrt(var_p * var_a)
    r = np.where(np.isfinite(r), r, np.nan)
    return r.reshape(counts.shape[0], *shape[1:])


def top_k(weights: np.ndarray, k: int) -> np.ndarray:
    """Indices of the `k` largest entries of a vector, largest first."""
    k = min(k, weights.shape[0])
    part = np.argpartition(-weights, k - 1)[:k]
    return part[np.argsort(-weights[part], kind="stable")]


def top_influenced(W: np.ndarray, source_index: int, k: int = 5) -> np.ndarray:
    """Target columns with the largest weight from one source row of W `[n_source, n_target]`."""
    return top_k(W[source_index], k)


def top_influencing(W: np.ndarray, target_index: int, k: int = 5) -> np.ndarray:
    """Source rows with the largest weight into one target column of W `[n_source, n_target]`."""
    return top_k(W[:, target_index], k)


def summarize(values: ArrayLike) -> dict[str, float]:
    """Mean and standard deviation, ignoring NaN (both NaN, without a warning, when every value is NaN)."""
    values = np.asarray(values, np.float64)
    if np.isnan(values).all():
        return {"mean": float("nan"), "std": float("nan")}
    return {"mean": float(np.nanmean(values)), "std": float(np.nanstd(values))}


def invert_reference(reference: Mapping[int, tuple[int, ...]]) -> dict[int, tuple[int, ...]]:
    """Source row -> right target columns, turned into target column -> the source rows right for it."""
    inverted: dict[int, list[int]] = {}
    for row, columns in reference.items():
        for column in columns:
            inverted.setdefault(column, []).append(row)
    return {column: tuple(rows) for column, rows in inverted.items()}


def hit_at_k(scores: np.ndarray, right: Mapping[int, tuple[int, ...]], ks: Sequence[int] = (1, 3, 5)) -> dict[int, float]:
    """Share of the rows in `right` whose `k` highest-scoring columns of `scores` `[n_rows, n_cols]` hold a right one.

    Hit@Top-k of §3.5: with W it asks "is a right country among a city's top-k influenced
    countries"; with W.T, "is a right city among a country's top-k influencing cities".
    NaN when `right` is empty.
    """
    rows = sorted(right)
    if not rows:
        return {k: float("nan") for k in ks}
    ranked = np.argsort(-np.asarray(scores)[rows], axis=1, kind="stable")
    return {k: float(np.mean([not set(ranked[i, :k].tolist()).isdisjoint(right[row]) for i, row in enumerate(rows)])) for k in ks}


def chance_hit_at_k(n_columns: int, right: Mapping[int, tuple[int, ...]], ks: Sequence[int] = (1, 3, 5)) -> dict[int, float]:
    """Expected `hit_at_k` of a uniformly random ranking of `n_columns` columns (the floor to compare against).

    The top k of a random ranking is k columns drawn without replacement: the number of right columns among them is
    hypergeometric, and a hit is at least one.
    """
    from scipy.stats import hypergeom

    if not right:
        return {k: float("nan") for k in ks}
    right_counts = np.array([len(columns) for columns in right.values()])
    return {k: float(np.mean(hypergeom.sf(0, n_columns, right_counts, min(k, n_columns)))) for k in ks}


def chance_top1(accepted: Iterable[Collection], domain_size: int) -> float:
    """The random baseline of a top-1 test: mean over questions of |accepted answers| / `domain_size` (NaN with none).

    Each question comes with every answer that counts as right (a reference object and its aliases,
    as distinct domain entries), so a question with two right answers has twice the chance of one.
    The generalization study and the vocabulary ablation both report this.
    """
    return rate(len(answers) / domain_size for answers in accepted)


def roc_auc(scores: ArrayLike, labels: Sequence[bool]) -> float:
    """ROC AUC of `scores` for `labels` (ties count half); NaN with one class only, where it is undefined."""
    from sklearn.metrics import roc_auc_score

    truth = np.asarray(labels, bool)
    if truth.all() or not truth.any():
        return float("nan")
    return float(roc_auc_score(truth, np.asarray(scores, np.float64)))


def pearson(a, b) -> float:
    """Pearson r of two vectors; NaN with fewer than 3 values or a constant one, where r means nothing."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if len(a) < 3 or a.std() == 0 or b.std() == 0:
        return float("nan")
    return float(columnwise_pearson(a[:, None], b[:, None])[0])


def pearson_permutation_p(a, b, *, n_resamples: int = 9999, seed: int = 0) -> float:
    """One-sided p of Pearson r(a, b) > 0 against shuffled pairings (scipy's permutation test); NaN where r is undefined."""
    from scipy.stats import permutation_test

    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if np.isnan(pearson(a, b)):
        return float("nan")
    test = permutation_test((a, b), lambda x, y: pearson(x, y), permutation_type="pairings", alternative="greater",
                            n_resamples=n_resamples, random_state=seed)
    return float(test.pvalue)


def rate(values) -> float:
    """Share of true values (NaN when empty)."""
    values = list(values)
    return float(np.mean(values)) if values else float("nan")
