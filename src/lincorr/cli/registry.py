"""`lincorr templates`, `domains`, `references` and `tasks`: listings of the prompt registry."""

from __future__ import annotations

from lincorr.cli.options import FAMILIES, add_command, add_json_option, add_model_options, add_registry_option, load_lm, load_registry_from, print_json


def add_commands(commands) -> None:
    def listing(name: str, family_help: str = f"only this family ({FAMILIES}, or one from --registry)"):
        parser = add_command(commands, name)
        add_registry_option(parser)
        if family_help:
            parser.add_argument("--family", default=None, help=family_help)
        add_json_option(parser)
        return parser

    listing("templates").set_defaults(handler=run_templates)
    domains = listing("domains")
    add_model_options(domains)
    domains.set_defaults(handler=run_domains)
    references = listing("references", family_help=f"only relations between domains of this family's prompts ({FAMILIES})")
    references.set_defaults(handler=run_references)
    listing("tasks", family_help="").set_defaults(handler=run_tasks)


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

    print_rows(references_table(load_registry_from(args), family=args.family), args.json,
               ("name", "source_domain", "target_domain", "n_pairs"))


def run_tasks(args) -> None:
    from lincorr.knowledge.report import tasks_table

    print_rows(tasks_table(load_registry_from(args)), args.json, ("name", "n_pairs", "example", "reference", "template"))


def print_rows(rows: list[dict], as_json: bool, columns: tuple[str, ...]) -> None:
    if as_json:
        print_json(rows)
        return
    columns = tuple(c for c in columns if rows and c in rows[0])
    widths = {c: max(len(c), *(len(cell(r, c)) for r in rows)) for c in columns}
    print("  ".join(c.ljust(widths[c]) for c in columns))
    for row in rows:
        print("  ".join(cell(row, c).ljust(widths[c]) for c in columns))


def cell(row: dict, column: str) -> str:
    """A value as one line of a table: a template's newline shows as \\n."""
    return str(row.get(column, "")).replace("\n", "\\n")
