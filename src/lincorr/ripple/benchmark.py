"""How well each predictor, read before an edit, tells which of its queries move: AUC and Spearman, clustered by edit.

The rows are one query each (plain dicts: the edit's index, each predictor's value, the answer's rank before and after
the edit and its log-probability change); an edit's queries share the edit's training run, so they are one cluster:
every interval comes from a bootstrap over edits, and the claims are judged with `lincorr reproduce`'s rules (two
one-sided tests of one estimator, `decisions.decide`) with the edits as units.

The claims are on the AUC: whether the implied answer becomes the model's answer (enters the top k) is the ripple effect
itself, and every predictor's direction is fixed before any data (more is likelier). Spearman with the change of
log-probability is shown beside, not judged: an answer with a low prior has the most room to rise, so the prior's rho is
negative by construction, and comparing signed rhos would score that against it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.stats import rankdata
from sklearn.metrics import roc_curve

from lincorr.reproduce.decisions import decide
from lincorr.reproduce.verdicts import bootstrap_greater

PRIOR, GRADSIM, CLARE = "prior", "GradSim", "CLaRE-style"
# GradSim as its authors' final script reads it: both gradients on the edited model. Shown beside the predictors, never
# claimed against: read after the edit, it tells a user nothing before editing.
GRADSIM_EDITED = "GradSim (edited model, the authors')"
W_PAPER, W_RIDGE = "W (ols, the paper's)", "W (ridge)"
PREDICTORS = (W_PAPER, W_RIDGE, GRADSIM, GRADSIM_EDITED, CLARE, PRIOR)
CLAIMED = (PRIOR, GRADSIM)  # the baselines W is claimed to beat
SUBSETS = {"known": "queries whose condition query the model answers (the second hop's answer its top-1 alone)",
           "all": "every query"}
# The smallest AUC gain over a baseline worth switching predictors for (lincorr's choice): a tenth of the distance from
# chance (0.5) to a perfect ranking.
INTEREST = 0.05
N_BOOT = 2000


def auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """The probability that a positive outscores a negative (ties count half): the Mann-Whitney U over n1·n0; NaN
    without both classes. scikit-learn's `roc_auc_score` gives the same (a test holds it) at many times the cost per
    call, which thousands of bootstrap resamples pay."""
    positives = labels.astype(bool)
    n1, n0 = int(positives.sum()), int((~positives).sum())
    if n1 == 0 or n0 == 0:
        return float("nan")
    ranks = rankdata(scores)
    return float((ranks[positives].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rho (Pearson's r of midranks); NaN where either side is constant or there are under 3 rows."""
    if x.size < 3:
        return float("nan")
    rx, ry = rankdata(x), rankdata(y)
    if rx.std() == 0 or ry.std() == 0:
        return float("nan")
    return float(np.corrcoef(rx, ry)[0, 1])


def improved(rows: Sequence[dict], top_k: int) -> np.ndarray:
    """1 where the implied answer entered the top `top_k` of its domain with the edit, 0 where it did not (queries
    already there before are not asked: NaN)."""
    return np.array([np.nan if row["rank_before"] <= top_k else float(row["rank_after"] <= top_k) for row in rows])


def clare_layers(rows: Sequence[dict]) -> tuple[list[float], dict[int, int]]:
    """Each row's CLaRE-style similarity at the layer chosen on the other edits' fold (edits split by the parity of their
    place in the file), the layer that best ranks the change of log-probability there; and the layer each fold used."""
    folds = np.array([row["edit"] % 2 for row in rows])
    similarities = np.array([row["clare_layers"] for row in rows])  # [n_rows, n_layers + 1]
    change = np.array([row["logprob_after"] - row["prior"] for row in rows])
    chosen: dict[int, int] = {}
    for fold in (0, 1):
        other = folds != fold
        rhos = [spearman(similarities[other, layer], change[other]) for layer in range(similarities.shape[1])]
        chosen[fold] = int(np.nanargmax(rhos)) if other.any() and not np.all(np.isnan(rhos)) else similarities.shape[1] - 1
    return [float(similarities[index, chosen[fold]]) for index, fold in enumerate(folds)], chosen


def statistics(values: dict[str, np.ndarray], change: np.ndarray, label: np.ndarray) -> dict[str, tuple[float, float]]:
    """Each predictor's (AUC for entering the top k, Spearman with the change of log-probability) on one set of rows."""
    asked = ~np.isnan(label)
    return {name: (auc(score[asked], label[asked]), spearman(score, change)) for name, score in values.items()}


def cluster_draws(edits: np.ndarray, n_boot: int, seed: int) -> list[np.ndarray]:
    """`n_boot` resamples of the rows, each drawing whole edits with replacement (an edit's queries stay together)."""
    rng = np.random.default_rng(seed)
    clusters = [np.flatnonzero(edits == edit) for edit in np.unique(edits)]
    return [np.concatenate([clusters[i] for i in rng.integers(0, len(clusters), len(clusters))]) for _ in range(n_boot)]


