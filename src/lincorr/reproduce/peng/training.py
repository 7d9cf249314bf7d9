"""The steps behind Peng et al.'s training claims (§4-6, Appendix K): gradients, generalization, the ablation, subwords.

Training is seeded, so a finished claim stored by the runner is what a rerun would compute. The
paper trains every parameter with AdamW at 5e-6 (`PAPER_PRESET`); lincorr's default trains the
blocks at 3e-4 until every taught fact is learned; a claim's `presets` say which run, the first
one judged.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.stats

from lincorr.fit import FitConfig, fit_relation
from lincorr.paper import paper_table
from lincorr.relations import RelationSpec
from lincorr.reproduce.step import Context, Measured, NotApplicable
from lincorr.reproduce.verdicts import Test, all_of, correlation_above, fisher_greater, paired_greater
from lincorr.studies.logits.precision import precision_fits, ranked_weights
from lincorr.studies.training.ablation import AblationConfig, ablate, vocabulary_from_model
from lincorr.studies.training.generalization import DEFAULT_TRAIN, PAPER_PRESET, GeneralizationConfig, measure_generalization
from lincorr.studies.training.gradients import GradientConfig, measure_table4
from lincorr.studies.training.subwords import measure_subwords

PRESETS = {"paper": PAPER_PRESET.apply(DEFAULT_TRAIN), "lincorr": DEFAULT_TRAIN}
# The W Fig. 5 and Table 6 read, the first judged: lincorr's ridge-std, whose top weights are precise where ols's on the
# same tables are not (Table 2), and the paper's ols beside it.
READING_FITS = ("ridge-std", "ols")


def gradients(ctx: Context) -> Measured:
    """Tables 4 and 8 (the settings' `table`): one optimiser step on source facts; dS @ W against dT, tested with each
    input's changes centred (a common shift cannot pass)."""
    table_name = str(ctx.settings.get("table", "table4"))
    relations = ctx.chosen({r.label: r for r in paper_table(table_name).relations()})
    config = GradientConfig(n_inputs=int(ctx.settings["n_inputs"]), n_step_facts=int(ctx.settings.get("n_step_facts", 32)),
                            n_eval=int(ctx.settings.get("n_eval", 200)))
    table = measure_table4(ctx.lm, ctx.registry, relations, config, ctx.collect)
    if not table.rows:
        raise NotApplicable(f"no relation of {table_name} can be expressed on this model: " + "; ".join(r for _, r in table.skipped))
    ours = {row.label: {"logit_r": round(row.logit_r, 3), "gradient_r": round(row.gradient_r, 3), "control_r": round(row.control_r, 3),
                        "centred_gradient_r": round(row.centred_gradient_r, 3), "centred_control_r": round(row.centred_control_r, 3),
                        "centred_p": row.centred_p_value} for row in table.rows}
    # The held-out inputs are the independent units of the centred r: its interval and power are Fisher's z over them.
    tests = [correlation_above(f"{row.label}: centred r vs {config.n_control} row-shuffled W (permutation)", row.centred_gradient_r,
                               row.centred_p_value, config.n_eval, "inputs", ctx.interest, row.centred_control_r) for row in table.rows]
    text = "; ".join(f"{label} gradient r {v['gradient_r']:.2f} (shuffled W {v['control_r']:.2f}), centred {v['centred_gradient_r']:.2f} "
                     f"(p {v['centred_p']:.3f})" for label, v in ours.items())
    return Measured({"relations": ours, "skipped": dict(table.skipped)}, text, all_of(tests, "relations' permutation tests"))


def generalization_runs(ctx: Context, preset: str) -> list:
    """The generalization study of each chosen Table 5 relation, trained with `preset`; shared by the claims of one reproduction."""
    relations = ctx.chosen({r.label: r for r in paper_table("table5").relations()})
    config = GeneralizationConfig(n_facts=int(ctx.settings.get("n_facts", 16)), seeds=tuple(ctx.settings.get("seeds", (0, 1, 2))),
                                  n_inputs=int(ctx.settings["n_inputs"]), train=PRESETS[preset])
    key = ("generalization", preset, tuple(r.label for r in relations), config)
    if key not in ctx.shared:
        ctx.shared[key] = [measure_generalization(ctx.lm, ctx.registry, relation, config, ctx.collect) for relation in relations]
    return ctx.shared[key]


def generalization_test(ctx: Context, preset: str) -> tuple[dict, Test]:
    """The runs of `preset`: each run's rise in the share of its facts whose target answer is the reference (after
    training less before), Student's t over the runs.

    Runs, not facts, are the units: the facts of one run are trained together, so they generalize or fail together
    (the facts of qwen2.5-coder-0.5b's four runs of eight generalized at 0.75, 0.125, 0.25 and 0.125), and no run
    shares a taught subject or name with another (`planned_facts`). The facts pooled would count one run's luck eight
    times. `between_runs_p` (chi-square of homogeneity of the runs' rates) is printed beside.
    """
    results = generalization_runs(ctx, preset)
    ours = {r.label: {"generalization_rate": round(r.summary()["generalization_rate"], 3), "rate_before": round(r.summary()["rate_before"], 3),
                      "random_baseline": round(r.random_baseline(), 4), "source_learned": round(r.summary()["source_learned_rate"], 3),
                      "n_facts": len(r.outcomes), "rate_per_run": [round(rate, 3) for rate in r.per_seed("generalized")],
                      "between_runs_p": between_runs_p(r.outcomes)} for r in results}
    after = [rate for r in results for rate in r.per_seed("generalized")]
    before = [rate for r in results for rate in r.per_seed("generalized_before")]
    return ours, paired_greater(after, before, "share of a run's facts answering the reference, after vs before training",
                                ctx.interest, "runs")


def between_runs_p(outcomes) -> float | None:
    """The p-value of the runs' generalization rates being one rate (chi-square of homogeneity); None with one run or no spread."""
    seeds = sorted({o.seed for o in outcomes})
    table = np.array([[sum(o.generalized for o in outcomes if o.seed == seed), sum(not o.generalized for o in outcomes if o.seed == seed)]
                      for seed in seeds])
    if len(seeds) < 2 or (table.sum(axis=0) == 0).any():
        return None
    return round(float(scipy.stats.chi2_contingency(table)[1]), 4)


def generalization(ctx: Context) -> Measured:
    """Tables 5: teach source facts about fresh names; the target answer becomes the reference more often than it stops being (McNemar)."""
    presets = list(ctx.settings.get("presets", ("paper", "lincorr")))
    measured = {preset: generalization_test(ctx, preset) for preset in presets}
    ours = {preset: rows for preset, (rows, _) in measured.items()}
    text = "; ".join(f"{preset}: " + ", ".join(f"{label} {v['generalization_rate']:.0%} of {v['n_facts']} facts in "
                                                f"{len(v['rate_per_run'])} runs (before {v['rate_before']:.0%}, random "
                                                f"{v['random_baseline']:.1%})" for label, v in rows.items()) for preset, rows in ours.items())
    variant = measured["lincorr"][1] if presets[0] != "lincorr" and "lincorr" in measured else None
    return Measured(ours, text, measured[presets[0]][1], variant,
                    "" if presets[0] == "paper" else "run with lincorr's training only at this budget")


def learned_outcomes(ctx: Context) -> list:
    """The facts of the claim's first preset whose source answer was learned, with the label of their relation: (label, outcome)."""
    preset = list(ctx.settings.get("presets", ("paper",)))[0]
    return [(result.label, o) for result in generalization_runs(ctx, preset) for o in result.outcomes if o.learned]


def reading_weights(ctx: Context) -> dict[str, dict[tuple, tuple[float, float]]]:
    """Per fit of READING_FITS, W[s, ref] and W[s, generated] of every learned fact (by relation, seed and entity), read
    from that W fitted on the relation's tables at the claim's N; a standardized W is read in standard units. Fitted once
    per reproduction."""
    relations = ctx.chosen({r.label: r for r in paper_table("table5").relations()})
    key = ("reading weights", repr(sorted(ctx.settings.items())))  # the facts trained under these settings
    if key not in ctx.shared:
        configs = {config.label: config for config in precision_fits(FitConfig(n_boot=10), READING_FITS[0])}
        learned = learned_outcomes(ctx)
        read: dict[str, dict] = {fit: {} for fit in READING_FITS}
        for fit, relation in ((fit, relation) for fit in READING_FITS for relation in relations):
            bound = fit_relation(ctx.lm, ctx.registry, RelationSpec(relation.source, relation.target),
                                 n_inputs=int(ctx.settings["n_inputs"]), fit=configs[fit], settings=ctx.collect)
            weights, sources, targets = ranked_weights(bound.fit), bound.source.domain, bound.target.domain
            for label, o in (pair for pair in learned if pair[0] == relation.label):
                row = weights[sources.index(o.source_answer)]
                read[fit][label, o.seed, o.entity] = (float(max(row[targets.index(word)] for word in o.references)),
                                                      float(row[targets.index(o.generated)]))
        ctx.shared[key] = read
    return ctx.shared[key]


def runs_of(keys: list[tuple]) -> dict[tuple, list[int]]:
    """The positions of `keys` ((relation, seed, entity) of learned facts) by training run: (relation, seed)."""
    runs: dict[tuple, list[int]] = {}
    for position, (label, seed, _) in enumerate(keys):
        runs.setdefault((label, seed), []).append(position)
    return runs


def within_run_auc(values: list[float], generalized: list[bool]) -> float | None:
    """Within one run: the chance that a generalized fact's value exceeds a non-generalized one's (ties half); None
    when the run's facts all went one way."""
    right = [v for v, g in zip(values, generalized) if g]
    wrong = [v for v, g in zip(values, generalized) if not g]
    if not right or not wrong:
        return None
    return float(np.mean([(r > w) + 0.5 * (r == w) for r in right for w in wrong]))


def weights(ctx: Context) -> Measured:
    """Fig. 5: within a training run, facts that generalize have a larger W[s, ref] than those that do not: each run's
    AUC (a generalized fact's W[s, ref] above a non-generalized one's), Student's t over the runs that have both (the
    facts of a run share its training; runs are the independent units). W fitted with ridge-std, ols beside."""
    learned = learned_outcomes(ctx)
    read = reading_weights(ctx)
    keys = [(label, o.seed, o.entity) for label, o in learned]
    generalized = [o.generalized for _, o in learned]
    runs = runs_of(keys)
    tests, ours = {}, {"n_learned": len(learned), "n_generalized": sum(generalized), "n_runs": len(runs)}
    for fit in READING_FITS:
        values = [read[fit][key][0] for key in keys]
        aucs = [auc for rows in runs.values()
                if (auc := within_run_auc([values[i] for i in rows], [generalized[i] for i in rows])) is not None]
        right = [v for v, g in zip(values, generalized) if g]
        wrong = [v for v, g in zip(values, generalized) if not g]
        ours[fit] = {"w_ref_generalized": round(float(np.mean(right)), 4) if right else None,
                     "w_ref_not": round(float(np.mean(wrong)), 4) if wrong else None,
                     "auc_per_run": [round(auc, 3) for auc in aucs]}
        tests[fit] = paired_greater(aucs, [0.5] * len(aucs), f"W[s,ref] ({fit}) of generalized vs other learned facts within a "
                                    "run (AUC)", ctx.interest, "runs")
    text = "; ".join(f"{fit} W[s,ref] {ours[fit]['w_ref_generalized']} when generalized ({ours['n_generalized']}) vs "
                     f"{ours[fit]['w_ref_not']} ({ours['n_learned'] - ours['n_generalized']}), within-run AUC over "
                     f"{len(ours[fit]['auc_per_run'])} runs with both" for fit in READING_FITS)
    return Measured(ours, text, tests[READING_FITS[0]], tests[READING_FITS[1]])


def hallucination(ctx: Context) -> Measured:
    """Table 6: a learned fact that does not generalize mostly has W[s,gen] above W[s,ref] ("wrong weight", 3 of the
    paper's 4 cases; the fourth a low prior): each run's share of such facts above 1/2, Student's t over the runs with a
    hallucinated fact (the facts of a run share its training). W fitted with ridge-std, ols beside."""
    wrong = [(label, o.seed, o.entity) for label, o in learned_outcomes(ctx) if not o.generalized]
    read = reading_weights(ctx)
    runs = runs_of(wrong)
    ours: dict[str, Any] = {"n_hallucinated": len(wrong), "n_runs": len(runs)}
    tests = {}
    for fit in READING_FITS:
        pairs = [read[fit][key] for key in wrong]
        above = [gen > ref for ref, gen in pairs]
        shares = [float(np.mean([above[i] for i in rows])) for rows in runs.values()]
        ours[fit] = {"wrong_weight": sum(above), "share_per_run": [round(share, 3) for share in shares],
                     "w_gen_mean": round(float(np.mean([gen for _, gen in pairs])), 4) if pairs else None,
                     "w_ref_mean": round(float(np.mean([ref for ref, _ in pairs])), 4) if pairs else None}
        tests[fit] = paired_greater(shares, [0.5] * len(shares), f"share of a run's hallucinated facts with W[s,gen] above "
                                    f"W[s,ref] ({fit})", ctx.interest, "runs") if pairs else None
    text = f"{len(wrong)} learned facts in {len(runs)} runs did not generalize; W[s,gen] above W[s,ref] in " + ", ".join(
        f"{ours[fit]['wrong_weight']} ({fit})" for fit in READING_FITS)
    return Measured(ours, text, tests[READING_FITS[0]], tests[READING_FITS[1]],
                    "" if wrong else "every learned fact generalized: no hallucination to read")


def ablation(ctx: Context) -> Measured:
    """Table 7: frozen embeddings, mean pooling, one fresh block; the real mapping generalizes more than the shuffled one (Fisher)."""
    vocabulary = vocabulary_from_model(ctx.lm.model, ctx.lm.name)
    relation = RelationSpec("city", "country")
    config = AblationConfig()
    runs = {mapping: [ablate(vocabulary, ctx.lm.tokenizer, relation, mapping=mapping, seed=seed, config=config, registry=ctx.registry)
                      for seed in ctx.settings.get("seeds", (0, 1, 2))] for mapping in ("real", "shuffled")}
    hits = {mapping: sum(round(r.generalization_rate * r.n_test) for r in results) for mapping, results in runs.items()}
    totals = {mapping: sum(r.n_test for r in results) for mapping, results in runs.items()}
    ours = {m: {"generalization": round(100 * hits[m] / totals[m], 2), "n_test": totals[m],
                "random_baseline": round(100 * float(np.mean([r.random_baseline for r in runs[m]])), 2)} for m in runs}
    text = ", ".join(f"{m} {v['generalization']:.1f}% (random {v['random_baseline']:.1f}%)" for m, v in ours.items())
    return Measured(ours, f"City->Country: {text}", fisher_greater(hits["real"], totals["real"], hits["shuffled"], totals["shuffled"],
                                                                   "real vs shuffled mapping", ctx.interest))


def hits_at_5(row: dict) -> int:
    return round(row["hit_at_5"] * row["n_subjects"])


def subwords(ctx: Context) -> Measured:
    """Table 18: W's Hit@Top-5 is higher for whole-word targets than for subword ones (Fisher)."""
    config = GeneralizationConfig(n_facts=int(ctx.settings.get("n_facts", 16)), seeds=tuple(ctx.settings.get("seeds", (0, 1, 2))),
                                  n_inputs=int(ctx.settings["n_inputs"]))
    result = measure_subwords(ctx.lm, ctx.registry, RelationSpec("city", "country"), config, ctx.collect)
    rows = {row["category"]: row for row in result.rows}
    ours = {c: {k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items() if k != "category"} for c, row in rows.items()}
    whole, sub = rows["whole_word"], rows["subword"]
    if not whole["n_subjects"] or not sub["n_subjects"]:
        return Measured(ours, "a token category has no reference subject on this tokenizer", None,
                        reason="whole-word or subword targets have no reference subject on this tokenizer")
    text = ", ".join(f"{c} r {v['labelwise_r']:.2f} Hit@5 {v['hit_at_5']:.2f} ({v['n_subjects']})" for c, v in ours.items())
    return Measured(ours, text, fisher_greater(hits_at_5(whole), whole["n_subjects"], hits_at_5(sub), sub["n_subjects"], "Hit@5 whole words vs subwords",
                                                ctx.interest))


STEPS = {"gradients": gradients, "generalization": generalization, "weights": weights, "hallucination": hallucination,
         "ablation": ablation, "subwords": subwords}
