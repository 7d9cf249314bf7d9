"""`lincorr fit` and `lincorr demo`: one prompt pair, measured and printed."""

from __future__ import annotations

from pathlib import Path

from lincorr.cli.options import (
    COUNT,
    Distinct,
    SIDES,
    PAPER_FIT,
    PAPER_FIT_HELP,
    add_collection_options,
    add_command,
    add_custom_prompt_options,
    add_fit_options,
    add_json_option,
    add_model_options,
    add_out_option,
    add_prompt_pair,
    add_references_option,
    checked_registry,
    choose_inputs,
    count_inputs,
    collect_settings,
    custom_sides,
    fit_config,
    load_lm,
    load_registry_from,
    print_json,
    read_references,
    resolve_prompt,
    track,
)
from lincorr.cli.model_errors import model_load_errors
from lincorr.cli.spellings import add_alias, add_preset_option
from lincorr.cli.values import output_directory
from lincorr.errors import LincorrError, UsageError

DEMO_CITIES = ("Tokyo", "Paris", "Shanghai", "Moscow", "Madrid")


def add_commands(commands) -> None:
    demo = add_command(commands, "demo")
    add_model_options(demo)
    add_collection_options(demo)
    # The demo shows W itself, so it takes the estimator whose W is readable and also prints the paper's ols r.
    add_fit_options(demo)
    add_preset_option(demo, PAPER_FIT_HELP, settings=PAPER_FIT)
    add_out_option(demo, "W.png, result.json, report.html and the arrays behind them", default="lincorr-out")
    add_json_option(demo)
    demo.set_defaults(handler=run_demo, source="city", target="country")

    fit = add_command(commands, "fit")
    add_prompt_pair(fit, help_text="registry prompt name, or a label when its --*-template is given")
    add_custom_prompt_options(fit)
    add_references_option(fit)
    fit.add_argument("--top", action=Distinct, default=[], metavar="WORD", help="print the top influenced targets of a source word (repeatable)")
    fit.add_argument("--top-influencing", action=Distinct, default=[], metavar="WORD", help="print the top influencing sources of a target word")
    fit.add_argument("-k", "--top-k", type=COUNT, default=5, help="words per --top / --top-influencing row")
    add_out_option(fit, "W, b, logits, tokens, inputs and result.json")
    add_alias(fit, "--save-dir", "out", "--out", type=output_directory)
    fit.add_argument("--heatmap", action="store_true", help="also write W.png into --out")
    add_json_option(fit)
    add_model_options(fit)
    add_collection_options(fit)
    add_fit_options(fit)
    add_preset_option(fit, PAPER_FIT_HELP, settings=PAPER_FIT)
    fit.set_defaults(handler=run_fit)


def measure(args, reference_file=None):
    """Check the options, load the model, bind both prompts and their reference pairs, pick inputs, and measure the pair.

    The pairs (`reference_file`, a `relations.ReferenceFile`, else the registry's for two registry
    prompts) are matched to both tokenized domains once, and a file with no usable pair is refused
    before any logit is collected; the result keeps the match.
    """
    from lincorr.fit import measure_relation
    from lincorr.relations import USER_FILE, relate
    from lincorr.studies.logits.precision import require_usable

    config = fit_config(args)
    custom = custom_sides(args)
    checked_registry(args, [getattr(args, side) for side in SIDES if side not in custom])
    check_domains_early(args, config)
    lm = load_lm(args)
    source = resolve_prompt(args, "source", lm.tokenizer)
    target = resolve_prompt(args, "target", lm.tokenizer)
    pairs, reference = (reference_file.pairs, USER_FILE) if reference_file is not None else registry_pairs(args)
    relation = relate(source, target, pairs, reference=reference)
    if reference_file is not None:
        require_usable(relation.match, label=relation.label, reference_file=reference_file)
    return measure_relation(lm, relation, choose_inputs(args, lm.tokenizer), config, collect_settings(args))


