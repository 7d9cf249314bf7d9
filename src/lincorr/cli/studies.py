"""The studies over the registry: `matrix`, `precision`, `lre`, `cases`, `resilience` and `scale`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from lincorr.cli.options import (
    COUNT,
    FAMILIES,
    MODEL_HELP,
    PAPER_FIT,
    PAPER_FIT_HELP,
    SIDES,
    Distinct,
    counts,
    add_collection_options,
    add_command,
    add_custom_prompt_options,
    add_fit_options,
    add_json_option,
    add_memory_plan_option,
    add_model_options,
    add_out_option,
    add_prompt_pair,
    add_references_option,
    checked_registry,
    choose_inputs,
    collect_settings,
    custom_sides,
    fit_config,
    load_lm,
    load_registry_from,
    model_spec,
    names,
    positive_number,
    read_references,
    refuse_same_model,
    resolve_prompt,
    save_and_print,
    user_path,
)
from lincorr.cli.spellings import add_alias, add_paper_table_option, add_preset_option
from lincorr.errors import DataError, InputError, UsageError


def add_commands(commands) -> None:
    for add in (add_matrix, add_precision, add_lre, add_cases, add_resilience, add_scale):
        add(commands)


def study_parser(commands, name: str, *, writes: str):
    """A study's subcommand with the options every study has: --out (what it writes) and --json."""
    parser = add_command(commands, name)
    add_out_option(parser, writes)
    add_json_option(parser)
    return parser


def shared_options(parser, *model_aliases: str, model_help: str = MODEL_HELP) -> None:
    add_model_options(parser, *model_aliases, help_text=model_help)
    add_collection_options(parser)
    add_fit_options(parser)
    add_preset_option(parser, PAPER_FIT_HELP, settings=PAPER_FIT)


def add_matrix(commands) -> None:
    matrix = study_parser(commands, "matrix", writes="matrix.json, CSVs and PNG heatmaps")
    grid_options(matrix)
    shared_options(matrix)
    matrix.set_defaults(handler=run_matrix)


def add_precision(commands) -> None:
    from lincorr.studies.logits.precision import PAPER_N_INPUTS

    precision = study_parser(commands, "precision", writes="precision.json, .csv and .md")
    add_prompt_pair(precision, optional=True, help_text="registry prompt name, or a label when its --*-template is given")
    add_references_option(precision)
    add_custom_prompt_options(precision)
    which = precision.add_mutually_exclusive_group()
    add_paper_table_option(which, ("2",), "the eight relation pairs of the paper's Table 2")
    which.add_argument("--all-references", action="store_true", help="every reference relation in the registry")
    add_model_options(precision, help_text=MODEL_HELP)
    add_collection_options(precision)
    add_fit_options(precision, estimator="ridge-std", choices=("ridge-std", "ols", "ridge"), reason=PRECISION_REASON)
    precision.set_defaults(n_inputs=PAPER_N_INPUTS)
    add_preset_option(precision, "headline numbers in the paper's setting: ols on half of 10,000 vocabulary inputs, raw logits "
                                 "(sets -n 10000 and --estimator ols; the other fits are still printed beside it)",
                      settings={"estimator": "ols", "n_inputs": PAPER_N_INPUTS})
    add_alias(precision, "--paper", "preset", "--preset paper", value="paper")
    precision.add_argument("--n-curve", type=counts, default=None, metavar="N,N,...",
                           help="Hit@Top-N of one relation, both estimators, with W fitted on the first N inputs for each N "
                                "(e.g. 1000,2000,5000,10000); the tables are collected once, at the largest N, which replaces -n")
    # --estimator picks the headline numbers; the other fits are reported beside them.
    precision.set_defaults(handler=run_precision)


def add_lre(commands) -> None:
    lre = study_parser(commands, "lre", writes="lre.json, .csv and .md")
    lre.add_argument("--relations", type=names("country_capital_city,city_in_country"), default=None, metavar="NAME,...",
                     help="LRE relations by file name, e.g. country_capital_city,city_in_country (default: all 47)")
    lre.add_argument("--max-subjects", type=COUNT, default=None, metavar="K",
                     help="at most K subjects per relation, drawn with --seed (ols needs more training inputs than subjects; "
                          "default: all)")
    lre.add_argument("--types", type=names("factual,linguistic"), default=None, metavar="TYPE,...", help="only relations of these types: factual, commonsense, linguistic, bias")
    add_model_options(lre, help_text=MODEL_HELP)
    add_collection_options(lre)
    add_fit_options(lre, estimator="ridge-std", choices=("ridge-std", "ols"), reason=PRECISION_REASON)
    add_preset_option(lre, PAPER_FIT_HELP, settings=PAPER_FIT)
    lre.set_defaults(handler=run_lre)


