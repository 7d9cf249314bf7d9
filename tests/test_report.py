"""The HTML report from real runs on a tiny model: every study's directory becomes a section with its provenance, figures and tables.

`tiny_runs` writes each study's output the way a user would (the CLI where a command exists, the
study's own `.save` otherwise); tests/test_report_browser.py opens the same report in Chromium.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from conftest import CITIES, COUNTRIES, NAMES
from test_studies import REGISTRY_YAML  # the tiny family with its reference pairs
from tiny import WORDS, one_thread, tiny_llama, tiny_subword_tokenizer

from lincorr.cli import main
from lincorr.errors import LincorrError
from lincorr.paper import paper_table
from lincorr.report import build_report, read_run

# Small and quick: ridge with a fixed penalty, a short bootstrap, a few facts learned in a few epochs.
FIT = ["--estimator", "ridge", "--alpha", "1", "--bootstrap", "10"]
TRAIN = ["-n", "40", "--n-facts", "3", "--epochs", "8", "--lr", "1e-2", "--train-batch-size", "4"]
# Study directory -> how many figures its section draws.
FIGURES = {"fit": 2, "matrix": 3, "precision": 0, "cases": 0, "resilience": 4, "scale": 3, "generalize": 1, "subwords": 1,
           "gradcorr": 0, "predict": 0, "table5": 0, "table7": 0, "scores": 1, "ocr": 1, "lens": 1}


def write_extractive_and_lens_runs(root) -> None:
    """Results of the inside-path studies, saved without a model: planted score grids, an OCR and logit-lens curves."""
    from lincorr.experiments.extractive_scores import SCORES, ScoresConfig, ScoresResult
    from lincorr.experiments.vector_arithmetic import LensResult
    from lincorr.outputs import write_json

    rng = np.random.default_rng(0)
    checked = ("mlp[0]", "head[1,0]")
    ScoresResult(
        model_name="tiny-llama", config=ScoresConfig(), component_names=("mlp", "head 0", "head 1"),
        grids={key: rng.normal(size=(2, 3)) for key in SCORES}, checked=checked,
        linear_checked={key: rng.normal(size=2) for key in SCORES}, exact_checked={key: rng.normal(size=2) for key in SCORES},
        mean_ranks={"fact_mean_rank_before": 2.5, "fact_mean_rank_after": 1.0, "implication_mean_rank_before": 2.5,
                    "implication_mean_rank_after": 2.1},
        training={"epochs": 2}, seconds_train=0.0, seconds_scores=0.0, seconds_check=0.0,
    ).save(root / "scores")
    (root / "ocr").mkdir()
    write_json(root / "ocr" / "ocr.json", {
        "hop": "first", "model": "tiny-llama", "n_facts": 4, "epochs": 2, "chance_mean_rank": 2.5,
        "fact_mean_rank_before": 2.5, "fact_mean_rank_after": 1.0, "implication_mean_rank_before": 2.5, "implication_mean_rank_after": 2.2,
        "per_epoch": [{"epoch": e, "fact_mean_rank": f, "implication_mean_rank": i} for e, f, i in ((0, 2.5, 2.5), (1, 1.6, 2.4), (2, 1.0, 2.2))],
    })
    LensResult(
        task="country_capital", model="tiny-llama", model_fingerprint="params:planted", n_pairs=4,
        argument_rr=np.array([0.9, 0.6, 0.2]), answer_rr=np.array([0.1, 0.4, 0.8]), answer_top1=np.array([0.0, 0.25, 0.75]),
        mid_argument_rr=np.array([0.7, 0.4]), mid_answer_rr=np.array([0.2, 0.6]), crossing_layer=2, crossing_component="mlp",
        final_accuracy=0.75, example_prompt="France: Paris\nJapan:", settings={"floor": 0.1, "seed": 0}, seconds=0.0,
    ).save(root / "lens")


def write_tiny_runs(root) -> dict:
    """One directory per study of lincorr, written by the CLI on a tiny Llama saved to disk (or by the study's `.save`)."""
    from lincorr.experiments.ablation import AblationResult, AblationTable
    from lincorr.experiments.correlation import FitConfig
    from lincorr.experiments.generalization import GeneralizationConfig, generalization_table
    from lincorr.finetune import TrainConfig
    from lincorr.knowledge import load_registry
    from lincorr.models import load_model
    from lincorr.relations import RelationSpec

    tokenizer = tiny_subword_tokenizer(list(WORDS) + list(NAMES))
    model, other_model, registry, inputs = root / "model", root / "model-2", root / "tiny.yaml", root / "inputs.txt"
    for seed, directory in enumerate((model, other_model)):
        tiny_llama(len(tokenizer), seed=seed).save_pretrained(directory)
        tokenizer.save_pretrained(directory)
    registry.write_text(REGISTRY_YAML, encoding="utf-8")
    inputs.write_text("\n".join(NAMES[:60]), encoding="utf-8")
    shared = ["--model", str(model), "--registry", str(registry), "--quiet"]
    commands = {
        "fit": ["fit", "tiny_city", "tiny_country", "--inputs", str(inputs), *FIT, "--heatmap", "--save-dir"],
        "matrix": ["matrix", "--family", "tiny", "--inputs", str(inputs), *FIT, "--out"],
        "precision": ["precision", "tiny_city", "tiny_country", "--inputs", str(inputs), "--out"],
        "cases": ["cases", "tiny_city", "tiny_country", "--word", "Paris", "--word", "Tokyo", "-k", "3", "--inputs", str(inputs), "--out"],
        "resilience": ["resilience", "--eval-model", str(model), "--prompts", "tiny_city,tiny_country", "--inputs", str(inputs), "--out"],
        "scale": ["scale", "--models", f"{model},{other_model}", "--relations", "tiny_city:tiny_country", "-n", "60", "--out"],
        "generalize": ["generalize", "tiny_city", "tiny_country", *TRAIN, "--n-seeds", "2", *FIT, "--out"],
        "subwords": ["subwords", "tiny_city", "tiny_country", *TRAIN, "--n-seeds", "1", *FIT, "--out"],
        "gradcorr": ["gradcorr", "tiny_city", "tiny_country", "-n", "40", "--n-step-facts", "8", "--n-eval", "15", "--lr", "1e-3",
                     "--train-batch-size", "4", *FIT, "--out"],
        "predict": ["predict-edit", "tiny_city", "tiny_country", "--value", "Paris", "-n", "40", *FIT, "--out"],
    }
    with one_thread():
        for name, command in commands.items():
            assert main([*command, str(root / name), *shared]) == 0, name
        lm = load_model(str(model))
        config = GeneralizationConfig(n_facts=2, seeds=(0,), n_inputs=40, fit=FitConfig(estimator="ridge", alpha=1.0, n_boot=10),
                                      train=TrainConfig(learning_rate=1e-2, epochs=8, batch_size=4, progress=False), progress=False)
        relations = [RelationSpec("tiny_city", "tiny_country", "City->Country"), RelationSpec("tiny_country", "tiny_city", "no reference")]
        generalization_table(lm, load_registry([registry]), relations, config).save(root / "table5")
    AblationTable(tuple(AblationResult("city->country", mapping, seed, rate, 0.0, 0.01, 1.0, 1.0, 1.0, 10, 128, 100, 1.0,
                                       {"vocabulary": "tiny-llama", "seed": seed})
                        for mapping, rate in (("real", 0.6), ("shuffled", 0.1)) for seed in (0, 1))).save(root / "table7")
    write_extractive_and_lens_runs(root)
    return {name: root / name for name in FIGURES}


@pytest.fixture(scope="module")
def tiny_runs(tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LINCORR_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        yield write_tiny_runs(tmp_path_factory.mktemp("runs"))


def test_every_study_directory_becomes_one_section_with_its_figures(tiny_runs):
    report = build_report(list(tiny_runs.values()))
    assert len(report.sections) == len(tiny_runs)
    assert [section.figures for section in report.sections] == list(FIGURES.values())
    assert report.figures == sum(FIGURES.values())
    studies = [section.study for section in report.sections]
    assert studies[:3] == ["fit", "matrix", "precision"] and studies[-3:] == ["extractive scores", "extractive ocr", "logit lens"]


def test_sections_carry_command_fingerprint_settings_and_version(tiny_runs):
    from lincorr import __version__

    fit, = read_run(tiny_runs["fit"])
    assert fit.provenance.command.startswith("lincorr fit tiny_city tiny_country --inputs ") and "--save-dir" in fit.provenance.command
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
    coef = np.load(tiny_runs["fit"] / "W.npy")
    _, order, _ = ordered_weight_rows(coef, {i: (i,) for i in range(5)})
    assert list(heatmap.y) == [CITIES[i] for i in order] and list(heatmap.x) == list(COUNTRIES)
    row, column = list(heatmap.y).index("Paris"), list(heatmap.x).index("France")
    assert heatmap.customdata[row][column] == coef[0, 0] and heatmap.text[row][column] == "yes"
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
    table = precision.blocks[0]
    assert [row[1] for row in table.rows] == ["ridge-std", "ols", "ridge"] and table.columns[-1].name.startswith("paper")
    table5, = read_run(tiny_runs["table5"])
    rows = table5.blocks[0].rows
    assert rows[0][0] == "City->Country" and rows[0][-3] == paper_table("table5").row("City->Country")["generalization_rate"]
    assert rows[1][-1].startswith("skipped: ")
    table7, = read_run(tiny_runs["table7"])
    assert table7.title == "vocabulary ablation (Table 7) on tiny-llama" and table7.blocks[0].rows[0][2] == pytest.approx(60.0)


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


def test_not_a_run_directory_is_one_clear_error(tmp_path):
    (tmp_path / "notes.json").write_text('{"hello": 1}', encoding="utf-8")
    (tmp_path / "broken.json").write_text("{", encoding="utf-8")
    with pytest.raises(LincorrError, match="is not a lincorr run directory"):
        read_run(tmp_path)
    with pytest.raises(LincorrError, match="is not a directory"):
        read_run(tmp_path / "missing")
    with pytest.raises(LincorrError, match="at least one run directory"):
        build_report([])


def test_cli_writes_the_report_and_fails_on_a_foreign_directory_with_exit_2(tiny_runs, tmp_path, capsys):
    out = tmp_path / "report.html"
    assert main(["report", str(tiny_runs["fit"]), str(tiny_runs["matrix"]), "--out", str(out), "--title", "two runs"]) == 0
    assert f"wrote {out} (2 section(s), 5 figure(s))" in capsys.readouterr().out
    assert "<title>two runs</title>" in out.read_text(encoding="utf-8")
    assert main(["report", str(tiny_runs["fit"]), str(tmp_path), "--out", str(tmp_path / "other.html")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("lincorr: error:") and "is not a lincorr run directory" in err[0]
    assert not (tmp_path / "other.html").exists()
    assert main(["report", str(tiny_runs["fit"]), "--out", str(tmp_path)]) == 2
    assert "is a directory; name the HTML file to write" in capsys.readouterr().err
