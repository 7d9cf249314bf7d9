"""The `lincorr` command: parse arguments, call the library, print."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

from lincorr import __version__
from lincorr.errors import LincorrError

DEMO_CITIES = ("Tokyo", "Paris", "Shanghai", "Moscow", "Madrid")


def model_options() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(add_help=False)
    group = parser.add_argument_group("model")
    group.add_argument("--model", default="gemma-3-270m", help="bundled alias, .gguf file, local directory or hub id (default: gemma-3-270m)")
    group.add_argument("--device", default=None, help="torch device, e.g. cpu, cuda, cuda:1, mps")
    group.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    group.add_argument("--device-map", default=None, help='passed to transformers, e.g. "auto" to spread a large model over GPUs')
    group.add_argument("--trust-remote-code", action="store_true", help="allow a hub model's own code to run (off by default)")
    return parser


def collection_options() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(add_help=False)
    group = parser.add_argument_group("inputs and collection")
    group.add_argument("-n", "--n-inputs", type=int, default=1000, help="number of vocabulary-sampled inputs X (default 1000)")
    group.add_argument("--seed", type=int, default=0)
    group.add_argument("--inputs", default=None, help="file with one input X per line (instead of a vocabulary sample)")
    group.add_argument("--batch-size", type=int, default=128, help="prompts per forward pass (default 128)")
    group.add_argument("--logprobs", action="store_true", help="log-softmax over the full vocabulary instead of raw logits")
    group.add_argument("--no-cache", action="store_true", help="recompute logit tables instead of reusing cached ones")
    group.add_argument("--registry", action="append", default=[], metavar="FILE", help="extra registry file (repeatable)")
    group.add_argument("--quiet", action="store_true", help="no progress bars")
    return parser


def fit_options() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(add_help=False)
    group = parser.add_argument_group("fit")
    group.add_argument("--estimator", choices=("ols", "ridge"), default="ols", help="ols (the paper) or ridge")
    group.add_argument("--alpha", default="1.0", help='ridge penalty, or "cv" for k-fold cross-validation on the train half')
    group.add_argument("--test-fraction", type=float, default=0.5)
    group.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples for the 95%% interval")
    return parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lincorr", description="Linear correlation between knowledge prompts of a language model.")
    parser.add_argument("-v", "--verbose", action="store_true", help="show library log messages")
    parser.add_argument("--version", action="version", version=f"lincorr {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # Fresh parents per command: argparse shares action objects, so one command's
    # set_defaults would otherwise change another's defaults.
    def shared():
        return [model_options(), collection_options(), fit_options()]

    demo = commands.add_parser("demo", parents=shared(), help="City->Country on the default model, with a heatmap and JSON")
    demo.add_argument("--out", default="lincorr-out", help="output directory (default ./lincorr-out)")
    # Ridge with a cross-validated penalty: at 1,000 inputs the paper's OLS W is too noisy to read.
    demo.set_defaults(handler=run_demo, estimator="ridge", alpha="cv")

    fit = commands.add_parser("fit", parents=shared(), help="fit and score W between two prompts")
    fit.add_argument("source", help="registry prompt name (e.g. city), or a label when --source-template is given")
    fit.add_argument("target", help="registry prompt name (e.g. country), or a label when --target-template is given")
    for side in ("source", "target"):
        fit.add_argument(f"--{side}-template", default=None, help=f'custom {side} template with one "{{}}"')
        fit.add_argument(f"--{side}-domain", default=None, metavar="FILE", help=f"custom {side} answer words, one per line")
    fit.add_argument("--top", action="append", default=[], metavar="WORD", help="print the top influenced targets of a source word (repeatable)")
    fit.add_argument("--top-influencing", action="append", default=[], metavar="WORD", help="print the top influencing sources of a target word")
    fit.add_argument("-k", "--top-k", type=int, default=5)
    fit.add_argument("--save-dir", default=None, help="write W, b, logits, tokens, inputs and result.json here")
    fit.add_argument("--heatmap", action="store_true", help="also write W.png into --save-dir")
    fit.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    fit.set_defaults(handler=run_fit)

    registry_parent = argparse.ArgumentParser(add_help=False)
    registry_parent.add_argument("--registry", action="append", default=[], metavar="FILE", help="extra registry file (repeatable)")
    registry_parent.add_argument("--family", default=None)
    registry_parent.add_argument("--json", action="store_true")
    templates = commands.add_parser("templates", parents=[registry_parent], help="list the registry's prompt templates")
    templates.set_defaults(handler=run_templates)
    domains = commands.add_parser("domains", parents=[registry_parent, model_options()], help="how each domain survives a model's tokenizer")
    domains.set_defaults(handler=run_domains)
    references = commands.add_parser("references", parents=[registry_parent], help="list the reference relations")
    references.set_defaults(handler=run_references)
    add_study_commands(commands, shared)
    add_ablation_command(commands)
    add_training_commands(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args.verbose)
    try:
        args.handler(args)
    except LincorrError as error:
        print(f"lincorr: error: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader went away (e.g. `| head`); silence the flush at exit too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print("lincorr: interrupted; run the same command again to resume from the cache", file=sys.stderr)
        return 130
    return 0


def configure_logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="lincorr: %(message)s")
    if not verbose:
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()


def load_lm(args):
    from lincorr.models import load_model

    return load_model(args.model, device=args.device, dtype=args.dtype, device_map=args.device_map, trust_remote_code=args.trust_remote_code)


def load_registry_from(args):
    """The registry of this command (bundled data + --registry files), read once per invocation."""
    if getattr(args, "loaded_registry", None) is None:
        from lincorr.knowledge import load_registry

        args.loaded_registry = load_registry(args.registry)
    return args.loaded_registry


def choose_inputs(args, tokenizer) -> list[str]:
    from lincorr.inputs import read_inputs_file, sample_vocab_inputs

    return read_inputs_file(args.inputs) if args.inputs else sample_vocab_inputs(tokenizer, args.n_inputs, args.seed)


def resolve_prompt(args, side: str, tokenizer):
    """A custom prompt when its template/domain options are given, else a registry prompt."""
    from lincorr.domains import read_word_file
    from lincorr.prompts import custom_prompt, registry_prompt

    name = getattr(args, side)
    template = getattr(args, f"{side}_template", None)
    domain_file = getattr(args, f"{side}_domain", None)
    if (template is None) != (domain_file is None):
        raise LincorrError(f"--{side}-template and --{side}-domain go together; give both or neither")
    if template is not None:
        return custom_prompt(template, read_word_file(domain_file), tokenizer, name=name)
    return registry_prompt(load_registry_from(args), name, tokenizer)


def fit_config(args):
    from lincorr.experiments.correlation import FitConfig

    alpha = args.alpha
    if alpha != "cv":
        try:
            alpha = float(alpha)
        except ValueError:
            raise LincorrError(f"--alpha must be a number or 'cv', got {args.alpha!r}") from None
    return FitConfig(seed=args.seed, estimator=args.estimator, alpha=alpha, test_fraction=args.test_fraction, n_boot=args.bootstrap)


def measure(args):
    """Load, resolve both prompts, pick inputs, and measure the pair."""
    from lincorr.experiments.correlation import measure_pair

    config = fit_config(args)
    if args.inputs is None and args.n_inputs < 4:
        raise LincorrError(f"-n must be at least 4 to split into train and test, got {args.n_inputs}")
    for side in ("source", "target"):
        domain_file = getattr(args, f"{side}_domain", None)
        if domain_file is not None and not Path(domain_file).is_file():
            raise LincorrError(f"--{side}-domain file {domain_file} does not exist; pass a text file with one word per line")
    if args.inputs is not None and not Path(args.inputs).is_file():
        raise LincorrError(f"--inputs file {args.inputs} does not exist; pass a text file with one input per line")
    for side in ("source", "target"):
        if getattr(args, f"{side}_template", None) is None:
            load_registry_from(args).prompt(getattr(args, side))  # fail on a bad name before loading the model
    lm = load_lm(args)
    source = resolve_prompt(args, "source", lm.tokenizer)
    target = resolve_prompt(args, "target", lm.tokenizer)
    inputs = choose_inputs(args, lm.tokenizer)
    return measure_pair(
        lm, source, target, inputs, config, logprobs=args.logprobs, batch_size=args.batch_size,
        cache=not args.no_cache, progress=not args.quiet and sys.stderr.isatty(),
    )


def run_fit(args) -> None:
    if args.heatmap and not args.save_dir:
        raise LincorrError("--heatmap writes into --save-dir; give a directory with --save-dir")
    result = measure(args)
    tops = {w: result.top_influenced(w, args.top_k) for w in args.top}
    influencing = {w: result.top_influencing(w, args.top_k) for w in args.top_influencing}
    if args.save_dir:
        result.save(args.save_dir, heatmap=args.heatmap, reference_pairs=registry_pairs(args))
    if args.json:
        payload = result.summary()
        if tops:
            payload["top_influenced"] = {w: [[t, round(v, 6)] for t, v in pairs] for w, pairs in tops.items()}
        if influencing:
            payload["top_influencing"] = {w: [[s, round(v, 6)] for s, v in pairs] for w, pairs in influencing.items()}
        print(json.dumps(payload, ensure_ascii=False))
        return
    print_result(result)
    print_tops(tops, "influenced targets")
    print_tops(influencing, "influencing sources")
    if args.save_dir:
        print(f"\nwrote {args.save_dir}/")


def registry_pairs(args):
    """Reference pairs for a registry prompt pair (None for custom prompts or unrelated pairs)."""
    if getattr(args, "source_template", None) or getattr(args, "target_template", None):
        return None
    registry = load_registry_from(args)
    reference = registry.reference_for(registry.prompt(args.source), registry.prompt(args.target))
    return reference.pairs if reference else None


def run_demo(args) -> None:
    import dataclasses

    from lincorr.experiments.correlation import fit_tables

    args.source, args.target = "city", "country"
    result = measure(args)
    tops = {w: result.top_influenced(w, 5) for w in DEMO_CITIES}
    result.save(args.out, heatmap=True, reference_pairs=registry_pairs(args))
    print_result(result)
    if result.config.estimator != "ols":
        paper = fit_tables(result.source, result.target, dataclasses.replace(result.config, estimator="ols"))
        print(f"paper's ols      label-wise r {paper.summary()['labelwise_r_mean']:.3f} on the same tables")
    print_tops(tops, "countries W links to")
    print(f"\nwrote {args.out}/W.png, {args.out}/result.json and the arrays behind them")


def print_result(result) -> None:
    s = result.summary()
    lo, hi = s["labelwise_r_ci95"]
    lines = [
        f"model            {s['model']}",
        f"source -> target {s['source']} ({s['n_source_domain']} words) -> {s['target']} ({s['n_target_domain']} words)",
        f"dropped words    {len(result.source.domain.dropped)} source, {len(result.target.domain.dropped)} target"
        " (first token a fragment or shared; listed in result.json)",
        f"inputs           {s['n_inputs']} ({s['n_train']} train / {s['n_test']} test), {s['kind']}",
        f"estimator        {s['estimator']}" + (f" (alpha {s['alpha']:.4g})" if s["estimator"] == "ridge" else ""),
        f"label-wise r     {s['labelwise_r_mean']:.3f} ± {s['labelwise_r_std']:.3f}   95% CI [{lo:.3f}, {hi:.3f}]",
        f"instance-wise r  {s['instancewise_r_mean']:.3f}",
        f"control r        {s['control_labelwise_r_mean']:.3f}   (W fitted on shuffled pairs)",
        f"time             {s['seconds']:.1f} s",
    ]
    print("\n".join(lines))


def print_tops(tops: dict, title: str) -> None:
    if not tops:
        return
    print(f"\ntop {title}:")
    width = max(len(w) for w in tops)
    for word, pairs in tops.items():
        print(f"  {word:<{width}}  " + ", ".join(f"{t} ({v:+.2f})" for t, v in pairs))


def run_templates(args) -> None:
    from lincorr.knowledge.report import templates_table

    rows = templates_table(load_registry_from(args), family=args.family)
    print_rows(rows, args.json, ("name", "family", "language", "domain_size", "template"))


def run_domains(args) -> None:
    from lincorr.knowledge.report import domains_report

    registry = load_registry_from(args)
    rows = domains_report(registry, load_lm(args).tokenizer, family=args.family)
    print_rows(rows, args.json, ("name", "domain", "domain_size", "kept", "dropped_count"))


def run_references(args) -> None:
    from lincorr.knowledge.report import references_table

    print_rows(references_table(load_registry_from(args)), args.json, ("name", "source_domain", "target_domain", "n_pairs"))


def print_rows(rows: list[dict], as_json: bool, columns: tuple[str, ...]) -> None:
    if as_json:
        print(json.dumps(rows, ensure_ascii=False))
        return
    columns = tuple(c for c in columns if rows and c in rows[0])
    widths = {c: max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in columns}
    print("  ".join(c.ljust(widths[c]) for c in columns))
    for row in rows:
        print("  ".join(str(row.get(c, "")).ljust(widths[c]) for c in columns))


# ---- studies over the registry: matrix, precision, cases, resilience, scale ----

def add_study_commands(commands, shared) -> None:
    """The study subcommands; `shared()` gives fresh model/collection/fit parents."""
    def grid_options(parser, required: bool = True) -> None:
        group = parser.add_argument_group("which prompts").add_mutually_exclusive_group(required=required)
        group.add_argument("--family", default=None, help="every ordered pair of a registry family (attribute, simile, math, cross-language)")
        group.add_argument("--prompts", default=None, metavar="A,B,...", help="every ordered pair of these registry prompts")
        group.add_argument("--cross-language", action="store_true", help="English knowledge k -> l/k for each language l (Fig. 3's X-Lang panel)")
        parser.add_argument("--languages", default=None, metavar="es,fr,...", help="languages of --cross-language (default: all in the registry)")

    matrix = commands.add_parser("matrix", parents=shared(), help="label-wise r, instance-wise r and label-wise std for every prompt pair")
    grid_options(matrix)
    matrix.add_argument("--out", default=None, help="write matrix.json, CSVs and PNG heatmaps here")
    matrix.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    matrix.set_defaults(handler=run_matrix)

    precision = commands.add_parser("precision", parents=shared(), help="Hit@Top-N of W against reference pairs, ols and ridge side by side")
    precision.add_argument("source", nargs="?", help="registry prompt name (e.g. city)")
    precision.add_argument("target", nargs="?", help="registry prompt name (e.g. country)")
    precision.add_argument("--references", default=None, metavar="FILE", help="your own pairs: TSV subject<TAB>object per line, or JSON")
    which = precision.add_mutually_exclusive_group()
    which.add_argument("--table2", action="store_true", help="the eight relation pairs of the paper's Table 2")
    which.add_argument("--all-references", action="store_true", help="every reference relation in the registry")
    precision.add_argument("--out", default=None, help="write precision.json, .csv and .md here")
    precision.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    # --estimator picks the headline numbers; the other estimator is reported beside them.
    precision.set_defaults(handler=run_precision, alpha="cv")

    cases = commands.add_parser("cases", parents=shared(), help="top influenced / influencing words of W (Tables 3, 15, 16, 17)")
    cases.add_argument("source", nargs="?", help="registry prompt name (e.g. city)")
    cases.add_argument("target", nargs="?", help="registry prompt name (e.g. country)")
    cases.add_argument("--influencing", action="store_true", help="rows are target words with their top influencing sources")
    cases.add_argument("--word", action="append", default=[], metavar="WORD", help="a row word (repeatable; default every word)")
    cases.add_argument("-k", "--top-k", type=int, default=5)
    cases.add_argument("--paper-table", choices=("3", "15", "16", "17"), default=None, help="the rows of one of the paper's case tables")
    cases.add_argument("--out", default=None, help="write cases.md, cases.csv and cases.json here")
    cases.add_argument("--json", action="store_true")
    cases.set_defaults(handler=run_cases)

    resilience = commands.add_parser("resilience", parents=shared(), help="fit W on one model, evaluate it on another checkpoint")
    grid_options(resilience)
    resilience.add_argument("--fit-model", dest="model", default="gemma-3-270m", help="model A, to fit W on (same as --model)")
    eval_from = resilience.add_mutually_exclusive_group(required=True)
    eval_from.add_argument("--eval-model", default=None, help="model B: another checkpoint with A's tokenizer")
    eval_from.add_argument("--finetune-text", default=None, metavar="FILE", help="model B = A fine-tuned on this text file (one passage per line)")
    resilience.add_argument("--lr", type=float, default=5e-5, help="fine-tuning learning rate (default 5e-5)")
    resilience.add_argument("--epochs", type=int, default=1, help="fine-tuning epochs (default 1)")
    resilience.add_argument("--train-batch-size", type=int, default=8)
    resilience.add_argument("--out", default=None, help="write resilience.json, pairs.csv, difference.png and the three matrices here")
    resilience.add_argument("--json", action="store_true")
    resilience.set_defaults(handler=run_resilience)

    scale = commands.add_parser("scale", parents=shared(), help="correlation and W precision across models (Fig. 4)")
    scale.add_argument("--models", required=True, metavar="A,B,...", help="comma-separated model specs")
    scale.add_argument("--relations", default="city:country,ceo:company", metavar="S:T,...", help="prompt pairs (default city:country,ceo:company)")
    scale.add_argument("--out", default=None, help="write scale.json, scale.csv and scale_<estimator>.png here")
    scale.add_argument("--json", action="store_true")
    scale.set_defaults(handler=run_scale, alpha="cv")


def split_names(text: str, option: str) -> list[str]:
    """"a, b,c" -> ["a", "b", "c"]; an empty list is the user's mistake."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise LincorrError(f"{option} needs at least one name, e.g. {option} city,country")
    return names


