"""Ours, in no paper: does the capitals o-vector do to capital logits what lincorr's W predicts?

For each country s of the `country->capital` reference (o-vector sources left out), the copy
context of s is run with and without the capitals o-vector added at `mlp[layer]`; the o-vector's
effect is the change of the capital-domain logits, `effect[s] = logits_with - logits_without`
(`[n_capital]`). W's prediction for s is its row `W[s, :]`, fitted by lincorr between the `country`
prompt ("X lives in the country of") and the `capital` prompt ("X lives in the capital city of")
on vocabulary inputs: how the capital logits move when the country-s logit rises. Both are
centred over subjects (the part every country shares, e.g. "capitals in general go up", is
removed), and the number is the mean over subjects of Pearson r between s's centred effect and
s's centred W row. The control is the same with W's rows shuffled among subjects; `p_value` is
scipy's one-sided permutation test of that pairing (the observed mean r counted among the shuffles
it is compared with; every pairing, and no added count, once the shuffles asked for reach them all).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar
import time

import numpy as np
import torch

from lincorr.errors import LincorrError
from lincorr.collection import CollectSettings
from lincorr.fit import FitConfig, fit_relation
from lincorr.studies.vectors.arithmetic import OVECTOR_SCALE, check_layer, o_vectors, pair_order
from lincorr.tasks import COPY_TEMPLATE, bind_task
from lincorr.internals import Patch, mlp, run
from lincorr.knowledge import TaskSpec
from lincorr.metrics import instancewise_pearson
from lincorr.models import LM
from lincorr.outputs import staged_directory, write_csv, write_json
from lincorr.results import Stored, record
from lincorr.relations import RelationSpec
from lincorr.templates import fill

__all__ = ["CAPITALS", "OVectorWResult", "ovector_w"]

CAPITALS = RelationSpec("country", "capital", "Country->Capital", "country->capital")


@dataclasses.dataclass(frozen=True)
class OVectorWResult(Stored):
    """Per subject, the o-vector's effect on the target-domain logits against W's row for that subject.

    `effect` and `w_rows` are `[n_subjects, n_domain]`, rows in `subjects` order, columns in `domain` order;
    `r` is `[n_subjects]`, Pearson r of each subject's centred effect and centred W row.
    """

    study: ClassVar[str] = "ovector-w"

    task: str
    relation: str
    model: str
    model_fingerprint: str
    layer: int
    scale: float
    subjects: tuple[str, ...]
    right: tuple[tuple[str, ...], ...]  # each subject's right target words
    domain: tuple[str, ...]
    effect: np.ndarray
    w_rows: np.ndarray
    r: np.ndarray
    control_r_means: np.ndarray  # [n_shuffles] mean r with W's rows shuffled among subjects
    p_value: float  # share of those shuffles (the observed pairing counted among them) reaching the observed mean r
    w_labelwise_r: float  # how well W predicts the target logits on held-out inputs (lincorr fit)
    settings: dict
    seconds: float

    @property
    def r_mean(self) -> float:
        return float(np.nanmean(self.r))

    @property
    def control_r_mean(self) -> float:
        return float(self.control_r_means.mean())

    def hits(self, scores: np.ndarray) -> float:
        """Share of subjects whose highest-scoring domain column is one of their right targets."""
        return float(np.mean([self.domain[int(row.argmax())] in right for row, right in zip(scores, self.right)]))

    def summary(self) -> dict:
        """The JSON contract of `lincorr ovector-w --json`."""
        return {
            "task": self.task, "relation": self.relation, "model": self.model, "layer": self.layer, "scale": self.scale,
            "n_subjects": len(self.subjects), "n_domain": len(self.domain), "r_mean": self.r_mean,
            "control_r_mean": self.control_r_mean, "control_r_95": float(np.quantile(self.control_r_means, 0.95)),
            "p_value": self.p_value, "n_shuffles": len(self.control_r_means), "effect_hit1": self.hits(self.effect),
            "w_hit1": self.hits(self.w_rows), "w_labelwise_r": self.w_labelwise_r, "seed": self.settings["seed"],
            "seconds": self.seconds,
        }

    def rows(self) -> list[list]:
        """Per subject: its right targets, r, and the domain words the effect and W raise most."""
        return [[subject, " / ".join(right), float(r), self.domain[int(effect.argmax())], self.domain[int(w.argmax())]]
                for subject, right, r, effect, w in zip(self.subjects, self.right, self.r, self.effect, self.w_rows)]

    def text(self) -> str:
        """The number, its control and the hit rates."""
        s = self.summary()
        return "\n".join([
            f"{self.task} o-vector at mlp[{self.layer}] x {self.scale:g} against W of {self.relation} on {self.model} "
            f"({s['n_subjects']} subjects, {s['n_domain']} target words; W's own label-wise r {self.w_labelwise_r:.2f})",
            f"mean r(effect, W row), same subject:   {s['r_mean']:.3f}",
            f"W's rows shuffled among subjects:       {s['control_r_mean']:.3f} (95th percentile {s['control_r_95']:.3f}, "
            f"p = {s['p_value']:.3g} over {s['n_shuffles']} shuffles)",
            f"top target word right: o-vector effect {s['effect_hit1']:.2f}, W row {s['w_hit1']:.2f}",
        ])

    def save(self, directory) -> None:
        """ovector_w.json, ovector_w.csv (one row per subject) and ovector_w.png; written whole or not at all."""
        from lincorr.plots import bar_plot

        with staged_directory(directory) as out:
            record(out, self, model_fingerprint=self.model_fingerprint, settings=self.settings)
            write_json(out / "ovector_w.json", self.summary())
            write_csv(out / "ovector_w.csv", ["subject", "right", "r", "top_effect_word", "top_w_word"], self.rows())
            bar_plot(["same subject", "W rows shuffled"], {"mean r(effect, W row)": [self.r_mean, self.control_r_mean]},
                     out / "ovector_w.png", f"{self.task} o-vector vs W, {self.relation}, {self.model}", y_label="mean Pearson r")


def ovector_w(lm: LM, registry, task: TaskSpec, layer: int, *, relation: RelationSpec = CAPITALS, scale: float = OVECTOR_SCALE,
              n_source: int = 8, n_inputs: int = 1000, fit: FitConfig = FitConfig(estimator="ridge", alpha="cv", n_boot=100),
              n_shuffles: int = 1000, seed: int = 0, batch_size: int = 16,
              settings: CollectSettings = CollectSettings()) -> OVectorWResult:
    """Compare the effect of `task`'s o-vector at `mlp[layer]` on `relation`'s target logits with W's rows (module docstring).

    The o-vector is made as `vector_arithmetic.ovector` makes it (same seed, same pool); W comes
    from `fit_relation` (ridge, cross-validated penalty, `n_inputs` vocabulary inputs, cached tables).
    """
    started = time.perf_counter()
    check_layer(lm, layer, "o-vector layer")
    bound_task = bind_task(task, lm.tokenizer)
    vectors = o_vectors(lm, bound_task, pair_order(bound_task, seed)[:3 * n_source], seed=seed, batch_size=batch_size)
    sources = {bound_task.pairs[i].argument for i in vectors.sources(n_source)}
    bound = fit_relation(lm, registry, relation, n_inputs=n_inputs, fit=fit, settings=settings)
    rows = [row for row in bound.columns if bound.source.domain.words[row] not in sources]
    if len(rows) < 3:
        raise LincorrError(f"only {len(rows)} subjects of {bound.reference} are left for this tokenizer; the comparison needs at least 3")
    subjects = [bound.source.domain.words[row] for row in rows]
    prompts = [fill(COPY_TEMPLATE, subject) for subject in subjects]
    token_ids = torch.tensor(bound.target.domain.token_ids)
    added = Patch(mlp(layer), torch.from_numpy(scale * vectors.mean(layer, n_source)), mode="add")
    without, with_vector = (run(lm, prompts, token_ids=token_ids, interventions=i, batch_size=batch_size).logits
                            for i in ((), [added]))
    effect = (with_vector - without).float().cpu().numpy()
    w_rows = bound.fit.W[rows]
    effect_centred, w_centred = effect - effect.mean(0), w_rows - w_rows.mean(0)
    control = shuffled_rows_test(w_centred, effect_centred, n_shuffles, seed)
    target_words = bound.target.domain.words
    return OVectorWResult(
        task=task.name, relation=bound.label, model=lm.name, model_fingerprint=lm.fingerprint, layer=layer, scale=scale,
        subjects=tuple(subjects), right=tuple(tuple(target_words[c] for c in bound.columns[row]) for row in rows),
        domain=tuple(target_words), effect=effect, w_rows=w_rows, r=instancewise_pearson(w_centred, effect_centred),
        control_r_means=control.null_distribution, p_value=float(control.pvalue), w_labelwise_r=float(bound.fit.summary()["labelwise_r_mean"]),
        settings={"layer": layer, "scale": scale, "n_source": n_source, "n_inputs": n_inputs, "estimator": fit.estimator,
                  "alpha": fit.alpha, "n_shuffles": n_shuffles, "seed": seed, "relation": relation.label},
        seconds=time.perf_counter() - started,
    )


def shuffled_rows_test(w_rows: np.ndarray, effect: np.ndarray, n_shuffles: int, seed: int):
    """scipy's permutation test of the mean r between each subject's W row and its effect (`[n_subjects, n_domain]` each).

    The null pairs W's rows with other subjects' effects, one seeded shuffle at a time, so a seed gives the
    same shuffles whatever `n_shuffles` is.
    """
    from scipy.stats import permutation_test

    def mean_r(order: np.ndarray) -> float:
        return float(np.nanmean(instancewise_pearson(w_rows[order], effect)))

    return permutation_test((np.arange(len(w_rows)),), mean_r, permutation_type="pairings", alternative="greater", vectorized=False,
                            n_resamples=n_shuffles, batch=1, random_state=np.random.default_rng(seed))
