"""Tables of vocabulary ablations: the paper's Table 7 over seeds, and one relation over PCA-reduced vocabulary widths."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import ClassVar

import numpy as np

from lincorr.knowledge import load_registry
from lincorr.outputs import staged_directory, write_json
from lincorr.paper import paper_table
from lincorr.relations import RelationSpec
from lincorr.results import Stored, record
from lincorr.studies.training.ablation import AblationConfig, AblationResult, Vocabulary, ablate, pca_vocabularies
from lincorr.studies.training.token_pairs import MAPPINGS

__all__ = ["AblationTable", "WidthSweep", "measure_table7", "measure_width_sweep", "shared_settings"]


def over_seeds(results: Sequence[AblationResult]) -> dict[str, float]:
    """Generalization (mean and sd), the rate before stage 2, source facts learned and chance over seeds, in percent."""
    rates = 100 * np.array([r.generalization_rate for r in results])
    return {
        "generalization_mean": float(rates.mean()),
        "generalization_std": float(rates.std(ddof=1)) if len(rates) > 1 else 0.0,
        "rate_before": 100 * float(np.mean([r.rate_before for r in results])),
        "source_learned": 100 * float(np.mean([r.source_learned_rate for r in results])),
        # Aliases make the baseline depend on which pairs a seed tests, so it is averaged too.
        "random_baseline": 100 * float(np.mean([r.random_baseline for r in results])),
    }


def grouped(results: Sequence[AblationResult], key: Callable[[AblationResult], tuple]) -> dict[tuple, list[AblationResult]]:
    """`results` by `key` (a row of a table: the seeds of one setting), in first-seen order."""
    groups: dict[tuple, list[AblationResult]] = {}
    for result in results:
        groups.setdefault(key(result), []).append(result)
    return groups


def seeds_and_time(results: Sequence[AblationResult]) -> dict:
    """The seeds of `results` and their mean seconds per run."""
    return {"seeds": [r.seed for r in results], "seconds": float(np.mean([r.seconds for r in results]))}


@dataclasses.dataclass(frozen=True)
class AblationTable(Stored):
    """Table 7 over several seeds: one AblationResult per (row, seed)."""

    study: ClassVar[str] = "ablate-table7"

    results: tuple[AblationResult, ...]

    def rows(self) -> list[dict]:
        """Per (relation, mapping): mean and standard deviation over seeds, in percent, beside the paper's number."""
        groups = grouped(self.results, lambda result: (result.relation, result.mapping))
        paper = paper_table("table7")
        rows = []
        for (relation, mapping), results in groups.items():
            published = next((row for row in paper.rows if row.relation.source + "->" + row.relation.target == relation
                              and row["mapping"] == mapping), None)
            rows.append({
                "relation": relation,
                "mapping": mapping,
                **over_seeds(results),
                "paper": published["generalization"] if published else None,
                "paper_model": paper.model,
                **seeds_and_time(results),
            })
        return rows

    def summary(self) -> dict:
        """The JSON of `lincorr ablate --table7 --json`: the rows."""
        return {"rows": self.rows()}

    def text(self) -> str:
        """A Markdown table: ours (mean ± sd over seeds) next to the paper's Table 7."""
        lines = [
            f"| relation | mapping | generalization % | before stage 2 % | source learned % | random % | {paper_table('table7').column_title} % | s / run |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for row in self.rows():
            paper = "–" if row["paper"] is None else f"{row['paper']:.2f}"
            lines.append(
                f"| {row['relation']} | {row['mapping']} | {row['generalization_mean']:.2f} ± {row['generalization_std']:.2f} "
                f"| {row['rate_before']:.2f} | {row['source_learned']:.2f} | {row['random_baseline']:.2f} | {paper} "
                f"| {row['seconds']:.0f} |"
            )
        return "\n".join(lines) + "\n"

    def save(self, directory) -> None:
        """table7.md, table7.json (the rows) and provenance.json (the settings every row shares)."""
        with staged_directory(directory) as out:
            record(out, self, settings=shared_settings(self.results))
            (out / "table7.md").write_text(self.text(), encoding="utf-8")
            write_json(out / "table7.json", self.rows())


def shared_settings(results: Sequence[AblationResult]) -> dict:
    """The settings every one of `results` was run with (what a table's provenance records once)."""
    first = results[0].settings if results else {}
    return {key: value for key, value in first.items() if all(r.settings.get(key) == value for r in results)}


def measure_table7(
    vocabulary: Vocabulary,
    tokenizer,
    *,
    seeds: Sequence[int] = (0, 1, 2),
    config: AblationConfig = AblationConfig(),
    rows: Sequence[tuple[RelationSpec, str]] | None = None,
    registry=None,
) -> AblationTable:
    """Every (relation, mapping) row (default: the paper's Table 7) for every seed."""
    registry = registry or load_registry()
    if rows is None:
        rows = [(RelationSpec(row.relation.source, row.relation.target), row["mapping"]) for row in paper_table("table7").rows]
    results = [
        ablate(vocabulary, tokenizer, relation, mapping=mapping, seed=seed, config=config, registry=registry)
        for relation, mapping in rows
        for seed in seeds
    ]
    return AblationTable(tuple(results))


@dataclasses.dataclass(frozen=True)
class WidthSweep(Stored):
    """The ablation of one relation on PCA-reduced copies of one vocabulary: every width, mapping and seed."""

    study: ClassVar[str] = "ablate-widths"

    results: tuple[AblationResult, ...]

    def rows(self) -> list[dict]:
        """Per (width, mapping): generalization mean and sd over seeds, the rate before stage 2, stage-1 fit and chance, in percent."""
        groups = grouped(self.results, lambda result: (result.settings["embedding_width"], result.mapping))
        rows = []
        for (width, mapping), results in sorted(groups.items(), key=lambda item: (item[0][0], MAPPINGS.index(item[0][1]))):
            rows.append({
                "relation": results[0].relation, "embedding_width": width, "mapping": mapping,
                "explained_variance": results[0].settings["explained_variance"], **over_seeds(results),
                "stage1_target_accuracy": 100 * float(np.mean([r.stage1_target_accuracy for r in results])), **seeds_and_time(results),
            })
        return rows

    def summary(self) -> dict:
        """The JSON of `lincorr ablate --embedding-width --json`: the rows."""
        return {"rows": self.rows()}

    def text(self) -> str:
        """One line per width: each mapping's generalization (mean ± sd over seeds), stage-1 target fit and chance, in percent."""
        by_width: dict[int, dict[str, dict]] = {}
        for row in self.rows():
            by_width.setdefault(row["embedding_width"], {})[row["mapping"]] = row
        mappings = [m for m in MAPPINGS if any(m in rows for rows in by_width.values())]

        def cells(rows: dict[str, dict], key: str, digits: int) -> str:
            def shown(row: dict) -> str:
                spread = f" ± {row['generalization_std']:.{digits}f}" if key == "generalization_mean" else ""
                return f"{row[key]:.{digits}f}{spread}"
            return " / ".join(shown(rows[m]) if m in rows else "–" for m in mappings)

        names = " / ".join(mappings)
        lines = [f"| width | variance kept | generalization % ({names}) | stage-1 target fit % | random % |", "|---|---|---|---|---|"]
        for width, rows in by_width.items():
            variance = next(iter(rows.values()))["explained_variance"]
            lines.append(f"| {width} | {variance:.1%} | {cells(rows, 'generalization_mean', 2)} | {cells(rows, 'stage1_target_accuracy', 0)} "
                         f"| {cells(rows, 'random_baseline', 2)} |")
        return "\n".join(lines) + "\n"

    def save(self, directory) -> None:
        """widths.md, widths.json (the rows) and provenance.json (the settings every run shares)."""
        with staged_directory(directory) as out:
            record(out, self, settings=shared_settings(self.results))
            (out / "widths.md").write_text(self.text(), encoding="utf-8")
            write_json(out / "widths.json", self.rows())


def measure_width_sweep(
    vocabulary: Vocabulary,
    tokenizer,
    relation: RelationSpec = RelationSpec("city", "country"),
    *,
    widths: Sequence[int],
    seeds: Sequence[int] = (0, 1, 2),
    mappings: Sequence[str] = MAPPINGS,
    config: AblationConfig = AblationConfig(),
    registry=None,
) -> WidthSweep:
    """`ablate` on the vocabulary reduced to each of `widths` principal components (`pca_vocabularies`), every mapping and seed.

    The block, its training and the test are the same at every width, so a trend in the rates is the
    vocabulary's dimensionality at work (§6's hypothesis that generalization lives in the vocabulary).
    """
    registry = registry or load_registry()
    results = [
        ablate(reduced, tokenizer, relation, mapping=mapping, seed=seed, config=config, registry=registry)
        for reduced in pca_vocabularies(vocabulary, widths)
        for mapping in mappings
        for seed in seeds
    ]
    return WidthSweep(tuple(results))
