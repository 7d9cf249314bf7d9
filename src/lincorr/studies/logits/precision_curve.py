"""W precision as the inputs grow: Hit@Top-N of one relation with W fitted on the first N inputs, for several N."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import ClassVar

from lincorr.collection import CollectSettings, LogitTable, collect
from lincorr.errors import LincorrError
from lincorr.fit import FitConfig
from lincorr.models import LM
from lincorr.outputs import settings_key, staged_directory, write_csv, write_json
from lincorr.prompts import registry_prompts
from lincorr.relations import ReferenceFile, RelationSpec
from lincorr.results import Stored, record
from lincorr.studies.logits.precision import KS, PrecisionResult, judged_relation, precision_from_tables, rates_text

__all__ = ["PrecisionCurve", "precision_curve"]


@dataclasses.dataclass(frozen=True)
class PrecisionCurve(Stored):
    """How Hit@Top-N of one relation changes with the number of inputs N, for each estimator.

    Every N uses the first N inputs of one list (a vocabulary sample is a prefix-stable seeded
    order, so these are the inputs a run with `-n N` would draw), and every table is collected
    once, at the largest N.
    """

    label: str
    model_name: str
    ns: tuple[int, ...]
    rows: tuple[PrecisionResult, ...]  # one per (N, estimator) that could be fitted
    skipped: tuple[tuple[str, str], ...]  # ("N=1000 (ols)", reason)
    seconds: float
    model_fingerprint: str = ""
    configs: tuple[FitConfig, ...] = ()

    study: ClassVar[str] = "precision-curve"

    def summary(self) -> dict:
        """JSON: the Ns, one entry per (N, estimator) with the `PrecisionResult.summary()` numbers, and what was skipped."""
        return {"label": self.label, "model": self.model_name, "ns": list(self.ns), "rows": [row.summary() for row in self.rows],
                "skipped": [{"setting": setting, "reason": reason} for setting, reason in self.skipped], "seconds": self.seconds}

    def text(self) -> str:
        """Aligned text: one line per N and estimator."""
        lines = [f"{self.label} on {self.model_name}: Hit@Top-N of W against the reference as the inputs grow",
                 "      N  estimator  r      influenced @1/@3/@5  influencing @1/@3/@5  chance@1"]
        for row in self.rows:
            lines.append(f"{row.n_inputs:7d}  {row.estimator:<9}  {row.labelwise_r_mean:5.2f}  {rates_text(row.hit_influenced):<19}  "
                         f"{rates_text(row.hit_influencing):<20}  {row.chance_influenced[1]:.2f}/{row.chance_influencing[1]:.2f}")
        lines += [f"not fitted: {setting}: {reason}" for setting, reason in self.skipped]
        return "\n".join(lines)

    def save(self, directory) -> None:
        """precision_curve.json, precision_curve.csv and precision_curve.png (Hit@1 against N); written whole or not at all."""
        from lincorr.plots import layer_curves

        with staged_directory(directory) as out:
            record(out, self, model_fingerprint=self.model_fingerprint,
                   settings={"ns": list(self.ns), "fits": [settings_key(c) for c in self.configs]})
            write_json(out / "precision_curve.json", self.summary())
            write_csv(out / "precision_curve.csv",
                      ["n_inputs", "estimator", "alpha", "labelwise_r_mean", *(f"hit_influenced_{k}" for k in KS),
                       *(f"hit_influencing_{k}" for k in KS), "chance_influenced_1", "chance_influencing_1"],
                      [[r.n_inputs, r.estimator, r.alpha, r.labelwise_r_mean, *(r.hit_influenced[k] for k in KS),
                        *(r.hit_influencing[k] for k in KS), r.chance_influenced[1], r.chance_influencing[1]] for r in self.rows])
            curves, dashed, colours = {}, [], {}
            for number, estimator in enumerate(dict.fromkeys(row.estimator for row in self.rows)):
                rows = [row for row in self.rows if row.estimator == estimator]
                curves[f"{estimator}, influenced"] = ([r.n_inputs for r in rows], [r.hit_influenced[1] for r in rows])
                curves[f"{estimator}, influencing"] = ([r.n_inputs for r in rows], [r.hit_influencing[1] for r in rows])
                dashed.append(f"{estimator}, influencing")
                colours[f"{estimator}, influenced"] = colours[f"{estimator}, influencing"] = f"C{number}"
            if self.rows:
                chance = self.rows[0]
                curves["chance (influenced)"] = (list(self.ns), [chance.chance_influenced[1]] * len(self.ns))
                dashed.append("chance (influenced)")
                colours["chance (influenced)"] = "grey"
            layer_curves(curves, out / "precision_curve.png", f"{self.label} on {self.model_name}: Hit@1 of W against N "
                         "(solid: influenced, dashed: influencing)", y_label="Hit@1", x_label="inputs N (half fit W)", dashed=dashed,
                         colours=colours)


def precision_curve(
    lm: LM,
    registry,
    relation: RelationSpec,
    inputs: Sequence[str],
    ns: Sequence[int],
    configs: Sequence[FitConfig],
    *,
    reference_file: ReferenceFile | None = None,
    settings: CollectSettings = CollectSettings(),
) -> PrecisionCurve:
    """Hit@Top-N of `relation` with W fitted on the first N of `inputs`, for each N in `ns` and each estimator config.

    `inputs` must hold at least max(ns) inputs; both prompts are collected once over the first
    max(ns) (`settings` say how). An (N, estimator) that cannot be fitted
    (ols with fewer training inputs than source words) is skipped with the reason.
    """
    ns = tuple(sorted(set(ns)))
    if len(inputs) < ns[-1]:
        raise LincorrError(f"the N curve needs {ns[-1]} inputs and the input list has {len(inputs)}; lower the largest N or give more inputs")
    started = time.perf_counter()
    prompts, missing = registry_prompts(registry, (relation.source, relation.target), lm.tokenizer)
    if missing:
        raise LincorrError("; ".join(reason for _, reason in missing))
    bound = judged_relation(registry, relation, prompts[relation.source], prompts[relation.target], reference_file)
    tables = collect(lm, prompts, list(inputs[:ns[-1]]), settings)
    rows: list[PrecisionResult] = []
    skipped: list[tuple[str, str]] = []
    for n in ns:
        first = {name: first_inputs(table, n) for name, table in tables.items()}
        for config in configs:
            try:
                config.check_sizes(n, len(bound.source.domain))
                rows.extend(precision_from_tables(bound, first, [config], model_name=lm.name, reference_file=reference_file))
            except LincorrError as error:
                skipped.append((f"N={n} ({config.label})", str(error)))
    return PrecisionCurve(relation.label, lm.name, ns, tuple(rows), tuple(skipped), time.perf_counter() - started, lm.fingerprint,
                          tuple(configs))


def first_inputs(table: LogitTable, n: int) -> LogitTable:
    """The table over its first `n` inputs only."""
    return dataclasses.replace(table, values=table.values[:n], inputs=table.inputs[:n])