def study_inputs_check(args) -> None:
    """Fail on unusable input options before loading a model."""
    if args.inputs is not None and not Path(args.inputs).is_file():
        raise LincorrError(f"--inputs file {args.inputs} does not exist; pass a text file with one input per line")
    if args.inputs is None and args.n_inputs < 4:
        raise LincorrError(f"-n must be at least 4 to split into train and test, got {args.n_inputs}")


def chosen_grid(args, registry):
    from lincorr.experiments.matrix import Grid

    if args.cross_language:
        return Grid.cross_language(registry, split_names(args.languages, "--languages") if args.languages else None)
    if args.family:
        return Grid.square([spec.name for spec in registry.family(args.family)], f"{args.family} family")
    names = split_names(args.prompts, "--prompts")
    for name in names:
        registry.prompt(name)
    return Grid.square(names, "selected prompts")


def collect_kwargs(args) -> dict:
    return {"logprobs": args.logprobs, "batch_size": args.batch_size, "cache": not args.no_cache,
            "progress": not args.quiet and sys.stderr.isatty()}


def run_matrix(args) -> None:
    from lincorr.experiments.matrix import measure_matrix

    study_inputs_check(args)
    registry = load_registry_from(args)
    grid = chosen_grid(args, registry)
    config = fit_config(args)
    lm = load_lm(args)
    result = measure_matrix(lm, registry, grid, choose_inputs(args, lm.tokenizer), config, **collect_kwargs(args))
    if args.out:
        result.save(args.out)
    if args.json:
        print(json.dumps(result.summary(), ensure_ascii=False))
        return
    print(f"{result.model_name}: {grid.title}, {result.n_inputs} inputs, {config.estimator}; label-wise r (row = source, column = target)")
    print(result.format_table("labelwise_r"))
    for name, reason in result.skipped:
        print(f"skipped {name}: {reason}")
    print(f"\ncollection {result.seconds_collect:.1f} s, fits {result.seconds_fit:.1f} s" + (f"; wrote {args.out}/" if args.out else ""))


