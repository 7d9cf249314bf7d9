"""Merullo et al.'s vector-arithmetic studies on a registry task: `lens`, `ovector`, `ffn-ablate`, and ours, `ovector-w`.

Task names (and the control task) are checked against the registry before the model loads; a
layer's upper bound needs the model, so it is checked right after loading, before any forward.
"""

from __future__ import annotations

import sys

from lincorr.cli.options import (
    COUNT,
    NON_NEGATIVE,
    add_collect_settings,
    add_command,
    add_json_option,
    add_model_options,
    add_n_inputs_option,
    add_out_option,
    add_registry_option,
    add_seed_option,
    checked_registry,
    collect_settings,
    finite_number_that,
    load_lm,
    load_registry_from,
    positive_number,
    save_and_print,
)
from lincorr.cli.spellings import add_alias, add_preset_option
from lincorr.errors import UsageError
from lincorr.studies.vectors.protocol import CONTEXTS, OVECTOR_SCALE, PROTOCOLS

TASK_HELP = "registry task: capitals, past-tense, uppercase, all-caps, or one from --registry"
unit_floor = finite_number_that(lambda value: 0 <= value < 1, "at least 0 and below 1")


def add_commands(commands) -> None:
    def study(name: str, writes: str, *, task_default: str | None = None):
        parser = add_command(commands, name)
        if task_default:
            parser.add_argument("task", nargs="?", default=task_default, help=TASK_HELP)
        else:
            parser.add_argument("task", help=TASK_HELP)
        add_seed_option(parser, "seed of the pair order and the demonstrations")
        parser.add_argument("--batch-size", type=COUNT, default=16, help="prompts per forward pass")
        add_registry_option(parser)
        add_json_option(parser)
        add_out_option(parser, writes)
        add_model_options(parser)
        return parser

    lens = study("lens", "lens.json, lens.csv and lens.png")
    lens.add_argument("--n-pairs", type=COUNT, default=None, help="prompts (default: every pair the tokenizer keeps)")
    lens.add_argument("--floor", type=unit_floor, default=0.1,
                      help="a crossing counts only where either mean RR reaches this (below it the lens reads noise)")
    lens.set_defaults(handler=run_lens)

    ovector = study("ovector", "ovector.json, ovector.csv and ovector.png")
    add_vector_options(ovector)
    add_preset_option(ovector, "one solved prompt's mlp[L] replaces every FFN from L - 1 on (BOS kept), the paper's protocol",
                      other="the mean of --n-source solved prompts' mlp[L], added once at mlp[L] (lincorr's averaged protocol)")
    add_alias(ovector, "--protocol", "preset", "--preset", choices=PROTOCOLS,
              convert=lambda protocol: "paper" if protocol == "paper" else "lincorr")
    ovector.add_argument("--contexts", choices=(*CONTEXTS, "both"), default="copy",
                         help="copy: the model repeats the argument; zero-shot: the question with no demonstrations (default: copy)")
    ovector.add_argument("--sweep", action="store_true", help="also add the o-vector of every layer at its own layer")
    ovector.add_argument("--control", default=None, metavar="TASK", help="task whose o-vector is the control (default: the next registry task)")
    ovector.add_argument("--transfer-from", default=None, metavar="ARGUMENT",
                         help="the pair whose single vector is applied to the others, e.g. Poland (default: the first solved source)")
    ovector.add_argument("--n-pairs", type=COUNT, default=64, help="pairs whose contexts are evaluated (pairs not used as sources)")
    ovector.set_defaults(handler=run_ovector)

    ablate = study("ffn-ablate", "ffn_ablation.json, ffn_ablation.csv and ffn_ablation.png")
    ablate.add_argument("--from-layer", type=NON_NEGATIVE, default=None, metavar="L",
                        help="first ablated FFN, mlp[L] (default: the block where `lincorr lens TASK` finds the crossing)")
    ablate.add_argument("--mean", action="store_true", help="replace the FFN outputs by their mean over reference prompts, not zeros")
    ablate.add_argument("--n-pairs", type=COUNT, default=64, help="pairs asked both ways")
    ablate.add_argument("--n-reference", type=COUNT, default=16, help="prompts the --mean outputs are averaged over")
    ablate.set_defaults(handler=run_ffn_ablate)

    compare = study("ovector-w", "ovector_w.json, ovector_w.csv and ovector_w.png", task_default="capitals")
    add_vector_options(compare)
    add_n_inputs_option(compare, "vocabulary inputs W (ridge, cross-validated penalty) is fitted on")
    compare.add_argument("--n-shuffles", type=COUNT, default=1000, help="row shuffles of W in the control")
    add_collect_settings(compare, taken=("batch_size",))  # --batch-size is the o-vector runs'; W's tables keep the default
    compare.set_defaults(handler=run_ovector_w)


