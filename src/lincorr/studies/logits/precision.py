"""W precision (§3.5, Table 2): are W's largest weights the real-world pairs? Hit@Top-N in both directions."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from typing import ClassVar

import numpy as np

from lincorr.collection import CollectSettings, LogitTable, collect
from lincorr.domains import Domain
from lincorr.errors import DataError, LincorrError
from lincorr.fit import FitConfig, PairResult, fit_relation_tables
from lincorr.metrics import chance_hit_at_k, hit_at_k, invert_reference
from lincorr.models import LM
from lincorr.outputs import settings_key, staged_directory, write_csv, write_json
from lincorr.paper import paper_table
from lincorr.prompts import Prompt, registry_prompts
from lincorr.results import Stored, record
from lincorr.relations import (
    USER_FILE,
    BoundRelation,
    DroppedPair,
    ReferenceFile,
    ReferenceMatch,
    ReferencePairs,
    RelationSpec,
    match_reference,
    registry_reference,
    relate,
)

__all__ = ["KS", "MIN_PAIRS", "PAPER_N_INPUTS", "PRECISION_FITS", "STANDARDIZED_PENALTY", "precision_fits", "PrecisionResult", "PrecisionTable", "checked_reference", "judged_relation", "precision_of", "rates_text",
           "require_usable", "ranked_weights",
           "precision_from_tables", "measure_precision"]


KS = (1, 3, 5)

# The fits precision reports, by name. "ridge-std" is lincorr's: ridge on z-scored columns with a
# penalty of STANDARDIZED_PENALTY per training input, fitted onto the target's log-probabilities
# over its own domain and read in standard units (see docs/results.md for what each part adds).
# "ols" is the paper's estimator; "ridge" is ridge on the raw logits with a cross-validated penalty.
PRECISION_FITS = ("ridge-std", "ols", "ridge")
STANDARDIZED_PENALTY = 1.0
# The paper's setting (§3.2): ols on half of 10,000 vocabulary inputs, raw logits.
PAPER_N_INPUTS = 10_000
# Below this many judged subjects one pair more or less moves a Hit@k rate by more than 0.1.
MIN_PAIRS = 10


@dataclasses.dataclass(frozen=True)
class PrecisionResult:
    """Hit@Top-N of one fitted W against reference pairs, both directions, with the chance level of each."""

    label: str
    source: str
    target: str
    model_name: str
    estimator: str
    alpha: float
    n_inputs: int
    labelwise_r_mean: float
    reference: str
    hit_influenced: dict[int, float]  # share of reference subjects with a right object among their top-k targets
    hit_influencing: dict[int, float]  # share of reference objects with a right subject among their top-k sources
    chance_influenced: dict[int, float]
    chance_influencing: dict[int, float]
    n_pairs_influenced: int  # reference subjects left in the source domain with a right object in the target domain
    n_pairs_influencing: int  # target words that are the right object of at least one of those subjects
    n_reference_lines: int  # (subject, object) pairs read from the file or the registry
    dropped_pairs: tuple[DroppedPair, ...]  # every pair read that judges nothing, with why
    reference_file: ReferenceFile | None = None  # where the pairs came from, when they are a user's file

    def summary(self) -> dict:
        """The JSON contract of `lincorr precision --json` (k as string keys)."""
        return {
            "label": self.label,
            "model": self.model_name,
            "source": self.source,
            "target": self.target,
            "reference": self.reference,
            "estimator": self.estimator,
            "alpha": self.alpha,
            "n_inputs": self.n_inputs,
            "labelwise_r_mean": self.labelwise_r_mean,
            "hit_influenced": text_keys(self.hit_influenced),
            "hit_influencing": text_keys(self.hit_influencing),
            "chance_influenced": text_keys(self.chance_influenced),
            "chance_influencing": text_keys(self.chance_influencing),
            "n_pairs_influenced": self.n_pairs_influenced,
            "n_pairs_influencing": self.n_pairs_influencing,
            "reference_file": self.reference_file.to_json() if self.reference_file else None,
            "n_reference_lines": self.n_reference_lines,
            "dropped_pairs": [dataclasses.asdict(pair) for pair in self.dropped_pairs],
            "warnings": self.warnings(),
        }

    def warnings(self) -> list[str]:
        """What a reader should know before trusting the rates: too few judged pairs."""
        if self.n_pairs_influenced >= MIN_PAIRS:
            return []
        return [f"{self.label}: only {self.n_pairs_influenced} reference subject(s) could be judged (fewer than {MIN_PAIRS}), "
                f"so one pair more or less moves Hit@k influenced by {1 / self.n_pairs_influenced:.2f}; add pairs before reading the rates"]

    def reference_report(self) -> list[str]:
        """Lines on the reference: where it comes from, pairs read and used, every dropped pair with why, and warnings."""
        source = (f"file {self.reference_file.path} (sha256 {self.reference_file.sha256})" if self.reference_file
                  else self.reference or "(unnamed)")
        dropped = f"; {len(self.dropped_pairs)} dropped:" if self.dropped_pairs else ""
        lines = [f"{self.label}: reference {source}: {self.n_reference_lines} pairs read, {self.n_pairs_influenced} subjects / "
                 f"{self.n_pairs_influencing} objects judged{dropped}"]
        lines += [f"  - {pair.subject} -> {pair.object}: {pair.reason}" for pair in self.dropped_pairs]
        return lines + [f"warning: {warning}" for warning in self.warnings()]

    def hits_text(self) -> str:
        """Hit@k in both directions with chance, then what the reference gave (`reference_report`): the lines `fit --references` adds."""
        return "\n".join([f"Hit@1/3/5        influenced {rates_text(self.hit_influenced)}, influencing "
                          f"{rates_text(self.hit_influencing)}   (chance@1 {self.chance_influenced[1]:.2f} / "
                          f"{self.chance_influencing[1]:.2f})", *self.reference_report()])


def checked_reference(reference_pairs: ReferencePairs, source: Domain, target: Domain, *, label: str, reference: str = "",
                      reference_file: ReferenceFile | None = None) -> ReferenceMatch:
    """The pairs on the two tokenized domains, known before any logit is collected; a LincorrError saying why when none is usable."""
    return require_usable(match_reference(reference_pairs, source, target), label=label, reference=reference, reference_file=reference_file)


def require_usable(match: ReferenceMatch, *, label: str, reference: str = "", reference_file: ReferenceFile | None = None) -> ReferenceMatch:
    """`match` when at least one of its pairs judges W; else a DataError saying how many were read, which were dropped and why."""
    if not match.columns:
        if reference_file is not None:
            where = f"reference file {reference_file.path}"
            fix = ("write pairs of words from the two domains (any case; `lincorr domains` lists a registry domain's words "
                   "and those the tokenizer drops)")
        else:
            where = f"reference {reference}" if reference else "the reference"
            fix = "pass --references FILE with pairs of words from the two domains"
        raise DataError(match.unusable(label, where, fix))
    return match


def precision_of(pair: PairResult, reference_pairs: ReferencePairs | None = None, *, ks: Sequence[int] = KS, label: str = "",
                 reference: str = "", reference_file: ReferenceFile | None = None) -> PrecisionResult:
    """Hit@Top-k of a fitted pair's W against its matched reference (or against `reference_pairs`, (subject, objects) pairs).

    `reference_file` is recorded when the pairs came from one.
    """
    label = label or f"{pair.source_name}->{pair.target_name}"
    if reference_pairs is None and pair.reference is None:
        raise LincorrError(f"{label} has no reference pairs to judge W by; bind the relation with its pairs or pass them")
    match = pair.reference if reference_pairs is None else match_reference(reference_pairs, pair.source.domain, pair.target.domain)
    assert match is not None, "checked above: the pair has its reference"
    right = require_usable(match, label=label, reference=reference, reference_file=reference_file).columns
    influencing = invert_reference(right)
    weights = ranked_weights(pair)
    return PrecisionResult(
        label=label,
        source=pair.source_name,
        target=pair.target_name,
        model_name=pair.model_name,
        estimator=pair.config.label,
        alpha=pair.alpha,
        n_inputs=len(pair.source.inputs),
        labelwise_r_mean=pair.summary()["labelwise_r_mean"],
        reference=reference,
        hit_influenced=hit_at_k(weights, right, ks),
        hit_influencing=hit_at_k(weights.T, influencing, ks),
        chance_influenced=chance_hit_at_k(pair.W.shape[1], right, ks),
        chance_influencing=chance_hit_at_k(pair.W.shape[0], influencing, ks),
        n_pairs_influenced=len(right),
        n_pairs_influencing=len(influencing),
        n_reference_lines=match.n_read,
        dropped_pairs=match.dropped,
        reference_file=reference_file,
    )


def precision_fits(base: FitConfig, headline: str = "ridge-std") -> tuple[FitConfig, ...]:
    """The PRECISION_FITS with `base`'s seed, split and bootstrap, `headline` first; a ridge `base.alpha` goes to the plain ridge."""
    if headline not in PRECISION_FITS:
        raise LincorrError(f"unknown precision fit '{headline}'; use one of {', '.join(PRECISION_FITS)}")
    plain = dataclasses.replace(base, standardize=False, target_scores="logits", name="")
    fits = {
        "ridge-std": dataclasses.replace(base, estimator="ridge", alpha=STANDARDIZED_PENALTY, standardize=True,
                                         target_scores="domain-logprobs", name="ridge-std"),
        "ols": dataclasses.replace(plain, estimator="ols"),
        "ridge": dataclasses.replace(plain, estimator="ridge"),
    }
    return (fits[headline], *(fit for name, fit in fits.items() if name != headline))


