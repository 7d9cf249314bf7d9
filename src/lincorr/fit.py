"""The core study (§3.2): fit W between two prompts' logits and score it on held-out inputs."""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Mapping, Sequence

import numpy as np
import scipy.special

from lincorr.collection import CollectSettings, LogitTable, collect
from lincorr.errors import DataError, LincorrError
from lincorr.linear import LinearMap
from lincorr.metrics import bootstrap_labelwise_ci, instancewise_pearson, labelwise_pearson, summarize, top_k
from lincorr.models import LM
from lincorr.outputs import settings_key, staged_directory, write_array, write_json, write_provenance
from lincorr.inputs import sample_vocab_inputs
from lincorr.prompts import Prompt
from lincorr.relations import BoundRelation, RelationSpec, bind_relation, match_reference

__all__ = ["CI_METHODS", "FitConfig", "PairResult", "MIN_TEST_INPUTS", "split_sizes", "split_indices", "fit_tables", "measure_pair", "fit_relation",
           "pairs_bootstrap_labelwise_ci", "TARGET_SCORES", "within_domain_logprobs"]

# Every r, interval and control is scored on held-out inputs; over fewer than this many a
# correlation is mostly noise (with 2 points |r| is always 1), so such a result is refused.
MIN_TEST_INPUTS = 10

# What W is fitted onto: the target table as collected, or as a distribution over its own domain
# (each input's logits minus their log-sum-exp over the domain words).
TARGET_SCORES = ("logits", "domain-logprobs")

# How the 95% interval of the mean label-wise r is bootstrapped, in the words every output uses.
CI_METHODS = {
    "rows": "test inputs resampled, W fixed",
    "refit": "pairs bootstrap: train and test inputs resampled, W refitted each time",
}


@dataclasses.dataclass(frozen=True)
class FitConfig:
    """How a pair is measured: split, estimator, bootstrap and control settings."""

    seed: int = 0
    estimator: str = "ols"
    alpha: float | str = 1.0
    test_fraction: float = 0.5
    n_boot: int = 1000
    n_control: int = 5  # shuffles averaged in the control: one shuffle is a noisy null when labels co-vary
    ci: str = "rows"  # "rows": resample test rows, W fixed; "refit": pairs bootstrap, W refitted on each resample
    standardize: bool = False  # z-score columns on the train rows; a ridge alpha is then per training input (see LinearMap)
    target_scores: str = "logits"  # or "domain-logprobs": fit onto the target's log-softmax over its own domain
    name: str = ""  # how rows fitted this way are labelled; the estimator when empty

    def __post_init__(self) -> None:
        if self.ci not in CI_METHODS:
            raise LincorrError(f"unknown interval method '{self.ci}'; use one of {', '.join(CI_METHODS)}")
        if self.target_scores not in TARGET_SCORES:
            raise LincorrError(f"unknown target scores '{self.target_scores}'; use one of {', '.join(TARGET_SCORES)}")

    @property
    def label(self) -> str:
        return self.name or self.estimator

    def linear_map(self) -> LinearMap:
        return LinearMap(estimator=self.estimator, alpha=self.alpha, seed=self.seed, standardize=self.standardize)

    def check_sizes(self, n_inputs: int, n_source: int) -> None:
        """Fail before any collection when ols would have fewer training rows than features, or the split too few test rows."""
        n_train = n_inputs - int(round(n_inputs * self.test_fraction))
        if self.estimator == "ols" and n_train <= n_source:
            raise LincorrError(
                f"ols needs more training inputs ({n_train} of {n_inputs}) than source words ({n_source}); "
                f"use -n {2 * (n_source + 1)} or more, or --estimator ridge"
            )
        split_sizes(n_inputs, self.test_fraction)


