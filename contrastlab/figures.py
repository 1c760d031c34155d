"""Figures for reports and experiments: made without pyplot, saved atomically as PNG.

A figure is a :class:`matplotlib.figure.Figure` built directly, not through ``pyplot``: it needs no
backend (``savefig`` renders PNG with Agg by itself), touches no global state — neither the user's
backend (``matplotlib.use``) nor pyplot's list of open figures, so nothing has to be closed — and is
safe to draw from several threads. It is written with :func:`contrastlab.io.atomic_path`, so a PNG is
either absent or complete.
"""

from __future__ import annotations

import os
from typing import Any

from contrastlab.io import atomic_path

__all__ = ["new_figure", "save_png", "subplots"]


def new_figure(figsize: tuple[float, float]) -> Any:
    """A blank :class:`matplotlib.figure.Figure` of ``figsize`` inches (add axes with ``add_subplot``)."""
    from matplotlib.figure import Figure

    return Figure(figsize=figsize)


def subplots(nrows: int = 1, ncols: int = 1, *, figsize: tuple[float, float], **kwargs: Any) -> tuple[Any, Any]:
    """``(figure, axes)`` as ``pyplot.subplots`` returns them, without pyplot.

    Args:
        nrows: rows of axes.
        ncols: columns of axes.
        figsize: width and height in inches.
        **kwargs: passed to :meth:`matplotlib.figure.Figure.subplots` (``squeeze``, ``sharey``, ...).
    """
    fig = new_figure(figsize)
    return fig, fig.subplots(nrows, ncols, **kwargs)


def save_png(fig: Any, path: str | os.PathLike[str], *, dpi: int = 100) -> None:
    """Write ``fig`` to ``path`` as a PNG, atomically (the old file or the complete new one)."""
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=dpi, format="png")