def precision_configs(args) -> list:
    import dataclasses

    primary = fit_config(args)
    other = dataclasses.replace(primary, estimator="ridge" if primary.estimator == "ols" else "ols")
    return [primary, other]


def run_precision(args) -> None:
    from lincorr.experiments.precision import precision_table
    from lincorr.paper import paper_table
    from lincorr.relations import RelationSpec, read_reference_file, registry_relations

    study_inputs_check(args)
    single = not (args.table2 or args.all_references)
    if single and not (args.source and args.target):
        raise LincorrError("name a SOURCE and a TARGET prompt (e.g. lincorr precision city country), or pass --table2 or --all-references")
    if not single and args.source:
        raise LincorrError("--table2 and --all-references take no SOURCE/TARGET; drop them or drop the option")
    pairs = read_reference_file(args.references) if args.references else None
    registry = load_registry_from(args)
    if single:
        relations = [RelationSpec(args.source, args.target)]
        for name in (args.source, args.target):
            registry.prompt(name)
    else:
        relations = paper_table("table2").relations() if args.table2 else registry_relations(registry)
    configs = precision_configs(args)
    lm = load_lm(args)
    table = precision_table(lm, registry, relations, choose_inputs(args, lm.tokenizer), configs, reference_pairs=pairs, **collect_kwargs(args))
    if args.out:
        table.save(args.out)
    if single:
        by_estimator = {row.estimator: row.summary() for row in table.rows}
        if configs[0].estimator not in by_estimator:
            raise LincorrError("; ".join(reason for _, reason in table.skipped) or "no result")
        if args.json:
            skipped = [{"relation": label, "reason": reason} for label, reason in table.skipped]
            print(json.dumps({**by_estimator[configs[0].estimator], "by_estimator": by_estimator, "skipped": skipped}, ensure_ascii=False))
            return
    elif args.json:
        print(json.dumps(table.summary(), ensure_ascii=False))
        return
    print(f"{table.model_name}, {table.n_inputs} inputs; Hit@Top-N of W against reference pairs (chance@1 = a random ranking)")
    print(table.format_table())
    if args.out:
        print(f"\nwrote {args.out}/")


