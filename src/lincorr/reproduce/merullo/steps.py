"""The steps behind Merullo et al.'s claims (vector arithmetic): the logit lens, the o-vector by the paper's protocol and
lincorr's averaged variant, and the FFN ablation.

The chain is the paper's: a task's logit lens finds the block whose sub-layer makes the answer overtake the argument
(`LensResult.crossing_block`); that block is the o-vector's layer and the first ablated FFN, unless a claim's settings
name one (`layers: {task: block}`). Each task's lens and o-vector runs are computed once per reproduction and shared by
the claims that read them (`ctx.shared`); every o-vector run measures both contexts, so a task's copy and zero-shot
claims share it.
"""

from __future__ import annotations

import dataclasses

from lincorr.internals import layout
from lincorr.reproduce.step import Context, Measured, NotApplicable
from lincorr.reproduce.verdicts import Test, any_of, fisher_greater, paired_greater
from lincorr.studies.vectors.arithmetic import LensResult, OVectorResult, ffn_ablate, lens, other_task, ovector
from lincorr.studies.vectors.protocol import CONTEXTS, CONTROLS, easier_than, pair_order
from lincorr.tasks import bind_task, fewshot_prompts, score_prompts

TASKS = ("capitals", "past-tense", "uppercase")  # the paper's three tasks, by their registry names
PROTOCOLS = {"paper": "the paper's protocol", "averaged": "lincorr's averaged o-vector"}
LENS_SEED = 0  # the lens, the o-vectors and the ablation draw their pairs and demonstrations with this seed


def task_lens(ctx: Context, name: str) -> LensResult:
    """The logit lens of task `name` over `lens_pairs` few-shot prompts, computed once per reproduction."""
    n_pairs = int(ctx.settings.get("lens_pairs", 32))
    key = ("merullo_lens", name, n_pairs)
    if key not in ctx.shared:
        ctx.shared[key] = lens(ctx.lm, ctx.registry.task(name), n_pairs=n_pairs, seed=LENS_SEED)
    return ctx.shared[key]


def mechanism_block(found: LensResult) -> int | None:
    """The block of the lens crossing: the one whose sub-layer made it, else the block just before the stream where the
    answer first leads (it led already, below the lens floor, so no sub-layer flipped it); None when there is no crossing."""
    if found.crossing_block is not None:
        return found.crossing_block
    return found.crossing_layer - 1 if found.crossing_layer else None


def task_layer(ctx: Context, name: str) -> tuple[int, str]:
    """The FFN block of task `name`'s mechanism and where it comes from: the settings' `layers`, else the lens."""
    named = (ctx.settings.get("layers") or {}).get(name)
    if named is not None:
        return int(named), "set"
    found = task_lens(ctx, name)
    block = mechanism_block(found)
    if block is None:
        raise NotApplicable(f"the logit lens finds no crossing for {name} on this model, so no block to take the o-vector from")
    return block, "crossing block" if found.crossing_block is not None else "block before the crossing stream"


def lens_test(ctx: Context, name: str) -> tuple[dict, Test]:
    """Task `name`: the answer's RR lead over the argument, per prompt, at the output above its lead entering the crossing block
    (Wilcoxon), the direction holding only for a crossing in the second half of the model."""
    found, n_layers = task_lens(ctx, name), layout(ctx.lm).n_layers
    block = mechanism_block(found)
    ours = {"crossing_layer": found.crossing_layer, "crossing_block": found.crossing_block, "made_by": found.crossing_component,
            "n_layers": n_layers, "n_pairs": found.n_pairs, "accuracy": round(found.final_accuracy, 3)}
    if block is None:
        return ours, Test(f"{name}: no crossing of the answer over the argument", 0.0, 1.0, False)
    bound = bind_task(ctx.registry.task(name), ctx.lm.tokenizer)
    indices = pair_order(bound, LENS_SEED)[:found.n_pairs]
    scores = score_prompts(ctx.lm, bound, indices, fewshot_prompts(bound, indices, LENS_SEED), layers=[block, n_layers])
    lead = 1.0 / (scores.answer_rank + 1) - 1.0 / (scores.argument_rank + 1)  # [n_pairs, 2]: entering the block, output
    ours.update(lead_entering=round(float(lead[:, 0].mean()), 3), lead_output=round(float(lead[:, 1].mean()), 3))
    test = paired_greater(lead[:, 1], lead[:, 0], f"{name}: answer's RR lead over the argument at the output vs entering block {block}")
    mid_to_late = 2 * found.crossing_layer >= n_layers
    return ours, dataclasses.replace(test, name=f"{test.name}, crossing at resid[{found.crossing_layer}] of {n_layers}",
                                     direction_holds=test.direction_holds and mid_to_late)


