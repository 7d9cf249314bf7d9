"""W precision (§3.5, Table 2): are W's largest weights the real-world pairs? Hit@Top-N in both directions."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence

from lincorr.collect import LogitTable, collect_tables
from lincorr.errors import LincorrError
from lincorr.experiments.correlation import FitConfig, PairResult, fit_tables
from lincorr.metrics import chance_hit_at_k, hit_at_k, invert_reference, reference_columns
from lincorr.models import LM
from lincorr.outputs import settings_key, staged_directory, write_csv, write_json, write_provenance
from lincorr.paper import paper_table
from lincorr.prompts import registry_prompts
from lincorr.relations import ReferencePairs, RelationSpec, registry_reference

__all__ = ["KS", "PrecisionResult", "PrecisionTable", "precision_of", "precision_from_tables", "precision_table"]


KS = (1, 3, 5)


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
        }


def precision_of(pair: PairResult, reference_pairs: ReferencePairs, *, ks: Sequence[int] = KS, label: str = "",
                 reference: str = "") -> PrecisionResult:
    """Hit@Top-k of a fitted pair's W against (subject, objects) pairs."""
    right = reference_columns(reference_pairs, pair.source.domain.words, pair.target.domain)
    if not right:
        raise LincorrError(
            f"no reference pair of {pair.source_name}->{pair.target_name} has both words in the tokenized domains; "
            "pass --references FILE with pairs of words from the two domains"
        )
    influencing = invert_reference(right)
    return PrecisionResult(
        label=label or f"{pair.source_name}->{pair.target_name}",
        source=pair.source_name,
        target=pair.target_name,
        model_name=pair.model_name,
        estimator=pair.config.estimator,
        alpha=pair.alpha,
        n_inputs=len(pair.source.inputs),
        labelwise_r_mean=pair.summary()["labelwise_r_mean"],
        reference=reference,
        hit_influenced=hit_at_k(pair.coef, right, ks),
        hit_influencing=hit_at_k(pair.coef.T, influencing, ks),
        chance_influenced=chance_hit_at_k(pair.coef.shape[1], right, ks),
        chance_influencing=chance_hit_at_k(pair.coef.shape[0], influencing, ks),
        n_pairs_influenced=len(right),
        n_pairs_influencing=len(influencing),
    )


def precision_from_tables(
    source: LogitTable, target: LogitTable, reference_pairs: ReferencePairs, configs: Sequence[FitConfig], *,
    label: str = "", source_name: str = "source", target_name: str = "target", model_name: str = "", reference: str = "",
) -> tuple[PrecisionResult, ...]:
    """One PrecisionResult per estimator config, all fitted on the same two tables."""
    return tuple(
        precision_of(
            fit_tables(source, target, config, source_name=source_name, target_name=target_name, model_name=model_name),
            reference_pairs, label=label, reference=reference,
        )
        for config in configs
    )


