"""The training studies of §4.1, §5 and Appendix K (`generalize`, `diagnose`, `gradcorr`, `subwords`) and `predict-edit`.

W is fitted on a vocabulary sample here, so these commands take -n (not --inputs) and the collection options
(--batch-size, --logprobs, --no-cache, --compile) of the tables W is fitted on.
"""

from __future__ import annotations

import sys

from lincorr.cli.options import (
    COUNT,
    NON_NEGATIVE,
    PAPER_FIT,
    PAPER_FIT_HELP,
    add_collect_settings,
    add_command,
    add_fit_options,
    add_json_option,
    add_memory_plan_option,
    add_model_options,
    add_n_inputs_option,
    add_out_option,
    add_prompt_pair,
    add_registry_option,
    add_seed_option,
    checked_registry,
    collect_settings,
    finite_number,
    fit_config,
    load_lm,
    positive_number,
    save_and_print,
    whole_number,
)
from lincorr.cli.spellings import add_alias, add_paper_table_option, add_preset_option
from lincorr.errors import UsageError

GENERALIZATION_FILES = "result.json, facts.json, table6.md and fig5.png"


def add_commands(commands) -> None:
    from lincorr.held_out import MIN_TEST_INPUTS
    from lincorr.studies.training.edit_prediction import DEFAULT_MARGIN
    from lincorr.studies.training.gradients import GradientConfig

    def study(name: str, *, writes: str, pair_required: bool = False):
        parser = add_command(commands, name)
        if pair_required:
            add_prompt_pair(parser)
        else:
            add_prompt_pair(parser, default=("city", "country"), help_text="registry prompt")
        add_n_inputs_option(parser, "vocabulary inputs W is fitted on")
        add_seed_option(parser, "first seed (inputs, entity names, facts, training)")
        add_registry_option(parser)
        add_json_option(parser)
        add_out_option(parser, writes)
        add_model_options(parser)
        add_fit_options(parser, bootstrap=100)
        add_collect_settings(parser)
        return parser

    generalize = study("generalize", writes=f"{GENERALIZATION_FILES} (with --paper-table 5: table5.json and table5.md)")
    generalization_options(generalize)
    add_paper_table_option(generalize, ("5",), "run the paper's eleven Table-5 pairs (ignores SOURCE TARGET)")
    generalize.set_defaults(handler=run_generalize)

    diagnose = study("diagnose", writes=GENERALIZATION_FILES)
    generalization_options(diagnose)
    diagnose.add_argument("--rows", type=NON_NEGATIVE, default=20, help="table rows to print")
    diagnose.set_defaults(handler=run_diagnose)

    subwords = study("subwords", writes="subwords.json and table18.md")
    generalization_options(subwords)
    subwords.set_defaults(handler=run_subwords)

    gradcorr = study("gradcorr", writes="gradcorr.json and table4.md")
    training_options(gradcorr, GradientConfig.train, with_epochs=False)  # one step, by definition
    gradcorr.add_argument("--n-step-facts", type=COUNT, default=GradientConfig.n_step_facts, help="training inputs in the step")
    gradcorr.add_argument("--n-eval", type=whole_number(MIN_TEST_INPUTS), default=GradientConfig.n_eval,
                          help="held-out inputs the change is measured on")
    add_paper_table_option(gradcorr, ("4",), "run the paper's eight Table-4 pairs (ignores SOURCE TARGET)")
    gradcorr.set_defaults(handler=run_gradcorr)

    predict = study("predict-edit", writes="prediction.json", pair_required=True)
    predict.add_argument("--value", required=True, metavar="WORD", help="the proposed source answer, e.g. Indianapolis")
    predict.add_argument("--subject", default=None, metavar="NAME", help="the entity to edit (default: a fresh made-up name)")
    predict.add_argument("--margin", type=finite_number, default=None,
                         help=f"logit lead the edited source answer is assumed to get (default: {DEFAULT_MARGIN:g} unless --delta)")
    predict.add_argument("--delta", type=finite_number, default=None, metavar="LOGITS",
                         help="assumed rise of the source answer's logit instead of --margin (a study's mean_source_delta)")
    add_preset_option(predict, PAPER_FIT_HELP, settings=PAPER_FIT)
    predict.set_defaults(handler=run_predict_edit)


def training_options(parser, train, with_epochs: bool = True) -> None:
    """--preset, --lr, --epochs, --train-batch-size and --full, defaulting to the study's TrainConfig `train`."""
    from lincorr.studies.training.generalization import PAPER_PRESET

    paper = PAPER_PRESET.apply(train)
    until_learned = (f", until every taught fact is learned (at most {paper.epochs} epochs; the epochs run are reported)"
                     if with_epochs else " (one step)")
    overrides = "--lr, --epochs and --train-batch-size" if with_epochs else "--lr and --train-batch-size"
    add_preset_option(parser, PAPER_PRESET.help + until_learned + "; gradients clipped at norm "
                      f"{train.max_grad_norm:g} as in the default; W keeps --estimator. {overrides} still override it")
    add_alias(parser, "--paper", "preset", "--preset paper", value="paper")
    parser.add_argument("--lr", type=positive_number, default=None,
                        help=f"AdamW learning rate (default: {train.learning_rate:g}; with --preset paper {paper.learning_rate:g})")
    if with_epochs:
        parser.add_argument("--epochs", type=COUNT, default=None,
                            help=f"most epochs over the facts, see --all-epochs (default: {train.epochs}; with --preset paper {paper.epochs})")
    parser.add_argument("--train-batch-size", type=COUNT, default=None, help=f"facts per step (default: {train.batch_size})")
    parser.add_argument("--full", action="store_true",
                        help="train every parameter, embeddings included (default: transformer blocks only; --preset paper implies it)")
    add_memory_plan_option(parser)