def run_cases(args) -> None:
    from lincorr.experiments.cases import CaseSpec, measure_cases, paper_cases, save_case_tables
    from lincorr.relations import RelationSpec

    study_inputs_check(args)
    if args.paper_table:
        if args.source or args.word:
            raise LincorrError("--paper-table chooses the prompts and words itself; drop SOURCE/TARGET and --word")
        specs = paper_cases(args.paper_table)
    elif args.source and args.target:
        specs = [CaseSpec(RelationSpec(args.source, args.target), "influencing" if args.influencing else "influenced", tuple(args.word) or None, args.top_k)]
    else:
        raise LincorrError("name a SOURCE and a TARGET prompt (e.g. lincorr cases city country --word Paris), or pass --paper-table 3")
    registry = load_registry_from(args)
    for name in {n for spec in specs for n in (spec.relation.source, spec.relation.target)}:
        registry.prompt(name)  # a mistyped name fails before the model loads
    lm = load_lm(args)
    tables = measure_cases(lm, registry, specs, choose_inputs(args, lm.tokenizer), fit_config(args), **collect_kwargs(args))
    if args.out:
        save_case_tables(tables, args.out)
    if args.json:
        print(json.dumps([t.summary() for t in tables], ensure_ascii=False))
        return
    print("\n\n".join(t.markdown() for t in tables))


