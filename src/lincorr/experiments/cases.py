"""Case tables (Tables 3, 15, 16, 17): the top influenced targets or influencing sources of chosen words in W."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from lincorr.errors import LincorrError
from lincorr.experiments.correlation import PairResult, measure_pair
from lincorr.outputs import staged_directory, write_csv, write_json
from lincorr.prompts import registry_prompt

DIRECTIONS = ("influenced", "influencing")


@dataclasses.dataclass(frozen=True)
class CaseSpec:
    """One case table to build: a prompt pair, a direction, the row words (None: every word) and k."""

    source: str
    target: str
    direction: str
    words: tuple[str, ...] | None
    k: int


# The rows the paper shows. Table 3 reads rows of W (if city = ..., then country = ...);
# Tables 15-17 read columns (the sources that most push a target up).
PAPER_CASES = {
    "3": (
        CaseSpec("city", "country", "influenced", ("Shanghai", "NYC", "Oslo", "Seattle", "Indianapolis"), 5),
        CaseSpec("math/x+1", "math/x+2", "influenced", ("1", "2", "3", "4", "5"), 5),
    ),
    "15": (
        CaseSpec("city", "country", "influencing", (
            "Sweden", "Cuba", "Switzerland", "Ghana", "Poland", "Turkey", "Sudan", "Romania", "Samoa", "Iceland", "Nigeria",
            "Iraq", "Laos", "USSR", "Kosovo", "China", "Guatemala", "Tunisia", "Denmark", "Nicaragua", "Bosnia",
            "Netherlands", "Malaysia", "Venezuela", "Ireland", "Liberia", "Afghanistan", "America", "Austria", "Scotland",
            "Libya", "Uruguay", "Bangladesh", "Bahrain", "Pakistan", "Fiji", "Cambodia", "Singapore", "Macedonia",
            "Mongolia", "Peru", "Myanmar", "Trinidad", "Colombia", "Iran", "India", "Spain", "Honduras", "USA",
        ), 10),
    ),
    "16": (
        CaseSpec("mother", "father", "influencing", (
            "Omar", "Victor", "Andre", "Julio", "Enrique", "Amir", "Xavier", "Javier", "Vlad", "Roberto", "Lars", "Min",
            "James", "Giovanni", "Ivan", "Diego", "Fernando", "Ethan", "Chen", "Gabriel", "Boris", "Jean", "Dmitry",
            "Ahmed", "Wei", "Ibrahim", "Liam", "Mustafa", "Jorge", "Leonardo", "Luca", "Carlos", "Pedro", "Michel", "Kai",
            "Benjamin", "Noah", "Ali", "Levi", "Antonio", "Rafael", "Marco", "Stefan", "Chung", "Abdul", "Muhammad",
            "Hugo", "Axel", "Lucas", "Mason", "Hassan", "Pablo", "Raphael", "Elijah", "Louis", "Ricardo", "Samuel",
            "William", "Salman", "Oliver", "Angelo", "Hans", "Jamal", "Santiago",
        ), 10),
    ),
    "17": tuple(
        CaseSpec(f"object_{attribute}", f"simile_{attribute}", "influencing", None, 10)
        for attribute in ("genre", "heat", "size", "color", "price")
    ),
}


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

    def markdown(self) -> str:
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
    rows = []
    for word in present:
        canonical = domain.words[domain.index(word)]
        top = pair.top_influenced(canonical, k) if influenced else pair.top_influencing(canonical, k)
        rows.append(CaseRow(canonical, tuple(top), right_answers(reference_pairs, canonical, influenced)))
    return CaseTable(pair.source_name, pair.target_name, pair.model_name, pair.config.estimator, direction, k,
                     tuple(rows), tuple(w for w in chosen if w not in present))


def right_answers(reference_pairs, word: str, influenced: bool) -> tuple[str, ...]:
    """A subject's objects (influenced), or the subjects that have `word` among their objects (influencing)."""
    if not reference_pairs:
        return ()
    if influenced:
        return tuple(obj for subject, objects in reference_pairs if subject == word for obj in objects)
    return tuple(subject for subject, objects in reference_pairs if word in objects)


def save_case_tables(tables: Sequence[CaseTable], directory) -> None:
    """cases.md (one table after another), cases.csv (one line per row word and rank) and cases.json."""
    with staged_directory(directory) as out:
        (out / "cases.md").write_text("\n\n".join(t.markdown() for t in tables) + "\n", encoding="utf-8")
        write_csv(out / "cases.csv", ["source", "target", "direction", "row_word", "rank", "word", "weight", "right"], [
            [t.source, t.target, t.direction, row.word, rank, word, weight, word in row.right]
            for t in tables for row in t.rows for rank, (word, weight) in enumerate(row.top, 1)
        ])
        write_json(out / "cases.json", [t.summary() for t in tables])


def measure_cases(lm, registry, specs: Sequence[CaseSpec], inputs: Sequence[str], config, **collect_options) -> list[CaseTable]:
    """Fit each spec's prompt pair (tables are cached and shared) and build its case table, marking reference answers."""
    tables = []
    for spec in specs:
        source, target = registry_prompt(registry, spec.source, lm.tokenizer), registry_prompt(registry, spec.target, lm.tokenizer)
        reference = registry.reference_for(registry.prompt(spec.source), registry.prompt(spec.target))
        pair = measure_pair(lm, source, target, inputs, config, **collect_options)
        tables.append(case_table(pair, spec.direction, words=spec.words, k=spec.k, reference_pairs=reference.pairs if reference else None))
    return tables
