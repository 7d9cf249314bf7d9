"""Subwords (Appendix K, Table 18): correlation, precision and generalization by the target answer's token category.

Domains keep words whose first token is a fragment ("Br" of Brunei) or a word of a phrase
("North" of North America); each reference pair is filed under its right target's category.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from lincorr.collection import CollectSettings
from lincorr.domains import CATEGORIES
from lincorr.fit import fit_relation
from lincorr.studies.training.generalization import GeneralizationConfig, GeneralizationResult, measure_generalization
from lincorr.metrics import hit_at_k, rate
from lincorr.models import LM
from lincorr.outputs import settings_key, staged_directory, write_json
from lincorr.paper import paper_table
from lincorr.relations import RelationSpec
from lincorr.results import Stored, record

__all__ = ["SubwordResult", "measure_subwords"]


@dataclasses.dataclass(frozen=True)
class SubwordResult(Stored):
    """Per token category: how many target words, their mean label-wise r, Hit@Top-5 of W, and the generalization rate."""

    study: ClassVar[str] = "subwords"

    rows: tuple[dict, ...]
    generalization: GeneralizationResult

    def summary(self) -> dict:
        return {"relation": self.generalization.label, "model": self.generalization.model_name, "rows": list(self.rows),
                "generalization_summary": self.generalization.summary()}

    def text(self) -> str:
        """Table 18 with the paper's numbers beside ours."""
        table18 = paper_table("table18")
        lines = [f"| category | target words | label-wise r | Hit@Top-5 (subjects) | generalization (facts) | {table18.column_title} r / Hit@5 / gen. |",
                 "|---|---|---|---|---|---|"]
        # The paper's Table 18 is one relation; beside another its numbers would mislead.
        ours = (self.generalization.source, self.generalization.target)
        for r in self.rows:
            paper = next((row for row in table18.rows if row["category"] == r["category"]
                          and (row.relation.source, row.relation.target) == ours), None)
            theirs = f"{paper['labelwise_r']:.2f} / {paper['hit_at_5']:.2f} / {paper['generalization_rate']:.1%}" if paper else ""
            lines.append(f"| {r['category']} | {r['n_target_words']} | {r['labelwise_r']:.2f} | {r['hit_at_5']:.2f} ({r['n_subjects']}) | "
                         f"{r['generalization_rate']:.1%} ({r['n_facts']}; before {r['rate_before']:.1%}) | {theirs} |")
        return "\n".join(lines)

    def save(self, directory) -> None:
        """subwords.json, table18.md, provenance.json, and the generalization study's files under generalization/."""
        with staged_directory(directory) as out:
            record(out, self, model_fingerprint=self.generalization.model_fingerprint, settings=settings_key(self.generalization.config))
            write_json(out / "subwords.json", self.summary())
            (out / "table18.md").write_text(self.text() + "\n", encoding="utf-8")
            self.generalization.save(out / "generalization")


def measure_subwords(lm: LM, registry, relation: RelationSpec = RelationSpec("city", "country"),
                  config: GeneralizationConfig = GeneralizationConfig(keep_subwords=True, balance_categories=True),
                  settings: CollectSettings = CollectSettings()) -> SubwordResult:
    """Fit W and run the generalization study with subword answers kept and facts spread evenly over categories, then split every score by category."""
    config = dataclasses.replace(config, keep_subwords=True, balance_categories=True)
    relation = fit_relation(lm, registry, relation, n_inputs=config.n_inputs, fit=config.fit, keep_subwords=True, settings=settings)
    result = measure_generalization(lm, registry, relation, config)
    categories = np.array(relation.target.domain.categories)
    rows = []
    for category in CATEGORIES:
        subjects = {s: cols for s, cols in relation.columns.items() if categories[cols[0]] == category}
        facts = [o for o in result.outcomes if o.reference_category == category]
        rows.append({
            "category": category, "n_target_words": int((categories == category).sum()),
            "labelwise_r": float(np.nanmean(relation.fit.labelwise_r[categories == category])) if (categories == category).any() else float("nan"),
            "hit_at_5": hit_at_k(relation.fit.W, subjects, ks=(5,))[5], "n_subjects": len(subjects),
            "generalization_rate": rate(o.generalized for o in facts), "rate_before": rate(o.generalized_before for o in facts),
            "n_facts": len(facts),
        })
    return SubwordResult(tuple(rows), result)
