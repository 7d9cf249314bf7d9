"""`lincorr ablate`: the vocabulary ablation of §6 (Table 7), mean pooling and one fresh feed-forward block over frozen embeddings."""

from __future__ import annotations

from lincorr.cli.options import (
    COUNT,
    NON_NEGATIVE,
    SEED,
    Distinct,
    add_command,
    add_json_option,
    add_model_options,
    add_out_option,
    add_prompt_pair,
    add_registry_option,
    add_seed_option,
    checked_registry,
    load_lm,
    positive_number,
    print_json,
    save_and_print,
)
from lincorr.cli.spellings import add_paper_table_option
from lincorr.errors import UsageError

def add_commands(commands) -> None:
    ablate = add_command(commands, "ablate")
    add_prompt_pair(ablate, default=("city", "country"), help_text="registry prompt")
    ablate.add_argument("--mapping", choices=("real", "shuffled", "letters"), default="real",
                        help="the reference pairs as they are, deranged, or reduced to first letters")
    add_seed_option(ablate, "seed of the made-up names, the pair order and the block's initialisation")
    add_paper_table_option(ablate, ("7",), "run every Table 7 row and mapping over --seeds")
    ablate.add_argument("--embedding-width", type=COUNT, nargs="+", action=Distinct, default=None, metavar="K",
                        help="run SOURCE TARGET with every mapping over --seeds on the embeddings reduced to each K principal "
                             "components (PCA over the whole vocabulary, e.g. 64 128 256 640): does generalization grow with the "
                             "vocabulary's width?")
    ablate.add_argument("--seeds", type=SEED, nargs="+", action=Distinct, default=[0, 1, 2], help="seeds of --paper-table 7 and --embedding-width")
    add_out_option(ablate, "the tables of --paper-table 7 (table7.md and table7.json) or --embedding-width (widths.md and widths.json)")
    ablate.add_argument("--stage1-epochs", type=NON_NEGATIVE, default=10, help="epochs on the paired source/target texts")
    ablate.add_argument("--stage2-epochs", type=NON_NEGATIVE, default=20, help="epochs on the new source facts")
    ablate.add_argument("--train-batch-size", type=NON_NEGATIVE, default=32, help="mini-batch size; 0 trains full-batch")
    ablate.add_argument("--lr", type=positive_number, default=1e-3, help="AdamW learning rate")
    ablate.add_argument("--hidden-size", type=COUNT, default=None, help="feed-forward width (default: the model's MLP)")
    ablate.add_argument("--softmax", choices=("domains", "full"), default="domains", help="normalise over the domain tokens or the whole vocabulary")
    add_registry_option(ablate)
    add_json_option(ablate)
    add_model_options(ablate)
    ablate.set_defaults(handler=run_ablate)


def run_ablate(args) -> None:
    from lincorr.studies.training.ablation import AblationConfig, ablate, vocabulary_from_model
    from lincorr.studies.training.ablation_tables import measure_table7, measure_width_sweep
    from lincorr.relations import RelationSpec

    if args.paper_table and args.embedding_width:
        raise UsageError("pass --paper-table 7 or --embedding-width, not both")

    config = AblationConfig(
        stage1_epochs=args.stage1_epochs, stage2_epochs=args.stage2_epochs, batch_size=args.train_batch_size or None,
        learning_rate=args.lr, hidden_size=args.hidden_size, softmax_over=args.softmax,
    )
    registry = checked_registry(args, (args.source, args.target))
    lm = load_lm(args)
    vocabulary = vocabulary_from_model(lm.model, name=lm.name)
    if args.paper_table:
        table = measure_table7(vocabulary, lm.tokenizer, seeds=tuple(args.seeds), config=config, registry=registry)
        save_and_print(args, table)
        return
    if args.embedding_width:
        sweep = measure_width_sweep(vocabulary, lm.tokenizer, RelationSpec(args.source, args.target), widths=tuple(args.embedding_width),
                                seeds=tuple(args.seeds), config=config, registry=registry)
        save_and_print(args, sweep)
        return
    result = ablate(vocabulary, lm.tokenizer, RelationSpec(args.source, args.target), mapping=args.mapping, seed=args.seed, config=config, registry=registry)
    if args.json:
        print_json(result.summary())
    else:
        print(result.text())
