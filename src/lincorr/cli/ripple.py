"""`lincorr ripple`: predict which implications of an edit move, before making it, and check on the edits made."""

from __future__ import annotations

from lincorr.cli.options import (
    COUNT,
    RESAMPLES,
    add_collect_settings,
    add_command,
    add_json_option,
    add_model_options,
    add_n_inputs_option,
    add_out_option,
    add_registry_option,
    add_seed_option,
    collect_settings,
    load_lm,
    load_registry_from,
    save_and_print,
    user_path,
)


def add_commands(commands) -> None:
    from lincorr.ripple.benchmark import N_BOOT
    from lincorr.ripple.hops import PHRASINGS
    from lincorr.ripple.outcomes import EDIT_TRAINING

    parser = add_command(commands, "ripple")
    parser.add_argument("edits", nargs="?", type=user_path, default=None, metavar="EDITS_FILE",
                        help="a RippleEdits-shaped JSON file (default: the bundled 140 edits of RippleEdits)")
    parser.add_argument("--max-edits", type=COUNT, default=None, help="read only the first N edits (a quick look)")
    parser.add_argument("--training", choices=tuple(EDIT_TRAINING), default="paper",
                        help="paper: AdamW 5e-6 on every parameter until the edit is learned (at most 50 steps); "
                             "constrained: FT-L style, the MLP weights of the three middle blocks at 5e-4")
    parser.add_argument("--phrasing", choices=PHRASINGS, default="dataset",
                        help="dataset: the file's own sentences; registry: the paper's prompts about people ('{} lives in the "
                             "country of', '{} speaks the language of'), for the citizenship edits whose queries it has words for")
    parser.add_argument("--top-k", type=COUNT, default=1, help="a query moves when its implied answer enters this top of its domain")
    parser.add_argument("--n-boot", type=RESAMPLES, default=N_BOOT, help="bootstrap resamples of the edits")
    add_n_inputs_option(parser, "vocabulary inputs each W is fitted on")
    add_seed_option(parser, "seed of the inputs, the training and the bootstrap")
    add_registry_option(parser)
    add_json_option(parser)
    add_out_option(parser, "ripple.json (the benchmark) and hops.csv (every query's predictors and outcome)")
    add_model_options(parser)
    add_collect_settings(parser)
    parser.set_defaults(handler=run_ripple)


def run_ripple(args) -> None:
    from lincorr.ripple import read_edits
    from lincorr.ripple.edits import EDITS_FILE
    from lincorr.ripple.hops import asked_hops
    from lincorr.ripple.study import RippleConfig, measure_ripple

    edits = read_edits(args.edits, args.max_edits)  # a bad file fails here, before the model loads
    registry = load_registry_from(args)
    asked_hops(edits, registry, args.phrasing)
    check_inputs_split(args.n_inputs)
    config = RippleConfig(n_inputs=args.n_inputs, seed=args.seed, training=args.training, phrasing=args.phrasing, top_k=args.top_k, n_boot=args.n_boot)
    result = measure_ripple(load_lm(args), edits, registry, config, edits_file=str(args.edits or EDITS_FILE),
                            settings=collect_settings(args))
    save_and_print(args, result)


def check_inputs_split(n_inputs: int) -> None:
    """-n holds out enough inputs to score each of W's fits on (`held_out.split_sizes` at each fit's test fraction): said
    before the model loads, where `FitConfig.check_sizes` said it after the load."""
    from lincorr.errors import DataError
    from lincorr.held_out import split_sizes
    from lincorr.ripple.predictors import W_FITS

    for config in W_FITS.values():
        try:
            split_sizes(n_inputs, config.test_fraction)
        except DataError as error:  # ripple samples its inputs: it has no --inputs to suggest
            raise DataError(str(error).removesuffix(" (or --inputs with that many lines)")) from None