def check_domains_early(args, config) -> None:
    """Where the tokenizer loads without the weights, both domains and the source domain's size against the inputs are checked
    before the model loads: a pair ols cannot fit on -n fails in seconds, not after minutes of loading."""
    from lincorr.models import load_tokenizer

    with model_load_errors(args.model):
        tokenizer = load_tokenizer(args.model, trust_remote_code=args.trust_remote_code)
    if tokenizer is None:
        return
    source = resolve_prompt(args, "source", tokenizer)
    target = resolve_prompt(args, "target", tokenizer)
    config.check_sizes(count_inputs(args), len(source.domain))
    for word in getattr(args, "top", ()):
        source.domain.index(word)  # --top names source words and --top-influencing target words: a word not there fails now
    for word in getattr(args, "top_influencing", ()):
        target.domain.index(word)


def registry_pairs(args):
    """The registry's reference pairs for a registry prompt pair and the reference's name (none for custom prompts or unrelated pairs)."""
    if custom_sides(args):
        return (), ""
    registry = load_registry_from(args)
    reference = registry.reference_for(registry.prompt(args.source), registry.prompt(args.target))
    return (reference.pairs, reference.name) if reference else ((), "")


def run_fit(args) -> None:
    from lincorr.fit import tops_text
    from lincorr.studies.logits.precision import precision_of
    from lincorr.relations import USER_FILE

    if args.heatmap and not args.out:
        raise UsageError("--heatmap writes into --out; give a directory with --out")
    reference_file = read_references(args)
    result = measure(args, reference_file)
    precision = precision_of(result, reference=USER_FILE, reference_file=reference_file) if reference_file else None
    tops = {w: result.top_influenced(w, args.top_k) for w in args.top}
    influencing = {w: result.top_influencing(w, args.top_k) for w in args.top_influencing}
    if args.out:
        result.save(args.out, heatmap=args.heatmap, extra={"precision": precision.summary()} if precision else None)
        track(args, result)
    if args.json:
        payload = result.summary()
        if precision:
            payload["precision"] = precision.summary()
        if tops:
            payload["top_influenced"] = tops_json(tops)
        if influencing:
            payload["top_influencing"] = tops_json(influencing)
        print_json(payload)
        return
    print("\n".join(part for part in (result.text(), precision.hits_text() if precision else "", tops_text(tops, "influenced targets"),
                                      tops_text(influencing, "influencing sources")) if part))
    if args.out:
        print(f"\nwrote {args.out}/")


def tops_json(tops) -> dict:
    """Rows of `PairResult.top_influenced` / `top_influencing` as JSON: word -> [[word, weight], ...]."""
    return {word: [[other, round(value, 6)] for other, value in pairs] for word, pairs in tops.items()}


def run_demo(args) -> None:
    import dataclasses

    from lincorr.fit import fit_tables, tops_text
    from lincorr.report import build_report

    result = measure(args)
    tops = {w: result.top_influenced(w, 5) for w in DEMO_CITIES}
    # The paper's ols beside lincorr's fit, before anything is saved: too few inputs for ols is a note, not a failed run.
    paper, no_paper = None, ""
    if result.config.estimator != "ols":
        try:
            paper = fit_tables(result.source, result.target, dataclasses.replace(result.config, estimator="ols"))
        except LincorrError as error:
            no_paper = str(error)
    result.save(args.out, heatmap=True)
    report = build_report([args.out], title="lincorr demo: City->Country").save(Path(args.out) / "report.html")
    track(args, result)  # the report is one of the run's files
    if args.json:
        print_json({**result.summary(), "paper_ols_labelwise_r_mean": paper.summary()["labelwise_r_mean"] if paper else None,
                    **({"paper_ols_not_fitted": no_paper} if no_paper else {}), "top_influenced": tops_json(tops),
                    "out": args.out, "report": str(report)})
        return
    print(result.text())
    if paper:
        print(f"paper's ols      label-wise r {paper.summary()['labelwise_r_mean']:.3f} on the same tables")
    elif no_paper:
        print(f"paper's ols      not fitted: {no_paper}")
    print(tops_text(tops, "countries W links to"))
    print(f"\nwrote {args.out}/W.png, {args.out}/result.json and the arrays behind them")
    print(f"interactive report: {report} (open it in a browser)")
