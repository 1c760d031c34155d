"""The ``matryoshka`` block of a job config: train the loss on nested prefixes of the embedding.

``matryoshka: {dims: [32, 64, 128, 384]}`` in a :class:`~contrastlab.train.job.runner.JobConfig` makes the job's loss
(``loss.name`` with its options, whatever it is) the weighted sum of that loss over the first d_k
coordinates of every embedding (:func:`contrastlab.losses.matryoshka`; Kusupati et al. 2022, arXiv
2205.13147), for training and for the held-out loss alike. An empty ``dims`` (the default) leaves the loss
as it is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import Tensor

from contrastlab.config import ConfigError, check_fields
from contrastlab.losses.matryoshka import check_dims, check_weights, matryoshka

__all__ = ["MatryoshkaConfig"]


@dataclass(frozen=True)
class MatryoshkaConfig:
    """Matryoshka representation learning: the loss summed over nested prefixes of the embedding."""

    dims: tuple[int, ...] = ()
    """strictly increasing prefix widths, the last at most the embedding width (encoder.proj_dim if set, else
    encoder.out_dim), e.g. [32, 64, 128, 384]; empty: the loss on the full embedding only"""
    weights: tuple[float, ...] = ()
    """one weight >= 0 per width in dims (empty: 1 each, as sentence-transformers' MatryoshkaLoss)"""

    def __post_init__(self) -> None:
        check_fields(self)
        if not self.dims:
            if self.weights:
                raise ConfigError(f"weights needs dims (one weight per width), got weights={list(self.weights)}")
            return
        try:
            check_dims(self.dims)
            check_weights(self.weights or None, len(self.dims))
        except (TypeError, ValueError) as e:
            raise ConfigError(str(e)) from None

    @property
    def enabled(self) -> bool:
        """Whether a width is given (the loss is then the sum over the prefixes)."""
        return bool(self.dims)

    def check_width(self, width: int, what: str) -> None:
        """Refuse a width larger than the embedding width ``width`` (``what`` names where it comes from).

        Raises:
            ConfigError: naming ``matryoshka.dims``.
        """
        if self.dims and self.dims[-1] > width:
            raise ConfigError(
                f"matryoshka.dims: width {self.dims[-1]} is larger than the embedding width D = {width} ({what})"
            )

    def apply(self, loss: Callable[..., Any], *embeddings: Any) -> Tensor:
        """``loss(*embeddings)``, or its weighted sum over the prefixes when :attr:`enabled`."""
        if not self.enabled:
            out: Tensor = loss(*embeddings)
            return out
        return matryoshka(loss, *embeddings, dims=self.dims, weights=self.weights or None)
