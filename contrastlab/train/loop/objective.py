"""A training loss that sees the model only through embeddings: :class:`EmbeddingObjective`.

:func:`~contrastlab.train.fit` accepts either a plain ``loss_fn(model, batch)`` or an
``EmbeddingObjective(inputs, loss)``: ``inputs(batch)`` names the rows the model embeds (shape
``(R, ...)``, e.g. anchors and positives concatenated) and ``loss(embeddings, batch)`` is the loss of
their ``(R, D)`` embeddings. Splitting the two is what lets the trainer embed the rows in mini-batches
and cache the gradient (:mod:`contrastlab.train.loop.grad_cache`); without caching, the objective is called
like any ``loss_fn`` and computes ``loss(embed(model, inputs(batch)), batch)`` through the same
:func:`embed`, so the cached and the plain paths cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import Tensor, nn

__all__ = ["EmbeddingObjective", "embed", "split_loss_output"]


def embed(model: nn.Module, rows: Tensor) -> Tensor:
    """The model applied to ``rows``, checked to give one embedding per row.

    Shape:
        rows: ``(R, ...)``. Returns ``(R, D)``.

    Raises:
        ValueError: the model's output is not ``(R, D)``.
    """
    out = model(rows)
    if not isinstance(out, Tensor) or out.ndim != 2 or out.shape[0] != rows.shape[0]:
        shape = tuple(out.shape) if isinstance(out, Tensor) else type(out).__name__
        raise ValueError(f"model must map the objective's (R, ...) inputs to (R, D) embeddings, got {shape}")
    return out


def split_loss_output(out: Any) -> tuple[Tensor, dict[str, float]]:
    """``loss`` or ``(loss, logs)`` → ``(fp32 scalar loss, logs)``.

    Raises:
        ValueError: the loss is not a scalar tensor.
    """
    loss, logs = out if isinstance(out, tuple) else (out, {})
    if not isinstance(loss, Tensor) or loss.ndim != 0:
        raise ValueError(
            f"loss_fn must return a scalar tensor (optionally with a logs dict), got {type(loss).__name__}"
        )
    return loss.float(), logs


@dataclass(frozen=True)
class EmbeddingObjective:
    """A loss that depends on the model only through the embeddings of some rows of the batch.

    Attributes:
        inputs: ``batch -> rows``: the encoder's inputs, one row per embedding, shape ``(R, ...)``.
        loss: ``(embeddings, batch) -> loss`` or ``(loss, {name: float})``, with ``embeddings`` of shape
            ``(R, D)`` in the order of ``inputs``. It must not call the trained model (anything it needs
            from the model has to come through ``embeddings``); it may read tensors of the batch, call
            modules without trainable parameters of the model (a momentum encoder, a queue) and gather
            across ranks (``gather=True`` losses).

    Examples:
        >>> import torch
        >>> from contrastlab.losses import info_nce
        >>> objective = EmbeddingObjective(
        ...     inputs=lambda b: torch.cat([b[0], b[1]]),
        ...     loss=lambda e, b: info_nce(*e.split(b[0].shape[0]), gather=True),
        ... )
        >>> objective(torch.nn.Linear(4, 3), (torch.randn(5, 4), torch.randn(5, 4))).ndim
        0
    """

    inputs: Callable[[Any], Tensor]
    loss: Callable[[Tensor, Any], Any]

    def __post_init__(self) -> None:
        for name in ("inputs", "loss"):
            if not callable(getattr(self, name)):
                raise TypeError(f"{name} must be callable, got {type(getattr(self, name)).__name__}")

    def rows(self, batch: Any) -> Tensor:
        """``inputs(batch)``, checked to be a tensor with at least one row.

        Raises:
            TypeError, ValueError: the inputs are not a non-empty tensor.
        """
        x = self.inputs(batch)
        if not isinstance(x, Tensor) or x.ndim == 0 or x.shape[0] == 0:
            shape = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise TypeError(f"inputs must return a tensor of shape (R, ...) with R >= 1, got {shape}")
        return x

    def __call__(self, model: nn.Module, batch: Any) -> Any:
        """The loss with every row embedded in one forward pass (the uncached path)."""
        return self.loss(embed(model, self.rows(batch)), batch)
