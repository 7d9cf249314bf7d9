"""`lincorr report` on run directories and words from strangers: words reach the page only as text, the report never writes
into a run it reads, and a damaged run ends in one error line that names the file, never in a traceback.

Each damaged run starts as a copy of one of `tiny_runs` (conftest), whose directories stay untouched.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
from pathlib import Path

import numpy as np
import pytest

from helpers.cli_errors import one_error_line, spy_on_errors
from helpers.strangers import rewrite_json, write_runs_with_strangers_words

from lincorr.cli import main
from lincorr.errors import InputError, OutputError, StorageError, UsageError
from lincorr.filesystem import OUTPUT_MARKER
from lincorr.reading import MAX_NESTING
from lincorr.report import build_report, read_run
from lincorr.report.figures import as_text
from lincorr.report.page import Figure, Table

def strings(value):
    """Every string in a figure's JSON."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from strings(item)
    elif isinstance(value, (list, tuple, np.ndarray)):
        for item in value:
            yield from strings(item)


# ---- words reach the page as text ----

def test_figures_carry_the_words_of_a_run_escaped(tiny_runs, tmp_path):
    runs = write_runs_with_strangers_words(tiny_runs, tmp_path)
    report = build_report(list(runs.values()))
    shown = [as_text(block.figure).to_plotly_json() for section in report.sections for block in section.blocks if isinstance(block, Figure)]
    assert len(shown) == 2 + 3 + 1
    # No tag of a stranger's survives anywhere in a figure: the only markup left is our line breaks.
    assert not [text for figure in shown for text in strings(figure) if "<" in text.replace("<br>", "")]
    heatmap = shown[0]["data"][0]
    assert 'Paris &lt;a href="https://example.org/"&gt;click&lt;/a&gt;' in heatmap["y"]
    assert "Berlin &amp;lt;br&amp;gt; costs $5 or $6" in heatmap["y"] and "England&lt;br&gt;line" in heatmap["x"]
    title = shown[0]["layout"]["title"]["text"]
    assert title == 'W for &lt;a href="https://example.org/"&gt;city&lt;/a&gt; -&gt; tiny_country on tiny &lt;b&gt;model&lt;/b&gt;'
    hover = shown[2]["data"][0]["text"][0][1]
    assert hover.startswith('source: &lt;a href="https://example.org/"&gt;city&lt;/a&gt;: “{} &lt;b&gt;tiny_city&lt;/b&gt; ')
    assert shown[-1]["data"][0]["name"] == "&lt;a href='https://example.org/'&gt;argument&lt;/a&gt; rr"
    # The page: plotly writes "<" in its JSON as \u003c, so a tag that reached a figure would show as one.
    page = report.html()
    assert not re.findall(r"\\u003c(?!br\\u003e)", page)


def test_escaping_leaves_the_figure_itself_unchanged(tiny_runs):
    fit, = read_run(tiny_runs["fit"])
    figure = fit.blocks[1].figure
    before = figure.to_json()
    shown = as_text(figure)
    assert figure.to_json() == before and shown.layout.xaxis.title.text == "target word"
    assert shown.data[0].hovertemplate.startswith("source: %{y}<br>target: %{x}<br>")


# ---- the report is written only where it may be ----

def contents(directory: Path) -> dict:
    return {path: path.read_bytes() if path.is_file() else None for path in directory.rglob("*")}


def test_the_report_never_writes_into_a_run_it_reads(tiny_runs, tmp_path, monkeypatch, capsys):
    run = Path(shutil.copytree(tiny_runs["fit"], tmp_path / "run"))
    (tmp_path / "link").symlink_to(run, target_is_directory=True)
    before = contents(run)
    reported = spy_on_errors(monkeypatch)
    inside = (run / "result.json", run / "W.npy", run / "report.html", run, tmp_path / "run" / ".." / "run" / "provenance.json",
              tmp_path / "link" / "result.json")
    for out in inside:
        assert main(["report", str(run), "--out", str(out)]) == 2, out
        assert "inside the run directory" in one_error_line(capsys)
    # Inside any of the runs given, checked before a run is read.
    assert main(["report", str(tiny_runs["matrix"]), str(tmp_path / "missing"), str(run), "--out", str(run / "report.html")]) == 2
    assert f"inside the run directory {run}" in one_error_line(capsys)
    assert [type(error) for error in reported] == [OutputError] * (len(inside) + 1)
    assert contents(run) == before


