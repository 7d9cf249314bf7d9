"""Case tables (Tables 3, 15, 16, 17): the top influenced targets or influencing sources of chosen words in W."""

from __future__ import annotations

import dataclasses
from typing import ClassVar
from collections.abc import Sequence

from lincorr.collection import CollectSettings
from lincorr.errors import LincorrError
from lincorr.fit import FitConfig, PairResult, measure_relation
from lincorr.metrics import top_k
from lincorr.outputs import settings_key, staged_directory, write_csv, write_json
from lincorr.results import Stored, record
from lincorr.paper import paper_table
from lincorr.relations import RelationSpec, bind_relation
from lincorr.studies.logits.precision import ranked_weights

__all__ = ["DIRECTIONS", "CaseSpec", "CaseRow", "CaseTable", "CaseTables", "paper_cases", "case_table", "measure_cases"]


DIRECTIONS = ("influenced", "influencing")


@dataclasses.dataclass(frozen=True)
class CaseSpec:
    """One case table to build: a relation, a direction, the row words (None: every word) and k."""

    relation: RelationSpec
    direction: str
    words: tuple[str, ...] | None
    k: int


def paper_cases(table: str) -> tuple[CaseSpec, ...]:
    """The case tables the paper shows as its Table `table` ("3", "15", "16" or "17")."""
    rows = paper_table("cases").rows_labelled(table)
    if not rows:
        raise LincorrError(f"the paper has no case table {table}; pick 3, 15, 16 or 17")
    return tuple(CaseSpec(RelationSpec(row.relation.source, row.relation.target), row["direction"],
                          tuple(row.values["words"]) if "words" in row.values else None, row["k"]) for row in rows)


@dataclasses.dataclass(frozen=True)
class CaseRow:
    """One row word, its top-k words on the other side of W with their weights, and its reference answers."""

    word: str
    top: tuple[tuple[str, float], ...]
    right: tuple[str, ...]  # words on the other side that the reference calls right (empty when unknown)


@dataclasses.dataclass(frozen=True)
class CaseTable:
    """Top influenced targets (rows of W) or influencing sources (columns of W) for chosen words."""

    source: str
    target: str
    model_name: str
    estimator: str
    direction: str
    k: int
    rows: tuple[CaseRow, ...]
    missing: tuple[str, ...]  # asked-for words that are not in the domain for this tokenizer

    @property
    def title(self) -> str:
        """What the table shows, in words."""
        side = f"top-{self.k} {self.target} influenced by each {self.source} word" if self.direction == "influenced" \
            else f"top-{self.k} {self.source} words influencing each {self.target} word"
        return f"{self.source} -> {self.target}: {side} ({self.model_name}, {self.estimator})"

    def text(self) -> str:
        """A Markdown table; words the reference calls right are in bold."""
        row_side, other_side = (self.source, self.target) if self.direction == "influenced" else (self.target, self.source)
        lines = [f"**{self.title}**", "", f"| {row_side} | {self.direction} {other_side} |", "|---|---|"]
        for row in self.rows:
            words = ", ".join(f"**{w}**" if w in row.right else w for w, _ in row.top)
            lines.append(f"| {row.word} | {words} |")
        if self.missing:
            lines += ["", f"not in the domain for this tokenizer: {', '.join(self.missing)}"]
        return "\n".join(lines)

    def summary(self) -> dict:
        """JSON: the pair, the direction and each row's top words with weights."""
        return {
            "source": self.source, "target": self.target, "model": self.model_name, "estimator": self.estimator,
            "direction": self.direction, "k": self.k, "missing": list(self.missing),
            "rows": [{"word": r.word, "top": [[w, v] for w, v in r.top], "right": list(r.right)} for r in self.rows],
        }


def case_table(pair: PairResult, direction: str, *, words: Sequence[str] | None = None, k: int = 5,
               reference_pairs=None) -> CaseTable:
    """The top-k words of each row word (all words of the row side when `words` is None)."""
    if direction not in DIRECTIONS:
        raise LincorrError(f"direction must be one of {', '.join(DIRECTIONS)}, got {direction!r}")
    influenced = direction == "influenced"
    domain = pair.source.domain if influenced else pair.target.domain
    chosen = list(domain.words) if words is None else list(words)
    present = [w for w in chosen if domain.find(w) is not None]
    if not present:
        raise LincorrError(f"none of {', '.join(chosen[:5])} is in the {domain.name} domain; pick words from it, e.g. {', '.join(domain.words[:5])}")
    # A standardized fit is read in standard units, as precision reads it (`ranked_weights`).
    weights = ranked_weights(pair)
    other = pair.target.domain.words if influenced else pair.source.domain.words
    rows = []
    for word in present:
        canonical = domain.words[domain.index(word)]
        row = domain.index(canonical)
        vector = weights[row] if influenced else weights[:, row]
        top = [(other[j], float(vector[j])) for j in top_k(vector, k)]
        rows.append(CaseRow(canonical, tuple(top), right_answers(reference_pairs, canonical, influenced)))
    return CaseTable(pair.source_name, pair.target_name, pair.model_name, pair.config.label, direction, k,
                     tuple(rows), tuple(w for w in chosen if w not in present))


def right_answers(reference_pairs, word: str, influenced: bool) -> tuple[str, ...]:
    """A subject's objects (influenced), or the subjects that have `word` among their objects (influencing)."""
    if not reference_pairs:
        return ()
    if influenced:
        return tuple(obj for subject, objects in reference_pairs if subject == word for obj in objects)
    return tuple(subject for subject, objects in reference_pairs if word in objects)


@dataclasses.dataclass(frozen=True)
class CaseTables(Stored):
    """Several case tables shown and saved together (the rows of one paper table, or one table of your own)."""

    study: ClassVar[str] = "cases"

    tables: tuple[CaseTable, ...]
    model_fingerprint: str = ""
    config: FitConfig | None = None  # the fit behind every table

    def text(self) -> str:
        """One Markdown table after another."""
        return "\n\n".join(t.text() for t in self.tables)

    def summary(self) -> dict:
        """JSON: each table's summary, under "tables"."""
        return {"tables": [t.summary() for t in self.tables]}

    def save(self, directory) -> None:
        """cases.md (one table after another), cases.csv (one line per row word and rank), cases.json and provenance.json."""
        with staged_directory(directory) as out:
            record(out, self, model_fingerprint=self.model_fingerprint, settings=settings_key(self.config) if self.config else None)
            (out / "cases.md").write_text(self.text() + "\n", encoding="utf-8")
            write_csv(out / "cases.csv", ["source", "target", "direction", "row_word", "rank", "word", "weight", "right"], [
                [t.source, t.target, t.direction, row.word, rank, word, weight, word in row.right]
                for t in self.tables for row in t.rows for rank, (word, weight) in enumerate(row.top, 1)
            ])
            write_json(out / "cases.json", self.summary()["tables"])


def measure_cases(lm, registry, specs: Sequence[CaseSpec], inputs: Sequence[str], config,
                  settings: CollectSettings = CollectSettings()) -> CaseTables:
    """Fit each spec's prompt pair (tables are cached and shared) and build its case table, marking reference answers."""
    tables = []
    for spec in specs:
        relation = bind_relation(registry, spec.relation, lm.tokenizer, require_pairs=False)
        pair = measure_relation(lm, relation, inputs, config, settings)
        tables.append(case_table(pair, spec.direction, words=spec.words, k=spec.k, reference_pairs=relation.pairs or None))
    return CaseTables(tuple(tables), lm.fingerprint, config)