def run_resilience(args) -> None:
    from lincorr.experiments.resilience import finetune_on_text, measure_resilience
    from lincorr.finetune import TrainConfig
    from lincorr.models import load_model

    study_inputs_check(args)
    if args.finetune_text and not Path(args.finetune_text).is_file():
        raise LincorrError(f"--finetune-text file {args.finetune_text} does not exist; pass a text file")
    registry = load_registry_from(args)
    grid = chosen_grid(args, registry)
    config = fit_config(args)
    fit_lm = load_lm(args)
    training = None
    if args.finetune_text:
        train = TrainConfig(learning_rate=args.lr, epochs=args.epochs, batch_size=args.train_batch_size, seed=args.seed,
                            progress=not args.quiet and sys.stderr.isatty())
        eval_lm, training = finetune_on_text(fit_lm, args.finetune_text, train)
    else:
        eval_lm = load_model(args.eval_model, device=args.device, dtype=args.dtype, device_map=args.device_map,
                             trust_remote_code=args.trust_remote_code)
    result = measure_resilience(fit_lm, eval_lm, registry, grid, choose_inputs(args, fit_lm.tokenizer), config,
                                training=training, **collect_kwargs(args))
    if args.out:
        result.save(args.out)
    if args.json:
        print(json.dumps(result.summary(), ensure_ascii=False))
        return
    if training:
        print(f"fine-tuned on {training['n_examples']} passages of {training['text_file']}: {training['steps']} steps, "
              f"loss per epoch {', '.join(f'{v:.3f}' for v in training['losses'])}, {training['seconds']:.0f} s\n")
    print(result.format_table())
    if args.out:
        print(f"\nwrote {args.out}/")


def run_scale(args) -> None:
    from lincorr.experiments.scale import measure_scale
    from lincorr.relations import RelationSpec
    from lincorr.models import load_model

    if args.inputs:
        raise LincorrError("scale samples inputs from each model's own vocabulary; use -n instead of --inputs")
    study_inputs_check(args)
    relations = []
    for item in split_names(args.relations, "--relations"):
        source, _, target = item.partition(":")
        if not target:
            raise LincorrError(f"--relations takes SOURCE:TARGET pairs, got {item!r}")
        relations.append(RelationSpec(source, target))
    registry = load_registry_from(args)
    for name in {n for relation in relations for n in (relation.source, relation.target)}:
        registry.prompt(name)

    def load(spec):
        return load_model(spec, device=args.device, dtype=args.dtype, device_map=args.device_map, trust_remote_code=args.trust_remote_code)

    result = measure_scale(split_names(args.models, "--models"), registry, relations, args.n_inputs, precision_configs(args),
                           seed=args.seed, load=load, **collect_kwargs(args))
    if args.out:
        result.save(args.out)
    if args.json:
        print(json.dumps(result.summary(), ensure_ascii=False))
        return
    print(result.format_table())
    if args.out:
        print(f"\nwrote {args.out}/")




# ---- the vocabulary ablation (§6, Table 7) ----