def files_opened(run: Path, under: Path, monkeypatch) -> set[Path]:
    """Every file under `under` that the report of `run` opens (builtins.open and io.open spied on while it is built)."""
    import builtins
    import io

    opened: set[Path] = set()
    real = builtins.open

    def spying(file, *args, **kwargs):
        if isinstance(file, (str, os.PathLike)) and Path(os.path.abspath(file)).is_relative_to(under):
            opened.add(Path(os.path.abspath(file)))
        return real(file, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(builtins, "open", spying)
        patch.setattr(io, "open", spying)
        build_report([run])
    return opened


@pytest.mark.parametrize("kept", ["a-run-directory", "a-reproduction-kept-on-its-own"])
def test_the_report_never_writes_over_any_file_it_reads(kept, tiny_runs, tmp_path, monkeypatch, capsys):
    """A reproduction kept on its own (docs/reproductions/MODEL/PAPER.json) reads PAPER.provenance.json beside it:
    `--out` naming that file replaced it with the page. Every file the report opens is refused as --out."""
    if kept == "a-run-directory":
        run = Path(shutil.copytree(tiny_runs["reproduce"], tmp_path / "run"))
    else:
        (tmp_path / "model").mkdir()
        run = Path(shutil.copy(tiny_runs["reproduce"] / "reproduction.json", tmp_path / "model" / "peng.json"))
        shutil.copy(tiny_runs["reproduce"] / "provenance.json", tmp_path / "model" / "peng.provenance.json")
    read = files_opened(run, tmp_path, monkeypatch)
    assert len(read) >= 2, read  # the result and its provenance
    before = contents(tmp_path)
    reported = spy_on_errors(monkeypatch)
    for out in read:
        assert main(["report", str(run), "--out", str(out)]) == 2, out
        one_error_line(capsys)
    assert [type(error) for error in reported] == [OutputError] * len(read)
    assert contents(tmp_path) == before


def test_a_reproduction_kept_on_its_own_reads_no_other_runs_provenance(tiny_runs, tmp_path, capsys):
    """Without its PAPER.provenance.json, the report read provenance.json beside it, another run's (a FIFO there blocked
    or ended the report); now it shows what the reproduction itself says."""
    (tmp_path / "model").mkdir()
    run = Path(shutil.copy(tiny_runs["reproduce"] / "reproduction.json", tmp_path / "model" / "peng.json"))
    os.mkfifo(tmp_path / "model" / "provenance.json")
    (section,) = read_run(run)
    assert section.provenance.command is None and section.provenance.model == "tiny-llama"
    assert main(["report", str(run), "--out", str(tmp_path / "report.html")]) == 0


@pytest.mark.parametrize("where, kind, message", [
    ("{a_file}/report.html", OutputError, "is a file, not a directory"),
    ("{a_file}/deeper/report.html", OutputError, "is a file, not a directory"),
    ("{tmp}", OutputError, "is a directory; name the HTML file to write"),
    pytest.param("/proc/report.html", StorageError, "choose another location",
                 marks=pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="no /proc on this system")),
], ids=["parent-a-file", "ancestor-a-file", "a-directory", "under-proc"])
def test_an_out_that_cannot_be_written_ends_in_one_error_line(where, kind, message, tiny_runs, tmp_path, monkeypatch, capsys):
    (tmp_path / "a-file").write_text("mine", encoding="utf-8")
    before = contents(tmp_path)
    reported = spy_on_errors(monkeypatch)
    assert main(["report", str(tiny_runs["fit"]), "--out", where.format(a_file=tmp_path / "a-file", tmp=tmp_path)]) == 2
    assert message in one_error_line(capsys)
    assert [type(error) for error in reported] == [kind]
    assert contents(tmp_path) == before


def test_a_pipe_a_link_or_a_link_loop_is_never_replaced_by_the_report(tiny_runs, tmp_path, capsys):
    pipe, mine, link = tmp_path / "pipe.html", tmp_path / "mine.html", tmp_path / "link.html"
    os.mkfifo(pipe)
    mine.write_text("mine", encoding="utf-8")
    link.symlink_to(mine)
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    cases = [(["report", str(tiny_runs["fit"]), "--out", str(pipe)], "not a regular file"),
             (["report", str(tiny_runs["fit"]), "--out", str(link)], "is a link"),
             (["report", str(tiny_runs["fit"]), "--out", str(tmp_path / "a")], ""),
             (["report", str(tiny_runs["fit"]), "--out", str(tmp_path / "a" / "report.html")], ""),
             (["report", str(tmp_path / "a"), "--out", str(tmp_path / "report.html")], "")]
    for arguments, message in cases:
        assert main(arguments) == 2, arguments
        assert message in one_error_line(capsys)
    assert stat.S_ISFIFO(pipe.lstat().st_mode) and link.is_symlink() and mine.read_text(encoding="utf-8") == "mine"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["a", "b", "link.html", "mine.html", "pipe.html"]


