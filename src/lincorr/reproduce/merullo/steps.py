"""The steps behind Merullo et al.'s claims (vector arithmetic), the authors' way: the logit lens, the o-vector of many
source prompts, and the FFN ablation.

The chain is the authors' (jmerullo/lm_vector_arithmetic, demo.ipynb): a task's logit lens finds the block whose FFN
makes the answer overtake the argument (`ffn_block`); that FFN's output at the last position of a solved prompt is the
o-vector, and it replaces every FFN from one block earlier on (`protocol.replaced_layers`). Where no FFN makes the
crossing (attention makes it, or the answer leads before any sub-layer flips it) the block is the one whose FFN raises
the answer's lead over the argument the most, and the claims say so. A claim's settings may name the block instead
(`layers: {task: block}`). Each task's lens, o-vector runs (`sources.source_runs`: every source and control, both kinds
of context) and ablation are computed once per reproduction and shared through `ctx.shared`.

The o-vector claims are tested over source prompts, the independent units (contexts within a source share its
vector), on the answer's reciprocal rank, as the authors report it; rank and top-1 are reported beside.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from lincorr.internals import layout
from lincorr.reproduce.step import Context, Measured, NotApplicable
from lincorr.reproduce.verdicts import Test, all_of, mcnemar_gain, paired_greater, ranks_greater, relabelled, untestable
from lincorr.studies.vectors.arithmetic import LensResult, ffn_ablations, lens, right_first
from lincorr.studies.vectors.protocol import pair_order
from lincorr.studies.vectors.sources import SourceRuns, source_runs
from lincorr.tasks import bind_task, extractive_prompts, fewshot_prompts, score_prompts

TASKS = ("capitals", "past-tense", "uppercase")  # the paper's three tasks, by their registry names; each one's control is the next
AUTHORS_SOURCES = {"capitals": "Poland", "uppercase": "brown"}  # the demo's source prompts, first among a task's sources
CONTROLS = ("none", "other_task", "random")
LENS_SEED = 0  # the lens, the o-vectors and the ablation draw their pairs and demonstrations with this seed


def task_lens(ctx: Context, name: str) -> LensResult:
    """The logit lens of task `name` over `lens_pairs` few-shot prompts, computed once per reproduction."""
    n_pairs = int(ctx.settings.get("lens_pairs", 32))
    key = ("merullo_lens", name, n_pairs)
    if key not in ctx.shared:
        ctx.shared[key] = lens(ctx.lm, ctx.registry.task(name), n_pairs=n_pairs, seed=LENS_SEED, batch_size=32)
    return ctx.shared[key]


def ffn_gains(found: LensResult) -> np.ndarray:
    """`[L]` how much each block's FFN raises the answer's RR lead over the argument (after the FFN minus before it)."""
    after = found.answer_rr[1:] - found.argument_rr[1:]
    return after - (found.mid_answer_rr - found.mid_argument_rr)


def ffn_block(found: LensResult) -> tuple[int | None, str]:
    """The block whose FFN makes the answer overtake the argument, and where it comes from: the lens crossing where an FFN
    made it, else the FFN raising the answer's lead the most; None when no FFN raises it at all."""
    if found.crossing_component == "mlp":
        return found.crossing_block, "FFN-made crossing"
    gains = ffn_gains(found)
    best = int(np.argmax(gains))
    if gains[best] <= 0:
        return None, "no FFN raises the answer's lead"
    made = {"attn": "attention makes the crossing", None: "no sub-layer makes a crossing"}[found.crossing_component]
    return best, f"largest FFN gain ({made})"


def task_layer(ctx: Context, name: str) -> tuple[int, str]:
    """The o-vector's block of task `name` and where it comes from: the settings' `layers`, else the lens (`ffn_block`)."""
    named = (ctx.settings.get("layers") or {}).get(name)
    if named is not None:
        return int(named), "set"
    block, origin = ffn_block(task_lens(ctx, name))
    if block is None:
        raise NotApplicable(f"in the logit lens of {name} on this model {origin}, so no block to take the o-vector from")
    return block, origin


