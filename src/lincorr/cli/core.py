"""`lincorr fit` and `lincorr demo`: one prompt pair, measured and printed."""

from __future__ import annotations

from pathlib import Path

from lincorr.cli.options import (
    COUNT,
    RIDGE_REASON,
    SIDES,
    add_collection_options,
    add_command,
    add_custom_prompt_options,
    add_fit_options,
    add_json_option,
    add_model_options,
    add_out_option,
    add_output_directory_option,
    add_prompt_pair,
    add_references_option,
    checked_registry,
    choose_inputs,
    collect_settings,
    custom_sides,
    fit_config,
    load_lm,
    load_registry_from,
    print_json,
    read_references,
    resolve_prompt,
)
from lincorr.errors import UsageError

DEMO_CITIES = ("Tokyo", "Paris", "Shanghai", "Moscow", "Madrid")


def add_core_commands(commands) -> None:
    demo = add_command(commands, "demo", "City->Country on the default model, with a heatmap and JSON")
    add_model_options(demo)
    add_collection_options(demo)
    # The demo shows W itself, so it takes the estimator whose W is readable and also prints the paper's ols r.
    add_fit_options(demo, estimator="ridge", reason=RIDGE_REASON)
    add_out_option(demo, "W.png, result.json, report.html and the arrays behind them", default="lincorr-out")
    demo.set_defaults(handler=run_demo, source="city", target="country")

    fit = add_command(commands, "fit", "fit and score W between two prompts")
    add_prompt_pair(fit, help_text="registry prompt name, or a label when its --*-template is given")
    add_custom_prompt_options(fit)
    add_references_option(fit)
    fit.add_argument("--top", action="append", default=[], metavar="WORD", help="print the top influenced targets of a source word (repeatable)")
    fit.add_argument("--top-influencing", action="append", default=[], metavar="WORD", help="print the top influencing sources of a target word")
    fit.add_argument("-k", "--top-k", type=COUNT, default=5, help="words per --top / --top-influencing row")
    add_output_directory_option(fit, "--save-dir", "write W, b, logits, tokens, inputs and result.json here")
    fit.add_argument("--heatmap", action="store_true", help="also write W.png into --save-dir")
    add_json_option(fit)
    add_model_options(fit)
    add_collection_options(fit)
    add_fit_options(fit)
    fit.set_defaults(handler=run_fit)


def measure(args, reference_file=None):
    """Check the options, load the model, resolve both prompts, pick inputs, and measure the pair.

    `reference_file` (a `relations.ReferenceFile`) is checked against both tokenized domains before
    any logit is collected.
    """
    from lincorr.fit import measure_pair
    from lincorr.studies.logits.precision import checked_reference

    config = fit_config(args)
    custom = custom_sides(args)
    checked_registry(args, [getattr(args, side) for side in SIDES if side not in custom])
    lm = load_lm(args)
    source = resolve_prompt(args, "source", lm.tokenizer)
    target = resolve_prompt(args, "target", lm.tokenizer)
    if reference_file is not None:
        checked_reference(reference_file.pairs, source.domain, target.domain, label=f"{source.name}->{target.name}",
                          reference_file=reference_file)
    return measure_pair(lm, source, target, choose_inputs(args, lm.tokenizer), config, settings=collect_settings(args))


def registry_pairs(args):
    """Reference pairs for a registry prompt pair (None for custom prompts or unrelated pairs)."""
    if custom_sides(args):
        return None
    registry = load_registry_from(args)
    reference = registry.reference_for(registry.prompt(args.source), registry.prompt(args.target))
    return reference.pairs if reference else None


def run_fit(args) -> None:
    from lincorr.studies.logits.precision import precision_of
    from lincorr.relations import USER_FILE

    if args.heatmap and not args.save_dir:
        raise UsageError("--heatmap writes into --save-dir; give a directory with --save-dir")
    reference_file = read_references(args)
    result = measure(args, reference_file)
    precision = precision_of(result, reference_file.pairs, reference=USER_FILE, reference_file=reference_file) if reference_file else None
    tops = {w: result.top_influenced(w, args.top_k) for w in args.top}
    influencing = {w: result.top_influencing(w, args.top_k) for w in args.top_influencing}
    if args.save_dir:
        result.save(args.save_dir, heatmap=args.heatmap, reference_pairs=reference_file.pairs if reference_file else registry_pairs(args),
                    extra={"precision": precision.summary()} if precision else None)
    if args.json:
        payload = result.summary()
        if precision:
            payload["precision"] = precision.summary()
        if tops:
            payload["top_influenced"] = {w: [[t, round(v, 6)] for t, v in pairs] for w, pairs in tops.items()}
        if influencing:
            payload["top_influencing"] = {w: [[s, round(v, 6)] for s, v in pairs] for w, pairs in influencing.items()}
        print_json(payload)
        return
    print_result(result)
    if precision:
        print_precision(precision)
    print_tops(tops, "influenced targets")
    print_tops(influencing, "influencing sources")
    if args.save_dir:
        print(f"\nwrote {args.save_dir}/")


def run_demo(args) -> None:
    import dataclasses

    from lincorr.fit import fit_tables
    from lincorr.report import build_report

    result = measure(args)
    tops = {w: result.top_influenced(w, 5) for w in DEMO_CITIES}
    result.save(args.out, heatmap=True, reference_pairs=registry_pairs(args))
    report = build_report([args.out], title="lincorr demo: City->Country").save(Path(args.out) / "report.html")
    print_result(result)
    if result.config.estimator != "ols":
        paper = fit_tables(result.source, result.target, dataclasses.replace(result.config, estimator="ols"))
        print(f"paper's ols      label-wise r {paper.summary()['labelwise_r_mean']:.3f} on the same tables")
    print_tops(tops, "countries W links to")
    print(f"\nwrote {args.out}/W.png, {args.out}/result.json and the arrays behind them")
    print(f"interactive report: {report} (open it in a browser)")


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
        f"label-wise r     {s['labelwise_r_mean']:.3f} ± {s['labelwise_r_std']:.3f}   95% CI [{lo:.3f}, {hi:.3f}] "
        f"({s['labelwise_r_ci95_method']})",
        *([f"                 left out: {s['n_constant_targets']} target words constant on the test inputs (r undefined)"]
          if s["n_constant_targets"] else []),
        f"instance-wise r  {s['instancewise_r_mean']:.3f}",
        f"control r        {s['control_labelwise_r_mean']:.3f}   (W fitted on shuffled pairs)",
        f"time             {s['seconds']:.1f} s",
    ]
    print("\n".join(lines))


def print_precision(precision) -> None:
    """Hit@k of W against the user's reference pairs, then what the reference gave (`PrecisionResult.reference_report`)."""
    def rates(hits: dict) -> str:
        return " / ".join(f"{value:.2f}" for value in hits.values())

    print(f"Hit@1/3/5        influenced {rates(precision.hit_influenced)}, influencing {rates(precision.hit_influencing)}"
          f"   (chance@1 {precision.chance_influenced[1]:.2f} / {precision.chance_influencing[1]:.2f})")
    print("\n".join(precision.reference_report()))


def print_tops(tops: dict, title: str) -> None:
    if not tops:
        return
    print(f"\ntop {title}:")
    width = max(len(w) for w in tops)
    for word, pairs in tops.items():
        print(f"  {word:<{width}}  " + ", ".join(f"{t} ({v:+.2f})" for t, v in pairs))