# ---- a damaged run ends in one error line naming the file ----

def write(text: str | bytes):
    """A damage: the file holds `text`."""
    def damage(path: Path) -> None:
        path.unlink(missing_ok=True)
        path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return damage


def edited(change):
    """A damage: the file's JSON, changed in place by `change`."""
    def damage(path: Path) -> None:
        document = json.loads(path.read_text(encoding="utf-8"))
        change(document)
        path.write_text(json.dumps(document), encoding="utf-8")
    return damage


def made_a_directory(path: Path) -> None:
    path.unlink(missing_ok=True)
    path.mkdir()


def pickled(path: Path) -> None:
    np.save(path, np.array([{"W": 1.0}, None], dtype=object), allow_pickle=True)


def not_utf8(path: Path) -> None:
    path.write_bytes(path.read_text(encoding="utf-8").replace("Paris", "Paris \u00e9").encode("latin-1"))


def left_only_its_png(path: Path) -> None:
    (path.parent / "lens.json").unlink()  # a run the report has no view of: it shows the PNGs
    made_a_directory(path)


# id: (study, file damaged, damage, what the error says)
DAMAGES = {
    "result-an-empty-object": ("fit", "result.json", write("{}"), "source is missing"),
    "provenance-a-list": ("fit", "provenance.json", write("[]"), "the whole file is an empty list, not an object"),
    "w-pickled-objects": ("fit", "W.npy", pickled, "numpy cannot load it as an array"),
    "w-a-directory": ("fit", "W.npy", made_a_directory, "is a directory, not a file"),
    "deep-json-beside-the-run": ("fit", "notes.json", write("[" * 100_000), f"lincorr reads structures up to {MAX_NESTING} levels"),
    "result-not-utf8": ("fit", "result.json", not_utf8, "is not UTF-8 text"),
    "a-word-a-number": ("fit", "result.json", edited(lambda r: r["source_domain"]["words"].__setitem__(1, 7)),
                        "source_domain.words[1] is a whole number, not text"),
    "no-words": ("fit", "result.json", edited(lambda r: r["target_domain"].__setitem__("words", [])), "lists no source or no target words"),
    "ci-of-three": ("fit", "result.json", edited(lambda r: r.__setitem__("labelwise_r_ci95", [0.1, 0.2, 0.3])),
                    "labelwise_r_ci95 is a list of 3, not a list of 2"),
    "matrix-a-directory": ("precision", "matrix.json", made_a_directory, "is a directory, not a file"),
    "matrix-rows-an-object": ("matrix", "matrix.json", edited(lambda m: m.__setitem__("rows", {"tiny_city": 0})),
                              "rows is an object, not a list"),
    "matrix-ragged": ("matrix", "matrix.json", edited(lambda m: m["labelwise_r"][1].pop()), "labelwise_r is not 3 x 3"),
    "precision-row-without-hits": ("precision", "precision.json", edited(lambda p: p["rows"][0].pop("hit_influenced")),
                                   "rows[0].hit_influenced is missing"),
    "facts-lists": ("generalize", "facts.json", write("[[1]]"), "[0] is a list of 1, not an object"),
    "table7-an-object": ("table7", "table7.json", write("{}"), "the whole file is an object, not a list"),
    "scores-grid-short": ("scores", "scores.json", edited(lambda s: s["informative"].pop()), "informative is not 2 x 3"),
    "lens-layers-objects": ("lens", "lens.json", edited(lambda lens: lens.__setitem__("layers", [{}, {}, {}])),
                            "layers[0] is an object, not text or a number"),
    "fifo-beside-the-run": ("lens", "other.json", lambda path: os.mkfifo(path), "is a FIFO (named pipe), not a file"),
    "png-a-directory": ("lens", "lens.png", left_only_its_png, "is a directory, not a file"),
    "scale-note-a-number": ("scale", "scale.json", edited(lambda s: s.__setitem__("note", 5)), "note is a whole number, not text or null"),
}