def lens_test(ctx: Context, name: str) -> tuple[dict, Test]:
    """Task `name`: the answer's RR lead over the argument, per prompt, at the output above its lead entering the o-vector's
    block (Wilcoxon over prompts, each an independent pair), the direction holding only for a block in the second half."""
    found, n_layers = task_lens(ctx, name), layout(ctx.lm).n_layers
    block, origin = ffn_block(found)
    ours = {"crossing_layer": found.crossing_layer, "made_by": found.crossing_component, "block": block, "block_from": origin,
            "n_layers": n_layers, "n_pairs": found.n_pairs, "accuracy": round(found.final_accuracy, 3)}
    if block is None:
        return ours, untestable(f"{name}: no FFN raises the answer over the argument", interest=ctx.interest)
    bound = bind_task(ctx.registry.task(name), ctx.lm.tokenizer)
    indices = pair_order(bound, LENS_SEED)[:found.n_pairs]
    scores = score_prompts(ctx.lm, bound, indices, fewshot_prompts(bound, indices, LENS_SEED), layers=[block, n_layers], batch_size=32)
    lead = 1.0 / (scores.answer_rank + 1) - 1.0 / (scores.argument_rank + 1)  # [n_pairs, 2]: entering the block, output
    ours.update(lead_entering=round(float(lead[:, 0].mean()), 3), lead_output=round(float(lead[:, 1].mean()), 3))
    test = paired_greater(lead[:, 1], lead[:, 0], f"{name}: answer's RR lead over the argument at the output vs entering block {block}",
                          ctx.interest, "prompts")
    return ours, relabelled(test, f"{test.name} ({origin}, block {block} of {n_layers})", 2 * (block + 1) >= n_layers)


def lens_claim(ctx: Context) -> Measured:
    """The logit lens: the argument comes first, then at a mid-to-late block an FFN puts the answer over it (each task)."""
    measured = {name: lens_test(ctx, name) for name in ctx.settings.get("tasks", TASKS)}
    ours = {name: rows for name, (rows, _) in measured.items()}
    text = "; ".join(f"{name}: crossing resid[{v['crossing_layer']}] of {v['n_layers']} (by {v['made_by']}), o-vector block "
                     f"{v['block']} ({v['block_from']}), answer lead {v.get('lead_entering', float('nan')):.2f} -> "
                     f"{v.get('lead_output', float('nan')):.2f}" for name, v in ours.items())
    return Measured(ours, text, all_of([test for _, test in measured.values()], "tasks"))


def control_task(name: str) -> str:
    """The task whose o-vector is `name`'s control: the next of TASKS, cyclically."""
    return TASKS[(TASKS.index(name) + 1) % len(TASKS)] if name in TASKS else TASKS[0]


def task_runs(ctx: Context, name: str) -> SourceRuns:
    """Task `name`'s o-vector runs (every source, control and kind of context), computed once per reproduction."""
    layer, _ = task_layer(ctx, name)
    n_sources, n_contexts = int(ctx.settings.get("n_sources", 8)), int(ctx.settings.get("n_contexts", 64))
    key = ("merullo_sources", name, layer, n_sources, n_contexts)
    if key not in ctx.shared:
        ctx.shared[key] = source_runs(ctx.lm, ctx.registry.task(name), layer, ctx.registry.task(control_task(name)), n_sources=n_sources,
                                      n_contexts=n_contexts, first=AUTHORS_SOURCES.get(name), seed=LENS_SEED)
    return ctx.shared[key]


def over_control(runs: SourceRuns, kind: str, control: str, interest: float | None) -> Test:
    """Each source's vector above its own `control` on the answer's mean RR over the source's own `kind` contexts
    (over sources: no context or control serves two)."""
    return paired_greater(runs.per_source_rr(kind, "with"), runs.per_source_rr(kind, control),
                          f"{runs.task} o-vector vs {control.replace('_', ' ')}, answer's RR on {len(runs.context_arguments)} {kind} "
                          "contexts dealt out among the sources", interest, "sources")


def averaged_test(runs: SourceRuns, kind: str, interest: float | None) -> Test:
    """lincorr's averaged vector (one vector) above no vector, per context (Wilcoxon over contexts, the units of one vector)."""
    rr = {condition: 1.0 / (runs.ranks(kind, condition) + 1) for condition in ("averaged", "none")}
    return paired_greater(rr["averaged"], rr["none"], f"{runs.task} averaged vector vs none, answer's RR", interest, f"{kind} contexts")