@dataclasses.dataclass(frozen=True)
class PairResult:
    """A fitted W between two logit tables and its held-out scores."""

    source: LogitTable
    target: LogitTable
    source_name: str
    target_name: str
    model_name: str
    config: FitConfig
    coef: np.ndarray  # W [n_source, n_target]
    intercept: np.ndarray  # b [n_target]
    alpha: float
    train_index: np.ndarray  # [n_train]
    test_index: np.ndarray  # [n_test]
    labelwise_r: np.ndarray  # [n_target]
    instancewise_r: np.ndarray  # [n_test]
    labelwise_r_ci95: tuple[float, float]
    control_labelwise_r: np.ndarray  # [n_target], mean over W's fitted after shuffling the train pairing
    seconds: float

    def summary(self) -> dict:
        """The JSON contract of `lincorr fit --json`."""
        labelwise = summarize(self.labelwise_r)
        return {
            "model": self.model_name,
            "model_fingerprint": self.source.model,
            "source": self.source_name,
            "target": self.target_name,
            "source_template": self.source.template,
            "target_template": self.target.template,
            "kind": self.source.kind,
            "n_inputs": len(self.source.inputs),
            "n_train": int(self.train_index.size),
            "n_test": int(self.test_index.size),
            "n_source_domain": len(self.source.domain),
            "n_target_domain": len(self.target.domain),
            "estimator": self.config.estimator,
            "alpha": self.alpha,
            "seed": self.config.seed,
            "labelwise_r_mean": labelwise["mean"],
            "labelwise_r_std": labelwise["std"],
            # Target words whose held-out logits (or their predictions) are constant have no r; the mean and std leave them out.
            "n_constant_targets": self.n_constant_targets,
            "labelwise_r_ci95": list(self.labelwise_r_ci95),
            "labelwise_r_ci95_method": CI_METHODS[self.config.ci],
            "instancewise_r_mean": summarize(self.instancewise_r)["mean"],
            "control_labelwise_r_mean": summarize(self.control_labelwise_r)["mean"],
            "seconds": self.seconds,
            **self.undefined_reasons(),
        }

    def undefined_reasons(self) -> dict:
        """Why a summary number is NaN, where the reason is known here; JSON shows such a number as null beside its reason."""
        if len(self.target.domain) < 2:
            return {"undefined": {"instancewise_r_mean": "instance-wise r correlates the target words of each input and needs at least 2; "
                                                         f"the target domain has {len(self.target.domain)}"}}
        return {}

    @property
    def labelwise_r_mean(self) -> float:
        """Mean label-wise r over the target words where it is defined (`n_constant_targets` are left out)."""
        return summarize(self.labelwise_r)["mean"]

    @property
    def n_constant_targets(self) -> int:
        """How many target words have an undefined label-wise r (constant on the held-out inputs), left out of its mean."""
        return int(np.isnan(self.labelwise_r).sum())

    def labelwise_by_word(self) -> dict[str, float]:
        """Label-wise r of every target word."""
        return {w: float(r) for w, r in zip(self.target.domain.words, self.labelwise_r)}

    def top_influenced(self, source_word: str, k: int = 5) -> list[tuple[str, float]]:
        """Target words with the largest weight from `source_word` (row of W)."""
        row = self.coef[self.source.domain.index(source_word)]
        return [(self.target.domain.words[j], float(row[j])) for j in top_k(row, k)]

    def top_influencing(self, target_word: str, k: int = 5) -> list[tuple[str, float]]:
        """Source words with the largest weight into `target_word` (column of W)."""
        column = self.coef[:, self.target.domain.index(target_word)]
        return [(self.source.domain.words[i], float(column[i])) for i in top_k(column, k)]

    def save(self, directory, *, heatmap: bool = False, reference_pairs=None, extra: Mapping[str, object] | None = None) -> None:
        """W, b, logits, tokens, inputs and result.json; written whole or not at all.

        `reference_pairs` ((subject, objects) pairs) orders the heatmap rows by their right target; result.json
        keeps the pairs left after tokenization (source word -> right target words) for readers such as the report.
        `extra` adds keys to result.json, such as the Hit@k and reference file of `fit --references`.
        """
        from lincorr.plots import weight_heatmap

        reference = match_reference(reference_pairs, self.source.domain, self.target.domain).columns if reference_pairs else {}
        with staged_directory(directory) as out:
            write_array(out / "W.npy", self.coef)
            write_array(out / "b.npy", self.intercept)
            write_array(out / "source_logits.npy", self.source.values)
            write_array(out / "target_logits.npy", self.target.values)
            write_json(out / "source_tokens.json", list(self.source.domain.tokens))
            write_json(out / "target_tokens.json", list(self.target.domain.tokens))
            write_json(out / "inputs.json", list(self.source.inputs))
            write_json(
                out / "result.json",
                {
                    **self.summary(),
                    "config": dataclasses.asdict(self.config),
                    "source_domain": self.source.domain.to_json(),
                    "target_domain": self.target.domain.to_json(),
                    "labelwise_r": self.labelwise_by_word(),
                    "reference_pairs": {self.source.domain.words[row]: [self.target.domain.words[c] for c in columns]
                                        for row, columns in reference.items()},
                    "train_index": self.train_index.tolist(),
                    "test_index": self.test_index.tolist(),
                    **(extra or {}),
                },
            )
            write_provenance(out, model_fingerprint=self.source.model, settings={**settings_key(self.config), "kind": self.source.kind})
            if heatmap:
                weight_heatmap(
                    self.coef,
                    self.source.domain.words,
                    self.target.domain.words,
                    out / "W.png",
                    f"{self.model_name}: W for {self.source_name} -> {self.target_name}",
                    reference=reference or None,
                )


def within_domain_logprobs(table: LogitTable) -> LogitTable:
    """The table as log-probabilities over its own domain: each row minus its log-sum-exp `[n_inputs, n_domain]`.

    This removes each input's overall shift (how strongly the prompt expects any word of the
    domain at all), which a raw-logit W must otherwise spread over every column.
    """
    values = table.values.astype(np.float64)
    return dataclasses.replace(table, values=(values - scipy.special.logsumexp(values, axis=1, keepdims=True)).astype(np.float32),
                               kind=f"{table.kind}, log-softmax over the domain")


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


