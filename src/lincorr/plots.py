"""Figures: heatmaps of W and of correlation matrices."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def weight_heatmap(
    coef: np.ndarray,
    source_labels: Sequence[str],
    target_labels: Sequence[str],
    path,
    title: str,
    reference: dict[int, tuple[int, ...]] | None = None,
) -> None:
    """W `[n_source, n_target]` with each row centred, rows ordered by their right target.

    A row's mean only shifts every target alike (a source that raises all countries), and
    the top-k readings ignore it; centring shows which targets each source favours. With
    `reference` (source row -> right target columns) rows are ordered by their right
    target, so a diagonal appears only where W agrees with the world; rows without a
    reference go last. Without one, rows are ordered by their own top target, which makes
    a staircase by construction: the axis label says which ordering was used.
    """
    centred = coef - coef.mean(axis=1, keepdims=True)
    if reference:
        keys = np.array([reference[i][0] if i in reference else centred.shape[1] for i in range(centred.shape[0])])
        ordering = "ordered by its reference target"
    else:
        keys = centred.argmax(axis=1)
        ordering = "ordered by its own top target"
    order = np.lexsort((-centred.max(axis=1), keys))
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
