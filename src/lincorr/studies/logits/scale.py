"""Scale (Fig. 4): correlation and W precision of the same relations across models of different sizes."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import ClassVar

from lincorr.bundled import size_series
from lincorr.collection import CollectSettings
from lincorr.fit import FitConfig
from lincorr.studies.logits.precision import KS, PrecisionTable, measure_precision
from lincorr.inputs import sample_vocab_inputs
from lincorr.models import LM, load_model
from lincorr.outputs import staged_directory, write_csv, write_json
from lincorr.relations import RelationSpec
from lincorr.results import Stored, record

__all__ = ["DEFAULT_RELATIONS", "ScalePoint", "ScaleResult", "measure_scale"]


# Fig. 4 contrasts a relation whose precision grows with size and one that stays hard.
DEFAULT_RELATIONS = (RelationSpec("city", "country", "City->Country"), RelationSpec("ceo", "company", "CEO->Company"))
# What a series of two sizes can show, printed with every such result.
TWO_POINT_NOTE = ("a series of two sizes shows which way each number moves from the smaller model to the larger, not a trend: "
                  "no shape, no rate, and no test over sizes; a model beside the series differs in more than size and is not counted")


@dataclasses.dataclass(frozen=True)
class ScalePoint:
    """One model's precision table, with its size; `in_series` when it belongs to the size series measured."""

    model_name: str
    n_parameters: int
    table: PrecisionTable
    in_series: bool = True


@dataclasses.dataclass(frozen=True)
class ScaleResult(Stored):
    """Precision tables of several models: the size series smallest first, then the models shown beside it."""

    study: ClassVar[str] = "scale"

    points: tuple[ScalePoint, ...]
    size_series: str | None = None  # the bundled size series measured (`bundled.size_series`), if one was

    @property
    def series_points(self) -> tuple[ScalePoint, ...]:
        """The points a claim about size reads: the series' own, or every model when no series was named."""
        return tuple(p for p in self.points if p.in_series)

    def rows(self) -> list[dict]:
        """One flat row per model, relation and estimator."""
        return [
            {"model": point.model_name, "n_parameters": point.n_parameters, "in_series": point.in_series, **row.summary()}
            for point in self.points for row in point.table.rows
        ]

    def series(self, estimator: str) -> dict[str, list[float]]:
        """Plot lines for one estimator: per relation, label-wise r and Hit@1/Hit@5 in both directions, one value per series model."""
        lines: dict[str, list[float]] = {}
        for point in self.series_points:
            for row in point.table.rows:
                if row.estimator != estimator:
                    continue
                for name, value in (
                    ("label-wise r", row.labelwise_r_mean), ("Hit@1 influenced", row.hit_influenced[1]),
                    ("Hit@5 influenced", row.hit_influenced[5]), ("Hit@1 influencing", row.hit_influencing[1]),
                ):
                    lines.setdefault(f"{row.label}: {name}", []).append(value)
        return {name: values for name, values in lines.items() if len(values) == len(self.series_points)}

    def summary(self) -> dict:
        """JSON: the models with their sizes and every precision row."""
        return {"models": [{"model": p.model_name, "n_parameters": p.n_parameters, "in_series": p.in_series,
                            "skipped": p.table.summary()["skipped"]} for p in self.points],
                "size_series": self.size_series, "note": self.note(), "rows": self.rows()}

    def note(self) -> str | None:
        """What the series can and cannot show, when it has two sizes."""
        return TWO_POINT_NOTE if self.size_series and len(self.series_points) == 2 else None

    def text(self) -> str:
        """Aligned text: one line per model, relation and estimator."""
        lines = [f"size series {self.size_series}; models marked * are shown beside it"] if self.size_series else []
        lines.append(f"{'model':<34} {'params':>8}  {'relation':<16} {'estimator':<9} {'r':>5}  influenced @1/@3/@5  influencing @1/@3/@5")
        for point in self.points:
            name = point.model_name if point.in_series else f"{point.model_name} *"
            for row in point.table.rows:
                lines.append(
                    f"{name:<34} {point.n_parameters / 1e6:7.0f}M  {row.label:<16} {row.estimator:<9} {row.labelwise_r_mean:5.2f}  "
                    + "  ".join(" / ".join(f"{rates[k]:.2f}" for k in KS) for rates in (row.hit_influenced, row.hit_influencing))
                )
        return "\n".join(lines + ([f"note: {self.note()}"] if self.note() else []))

    def save(self, directory) -> None:
        """scale.json, scale.csv and one scale_<estimator>.png per estimator; written whole or not at all."""
        from lincorr.plots import line_plot

        rows = self.rows()
        labels = [f"{p.model_name}\n{p.n_parameters / 1e6:.0f}M" for p in self.series_points]
        with staged_directory(directory) as out:
            # Every model is measured with the same settings; only the models differ.
            record(out, self, model_fingerprint={p.model_name: p.table.model_fingerprint for p in self.points},
                   settings=self.points[0].table.settings() if self.points else None)
            write_json(out / "scale.json", self.summary())
            header = ["model", "n_parameters", "label", "estimator", "labelwise_r_mean",
                      *(f"hit_influenced_{k}" for k in KS), *(f"hit_influencing_{k}" for k in KS)]
            write_csv(out / "scale.csv", header, [
                [r["model"], r["n_parameters"], r["label"], r["estimator"], r["labelwise_r_mean"],
                 *(r["hit_influenced"][str(k)] for k in KS), *(r["hit_influencing"][str(k)] for k in KS)]
                for r in rows
            ])
            for estimator in dict.fromkeys(r["estimator"] for r in rows):
                line_plot(labels, self.series(estimator), out / f"scale_{estimator}.png",
                          f"correlation and W precision by model size ({estimator})", y_label="r / Hit@N")


def measure_scale(
    model_specs: Sequence[str],
    registry,
    relations: Sequence[RelationSpec],
    n_inputs: int,
    configs: Sequence[FitConfig],
    *,
    series: str | None = None,
    seed: int = 0,
    load: Callable[[str], LM] = load_model,
    settings: CollectSettings = CollectSettings(),
) -> ScaleResult:
    """Load each model in turn (one in memory at a time), sample its own inputs, and measure the relations.

    With `series` (a bundled size series), its models are the series and `model_specs` are shown
    beside it, not counted in it; without, `model_specs` are the series. Each model draws `n_inputs`
    inputs from its own vocabulary with the same seed: models with different tokenizers cannot share
    a vocabulary sample (a series of one tokenizer draws the same inputs for every size).
    """
    members = size_series(series) if series else tuple(model_specs)
    beside = [spec for spec in model_specs if spec not in members] if series else []
    points = []
    for spec, in_series in [(spec, True) for spec in members] + [(spec, False) for spec in beside]:
        lm = load(spec)
        inputs = sample_vocab_inputs(lm.tokenizer, n_inputs, seed)
        table = measure_precision(lm, registry, relations, inputs, configs, settings=settings)
        points.append(ScalePoint(lm.name, sum(p.numel() for p in lm.model.parameters()), table, in_series))
        del lm
    return ScaleResult(tuple(sorted(points, key=lambda p: (not p.in_series, p.n_parameters))), series)
