"""The documentation site's generated pages (a mkdocs hook, named in mkdocs.yml): made from the code at every build.

- `cli.md`: every command's `--help`, walked from `lincorr.cli.build_parser()`, so the reference cannot drift from the parser;
- `api.md`: one mkdocstrings entry per name `lincorr` exports, in the order `lincorr.__all__` lists them;
- `changelog.md`: CHANGELOG.md at the repository's root.

    python docs/site_pages.py cli   # print one of them
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

# Help is wrapped to the terminal's width; the page is the same on every machine.
HELP_COLUMNS = "100"


def subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    """(prog, parser) of every command below `parser`, depth first, each once (an alias names the same parser)."""
    found, seen = [], set()
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        for child in action.choices.values():
            if id(child) in seen:
                continue
            seen.add(id(child))
            found.append((child.prog, child))
            found.extend(subcommands(child))
    return found


def cli_page() -> str:
    """The command-line reference: `lincorr --help`, then each command's `--help` under its own heading."""
    from lincorr.cli import build_parser

    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = HELP_COLUMNS
    try:
        parser = build_parser()
        sections = [("lincorr", parser), *subcommands(parser)]
        text = ["# Command-line reference", "",
                "Every command's `--help`, generated from lincorr's argument parser when this site is built "
                "(`docs/site_pages.py`), so it says what the installed version does.", ""]
        for prog, command in sections:
            text += [f"## `{prog}`", "", "```text", command.format_help().rstrip(), "```", ""]
    finally:
        if previous is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = previous
    return "\n".join(text)


def api_page() -> str:
    """The Python API: every name `lincorr` exports, documented from its docstring by mkdocstrings."""
    import lincorr

    where = {name: f"{lincorr._EXPORTS[name]}.{name}" if name in lincorr._EXPORTS else f"lincorr.{name}" for name in lincorr.__all__}
    text = ["# Python API", "",
            "Everything below is importable from `lincorr` itself (`import lincorr; lincorr.load_model()`); the entries are "
            "made from the docstrings when this site is built. Shapes are given as `[rows, columns]`.", "",
            "## `lincorr`", ""]
    for name in lincorr.__all__:
        text += [f"::: {where[name]}", ""]
    return "\n".join(text)


def changelog_page() -> str:
    return (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")


PAGES = {"cli.md": cli_page, "api.md": api_page, "changelog.md": changelog_page}


def on_files(files, config):
    """mkdocs hook: add the generated pages to the site's files."""
    from mkdocs.structure.files import File

    for name, make in PAGES.items():
        files.append(File.generated(config, name, content=make()))
    return files


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] + ".md" not in PAGES:
        sys.exit(f"usage: python docs/site_pages.py {{{'|'.join(name[:-3] for name in PAGES)}}}")
    print(PAGES[sys.argv[1] + ".md"]())
