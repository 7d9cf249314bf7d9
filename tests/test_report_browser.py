"""The HTML report in a real browser (headless Chromium through Playwright): it loads offline without errors,
draws every figure, sorts its tables, and its hover labels carry the numbers of the run; words of a
stranger's run that hold HTML show as the text they are, never as a link, an image or a script.

Chromium is Debian's `chromium` package (`make test` installs it when missing); where no browser
can be installed these tests skip with that message. Screenshots are kept in each test's tmp_path.
"""

from __future__ import annotations

import html
import json

import numpy as np
import pytest
from helpers.browser import OfflinePage, headless_chromium
from helpers.runs import FIGURES, STUDIES
from helpers.strangers import PROMPTS, SOURCE_WORDS, TARGET_WORDS, write_runs_with_strangers_words

from lincorr.cli import main
from lincorr.report import build_report

pytestmark = pytest.mark.browser

# Scroll a category cell of a plotly heatmap to the middle of the window (W can be thousands of pixels tall) and return
# its centre in window coordinates.
CELL_CENTRE = """([figure, row, column]) => {
  const gd = document.getElementById(figure), layout = gd._fullLayout;
  const x = layout.xaxis._offset + layout.xaxis.d2p(column), y = layout.yaxis._offset + layout.yaxis.d2p(row);
  window.scrollTo(0, window.scrollY + gd.getBoundingClientRect().top + y - window.innerHeight / 2);
  const box = gd.getBoundingClientRect();
  return [box.left + x, box.top + y];
}"""
HOVER_LINES = "() => Array.from(document.querySelectorAll('.hoverlayer .hovertext tspan.line')).map(line => line.textContent)"
# What plotly makes of tags in a figure's text, per figure: links, elements that load or run something, and styled text
# (<b>, <sup>, <span style>); plotly's own tick labels, titles and hover labels have none of them.
MADE_FROM_TAGS = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(gd => [
  gd.querySelectorAll('svg a').length, gd.querySelectorAll('img, script, iframe, object').length,
  gd.querySelectorAll('svg tspan[style]').length])"""
TICK_LABELS = "(id) => Array.from(document.querySelectorAll(`#${id} .xtick text, #${id} .ytick text`)).map(label => label.textContent)"


@pytest.fixture(scope="module")
def browser():
    with headless_chromium() as chromium:
        yield chromium


class OpenedReport(OfflinePage):
    """A report open offline (helpers.browser.OfflinePage), with what the tests read off its figures."""

    def drawn_figures(self) -> int:
        """Figures plotly has drawn: a plot with its SVG in place and at least one trace."""
        return self.page.evaluate("() => Array.from(document.querySelectorAll('.js-plotly-plot'))"
                                  ".filter(gd => gd.querySelector('svg.main-svg') && gd._fullData.length > 0).length")

    def hover(self, figure_id: str, row: str, column: str) -> list[str]:
        """Move the mouse over a heatmap cell and read the lines of its hover label."""
        self.page.mouse.move(*self.page.evaluate(CELL_CENTRE, [figure_id, row, column]))
        self.page.wait_for_function("() => document.querySelectorAll('.hoverlayer .hovertext').length > 0")
        return self.page.evaluate(HOVER_LINES)

    def figure_ids(self, study: str) -> list[str]:
        return self.page.evaluate(f"() => Array.from(document.querySelectorAll('section[data-study=\"{study}\"] .js-plotly-plot'))"
                                  ".map(gd => gd.id)")


def hovered(lines: list[str], label: str) -> float:
    """The number on the hover line "label: number"."""
    return float(next(line for line in lines if line.startswith(f"{label}: ")).removeprefix(f"{label}: "))


def test_tiny_runs_report_loads_offline_draws_every_figure_and_hovers_right(browser, tiny_runs, tmp_path):
    runs = tiny_runs
    report = build_report(list(runs.values()), title="tiny runs")
    opened = OpenedReport(browser, report.save(tmp_path / "report.html"))
    page = opened.page
    assert opened.drawn_figures() == report.figures == sum(FIGURES.values())
    page.screenshot(path=tmp_path / "report.png", full_page=True)
    # Every study has its section with its figures, each system's among them (logits, training, vectors, extractive).
    assert {name: len(opened.figure_ids(STUDIES.get(name, name))) for name in FIGURES} == FIGURES
    freeze_id = opened.figure_ids("extractive-freeze")[0]
    assert page.evaluate("(id) => document.getElementById(id)._fullData.map(trace => trace.type)", freeze_id) == ["bar"] * 4

    # W: the Paris -> France cell shows W itself from W.npy, its row-centred value and that it is a reference pair.
    W = np.load(runs["fit"] / "W.npy")
    weights_id = opened.figure_ids("fit")[0]
    lines = opened.hover(weights_id, "Paris", "France")
    assert lines[:2] == ["source: Paris", "target: France"] and lines[-1] == "reference pair: yes"
    assert hovered(lines, "W") == pytest.approx(float(W[0, 0]), rel=1e-3)  # four significant digits
    assert hovered(lines, "W minus row mean") == pytest.approx(float(W[0, 0] - W[0].mean()), rel=1e-3)
    page.locator(f"#{weights_id}").screenshot(path=tmp_path / "w_hover.png")
    assert opened.hover(weights_id, "Paris", "Japan")[-1] == "reference pair: no"

    # Matrices: both prompts with their templates and every score on hover; colour scales fixed.
    matrix = json.loads((runs["matrix"] / "matrix.json").read_text(encoding="utf-8"))
    r_id, _, std_id = opened.figure_ids("matrix")
    lines = opened.hover(r_id, "tiny_city", "tiny_country")
    assert lines[:2] == ["source: tiny_city: “{} lives in the city of”", "target: tiny_country: “{} lives in the country of”"]
    assert f"label-wise r: {matrix['labelwise_r'][0][1]:.3f}" in lines and f"std of label-wise r: {matrix['labelwise_std'][0][1]:.3f}" in lines
    scales = page.evaluate("(ids) => ids.map(id => [document.getElementById(id)._fullData[0].zmin, document.getElementById(id)._fullData[0].zmax])",
                           [r_id, std_id])
    assert scales == [[-1, 1], [0, 0.5]]
    page.locator(f"#{r_id}").screenshot(path=tmp_path / "matrix_hover.png")

    # Tables sort on a click: the matrix's pairs by label-wise r, largest first after two clicks.
    table = page.locator('section[data-study="matrix"] table.sortable')
    heading = table.locator("th", has_text="label-wise r").first
    heading.click()
    heading.click()
    column = [float(v) for v in table.locator("tbody tr td:nth-child(3)").all_inner_texts()]
    assert column == sorted(column, reverse=True) and len(column) == 9

    assert opened.requests == [] and opened.errors == []
    opened.context.close()


def test_words_from_strangers_are_shown_as_text_never_as_links_images_or_scripts(browser, tiny_runs, tmp_path):
    runs = write_runs_with_strangers_words(tiny_runs, tmp_path / "runs")
    report = build_report(list(runs.values()), title="<b>strangers</b>")
    opened = OpenedReport(browser, report.save(tmp_path / "report.html"))
    page = opened.page
    assert opened.drawn_figures() == report.figures == 6
    page.screenshot(path=tmp_path / "report.png", full_page=True)
    assert page.evaluate(MADE_FROM_TAGS) == [[0, 0, 0]] * report.figures

    # The tick labels of W and of a matrix show each word as it was written, tags and entities included.
    weights_id, matrix_id = opened.figure_ids("fit")[0], opened.figure_ids("matrix")[0]
    assert set(SOURCE_WORDS.values()) | set(TARGET_WORDS.values()) <= set(page.evaluate(TICK_LABELS, weights_id))
    assert set(PROMPTS.values()) <= set(page.evaluate(TICK_LABELS, matrix_id))
    page.locator(f"#{weights_id}").screenshot(path=tmp_path / "w.png")
    # Hover labels too; plotly keeps a category as the (escaped) text it was given.
    paris, france = (html.escape(word, quote=False) for word in (SOURCE_WORDS["Paris"], TARGET_WORDS["France"]))
    lines = opened.hover(weights_id, paris, france)
    assert lines[:2] == [f"source: {SOURCE_WORDS['Paris']}", f"target: {TARGET_WORDS['France']}"] and lines[-1] == "reference pair: yes"
    lines = opened.hover(matrix_id, html.escape(PROMPTS["tiny_city"], quote=False), html.escape(PROMPTS["tiny_country"], quote=False))
    assert lines[0] == f"source: {PROMPTS['tiny_city']}: “{{}} <b>tiny_city</b> <a href='https://example.org/'>is</a>”"
    assert page.evaluate(MADE_FROM_TAGS) == [[0, 0, 0]] * report.figures  # hover labels made none either
    assert page.title() == "<b>strangers</b>" and opened.requests == [] and opened.errors == []
    opened.context.close()


@pytest.mark.integration
def test_demo_writes_a_report_whose_w_hover_matches_the_bundled_model(browser, tmp_path, capsys, bundled):
    """`lincorr demo` on gemma-3-270m-q4km (-n 500: ols still has more training inputs than cities) writes report.html and prints its path."""
    bundled("gemma-3-270m-q4km")  # converted under the session's lock
    out = tmp_path / "lincorr-out"
    assert main(["demo", "-n", "500", "--quiet", "--out", str(out)]) == 0
    assert f"interactive report: {out / 'report.html'}" in capsys.readouterr().out
    opened = OpenedReport(browser, out / "report.html")
    assert opened.drawn_figures() == 2
    result = json.loads((out / "result.json").read_text(encoding="utf-8"))
    W = np.load(out / "W.npy")
    paris, france = result["source_domain"]["words"].index("Paris"), result["target_domain"]["words"].index("France")
    weights_id = opened.figure_ids("fit")[0]
    lines = opened.hover(weights_id, "Paris", "France")
    assert lines[:2] == ["source: Paris", "target: France"] and lines[-1] == "reference pair: yes"
    assert hovered(lines, "W") == pytest.approx(float(W[paris, france]), rel=1e-3)
    opened.page.screenshot(path=tmp_path / "demo_report.png", full_page=True)
    opened.page.screenshot(path=tmp_path / "demo_w_hover.png")  # the window around the hovered cell
    assert opened.requests == [] and opened.errors == []
    opened.context.close()