@pytest.mark.parametrize("case", DAMAGES)
def test_a_damaged_run_ends_in_one_error_line_naming_the_file(case, tiny_runs, tmp_path, monkeypatch, capsys):
    study, name, damage, message = DAMAGES[case]
    run = Path(shutil.copytree(tiny_runs[study], tmp_path / "run"))
    damage(run / name)
    before = contents(tmp_path)
    reported = spy_on_errors(monkeypatch)
    assert main(["report", str(run), "--out", str(tmp_path / "report.html")]) == 2
    line = one_error_line(capsys)
    assert str(run / name) in line and message in line, line
    assert [type(error) for error in reported] == [InputError]
    assert contents(tmp_path) == before, "a refused run left a file behind"


@pytest.mark.parametrize("shape", [(), (6,), (2, 3, 1)])
def test_a_w_that_is_no_matrix_is_named_as_such_not_as_another_runs(shape, tmp_path, capsys):
    # Made by hand rather than from `tiny_runs`: the shape of W alone is under test.
    run = tmp_path / "run"
    run.mkdir()
    result = {**{key: 1 for key in ("source", "target", "model", "n_source_domain", "n_target_domain", "n_inputs", "n_train", "n_test")},
              "source_domain": {"words": ["Paris", "Rome"]}, "target_domain": {"words": ["France", "Italy", "Spain"]},
              "estimator": "ols", "labelwise_r_ci95": [0.1, 0.2], "labelwise_r": {"France": 0.5},
              **{key: 0.5 for key in ("labelwise_r_mean", "labelwise_r_std", "instancewise_r_mean", "control_labelwise_r_mean")}}
    (run / "result.json").write_text(json.dumps(result), encoding="utf-8")
    (run / "provenance.json").write_text(json.dumps({"study": "fit"}), encoding="utf-8")
    np.save(run / "W.npy", np.zeros(shape))
    assert main(["report", str(run), "--out", str(tmp_path / "report.html")]) == 2
    line = one_error_line(capsys)
    assert f"{run / 'W.npy'} is not what lincorr writes: it is a {len(shape)}-dimensional array, not a matrix" in line, line
    assert not (tmp_path / "report.html").exists()


def test_a_directory_without_a_sign_of_lincorr_is_refused_before_its_json_is_read(tmp_path):
    (tmp_path / "package.json").write_text("{ // not JSON", encoding="utf-8")
    with pytest.raises(InputError, match="is not a lincorr run directory"):
        read_run(tmp_path)
    (tmp_path / OUTPUT_MARKER).write_text("", encoding="utf-8")
    with pytest.raises(InputError, match=r"package\.json:1: run file is not valid JSON"):
        read_run(tmp_path)


def test_what_a_stranger_states_sizes_nothing_and_links_no_word_outside_the_domains(tiny_runs, tmp_path):
    runs = {name: Path(shutil.copytree(tiny_runs[name], tmp_path / name)) for name in ("fit", "cases")}
    rewrite_json(runs["fit"] / "result.json", lambda r: {**r, "reference_pairs": {**r["reference_pairs"], "Paris": ["Atlantis"]}})
    rewrite_json(runs["cases"] / "cases.json", lambda tables: [{**table, "k": 10**12} for table in tables])
    fit, = read_run(runs["fit"])
    assert ("reference pairs", "4 source words with a right target in the domain") in fit.blocks[0].items
    cases, = read_run(runs["cases"])
    tables = [block for block in cases.blocks if isinstance(block, Table)]
    assert [len(table.columns) for table in tables] == [1 + 3] and tables[0].title.startswith(f"tiny_city -> tiny_country: top-{10**12} ")


def test_a_scale_note_without_its_series_reads_and_a_run_named_twice_is_refused(tiny_runs, tmp_path):
    run = Path(shutil.copytree(tiny_runs["scale"], tmp_path / "run"))
    edited(lambda s: (s.pop("size_series", None), s.__setitem__("note", "a stranger's note")))(run / "scale.json")
    assert "a stranger" in build_report([run]).html()
    (tmp_path / "link").symlink_to(run)
    for twice in ([run, f"{run}/"], [str(tmp_path / "link"), run]):  # spelt apart, one directory: it would show twice
        with pytest.raises(UsageError, match="are the same run directory; name it once"):
            build_report(twice)
