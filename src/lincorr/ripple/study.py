"""`lincorr ripple`: every predictor read before each edit, the edit made, and the predictors benchmarked on what moved.

`measure_ripple` composes the stages: the edits' queries as hops with their answer domains (`hops`), W fitted once per
pair of prompts (`predictors.w_predictions`), then edit by edit (each stored in the cache as it finishes, so a killed run
resumes at the next edit) the prior, GradSim and CLaRE-style similarities and the edit's outcome (`outcomes`), and last
the benchmark over edits (`benchmark`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from typing import ClassVar

from lincorr.cache import stored_result
from lincorr.collection import CollectSettings
from lincorr.domains import Domain
from lincorr.errors import DataError
from lincorr.finetune import TrainConfig
from lincorr.models import LM
from lincorr.outputs import none_if_nan, settings_key, staged_directory, write_csv, write_json
from lincorr.progress import progress_bar
from lincorr.results import Stored, record
from lincorr.ripple.benchmark import CLARE, GRADSIM, GRADSIM_EDITED, N_BOOT, PREDICTORS, PRIOR, W_PAPER, benchmark
from lincorr.ripple.edits import Edit
from lincorr.ripple.hops import FIRST_HOP, Hop, answer_domains, asked_hops, domain_words, usable
from lincorr.ripple.outcomes import EDIT_TRAINING, constrained_layers, edit_outcomes
from lincorr.ripple.predictors import clare_similarities, grad_sims, gradient_parameters, prior, w_predictions

W_COST = "W (both fits)"  # the two fits of W share their logit tables: one cost


@dataclasses.dataclass(frozen=True)
class RippleConfig:
    """How W is fitted (vocabulary inputs, seed), how each edit is taught, and how the benchmark reads the outcomes."""

    n_inputs: int = 1000
    seed: int = 0
    training: str = "paper"  # or "constrained" (FT-L style): `outcomes.EDIT_TRAINING`
    phrasing: str = "dataset"  # or "registry": the registry's prompts about people in place of the dataset's sentences
    top_k: int = 1  # a query "moves" when its implied answer enters the top k of its domain
    n_boot: int = N_BOOT


@dataclasses.dataclass(frozen=True)
class RippleResult(Stored):
    """Each query's predictors and outcome, the benchmark over them, and what each predictor cost."""

    study: ClassVar[str] = "ripple"

    model_name: str
    model_fingerprint: str
    edits_file: str
    n_edits: int
    skipped: Mapping[str, int]  # queries left out, by reason
    rows: tuple[dict, ...]  # one per query scored
    fits: tuple[dict, ...]  # each W fitted: its pair of prompts and held-out label-wise r
    benchmark: dict
    seconds: Mapping[str, float]  # per predictor and for the edits, over the whole run
    gradient_parameters: str
    settings: Mapping[str, object] = dataclasses.field(default_factory=dict)

    def summary(self) -> dict:
        """The JSON of `lincorr ripple --json`: the benchmark, costs, counts and settings (the rows are in hops.csv)."""
        n_rows_edits = len({row["edit"] for row in self.rows})
        return {"model": self.model_name, "model_fingerprint": self.model_fingerprint, "edits_file": self.edits_file,
                "n_edits": self.n_edits, "n_edits_scored": n_rows_edits, "n_queries_scored": len(self.rows),
                "skipped": dict(self.skipped), "gradient_parameters": self.gradient_parameters,
                "seconds_per_edit": {name: seconds / max(n_rows_edits, 1) for name, seconds in self.seconds.items()},
                "w_fits": list(self.fits), "benchmark": self.benchmark, "settings": dict(self.settings)}

    def save(self, directory) -> None:
        """ripple.json (the summary), hops.csv (one row per query) and provenance.json."""
        columns = ["edit", "problem", "subject", "new_object", "relation", "answer", *PREDICTORS, f"{W_PAPER} rank",
                   "condition_rank", "rank_before", "rank_after", "logprob_after", "held_answer", "held_logprob", "held_rank_after",
                   "held_logprob_after", "learned"]
        with staged_directory(directory) as out:
            write_json(out / "ripple.json", self.summary())
            write_csv(out / "hops.csv", columns, [[cell(row.get(column)) for column in columns] for row in self.rows])
            record(out, self, model_fingerprint=self.model_fingerprint, settings=dict(self.settings))

    def text(self) -> str:
        """The predictor table on the queries whose second hop the model knows and on all, and the two claims."""
        return ripple_text(self.summary())