def add_ablation_command(commands) -> None:
    """`lincorr ablate`: mean pooling + one fresh feed-forward block over frozen vocabulary embeddings."""
    ablate = commands.add_parser("ablate", parents=[model_options()], help="the vocabulary ablation of §6 (Table 7)")
    ablate.add_argument("source", nargs="?", default="city", help="registry prompt (default city)")
    ablate.add_argument("target", nargs="?", default="country", help="registry prompt (default country)")
    ablate.add_argument("--mapping", choices=("real", "shuffled", "letters"), default="real")
    ablate.add_argument("--seed", type=int, default=0)
    ablate.add_argument("--table7", action="store_true", help="run every Table 7 row and mapping over --seeds")
    ablate.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ablate.add_argument("--out", default=None, help="with --table7: write the Markdown table (and .json) here")
    ablate.add_argument("--stage1-epochs", type=int, default=10)
    ablate.add_argument("--stage2-epochs", type=int, default=20)
    ablate.add_argument("--train-batch-size", type=int, default=32, help="mini-batch size; 0 trains full-batch")
    ablate.add_argument("--lr", type=float, default=1e-3)
    ablate.add_argument("--hidden-size", type=int, default=None, help="feed-forward width (default: the model's MLP)")
    ablate.add_argument("--softmax", choices=("domains", "full"), default="domains", help="normalise over the domain tokens or the whole vocabulary")
    ablate.add_argument("--registry", action="append", default=[], metavar="FILE")
    ablate.add_argument("--json", action="store_true")
    ablate.add_argument("--quiet", action="store_true")
    ablate.set_defaults(handler=run_ablate)


def run_ablate(args) -> None:
    from lincorr.experiments.ablation import AblationConfig, ablate, run_table7, vocabulary_from_model
    from lincorr.outputs import write_text_atomic

    config = AblationConfig(
        stage1_epochs=args.stage1_epochs, stage2_epochs=args.stage2_epochs, batch_size=args.train_batch_size or None,
        learning_rate=args.lr, hidden_size=args.hidden_size, softmax_over=args.softmax, progress=not args.quiet and sys.stderr.isatty(),
    )
    registry = load_registry_from(args)
    registry.prompt(args.source), registry.prompt(args.target)  # fail on a bad name before loading the model
    lm = load_lm(args)
    vocabulary = vocabulary_from_model(lm.model, name=lm.name)
    if args.table7:
        table = run_table7(vocabulary, lm.tokenizer, seeds=tuple(args.seeds), config=config, registry=registry)
        if args.out:
            write_text_atomic(args.out, table.markdown() + "\n")
            write_text_atomic(Path(args.out).with_suffix(".json"), json.dumps(table.rows(), indent=2, ensure_ascii=False) + "\n")
        print(json.dumps(table.rows(), ensure_ascii=False) if args.json else table.markdown())
        return
    from lincorr.relations import RelationSpec

    result = ablate(vocabulary, lm.tokenizer, RelationSpec(args.source, args.target), mapping=args.mapping, seed=args.seed, config=config, registry=registry)
    summary = result.summary()
    if args.json:
        print(json.dumps(summary, ensure_ascii=False))
        return
    for key in ("relation", "mapping", "seed", "generalization_rate", "rate_before", "random_baseline", "source_learned_rate", "n_test", "seconds"):
        value = summary[key]
        print(f"{key:<20} {value:.4f}" if isinstance(value, float) else f"{key:<20} {value}")


