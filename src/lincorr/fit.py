"""The core study (§3.2): fit W between two prompts' logits and score it on held-out inputs."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import ClassVar, cast

import numpy as np
import scipy.special

from lincorr.collection import CollectSettings, LogitTable, collect
from lincorr.errors import InputError, LincorrError
from lincorr.held_out import control_labelwise_r, pairs_bootstrap_intervals, split_indices, split_sizes
from lincorr.linear import LinearMap
from lincorr.metrics import bootstrap_labelwise_ci, instancewise_pearson, labelwise_pearson, summarize, top_k
from lincorr.models import LM
from lincorr.domains import Domain
from lincorr.outputs import settings_key, staged_directory, write_array, write_json
from lincorr.reading import check_array, read_array
from lincorr.results import decode, record, require_pandas
from lincorr.schema import NUMBER, REAL, TEXT, Entries, FileKind, Items, read_document
from lincorr.inputs import sample_vocab_inputs
from lincorr.prompts import Prompt
from lincorr.relations import BoundRelation, FittedRelation, ReferenceMatch, RelationSpec, bind_relation, match_reference, relate

__all__ = ["CI_METHODS", "FitConfig", "PairResult", "tops_text", "fit_tables", "fit_targets", "fit_relation_tables", "measure_pair",
           "measure_relation", "fit_relation", "TARGET_SCORES", "within_domain_logprobs"]

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
    """How a pair is measured: split, estimator, bootstrap and control settings.

    The defaults are the CLI's: ridge with a cross-validated penalty, whose W can be read at 1,000 inputs; the paper's fit is
    `estimator="ols"` (`--preset paper`).
    """

    seed: int = 0
    estimator: str = "ridge"
    alpha: float | str = "cv"
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


# result.json of a saved pair: the fields `PairResult.load` reads (the domains and settings are checked as they are decoded).
PAIR_FILE = FileKind("saved result", {
    **{f"{side}_{key}": shape for side in ("source", "target") for key, shape in (("template", TEXT), ("domain", dict))},
    "source": TEXT, "target": TEXT, "model": TEXT, "model_fingerprint": TEXT, "kind": TEXT, "config": dict, "alpha": REAL,
    "seconds": REAL, "train_index": Items(int), "test_index": Items(int), "labelwise_r": Entries(NUMBER),
    "instancewise_r": Items(NUMBER), "labelwise_r_ci95": [NUMBER, NUMBER], "control_labelwise_r": Items(NUMBER),
    "reference_pairs": Entries(Items(TEXT)),
}, "rerun the command that wrote it")


@dataclasses.dataclass(frozen=True)
class PairResult:
    """A fitted W between two logit tables and its held-out scores."""

    study: ClassVar[str] = "fit"

    source: LogitTable
    target: LogitTable
    source_name: str
    target_name: str
    model_name: str
    config: FitConfig
    W: np.ndarray  # W [n_source, n_target]
    intercept: np.ndarray  # b [n_target]
    alpha: float
    train_index: np.ndarray  # [n_train]
    test_index: np.ndarray  # [n_test]
    labelwise_r: np.ndarray  # [n_target]
    instancewise_r: np.ndarray  # [n_test]
    labelwise_r_ci95: tuple[float, float]
    control_labelwise_r: np.ndarray  # [n_target], mean over W's fitted after shuffling the train pairing
    seconds: float
    estimator: LinearMap  # the fitted map itself: `W` is its W_ (and, standardized, W_standardized_ its W in z units)
    reference: ReferenceMatch | None = None  # the relation's reference pairs on these two domains, matched once when it was bound

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
        row = self.W[self.source.domain.index(source_word)]
        return [(self.target.domain.words[j], float(row[j])) for j in top_k(row, k)]

    def top_influencing(self, target_word: str, k: int = 5) -> list[tuple[str, float]]:
        """Source words with the largest weight into `target_word` (column of W)."""
        column = self.W[:, self.target.domain.index(target_word)]
        return [(self.source.domain.words[i], float(column[i])) for i in top_k(column, k)]

    def to_pandas(self):
        """W as a pandas DataFrame, rows labelled by source words and columns by target words (pandas is needed, not installed with
        lincorr); the summary is `summary()`, and `labelwise_by_word()` the r of each target word."""
        pandas = require_pandas()
        return pandas.DataFrame(self.W, index=pandas.Index(self.source.domain.words, name=self.source_name),
                                columns=pandas.Index(self.target.domain.words, name=self.target_name))

    def text(self) -> str:
        """The terminal's view of `lincorr fit`: the pair, the inputs, the estimator and every r."""
        s = self.summary()
        lo, hi = s["labelwise_r_ci95"]
        return "\n".join([
            f"model            {s['model']}",
            f"source -> target {s['source']} ({s['n_source_domain']} words) -> {s['target']} ({s['n_target_domain']} words)",
            f"dropped words    {len(self.source.domain.dropped)} source, {len(self.target.domain.dropped)} target"
            " (first token a fragment or shared; listed in result.json)",
            f"inputs           {s['n_inputs']} ({s['n_train']} train / {s['n_test']} test), {s['kind']}",
            f"estimator        {s['estimator']}" + (f" (alpha {s['alpha']:.4g})" if s["estimator"] == "ridge" else ""),
            f"label-wise r     {s['labelwise_r_mean']:.3f} ± {s['labelwise_r_std']:.3f}   95% CI [{lo:.3f}, {hi:.3f}] "
            f"({s['labelwise_r_ci95_method']})",
            *([f"                 left out: {s['n_constant_targets']} target words constant on the test inputs (r undefined)"]
              if s["n_constant_targets"] else []),
            f"instance-wise r  {s['instancewise_r_mean']:.3f}",
            f"control r        {s['control_labelwise_r_mean']:.3f}   (W fitted on shuffled pairs)",
            f"time             {s['seconds']:.1f} s",
        ])

    @classmethod
    def load(cls, directory) -> PairResult:
        """The pair `save` wrote into `directory`: W, b and the logits from their `.npy` files (never unpickled), the rest from result.json.

        The reference is matched again from the pairs result.json kept (the dropped ones are not saved). The fitted map
        (`estimator`) is rebuilt from W.npy, b.npy and the saved config, so it predicts as the one that was saved.
        """
        directory = Path(directory)
        result = read_document(directory / "result.json", PAIR_FILE)
        inputs = tuple(read_document(directory / "inputs.json", dataclasses.replace(PAIR_FILE, shape=Items(TEXT))))
        try:
            return cls.from_saved(directory, result, inputs)
        except InputError:
            raise  # a reader's or a size check's error, which names the file and what is wrong in it
        except (TypeError, ValueError, KeyError, OverflowError) as error:
            raise InputError(f"{PAIR_FILE.what} {directory} is not what lincorr writes ({error}); {PAIR_FILE.remedy}") from None

    @classmethod
    def from_saved(cls, directory: Path, result: dict, inputs: tuple[str, ...]) -> PairResult:
        domains = {side: decode(Domain, result[f"{side}_domain"]) for side in ("source", "target")}
        words = {side: (len(domain), f"{side} words") for side, domain in domains.items()}

        def array(name: str, *axes: tuple[int, str], weights: bool = False) -> np.ndarray:
            path = directory / name
            return check_array(read_array(path, PAIR_FILE.what, PAIR_FILE.remedy), path, PAIR_FILE.what, PAIR_FILE.remedy, axes,
                               weights=weights)

        def table(side: str) -> LogitTable:
            return LogitTable(values=array(f"{side}_logits.npy", (len(inputs), "inputs in inputs.json"), words[side]), inputs=inputs,
                              template=result[f"{side}_template"], domain=domains[side], kind=result["kind"], model=result["model_fingerprint"])

        def numbers(values) -> np.ndarray:
            return np.array([np.nan if value is None else value for value in values], dtype=np.float64)

        source, target = table("source"), table("target")
        check_saved_scores(directory / "result.json", result, len(inputs), len(domains["target"]))
        low, high = (np.nan if value is None else value for value in result["labelwise_r_ci95"])
        config = decode(FitConfig, result["config"])
        W, intercept = array("W.npy", words["source"], words["target"], weights=True), array("b.npy", words["target"], weights=True)
        standardized = array("W_standardized.npy", words["source"], words["target"], weights=True) if config.standardize else None
        estimator = config.linear_map().with_weights(W, intercept, float(result["alpha"]), W_standardized=standardized)
        kept_pairs = tuple((subject, tuple(objects)) for subject, objects in result["reference_pairs"].items())
        return cls(
            source=source, target=target, source_name=result["source"], target_name=result["target"],
            model_name=result["model"], config=config, W=W, intercept=intercept, alpha=float(result["alpha"]), estimator=estimator,
            train_index=np.array(result["train_index"], dtype=int),
            test_index=np.array(result["test_index"], dtype=int), labelwise_r=numbers(result["labelwise_r"].values()),
            instancewise_r=numbers(result["instancewise_r"]), labelwise_r_ci95=(low, high),
            control_labelwise_r=numbers(result["control_labelwise_r"]), seconds=float(result["seconds"]),
            reference=match_reference(kept_pairs, source.domain, target.domain) if kept_pairs else None,
        )

    def save(self, directory, *, heatmap: bool = False, reference_pairs=None, extra: Mapping[str, object] | None = None) -> None:
        """W, b, logits, tokens, inputs and result.json; written whole or not at all.

        The matched reference (or `reference_pairs`, (subject, objects) pairs) orders the heatmap rows by their right target; result.json
        keeps the pairs left after tokenization (source word -> right target words) for readers such as the report.
        `extra` adds keys to result.json, such as the Hit@k and reference file of `fit --references`.
        """
        from lincorr.plots import weight_heatmap

        match = self.reference if reference_pairs is None else match_reference(reference_pairs, self.source.domain, self.target.domain)
        reference = match.columns if match else {}
        with staged_directory(directory) as out:
            write_array(out / "W.npy", self.W)
            write_array(out / "b.npy", self.intercept)
            if self.config.standardize:  # what a standardized map's W is read by (precision ranks it)
                write_array(out / "W_standardized.npy", self.estimator.W_standardized_)
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
                    "instancewise_r": self.instancewise_r.tolist(),
                    "control_labelwise_r": self.control_labelwise_r.tolist(),
                    **(extra or {}),
                },
            )
            # The arrays and result.json are the state `load` reads: no second copy.
            record(out, self, model_fingerprint=self.source.model, settings={**settings_key(self.config), "kind": self.source.kind},
                   state=False)
            if heatmap:
                weight_heatmap(
                    self.W,
                    self.source.domain.words,
                    self.target.domain.words,
                    out / "W.png",
                    f"{self.model_name}: W for {self.source_name} -> {self.target_name}",
                    reference=reference or None,
                )