def lens_claim(ctx: Context) -> Measured:
    """The logit lens: the argument comes first, then at a mid-to-late block the answer overtakes it (each task, Fisher-combined)."""
    measured = {name: lens_test(ctx, name) for name in ctx.settings.get("tasks", TASKS)}
    ours = {name: rows for name, (rows, _) in measured.items()}
    text = "; ".join(f"{name}: crossing resid[{v['crossing_layer']}] of {v['n_layers']} (by {v['made_by']}), answer lead "
                     f"{v.get('lead_entering', float('nan')):.2f} -> {v.get('lead_output', float('nan')):.2f}" for name, v in ours.items())
    return Measured(ours, text, any_of([test for _, test in measured.values()], "Wilcoxon tests"))


def ovector_run(ctx: Context, name: str, protocol: str) -> OVectorResult:
    """Task `name`'s o-vector by `protocol` at its mechanism block, on copy and zero-shot contexts, computed once per reproduction."""
    layer, _ = task_layer(ctx, name)
    n_pairs, n_source = int(ctx.settings.get("n_pairs", 16)), int(ctx.settings.get("n_source", 4))
    key = ("merullo_ovector", name, protocol, layer, n_pairs, n_source)
    if key not in ctx.shared:
        task = ctx.registry.task(name)
        ctx.shared[key] = ovector(ctx.lm, task, layer, control=other_task(task, ctx.registry), protocol=protocol, contexts=CONTEXTS,
                                  n_source=n_source, n_pairs=n_pairs, seed=LENS_SEED)
    return ctx.shared[key]


def context_row(result: OVectorResult, context: str) -> dict:
    """One context's accuracies, RRs and paired p-values of an o-vector run."""
    return next(row for row in result.by_context if row["context"] == context)


def over_every_control(result: OVectorResult, context: str) -> Test:
    """The o-vector right on more `context` contexts than each control (exact McNemar each; p the largest: every one must hold)."""
    row = context_row(result, context)
    best_control = max(row[f"accuracy_{key}"] for key in CONTROLS)
    shown = " / ".join(f"{row[f'accuracy_{key}']:.2f}" for key in CONTROLS)
    return Test(f"exact McNemar per control, largest p: {result.task} o-vector {row['accuracy_with']:.2f} vs none / other task / random "
                f"{shown} on {result.n_pairs} {context} contexts", row["accuracy_with"] - best_control, row["p_over_every_control"],
                row["accuracy_with"] > best_control)


def rounded_row(result: OVectorResult, context: str) -> dict:
    row = context_row(result, context)
    return {"layer": result.layer, "scale": result.scale, "n_pairs": result.n_pairs, "source": list(result.source_arguments)[:1],
            **{k: round(v, 4) if isinstance(v, float) else v for k, v in row.items() if k != "context"}}


def ovector_claim(ctx: Context) -> Measured:
    """A task's o-vector promotes its answer on one kind of context over every control: the paper's protocol, the averaged beside."""
    name, context = str(ctx.settings["task"]), str(ctx.settings["context"])
    runs = {protocol: ovector_run(ctx, name, protocol) for protocol in PROTOCOLS}
    layer, origin = task_layer(ctx, name)
    ours = {"layer": layer, "layer_from": origin, **{protocol: rounded_row(run, context) for protocol, run in runs.items()}}
    text = f"mlp[{layer}] ({origin}); " + "; ".join(
        f"{protocol} x{v['scale']:g}: {v['accuracy_with']:.2f} vs none {v['accuracy_without']:.2f}, other task "
        f"{v['accuracy_other_task']:.2f}, random {v['accuracy_random']:.2f} (RR {v['rr_with']:.2f} vs {v['rr_without']:.2f})"
        for protocol, v in ours.items() if protocol in PROTOCOLS)
    return Measured(ours, text, over_every_control(runs["paper"], context), over_every_control(runs["averaged"], context))


def right_count(result: OVectorResult, context: str) -> int:
    """How many of the run's `context` contexts the o-vector made right."""
    return round(context_row(result, context)["accuracy_with"] * result.n_pairs)


def easiest_test(runs: dict[str, OVectorResult], easiest: str, context: str) -> Test:
    """Task `easiest`'s o-vector right on a larger share of its contexts than each other task's (Fisher exact each, since the
    tasks share no contexts; p the largest: it must beat every one)."""
    mine = right_count(runs[easiest], context), runs[easiest].n_pairs
    others = {name: (right_count(run, context), run.n_pairs) for name, run in runs.items() if name != easiest}
    p = max(easier_than(*mine, *theirs) for theirs in others.values())
    gap = min(mine[0] / mine[1] - right / n for right, n in others.values())
    shown = ", ".join(f"{name} {right}/{n}" for name, (right, n) in others.items())
    return Test(f"Fisher exact per other task, largest p: {easiest} {mine[0]}/{mine[1]} vs {shown} ({context} contexts)", gap, p, gap > 0)