def add_vector_options(parser) -> None:
    parser.add_argument("--layer", type=NON_NEGATIVE, default=None, metavar="L",
                        help="the FFN, mlp[L], whose output is the o-vector and where it is added (default: the block where "
                             "`lincorr lens TASK` finds the crossing)")
    parser.add_argument("--scale", type=positive_number, default=None,
                        help=f"multiply the vectors (o-vector and controls) by this (default: 1 with --preset paper, else {OVECTOR_SCALE:g})")
    parser.add_argument("--n-source", type=COUNT, default=8, help="solved few-shot prompts the o-vector averages")


def checked_task(args, name: str):
    """The registry task `name`: an unknown name fails before the model loads."""
    return load_registry_from(args).task(name)


def layer_or_crossing(given: int | None, args, lm, task) -> int:
    """The layer the user gave, else the block whose sub-layer made the logit lens's crossing for `task` on this model."""
    from lincorr.studies.vectors.arithmetic import lens

    if given is not None:
        return given
    block = lens(lm, task, seed=args.seed, batch_size=args.batch_size).crossing_block
    if block is None:
        raise UsageError(f"the logit lens finds no crossing for task '{task.name}' on this model (see `lincorr lens {task.name}`); "
                         "pass the layer yourself")
    from lincorr.progress import shown

    if shown():
        print(f"lincorr: using block {block}, where the logit lens finds the crossing (lincorr lens {task.name})", file=sys.stderr)
    return block


def run_lens(args) -> None:
    from lincorr.studies.vectors.arithmetic import lens

    task = checked_task(args, args.task)
    result = lens(load_lm(args), task, n_pairs=args.n_pairs, seed=args.seed, floor=args.floor, batch_size=args.batch_size)
    save_and_print(args, result)


def run_ovector(args) -> None:
    from lincorr.studies.vectors.arithmetic import ovector

    task = checked_task(args, args.task)
    control = checked_task(args, args.control) if args.control else None
    lm = load_lm(args)
    contexts = CONTEXTS if args.contexts == "both" else (args.contexts,)
    result = ovector(lm, task, layer_or_crossing(args.layer, args, lm, task), control=control, contexts=contexts,
                     protocol="paper" if args.preset == "paper" else "averaged",
                     scale=args.scale, n_source=args.n_source,
                     n_pairs=args.n_pairs, sweep=args.sweep, transfer_from=args.transfer_from, seed=args.seed,
                     batch_size=args.batch_size)
    save_and_print(args, result)


def run_ffn_ablate(args) -> None:
    from lincorr.studies.vectors.arithmetic import ffn_ablate

    task = checked_task(args, args.task)
    lm = load_lm(args)
    result = ffn_ablate(lm, task, layer_or_crossing(args.from_layer, args, lm, task), "mean" if args.mean else "zero", n_pairs=args.n_pairs,
                        n_reference=args.n_reference, seed=args.seed, batch_size=args.batch_size)
    save_and_print(args, result)


def run_ovector_w(args) -> None:
    from lincorr.studies.vectors.ovector_w import CAPITALS, ovector_w

    registry = checked_registry(args, (CAPITALS.source, CAPITALS.target))
    task = checked_task(args, args.task)
    lm = load_lm(args)
    result = ovector_w(lm, registry, task, layer_or_crossing(args.layer, args, lm, task),
                       scale=OVECTOR_SCALE if args.scale is None else args.scale, n_source=args.n_source, n_inputs=args.n_inputs,
                       n_shuffles=args.n_shuffles, seed=args.seed, batch_size=args.batch_size, settings=collect_settings(args))
    save_and_print(args, result)
