"""Figures: heatmaps of W and of correlation matrices."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def weight_heatmap(coef: np.ndarray, source_labels: Sequence[str], target_labels: Sequence[str], path, title: str) -> None:
    """W `[n_source, n_target]` as a heatmap with a diverging scale centred on zero."""
    n_source, n_target = coef.shape
    width = min(4 + 0.12 * n_target, 40)
    height = min(3 + 0.12 * n_source, 60)
    figure, axes = plt.subplots(figsize=(width, height))
    limit = float(np.nanpercentile(np.abs(coef), 99.5)) or 1.0
    image = axes.imshow(coef, cmap="RdBu_r", vmin=-limit, vmax=limit, aspect="auto", interpolation="nearest")
    label_size = max(3.0, min(8.0, 600 / max(n_source, n_target)))
    axes.set_xticks(range(n_target), [t.strip() for t in target_labels], rotation=90, fontsize=label_size)
    axes.set_yticks(range(n_source), [s.strip() for s in source_labels], fontsize=label_size)
    axes.set_xlabel("target token")
    axes.set_ylabel("source token")
    axes.set_title(title)
    figure.colorbar(image, ax=axes, fraction=0.02, pad=0.01, label="weight (clipped at the 99.5th percentile of |W|)")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
