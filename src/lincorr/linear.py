"""Fitting the logit map  target = source @ W + b  in closed form, for all targets at once."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import scipy.linalg
from sklearn.base import BaseEstimator, RegressorMixin, clone
from sklearn.utils.validation import check_is_fitted, validate_data

from lincorr.errors import InputError, LincorrError
from lincorr.filesystem import atomic_file
from lincorr.reading import array_problem, parse_json, read_bytes
from lincorr.schema import REAL, TEXT, FileKind, Items, checked

DEFAULT_ALPHAS = tuple(float(a) for a in np.logspace(-3, 5, 17))
MAP_FORMAT = "lincorr.LinearMap/1"  # the metadata tag `LinearMap.load` accepts
MAP_FILE = FileKind("linear map file", {"format": TEXT, "alpha_": REAL, "one_d_target": bool, "params": {
    "estimator": TEXT, "alpha": (TEXT, REAL), "alphas": Items(REAL), "cv": int, "seed": int, "standardize": bool}},
                    "pass a file written by LinearMap.save")


class LinearMap(RegressorMixin, BaseEstimator):
    """The linear map between logit tables, a scikit-learn regressor: target = source @ W + b.

    estimator="ols" is the paper's ordinary least squares with a bias; "ridge" (the default, as in
    the CLI) adds an L2 penalty `alpha` on W (not on b), either fixed or chosen by k-fold
    cross-validation (alpha="cv", the default) over `alphas`. With `standardize`, every source and target column is z-scored
    on the training rows first and the ridge penalty is per training input, so alpha=1 solves
    W = (C_xx + I)^-1 C_xy in correlation units whatever N is. Learned: `W_` `[n_source, n_target]`
    (row i: how source word i moves every target, in the data's units), `coef_` (the same in
    scikit-learn's orientation `[n_target, n_source]`, 1-D for a 1-D target), `intercept_`
    `[n_target]`, `alpha_` (the penalty used; 0 for ols), and with `standardize` also
    `W_standardized_` (W between the z-scored columns: target standard deviations per source one).
    `score` is scikit-learn's R^2; the paper's label-wise r is `metrics.labelwise_pearson`.
    """

    def __init__(self, estimator: str = "ridge", alpha: float | str = "cv", alphas=DEFAULT_ALPHAS, cv: int = 5, seed: int = 0,
                 standardize: bool = False):
        self.estimator = estimator
        self.alpha = alpha
        self.alphas = alphas
        self.cv = cv
        self.seed = seed
        self.standardize = standardize

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags

    def fit(self, X, y) -> LinearMap:
        """Fit on source scores `X` `[n, n_source]` and target scores `y` `[n, n_target]` (or `[n]`)."""
        X, y = validate_data(self, X, y, multi_output=True, y_numeric=True, dtype=np.float64)
        target = y.reshape(len(y), -1)
        if X.shape[0] < 2:
            raise LincorrError(f"fitting a linear map needs at least 2 inputs, got {X.shape[0]} sample")
        if self.standardize:
            (x_mean, x_scale), (y_mean, y_scale) = column_scales(X), column_scales(target)
            X, target = (X - x_mean) / x_scale, (target - y_mean) / y_scale
        penalty_unit = X.shape[0] if self.standardize else 1
        if self.estimator == "ols":
            if X.shape[0] <= X.shape[1]:
                raise LincorrError(
                    f"ols needs more training inputs ({X.shape[0]}) than source features ({X.shape[1]}); "
                    "use more inputs (-n) or --estimator ridge"
                )
            self.alpha_ = 0.0
            W, b = fit_ols(X, target)
        elif self.estimator == "ridge":
            self.alpha_ = self.select_alpha(X, target, penalty_unit) if self.alpha == "cv" else float(self.alpha)
            if not self.alpha_ >= 0:
                raise LincorrError(f"ridge alpha must be non-negative, got {self.alpha_}")
            W, b = fit_ridge(X, target, (self.alpha_ * penalty_unit,))[0]
        else:
            raise LincorrError(f"unknown estimator '{self.estimator}'; use ols or ridge")
        if self.standardize:
            self.W_standardized_ = W.astype(np.float32)
            W = W * y_scale / x_scale[:, None]
            b = y_mean + b * y_scale - x_mean @ W
        self.W_ = W.astype(np.float32)
        self.intercept_ = b.astype(np.float32)
        self.coef_ = self.W_.T
        if y.ndim == 1:
            self.coef_, self.intercept_ = self.coef_[0], self.intercept_[0]
        return self

    def predict(self, X) -> np.ndarray:
        """Predicted target scores `[n, n_target]` (`[n]` after a 1-D fit), float64 as scikit-learn expects."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        return X @ self.coef_.T.astype(np.float64) + self.intercept_

    def target_columns(self, columns) -> LinearMap:
        """This fitted map onto the target columns `columns` (a slice or indices) only.

        Each target column is solved on its own, so this is the map fitting those columns alone
        gives with the same penalty `alpha_`.
        """
        check_is_fitted(self)
        return clone(self).with_weights(self.W_[:, columns], self.intercept_[columns], self.alpha_,
                                        W_standardized=self.W_standardized_[:, columns] if self.standardize else None)

    def with_weights(self, W, intercept, alpha: float, *, W_standardized=None, one_d_target: bool = False) -> LinearMap:
        """This map, fitted already: W `[n_source, n_target]`, b `[n_target]` and the penalty `alpha` used (a saved result's map)."""
        self.W_, self.intercept_ = np.asarray(W, dtype=np.float32), np.asarray(intercept, dtype=np.float32)
        self.n_features_in_, self.alpha_, self.coef_ = self.W_.shape[0], float(alpha), self.W_.T
        if W_standardized is not None:
            self.W_standardized_ = np.asarray(W_standardized, dtype=np.float32)
        if one_d_target:
            self.coef_, self.intercept_ = self.coef_[0], self.intercept_[0]
        return self

    def save(self, path) -> None:
        """This fitted map as one safetensors file (W, b, and W in z units when standardized) with its parameters as JSON metadata.

        Nothing is pickled: `load` reads arrays and JSON only.
        """
        from safetensors.numpy import save

        check_is_fitted(self)
        arrays = {"W": self.W_, "intercept": np.atleast_1d(self.intercept_)}
        if self.standardize:
            arrays["W_standardized"] = self.W_standardized_
        header = {"format": MAP_FORMAT, "params": {**self.get_params(), "alphas": [float(a) for a in self.alphas]},
                  "alpha_": float(self.alpha_), "one_d_target": np.ndim(self.coef_) == 1}
        with atomic_file(path, "wb") as out:
            out.write(save({name: np.ascontiguousarray(values, dtype=np.float32) for name, values in arrays.items()},
                           metadata={"lincorr": json.dumps(header)}))

    @classmethod
    def load(cls, path) -> LinearMap:
        """The fitted map `save` wrote to `path`; a file that is not one is one clear InputError.

        The file goes through `reading.read_bytes` (a regular file, bounded in size) and its JSON header through
        `reading.parse_json` and the declared `MAP_FILE` shape before any array is built; nothing is unpickled.
        """
        from safetensors import SafetensorError
        from safetensors.numpy import load

        raw = read_bytes(path, MAP_FILE.what)
        try:
            header_size = int.from_bytes(raw[:8], "little")
            if len(raw) < 8 or header_size > len(raw) - 8:
                raise ValueError("shorter than its header says")
            metadata = parse_json(raw[8:8 + header_size].decode("utf-8"), path, MAP_FILE.what, MAP_FILE.remedy).get("__metadata__") or {}
            header = checked(parse_json(str(metadata.get("lincorr", "null")), path, MAP_FILE.what, MAP_FILE.remedy), MAP_FILE, Path(path))
            arrays = load(raw)
            if header["format"] != MAP_FORMAT:
                raise ValueError(f"format {header['format']!r}, not {MAP_FORMAT}")
            if problem := map_params_problem(header) or map_arrays_problem(arrays, header):
                raise ValueError(problem)
            fitted = cls(**{**header["params"], "alphas": tuple(header["params"]["alphas"])})
            return fitted.with_weights(arrays["W"], arrays["intercept"], header["alpha_"], W_standardized=arrays.get("W_standardized"),
                                       one_d_target=header["one_d_target"])
        except InputError:  # already says which file, what is wrong with it and what to pass
            raise
        except (SafetensorError, ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as error:
            raise InputError(f"{MAP_FILE.what} {path} is not a linear map lincorr saved ({error}); {MAP_FILE.remedy}") from None

    def select_alpha(self, source: np.ndarray, target: np.ndarray, penalty_unit: float = 1) -> float:
        """The alpha with the lowest k-fold mean squared error (each alpha applied as alpha * `penalty_unit`)."""
        n = source.shape[0]
        if n < 2 * self.cv:
            raise LincorrError(f"cross-validating alpha needs at least {2 * self.cv} training inputs, got {n}; use a fixed --alpha")
        folds = np.array_split(np.random.default_rng(self.seed).permutation(n), self.cv)
        errors = np.zeros(len(self.alphas))
        for held_out in folds:
            train = np.setdiff1d(np.arange(n), held_out)
            errors += ridge_held_out_errors(source[train], target[train], source[held_out], target[held_out],
                                            [alpha * penalty_unit for alpha in self.alphas])
        return float(self.alphas[int(np.argmin(errors))])


def map_params_problem(header: dict) -> str | None:
    """How a linear map file's parameters (their kinds checked by `MAP_FILE`) differ from what `LinearMap.fit` could have used."""
    params, alpha_ = header["params"], header["alpha_"]

    def penalty(value) -> bool:
        return not isinstance(value, bool) and 0 <= value < float("inf")

    checks = (
        ("params.estimator", params["estimator"] in ("ols", "ridge"), f"is {params['estimator'][:100]!r}, not ols or ridge"),
        ("params.alpha", params["alpha"] == "cv" or not isinstance(params["alpha"], str) and penalty(params["alpha"]),
         "is neither 'cv' nor a non-negative number"),
        ("params.alphas", bool(params["alphas"]) and all(map(penalty, params["alphas"])), "holds no alpha, or one that is no non-negative number"),
        ("params.cv", not isinstance(params["cv"], bool) and params["cv"] >= 2, "is not a whole number of 2 folds or more"),
        ("params.seed", not isinstance(params["seed"], bool) and params["seed"] >= 0, "is not a whole number >= 0"),
        ("alpha_", penalty(alpha_) and (params["estimator"] != "ols" or alpha_ == 0),
         "is not the penalty a fit used: a non-negative number, 0 for ols"),
    )
    return next((f"{field} {problem}" for field, passed, problem in checks if not passed), None)


def map_arrays_problem(arrays: dict, header: dict) -> str | None:
    """How a linear map file's arrays differ from each other and from its header: a W `[n_source, n_target]`, an intercept
    per target column, W in z units exactly when standardized, one target column for a 1-D target, finite numbers only."""
    standardize = header["params"]["standardize"]
    expected = {"W", "intercept"} | ({"W_standardized"} if standardize else set())
    if set(arrays) != expected:
        return f"it holds the arrays {[name[:40] for name in sorted(arrays)[:10]]}, not the {sorted(expected)} of a{' standardized' if standardize else ''} map"
    if kinds := sorted({str(values.dtype) for values in arrays.values() if values.dtype.kind != "f"}):
        return f"it holds {', '.join(kinds)} arrays, not the floating-point numbers LinearMap.save writes"
    W = arrays["W"]
    if W.ndim != 2 or not W.size:
        return f"W is {' x '.join(map(str, W.shape)) or 'a single number'}, not a matrix of source by target columns"
    sources, targets = (W.shape[0], "source columns"), (W.shape[1], "target columns")
    for name, axes in (("W", (sources, targets)), ("intercept", (targets,)), ("W_standardized", (sources, targets))):
        if name in arrays and (problem := array_problem(arrays[name], axes, weights=True)):
            return f"{name}: {problem}"
    if header["one_d_target"] and W.shape[1] != 1:
        return f"one_d_target is true but W has {W.shape[1]} target columns"
    return None


def column_scales(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each column's mean and standard deviation `[n_columns]`; a constant column keeps scale 1, so it stays constant."""
    scale = values.std(0)
    return values.mean(0), np.where(scale > 0, scale, 1.0)


def fit_ols(source: np.ndarray, target: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Least squares with a bias: (W `[n_source, n_target]`, b `[n_target]`).

    Solved from the centred normal equations by Cholesky (a few times faster than an SVD at
    these sizes, and exact in float64 for well-posed problems); a rank-deficient source
    falls back to the minimum-norm SVD solution.
    """
    source_mean, target_mean = source.mean(0), target.mean(0)
    centred = source - source_mean
    try:
        factor = scipy.linalg.cho_factor(centred.T @ centred, check_finite=False)
        W = scipy.linalg.cho_solve(factor, centred.T @ (target - target_mean), check_finite=False)
    except np.linalg.LinAlgError:
        W = np.linalg.lstsq(centred, target - target_mean, rcond=None)[0]
    return W, target_mean - source_mean @ W


def ridge_held_out_errors(source: np.ndarray, target: np.ndarray, held_source: np.ndarray, held_target: np.ndarray,
                          alphas) -> np.ndarray:
    """Mean squared error on the held-out rows of the ridge fit on (`source`, `target`), for each alpha `[n_alphas]`.

    With X = U diag(s) V^T (centred train source), A = X_held V, B = U^T Y and R the centred held-out
    target, the held-out residual is A diag(f) B - R with f = s / (s^2 + alpha), so its squared norm is
    f^T ((A^T A) * (B B^T)) f - 2 f . rowsum((A^T R) * B) + |R|^2: one [rank, rank] form per alpha
    instead of a W [n_source, n_target] and a prediction per alpha.
    """
    source_mean, target_mean = source.mean(0), target.mean(0)
    u, s, vt = np.linalg.svd(source - source_mean, full_matrices=False)
    projected_held = (held_source - source_mean) @ vt.T  # A [n_held, rank]
    projected = u.T @ (target - target_mean)  # B [rank, n_target]
    residual = held_target - target_mean  # R [n_held, n_target]
    gram = (projected_held.T @ projected_held) * (projected @ projected.T)
    cross = ((projected_held.T @ residual) * projected).sum(1)
    norm = float((residual**2).sum())
    errors = []
    for alpha in alphas:
        shrink = s / (s**2 + alpha)
        errors.append(shrink @ gram @ shrink - 2 * shrink @ cross + norm)
    return np.array(errors) / residual.size


def fit_ridge(source: np.ndarray, target: np.ndarray, alphas) -> list[tuple[np.ndarray, np.ndarray]]:
    """Ridge solutions for several alphas from one SVD of the centred source."""
    source_mean, target_mean = source.mean(0), target.mean(0)
    u, s, vt = np.linalg.svd(source - source_mean, full_matrices=False)
    projected = u.T @ (target - target_mean)  # [rank, n_target]
    solutions = []
    for alpha in alphas:
        W = vt.T @ ((s / (s**2 + alpha))[:, None] * projected)
        solutions.append((W, target_mean - source_mean @ W))
    return solutions
