"""`lincorr reproduce`: a paper's claims on one model, each reproduced, not reproduced, inconclusive or not applicable; `--status` of a saved run, and `--rejudge` to judge it again."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from lincorr.cli.values import finite_number_that, user_path
from lincorr.cli.options import (
    add_collect_settings,
    add_command,
    add_json_option,
    add_model_options,
    add_out_option,
    add_registry_option,
    collect_settings,
    load_lm,
    load_registry_from,
    model_spec,
    print_json,
    refuse_same_model,
    save_and_print,
)
from lincorr.errors import InputError, UsageError, printable
from lincorr.filesystem import lies_within

DEFAULT_MAX_HOURS = 2.0


def add_commands(commands) -> None:
    parser = add_command(commands, "reproduce")
    parser.add_argument("paper", nargs="?", default=None,
                        help="the paper: peng (linear correlation), merullo (vector arithmetic) or feng (extractive structures)")
    parser.add_argument("--only", default=None, metavar="ID,...", help="only these claims (e.g. peng.table2,peng.table4); --list names them")
    parser.add_argument("--budget", choices=("quick", "paper", "decide"), default="quick",
                        help="quick: small N and few relations, a first look (3 to 22 minutes a paper for "
                             "gemma-3-270m-q4km on a 2-core CPU, docs/benchmarks.md); paper: the paper's N, relations and training; "
                             "decide: the quick budget, then each claim it left inconclusive measured again with the units its "
                             "tests need (planned and printed first, within --max-hours)")
    parser.add_argument("--max-hours", type=finite_number_that(lambda hours: hours > 0, "more than 0"), default=None, metavar="H",
                        help=f"--budget decide: the most hours its second look may be predicted to take (default {DEFAULT_MAX_HOURS:g})")
    parser.add_argument("--list", action="store_true", help="list the paper's claims and exit")
    parser.add_argument("--status", type=user_path, default=None, metavar="DIR",
                        help="list the claims of saved reproductions (a --out directory, or a tree of MODEL/PAPER.json such as "
                             "docs/reproductions) that code they ran has changed since, and what changed")
    parser.add_argument("--refresh", type=user_path, default=None, metavar="DIR",
                        help="measure again the stale claims of the saved reproductions under DIR (as --status finds them), "
                             "model by model, rewriting each file as each claim finishes, so a stopped refresh resumes where it left "
                             "off, from the file itself on another machine; every other file "
                             "is judged again by the current tests and verdict rules, and rewritten where they read it differently")
    parser.add_argument("--rejudge", type=user_path, default=None, metavar="DIR",
                        help="judge a saved reproduction again with the current tests and verdict rules (nothing is measured) and save it to --out")
    parser.add_argument("--eval-model", type=model_spec, default=None, metavar="MODEL",
                        help="a second checkpoint of --model with its tokenizer (e.g. its instruct version), for the claims "
                             "that ask whether W survives post-training; without it they are not applicable")
    add_out_option(parser, "reproduction.json, claims.md and provenance.json")
    for add_options in (add_json_option, add_model_options, add_registry_option):
        add_options(parser)
    add_collect_settings(parser)
    parser.set_defaults(handler=run_reproduce)


def run_reproduce(args) -> None:
    from lincorr.reproduce import load_paper

    if args.status and (args.rejudge or args.out or args.refresh):
        # --status only lists; said now rather than leaving the user to look for a --out that was never written.
        extra = " and ".join(option for option, given in (("--rejudge", args.rejudge), ("--out", args.out), ("--refresh", args.refresh))
                             if given)
        raise UsageError(f"--status lists stale claims and saves nothing; drop {extra}, or run --rejudge DIR --out DIR on its own")
    if args.refresh and (args.rejudge or args.out or args.paper):
        raise UsageError("--refresh rewrites the files under its DIR and takes no paper, --rejudge or --out; run it on its own")
    if args.status:
        status(args)
        return
    if args.refresh:
        from lincorr.reproduce.refresh import refresh

        refresh(args.refresh, lambda name: load_lm(args, name), collect_settings(args), report=lambda line: print(printable(line)))
        return
    if args.rejudge:
        rejudge(args)
        return
    if not args.paper:
        raise UsageError("name a paper (lincorr reproduce peng) or pass --status DIR or --rejudge DIR")
    paper = load_paper(args.paper)
    if args.list:
        list_claims(args, paper)
        return
    from lincorr.reproduce import claims_to_run, reproduce

    deciding = args.budget == "decide"
    if args.max_hours is not None and not deciding:
        raise UsageError("--max-hours caps --budget decide's second look; add --budget decide, or drop --max-hours")
    max_hours = args.max_hours or DEFAULT_MAX_HOURS
    # a choice that measures nothing fails now
    claims_to_run(args.paper, args.only, "quick" if deciding else args.budget, with_eval_model=bool(args.eval_model))
    refuse_same_model(args)
    run = {"registry": load_registry_from(args), "settings": collect_settings(args),
           "eval_model": load_lm(args, args.eval_model) if args.eval_model else None}
    if deciding:
        from lincorr.reproduce.sizing import decided, plan_text

        result = decided(args.paper, load_lm(args), max_hours=max_hours, only=args.only,
                         on_plan=lambda plans: print(plan_text(plans, max_hours), file=sys.stderr, flush=True), **run)
    else:
        result = reproduce(args.paper, load_lm(args), only=args.only, budget=args.budget, **run)
    save_and_print(args, result)


def status(args) -> None:
    """The stale claims of every reproduction under --status, each with the units of code that changed."""
    from lincorr.cli import shortened
    from lincorr.reproduce.refresh import plan_lines, saved_reproductions
    from lincorr.reproduce.runner import changed_code

    saved = saved_reproductions(args.status)
    if args.json:
        rows = [{"file": str(s.path), "paper": s.result.paper, "model": s.result.model_name, "stale": [c.id for c in s.stale],
                 "changed": {c.id: changed_code(c) for c in s.stale}} for s in saved]
        print_json(rows[0] if len(rows) == 1 else {"reproductions": rows})
        return
    for entry in saved:
        for claim in entry.stale:
            # The file's own words (its time, a unit or step it names) are anyone's: each cut as an error line's words are.
            changed = [shortened(unit) for unit in changed_code(claim)]
            print(printable(f"{claim.id} ({entry.path}): measured {shortened(str(claim.measured_at))}; changed since: "
                            f"{', '.join(changed[:4])}" + (f" and {len(changed) - 4} more" if len(changed) > 4 else "")))
    for line in plan_lines(saved):
        print(printable(line))


def rejudge(args) -> None:
    """A saved reproduction judged again: every claim's test made again from its recipe by the current code, then Holm's
    adjustment, power and verdicts; refused while a claim's measuring code has changed (that needs a new measurement)."""
    from lincorr.reproduce import ReproductionResult

    result = ReproductionResult.load(args.rejudge)
    source = Path(args.rejudge).resolve()  # it was read, so it resolves
    # --out is replaced as a whole: it may neither lie inside the reproduction nor hold it.
    if args.out and ((source.is_dir() and lies_within(args.out, source, f"--out {args.out}"))
                     or lies_within(source, args.out, f"--out {args.out}")):
        raise UsageError(f"--out {args.out} would replace the reproduction it judges ({args.rejudge}); write it elsewhere, "
                         f"e.g. --out {source.parent / ((source.name if source.is_dir() else source.stem) + '-rejudged')}")
    stale = result.stale_claims()
    if stale:
        raise UsageError(f"{args.rejudge}: {len(stale)} claims were measured by code that has changed since ({', '.join(c.id for c in stale[:5])}"
                         f"{', ...' if len(stale) > 5 else ''}); measure them again: {measuring_command(result)}")
    try:
        rejudged = result.rejudged()
    except ValueError as error:
        raise InputError(f"{args.rejudge}: {error}; the current code cannot judge it: measure it again with "
                         f"{measuring_command(result)}, or ask for the file again") from None
    save_and_print(args, rejudged)


def measuring_command(result) -> str:
    """The command that measures `result`'s claims again: its paper, model, budget and second checkpoint."""
    return (f"lincorr reproduce {result.paper} --model {shlex.quote(result.model_name)}"
            + (f" --budget {result.budget}" if result.budget else "")
            + (f" --eval-model {shlex.quote(result.eval_model)}" if result.eval_model else ""))


def list_claims(args, paper) -> None:
    """The claims of --only (all without it): one line each, or with --json an object per claim."""
    claims = paper.chosen(args.only)
    if args.json:
        print_json({"paper": paper.name, "title": paper.title,
                    "claims": [{"id": c.id, "where": c.where, "statement": c.statement, "step": c.step,
                                "not_applicable": c.not_applicable, "budgets": list(c.settings), "eval_model": c.eval_model}
                               for c in claims]})
        return
    print("\n".join(f"{c.id:<26} {c.where:<28} {'step ' + c.step if c.step else 'not applicable'}" for c in claims))