def ranked_weights(pair: PairResult) -> np.ndarray:
    """The W whose largest entries are read as its answers `[n_source, n_target]`.

    A standardized fit is read in standard units (target standard deviations per source one,
    with the scales of the training rows: the fitted map's `W_standardized_`), so that a target
    word whose logit merely varies more over the inputs does not top every row; any other fit as it is.
    """
    return pair.estimator.W_standardized_ if pair.config.standardize else pair.W


def precision_from_tables(relation: BoundRelation, tables: Mapping[str, LogitTable], configs: Sequence[FitConfig], *,
                          model_name: str = "", reference_file: ReferenceFile | None = None) -> tuple[PrecisionResult, ...]:
    """One PrecisionResult per estimator config, each W fitted on the relation's two `tables` (by prompt name)."""
    return tuple(
        precision_of(fit_relation_tables(relation, tables, config, model_name=model_name), label=relation.label,
                     reference=relation.reference, reference_file=reference_file)
        for config in configs
    )


@dataclasses.dataclass(frozen=True)
class PrecisionTable(Stored):
    """Precision rows for several relations and estimators on one model, and the relations that could not be judged."""

    study: ClassVar[str] = "precision"

    model_name: str
    n_inputs: int
    rows: tuple[PrecisionResult, ...]
    skipped: tuple[tuple[str, str], ...]  # (relation label, reason)
    seconds: float
    model_fingerprint: str = ""
    configs: tuple[FitConfig, ...] = ()  # the fits every relation was measured with
    reference_file: ReferenceFile | None = None  # the user's pairs every relation was judged by, instead of the registry's

    def summary(self) -> dict:
        """JSON: the rows (each a `PrecisionResult.summary()`, with the paper's numbers where Table 2 has them)."""
        paper = paper_table("table2")
        rows = []
        for row in self.rows:
            entry = row.summary()
            if (published := paper.row(row.label)) is not None:
                entry["paper"] = {"model": paper.model, "setting": paper.setting,
                                  "hit_influenced": dict(zip(map(str, KS), published["hit_influenced"])),
                                  "hit_influencing": dict(zip(map(str, KS), published["hit_influencing"]))}
            rows.append(entry)
        return {"model": self.model_name, "n_inputs": self.n_inputs, "reference_file": self.reference_json(), "rows": rows,
                "skipped": [{"relation": label, "reason": reason} for label, reason in self.skipped], "seconds": self.seconds}

    def settings(self) -> dict:
        """How every relation was measured: the number of inputs, each estimator's fit and the user's reference file."""
        return {"n_inputs": self.n_inputs, "fits": [settings_key(c) for c in self.configs], "reference_file": self.reference_json()}

    def reference_json(self) -> dict | None:
        return self.reference_file.to_json() if self.reference_file else None

    def reference_reports(self) -> list[str]:
        """`PrecisionResult.reference_report` once per relation (its estimators share the reference)."""
        first_rows: dict[str, PrecisionResult] = {}
        for row in self.rows:
            first_rows.setdefault(row.label, row)
        return [line for row in first_rows.values() for line in row.reference_report()]

    def markdown(self) -> str:
        """A Markdown table: r, Hit@1/3/5 influenced and influencing, chance at 1, and the paper's numbers where known."""
        table2 = paper_table("table2")
        lines = [
            f"| relation | estimator | r | influenced @1 / @3 / @5 | influencing @1 / @3 / @5 | chance @1 (infl. / infl.ing) | n pairs | {table2.column_title}, {table2.setting} |",
            "|---|---|---:|---|---|---|---:|---|",
        ]
        for row in self.rows:
            paper = table2.row(row.label)
            paper_text = (" / ".join(f"{v:.2f}" for v in paper["hit_influenced"]) + " ; "
                          + " / ".join(f"{v:.2f}" for v in paper["hit_influencing"])) if paper else ""
            lines.append(
                f"| {row.label} | {row.estimator} | {row.labelwise_r_mean:.2f} | {rates_text(row.hit_influenced)} | "
                f"{rates_text(row.hit_influencing)} | {row.chance_influenced[1]:.2f} / {row.chance_influencing[1]:.2f} | "
                f"{row.n_pairs_influenced} / {row.n_pairs_influencing} | {paper_text} |"
            )
        lines += ["", *self.reference_reports()]
        lines += [f"\nnot judged: {label} ({reason})" for label, reason in self.skipped]
        return "\n".join(lines)

    def headline_summary(self) -> dict:
        """One relation: the numbers of the headline fit (the first) at the top level, every fit's under by_estimator."""
        by_estimator = {row.estimator: row.summary() for row in self.rows}
        skipped = [{"relation": label, "reason": reason} for label, reason in self.skipped]
        return {**by_estimator[self.configs[0].label], "by_estimator": by_estimator, "skipped": skipped}

    def text(self) -> str:
        """Aligned text for the terminal: which fit is the headline, then one line per relation and fit."""
        headline = self.configs[0].label if self.configs else ""
        if headline == "ols" and self.n_inputs == PAPER_N_INPUTS:
            headline = "the paper's setting, ols on half of 10,000 vocabulary inputs"
        width = max([len(row.label) for row in self.rows] + [8])
        lines = [f"{self.model_name}, {self.n_inputs} inputs; Hit@Top-N of W against reference pairs (chance@1 = a random ranking)",
                 f"headline: {headline}; ridge-std = lincorr's fit (ridge on z-scored columns onto the target's log-probabilities over "
                 "its domain), ols = the paper's, ridge = ridge on raw logits with a cross-validated penalty",
                 f"{'relation':<{width}}  estimator  r      influenced @1/@3/@5  influencing @1/@3/@5  chance@1     n pairs"]
        for row in self.rows:
            lines.append(
                f"{row.label:<{width}}  {row.estimator:<9}  {row.labelwise_r_mean:5.2f}  {rates_text(row.hit_influenced):<19}  "
                f"{rates_text(row.hit_influencing):<20}  {row.chance_influenced[1]:.2f}/{row.chance_influencing[1]:.2f}    "
                f"{row.n_pairs_influenced}/{row.n_pairs_influencing}"
            )
        lines += self.reference_reports()
        lines += [f"not judged: {label}: {reason}" for label, reason in self.skipped]
        return "\n".join(lines)

    def save(self, directory) -> None:
        """precision.json, precision.csv, precision.md and provenance.json; written whole or not at all."""
        with staged_directory(directory) as out:
            record(out, self, model_fingerprint=self.model_fingerprint, settings=self.settings())
            write_json(out / "precision.json", self.summary())
            header = ["label", "source", "target", "reference", "estimator", "alpha", "labelwise_r_mean",
                      *(f"hit_influenced_{k}" for k in KS), *(f"hit_influencing_{k}" for k in KS),
                      *(f"chance_influenced_{k}" for k in KS), *(f"chance_influencing_{k}" for k in KS),
                      "n_pairs_influenced", "n_pairs_influencing", "n_reference_lines", "n_dropped_pairs", "reference_file",
                      "reference_sha256"]
            write_csv(out / "precision.csv", header, [
                [r.label, r.source, r.target, r.reference, r.estimator, r.alpha, r.labelwise_r_mean,
                 *(r.hit_influenced[k] for k in KS), *(r.hit_influencing[k] for k in KS),
                 *(r.chance_influenced[k] for k in KS), *(r.chance_influencing[k] for k in KS),
                 r.n_pairs_influenced, r.n_pairs_influencing, r.n_reference_lines, len(r.dropped_pairs),
                 *((r.reference_file.path, r.reference_file.sha256) if r.reference_file else ("", ""))]
                for r in self.rows
            ])
            (out / "precision.md").write_text(self.markdown() + "\n", encoding="utf-8")


