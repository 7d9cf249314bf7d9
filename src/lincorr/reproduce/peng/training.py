"""The steps behind Peng et al.'s training claims (§4-6, Appendix K): gradients, generalization, the ablation, subwords.

Training is seeded, so a finished claim stored by the runner is what a rerun would compute. The
paper trains every parameter with AdamW at 5e-6 (`PAPER_PRESET`); lincorr's default trains the
blocks at 3e-4 until every taught fact is learned; a claim's `presets` say which run, the first
one judged.
"""

from __future__ import annotations

import numpy as np

from lincorr.paper import paper_table
from lincorr.relations import RelationSpec
from lincorr.reproduce.step import Context, Measured, NotApplicable
from lincorr.reproduce.verdicts import Test, any_of, fisher_greater, mcnemar_gain, paired_greater, ranks_greater
from lincorr.studies.training.ablation import AblationConfig, ablate, vocabulary_from_model
from lincorr.studies.training.generalization import DEFAULT_TRAIN, PAPER_PRESET, GeneralizationConfig, measure_generalization
from lincorr.studies.training.gradients import GradientConfig, measure_table4
from lincorr.studies.training.subwords import measure_subwords

PRESETS = {"paper": PAPER_PRESET.apply(DEFAULT_TRAIN), "lincorr": DEFAULT_TRAIN}


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
    tests = [Test(f"{row.label}: centred r vs {config.n_control} row-shuffled W (permutation)", row.centred_gradient_r - row.centred_control_r,
                  row.centred_p_value, row.centred_gradient_r > row.centred_control_r) for row in table.rows]
    text = "; ".join(f"{label} gradient r {v['gradient_r']:.2f} (shuffled W {v['control_r']:.2f}), centred {v['centred_gradient_r']:.2f} "
                     f"(p {v['centred_p']:.3f})" for label, v in ours.items())
    return Measured({"relations": ours, "skipped": dict(table.skipped)}, text, any_of(tests, "permutation tests"))


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
    results = generalization_runs(ctx, preset)
    outcomes = [o for result in results for o in result.outcomes]
    ours = {r.label: {"generalization_rate": round(r.summary()["generalization_rate"], 3), "rate_before": round(r.summary()["rate_before"], 3),
                      "random_baseline": round(r.random_baseline(), 4), "source_learned": round(r.summary()["source_learned_rate"], 3),
                      "n_facts": len(r.outcomes)} for r in results}
    return ours, mcnemar_gain([o.generalized_before for o in outcomes], [o.generalized for o in outcomes], "the reference answer")


def generalization(ctx: Context) -> Measured:
    """Tables 5: teach source facts about fresh names; the target answer becomes the reference more often than it stops being (McNemar)."""
    presets = list(ctx.settings.get("presets", ("paper", "lincorr")))
    measured = {preset: generalization_test(ctx, preset) for preset in presets}
    ours = {preset: rows for preset, (rows, _) in measured.items()}
    text = "; ".join(f"{preset}: " + ", ".join(f"{label} {v['generalization_rate']:.0%} (before {v['rate_before']:.0%}, random "
                                                f"{v['random_baseline']:.1%})" for label, v in rows.items()) for preset, rows in ours.items())
    variant = measured["lincorr"][1] if presets[0] != "lincorr" and "lincorr" in measured else None
    return Measured(ours, text, measured[presets[0]][1], variant,
                    "" if presets[0] == "paper" else "run with lincorr's training only at this budget")


def learned_outcomes(ctx: Context) -> list:
    preset = list(ctx.settings.get("presets", ("paper",)))[0]
    return [o for result in generalization_runs(ctx, preset) for o in result.outcomes if o.learned]


def weights(ctx: Context) -> Measured:
    """Fig. 5: facts that generalize have a larger W[s, ref] than those that do not (Mann-Whitney)."""
    outcomes = learned_outcomes(ctx)
    right = [o.w_ref for o in outcomes if o.generalized]
    wrong = [o.w_ref for o in outcomes if not o.generalized]
    ours = {"n_learned": len(outcomes), "n_generalized": len(right), "w_ref_generalized": round(float(np.mean(right)), 4) if right else None,
            "w_ref_not": round(float(np.mean(wrong)), 4) if wrong else None}
    return Measured(ours, f"W[s,ref] {ours['w_ref_generalized']} when generalized ({len(right)}) vs {ours['w_ref_not']} ({len(wrong)})",
                    ranks_greater(right, wrong, "W[s,ref] of generalized vs other learned facts"))


def hallucination(ctx: Context) -> Measured:
    """Table 6: where a learned fact does not generalize, W prefers the answer generated over the reference (W[s,gen] > W[s,ref])."""
    wrong = [o for o in learned_outcomes(ctx) if not o.generalized]
    ours = {"n_hallucinated": len(wrong), "w_gen_mean": round(float(np.mean([o.w_gen for o in wrong])), 4) if wrong else None,
            "w_ref_mean": round(float(np.mean([o.w_ref for o in wrong])), 4) if wrong else None}
    return Measured(ours, f"{len(wrong)} learned facts that did not generalize: W[s,gen] {ours['w_gen_mean']} vs W[s,ref] {ours['w_ref_mean']}",
                    paired_greater([o.w_gen for o in wrong], [o.w_ref for o in wrong], "W[s,gen] vs W[s,ref]"))


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
                                                                   "real vs shuffled mapping"))


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
    return Measured(ours, text, fisher_greater(hits_at_5(whole), whole["n_subjects"], hits_at_5(sub), sub["n_subjects"], "Hit@5 whole words vs subwords"))


STEPS = {"gradients": gradients, "generalization": generalization, "weights": weights, "hallucination": hallucination,
         "ablation": ablation, "subwords": subwords}