def cell(value):
    return none_if_nan(value) if isinstance(value, float) else value


def ripple_text(summary: dict) -> str:
    """The predictors' AUC and Spearman with their intervals per subset, each claim's verdict, and the costs."""
    lines = [f"ripple effects on {summary['model']}: {summary['n_queries_scored']} queries of {summary['n_edits_scored']} "
             f"edits scored (of {summary['n_edits']} read; left out: "
             + ("; ".join(f"{count} ({reason})" for reason, count in summary["skipped"].items()) or "none") + ")"]
    costs = summary["seconds_per_edit"]
    for name, subset in summary["benchmark"]["subsets"].items():
        lines.append(f"\n{subset['rows']}: {subset['n_queries']} queries")
        if not subset["n_queries"]:
            continue
        lines.append(f"  the implied answer entered the top {summary['benchmark']['top_k']} in {subset['n_entered_top_k']} of "
                     f"{subset['n_asked']} queries where it was not there; the model's own answer before the edit lost its "
                     f"place in {subset['n_held_displaced']} of the {subset['n_held_other']} where it was another")
        lines.append(f"  {'predictor':<22} {'AUC (enters top-k)':<24} {'Spearman with Δ log p':<26} s/edit")
        for row in subset["predictors"]:
            lines.append(f"  {row['predictor']:<22} {estimate(row['auc'], row['auc_ci95']):<24} "
                         f"{estimate(row['spearman'], row['spearman_ci95']):<26} {cost(costs, row['predictor']):.2f}")
        for claim in subset["claims"]:
            decision = claim["decision"]
            lines.append(f"  {claim['claim']}: {decision['verdict']} (AUC difference "
                         f"{estimate(decision['effect'], decision['interval'])} vs Δ = {decision['interest']:g})")
    lines.append(f"\nthe edit itself: {costs.get('edit', 0):.1f} s per edit")
    return "\n".join(lines)


def cost(costs: Mapping[str, float], predictor: str) -> float:
    return costs.get(W_COST if predictor.startswith("W ") else predictor, 0.0)


def estimate(value, bounds) -> str:
    if value is None or value != value:
        return "n/a"
    low, high = bounds or (None, None)
    shown = lambda x: "?" if x is None else f"{x:.2f}"  # noqa: E731
    return f"{value:.2f} [{shown(low)}, {shown(high)}]"


def scored_hops(edits: Sequence[Edit], domains: Mapping[str, Domain], hops: Sequence[Hop],
                skipped: Mapping[str, int]) -> tuple[list[Hop], dict[str, int]]:
    """The hops whose new object and answer this tokenizer can rank, and the left-out counts with theirs added."""
    counts = dict(skipped)
    kept = []
    for hop in hops:
        reason = usable(hop, domains)
        if reason is None:
            kept.append(hop)
        else:
            counts[reason] = counts.get(reason, 0) + 1
    if not kept:
        raise DataError(f"none of the {sum(len(edit.problems) for edit in edits)} queries of these edits can be scored on this "
                        f"model ({'; '.join(f'{n} {reason}' for reason, n in counts.items())}); give edits that change a country")
    return kept, counts


