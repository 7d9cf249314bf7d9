"""Subwords (Appendix K, Table 18): correlation, precision and generalization by the target answer's token category.

Domains keep words whose first token is a fragment ("Br" of Brunei) or a word of a phrase
("North" of North America); each reference pair is filed under its right target's category.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from lincorr.domains import CATEGORIES
from lincorr.experiments.generalization import GeneralizationConfig, GeneralizationResult, prepare_relation, rate, run_generalization
from lincorr.metrics import hit_at_k
from lincorr.models import LM
from lincorr.outputs import staged_directory, write_json

# The paper's Table 18 (llama-3.2-3b, City->Country): correlation, Hit@Top-5, generalization.
PAPER_TABLE18 = {"whole_word": (0.85, 0.49, 0.5567), "word_in_phrase": (0.86, 0.10, 0.0200), "subword": (0.87, 0.00, 0.0000)}


@dataclasses.dataclass(frozen=True)
class SubwordResult:
    """Per token category: how many target words, their mean label-wise r, Hit@Top-5 of W, and the generalization rate."""

    rows: tuple[dict, ...]
    generalization: GeneralizationResult

    def summary(self) -> dict:
        return {"relation": self.generalization.label, "model": self.generalization.model_name, "rows": list(self.rows),
                "generalization_summary": self.generalization.summary()}

    def markdown(self) -> str:
        """Table 18 with the paper's numbers beside ours."""
        lines = ["| category | target words | label-wise r | Hit@Top-5 (subjects) | generalization (facts) | paper r / Hit@5 / gen. |",
                 "|---|---|---|---|---|---|"]
        # The paper's Table 18 is City->Country; beside another relation its numbers would mislead.
        is_papers = (self.generalization.source, self.generalization.target) == ("city", "country")
        for r in self.rows:
            paper = PAPER_TABLE18.get(r["category"]) if is_papers else None
            theirs = f"{paper[0]:.2f} / {paper[1]:.2f} / {paper[2]:.1%}" if paper else ""
            lines.append(f"| {r['category']} | {r['n_target_words']} | {r['labelwise_r']:.2f} | {r['hit_at_5']:.2f} ({r['n_subjects']}) | "
                         f"{r['generalization_rate']:.1%} ({r['n_facts']}; before {r['rate_before']:.1%}) | {theirs} |")
        return "\n".join(lines)

    def save(self, directory) -> None:
        with staged_directory(directory) as out:
            write_json(out / "subwords.json", self.summary())
            (out / "table18.md").write_text(self.markdown() + "\n", encoding="utf-8")
            self.generalization.save(out / "generalization")


def subword_study(lm: LM, registry, source: str = "city", target: str = "country",
                  config: GeneralizationConfig = GeneralizationConfig(keep_subwords=True, balance_categories=True)) -> SubwordResult:
    """Fit W and run the generalization study with subword answers kept and facts spread evenly over categories, then split every score by category."""
    config = dataclasses.replace(config, keep_subwords=True, balance_categories=True)
    relation = prepare_relation(lm, registry, source, target, n_inputs=config.n_inputs, fit=config.fit, keep_subwords=True, progress=config.progress)
    result = run_generalization(lm, registry, source, target, config, relation=relation)
    categories = np.array(relation.target.domain.categories)
    rows = []
    for category in CATEGORIES:
        subjects = {s: cols for s, cols in relation.reference.items() if categories[cols[0]] == category}
        facts = [o for o in result.outcomes if o.reference_category == category]
        rows.append({
            "category": category, "n_target_words": int((categories == category).sum()),
            "labelwise_r": float(np.nanmean(relation.fit.labelwise_r[categories == category])) if (categories == category).any() else float("nan"),
            "hit_at_5": hit_at_k(relation.fit.coef, subjects, ks=(5,))[5], "n_subjects": len(subjects),
            "generalization_rate": rate(o.generalized for o in facts), "rate_before": rate(o.generalized_before for o in facts),
            "n_facts": len(facts),
        })
    return SubwordResult(tuple(rows), result)
