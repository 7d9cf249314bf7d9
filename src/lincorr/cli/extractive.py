"""`lincorr extractive`: the extractive-structures studies of Feng et al. on two-hop facts about made-up people.

`ocr` (Fig. 2), `scores` (Fig. 3), `freeze` (Table 2), `ordering` (Fig. 4), `graft` (Table 3, Fig. 6)
and `predict` (lincorr's W as a predictor of which implications OCR gets right).
"""

from __future__ import annotations

from lincorr.cli.listing import HELP
from lincorr.cli.options import (
    COUNT,
    NON_NEGATIVE,
    add_collect_settings,
    add_command,
    add_json_option,
    add_memory_plan_option,
    add_model_options,
    add_n_inputs_option,
    add_out_option,
    add_registry_option,
    add_seed_option,
    collect_settings,
    load_lm,
    load_registry_from,
    positive_number,
    save_and_print,
)

PRESETS = ("small", "paper")


def add_commands(commands) -> None:
    group = commands.add_parser("extractive", help=HELP["extractive"], description=__doc__.split("\n\n")[0])
    studies = group.add_subparsers(dest="study", required=True, metavar="STUDY")

    def study(name: str, help_text: str, writes: str, *, hop: bool = False):
        parser = add_command(studies, name, help_text)
        if hop:
            parser.add_argument("--hop", choices=("first", "second"), default="first",
                                help="first: facts name -> city, implications -> language; second: facts city -> name, implications landmark -> name")
        add_seed_option(parser, "seed of the names, their pairing with cities, and training")
        add_training_options(parser)
        add_registry_option(parser)
        add_json_option(parser)
        add_out_option(parser, writes)
        add_model_options(parser)
        return parser

    ocr = study("ocr", "fine-tune on facts only; mean ranks of facts and implications after every epoch (Fig. 2)",
                "ocr.json, per_epoch.csv and ocr.png", hop=True)
    add_n_facts(ocr)
    ocr.set_defaults(handler=study_handler("ocr", "measure_ocr", ocr_config))

    scores = study("scores", "informative, downstream and upstream scores of every MLP and head (Fig. 3)",
                   "scores.json, scores.csv, scores.png, linearization.png and, by token role, scores_by_role.csv and .png", hop=True)
    add_n_facts(scores)
    scores.add_argument("--check", type=NON_NEGATIVE, default=12, help="components whose exact scores (eqs. 1-3) check the linearisation")
    scores.set_defaults(handler=study_handler("scores", "measure_scores", scores_config))

    freeze = study("freeze", "reset or freeze early-middle or late blocks; mean ranks for both hops (Table 2)",
                   "freeze.json, freeze.csv and freeze.png")
    add_n_facts(freeze)
    freeze.add_argument("--split", choices=("paper", "scores"), default="paper",
                        help="early-middle blocks: the paper's first three quarters, or the split the informative scores choose")
    freeze.add_argument("--split-layer", type=COUNT, default=None, help="first late block, by hand (overrides --split)")
    freeze.set_defaults(handler=study_handler("freeze", "measure_freeze", freeze_config))

    ordering = study("ordering", "continued training in three orders, then OCR on new facts (Fig. 4)",
                     "ordering.json, ordering.csv and ordering.png")
    add_novel_sizes(ordering)
    ordering.set_defaults(handler=study_handler("origins", "measure_ordering", origins_config))

    graft = study("graft", "graft the weight change of training on implications onto counterfactual facts (Table 3, Fig. 6)",
                  "graft.json, graft_scores.csv and graft.png")
    add_novel_sizes(graft)
    graft.set_defaults(handler=study_handler("origins", "measure_graft", origins_config))

    predict = study("predict", "does W[city, language] of the untrained model predict which first-hop implications come out right?",
                    "ocr_prediction.json, ocr_prediction.csv and ocr_prediction.png")
    add_n_facts(predict)
    add_n_inputs_option(predict, "vocabulary inputs W is fitted on")
    add_collect_settings(predict)
    predict.set_defaults(handler=study_handler("predict", "measure_ocr_prediction", predict_config, collects=True))