def generalization_options(parser) -> None:
    from lincorr.studies.training.edit_prediction import DEFAULT_MARGIN
    from lincorr.studies.training.generalization import DEFAULT_TRAIN

    parser.add_argument("--n-facts", type=COUNT, default=16, help="fresh entities taught per seed")
    parser.add_argument("--n-seeds", type=COUNT, default=3, help="seeds --seed, --seed+1, ...")
    parser.add_argument("--margin", type=finite_number, default=DEFAULT_MARGIN, help="logit lead the edited source answer is assumed to get")
    training_options(parser, DEFAULT_TRAIN)
    parser.add_argument("--all-epochs", action="store_true",
                        help="train all --epochs (default: stop after the first epoch at which every taught fact is learned)")


def training_config(args, study_default):
    """The study's TrainConfig `study_default`, under --preset paper the paper's preset, then --lr, --epochs, --train-batch-size,
    --full and --memory-plan."""
    import dataclasses

    from lincorr.studies.training.generalization import PAPER_PRESET

    train = PAPER_PRESET.apply(study_default) if args.preset == "paper" else study_default
    overrides = {"learning_rate": args.lr, "epochs": getattr(args, "epochs", None), "batch_size": args.train_batch_size}
    return dataclasses.replace(train, **{k: v for k, v in overrides.items() if v is not None}, blocks_only=train.blocks_only and not args.full,
                               seed=args.seed, memory_plan=args.memory_plan)


def generalization_config(args):
    from lincorr.studies.training.generalization import DEFAULT_TRAIN, GeneralizationConfig

    return GeneralizationConfig(
        n_facts=args.n_facts, seeds=tuple(range(args.seed, args.seed + args.n_seeds)), n_inputs=args.n_inputs, fit=fit_config(args),
        train=training_config(args, DEFAULT_TRAIN), margin=args.margin, until_learned=not args.all_epochs,
    )


def run_generalize(args) -> None:
    from lincorr.studies.training.generalization import measure_generalization
    from lincorr.studies.training.table5 import GeneralizationTable, measure_table5
    from lincorr.paper import paper_table
    from lincorr.relations import RelationSpec

    config = generalization_config(args)
    if not args.paper_table:
        registry = checked_registry(args, (args.source, args.target))
        result = measure_generalization(load_lm(args), registry, RelationSpec(args.source, args.target), config, collect_settings(args))
        save_and_print(args, result)
        return
    relations = paper_table("table5").relations()
    registry = checked_registry(args, {n for relation in relations for n in (relation.source, relation.target)})
    table = measure_table5(load_lm(args), registry, relations, config, collect_settings(args),
                                 on_row=None if args.json else lambda row: print(GeneralizationTable.row_line(row), flush=True))
    save_and_print(args, table, show=False)  # the rows were printed as they finished


def run_diagnose(args) -> None:
    from lincorr.studies.training.generalization import measure_generalization
    from lincorr.relations import RelationSpec

    config = generalization_config(args)
    registry = checked_registry(args, (args.source, args.target))
    result = measure_generalization(load_lm(args), registry, RelationSpec(args.source, args.target), config, collect_settings(args))
    save_and_print(args, result, text=lambda: result.diagnosis_text(max_rows=args.rows), payload=result.diagnosis_summary)


def run_subwords(args) -> None:
    from lincorr.studies.training.subwords import measure_subwords
    from lincorr.relations import RelationSpec

    config = generalization_config(args)
    registry = checked_registry(args, (args.source, args.target))
    result = measure_subwords(load_lm(args), registry, RelationSpec(args.source, args.target), config, collect_settings(args))
    save_and_print(args, result)


def run_gradcorr(args) -> None:
    from lincorr.studies.training.gradients import GradientConfig, GradientTable, measure_table4
    from lincorr.paper import paper_table
    from lincorr.relations import RelationSpec

    table4 = paper_table("table4").relations()
    paper_labels = {(r.source, r.target): r.label for r in table4}  # so a single Table-4 pair prints the paper's numbers too
    relations = (table4 if args.paper_table else
                 [RelationSpec(args.source, args.target, paper_labels.get((args.source, args.target), ""))])
    registry = checked_registry(args, {n for relation in relations for n in (relation.source, relation.target)})
    config = GradientConfig(
        n_inputs=args.n_inputs, n_step_facts=args.n_step_facts, n_eval=args.n_eval, fit=fit_config(args),
        train=training_config(args, GradientConfig.train), seed=args.seed,
    )

    def report(row: dict) -> None:
        print(GradientTable.row_line(row), file=sys.stderr, flush=True)

    table = measure_table4(load_lm(args), registry, relations, config, collect_settings(args),
                           on_row=report if args.paper_table and not getattr(args, "quiet", False) else None)
    save_and_print(args, table)


def run_predict_edit(args) -> None:
    from lincorr.studies.training.edit_prediction import DEFAULT_MARGIN, predict_relation_edit
    from lincorr.relations import RelationSpec

    if args.delta is not None and args.margin is not None:
        raise UsageError("pass --delta (the rise of the source logit) or --margin (its lead over the others), not both")
    registry = checked_registry(args, (args.source, args.target))
    config = fit_config(args)
    result = predict_relation_edit(
        load_lm(args), registry, RelationSpec(args.source, args.target), args.value, subject=args.subject, seed=args.seed,
        n_inputs=args.n_inputs, fit=config, margin=DEFAULT_MARGIN if args.margin is None else args.margin, delta=args.delta,
        settings=collect_settings(args),
    )
    save_and_print(args, result)
