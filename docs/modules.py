"""The module table of docs/architecture.md, made from the modules' own docstrings.

    python docs/modules.py           # print the table
    python docs/modules.py --write   # rewrite it in docs/architecture.md (between the modules markers)

A test fails when the table in the document differs from what this prints, so the table can
only say what the code's docstrings say.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "lincorr"
DOCUMENT = ROOT / "docs" / "architecture.md"
START, END = "<!-- modules:start -->", "<!-- modules:end -->"


def summary(path: Path) -> str:
    """The first paragraph of a module's docstring, on one line."""
    docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    return " ".join(docstring.split("\n\n")[0].split()).replace("|", "\\|")


def table() -> str:
    """One row per module (a package's `__init__` stands for the package), in layer order: core, internals, studies, cli."""
    def layer(path: Path) -> tuple[int, str]:
        parts = path.relative_to(PACKAGE).parts
        order = {"internals": 1, "experiments": 2, "cli": 3}.get(parts[0], 0) if len(parts) > 1 else 0
        return order, str(path)

    rows = ["| module | what it is |", "|---|---|"]
    for path in sorted(PACKAGE.rglob("*.py"), key=layer):
        name = str(path.relative_to(PACKAGE))
        if path.name == "__init__.py":
            name = name.removesuffix("__init__.py") or "lincorr"
        if text := summary(path):
            rows.append(f"| `{name}` | {text} |")
    return "\n".join(rows)


def current_section() -> str:
    text = DOCUMENT.read_text(encoding="utf-8")
    return text[text.index(START) + len(START):text.index(END)].strip()


def main() -> None:
    if sys.argv[1:] == ["--write"]:
        text = DOCUMENT.read_text(encoding="utf-8")
        head, rest = text.split(START, 1)
        DOCUMENT.write_text(f"{head}{START}\n{table()}\n{END}{rest.split(END, 1)[1]}", encoding="utf-8")
    else:
        print(table())


if __name__ == "__main__":
    main()
