"""W precision on the LRE relations (`peng.table2.lre`): Table 2's Hit@Top-N on 47 relations nobody here wrote.

Each LRE relation becomes two prompts over the same inputs X (`lincorr.knowledge.lre`); W is fitted
from the source prompt's logits (LRE's subjects) to the target's (LRE's objects) and judged against
LRE's samples with `precision.measure_precision`. A relation is measured when, on this tokenizer, at
least MIN_SUBJECTS reference subjects keep a right object and the object domain keeps at least
MIN_OBJECTS words; every other relation is listed with the reason. Each Hit@1 comes with a one-sided
binomial test against its chance level (a random ranking): the chance of a relation is the mean over
its subjects, and a binomial with that mean is never less spread than the true sum of unequal
chances, so the test errs on the safe side.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import ClassVar

import numpy as np
from scipy.stats import binomtest

from lincorr.collection import CollectSettings
from lincorr.errors import LincorrError
from lincorr.fit import FitConfig
from lincorr.knowledge.lre import LreRelation, lre_registry
from lincorr.models import LM
from lincorr.outputs import settings_key, staged_directory, write_csv, write_json
from lincorr.relations import bind_relation
from lincorr.results import Stored, record
from lincorr.studies.logits.precision import MIN_PAIRS, PrecisionResult, measure_precision

__all__ = ["LRE_FITS", "MIN_OBJECTS", "MIN_SUBJECTS", "SIGNIFICANCE", "HitTest", "LreTable", "hit_test", "lre_precision"]

MIN_SUBJECTS = MIN_PAIRS
# One object word leaves nothing to rank.
MIN_OBJECTS = 2
# A relation's Hit@1 is "above chance" when its one-sided binomial p is below this.
SIGNIFICANCE = 0.01
# The fits reported, the paper's first: ols (§3.2) and lincorr's ridge-std (`precision.precision_fits`).
LRE_FITS = ("ols", "ridge-std")
ROW_HEADERS = ("relation", "type", "fit", "r", "Hit@1/3/5 influenced", "Hit@1 95% CI", "chance@1", "p",
               "Hit@1/3/5 influencing", "chance@1", "p", "subjects / objects judged")
TYPE_HEADERS = ("type", "fit", "relations", f"Hit@1 above chance (p < {SIGNIFICANCE}), influenced", "influencing",
                "mean Hit@1 influenced", "mean chance@1")


@dataclasses.dataclass(frozen=True)
class HitTest:
    """Hit@1 as a count, its 95% Clopper-Pearson interval, and the one-sided binomial p against chance."""

    hits: int
    n: int
    chance: float
    ci_low: float
    ci_high: float
    p_value: float


def hit_test(rate: float, n: int, chance: float) -> HitTest:
    """The test of a Hit@1 `rate` over `n` judged words against `chance` (the rate of a random ranking)."""
    hits = int(round(rate * n))
    chance = min(max(chance, 0.0), 1.0)
    # The interval is two-sided; the one-sided test's own interval would always end at 1.
    interval = binomtest(hits, n, chance).proportion_ci(confidence_level=0.95, method="exact")
    return HitTest(hits, n, chance, float(interval.low), float(interval.high),
                   float(binomtest(hits, n, chance, alternative="greater").pvalue))


def row_tests(row: PrecisionResult) -> tuple[HitTest, HitTest]:
    """(influenced, influencing) Hit@1 tests of one row."""
    return (hit_test(row.hit_influenced[1], row.n_pairs_influenced, row.chance_influenced[1]),
            hit_test(row.hit_influencing[1], row.n_pairs_influencing, row.chance_influencing[1]))


@dataclasses.dataclass(frozen=True)
class LreTable(Stored):
    """Hit@Top-N of W for each measured LRE relation and fit, LRE's relation type beside each, and the relations left out."""

    study: ClassVar[str] = "lre"

    model_name: str
    n_inputs: int
    rows: tuple[PrecisionResult, ...]
    relation_types: dict[str, str]  # relation name -> factual / commonsense / linguistic / bias, every relation asked for
    skipped: tuple[tuple[str, str], ...]  # (relation, or "relation (fit)", reason)
    seconds: float
    model_fingerprint: str = ""
    configs: tuple[FitConfig, ...] = ()
    max_subjects: int | None = None  # subjects drawn per relation (seeded), None for all

    def type_summary(self) -> list[dict]:
        """Per relation type and fit: relations measured, how many have Hit@1 above chance (p < SIGNIFICANCE) each way, mean Hit@1 and chance."""
        summary = []
        for relation_type in dict.fromkeys(sorted(self.relation_types.values())):
            for estimator in dict.fromkeys(row.estimator for row in self.rows):
                rows = [row for row in self.rows if row.estimator == estimator and self.relation_types[row.label] == relation_type]
                if not rows:
                    continue
                tests = [row_tests(row) for row in rows]
                summary.append({
                    "relation_type": relation_type, "estimator": estimator, "n_relations": len(rows),
                    "n_above_chance_influenced": sum(influenced.p_value < SIGNIFICANCE for influenced, _ in tests),
                    "n_above_chance_influencing": sum(influencing.p_value < SIGNIFICANCE for _, influencing in tests),
                    "mean_hit1_influenced": float(np.mean([row.hit_influenced[1] for row in rows])),
                    "mean_chance1_influenced": float(np.mean([row.chance_influenced[1] for row in rows])),
                })
        return summary

    def row_json(self, row: PrecisionResult) -> dict:
        influenced, influencing = row_tests(row)
        return {**row.summary(), "relation_type": self.relation_types[row.label],
                "hit1_test_influenced": dataclasses.asdict(influenced), "hit1_test_influencing": dataclasses.asdict(influencing)}

    def summary(self) -> dict:
        """JSON: the rows (each a `PrecisionResult.summary()` with its type and Hit@1 tests), the per-type summary and the skipped relations."""
        return {"model": self.model_name, "n_inputs": self.n_inputs, "max_subjects": self.max_subjects, "significance": SIGNIFICANCE,
                "rows": [self.row_json(row) for row in self.rows], "types": self.type_summary(),
                "skipped": [{"relation": label, "reason": reason} for label, reason in self.skipped], "seconds": self.seconds}

    def row_cells(self, row: PrecisionResult) -> list[str]:
        """One row as text, in the order of ROW_HEADERS."""
        influenced, influencing = row_tests(row)
        return [row.label, self.relation_types[row.label], row.estimator, f"{row.labelwise_r_mean:.2f}", rates(row.hit_influenced),
                f"{influenced.ci_low:.2f}–{influenced.ci_high:.2f}", f"{influenced.chance:.2f}", p_text(influenced.p_value),
                rates(row.hit_influencing), f"{influencing.chance:.2f}", p_text(influencing.p_value),
                f"{row.n_pairs_influenced} / {row.n_pairs_influencing}"]

    def type_cells(self) -> list[list[str]]:
        """The per-type summary as text, in the order of TYPE_HEADERS."""
        return [[s["relation_type"], s["estimator"], str(s["n_relations"]), str(s["n_above_chance_influenced"]),
                 str(s["n_above_chance_influencing"]), f"{s['mean_hit1_influenced']:.2f}", f"{s['mean_chance1_influenced']:.2f}"]
                for s in self.type_summary()]

    def markdown(self) -> str:
        """Markdown: one line per relation and fit, then the per-type summary and the relations left out."""
        def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
            return ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers), *("| " + " | ".join(row) + " |" for row in rows)]

        return "\n".join([*table(ROW_HEADERS, [self.row_cells(row) for row in self.rows]), "", *table(TYPE_HEADERS, self.type_cells()),
                          "", *(f"- not measured: {label}: {reason}" for label, reason in self.skipped)])

    def text(self) -> str:
        """Aligned text for the terminal: what was measured, the rows, the per-type summary, the relations left out."""
        def aligned(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
            widths = [max(len(cell) for cell in column) for column in zip(headers, *rows)]
            return ["  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in (headers, *rows)]

        return "\n".join([f"{self.model_name}, {self.n_inputs} inputs; Hit@Top-N of W against LRE's samples (ols = the paper's fit, "
                          "ridge-std = lincorr's; chance@1 = a random ranking, p = one-sided binomial against it)",
                          *aligned(ROW_HEADERS, [self.row_cells(row) for row in self.rows]), "",
                          *aligned(TYPE_HEADERS, self.type_cells()), *(f"not measured: {label}: {reason}" for label, reason in self.skipped)])

    def save(self, directory) -> None:
        """lre.json, lre.csv, lre.md and provenance.json; written whole or not at all."""
        header = ["relation", "relation_type", "estimator", "alpha", "labelwise_r_mean", *(f"hit_influenced_{k}" for k in (1, 3, 5)),
                  *(f"hit_influencing_{k}" for k in (1, 3, 5)), "chance_influenced_1", "chance_influencing_1", "p_influenced_1",
                  "p_influencing_1", "n_pairs_influenced", "n_pairs_influencing", "n_dropped_pairs"]
        lines = []
        for row in self.rows:
            influenced, influencing = row_tests(row)
            lines.append([row.label, self.relation_types[row.label], row.estimator, row.alpha, row.labelwise_r_mean,
                          *row.hit_influenced.values(), *row.hit_influencing.values(), influenced.chance, influencing.chance,
                          influenced.p_value, influencing.p_value, row.n_pairs_influenced, row.n_pairs_influencing, len(row.dropped_pairs)])
        with staged_directory(directory) as out:
            record(out, self, model_fingerprint=self.model_fingerprint,
                   settings={"n_inputs": self.n_inputs, "max_subjects": self.max_subjects, "fits": [settings_key(c) for c in self.configs]})
            write_json(out / "lre.json", self.summary())
            write_csv(out / "lre.csv", header, lines)
            (out / "lre.md").write_text(self.markdown() + "\n", encoding="utf-8")


def rates(values) -> str:
    return "/".join(f"{values[k]:.2f}" for k in (1, 3, 5))


def p_text(p: float) -> str:
    return f"{p:.0e}" if p < 0.001 else f"{p:.3f}"


def lre_precision(lm: LM, relations: Sequence[LreRelation], inputs: Sequence[str], configs: Sequence[FitConfig], *,
                  max_subjects: int | None = None, settings: CollectSettings = CollectSettings()) -> LreTable:
    """Hit@Top-N of W for each LRE relation this tokenizer can judge (see the module's rule), for each fit in `configs`.

    `max_subjects` draws at most that many subjects of each relation (`LreRelation.sampled`, with the
    fits' seed), so that ols, which needs more training inputs than subject words, can be fitted on few inputs.

    `settings` say how the tables are collected; relations left out, and fits that cannot be made (ols with fewer training inputs than subject words),
    are listed in `skipped` with the reason.
    """
    started = time.perf_counter()
    seed = configs[0].seed if configs else 0
    registry, specs = lre_registry([relation.sampled(max_subjects, seed) for relation in relations])
    kept, skipped, prompts = [], [], {}
    for spec in specs:
        try:
            bound = bind_relation(registry, spec, lm.tokenizer, require_pairs=False)
        except LincorrError as error:
            skipped.append((spec.label, str(error)))
            continue
        if len(bound.columns) < MIN_SUBJECTS or len(bound.target.domain) < MIN_OBJECTS:
            skipped.append((spec.label, f"{len(bound.columns)} reference subjects and {len(bound.target.domain)} object words "
                                        f"survive this tokenizer (needs {MIN_SUBJECTS} and {MIN_OBJECTS})"))
            continue
        kept.append(spec)
        prompts.update({bound.source.name: bound.source, bound.target.name: bound.target})
    table = measure_precision(lm, registry, kept, inputs, configs, custom_prompts=prompts, settings=settings)
    return LreTable(lm.name, len(inputs), table.rows, {relation.name: relation.relation_type for relation in relations},
                    (*skipped, *table.skipped), time.perf_counter() - started, lm.fingerprint, tuple(configs), max_subjects)