def easiest_claim(ctx: Context) -> Measured:
    """Upper-casing is the easiest task to move: its o-vector right more often than every other task's (paper's protocol; averaged beside)."""
    easiest, context = str(ctx.settings.get("easiest", "uppercase")), str(ctx.settings.get("context", "copy"))
    runs = {protocol: {name: ovector_run(ctx, name, protocol) for name in ctx.settings.get("tasks", TASKS)} for protocol in PROTOCOLS}
    ours = {protocol: {name: round(context_row(run, context)["accuracy_with"], 4) for name, run in by_task.items()}
            for protocol, by_task in runs.items()}
    text = "; ".join(f"{protocol}: " + ", ".join(f"{name} {value:.2f}" for name, value in accuracies.items())
                     for protocol, accuracies in ours.items())
    return Measured(ours, f"o-vector accuracy on {context} contexts, {text}", easiest_test(runs["paper"], easiest, context),
                    easiest_test(runs["averaged"], easiest, context))


def transfer_test(name: str, run: OVectorResult, condition: str) -> Test:
    """One pair's vector right on more copy contexts of other pairs than no vector: under the paper's protocol the o-vector
    condition ("with") is one pair's, paired per context (exact McNemar); the averaged run's "transfer" condition has no
    per-context outcome kept, so Fisher's exact test on the counts."""
    row = context_row(run, "copy")
    if condition == "with":
        return Test(f"{name}: exact McNemar, one pair's vector vs none", row["accuracy_with"] - row["accuracy_without"],
                    row["p_vs_without"], row["accuracy_with"] > row["accuracy_without"])
    hits, control = (round(row[f"accuracy_{key}"] * run.n_pairs) for key in (condition, "without"))
    return fisher_greater(hits, run.n_pairs, control, run.n_pairs, f"{name}: one pair's vector vs none")


def transfer_claim(ctx: Context) -> Measured:
    """A vector from one pair (Poland -> Warsaw) turns other pairs' copy contexts into their answers (China -> Beijing)."""
    runs = {protocol: {name: ovector_run(ctx, name, protocol) for name in ctx.settings.get("tasks", TASKS)} for protocol in PROTOCOLS}
    ours = {name: {"source": run.transfer_argument, "one_pair_paper": round(context_row(run, "copy")["accuracy_with"], 4),
                   "one_pair_averaged_protocol": round(context_row(runs["averaged"][name], "copy")["accuracy_transfer"], 4),
                   "none": round(context_row(run, "copy")["accuracy_without"], 4)} for name, run in runs["paper"].items()}
    text = "; ".join(f"{name} from {v['source']}: {v['one_pair_paper']:.2f} (added x{runs['averaged'][name].scale:g}: "
                     f"{v['one_pair_averaged_protocol']:.2f}) vs none {v['none']:.2f}" for name, v in ours.items())
    return Measured(ours, text, any_of([transfer_test(name, run, "with") for name, run in runs["paper"].items()], "paired tests"),
                    any_of([transfer_test(name, run, "transfer") for name, run in runs["averaged"].items()], "Fisher exact tests"))


def ablation_test(ctx: Context, how: str) -> tuple[dict, Test]:
    """Every task's FFNs from its mechanism block on ablated (`how`: zero or mean): more abstractive answers broken than
    extractive ones (exact McNemar per task, Fisher-combined)."""
    ours, tests = {}, []
    for name in ctx.settings.get("tasks", TASKS):
        layer, _ = task_layer(ctx, name)
        result = ffn_ablate(ctx.lm, ctx.registry.task(name), layer, how, n_pairs=int(ctx.settings.get("n_pairs", 32)), seed=LENS_SEED)
        drops = {kind: getattr(result, f"{kind}_before") - getattr(result, f"{kind}_after") for kind in ("abstractive", "extractive")}
        ours[name] = {"from_layer": layer, "n_pairs": result.n_pairs, "p": result.p_abstractive_hurt_more,
                      **{f"{kind}_{when}": round(getattr(result, f"{kind}_{when}"), 4) for kind in drops for when in ("before", "after")}}
        tests.append(Test(f"{name}: exact McNemar, abstractive vs extractive answers lost", drops["abstractive"] - drops["extractive"],
                          result.p_abstractive_hurt_more, drops["abstractive"] > drops["extractive"]))
    return ours, any_of(tests, "exact McNemar tests")


def ablation_claim(ctx: Context) -> Measured:
    """Ablating the mid-to-late FFNs hurts recall from memory more than copying from context: zeroed (the paper), mean (beside)."""
    (zeroed, test), (meaned, variant) = ablation_test(ctx, "zero"), ablation_test(ctx, "mean")
    text = "; ".join(f"{name} mlp[{v['from_layer']}..] zeroed: abstractive {v['abstractive_before']:.2f} -> {v['abstractive_after']:.2f}, "
                     f"extractive {v['extractive_before']:.2f} -> {v['extractive_after']:.2f} (p {v['p']:.2g})" for name, v in zeroed.items())
    return Measured({"zero": zeroed, "mean": meaned}, text, test, variant)


STEPS = {"merullo_lens": lens_claim, "merullo_ovector": ovector_claim, "merullo_easiest": easiest_claim,
         "merullo_transfer": transfer_claim, "merullo_ffn_ablation": ablation_claim}