def ovector_claim(ctx: Context) -> Measured:
    """A task's o-vector promotes its answer on one kind of context over every control, over sources; the averaged beside."""
    name, kind = str(ctx.settings["task"]), str(ctx.settings["context"])
    runs, (layer, origin) = task_runs(ctx, name), task_layer(ctx, name)
    ours = {"layer": layer, "layer_from": origin, "replaced": [runs.replaced[0], runs.replaced[-1]], "sources": list(runs.sources),
            "control_task": runs.other_task, "n_contexts": len(runs.context_arguments), **runs.described(kind)}
    text = (f"mlp[{layer}] ({origin}) of {len(runs.sources)} sources ({', '.join(runs.sources[:3])}, ...) replacing mlp[{runs.replaced[0]}.."
            f"{runs.replaced[-1]}] on {ours['n_contexts']} {kind} contexts: answer RR " + ", ".join(
                f"{condition.replace('_', ' ')} {ours[condition]['rr']:.3f}" for condition in ("none", "with", "other_task", "random", "averaged"))
            + f"; median rank {ours['none']['median_rank']:g} -> {ours['with']['median_rank']:g}; top-1 {ours['none']['top1']:.2f} -> {ours['with']['top1']:.2f}")
    test = all_of([over_control(runs, kind, control, ctx.interest) for control in CONTROLS], "controls")
    return Measured(ours, text, test, averaged_test(runs, kind, ctx.interest))


def gains(runs: SourceRuns, kind: str) -> np.ndarray:
    """`[n_sources]` each source's rise of the answer's mean RR over no vector."""
    return runs.per_source_rr(kind, "with") - runs.per_source_rr(kind, "none")


def ordered_tests(runs: dict[str, SourceRuns], kind: str, pairs: list[tuple[str, str]], interest: float | None) -> Test:
    """Each (easier, harder) pair: the easier task's sources raise their answer's RR more (Mann-Whitney over sources, the
    tasks sharing none)."""
    return all_of([dataclasses.replace(ranks_greater(gains(runs[easier], kind), gains(runs[harder], kind),
                                                     f"RR gain of {easier} vs {harder} sources, {kind} contexts", interest), unit="sources")
                   for easier, harder in pairs], "task comparisons")


def ordering_claim(ctx: Context) -> Measured:
    """A task is the easiest (`easiest`) or the hardest (`hardest`) to move with its o-vector: its sources' RR gains above
    (below) every other task's, on copy contexts; zero-shot contexts beside."""
    names = list(ctx.settings.get("tasks", TASKS))
    runs = {name: task_runs(ctx, name) for name in names}
    if "easiest" in ctx.settings:
        chosen = str(ctx.settings["easiest"])
        pairs = [(chosen, other) for other in names if other != chosen]
    else:
        chosen = str(ctx.settings["hardest"])
        pairs = [(other, chosen) for other in names if other != chosen]
    kind = str(ctx.settings.get("context", "copy"))
    ours: dict[str, dict[str, float]] = {name: {k: round(float(gains(run, k).mean()), 4) for k in ("copy", "zero-shot") if k in run.answer_rank} for name, run in runs.items()}
    text = f"mean RR gain of the o-vector over sources, {kind} contexts: " + ", ".join(f"{name} {v[kind]:.3f}" for name, v in ours.items())
    beside = "zero-shot" if kind == "copy" else "copy"
    return Measured(ours, text, ordered_tests(runs, kind, pairs, ctx.interest), ordered_tests(runs, beside, pairs, ctx.interest))


