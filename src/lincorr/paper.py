"""The papers' published numbers (paper.yaml), for the "paper" column beside ours.

Every table carries where it comes from and the model it was measured on, so a printed paper
number always says which model it belongs to. Algorithms never read this module.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any
from importlib import resources

import yaml

from lincorr import recording
from lincorr.errors import LincorrError
from lincorr.relations import RelationSpec


@dataclasses.dataclass(frozen=True)
class PaperRow:
    """One published row: the relation it measures and its numbers (keys as in paper.yaml)."""

    relation: RelationSpec
    values: Mapping[str, Any]  # as paper.yaml holds them

    def __getitem__(self, key: str):
        return self.values[key]


@dataclasses.dataclass(frozen=True)
class PaperTable:
    """A table or figure of the paper: where, on which model, how, and its rows."""

    name: str
    where: str
    model: str
    setting: str
    rows: tuple[PaperRow, ...]

    def relations(self) -> tuple[RelationSpec, ...]:
        """The relations of the rows, in the paper's order, each once."""
        return tuple(dict.fromkeys(row.relation for row in self.rows))

    def row(self, label: str) -> PaperRow | None:
        """The row of the relation labelled `label` ("City->Country"), or None."""
        return next((row for row in self.rows if row.relation.label == label), None)

    def rows_labelled(self, label: str) -> tuple[PaperRow, ...]:
        """Every row with this label (a case table such as "17" has several)."""
        return tuple(row for row in self.rows if row.relation.label == label)

    @property
    def column_title(self) -> str:
        """"paper (llama-3-8b)": the header of a paper column."""
        return f"paper ({self.model})"


@dataclasses.dataclass(frozen=True)
class PublishedValues:
    """A table of a paper that is not about prompt relations: its numbers keyed by the study's own settings."""

    name: str
    where: str
    model: str
    setting: str
    values: Mapping[str, Any]  # as paper.yaml holds them


@recording.cache
def paper_data() -> dict:
    return yaml.safe_load(resources.files("lincorr").joinpath("paper.yaml").read_text(encoding="utf-8"))


def paper_entry(name: str) -> dict:
    data = paper_data()
    if name not in data:
        raise LincorrError(f"no published table '{name}' in lincorr's data; known: {', '.join(data)}")
    return data[name]


@recording.cache
def published_values(name: str) -> PublishedValues:
    """A table keyed by settings ("feng_table2", "feng_table3"), lists read as tuples."""
    entry = paper_entry(name)

    def frozen(value):
        if isinstance(value, list):
            return tuple(value)
        return {k: frozen(v) for k, v in value.items()} if isinstance(value, dict) else value

    return PublishedValues(name, entry["where"], entry["model"], entry["setting"], frozen(entry["values"]))


@recording.cache
def paper_table(name: str) -> PaperTable:
    """A table of Peng et al. in paper.yaml by name ("table2", "table4", "table5", "table7", "table18", "cases")."""
    entry = paper_entry(name)
    rows = []
    for row in entry["rows"]:
        values = {k: v for k, v in row.items() if k not in ("label", "source", "target")}
        rows.append(PaperRow(RelationSpec(row["source"], row["target"], label=str(row["label"])), values))
    return PaperTable(name, entry["where"], entry["model"], entry["setting"], tuple(rows))
