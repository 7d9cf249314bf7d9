"""Figures: heatmaps of W and of correlation matrices."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from numpy.typing import ArrayLike  # noqa: E402


def ordered_weight_rows(W: np.ndarray, reference: Mapping[int, tuple[int, ...]] | None = None) -> tuple[np.ndarray, np.ndarray, str]:
    """W `[n_source, n_target]` with each row centred, the row order to show it in, and that order in words.

    A row's mean only shifts every target alike (a source that raises all countries), and
    the top-k readings ignore it; centring shows which targets each source favours. With
    `reference` (source row -> right target columns) rows are ordered by their right
    target, so a diagonal appears only where W agrees with the world; rows without a
    reference go last. Without one, rows are ordered by their own top target, which makes
    a staircase by construction: the returned words say which ordering was used.
    Returns (centred W in its original row order, the row order, "ordered by ...").
    """
    centred = W - W.mean(axis=1, keepdims=True)
    if reference:
        keys = np.array([reference[i][0] if i in reference else centred.shape[1] for i in range(centred.shape[0])])
        ordering = "ordered by its reference target"
    else:
        keys = centred.argmax(axis=1)
        ordering = "ordered by its own top target"
    return centred, np.lexsort((-centred.max(axis=1), keys)), ordering


def weight_heatmap(
    W: np.ndarray,
    source_labels: Sequence[str],
    target_labels: Sequence[str],
    path,
    title: str,
    reference: Mapping[int, tuple[int, ...]] | None = None,
) -> None:
    """W `[n_source, n_target]` with each row centred, rows ordered by their right target (see `ordered_weight_rows`)."""
    centred, order, ordering = ordered_weight_rows(W, reference)
    centred = centred[order]
    n_source, n_target = centred.shape
    figure, axes = plt.subplots(figsize=(min(4 + 0.12 * n_target, 40), min(3 + 0.12 * n_source, 60)))
    limit = float(np.nanpercentile(np.abs(centred), 99.5)) or 1.0
    image = axes.imshow(centred, cmap="RdBu_r", vmin=-limit, vmax=limit, aspect="auto", interpolation="nearest")
    label_size = max(3.0, min(8.0, 600 / max(n_source, n_target)))
    axes.set_xticks(range(n_target), [t.strip() for t in target_labels], rotation=90, fontsize=label_size)
    axes.set_yticks(range(n_source), [source_labels[i].strip() for i in order], fontsize=label_size)
    axes.set_xlabel("target word")
    axes.set_ylabel(f"source word ({ordering})")
    axes.set_title(title)
    figure.colorbar(image, ax=axes, fraction=0.02, pad=0.01, label="W minus its row mean (clipped at the 99.5th percentile)")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def matrix_heatmap(
    values: np.ndarray,
    row_labels: Sequence[str],
    column_labels: Sequence[str],
    path,
    title: str,
    *,
    limits: tuple[float, float] = (-1.0, 1.0),
    colour_label: str = "label-wise Pearson r",
    row_axis: str = "source prompt",
    column_axis: str = "target prompt",
) -> None:
    """A correlation matrix `[n_rows, n_cols]` with every cell written in, on a fixed colour scale.

    The scale is fixed (not fitted to the data) so that figures of different models and
    runs can be compared by eye; a negative lower limit gives a diverging map centred on 0.
    Empty cells (NaN) stay blank.
    """
    n_rows, n_cols = values.shape
    low, high = limits
    cmap = plt.get_cmap("RdBu_r" if low < 0 else "viridis").with_extremes(bad="white")
    cell = 0.42 if max(n_rows, n_cols) <= 30 else 0.25
    figure, axes = plt.subplots(figsize=(max(6.0, 2.5 + cell * n_cols), max(3.5, 2.0 + cell * n_rows)))
    image = axes.imshow(np.ma.masked_invalid(values), cmap=cmap, vmin=low, vmax=high, aspect="auto", interpolation="nearest")
    font = 7 if cell > 0.3 else 5
    axes.set_xticks(range(n_cols), list(column_labels), rotation=90, fontsize=font + 1)
    axes.set_yticks(range(n_rows), list(row_labels), fontsize=font + 1)
    axes.set_xlabel(column_axis)
    axes.set_ylabel(row_axis)
    axes.set_title(title, fontsize=9)
    for i in range(n_rows):
        for j in range(n_cols):
            if np.isfinite(values[i, j]):
                # White text on dark cells: the ends of RdBu_r, the low end of viridis.
                position = (values[i, j] - low) / (high - low)
                dark = abs(position - 0.5) > 0.3 if low < 0 else position < 0.4
                text = f"{values[i, j]:.2f}".replace("0.", ".", 1)
                axes.text(j, i, text, ha="center", va="center", fontsize=font, color="white" if dark else "black")
    figure.colorbar(image, ax=axes, fraction=0.03, pad=0.01, label=colour_label)
    figure.tight_layout()
    figure.savefig(path, dpi=130)
    plt.close(figure)


def line_plot(
    x_labels: Sequence[str],
    series: Mapping[str, Sequence[float]],
    path,
    title: str,
    *,
    y_label: str,
    x_label: str = "model",
) -> None:
    """One line per series over categorical x positions (e.g. models ordered by size), y in [0, 1]."""
    figure, axes = plt.subplots(figsize=(2.5 + 1.2 * len(x_labels), 4.5))
    for name, values in series.items():
        axes.plot(range(len(x_labels)), values, marker="o", label=name)
    axes.set_xticks(range(len(x_labels)), list(x_labels), fontsize=8)
    axes.set_ylim(0, 1.02)
    axes.set_xlabel(x_label)
    axes.set_ylabel(y_label)
    axes.set_title(title, fontsize=9)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    figure.tight_layout()
    figure.savefig(path, dpi=130)
    plt.close(figure)


def bar_plot(labels: Sequence[str], series: dict[str, Sequence[float]], path, title: str, *, y_label: str) -> None:
    """Grouped bars: one group per label, one bar per series, each bar's value written on it; y up to 1 (and below 0 when a value is)."""
    figure, axes = plt.subplots(figsize=(2.5 + 1.1 * len(labels) * max(1, len(series)) / 2, 4.5))
    width = 0.8 / len(series)
    for k, (name, values) in enumerate(series.items()):
        positions = np.arange(len(labels)) + (k - (len(series) - 1) / 2) * width
        bars = axes.bar(positions, values, width, label=name)
        axes.bar_label(bars, fmt="%.2f", fontsize=7)
    axes.set_xticks(range(len(labels)), list(labels), fontsize=8, rotation=20, ha="right")
    lowest = min(min(values) for values in series.values())
    axes.set_ylim(min(0.0, lowest - 0.08), 1.08)
    axes.axhline(0, color="black", linewidth=0.6)
    axes.set_ylabel(y_label)
    axes.set_title(title, fontsize=9)
    axes.grid(alpha=0.3, axis="y")
    axes.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=130)
    plt.close(figure)


def layer_curves(curves: Mapping[str, tuple[ArrayLike, ArrayLike]], path, title: str, *, y_label: str,
                 x_label: str = "layer", dashed: Sequence[str] = (), mark: float | None = None, mark_label: str = "",
                 colours: dict[str, str] | None = None) -> None:
    """Curves over numeric layer positions, y in [0, 1]: `curves[name] = (x, y)`; names in `dashed` dashed; a vertical line at `mark`.

    `colours` pins a curve's colour (so two curves of one estimator can share it); others take the next in the cycle.
    """
    figure, axes = plt.subplots(figsize=(7.5, 4.2))
    for name, (x, y) in curves.items():
        pinned: dict[str, Any] = {"color": colours[name]} if colours and name in colours else {}
        axes.plot(x, y, marker="o", markersize=3, linestyle="--" if name in dashed else "-", label=name, **pinned)
    if mark is not None:
        axes.axvline(mark, color="grey", linewidth=0.8, linestyle=":", label=mark_label or None)
    axes.set_ylim(0, 1.02)
    axes.set_xlabel(x_label)
    axes.set_ylabel(y_label)
    axes.set_title(title, fontsize=9)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=130)
    plt.close(figure)