def text_keys(rates: Mapping[int, float]) -> dict[str, float]:
    """{1: 0.42} -> {"1": 0.42}, as JSON writes it."""
    return {str(k): v for k, v in rates.items()}


def rates_text(rates: Mapping[int, float]) -> str:
    """"0.42 / 0.45 / 0.48"."""
    return " / ".join(f"{rates[k]:.2f}" for k in KS)


def measure_precision(
    lm: LM,
    registry,
    relations: Sequence[RelationSpec],
    inputs: Sequence[str],
    configs: Sequence[FitConfig],
    *,
    reference_file: ReferenceFile | None = None,
    custom_prompts: Mapping[str, Prompt] | None = None,
    settings: CollectSettings = CollectSettings(),
) -> PrecisionTable:
    """Hit@Top-N for each relation and estimator; every prompt is collected once.

    `reference_file` replaces the registry's reference for every relation (a user's own pairs);
    `custom_prompts` (name -> a prompt of the user's own) stand in for registry prompts of that
    name; `settings` say how the tables are collected.
    A relation (or one estimator of it) is skipped, with the reason, when a prompt has no domain
    for this tokenizer, no reference pair is usable on the tokenized domains, or ols has too few
    inputs. The reference is checked before any logit is collected, and a relation left with no
    usable pair collects nothing.
    """
    started = time.perf_counter()
    custom = dict(custom_prompts or {})
    names = tuple(dict.fromkeys(name for relation in relations for name in (relation.source, relation.target)))
    prompts, missing = registry_prompts(registry, [name for name in names if name not in custom], lm.tokenizer)
    prompts.update(custom)
    skipped = [(r.label, reason) for r in relations for name, reason in missing if name in (r.source, r.target)]
    judged: list[BoundRelation] = []
    for spec in (r for r in relations if r.source in prompts and r.target in prompts):
        try:
            judged.append(judged_relation(registry, spec, prompts[spec.source], prompts[spec.target], reference_file))
        except LincorrError as error:
            skipped.append((spec.label, str(error)))
    needed = dict.fromkeys(name for relation in judged for name in (relation.source.name, relation.target.name))
    tables = collect(lm, {name: prompts[name] for name in needed}, inputs, settings)
    rows: list[PrecisionResult] = []
    for relation in judged:
        for config in configs:
            try:
                rows.extend(precision_from_tables(relation, tables, [config], model_name=lm.name, reference_file=reference_file))
            except LincorrError as error:
                skipped.append((f"{relation.label} ({config.label})", str(error)))
    return PrecisionTable(lm.name, len(inputs), tuple(rows), tuple(skipped), time.perf_counter() - started, lm.fingerprint, tuple(configs),
                          reference_file)


def judged_relation(registry, spec: RelationSpec, source: Prompt, target: Prompt, reference_file: ReferenceFile | None) -> BoundRelation:
    """The relation bound to its prompts with the pairs it is judged by (the user's file, else the registry's), matched once.

    A LincorrError says why when there are no pairs or none survives the tokenizer, before any logit is collected.
    """
    pairs, reference = (reference_file.pairs, USER_FILE) if reference_file is not None else registry_reference(registry, spec)
    if not pairs:
        raise DataError(f"the registry has no reference between {spec.source} and {spec.target}; pass --references FILE")
    relation = relate(source, target, pairs, reference=reference, label=spec.label)
    require_usable(relation.match, label=spec.label, reference=reference, reference_file=reference_file)
    return relation
