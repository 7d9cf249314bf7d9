"""The HTML report from real runs on a tiny model: every study's directory becomes a section with its provenance, figures and tables.

`tiny_runs` (conftest) holds each study's output written the way a user would (the CLI where a command
exists, the study's own `.save` otherwise); tests/test_report_browser.py opens the same runs in Chromium.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from helpers.runs import FIGURES, STUDIES
from helpers.tiny import CITIES, COUNTRIES

from lincorr.cli import main
from lincorr.errors import LincorrError
from lincorr.paper import paper_table
from lincorr.report import build_report, read_run


def test_every_study_directory_becomes_one_section_with_its_figures(tiny_runs):
    report = build_report(list(tiny_runs.values()))
    assert len(report.sections) == len(tiny_runs)
    assert [section.figures for section in report.sections] == list(FIGURES.values())
    assert report.figures == sum(FIGURES.values())
    # Each section is the study its provenance.json names.
    assert [section.study for section in report.sections] == [STUDIES.get(name, name) for name in tiny_runs]


def test_a_reproduction_opens_the_report_with_its_claim_table(tiny_runs):
    report = build_report([tiny_runs["fit"], tiny_runs["reproduce"]])
    assert [section.study for section in report.sections] == ["reproduce", "fit"]
    claims = next(block for block in report.sections[0].blocks if hasattr(block, "rows"))
    assert [row[0] for row in claims.rows] == ["peng.table2", "peng.fig2"]
    assert [row[1] for row in claims.rows] == ["reproduced", "not applicable"], "the verdict first"
    assert "llama-3-8b: City->Country" in claims.rows[0][6]
    beside = [block for block in report.sections[0].blocks if hasattr(block, "figure")][1]
    bars = {bar.name: (list(bar.x), list(bar.y)) for bar in beside.figure.data}
    assert bars == {"paper": (["City->Country hit_influenced"], [0.42]), "ours ols": (["City->Country hit_influenced"], [0.3])}


def test_the_paper_is_drawn_beside_ours_only_where_the_measurement_names_its_rows():
    from lincorr.report.reproduction import paper_beside_ours

    paper = {"model": "m", "rows": [{"label": "A->B", "source": "a", "target": "b", "r": 0.9, "hit": [0.5, 0.6]},
                                    {"label": "C->D", "source": "c", "target": "d", "r": 0.4}]}
    ours = {"relations": {"A->B": {"ols": {"r": 0.7, "hit": [0.2, 0.3]}, "ridge": {"r": 0.8}}}, "r": 0.1}
    figure = paper_beside_ours({"where": "Table 9", "paper": paper, "ours": ours}).figure
    bars = {bar.name: [None if value != value else value for value in bar.y] for bar in figure.data}  # NaN: a gap
    assert list(figure.data[0].x) == ["A->B r", "A->B hit"]
    assert bars == {"paper": [0.9, 0.5], "ours relations/ols": [0.7, 0.2], "ours relations/ridge": [0.8, None]}
    assert paper_beside_ours({"paper": paper, "ours": {"r": 0.1}}) is None, "a number naming no row is not the row's"
    assert paper_beside_ours({"paper": "not a table", "ours": ours}) is None


def test_every_drawn_figure_takes_the_white_theme():
    from lincorr.report import figures

    figure = figures.bar_figure(["a", "b"], [0.2, 0.4], "two bars", value_name="r")
    drawn = figures.to_html(figure, "bars")
    assert '"plot_bgcolor":"white"' in drawn  # plotly_white's; the default theme's is #E5ECF6
    assert '"text":"two bars"' in drawn


def test_a_claims_published_numbers_fit_one_cell_whatever_their_shape():
    from lincorr.report.reproduction import published_cell

    rows = [{"label": f"r{i}", "source": "a", "target": "b", "hit": [0.5, 0.25]} for i in range(6)]
    assert published_cell({"model": "m", "rows": rows}) == "m: r0 0.5/0.25; r1 0.5/0.25; r2 0.5/0.25; r3 0.5/0.25 …"
    nested = {"model": "OLMo-7B", "values": {"none": {"first": [0.0, 1.8]}, "all": 9.2}}
    assert published_cell(nested) == "OLMo-7B: none first 0/1.8; all 9.2"
    assert published_cell({"model": "m", "rows": ["not a row", {"label": "x"}], "values": "not numbers"}) == "m: "
    assert published_cell(None) == published_cell([1, 2]) == published_cell({}) == ""


def test_sections_carry_command_fingerprint_settings_and_version(tiny_runs):
    from lincorr import __version__

    fit, = read_run(tiny_runs["fit"])
    assert fit.provenance.command.startswith("lincorr fit tiny_city tiny_country --inputs ") and "--out" in fit.provenance.command
    assert fit.provenance.model_fingerprint.startswith("hf-") or ":" in fit.provenance.model_fingerprint
    assert fit.provenance.settings["estimator"] == "ridge" and fit.provenance.settings["alpha"] == 1.0
    assert fit.provenance.lincorr_version == __version__ and fit.provenance.written_at
    saved = json.loads((tiny_runs["fit"] / "result.json").read_text(encoding="utf-8"))
    assert fit.provenance.model_fingerprint == saved["model_fingerprint"]
    for name in ("matrix", "precision", "cases", "resilience", "generalize", "subwords", "gradcorr", "predict", "table5"):
        section, = read_run(tiny_runs[name])
        assert section.provenance.model_fingerprint and section.provenance.settings, name
        assert section.provenance.lincorr_version == __version__, name
    scale, = read_run(tiny_runs["scale"])
    assert len(scale.provenance.model_fingerprint) == 2 and scale.provenance.settings["n_inputs"] == 60
    table5, = read_run(tiny_runs["table5"])
    assert table5.provenance.command is None  # saved from Python: no command line to show


def test_page_is_self_contained_and_escapes_what_users_typed(tiny_runs):
    page = build_report(list(tiny_runs.values()), title="<tiny & runs>").html()
    assert "<title>&lt;tiny &amp; runs&gt;</title>" in page
    # No network: plotly.js is inline once, and nothing is fetched from elsewhere.
    assert page.count("Plotly.newPlot(") == sum(FIGURES.values())
    assert not re.findall(r'<(?:script|link|img)[^>]+(?:src|href)="(?!data:)', page)
    assert page.count('<script>window.PlotlyConfig') == 1
    assert page.count("<section ") == len(tiny_runs) and page.count('<a href="#run-') == len(tiny_runs)
    assert "lincorr fit tiny_city tiny_country" in page


def test_w_heatmap_hover_holds_the_weight_and_the_reference_flag(tiny_runs):
    from lincorr.plots import ordered_weight_rows

    fit, = read_run(tiny_runs["fit"])
    heatmap = fit.blocks[1].figure.data[0]
    W = np.load(tiny_runs["fit"] / "W.npy")
    _, order, _ = ordered_weight_rows(W, {i: (i,) for i in range(5)})
    assert list(heatmap.y) == [CITIES[i] for i in order] and list(heatmap.x) == list(COUNTRIES)
    row, column = list(heatmap.y).index("Paris"), list(heatmap.x).index("France")
    assert heatmap.customdata[row][column] == W[0, 0] and heatmap.text[row][column] == "yes"
    assert heatmap.text[row][list(heatmap.x).index("Japan")] == "no"
    assert "W: %{customdata:.4~g}" in heatmap.hovertemplate and "reference pair: %{text}" in heatmap.hovertemplate


def test_matrix_colour_scales_are_fixed_and_hover_names_both_prompts(tiny_runs):
    matrix, = read_run(tiny_runs["matrix"])
    r, instance, std = (block.figure.data[0] for block in matrix.blocks[1:4])
    assert (r.zmin, r.zmax) == (instance.zmin, instance.zmax) == (-1.0, 1.0) and (std.zmin, std.zmax) == (0.0, 0.5)
    hover = r.text[0][1]
    assert "source: tiny_city: “{} lives in the city of”" in hover and "target: tiny_country: “{} lives in the country of”" in hover
    assert "label-wise r:" in hover and "std of label-wise r:" in hover
    table = matrix.blocks[4]
    assert len(table.rows) == 9 and table.columns[2].name == "label-wise r"


def test_tables_keep_the_paper_column_and_mark_skipped_rows(tiny_runs):
    precision, = read_run(tiny_runs["precision"])
    table = precision.blocks[1]
    assert [row[1] for row in table.rows] == ["ridge-std", "ols", "ridge"] and table.columns[-1].name.startswith("paper")
    table5, = read_run(tiny_runs["table5"])
    rows = table5.blocks[1].rows
    assert rows[0][0] == "City->Country" and rows[0][-3] == paper_table("table5").row("City->Country")["generalization_rate"]
    assert rows[1][-1].startswith("skipped: ")
    table7, = read_run(tiny_runs["table7"])
    assert table7.title == "vocabulary ablation (Table 7) on tiny-llama" and table7.blocks[1].rows[0][2] == pytest.approx(60.0)


def test_inside_path_sections_draw_lens_curves_and_score_heatmaps(tiny_runs):
    lens, = read_run(tiny_runs["lens"])
    assert lens.title == "logit lens: country_capital on tiny-llama" and lens.provenance.model_fingerprint == "params:planted"
    numbers, figure = lens.blocks
    assert ("final_accuracy", "0.75") in numbers.items and ("crossing_layer", "2") in numbers.items
    assert [trace.name for trace in figure.figure.data] == ["argument rr", "answer rr", "answer top1"]  # mid-block curves are shorter
    assert [shape.x0 for shape in figure.figure.layout.shapes] == [2]
    scores, = read_run(tiny_runs["scores"])
    heatmaps = scores.blocks[1].figure.data
    assert len(heatmaps) == 3 and all(h.zmin == -h.zmax for h in heatmaps) and list(heatmaps[0].x) == ["mlp", "head 0", "head 1"]


def test_a_study_without_a_view_still_gets_its_numbers_and_pngs(tiny_runs, tmp_path):
    from lincorr.filesystem import OUTPUT_MARKER

    (tmp_path / OUTPUT_MARKER).write_text("", encoding="utf-8")
    (tmp_path / "freeze.json").write_text(json.dumps({"model": "tiny-llama", "hop": "first", "rows": [1, 2]}), encoding="utf-8")
    (tmp_path / "freeze.png").write_bytes((tiny_runs["fit"] / "W.png").read_bytes())
    section, = read_run(tmp_path)
    assert section.study == "other" and section.title.endswith("on tiny-llama")
    numbers, picture = section.blocks
    assert numbers.items == (("freeze.json: model", "tiny-llama"), ("freeze.json: hop", "first")) and picture.name == "freeze.png"
    assert 'src="data:image/png;base64,' in build_report([tmp_path]).html()


def test_a_run_saved_before_provenance_named_its_study_is_known_by_its_files(tiny_runs, tmp_path):
    run = Path(shutil.copytree(tiny_runs["matrix"], tmp_path / "old"))
    provenance = json.loads((run / "provenance.json").read_text(encoding="utf-8"))
    del provenance["study"]
    (run / "provenance.json").write_text(json.dumps(provenance), encoding="utf-8")
    (run / "result_state.json").unlink()
    section, = read_run(run)
    assert section.study == "matrix" and section.figures == FIGURES["matrix"]


def test_not_a_run_directory_is_one_clear_error(tmp_path):
    (tmp_path / "notes.json").write_text('{"hello": 1}', encoding="utf-8")
    (tmp_path / "broken.json").write_text("{", encoding="utf-8")
    with pytest.raises(LincorrError, match="is not a lincorr run directory"):
        read_run(tmp_path)
    with pytest.raises(LincorrError, match="is neither a directory nor a saved reproduction"):
        read_run(tmp_path / "missing")
    with pytest.raises(LincorrError, match="is not what lincorr writes: paper is missing"):  # a JSON file that is no reproduction
        read_run(tmp_path / "notes.json")


def test_a_committed_reproduction_file_draws_its_claim_table_verdict_first():
    """docs/reproductions/MODEL/PAPER.json, kept on its own with its provenance beside it, is read as a run is."""
    path = Path(__file__).resolve().parents[1] / "docs" / "reproductions" / "gemma-3-270m-q4km" / "peng.json"
    (section,) = read_run(path)
    table = next(block for block in section.blocks if hasattr(block, "rows"))
    verdicts = [row[1] for row in table.rows]
    assert section.study == "reproduce" and "gemma-3-270m-q4km" in section.title
    assert verdicts.index("not applicable") == sum(v != "not applicable" for v in verdicts), "measured claims first"
    assert section.provenance.command and "reproduce peng" in section.provenance.command
    with pytest.raises(LincorrError, match="at least one run directory"):
        build_report([])


def test_cli_writes_the_report_and_fails_on_a_foreign_directory_with_exit_2(tiny_runs, tmp_path, capsys):
    out = tmp_path / "report.html"
    assert main(["report", str(tiny_runs["fit"]), str(tiny_runs["matrix"]), "--out", str(out), "--title", "two runs"]) == 0
    assert f"wrote {out} (2 section(s), 5 figure(s))" in capsys.readouterr().out
    assert "<title>two runs</title>" in out.read_text(encoding="utf-8")
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    assert main(["report", str(tiny_runs["fit"]), str(foreign), "--out", str(tmp_path / "other.html")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("lincorr: error:") and "is not a lincorr run directory" in err[0]
    assert not (tmp_path / "other.html").exists()
    assert main(["report", str(tiny_runs["fit"]), "--out", str(tmp_path)]) == 2
    assert "is a directory; name the HTML file to write" in capsys.readouterr().err


def test_a_p_value_past_float64s_range_reads_as_below_it_not_as_zero():
    """A score test's normal tail underflows past z = 38: the p is below 1e-300, which no test reports as 0."""
    from lincorr.report.effects import tests_text

    decision = {"p_effect": 2.8e-11, "adjusted_p_effect": 5.1e-10, "p_size": 0.0, "adjusted_p_size": 0.0}
    assert tests_text(decision) == "T+ p 2.8e-11 (adj 5.1e-10), T− p < 1e-300 (adj < 1e-300)"
