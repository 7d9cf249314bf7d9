"""The `lincorr` command: parse arguments, call the library, print."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

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
    group.add_argument("--batch-size", type=int, default=64)
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
    from lincorr.knowledge import load_registry

    return load_registry(args.registry)


def choose_inputs(args, tokenizer) -> list[str]:
    from lincorr.inputs import read_inputs_file, sample_vocab_inputs

    return read_inputs_file(args.inputs) if args.inputs else sample_vocab_inputs(tokenizer, args.n_inputs, args.seed)


def resolve_prompt(args, side: str, registry_holder: list, tokenizer):
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
    if not registry_holder:
        registry_holder.append(load_registry_from(args))
    return registry_prompt(registry_holder[0], name, tokenizer)


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
    registry_holder: list = []
    for side in ("source", "target"):
        if getattr(args, f"{side}_template", None) is None:
            if not registry_holder:
                registry_holder.append(load_registry_from(args))
            registry_holder[0].prompt(getattr(args, side))  # fail on a bad name before loading the model
    lm = load_lm(args)
    source = resolve_prompt(args, "source", registry_holder, lm.tokenizer)
    target = resolve_prompt(args, "target", registry_holder, lm.tokenizer)
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


if __name__ == "__main__":
    sys.exit(main())