def measure_ripple(lm: LM, edits: Sequence[Edit], registry, config: RippleConfig = RippleConfig(), *, edits_file: str = "",
                   settings: CollectSettings = CollectSettings()) -> RippleResult:
    """Every predictor and the outcome of every country edit's queries, and the benchmark over them."""
    all_hops, skipped = asked_hops(edits, registry, config.phrasing)
    words = domain_words(all_hops, edits, registry)
    domains = answer_domains(words, lm.tokenizer)
    hops, skipped = scored_hops(edits, domains, all_hops, skipped)
    w_key = {"model": lm.fingerprint, "pairs": sorted({(*hop.pair, hop.relation) for hop in hops}),
             "hops": [(hop.new_object, hop.answer) for hop in hops],
             "domains": {name: list(domain.words) for name, domain in domains.items()}, "n_inputs": config.n_inputs,
             "seed": config.seed, "collection": settings_key(settings)}
    stage = stored_result("ripple-w", w_key, lambda: w_stage(lm, hops, domains, config, settings))
    w_scores, fits = stage["scores"], stage["fits"]
    seconds = {W_COST: stage["seconds"]}
    train = EDIT_TRAINING[config.training]
    if config.training == "constrained":
        train = constrained_layers(lm, train)
    train = dataclasses.replace(train, seed=config.seed)
    rows: list[dict] = []
    by_edit: dict[int, list[int]] = {}
    for index, hop in enumerate(hops):
        by_edit.setdefault(hop.edit, []).append(index)
    for edit, indices in progress_bar(by_edit.items(), desc="edits", unit="edit"):
        edit_hops = [hops[i] for i in indices]
        key = {"model": lm.fingerprint, "hops": [dataclasses.asdict(hop) for hop in edit_hops],
               "domains": {name: list(domains[name].words) for name in {FIRST_HOP, *(hop.relation for hop in edit_hops)}},
               "train": settings_key(train)}
        row = stored_result("ripple", key, lambda: measured_edit(lm, edit_hops, domains, train))
        for name, value in row["seconds"].items():
            seconds[name] = seconds.get(name, 0.0) + value
        for i, hop_row in zip(indices, row["hops"]):
            rows.append({**dataclasses.asdict(hops[i]), **w_scores[i], **hop_row, "learned": row["learned"]})
    return RippleResult(lm.name, lm.fingerprint, edits_file, len(edits), skipped, tuple(rows), tuple(fits),
                        benchmark(rows, config.top_k, config.n_boot, config.seed), seconds, gradient_parameters(lm)[0],
                        {**settings_key(config), "train": settings_key(train)})


def w_stage(lm: LM, hops: Sequence[Hop], domains: Mapping[str, Domain], config: RippleConfig, settings: CollectSettings) -> dict:
    """W's predictions for every hop and what fitting them took (stored with them, so that a resumed run reports the cost
    of the run that measured them, not of reading them back)."""
    started = time.perf_counter()
    scores, fits = w_predictions(lm, hops, domains, config.n_inputs, config.seed, settings)
    return {"scores": scores, "fits": fits, "seconds": time.perf_counter() - started}


def measured_edit(lm: LM, hops: Sequence[Hop], domains: Mapping[str, Domain], train: TrainConfig) -> dict:
    """One edit's queries: the prior, GradSim and CLaRE-style similarities before the edit, then the edit and its outcome,
    each stage timed."""
    clock = time.perf_counter()
    priors = [prior(lm, hop, domains) for hop in hops]
    seconds = {PRIOR: time.perf_counter() - clock}
    clock = time.perf_counter()
    gradsims = grad_sims(lm, hops)
    seconds[GRADSIM], clock = time.perf_counter() - clock, time.perf_counter()
    similarities = clare_similarities(lm, hops)
    seconds[CLARE], clock = time.perf_counter() - clock, time.perf_counter()
    outcome = edit_outcomes(lm, hops, [before["held_answer"] for before in priors], domains, train)
    seconds["edit"] = time.perf_counter() - clock - outcome["edited_gradsim_seconds"]
    seconds[GRADSIM_EDITED] = outcome["edited_gradsim_seconds"]
    return {"hops": [{**before, GRADSIM: gradsim, "clare_layers": layers, **after}
                     for before, gradsim, layers, after in zip(priors, gradsims, similarities, outcome["after"])],
            "learned": outcome["learned"], "steps": outcome["steps"], "seconds": seconds}


