"""Fig. 3's figures: the scores per layer and component, the same by token role, and the linearisation check."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from lincorr.studies.extractive.ocr import saved_figure
from lincorr.studies.extractive.positions import ROLES

__all__ = ["plot_score_grids", "plot_role_grids", "plot_linearization"]


def _heatmap(figure, axis, grid: np.ndarray, limit: float, component_names: Sequence[str], title: str):
    image = axis.imshow(grid, cmap="RdBu_r", vmin=-limit or -1, vmax=limit or 1, aspect="auto", interpolation="nearest")
    axis.set_xticks(range(len(component_names)), component_names, rotation=90, fontsize=6)
    axis.set_ylabel("layer", fontsize=7)
    axis.set_title(title, fontsize=8)
    figure.colorbar(image, ax=axis, fraction=0.05)


def _limit(grids: np.ndarray) -> float:
    """The symmetric colour limit of a score: its largest magnitude anywhere."""
    return float(np.nanmax(np.abs(grids))) if np.isfinite(grids).any() else 1.0


def plot_score_grids(path, grids: dict, component_names: Sequence[str], title: str) -> None:
    """One heatmap per score `[n_layers, n_columns]`: layers down, MLP then heads across, on a symmetric scale per score."""
    n_layers = next(iter(grids.values())).shape[0]
    with saved_figure(path, 1, len(grids), figsize=(3 + 1.05 * len(component_names), 1.5 + 0.22 * n_layers)) as (figure, axes):
        for axis, (key, grid) in zip(axes, grids.items()):
            _heatmap(figure, axis, grid, _limit(grid), component_names, key)
        figure.suptitle(title, fontsize=9)


def plot_role_grids(path, role_grids: dict, component_names: Sequence[str], title: str) -> None:
    """Fig. 3's grid for one update: a row per score, a column per token role, each cell `[n_layers, n_columns]` (one scale per score)."""
    n_layers = next(iter(role_grids.values())).shape[1]
    size = (2 + 3 * (0.5 + 0.3 * len(component_names)), 1.2 + len(role_grids) * (0.8 + 0.16 * n_layers))
    with saved_figure(path, len(role_grids), len(ROLES), figsize=size, squeeze=False) as (figure, axes):
        for row, (key, grids) in enumerate(role_grids.items()):
            for column, role in enumerate(ROLES):
                where = "last token" if role == "last" else f"{role} tokens"
                _heatmap(figure, axes[row, column], grids[column], _limit(grids), component_names, f"{key}, {where}")
        figure.suptitle(title, fontsize=9)


def plot_linearization(path, linear: dict, exact: dict, r: dict) -> None:
    """Exact (eqs. 1-3) against linearised (eqs. 4-6) scores of the checked components, one panel per score."""
    with saved_figure(path, 1, len(linear), figsize=(10, 3.2)) as (_, axes):
        for axis, key in zip(axes, linear):
            axis.scatter(linear[key], exact[key], s=12)
            axis.axline((0, 0), slope=1, color="grey", lw=0.8, ls="--")
            axis.set_xlabel("linearised")
            axis.set_ylabel("exact (intervention)")
            axis.set_title(f"{key}: r = {r[key]:.3f}", fontsize=9)
