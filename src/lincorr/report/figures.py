"""The report's interactive figures: plotly versions of the study plots, with the numbers behind each cell on hover.

Colour scales are fixed where the PNGs fix them ([-1, 1] for r, [0, 0.5] for its std), so
figures of different runs compare by eye; W keeps the PNG's row order and clipping.

Every string on a figure is text. Plotly reads a subset of HTML in all it writes (tick labels,
hover labels, titles, legend names, annotations): `<a href>` becomes a link, `<b>` bold, `&lt;`
a "<". The words of a run are a stranger's text, so `to_html`, through which every figure reaches
the page, escapes every string the figure holds (see `as_text`). The one piece of markup the
figures here use is a line break, written as a newline.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio

from lincorr.plots import ordered_weight_rows

R_LIMITS = (-1.0, 1.0)
STD_LIMITS = (0.0, 0.5)
ROW_PX = 14  # height of one heatmap row: enough for a readable label at font size 10
CHARACTER_PX = 6  # width of one character of a label at font size 10
MAX_HEIGHT_PX = 3600
FONT = {"size": 11}
THEME = "plotly_white"
# typesetMath off: a word with two dollar signs stays a word, wherever MathJax happens to be loaded.
CONFIG = {"displaylogo": False, "responsive": True, "typesetMath": False, "toImageButtonOptions": {"format": "png", "scale": 2}}
NEWLINE = re.compile(r"\r\n?|\n")


def to_html(figure: go.Figure, div_id: str) -> str:
    """The figure's <div> and the script that draws it (plotly.js itself is not included), every string shown as text."""
    shown = as_text(figure)
    # A hover label names no trace ("trace 0"): each template says what its numbers are.
    shown.update_traces(hoverlabel_namelength=0)
    # The theme is set here, once per drawn figure: plotly validates a template afresh in every figure that names
    # one, which made building a figure (and so reading a run) ten times slower.
    shown.update_layout(template=THEME)
    return pio.to_html(shown, include_plotlyjs=False, full_html=False, config=CONFIG, div_id=div_id,
                       default_height=f"{figure.layout.height or 450}px")


def as_text(figure: go.Figure) -> go.Figure:
    """A copy of `figure` in which plotly shows every string as written: `&`, `<` and `>` as entities, a newline as a line break.

    All strings are escaped, the figure's own (titles, hover templates) as well as the words in its
    data: a template that took a word in would otherwise carry the word's tags along.
    """
    return go.Figure(_as_text(figure.to_plotly_json()))