def add_n_facts(parser) -> None:
    parser.add_argument("--n-facts", type=COUNT, default=20, help="facts (made-up names, each paired with one city)")


def add_novel_sizes(parser) -> None:
    parser.add_argument("--n-train", type=COUNT, default=80, help="training names (each at a random city)")
    parser.add_argument("--n-test", type=COUNT, default=20, help="test names (one per city)")
    parser.add_argument("--n-cities", type=COUNT, default=20, help="cities, each with a random animal")


def add_training_options(parser) -> None:
    group = parser.add_argument_group("training")
    group.add_argument("--preset", choices=PRESETS, default="small",
                       help="small: AdamW 3e-5, batch 4, 8 epochs, blocks only; paper: Adam 3e-6, batch 8, 8 epochs, linear decay "
                            "with 10%% warm-up, every parameter")
    group.add_argument("--lr", type=positive_number, default=None, help="learning rate (default: the preset's)")
    group.add_argument("--epochs", type=COUNT, default=None, help="epochs (default: the preset's)")
    group.add_argument("--train-batch-size", type=COUNT, default=None, help="facts per step (default: the preset's)")
    add_memory_plan_option(group)


def train_config(args, base=None):
    """The preset's TrainConfig (or `base`, a study's own default under the small preset) with --lr, --epochs, --train-batch-size,
    --seed and --memory-plan."""
    import dataclasses

    from lincorr.studies.extractive.ocr import PAPER_TRAIN, SMALL_TRAIN

    preset = PAPER_TRAIN if args.preset == "paper" else (base or SMALL_TRAIN)
    overrides = {"learning_rate": args.lr, "epochs": args.epochs, "batch_size": args.train_batch_size}
    return dataclasses.replace(preset, seed=args.seed, memory_plan=args.memory_plan, **{k: v for k, v in overrides.items() if v is not None})


def study_handler(module: str, function: str, make_config, *, collects: bool = False):
    """A handler running `lincorr.studies.extractive.<module>.<function>(lm, registry, make_config(args))`.

    A study that `collects` logit tables also gets the `CollectSettings` of the collection options.
    The registry's extractive data is checked before the model loads; the study module is imported
    only when its command runs.
    """

    def handle(args) -> None:
        from importlib import import_module

        from lincorr.studies.extractive.ocr import load_world

        registry = load_registry_from(args)
        load_world(registry)
        config = make_config(args)
        run = getattr(import_module(f"lincorr.studies.extractive.{module}"), function)
        settings = (collect_settings(args),) if collects else ()
        result = run(load_lm(args), registry, config, *settings)
        save_and_print(args, result)

    return handle


def ocr_config(args):
    from lincorr.studies.extractive.ocr import OcrConfig

    return OcrConfig(hop=args.hop, n_facts=args.n_facts, seed=args.seed, train=train_config(args))


def scores_config(args):
    from lincorr.studies.extractive.scores import ScoresConfig

    return ScoresConfig(update=ocr_config(args), n_checked=args.check)


def freeze_config(args):
    from lincorr.studies.extractive.freeze import FreezeConfig

    return FreezeConfig(n_facts=args.n_facts, seed=args.seed, train=train_config(args), split=args.split, split_layer=args.split_layer)


def origins_config(args):
    from lincorr.studies.extractive.origins import CONTINUED_TRAIN, OriginsConfig

    return OriginsConfig(n_train=args.n_train, n_test=args.n_test, n_cities=args.n_cities, seed=args.seed,
                         continued=train_config(args, CONTINUED_TRAIN), train=train_config(args))


def predict_config(args):
    from lincorr.studies.extractive.predict import PredictConfig

    return PredictConfig(n_facts=args.n_facts, seed=args.seed, train=train_config(args), n_inputs=args.n_inputs)
