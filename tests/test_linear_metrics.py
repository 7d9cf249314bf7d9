"""The fit recovers planted maps and agrees with scikit-learn; the metrics agree with scipy."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats
from sklearn.linear_model import LinearRegression, Ridge

from lincorr.errors import LincorrError
from lincorr.linear import LinearMap, fit_ridge, ridge_held_out_errors
from lincorr.metrics import bootstrap_labelwise_ci, instancewise_pearson, labelwise_pearson, top_influenced, top_influencing, top_k


def planted(n=400, n_source=12, n_target=7, noise=0.01, seed=0):
    rng = np.random.default_rng(seed)
    source = rng.normal(size=(n, n_source))
    W = rng.normal(size=(n_source, n_target))
    intercept = rng.normal(size=n_target)
    target = source @ W + intercept + noise * rng.normal(size=(n, n_target))
    return source, target, W, intercept


def test_ols_recovers_a_planted_map():
    source, target, W, intercept = planted()
    fitted = LinearMap("ols").fit(source, target)
    np.testing.assert_allclose(fitted.W_, W, atol=5e-3)
    np.testing.assert_allclose(fitted.intercept_, intercept, atol=5e-3)
    assert fitted.score(source, target) > 0.999


def test_ols_equals_sklearn_linear_regression():
    source, target, *_ = planted(noise=1.0)
    ours = LinearMap("ols").fit(source, target)
    reference = LinearRegression().fit(source, target)
    np.testing.assert_allclose(ours.coef_, reference.coef_, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(ours.W_, ours.coef_.T)
    np.testing.assert_allclose(ours.intercept_, reference.intercept_, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("alpha", [0.1, 10.0, 1000.0])
def test_ridge_equals_sklearn_ridge(alpha):
    source, target, *_ = planted(noise=1.0)
    ours = LinearMap("ridge", alpha=alpha).fit(source, target)
    reference = Ridge(alpha=alpha).fit(source, target)
    np.testing.assert_allclose(ours.coef_, reference.coef_, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(ours.W_, ours.coef_.T)
    np.testing.assert_allclose(ours.intercept_, reference.intercept_, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ours.predict(source), reference.predict(source), rtol=1e-4, atol=1e-4)


def test_cross_validation_prefers_little_penalty_on_clean_data_and_more_on_noise():
    source, target, *_ = planted(noise=0.01)
    clean = LinearMap("ridge", alpha="cv").fit(source, target).alpha_
    rng = np.random.default_rng(1)
    noisy_target = 0.05 * source[:, :1] + rng.normal(size=target.shape)
    noisy = LinearMap("ridge", alpha="cv").fit(source, noisy_target).alpha_
    assert clean < noisy


@pytest.mark.parametrize("n_source", [30, 150])  # fewer, then more features than training rows
def test_held_out_ridge_errors_equal_fitting_and_predicting_each_alpha(n_source):
    source, target, *_ = planted(n=120, n_source=n_source, n_target=9, noise=1.0)
    train, held = slice(0, 90), slice(90, None)
    alphas = (1e-3, 1.0, 100.0, 1e4)
    plain = [np.mean((source[held] @ W + intercept - target[held]) ** 2) for W, intercept in fit_ridge(source[train], target[train], alphas)]
    np.testing.assert_allclose(ridge_held_out_errors(source[train], target[train], source[held], target[held], alphas), plain, rtol=1e-9)


def test_ols_refuses_fewer_rows_than_features():
    source, target, *_ = planted(n=10)
    with pytest.raises(LincorrError, match="ridge"):
        LinearMap("ols").fit(source, target)


def test_unknown_estimator():
    source, target, *_ = planted()
    with pytest.raises(LincorrError, match="unknown estimator"):
        LinearMap("lasso").fit(source, target)


def test_linear_map_is_a_scikit_learn_estimator():
    from sklearn.utils.estimator_checks import check_estimator

    check_estimator(LinearMap())
    check_estimator(LinearMap("ridge", alpha="cv", cv=3))


def test_linear_map_works_in_scikit_learn_pipelines_and_cross_validation():
    from sklearn.model_selection import cross_val_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    source, target, *_ = planted(noise=0.1)
    scores = cross_val_score(make_pipeline(StandardScaler(), LinearMap("ridge", alpha=1.0)), source, target, cv=3)
    assert scores.min() > 0.99  # R^2 of a planted map with 1% noise: anything lower means the pipeline broke the fit
    single = LinearMap("ols").fit(source, target[:, 0])
    assert single.coef_.shape == (source.shape[1],) and single.predict(source).shape == (len(source),)


def test_labelwise_and_instancewise_agree_with_scipy():
    rng = np.random.default_rng(0)
    predicted, actual = rng.normal(size=(30, 6)), rng.normal(size=(30, 6))
    actual[:, 0] += 3 * predicted[:, 0]
    labelwise = labelwise_pearson(predicted, actual)
    instancewise = instancewise_pearson(predicted, actual)
    np.testing.assert_allclose(labelwise, [stats.pearsonr(predicted[:, j], actual[:, j])[0] for j in range(6)], atol=1e-10)
    np.testing.assert_allclose(instancewise, [stats.pearsonr(predicted[i], actual[i])[0] for i in range(30)], atol=1e-10)


def test_constant_column_gives_nan_not_a_crash():
    predicted = np.ones((5, 2))
    predicted[:, 1] = np.arange(5)
    r = labelwise_pearson(predicted, np.arange(10.0).reshape(5, 2))
    assert np.isnan(r[0]) and r[1] == pytest.approx(1.0)


def test_bootstrap_interval_matches_a_plain_resampling_loop():
    rng = np.random.default_rng(3)
    predicted = rng.normal(size=(50, 4))
    actual = predicted + rng.normal(size=(50, 4))
    low, high = bootstrap_labelwise_ci(predicted, actual, n_boot=200, seed=7)
    # Independent re-implementation: draw the same counts, expand to indices, use scipy.
    counts = np.random.default_rng(7).multinomial(50, np.full(50, 1 / 50), size=200)
    means = []
    for c in counts:
        index = np.repeat(np.arange(50), c)
        means.append(np.mean([stats.pearsonr(predicted[index, j], actual[index, j])[0] for j in range(4)]))
    expected = np.percentile(means, [2.5, 97.5])
    np.testing.assert_allclose([low, high], expected, atol=1e-8)
    point = labelwise_pearson(predicted, actual).mean()
    assert low < point < high


def test_top_k_and_inspection():
    W = np.array([[0.1, 0.9, -0.3], [0.5, 0.2, 0.7]])
    assert top_k(np.array([3.0, 9.0, 1.0, 7.0]), 2).tolist() == [1, 3]
    assert top_influenced(W, 0, 2).tolist() == [1, 0]
    assert top_influencing(W, 2, 1).tolist() == [1]
    assert top_k(np.array([1.0, 2.0]), 5).tolist() == [1, 0]


def test_ols_with_a_duplicated_source_column_still_fits_exactly():
    rng = np.random.default_rng(0)
    source = rng.normal(size=(50, 5))
    source = np.hstack([source, source[:, :1]])
    target = source @ rng.normal(size=(6, 2)) + 1.0
    fitted = LinearMap("ols").fit(source, target)
    np.testing.assert_allclose(fitted.predict(source), target, atol=1e-4)
    assert np.isfinite(fitted.coef_).all()


def test_pearson_of_two_vectors_is_scipys_and_undefined_where_r_means_nothing():
    from lincorr.metrics import pearson

    rng = np.random.default_rng(0)
    a, b = rng.normal(size=20), rng.normal(size=20)
    assert pearson(a, b) == pytest.approx(stats.pearsonr(a, b)[0], abs=1e-12)  # float64 both ways
    assert np.isnan(pearson([1.0, 2.0], [2.0, 1.0])) and np.isnan(pearson([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]))


def test_the_permutation_p_of_r_is_small_for_a_relation_and_not_for_noise():
    from lincorr.metrics import pearson_permutation_p

    rng = np.random.default_rng(0)
    a = rng.normal(size=40)
    assert pearson_permutation_p(a, a + 0.3 * rng.normal(size=40), n_resamples=999) <= 0.002  # r ~ 0.95 over 40 points
    assert pearson_permutation_p(a, -a + 0.3 * rng.normal(size=40), n_resamples=999) > 0.99  # one-sided: r < 0 is no evidence
    noise = [pearson_permutation_p(rng.normal(size=40), rng.normal(size=40), n_resamples=199) for _ in range(40)]
    assert 0.1 < np.mean(noise) < 0.9  # under no relation p is about uniform: mean 0.5, sd of the mean 0.05
    assert np.isnan(pearson_permutation_p([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]))


def test_chance_hit_at_k_is_the_combinatorial_miss_rate():
    """Independent check: a random top k misses all m right columns with probability C(n - m, k) / C(n, k)."""
    import math

    from lincorr.metrics import chance_hit_at_k

    right = {i: tuple(range(i % 4 + 1)) for i in range(50)}
    expected = {k: 1 - np.mean([math.comb(30 - len(c), min(k, 30)) / math.comb(30, min(k, 30)) for c in right.values()]) for k in (1, 3, 5, 40)}
    assert chance_hit_at_k(30, right, (1, 3, 5, 40)) == pytest.approx(expected, abs=1e-12)  # k = 40 > 30 columns: always a hit
