"""W precision (§3.5, Table 2): are W's largest weights the real-world pairs? Hit@Top-N in both directions."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from lincorr.collect import LogitTable, collect_tables
from lincorr.errors import LincorrError
from lincorr.experiments.correlation import FitConfig, PairResult, fit_tables
from lincorr.metrics import chance_hit_at_k, hit_at_k, invert_reference, reference_columns
from lincorr.models import LM
from lincorr.outputs import staged_directory, write_csv, write_json
from lincorr.prompts import registry_prompts

KS = (1, 3, 5)
ReferencePairs = tuple[tuple[str, tuple[str, ...]], ...]  # (subject, acceptable objects)


@dataclasses.dataclass(frozen=True)
class Relation:
    """A relation to judge W on: a label, the source and target prompts, and the registry reference to use."""

    label: str
    source: str
    target: str
    reference: str | None = None  # a registry reference name; None: the registry's reference for the prompt pair


# The paper's Table 2 (llama-3-8b, ols): (influenced Hit@1/3/5, influencing Hit@1/3/5).
# The paper does not say which knowledge its en->es and en->zh rows use; we take city.
TABLE2 = (
    (Relation("City->Country", "city", "country"), ((0.42, 0.45, 0.48), (0.67, 0.74, 0.78))),
    (Relation("CEO->Company", "ceo", "company"), ((0.09, 0.09, 0.14), (0.05, 0.05, 0.08))),
    (Relation("en->es (city)", "city", "es/city"), ((0.91, 0.91, 0.92), (0.67, 0.74, 0.78))),
    (Relation("en->zh (city)", "city", "zh/city"), ((0.10, 0.13, 0.16), (0.09, 0.11, 0.15))),
    (Relation("Fruit->Color", "fruit_color", "simile_color"), ((0.25, 0.38, 0.47), (0.38, 0.50, 0.54))),
    (Relation("Food->Taste", "food_taste", "simile_taste"), ((0.28, 0.50, 0.62), (0.14, 0.36, 0.43))),
    (Relation("X+1->X+2", "math/x+1", "math/x+2"), ((0.00, 0.50, 0.60), (0.10, 0.30, 0.50))),
    (Relation("X+1->X*2", "math/x+1", "math/x*2"), ((0.10, 0.40, 0.50), (0.10, 0.30, 0.70))),
)
PAPER_TABLE2 = {relation.label: numbers for relation, numbers in TABLE2}


def table2_relations() -> tuple[Relation, ...]:
    """The eight relation pairs of the paper's Table 2."""
    return tuple(relation for relation, _ in TABLE2)


def registry_relations(registry) -> tuple[Relation, ...]:
    """One prompt pair for every reference relation of the registry (relations no prompt pair fits are left out).

    A reference names domains, and several prompts may share a domain (city: `city`,
    `birthplace`; color: `color`, `simile_color`), so the pair is chosen by, in order: prompts
    named in the reference ("math/x+1->math/x+2"), the same family, the same knowledge word
    (object_color / simile_color, city / es/city), and prompts named after their domain.
    """
    names = {spec.name: spec for spec in registry.prompts}
    relations = []
    for reference in registry.references:
        named = reference.name.split("->")
        if len(named) == 2 and all(name in names for name in named):
            relations.append(Relation(reference.name, named[0], named[1], reference.name))
            continue
        candidates = [
            (source, target)
            for source in registry.prompts if source.domain == reference.source_domain
            for target in registry.prompts if target.domain == reference.target_domain and target.name != source.name
        ]
        if candidates:
            source, target = max(candidates, key=lambda pair: pair_affinity(*pair))
            relations.append(Relation(reference.name, source.name, target.name, reference.name))
    return tuple(relations)


def pair_affinity(source, target) -> tuple[bool, bool, bool, bool]:
    """How naturally two prompt specs form a relation's prompt pair (compared as a tuple, larger is better)."""

    def knowledge(name: str) -> str:
        return name.split("/")[-1].split("_")[-1]

    return (
        source.family == target.family,
        knowledge(source.name) == knowledge(target.name),
        source.name == source.domain,
        target.name == target.domain,
    )