def check_saved_scores(path: Path, result: dict, n_inputs: int, n_target: int) -> None:
    """result.json's scores, once each has an entry per target word or test input and its split indexes only the run's inputs:
    `PairResult` pairs them with the domain's words by position, so a list of another length would name words wrongly."""
    lengths = {"labelwise_r": n_target, "control_labelwise_r": n_target, "instancewise_r": len(result["test_index"])}
    for key, expected in lengths.items():
        if len(result[key]) != expected:
            raise InputError(f"{PAIR_FILE.what} {path} is not what lincorr writes: {key} has {len(result[key])} entries where the run "
                             f"lists {expected} {'test inputs' if key == 'instancewise_r' else 'target words'}; {PAIR_FILE.remedy}")
    if any(not 0 <= index < n_inputs for index in (*result["train_index"], *result["test_index"])):
        raise InputError(f"{PAIR_FILE.what} {path} is not what lincorr writes: its train_index or test_index names an input "
                         f"outside the {n_inputs} of inputs.json; {PAIR_FILE.remedy}")


def tops_text(tops: Mapping[str, Sequence[tuple[str, float]]], title: str) -> str:
    """Rows of `PairResult.top_influenced` / `top_influencing` as the terminal shows them (empty without rows)."""
    if not tops:
        return ""
    width = max(len(w) for w in tops)
    return f"\ntop {title}:\n" + "\n".join(f"  {word:<{width}}  " + ", ".join(f"{t} ({v:+.2f})" for t, v in pairs)
                                          for word, pairs in tops.items())