def _as_text(value):
    if isinstance(value, str):
        # Plotly itself shows a newline as a space; as <br> it is the line break the figures here write.
        return NEWLINE.sub("<br>", html.escape(value, quote=False))
    if isinstance(value, dict):
        return {key: _as_text(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_as_text(item) for item in value]
    if isinstance(value, np.ndarray) and value.dtype.kind in "OU":
        return np.frompyfunc(_as_text, 1, 1)(value)
    return value


def _layout(title: str, height: int, *, subtitle: str = "", **extra) -> dict:
    # The title takes its own margin, so axis labels on top never run into it.
    return {"title": {"text": title, "font": {"size": 14}, "x": 0, "xref": "paper", "yref": "container", "y": 1, "yanchor": "top",
                      "pad": {"t": 10}, "automargin": True, **({"subtitle": {"text": subtitle}} if subtitle else {})},
            "height": height, "font": FONT, "margin": {"l": 10, "r": 10, "t": 40, "b": 10}, **extra}


def _category_axis(title: str, **extra) -> dict:
    # Words such as "1990" would otherwise turn the axis numeric.
    return {"title": {"text": title}, "type": "category", "automargin": True, "tickfont": {"size": 10}, **extra}


def _heatmap_height(n_rows: int, *, minimum: int = 320, turned_labels: Sequence[str] = ()) -> int:
    return int(min(MAX_HEIGHT_PX, max(minimum, 200 + ROW_PX * n_rows) + _turned_room(turned_labels)))


def _turned_room(labels: Sequence[str]) -> int:
    """The height labels turned upright take from a figure of fixed height: without it, long words squeeze the plot to nothing."""
    return CHARACTER_PX * max(map(len, labels), default=0)


def _top_colorbar(title: str, n_rows: int) -> dict:
    """A colour bar beside the first rows: on a heatmap thousands of pixels tall a full-height one puts its labels off screen."""
    if ROW_PX * n_rows <= 600:
        return {"title": {"text": title, "side": "right"}}
    return {"title": {"text": title, "side": "right"}, "lenmode": "pixels", "len": 400, "y": 1, "yanchor": "top"}


def weight_figure(W: np.ndarray, source_words: Sequence[str], target_words: Sequence[str],
                  reference: Mapping[int, Sequence[int]], title: str) -> go.Figure:
    """W `[n_source, n_target]` as the PNG shows it (rows centred, ordered by reference target, clipped at the 99.5th percentile).

    Hover gives the source and target word, W itself, the row-centred value the colour shows and
    whether the cell is a reference pair; reference cells are outlined.
    """
    centred, order, ordering = ordered_weight_rows(W, {row: tuple(columns) for row, columns in reference.items()} or None)
    rows = [source_words[i] for i in order]
    is_reference = np.zeros(W.shape, bool)
    for row, columns in reference.items():
        is_reference[row, list(columns)] = True
    limit = float(np.nanpercentile(np.abs(centred), 99.5)) or 1.0
    heatmap = go.Heatmap(
        z=centred[order], x=list(target_words), y=rows, customdata=W[order], text=np.where(is_reference[order], "yes", "no"),
        colorscale="RdBu_r", zmin=-limit, zmax=limit, colorbar=_top_colorbar("W minus\nrow mean", len(rows)),
        # Four significant digits: an ols W of a large domain holds weights of 1e-4 and of 10.
        hovertemplate="source: %{y}\ntarget: %{x}\nW: %{customdata:.4~g}\nW minus row mean: %{z:.4~g}\nreference pair: %{text}",
    )
    marked = np.argwhere(is_reference[order])
    outlines = go.Scatter(
        x=[target_words[j] for _, j in marked], y=[rows[i] for i, _ in marked], mode="markers", hoverinfo="skip", name="reference pair",
        marker={"symbol": "square-open", "color": "black", "size": 9, "line": {"width": 1.5}}, showlegend=False,
    )
    # Explicit ranges: markers would otherwise pad the axes with empty space around the cells.
    return go.Figure(
        [heatmap, outlines],
        _layout(title, _heatmap_height(len(rows), turned_labels=target_words), subtitle=f"rows: source words {ordering}",
                xaxis=_category_axis("target word", side="top", tickangle=-90, range=[-0.5, len(target_words) - 0.5]),
                yaxis=_category_axis("source word", range=[len(rows) - 0.5, -0.5])),
    )


def bar_figure(labels: Sequence[str], values: Sequence[float], title: str, *, value_name: str, limits: tuple[float, float] = R_LIMITS) -> go.Figure:
    """One bar per label, largest first, on a fixed value axis."""
    order = np.argsort(-np.nan_to_num(np.asarray(values, float), nan=-np.inf))
    return go.Figure(
        go.Bar(x=[labels[i] for i in order], y=[values[i] for i in order], hovertemplate=f"%{{x}}\n{value_name}: %{{y:.3f}}"),
        _layout(title, 300 + _turned_room(labels), xaxis=_category_axis("", tickangle=-90),
                yaxis={"title": {"text": value_name}, "range": list(limits)}),
    )


def matrix_figure(values: np.ndarray, row_labels: Sequence[str], column_labels: Sequence[str], title: str, *, value_name: str,
                  limits: tuple[float, float], hover: Sequence[Sequence[str]], row_axis: str, column_axis: str) -> go.Figure:
    """A correlation matrix on a fixed colour scale, each value written in its cell (up to 30 x 30); `hover[i][j]` is the cell's hover text.

    A newline in the hover text starts a new line of the label.
    """
    low, high = limits
    small = max(len(row_labels), len(column_labels)) <= 30
    heatmap = go.Heatmap(
        z=np.where(np.isfinite(values), values, None), x=list(column_labels), y=list(row_labels), text=hover,  # type: ignore[call-overload]  # numpy's stub refuses None, plotly's gap
        colorscale="RdBu_r" if low < 0 else "Viridis", zmin=low, zmax=high, hoverongaps=False,
        colorbar=_top_colorbar(value_name, len(row_labels)),
        texttemplate="%{z:.2f}" if small else None, textfont={"size": 9},
        hovertemplate="%{text}",
    )
    return go.Figure(heatmap, _layout(title, _heatmap_height(len(row_labels), minimum=420, turned_labels=column_labels),
                                      xaxis=_category_axis(column_axis, tickangle=-90),
                                      yaxis=_category_axis(row_axis, autorange="reversed")))


def score_heatmaps(grids: Mapping[str, np.ndarray], layers: Sequence[int], components: Sequence[str], title: str) -> go.Figure:
    """One heatmap per score (layers down, components across), side by side, each on its own symmetric scale."""
    return role_heatmaps({"": grids}, layers, components, title)


def role_heatmaps(by_row: Mapping[str, Mapping[str, np.ndarray]], layers: Sequence[int], components: Sequence[str], title: str) -> go.Figure:
    """A row of score heatmaps per token role (`by_row`: role -> score -> `[n_layers, n_components]`; role "" for a single
    unnamed row), one column per score, each score on one symmetric scale shared by its rows."""
    from plotly.subplots import make_subplots

    scores = list(next(iter(by_row.values())))
    titles = [f"{name}, {role}" if role else name for role in by_row for name in scores]
    figure = make_subplots(rows=len(by_row), cols=len(scores), subplot_titles=titles, horizontal_spacing=0.12,
                           vertical_spacing=0.3 / len(by_row))
    for k, name in enumerate(scores):
        column = [np.asarray(grids[name], float) for grids in by_row.values()]
        limit = max((float(np.nanmax(np.abs(g))) for g in column if np.isfinite(g).any()), default=0.0) or 1.0
        right_edge = figure.layout[f"xaxis{k + 1 if k else ''}"].domain[1]
        for r, (role, grid) in enumerate(zip(by_row, column)):
            figure.add_trace(go.Heatmap(
                z=np.where(np.isfinite(grid), grid, None), x=list(components), y=[str(layer) for layer in layers], colorscale="RdBu_r",  # type: ignore[call-overload]  # numpy's stub refuses None, plotly's gap
                zmin=-limit, zmax=limit, hoverongaps=False, showscale=r == 0,
                colorbar={"x": right_edge + 0.01, "xanchor": "left", "y": 1, "yanchor": "top", "len": 0.9 / len(by_row), "thickness": 10},
                hovertemplate=f"layer %{{y}}\n%{{x}}\n{name} score{f' at {role} tokens' if role else ''}: %{{z:.4g}}",
            ), row=r + 1, col=k + 1)
            figure.update_xaxes(_category_axis("component", tickangle=-90), row=r + 1, col=k + 1)
            figure.update_yaxes(_category_axis("layer", autorange="reversed"), row=r + 1, col=k + 1)
    # Room above the plots for the subplot titles under the figure's own.
    figure.update_layout(_layout(title, len(by_row) * _heatmap_height(len(layers), minimum=380),
                                 margin={"l": 10, "r": 10, "t": 90, "b": 10}))
    return figure


def line_figure(x: Sequence, series: Mapping[str, Sequence[float]], title: str, *, x_name: str, y_name: str,
                y_range: tuple[float, float] | None = None, reference_line: tuple[str, float] | None = None) -> go.Figure:
    """One line per series over shared x values; `reference_line` (name, y) draws a dashed level such as chance."""
    x = list(x)
    # Layers and epochs are whole numbers: no tick at 0.5.
    whole = {"tickmode": "linear", "dtick": max(1, (max(x) - min(x)) // 20)} if x and all(isinstance(v, int) for v in x) else {}
    figure = go.Figure([
        go.Scatter(x=x, y=list(values), mode="lines+markers", name=name,
                   hovertemplate=f"%{{fullData.name}}\n{x_name}: %{{x}}\n{y_name}: %{{y:.3f}}")
        for name, values in series.items()
    ], _layout(title, 420, xaxis={"title": {"text": x_name}, "automargin": True, **whole},
               yaxis={"title": {"text": y_name}, **({"range": list(y_range)} if y_range else {})}))
    if reference_line is not None:
        figure.add_hline(y=reference_line[1], line_dash="dash", line_color="grey", annotation_text=reference_line[0])
    return figure


def outcome_figure(weights: Sequence[float], generalized: Sequence[float], labels: Sequence[str], curve: Sequence[Mapping], title: str) -> go.Figure:
    """Fig. 5: each learned fact's outcome (jittered) against W[s, ref], with the generalization rate per quantile bin."""
    jitter = np.random.default_rng(0).uniform(-0.03, 0.03, len(weights))
    return go.Figure([
        go.Scatter(x=list(weights), y=np.asarray(generalized, float) + jitter, mode="markers", name="facts", text=list(labels),
                   marker={"size": 7, "opacity": 0.6}, hovertemplate="%{text}\nW[s, ref]: %{x:.4f}"),
        go.Scatter(x=[(c["w_ref_low"] + c["w_ref_high"]) / 2 for c in curve], y=[c["generalization_rate"] for c in curve],
                   mode="lines+markers", name="rate per quantile bin", customdata=[c["n"] for c in curve],
                   hovertemplate="W[s, ref] bin centre: %{x:.4f}\ngeneralization rate: %{y:.2f} (%{customdata} facts)"),
    ], _layout(title, 420, xaxis={"title": {"text": "W[s, reference]"}},
               yaxis={"title": {"text": "generalized (1) or not (0)"}, "range": [-0.1, 1.1]}))


def grouped_bar_figure(categories: Sequence[str], series: Mapping[str, Sequence[float | None]], title: str, *, y_name: str,
                       y_range: tuple[float, float] | None = None, reference_line: tuple[str, float] | None = None) -> go.Figure:
    """One group of bars per category, one bar per series, in the order given; NaN or None leaves a gap."""
    figure = go.Figure([
        go.Bar(x=list(categories), y=[np.nan if v is None else v for v in values], name=name,
               hovertemplate=f"%{{x}}\n%{{fullData.name}}\n{y_name}: %{{y:.3f}}")
        for name, values in series.items()
    ], _layout(title, 380 + _turned_room(categories) // 2, barmode="group", xaxis=_category_axis(""),
               yaxis={"title": {"text": y_name}, **({"range": list(y_range)} if y_range else {})}))
    if reference_line is not None:
        figure.add_hline(y=reference_line[1], line_dash="dash", line_color="grey", annotation_text=reference_line[0])
    return figure


def scatter_figure(x: Sequence[float], y: Sequence[float], labels: Sequence[str], title: str, *, x_name: str, y_name: str,
                   groups: Sequence[str] | None = None) -> go.Figure:
    """One point per item (its label on hover), coloured by `groups` where given."""
    groups = list(groups) if groups is not None else [""] * len(x)
    return go.Figure([
        go.Scatter(x=[v for v, g in zip(x, groups) if g == group], y=[v for v, g in zip(y, groups) if g == group],
                   text=[label for label, g in zip(labels, groups) if g == group], mode="markers", name=group or "items",
                   marker={"size": 8, "opacity": 0.7}, hovertemplate=f"%{{text}}\n{x_name}: %{{x:.4g}}\n{y_name}: %{{y:.4g}}")
        for group in dict.fromkeys(groups)
    ], _layout(title, 420, xaxis={"title": {"text": x_name}}, yaxis={"title": {"text": y_name}}))