def interval(draws: np.ndarray) -> list[float | None]:
    finite = draws[np.isfinite(draws)]
    return [float(np.quantile(finite, 0.025)), float(np.quantile(finite, 0.975))] if finite.size >= 20 else [None, None]


def subset_benchmark(rows: Sequence[dict], top_k: int, n_boot: int, seed: int, family: int = 2) -> dict:
    """The predictors' AUC and Spearman with 95% cluster-bootstrap intervals, W's paired differences from each other
    predictor, and the two claims (W beats the prior, W beats GradSim) decided on the edits as units, each at 0.05 over
    the `family` of claims the run decides (Bonferroni)."""
    edits = np.array([row["edit"] for row in rows])
    values = {name: np.array([row[name] for row in rows], float) for name in PREDICTORS}
    change = np.array([row["logprob_after"] - row["prior"] for row in rows])
    label = improved(rows, top_k)
    observed = statistics(values, change, label)
    draws = [statistics({n: v[d] for n, v in values.items()}, change[d], label[d]) for d in cluster_draws(edits, n_boot, seed)]
    boot = {name: np.array([[draw[name][0], draw[name][1]] for draw in draws]) for name in PREDICTORS}  # [n_boot, 2]
    table = [{"predictor": name, "auc": observed[name][0], "auc_ci95": interval(boot[name][:, 0]),
              "spearman": observed[name][1], "spearman_ci95": interval(boot[name][:, 1])} for name in PREDICTORS]
    differences = [{"predictor": name, "auc_difference": observed[W_PAPER][0] - observed[name][0],
                    "auc_difference_ci95": interval(boot[W_PAPER][:, 0] - boot[name][:, 0]),
                    "spearman_difference": observed[W_PAPER][1] - observed[name][1],
                    "spearman_difference_ci95": interval(boot[W_PAPER][:, 1] - boot[name][:, 1])}
                   for name in PREDICTORS if name != W_PAPER]
    n_edits = int(np.unique(edits).size)
    claims = []
    for baseline in CLAIMED:
        test = bootstrap_greater(observed[W_PAPER][0] - observed[baseline][0], boot[W_PAPER][:, 0] - boot[baseline][:, 0],
                                 f"AUC of W minus that of {baseline}", interest=INTEREST, units=n_edits, unit="edits")
        claims.append({"claim": f"W tells better than {baseline} which implied answers the edit makes the model's answer",
                       "decision": decide(test, claims=family).summary()})
    others = [row for row in rows if row["held_answer"] != row["answer"]]
    return {"n_queries": len(rows), "n_edits": n_edits, "n_asked": int((~np.isnan(label)).sum()),
            "n_entered_top_k": int(np.nansum(label)), "n_held_other": len(others),
            "n_held_displaced": sum(row["held_rank_after"] > 1 for row in others), "predictors": table, "differences": differences, "claims": claims,
            "roc": roc_curves(values, label), "w_and_change": {"w": values[W_PAPER].tolist(), "change": change.tolist()}}


def roc_curves(values: dict[str, np.ndarray], label: np.ndarray) -> dict[str, dict[str, list[float]]]:
    """Each predictor's ROC curve for entering the top k (false and true positive rates), over the queries asked; empty
    without both outcomes."""
    asked = ~np.isnan(label)
    if len(np.unique(label[asked])) < 2:
        return {}
    curves = {}
    for name, score in values.items():
        false_positive, true_positive, _ = roc_curve(label[asked], score[asked])
        curves[name] = {"fpr": false_positive.tolist(), "tpr": true_positive.tolist()}
    return curves


def benchmark(rows: Sequence[dict], top_k: int = 1, n_boot: int = N_BOOT, seed: int = 0) -> dict:
    """`subset_benchmark` on the queries whose second hop the model knows and on all, after the CLaRE-style layer is chosen
    by cross-fitting; rows where a predictor is undefined (a zero gradient) are counted and left out."""
    scored, layers = clare_layers(rows)
    complete = [{**row, CLARE: value} for row, value in zip(rows, scored)]
    complete = [row for row in complete if all(np.isfinite(row[name]) for name in PREDICTORS)]
    subsets = {"known": [row for row in complete if row["condition_rank"] == 1], "all": complete}
    family = len(CLAIMED) * sum(bool(subset) for subset in subsets.values())
    return {"top_k": top_k, "interest": INTEREST, "n_boot": n_boot, "clare_layers": {f"fold {fold}": layer for fold, layer in layers.items()},
            "n_undefined": len(rows) - len(complete), "family": family,
            "subsets": {name: {"rows": SUBSETS[name], **(subset_benchmark(subset, top_k, n_boot, seed, family) if subset else
                                                          {"n_queries": 0})} for name, subset in subsets.items()}}