def within_domain_logprobs(table: LogitTable) -> LogitTable:
    """The table as log-probabilities over its own domain: each row minus its log-sum-exp `[n_inputs, n_domain]`.

    This removes each input's overall shift (how strongly the prompt expects any word of the
    domain at all), which a raw-logit W must otherwise spread over every column.
    """
    values = table.values.astype(np.float64)
    return dataclasses.replace(table, values=(values - scipy.special.logsumexp(values, axis=1, keepdims=True)).astype(np.float32),
                               kind=f"{table.kind}, log-softmax over the domain")


def fit_tables(source: LogitTable, target: LogitTable, config: FitConfig = FitConfig(), *, source_name: str = "source",
               target_name: str = "target", model_name: str = "", reference: ReferenceMatch | None = None) -> PairResult:
    """Fit W on the train half of two tables over the same inputs and score it on the test half."""
    return fit_targets(source, {target_name: target}, config, source_name=source_name, model_name=model_name,
                       references={target_name: reference})[target_name]


def fit_targets(source: LogitTable, targets: Mapping[str, LogitTable], config: FitConfig = FitConfig(), *,
                source_name: str = "source", model_name: str = "", references: Mapping[str, ReferenceMatch | None] | None = None,
                evaluate_on: tuple[LogitTable, Mapping[str, LogitTable]] | None = None) -> dict[str, PairResult]:
    """One W from `source` onto every table of `targets` at once, and each target's PairResult from its columns.

    ols and ridge solve each target column on its own, so one fit against the column-concatenation
    of the targets gives every pair's W as a slice (ridge with alpha="cv" cross-validates one
    penalty over all of them). Scores, control and interval are each target's own. `evaluate_on`
    (a source table and target tables of another model, same inputs and domains) is what W is
    scored on instead of the tables it was fitted on.
    """
    started = time.perf_counter()
    if any(source.inputs != target.inputs for target in targets.values()):
        raise LincorrError("source and target tables must be collected over the same inputs in the same order")
    fitted_on = {name: scored_target(table, config) for name, table in targets.items()}
    evaluated_source, evaluated = (source, fitted_on) if evaluate_on is None else \
        (evaluate_on[0], {name: scored_target(evaluate_on[1][name], config) for name in targets})
    offsets = np.cumsum([0] + [table.values.shape[1] for table in fitted_on.values()])
    columns = {name: slice(offsets[k], offsets[k + 1]) for k, name in enumerate(fitted_on)}
    fit_target, actual_target = (np.hstack([table.values for table in tables.values()]) for tables in (fitted_on, evaluated))
    train, test = split_indices(len(source.inputs), config.test_fraction, config.seed)
    fitted = config.linear_map().fit(source.values[train], fit_target[train])
    predicted = fitted.predict(evaluated_source.values[test]).astype(np.float32)  # tables are float32; so are their predictions
    actual = actual_target[test]
    control = control_labelwise_r(source.values, fit_target, evaluated_source.values[test], actual, train, config, fitted.alpha_)
    intervals = (
        [bootstrap_labelwise_ci(predicted[:, part], actual[:, part], n_boot=config.n_boot, seed=config.seed) for part in columns.values()]
        if config.ci == "rows" else
        pairs_bootstrap_intervals((source.values, fit_target), (evaluated_source.values, actual_target), train, test, config,
                                  fitted.alpha_, list(columns.values()))
    )
    seconds = time.perf_counter() - started
    results = {}
    for (name, part), interval in zip(columns.items(), intervals):
        estimator = fitted if len(columns) == 1 else fitted.target_columns(part)
        results[name] = PairResult(
            source=evaluated_source, target=evaluated[name], source_name=source_name, target_name=name, model_name=model_name,
            config=config, W=estimator.W_, intercept=estimator.intercept_, alpha=float(fitted.alpha_), train_index=train,
            test_index=test, labelwise_r=labelwise_pearson(predicted[:, part], actual[:, part]),
            instancewise_r=instancewise_pearson(predicted[:, part], actual[:, part]), labelwise_r_ci95=interval,
            control_labelwise_r=control[part], seconds=seconds, estimator=estimator, reference=(references or {}).get(name),
        )
    return results


