"""Table 5 (§5): the generalization study over the paper's relations, one stored row per relation, beside the paper's numbers."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import ClassVar

from lincorr.cache import stored_row
from lincorr.collection import CollectSettings
from lincorr.models import LM
from lincorr.outputs import settings_key, staged_directory, write_json, write_text_atomic
from lincorr.paper import paper_table
from lincorr.relations import RelationSpec, study_key
from lincorr.results import Stored, record
from lincorr.studies.training.generalization import GeneralizationConfig, measure_generalization

__all__ = ["GeneralizationTable", "measure_table5"]


@dataclasses.dataclass(frozen=True)
class GeneralizationTable(Stored):
    """Table 5: one `GeneralizationResult.summary()` row per relation, or {"relation", "skipped"}, the paper's numbers beside ours."""

    study: ClassVar[str] = "generalize-table5"

    rows: tuple[dict, ...]
    model_fingerprint: str = ""
    config: GeneralizationConfig | None = None

    def summary(self) -> dict:
        """The JSON of `lincorr generalize --table5 --json`: the rows."""
        return {"rows": list(self.rows)}

    @staticmethod
    def row_line(row: dict) -> str:
        """One Table-5 row: ours (with spread, before, chance, learned) beside the paper's."""
        if "skipped" in row:
            return f"{row['relation']:<22} skipped: {row['skipped']}"
        return (f"{row['relation']:<22} {row['generalization_rate']:6.1%} ± {row['generalization_rate_std']:5.1%}  "
                f"before {row['rate_before']:5.1%}  random {row['random_baseline']:5.1%}  learned {row['source_learned_rate']:6.1%}  "
                f"epochs {'/'.join(map(str, row['epochs_run_per_seed']))}"
                + (f"  paper {row['paper_generalization_rate']:6.2%} ({row['paper_random_baseline']:.2%})"
                   if "paper_generalization_rate" in row else ""))

    def text(self) -> str:
        """One line per relation (`row_line`)."""
        return "\n".join(self.row_line(row) for row in self.rows)

    def markdown(self) -> str:
        """The rows as Markdown, the paper's numbers beside ours."""
        model = paper_table("table5").model
        lines = [f"| relation | generalization | before | random | source learned | epochs | edit predictor acc. / AUC (calibrated) | paper ({model}) | paper random |",
                 "|---|---|---|---|---|---|---|---|---|"]
        for row in self.rows:
            paper = (f"{row['paper_generalization_rate']:.2%} | {row['paper_random_baseline']:.2%}" if "paper_generalization_rate" in row
                     else "| ")
            if "skipped" in row:
                lines.append(f"| {row['relation']} | skipped: {row['skipped']} | | | | | | {paper} |")
                continue
            lines.append(
                f"| {row['relation']} | {row['generalization_rate']:.1%} ± {row['generalization_rate_std']:.1%} | {row['rate_before']:.1%} | "
                f"{row['random_baseline']:.1%} | {row['source_learned_rate']:.1%} | {'/'.join(map(str, row['epochs_run_per_seed']))} | "
                f"{row['calibrated_prediction_accuracy']:.0%} / {row['calibrated_prediction_success_auc']:.2f} | {paper} |")
        return "\n".join(lines)

    def save(self, directory) -> None:
        """table5.json (the rows), table5.md and provenance.json."""
        with staged_directory(directory) as out:
            record(out, self, model_fingerprint=self.model_fingerprint, settings=settings_key(self.config) if self.config else None)
            write_json(out / "table5.json", list(self.rows))
            write_text_atomic(out / "table5.md", self.markdown() + "\n")


def measure_table5(lm: LM, registry, relations: Sequence[RelationSpec] | None = None,
                         config: GeneralizationConfig = GeneralizationConfig(), settings: CollectSettings = CollectSettings(), *,
                         on_row=None) -> GeneralizationTable:
    """Table 5 over `relations` (default: the paper's eleven); `on_row` sees each row as it is finished.

    Finished rows are stored in the cache, so an interrupted table resumes where it stopped; a
    relation this tokenizer cannot express becomes a row with its reason under "skipped".
    """
    paper = paper_table("table5")
    rows = []
    for relation in relations or paper.relations():
        key = {**study_key("generalize", lm.fingerprint, registry, relation, config), "collection": settings.key()}
        row = stored_row("generalize", key, relation.label, lambda: measure_generalization(lm, registry, relation, config, settings).summary(),
                         use_cache=settings.use_cache)
        if (published := paper.row(relation.label)) is not None:
            row |= {"paper_generalization_rate": published["generalization_rate"], "paper_random_baseline": published["random_baseline"],
                    "paper_model": paper.model}
        rows.append(row)
        if on_row is not None:
            on_row(row)
    return GeneralizationTable(tuple(rows), lm.fingerprint, config)
