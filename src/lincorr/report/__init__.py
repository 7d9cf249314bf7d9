"""The HTML report: one self-contained page (plotly.js and the data inline) for the output directories of any studies.

    from lincorr.report import build_report
    build_report(["lincorr-out", "runs/attr"]).save("report.html")

Interactive versions of the study figures (W, correlation matrices, Fig. 5, scores, logit-lens
curves) with the numbers under the pointer, sortable tables with the paper's columns, and for
every run the command, model fingerprint, settings and lincorr version that produced it.
The static PNGs stay what the studies write for papers.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from lincorr.errors import LincorrError, UsageError
from lincorr.report.page import Report, Section, check_report_file
from lincorr.report.runs import read_run

__all__ = ["Report", "Section", "build_report", "check_report_file", "read_run"]


def build_report(run_dirs: Sequence, *, title: str = "lincorr report") -> Report:
    """One section per study result found in `run_dirs`: reproductions' claim tables first, the rest in the order given.

    A LincorrError for a directory that holds none.
    """
    if not run_dirs:
        raise LincorrError("name at least one run directory (the --out of a lincorr command)")
    named: dict[str, int] = {}
    for index, directory in enumerate(run_dirs):  # however each is spelt (a trailing slash, a link): a run shown twice
        first = named.setdefault(os.path.realpath(directory), index)
        if first != index:
            raise UsageError(f"{directory} and {run_dirs[first]} are the same run directory; name it once")
    sections = [section for directory in run_dirs for section in read_run(directory)]
    return Report(title, tuple(sorted(sections, key=lambda section: section.study != "reproduce")))