def add_training_commands(commands) -> None:
    """The training studies of §4.1, §5 and Appendix K, and `predict-edit` (their own input options: W is fitted on a vocabulary sample)."""
    def study_parser(name: str, help_text: str, pair_required: bool = False):
        parser = commands.add_parser(name, parents=[model_options(), fit_options()], help=help_text)
        nargs = None if pair_required else "?"
        parser.add_argument("source", nargs=nargs, default="city", help="registry prompt (default city)")
        parser.add_argument("target", nargs=nargs, default="country", help="registry prompt (default country)")
        parser.add_argument("-n", "--n-inputs", type=int, default=1000, help="vocabulary inputs W is fitted on (default 1000)")
        parser.add_argument("--seed", type=int, default=0, help="first seed (inputs, entity names, facts, training)")
        parser.add_argument("--registry", action="append", default=[], metavar="FILE", help="extra registry file (repeatable)")
        parser.add_argument("--json", action="store_true", help="print one JSON object")
        parser.add_argument("--out", default=None, help="write the result files into this directory")
        parser.add_argument("--quiet", action="store_true", help="no progress bars")
        # Ridge with a cross-validated penalty: at 1,000 inputs the ols W is too noisy to rank targets by.
        parser.set_defaults(estimator="ridge", alpha="cv", bootstrap=100)
        return parser

    def training_options(parser, train, with_epochs: bool = True) -> None:
        lr, epochs = train.learning_rate, train.epochs
        parser.add_argument("--lr", type=float, default=lr, help=f"AdamW learning rate (default {lr:g})")
        if with_epochs:
            parser.add_argument("--epochs", type=int, default=epochs, help=f"most epochs over the facts (default {epochs}; see --all-epochs)")
        parser.add_argument("--train-batch-size", type=int, default=train.batch_size, help=f"facts per step (default {train.batch_size})")
        parser.add_argument("--full", action="store_true", help="train every parameter, embeddings included (default: transformer blocks)")

    def generalization_options(parser) -> None:
        from lincorr.experiments.generalization import DEFAULT_MARGIN, DEFAULT_TRAIN

        parser.add_argument("--n-facts", type=int, default=16, help="fresh entities taught per seed (default 16)")
        parser.add_argument("--n-seeds", type=int, default=3, help="seeds --seed, --seed+1, ... (default 3)")
        parser.add_argument("--margin", type=float, default=DEFAULT_MARGIN, help="logit lead the edited source answer is assumed to get")
        training_options(parser, DEFAULT_TRAIN)
        parser.add_argument("--all-epochs", action="store_true",
                            help="train all --epochs (default: stop after the first epoch at which every taught fact is learned)")

    generalize = study_parser("generalize", "teach fresh entities source facts; does the target answer follow (Table 5)?")
    generalization_options(generalize)
    generalize.add_argument("--table5", action="store_true", help="run the paper's eleven Table-5 pairs (ignores SOURCE TARGET)")
    generalize.set_defaults(handler=run_generalize)

    diagnose = study_parser("diagnose", "per edited fact: W[s,ref], W[s,gen], priors, and why it failed (Table 6, Fig. 5)")
    generalization_options(diagnose)
    diagnose.add_argument("--rows", type=int, default=20, help="table rows to print (default 20)")
    diagnose.set_defaults(handler=run_diagnose)

    subwords = study_parser("subwords", "correlation, precision and generalization by token category (Table 18)")
    generalization_options(subwords)
    subwords.set_defaults(handler=run_subwords)

    gradcorr = study_parser("gradcorr", "one optimiser step on source facts: does dS @ W predict dT (Table 4)?")
    from lincorr.experiments.gradients import GradientConfig

    training_options(gradcorr, GradientConfig.train, with_epochs=False)  # one step, by definition
    gradcorr.add_argument("--n-step-facts", type=int, default=GradientConfig.n_step_facts, help="training inputs in the step")
    gradcorr.add_argument("--n-eval", type=int, default=GradientConfig.n_eval, help="held-out inputs the change is measured on")
    gradcorr.add_argument("--table4", action="store_true", help="run the paper's eight Table-4 pairs (ignores SOURCE TARGET)")
    gradcorr.set_defaults(handler=run_gradcorr)

    predict = study_parser("predict-edit", "predict, without training, what teaching 'SOURCE(subject) = VALUE' does to TARGET", pair_required=True)
    predict.add_argument("--value", required=True, metavar="WORD", help="the proposed source answer, e.g. Indianapolis")
    predict.add_argument("--subject", default=None, metavar="NAME", help="the entity to edit (default: a fresh made-up name)")
    predict.add_argument("--margin", type=float, default=None, help="logit lead the edited source answer is assumed to get")
    predict.add_argument("--delta", type=float, default=None, metavar="LOGITS",
                         help="assumed rise of the source answer's logit instead of --margin (a study's mean_source_delta)")
    predict.set_defaults(handler=run_predict_edit)


def training_config(args, default_trainable):
    """The TrainConfig behind --lr, --epochs, --train-batch-size and --full."""
    from lincorr.finetune import TrainConfig

    return TrainConfig(
        learning_rate=args.lr, epochs=getattr(args, "epochs", 1), batch_size=args.train_batch_size, seed=args.seed,
        trainable=() if args.full else default_trainable, progress=not args.quiet and sys.stderr.isatty(),
    )


def generalization_config(args):
    from lincorr.experiments.generalization import BLOCKS_ONLY, GeneralizationConfig

    if args.n_seeds < 1:
        raise LincorrError(f"--n-seeds must be at least 1, got {args.n_seeds}")
    return GeneralizationConfig(
        n_facts=args.n_facts, seeds=tuple(range(args.seed, args.seed + args.n_seeds)), n_inputs=args.n_inputs, fit=fit_config(args),
        train=training_config(args, BLOCKS_ONLY), margin=args.margin, until_learned=not args.all_epochs,
        progress=not args.quiet and sys.stderr.isatty(),
    )


def check_pair(registry, args) -> None:
    """Fail on a misspelt prompt before loading the model."""
    registry.prompt(args.source), registry.prompt(args.target)


def run_generalize(args) -> None:
    from lincorr.experiments.generalization import generalization_table, run_generalization, table5_markdown
    from lincorr.paper import paper_table
    from lincorr.relations import RelationSpec

    registry = load_registry_from(args)
    config = generalization_config(args)
    if not args.table5:
        check_pair(registry, args)
        result = run_generalization(load_lm(args), registry, RelationSpec(args.source, args.target), config)
        if args.out:
            result.save(args.out)
        print(json.dumps(result.summary(), ensure_ascii=False) if args.json else result.format_table())
        return
    relations = paper_table("table5").relations()
    for relation in relations:
        registry.prompt(relation.source), registry.prompt(relation.target)
    rows = generalization_table(load_lm(args), registry, relations, config,
                                on_row=None if args.json else lambda row: print(table5_line(row), flush=True))
    if args.out:
        from lincorr.outputs import staged_directory, write_json

        with staged_directory(args.out) as out:
            write_json(out / "table5.json", rows)
            (out / "table5.md").write_text(table5_markdown(rows) + "\n", encoding="utf-8")
    if args.json:
        print(json.dumps(rows, ensure_ascii=False))