def scored_target(table: LogitTable, config: FitConfig) -> LogitTable:
    """The target table as W is fitted onto it: as collected, or as log-probabilities over its domain (`config.target_scores`)."""
    return within_domain_logprobs(table) if config.target_scores == "domain-logprobs" else table


def measure_pair(lm: LM, source: Prompt, target: Prompt, inputs: Sequence[str], config: FitConfig = FitConfig(),
                 **collection) -> PairResult:
    """Collect both prompts over `inputs`, fit W on half, score on the other half (`measure_relation` of the two prompts)."""
    return measure_relation(lm, relate(source, target), inputs, config, **collection)


def measure_relation(
    lm: LM,
    relation: BoundRelation,
    inputs: Sequence[str],
    config: FitConfig = FitConfig(),
    settings: CollectSettings = CollectSettings(),
) -> PairResult:
    """The one way a relation is fitted on a model: collect both prompts over `inputs`, fit W on half, score on the other half.

    The result keeps its fitted `LinearMap` and the relation's matched reference.
    """
    config.check_sizes(len(inputs), len(relation.source.domain))
    started = time.perf_counter()
    tables = collect(lm, {"source": relation.source, "target": relation.target}, inputs, settings)
    result = fit_relation_tables(relation, {relation.source.name: tables["source"], relation.target.name: tables["target"]}, config,
                                 model_name=lm.name)
    return dataclasses.replace(result, seconds=time.perf_counter() - started)


