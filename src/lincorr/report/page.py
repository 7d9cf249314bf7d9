"""The report as data (sections of figures, tables and key numbers) and as one self-contained HTML page.

The page needs no network when opened: plotly.js is inlined once in the head and every
figure's data sits in the page. Tables sort by a click on a column header (a few lines of
inline script). The page is a Jinja2 template (templates/page.html) with autoescaping on, so
everything a user typed (words, prompts, paths) is HTML-escaped by construction; the only markup
passed in unescaped is plotly.js, the style sheet, the sorting script and each figure's div, whose
strings `figures.to_html` escapes itself.

`lincorr report` writes the page only where it cannot replace what it shows: never inside a run
directory it reads (`check_report_file`).
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import json
import math
import re
from collections.abc import Sequence
from pathlib import Path

import jinja2
import plotly.graph_objects as go
from markupsafe import Markup
from plotly.offline import get_plotlyjs

from lincorr.errors import OutputError
from lincorr.filesystem import check_writable, lies_within, resolved
from lincorr.outputs import write_text_atomic
from lincorr.report import figures


@dataclasses.dataclass(frozen=True)
class Figure:
    """An interactive plotly figure."""

    figure: go.Figure
    note: str = ""


@dataclasses.dataclass(frozen=True)
class Column:
    """A table column: its heading and the format spec of its numbers (".3f", ".1%"); text is shown as it is."""

    name: str
    number_format: str = ".3f"


@dataclasses.dataclass(frozen=True)
class Table:
    """A sortable table; a cell is text, a number (formatted by its column, sorted as a number) or None (empty, sorted last)."""

    title: str
    columns: tuple[Column, ...]
    rows: tuple[tuple[str | float | int | None, ...], ...]
    note: str = ""


@dataclasses.dataclass(frozen=True)
class KeyNumbers:
    """A short list of labelled values: the headline of a run."""

    items: tuple[tuple[str, str], ...]


@dataclasses.dataclass(frozen=True)
class Picture:
    """A PNG a study wrote, inlined: how the report shows a study it has no interactive view of."""

    name: str
    png: bytes


Block = Figure | Table | KeyNumbers | Picture
TEMPLATE = jinja2.Environment(loader=jinja2.PackageLoader("lincorr.report", "templates"), autoescape=True,
                              undefined=jinja2.StrictUndefined, trim_blocks=True).get_template("page.html")


@dataclasses.dataclass(frozen=True)
class Provenance:
    """Where a run came from, as its provenance.json (or, for runs saved before it existed, its result JSON) says."""

    command: str | None
    model: str | None
    model_fingerprint: str | dict | None
    lincorr_version: str | None
    settings: dict | None
    written_at: str | None


@dataclasses.dataclass(frozen=True)
class Section:
    """One run directory: what study it is, where it came from, and what to show."""

    title: str
    study: str
    directory: str
    provenance: Provenance
    blocks: tuple[Block, ...]

    @property
    def figures(self) -> int:
        return sum(isinstance(block, Figure) for block in self.blocks)


@dataclasses.dataclass(frozen=True)
class Report:
    """Sections of one or more runs; `html()` is the page, `save(path)` writes it."""

    title: str
    sections: tuple[Section, ...]
    created_at: str = dataclasses.field(default_factory=lambda: datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))

    @property
    def figures(self) -> int:
        """How many plotly figures the page draws."""
        return sum(section.figures for section in self.sections)

    def html(self) -> str:
        """The whole page: plotly.js, styles and sorting script inline, one section per run after a table of contents."""
        from lincorr import __version__

        anchors = unique_anchors([section.title for section in self.sections])
        views = [section_view(section, anchor) for section, anchor in zip(self.sections, anchors)]
        return TEMPLATE.render(report=self, sections=views, version=__version__, style=Markup(STYLE), plotlyjs=Markup(get_plotlyjs()),
                               sort_script=Markup(SORT_SCRIPT)) + "\n"

    def save(self, path) -> Path:
        """Write the page to `path` (through a temporary file) and return the path; an OutputError where it cannot go.

        Inside a run directory is the caller's to refuse (`check_report_file` with the run directories): `lincorr demo`
        writes the report of its run into the run's own directory.
        """
        path = check_report_file(path)
        write_text_atomic(path, self.html())
        return path


def provenance_beside(reproduction: Path) -> Path:
    """The provenance of a reproduction kept on its own (docs/reproductions/MODEL/PAPER.json): PAPER.provenance.json."""
    return reproduction.with_suffix(".provenance.json")


def check_report_file(path, run_dirs: Sequence = ()) -> Path:
    """`path` as a Path, once it can take the report: an OutputError (or a StorageError from the disk) before any work where it cannot.

    A report never replaces a file it reads: a path inside any of `run_dirs` is refused, however it
    is spelt (links and `..` resolved), also one that does not exist yet, since all a run directory
    holds is the run, and so is a reproduction's PAPER.provenance.json beside it where a run is such a
    file (`provenance_beside`). So are a directory and a place nothing can be written.
    """
    path = Path(path)
    for run_dir in run_dirs:
        if lies_within(path, run_dir, f"the report {path} or the run directory {run_dir}"):
            raise OutputError(f"the report {path} would be written inside the run directory {run_dir}, which it reads; "
                              f"write it outside every run directory, e.g. {resolved(run_dir, str(run_dir)).parent / 'report.html'}")
        beside = provenance_beside(Path(run_dir)) if Path(run_dir).suffix == ".json" else None
        if beside is not None and resolved(path, f"the report {path}") == resolved(beside, f"the provenance {beside}"):
            raise OutputError(f"the report {path} would replace the provenance of the reproduction {run_dir}, which it reads; "
                              f"write it elsewhere, e.g. {resolved(beside, str(beside)).parent / 'report.html'}")
    if path.is_dir():
        raise OutputError(f"{path} is a directory; name the HTML file to write, e.g. {path / 'report.html'}")
    if path.is_symlink() or (path.exists() and not path.is_file()):
        # Writing through a temporary and a rename would put a plain file where a device, a pipe or a link was.
        kind = "a link" if path.is_symlink() else "not a regular file (a device or a pipe)"
        raise OutputError(f"{path} is {kind}; a report replaces only a regular file: name a new HTML file, e.g. report.html")
    check_writable(path.absolute().parent, f"the report {path}")
    return path


def unique_anchors(titles: Sequence[str]) -> list[str]:
    """URL-fragment ids from titles, numbered so that two runs of the same study never share one."""
    anchors = []
    for k, title in enumerate(titles, 1):
        slug = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")[:60] or "run"
        anchors.append(f"run-{k}-{slug}")
    return anchors


def section_view(section: Section, anchor: str) -> dict:
    """What the template shows of one section: its anchor, provenance in words, and each block ready to fill in."""
    fingerprint = section.provenance.model_fingerprint
    if isinstance(fingerprint, dict):
        fingerprint = "; ".join(f"{model}: {value}" for model, value in fingerprint.items())
    settings = section.provenance.settings
    return {"section": section, "anchor": anchor, "fingerprint": fingerprint,
            "settings": json.dumps(settings, indent=2, ensure_ascii=False) if settings else "",
            "blocks": [block_view(block, f"{anchor}-figure-{k}") for k, block in enumerate(section.blocks)]}


def block_view(block: Block, div_id: str) -> dict:
    if isinstance(block, Figure):
        # The one piece of markup a section holds: plotly's div and script, every string in it escaped by `figures.to_html`.
        return {"kind": "figure", "html": Markup(figures.to_html(block.figure, div_id)), "note": block.note}
    if isinstance(block, Table):
        return {"kind": "table", "table": block, "rows": [[cell_view(v, c) for v, c in zip(row, block.columns)] for row in block.rows]}
    if isinstance(block, Picture):
        return {"kind": "picture", "name": block.name, "data": base64.b64encode(block.png).decode("ascii")}
    return {"kind": "numbers", "pairs": block.items}


@dataclasses.dataclass(frozen=True)
class Cell:
    """A table cell as shown: its text, its class, and for a number the value it sorts by."""

    text: str
    css: str = ""
    value: str | None = None


def cell_view(value, column: Column) -> Cell:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return Cell("")
    if isinstance(value, bool):
        return Cell("yes" if value else "no")
    if isinstance(value, str):
        # Long text (a reason a row was skipped) wraps; words and labels stay on one line.
        return Cell(value, "text" if len(value) > 40 else "")
    return Cell(str(value) if isinstance(value, int) else format(value, column.number_format), "number", repr(float(value)))


STYLE = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1d232a; margin: 0; background: #f6f7f9; }
header, main { max-width: 1500px; margin: 0 auto; padding: 0 24px; }
h1 { font-size: 24px; margin: 24px 0 4px; } h2 { font-size: 19px; margin: 0 0 10px; } h3 { font-size: 15px; margin: 18px 0 6px; }
.meta, .note { color: #59636e; } .study { color: #59636e; font-size: 12px; }
nav { background: #fff; border: 1px solid #dde1e6; border-radius: 6px; padding: 8px 18px; margin: 12px 0 20px; }
nav h2 { font-size: 15px; margin: 6px 0; }
section { background: #fff; border: 1px solid #dde1e6; border-radius: 6px; padding: 18px 22px; margin: 0 0 24px; }
.provenance { background: #f2f4f7; border-radius: 4px; padding: 8px 12px; margin-bottom: 12px; font-size: 13px; }
.provenance dl, dl.numbers { display: grid; grid-template-columns: max-content 1fr; gap: 2px 16px; margin: 0; }
.provenance dt, dl.numbers dt { color: #59636e; } .provenance dd, dl.numbers dd { margin: 0; overflow-wrap: anywhere; }
dl.numbers { margin: 8px 0 12px; font-size: 14px; }
code { font: 12.5px ui-monospace, "SFMono-Regular", Menlo, monospace; background: #e8ebef; padding: 1px 4px; border-radius: 3px; }
pre { font: 12px ui-monospace, Menlo, monospace; max-height: 320px; overflow: auto; background: #fff; padding: 8px; }
figure.plot { margin: 12px 0 20px; } figure.picture img { max-width: 100%; } figcaption { color: #59636e; font-size: 12px; }
.table { overflow-x: auto; }
table.sortable { border-collapse: collapse; font-size: 13px; }
table.sortable th { cursor: pointer; user-select: none; background: #eef1f4; text-align: left; vertical-align: bottom; padding: 5px 8px;
  border-bottom: 2px solid #c9d0d8; min-width: 4em; max-width: 9em; }
table.sortable th[data-order="asc"]::after { content: " \\25B2"; } table.sortable th[data-order="desc"]::after { content: " \\25BC"; }
table.sortable td { padding: 4px 8px; border-bottom: 1px solid #e6e9ed; white-space: nowrap; }
td.number { text-align: right; font-variant-numeric: tabular-nums; } table.sortable td.text { white-space: normal; min-width: 24em; }
table.sortable tbody tr:hover { background: #f6f8fa; }
"""

# Click a heading: sort by that column (numbers as numbers, empty cells last), click again to reverse.
SORT_SCRIPT = """
document.addEventListener("click", function (event) {
  var heading = event.target.closest("table.sortable th");
  if (!heading) return;
  var table = heading.closest("table"), column = heading.cellIndex, ascending = heading.dataset.order !== "asc";
  table.querySelectorAll("th").forEach(function (th) { delete th.dataset.order; });
  heading.dataset.order = ascending ? "asc" : "desc";
  function key(row) { var cell = row.cells[column]; return cell.dataset.value !== undefined ? parseFloat(cell.dataset.value) : cell.textContent; }
  function empty(value) { return value === "" || (typeof value === "number" && isNaN(value)); }
  var rows = Array.prototype.slice.call(table.tBodies[0].rows).sort(function (a, b) {
    var x = key(a), y = key(b);
    if (empty(x) || empty(y)) return empty(x) - empty(y);
    var order = typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y));
    return ascending ? order : -order;
  });
  rows.forEach(function (row) { table.tBodies[0].appendChild(row); });
});
"""