def add_cases(commands) -> None:
    cases = study_parser(commands, "cases", writes="cases.md, cases.csv and cases.json")
    add_prompt_pair(cases, optional=True)
    cases.add_argument("--influencing", action="store_true", help="rows are target words with their top influencing sources")
    cases.add_argument("--word", action=Distinct, default=[], metavar="WORD", help="a row word (repeatable; default every word)")
    cases.add_argument("-k", "--top-k", type=COUNT, default=5, help="words per row")
    add_paper_table_option(cases, ("3", "15", "16", "17"), "the rows of one of the paper's case tables")
    shared_options(cases)
    cases.set_defaults(handler=run_cases)


def add_resilience(commands) -> None:
    resilience = study_parser(commands, "resilience", writes="resilience.json, pairs.csv, difference.png and the three matrices")
    grid_options(resilience)
    eval_from = resilience.add_mutually_exclusive_group(required=True)
    eval_from.add_argument("--eval-model", type=model_spec, default=None, help="model B: another checkpoint with A's tokenizer")
    eval_from.add_argument("--finetune-text", type=user_path, default=None, metavar="FILE", help="model B = A fine-tuned on this text file (one passage per line)")
    resilience.add_argument("--lr", type=positive_number, default=5e-5, help="fine-tuning learning rate")
    resilience.add_argument("--epochs", type=COUNT, default=1, help="fine-tuning epochs")
    resilience.add_argument("--train-batch-size", type=COUNT, default=8, help="fine-tuning passages per step")
    add_memory_plan_option(resilience)
    shared_options(resilience, "--fit-model", model_help=f"model A, to fit W on: {MODEL_HELP}")
    resilience.set_defaults(handler=run_resilience)


def add_scale(commands) -> None:
    scale = study_parser(commands, "scale", writes="scale.json, scale.csv and scale_<estimator>.png")
    scale.add_argument("--models", type=names("gemma-3-270m-q4km,smollm2-135m-instruct-q41"), default=None, metavar="A,B,...",
                       help="comma-separated model specs: the series, or with --series the models shown beside it")
    scale.add_argument("--series", default=None, metavar="NAME",
                       help="a bundled size series (one family and tokenizer in several sizes; `lincorr models` names them)")
    scale.add_argument("--relations", type=names("city:country,ceo:company"), default="city:country,ceo:company", metavar="S:T,...", help="prompt pairs")
    shared_options(scale)
    scale.set_defaults(handler=run_scale)


def grid_options(parser) -> None:
    """Which prompt pairs a matrix covers."""
    group = parser.add_argument_group("which prompts").add_mutually_exclusive_group(required=True)
    group.add_argument("--family", default=None, help=f"every ordered pair of a registry family ({FAMILIES})")
    group.add_argument("--prompts", type=names("city,country"), default=None, metavar="A,B,...", help="every ordered pair of these registry prompts")
    group.add_argument("--cross-language", action="store_true", help="English knowledge k -> l/k for each language l (Fig. 3's X-Lang panel)")
    parser.add_argument("--languages", type=names("es,fr"), default=None, metavar="es,fr,...", help="languages of --cross-language (default: all in the registry)")


def chosen_grid(args):
    from lincorr.studies.logits.matrix import Grid

    registry = load_registry_from(args)
    if args.cross_language:
        return Grid.cross_language(registry, list(args.languages) if args.languages else None)
    if args.family:
        return Grid.square([spec.name for spec in registry.family(args.family)], f"{args.family} family")
    checked_registry(args, args.prompts)
    return Grid.square(list(args.prompts), "selected prompts")


PRECISION_REASON = ("ridge-std (lincorr's, the default): ridge on z-scored columns, alpha 1 per input, onto the target's "
                    "log-probabilities over its domain, read in standard units; it ranks the real pairs first far more often "
                    "(docs/results.md). Every fit is printed; this one gives the headline numbers")