@dataclasses.dataclass(frozen=True)
class PrecisionTable:
    """Precision rows for several relations and estimators on one model, and the relations that could not be judged."""

    model_name: str
    n_inputs: int
    rows: tuple[PrecisionResult, ...]
    skipped: tuple[tuple[str, str], ...]  # (relation label, reason)
    seconds: float
    model_fingerprint: str = ""
    configs: tuple[FitConfig, ...] = ()  # the fits every relation was measured with

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
        return {"model": self.model_name, "n_inputs": self.n_inputs, "rows": rows,
                "skipped": [{"relation": label, "reason": reason} for label, reason in self.skipped], "seconds": self.seconds}

    def settings(self) -> dict:
        """How every relation was measured: the number of inputs and each estimator's fit."""
        return {"n_inputs": self.n_inputs, "fits": [settings_key(c) for c in self.configs]}

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
        lines += [f"\nnot judged: {label} ({reason})" for label, reason in self.skipped]
        return "\n".join(lines)

    def format_table(self) -> str:
        """Aligned text for the terminal."""
        width = max([len(row.label) for row in self.rows] + [8])
        lines = [f"{'relation':<{width}}  estimator  r      influenced @1/@3/@5  influencing @1/@3/@5  chance@1     n pairs"]
        for row in self.rows:
            lines.append(
                f"{row.label:<{width}}  {row.estimator:<9}  {row.labelwise_r_mean:5.2f}  {rates_text(row.hit_influenced):<19}  "
                f"{rates_text(row.hit_influencing):<20}  {row.chance_influenced[1]:.2f}/{row.chance_influencing[1]:.2f}    "
                f"{row.n_pairs_influenced}/{row.n_pairs_influencing}"
            )
        lines += [f"not judged: {label}: {reason}" for label, reason in self.skipped]
        return "\n".join(lines)

    def save(self, directory) -> None:
        """precision.json, precision.csv, precision.md and provenance.json; written whole or not at all."""
        with staged_directory(directory) as out:
            write_provenance(out, model_fingerprint=self.model_fingerprint, settings=self.settings())
            write_json(out / "precision.json", self.summary())
            header = ["label", "source", "target", "reference", "estimator", "alpha", "labelwise_r_mean",
                      *(f"hit_influenced_{k}" for k in KS), *(f"hit_influencing_{k}" for k in KS),
                      *(f"chance_influenced_{k}" for k in KS), *(f"chance_influencing_{k}" for k in KS),
                      "n_pairs_influenced", "n_pairs_influencing"]
            write_csv(out / "precision.csv", header, [
                [r.label, r.source, r.target, r.reference, r.estimator, r.alpha, r.labelwise_r_mean,
                 *(r.hit_influenced[k] for k in KS), *(r.hit_influencing[k] for k in KS),
                 *(r.chance_influenced[k] for k in KS), *(r.chance_influencing[k] for k in KS),
                 r.n_pairs_influenced, r.n_pairs_influencing]
                for r in self.rows
            ])
            (out / "precision.md").write_text(self.markdown() + "\n", encoding="utf-8")


def text_keys(rates: Mapping[int, float]) -> dict[str, float]:
    """{1: 0.42} -> {"1": 0.42}, as JSON writes it."""
    return {str(k): v for k, v in rates.items()}


def rates_text(rates: Mapping[int, float]) -> str:
    """"0.42 / 0.45 / 0.48"."""
    return " / ".join(f"{rates[k]:.2f}" for k in KS)


def precision_table(
    lm: LM,
    registry,
    relations: Sequence[RelationSpec],
    inputs: Sequence[str],
    configs: Sequence[FitConfig],
    *,
    reference_pairs: ReferencePairs | None = None,
    **collect_options,
) -> PrecisionTable:
    """Hit@Top-N for each relation and estimator; every prompt is collected once.

    `reference_pairs` replaces the registry's reference for every relation (a user's own pairs);
    `collect_options` go to `collect_logits`.
    A relation (or one estimator of it) is skipped, with the reason, when a prompt has no domain
    for this tokenizer, no reference pair survives tokenization, or ols has too few inputs.
    """
    started = time.perf_counter()
    names = tuple(dict.fromkeys(name for relation in relations for name in (relation.source, relation.target)))
    prompts, missing = registry_prompts(registry, names, lm.tokenizer)
    skipped = [(r.label, reason) for r in relations for name, reason in missing if name in (r.source, r.target)]
    tables = collect_tables(lm, prompts, inputs, **collect_options)
    rows: list[PrecisionResult] = []
    for relation in (r for r in relations if r.source in prompts and r.target in prompts):
        pairs, reference = (reference_pairs, "user file") if reference_pairs is not None else registry_reference(registry, relation)
        if not pairs:
            skipped.append((relation.label, f"the registry has no reference between {relation.source} and {relation.target}"))
            continue
        for config in configs:
            try:
                rows.extend(precision_from_tables(
                    tables[relation.source], tables[relation.target], pairs, [config], label=relation.label,
                    source_name=relation.source, target_name=relation.target, model_name=lm.name, reference=reference,
                ))
            except LincorrError as error:
                skipped.append((f"{relation.label} ({config.estimator})", str(error)))
    return PrecisionTable(lm.name, len(inputs), tuple(rows), tuple(skipped), time.perf_counter() - started, lm.fingerprint, tuple(configs))