def transfer_claim(ctx: Context) -> Measured:
    """One pair's vector (Poland -> Warsaw) turns OTHER pairs' copy contexts into their answers (China -> Beijing): every
    source's vector above every control on contexts of pairs other than its own, over sources, for each task. These are,
    part for part, the tests of the tasks' copy claims (`merullo.transfer` restates them)."""
    runs = {name: task_runs(ctx, name) for name in ctx.settings.get("tasks", TASKS)}
    for run in runs.values():
        assert not set(run.sources) & set(run.context_arguments), "a source's own pair among its contexts"
    ours = {name: {"sources": list(run.sources), "rr_none": run.described("copy")["none"]["rr"], "rr_with": run.described("copy")["with"]["rr"],
                   "top1_with": run.described("copy")["with"]["top1"]} for name, run in runs.items()}
    text = "; ".join(f"{name} from {len(v['sources'])} pairs ({v['sources'][0]}, ...): answer RR {v['rr_none']:.3f} -> {v['rr_with']:.3f}"
                     for name, v in ours.items())
    return Measured(ours, text, all_of([over_control(run, "copy", control, ctx.interest) for run in runs.values() for control in CONTROLS],
                                       "tasks and controls"))


def ablation_outcomes(ctx: Context, name: str) -> dict:
    """Task `name`: per pair, whether the greedy answer is right on its abstractive and extractive prompts before and after
    zero- and mean-ablating every FFN from the o-vector's block on, the one applying the function (the intervention starts
    a block earlier so that the vector accumulates, a reason an ablation does not share); computed once per reproduction."""
    start, _ = task_layer(ctx, name)
    n_pairs = int(ctx.settings.get("n_pairs", 32))
    key = ("merullo_ablation", name, start, n_pairs)
    if key not in ctx.shared:
        bound = bind_task(ctx.registry.task(name), ctx.lm.tokenizer)
        order = pair_order(bound, LENS_SEED)
        reference, evaluation = order[:16], order[16:][:n_pairs]
        prompts = {"abstractive": fewshot_prompts(bound, evaluation, LENS_SEED), "extractive": extractive_prompts(bound, evaluation, LENS_SEED)}
        outcomes: dict = {"from_layer": start, "n_pairs": len(evaluation)}  # and (kind, how) -> right first
        for how in ("none", "zero", "mean"):
            added = ffn_ablations(ctx.lm, bound, start, how, reference, seed=LENS_SEED, batch_size=32) if how != "none" else ()
            outcomes.update({(kind, how): right_first(ctx.lm, bound, evaluation, kind_prompts, added, 32) for kind, kind_prompts in prompts.items()})
        ctx.shared[key] = outcomes
    return ctx.shared[key]


def ablation_test(ctx: Context, how: str) -> tuple[dict, Test]:
    """Every task: more pairs lose their abstractive answer than their extractive one (exact McNemar per task); each must hold."""
    ours, tests = {}, []
    for name in ctx.settings.get("tasks", TASKS):
        outcomes = ablation_outcomes(ctx, name)
        broken = {kind: outcomes[kind, "none"] & ~outcomes[kind, how] for kind in ("abstractive", "extractive")}
        ours[name] = {"from_layer": outcomes["from_layer"], "n_pairs": outcomes["n_pairs"],
                      **{f"{kind}_{when}": round(float(outcomes[kind, key].mean()), 4) for kind in broken
                         for when, key in (("before", "none"), ("after", how))}}
        test = mcnemar_gain(broken["extractive"], broken["abstractive"], "broken", ctx.interest, "pairs")
        tests.append(relabelled(test, f"{name}: {test.name} (abstractive vs extractive answers lost)"))
    return ours, all_of(tests, "tasks")


def ablation_claim(ctx: Context) -> Measured:
    """Ablating the mid-to-late FFNs hurts recall from memory more than copying from context: zeroed (the paper), mean (beside)."""
    (zeroed, test), (meaned, variant) = ablation_test(ctx, "zero"), ablation_test(ctx, "mean")
    text = "; ".join(f"{name} mlp[{v['from_layer']}..] zeroed: abstractive {v['abstractive_before']:.2f} -> {v['abstractive_after']:.2f}, "
                     f"extractive {v['extractive_before']:.2f} -> {v['extractive_after']:.2f}" for name, v in zeroed.items())
    return Measured({"zero": zeroed, "mean": meaned}, text, test, variant)


STEPS = {"merullo_lens": lens_claim, "merullo_ovector": ovector_claim, "merullo_ordering": ordering_claim,
         "merullo_transfer": transfer_claim, "merullo_ffn_ablation": ablation_claim}