def precision_configs(args) -> list:
    """Every precision fit, the --estimator one (the headline) first."""
    from lincorr.studies.logits.precision import precision_fits

    return list(precision_fits(fit_config(args), args.estimator))


def check_paper_setting(args) -> None:
    """--preset paper: the paper's inputs are a vocabulary sample and its scores raw logits, so options that change them are refused."""
    if args.preset == "paper" and (args.inputs or args.logprobs):
        raise UsageError("--preset paper uses the paper's inputs (a vocabulary sample) and raw logits; drop --inputs/--logprobs")


def run_matrix(args) -> None:
    from lincorr.studies.logits.matrix import measure_matrix

    grid = chosen_grid(args)
    config = fit_config(args)
    lm = load_lm(args)
    result = measure_matrix(lm, load_registry_from(args), grid, choose_inputs(args, lm.tokenizer), config, settings=collect_settings(args))
    save_and_print(args, result)


def run_precision(args) -> None:
    check_paper_setting(args)
    if args.n_curve:
        run_precision_curve(args)
        return
    from lincorr.studies.logits.precision import measure_precision
    from lincorr.paper import paper_table
    from lincorr.relations import RelationSpec, registry_relations

    single = not (args.paper_table or args.all_references)
    if single and not (args.source and args.target):
        raise UsageError("name a SOURCE and a TARGET prompt (e.g. lincorr precision city country), or pass --paper-table 2 or "
                         "--all-references")
    if not single and args.source:
        raise UsageError("--paper-table and --all-references take no SOURCE/TARGET; drop them or drop the option")
    custom = custom_sides(args)
    if custom and not single:
        raise UsageError("--source-template and --target-template give one SOURCE TARGET pair; drop --paper-table/--all-references")
    if custom and not args.references:
        raise UsageError("a prompt of your own has no registry reference to judge W by; pass --references FILE with pairs of its words")
    reference_file = read_references(args)
    if single:
        registry = checked_registry(args, [getattr(args, side) for side in SIDES if side not in custom])
        relations: Sequence[RelationSpec] = [RelationSpec(args.source, args.target)]
    else:
        registry = load_registry_from(args)
        relations = paper_table("table2").relations() if args.paper_table else registry_relations(registry)
    configs = precision_configs(args)
    lm = load_lm(args)
    table = measure_precision(lm, registry, relations, choose_inputs(args, lm.tokenizer), configs, reference_file=reference_file,
                            custom_prompts={getattr(args, side): resolve_prompt(args, side, lm.tokenizer) for side in custom},
                            settings=collect_settings(args))
    # A single relation without its headline estimator is a failure: say why, and write nothing.
    if single and not any(row.estimator == configs[0].label for row in table.rows):
        raise DataError("; ".join(reason for _, reason in table.skipped) or "no result")
    save_and_print(args, table, payload=table.headline_summary if single else None)


def run_precision_curve(args) -> None:
    from lincorr.held_out import split_sizes
    from lincorr.studies.logits.precision_curve import precision_curve
    from lincorr.relations import RelationSpec

    if args.paper_table or args.all_references or not (args.source and args.target):
        raise UsageError("--n-curve measures one relation: name a SOURCE and a TARGET prompt (e.g. lincorr precision city country "
                           "--n-curve 1000,10000) and drop --paper-table/--all-references")
    if custom_sides(args):
        raise UsageError("--n-curve measures registry prompts; drop --source-template/--target-template")
    args.n_inputs = max(args.n_curve)
    registry = checked_registry(args, (args.source, args.target))
    reference_file = read_references(args)
    configs = precision_configs(args)
    for n in args.n_curve:
        split_sizes(n, args.test_fraction)  # every N must leave enough test inputs
    lm = load_lm(args)
    curve = precision_curve(lm, registry, RelationSpec(args.source, args.target), choose_inputs(args, lm.tokenizer), args.n_curve,
                            configs, reference_file=reference_file, settings=collect_settings(args))
    save_and_print(args, curve)


def run_lre(args) -> None:
    from lincorr.studies.logits.lre import LRE_FITS, lre_precision
    from lincorr.studies.logits.precision import precision_fits

    if args.registry:
        raise UsageError("lre reads the bundled LRE relations, not registry files; drop --registry")
    relations = chosen_lre_relations(args)
    configs = [config for config in precision_fits(fit_config(args), args.estimator) if config.label in LRE_FITS]
    lm = load_lm(args)
    table = lre_precision(lm, relations, choose_inputs(args, lm.tokenizer), configs, max_subjects=args.max_subjects,
                          settings=collect_settings(args))
    save_and_print(args, table)