def fit_relation_tables(relation: BoundRelation, tables: Mapping[str, LogitTable], config: FitConfig = FitConfig(), *,
                        model_name: str = "") -> PairResult:
    """`fit_tables` on a relation's two tables (`tables` by prompt name), named after its prompts and keeping its matched reference."""
    source, target = relation.source.name, relation.target.name
    return fit_tables(tables[source], tables[target], config, source_name=source, target_name=target, model_name=model_name,
                      reference=relation.match)


def fit_relation(lm: LM, registry, relation: RelationSpec, *, n_inputs: int = 1000,
                 fit: FitConfig = FitConfig(n_boot=100), keep_subwords: bool = False,
                 settings: CollectSettings = CollectSettings()) -> FittedRelation:
    """Bind a relation to `lm`'s tokenizer and fit its W on `n_inputs` vocabulary inputs (cached tables)."""
    bound = bind_relation(registry, relation, lm.tokenizer, keep_subwords=keep_subwords)
    fit.check_sizes(n_inputs, len(bound.source.domain))
    inputs = sample_vocab_inputs(lm.tokenizer, n_inputs, seed=fit.seed)
    return cast(FittedRelation, dataclasses.replace(bound, fit=measure_relation(lm, bound, inputs, fit, settings)))  # its fit set