def table5_line(row: dict) -> str:
    """One Table-5 row: ours (with spread, before, chance, learned) beside the paper's."""
    if "skipped" in row:
        return f"{row['relation']:<22} skipped: {row['skipped']}"
    return (f"{row['relation']:<22} {row['generalization_rate']:6.1%} ± {row['generalization_rate_std']:5.1%}  before {row['rate_before']:5.1%}  "
            f"random {row['random_baseline']:5.1%}  learned {row['source_learned_rate']:6.1%}  "
            f"paper {row['paper_generalization_rate']:6.2%} ({row['paper_random_baseline']:.2%})")


def run_diagnose(args) -> None:
    from lincorr.experiments.generalization import run_generalization
    from lincorr.relations import RelationSpec

    registry = load_registry_from(args)
    check_pair(registry, args)
    result = run_generalization(load_lm(args), registry, RelationSpec(args.source, args.target), generalization_config(args))
    if args.out:
        result.save(args.out)
    if args.json:
        print(json.dumps({**result.summary(), "facts": result.diagnosis_rows(), "weight_curve": result.weight_curve()}, ensure_ascii=False))
        return
    print(result.format_table())
    print()
    print(result.diagnosis_markdown(max_rows=args.rows))
    print("\ngeneralization rate by W[s, ref] (learned facts, quantile bins):")
    for row in result.weight_curve():
        print(f"  W[s,ref] in [{row['w_ref_low']:+.3f}, {row['w_ref_high']:+.3f}]  n={row['n']:3d}  rate {row['generalization_rate']:.1%}")


def run_subwords(args) -> None:
    from lincorr.experiments.subwords import subword_study
    from lincorr.relations import RelationSpec

    registry = load_registry_from(args)
    check_pair(registry, args)
    result = subword_study(load_lm(args), registry, RelationSpec(args.source, args.target), generalization_config(args))
    if args.out:
        result.save(Path(args.out))
    print(json.dumps(result.summary(), ensure_ascii=False) if args.json else result.markdown())


def run_gradcorr(args) -> None:
    from lincorr.experiments.generalization import BLOCKS_ONLY
    from lincorr.experiments.gradients import GradientConfig, gradient_table
    from lincorr.paper import paper_table
    from lincorr.relations import RelationSpec

    registry = load_registry_from(args)
    table4 = paper_table("table4").relations()
    paper_labels = {(r.source, r.target): r.label for r in table4}  # so a single Table-4 pair prints the paper's numbers too
    relations = (table4 if args.table4 else
                 [RelationSpec(args.source, args.target, paper_labels.get((args.source, args.target), ""))])
    for relation in relations:
        registry.prompt(relation.source), registry.prompt(relation.target)
    config = GradientConfig(
        n_inputs=args.n_inputs, n_step_facts=args.n_step_facts, n_eval=args.n_eval, fit=fit_config(args),
        train=training_config(args, BLOCKS_ONLY), seed=args.seed, progress=not args.quiet and sys.stderr.isatty(),
    )
    def report(row: dict) -> None:
        done = f"skipped: {row['skipped']}" if "skipped" in row else f"gradient r {row['gradient_r']:.2f} (control {row['control_r']:.2f})"
        print(f"{row['relation']}: {done}", file=sys.stderr, flush=True)

    table = gradient_table(load_lm(args), registry, relations, config, on_row=report if args.table4 and not args.quiet else None)
    if args.out:
        table.save(args.out)
    print(json.dumps(table.summary(), ensure_ascii=False) if args.json else table.markdown())


def run_predict_edit(args) -> None:
    from lincorr.names import pseudo_names
    from lincorr.experiments.correlation import fit_relation
    from lincorr.experiments.generalization import DEFAULT_MARGIN, predict_edit
    from lincorr.relations import RelationSpec

    if args.delta is not None and args.margin is not None:
        raise LincorrError("pass --delta (the rise of the source logit) or --margin (its lead over the others), not both")
    registry = load_registry_from(args)
    check_pair(registry, args)
    lm = load_lm(args)
    relation = fit_relation(lm, registry, RelationSpec(args.source, args.target), n_inputs=args.n_inputs, fit=fit_config(args),
                                progress=not args.quiet and sys.stderr.isatty())
    subject = args.subject or pseudo_names(1, lm.tokenizer, args.seed + 10_000)[0]
    prediction = predict_edit(lm, relation, args.value, subject, margin=DEFAULT_MARGIN if args.margin is None else args.margin,
                              delta=args.delta)
    summary = {"model": lm.name, "source": args.source, "target": args.target, "subject": subject, **prediction.summary(),
               "labelwise_r_mean": float(relation.fit.labelwise_r.mean())}
    if args.out:
        from lincorr.outputs import staged_directory, write_json

        with staged_directory(args.out) as out:
            write_json(out / "prediction.json", summary)
    if args.json:
        print(json.dumps(summary, ensure_ascii=False))
        return
    verdict = {True: "the reference answer (generalization)", False: "not a reference answer (hallucination)", None: "no reference known"}
    print(f"edit: {relation.source.template.replace('{}', subject)} {args.value}")
    print(f"now:  {relation.target.template.replace('{}', subject)} {prediction.current_target}")
    print(f"predicted after the edit: {prediction.predicted_target} (confidence {prediction.confidence:.2f}, "
          f"runner-up {prediction.runner_up}, margin {prediction.margin:.2f} logits)")
    print(f"that is {verdict[prediction.predicts_reference]}; reference: {', '.join(prediction.references) or '-'}; "
          f"P(reference) {prediction.success_probability:.2f}")


if __name__ == "__main__":
    sys.exit(main())