def chosen_lre_relations(args):
    """The LRE relations of --relations (all without it) of the --types given (any without it), known to select one before the model loads."""
    from lincorr.knowledge.lre import lre_relations

    relations = lre_relations(names=args.relations or ())
    if not args.types:
        return relations
    known = sorted({relation.relation_type for relation in lre_relations()})
    if unknown := [name for name in args.types if name not in known]:
        raise UsageError(f"unknown LRE relation type {', '.join(unknown)}; use one of {', '.join(known)}")
    chosen = tuple(relation for relation in relations if relation.relation_type in args.types)
    if not chosen:
        given = ", ".join(f"{relation.name} is {relation.relation_type}" for relation in relations)
        raise UsageError(f"--relations and --types select no relation ({given}); drop one of them or widen it")
    return chosen


def run_cases(args) -> None:
    from lincorr.studies.logits.cases import CaseSpec, measure_cases, paper_cases
    from lincorr.relations import RelationSpec

    if args.paper_table:
        if args.source or args.word:
            raise UsageError("--paper-table chooses the prompts and words itself; drop SOURCE/TARGET and --word")
        specs: Sequence[CaseSpec] = paper_cases(args.paper_table)
    elif args.source and args.target:
        specs = [CaseSpec(RelationSpec(args.source, args.target), "influencing" if args.influencing else "influenced", tuple(args.word) or None, args.top_k)]
    else:
        raise UsageError("name a SOURCE and a TARGET prompt (e.g. lincorr cases city country --word Paris), or pass --paper-table 3")
    registry = checked_registry(args, {n for spec in specs for n in (spec.relation.source, spec.relation.target)})
    config = fit_config(args)
    lm = load_lm(args)
    tables = measure_cases(lm, registry, specs, choose_inputs(args, lm.tokenizer), config, settings=collect_settings(args))
    save_and_print(args, tables)


def resilience_training(args):
    """--finetune-text's TrainConfig: --lr, --epochs, --train-batch-size, --seed and --memory-plan."""
    from lincorr.finetune import TrainConfig

    return TrainConfig(learning_rate=args.lr, epochs=args.epochs, batch_size=args.train_batch_size, seed=args.seed,
                       memory_plan=args.memory_plan)


def run_resilience(args) -> None:
    from lincorr.models import require_other_checkpoint
    from lincorr.studies.logits.resilience import finetune_on_text, measure_resilience

    if args.finetune_text and not Path(args.finetune_text).is_file():
        raise InputError(f"--finetune-text file {args.finetune_text} does not exist; pass a text file")
    grid = chosen_grid(args)
    config = fit_config(args)
    refuse_same_model(args)
    fit_lm = load_lm(args)
    training = None
    if args.finetune_text:
        eval_lm, training = finetune_on_text(fit_lm, args.finetune_text, resilience_training(args))
    else:
        eval_lm = load_lm(args, args.eval_model)
        require_other_checkpoint(fit_lm, eval_lm, "--eval-model")
    result = measure_resilience(fit_lm, eval_lm, load_registry_from(args), grid, choose_inputs(args, fit_lm.tokenizer), config,
                                training=training, settings=collect_settings(args))
    save_and_print(args, result)


def run_scale(args) -> None:
    from lincorr.studies.logits.scale import measure_scale
    from lincorr.relations import RelationSpec

    if args.inputs:
        raise UsageError("scale samples inputs from each model's own vocabulary; use -n instead of --inputs")
    if not (args.models or args.series):
        raise UsageError("scale needs models: --series NAME (a bundled size series) and/or --models A,B,...")
    relations = []
    for item in args.relations:
        source, _, target = item.partition(":")
        if not target:
            raise UsageError(f"--relations takes SOURCE:TARGET pairs, got {item!r}")
        relations.append(RelationSpec(source, target))
    registry = checked_registry(args, {n for relation in relations for n in (relation.source, relation.target)})
    result = measure_scale(list(args.models or ()), registry, relations, args.n_inputs, precision_configs(args), series=args.series,
                           seed=args.seed, load=lambda spec: load_lm(args, spec), settings=collect_settings(args))
    save_and_print(args, result)
