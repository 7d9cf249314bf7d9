"""`lincorr report`: one self-contained HTML page from the output directories of any lincorr runs."""

from __future__ import annotations

from lincorr.cli.options import Distinct, add_command, user_path


def add_commands(commands) -> None:
    report = add_command(commands, "report")
    report.add_argument("run_dirs", nargs="+", type=user_path, action=Distinct, metavar="RUN_DIR", help="a directory written by --out of any lincorr command")
    report.add_argument("--out", type=user_path, default="report.html", metavar="FILE", help="the HTML file to write, outside every RUN_DIR")
    report.add_argument("--title", default="lincorr report", help="the page's title")
    report.set_defaults(handler=run_report)


def run_report(args) -> None:
    from lincorr.report import build_report, check_report_file

    check_report_file(args.out, args.run_dirs)  # before reading: a refused --out costs no run read
    report = build_report(args.run_dirs, title=args.title)
    path = report.save(args.out)
    print(f"wrote {path} ({len(report.sections)} section(s), {report.figures} figure(s)); open it in a browser")