def fit_tables(source: LogitTable, target: LogitTable, config: FitConfig = FitConfig(), *, source_name: str = "source",
               target_name: str = "target", model_name: str = "") -> PairResult:
    """Fit W on the train half of two tables over the same inputs and score it on the test half."""
    if source.inputs != target.inputs:
        raise LincorrError("source and target tables must be collected over the same inputs in the same order")
    started = time.perf_counter()
    if config.target_scores == "domain-logprobs":
        target = within_domain_logprobs(target)
    train, test = split_indices(len(source.inputs), config.test_fraction, config.seed)
    fitted = config.linear_map().fit(source.values[train], target.values[train])
    predicted = fitted.predict(source.values[test]).astype(np.float32)  # tables are float32; so are their predictions
    actual = target.values[test]

    # Control: the same fit after shuffling which input each training target row belongs to.
    rng = np.random.default_rng(config.seed + 1)
    control = np.mean(
        [
            labelwise_pearson(
                LinearMap(estimator=config.estimator, alpha=fitted.alpha_, standardize=config.standardize)
                .fit(source.values[train], target.values[rng.permutation(train)])
                .predict(source.values[test]).astype(np.float32),
                actual,
            )
            for _ in range(config.n_control)
        ],
        axis=0,
    )

    return PairResult(
        source=source,
        target=target,
        source_name=source_name,
        target_name=target_name,
        model_name=model_name,
        config=config,
        coef=fitted.W_,
        intercept=fitted.intercept_,
        alpha=float(fitted.alpha_),
        train_index=train,
        test_index=test,
        labelwise_r=labelwise_pearson(predicted, actual),
        instancewise_r=instancewise_pearson(predicted, actual),
        labelwise_r_ci95=(bootstrap_labelwise_ci(predicted, actual, n_boot=config.n_boot, seed=config.seed) if config.ci == "rows"
                          else pairs_bootstrap_labelwise_ci(source.values, target.values, train, test, config, fitted.alpha_)),
        control_labelwise_r=control,
        seconds=time.perf_counter() - started,
    )


def pairs_bootstrap_labelwise_ci(source: np.ndarray, target: np.ndarray, train: np.ndarray, test: np.ndarray,
                                 config: FitConfig, alpha: float, level: float = 0.95) -> tuple[float, float]:
    """Percentile interval of the mean label-wise r when the inputs themselves are redrawn.

    Each of `config.n_boot` resamples draws the train rows and the test rows with replacement,
    refits W on the first (ridge keeps the penalty `alpha` chosen on the real train half, since
    cross-validating it again per resample would multiply the cost by the folds) and scores it on
    the second, so the interval also covers how W varies with the inputs it was fitted on.
    `source` `[n, n_source]`, `target` `[n, n_target]`; `train`, `test` are row indices.
    """
    rng = np.random.default_rng(config.seed + 2)
    means = []
    for _ in range(config.n_boot):
        drawn_train, drawn_test = rng.choice(train, train.size), rng.choice(test, test.size)
        refitted = LinearMap(estimator=config.estimator, alpha=alpha, standardize=config.standardize).fit(source[drawn_train], target[drawn_train])
        r = labelwise_pearson(refitted.predict(source[drawn_test]).astype(np.float32), target[drawn_test])
        means.append(np.nanmean(r) if np.isfinite(r).any() else np.nan)
    tail = (1 - level) / 2 * 100
    low, high = np.nanpercentile(means, [tail, 100 - tail])
    return float(low), float(high)


def measure_pair(
    lm: LM,
    source: Prompt,
    target: Prompt,
    inputs: Sequence[str],
    config: FitConfig = FitConfig(),
    settings: CollectSettings = CollectSettings(),
) -> PairResult:
    """Collect both prompts over `inputs`, fit W on half, score on the other half."""
    config.check_sizes(len(inputs), len(source.domain))
    started = time.perf_counter()
    tables = collect(lm, {"source": source, "target": target}, inputs, settings)
    result = fit_tables(tables["source"], tables["target"], config, source_name=source.name, target_name=target.name, model_name=lm.name)
    return dataclasses.replace(result, seconds=time.perf_counter() - started)


def fit_relation(lm: LM, registry, relation: RelationSpec, *, n_inputs: int = 1000,
                 fit: FitConfig = FitConfig(estimator="ridge", alpha="cv", n_boot=100), keep_subwords: bool = False,
                 settings: CollectSettings = CollectSettings()) -> BoundRelation:
    """Bind a relation to `lm`'s tokenizer and fit its W on `n_inputs` vocabulary inputs (cached tables)."""
    bound = bind_relation(registry, relation, lm.tokenizer, keep_subwords=keep_subwords)
    fit.check_sizes(n_inputs, len(bound.source.domain))
    inputs = sample_vocab_inputs(lm.tokenizer, n_inputs, seed=fit.seed)
    return dataclasses.replace(bound, fit=measure_pair(lm, bound.source, bound.target, inputs, fit, settings))