def read_reference_file(path) -> ReferencePairs:
    """Reference pairs from a TSV (`subject<TAB>object` per line) or JSON file.

    JSON is either a mapping {subject: object or [objects]} or a list of [subject, object]
    pairs. A subject given several times keeps all of its objects: any of them counts as right.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise LincorrError(f"cannot read reference file {path} ({error}); pass a UTF-8 TSV or JSON file") from None
    pairs: list[tuple[str, str]] = []
    if path.suffix.lower() == ".json" or text.lstrip()[:1] in ("{", "["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise LincorrError(f"{path}:{error.lineno}: not valid JSON ({error.msg}); write {{\"subject\": [\"object\", ...]}}") from None
        items = data.items() if isinstance(data, dict) else data
        for item in items:
            if not (isinstance(item, (list, tuple)) and len(item) == 2 and isinstance(item[0], str)):
                raise LincorrError(f"{path}: entry {item!r} is not a subject with its object(s); write {{\"subject\": [\"object\", ...]}} or [[\"subject\", \"object\"], ...]")
            subject, objects = item
            for obj in [objects] if isinstance(objects, str) else objects:
                if not isinstance(obj, str):
                    raise LincorrError(f"{path}: object {obj!r} of '{subject}' is not text")
                pairs.append((subject.strip(), obj.strip()))
    else:
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            fields = line.split("\t")
            if len(fields) != 2 or not fields[0].strip() or not fields[1].strip():
                raise LincorrError(f"{path}:{number}: expected 'subject<TAB>object', got {line!r}; separate the two words with one tab")
            pairs.append((fields[0].strip(), fields[1].strip()))
    if not pairs:
        raise LincorrError(f"reference file {path} has no pairs; write one subject<TAB>object per line")
    merged: dict[str, list[str]] = {}
    for subject, obj in pairs:
        merged.setdefault(subject, [])
        if obj not in merged[subject]:
            merged[subject].append(obj)
    return tuple((subject, tuple(objects)) for subject, objects in merged.items())


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

    def summary(self) -> dict:
        """JSON: the rows (each a `PrecisionResult.summary()`, with the paper's numbers where Table 2 has them)."""
        rows = []
        for row in self.rows:
            entry = row.summary()
            if row.label in PAPER_TABLE2:
                influenced, influencing = PAPER_TABLE2[row.label]
                entry["paper_llama3_8b"] = {"hit_influenced": dict(zip(map(str, KS), influenced)),
                                            "hit_influencing": dict(zip(map(str, KS), influencing))}
            rows.append(entry)
        return {"model": self.model_name, "n_inputs": self.n_inputs, "rows": rows,
                "skipped": [{"relation": label, "reason": reason} for label, reason in self.skipped], "seconds": self.seconds}

    def markdown(self) -> str:
        """A Markdown table: r, Hit@1/3/5 influenced and influencing, chance at 1, and the paper's numbers where known."""
        lines = [
            "| relation | estimator | r | influenced @1 / @3 / @5 | influencing @1 / @3 / @5 | chance @1 (infl. / infl.ing) | n pairs | paper llama-3-8b (ols) |",
            "|---|---|---:|---|---|---|---:|---|",
        ]
        for row in self.rows:
            paper = PAPER_TABLE2.get(row.label)
            paper_text = " / ".join(f"{v:.2f}" for v in paper[0]) + " ; " + " / ".join(f"{v:.2f}" for v in paper[1]) if paper else ""
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
        """precision.json, precision.csv and precision.md; written whole or not at all."""
        with staged_directory(directory) as out:
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
    relations: Sequence[Relation],
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
        pairs, reference = relation_pairs(registry, relation, reference_pairs)
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
    return PrecisionTable(lm.name, len(inputs), tuple(rows), tuple(skipped), time.perf_counter() - started)


def relation_pairs(registry, relation: Relation, override: ReferencePairs | None) -> tuple[ReferencePairs, str]:
    """The pairs to judge a relation by, and the reference's name."""
    if override is not None:
        return override, "user file"
    found = (registry.reference(relation.reference) if relation.reference
             else registry.reference_for(registry.prompt(relation.source), registry.prompt(relation.target)))
    return (found.pairs, found.name) if found else ((), "")
