"""Projection heads (SimCLR, Chen et al. 2020, §2.1: ``z = g(h) = W2 σ(W1 h)``) and the encoder + head pair.

The head returns the *pre-normalisation* projection: losses with ``normalize=True`` L2-normalise it, and
the norm tools read its norm. Linear probes and kNN use the encoder's output ``h`` (the representation
before the head), as SimCLR does.
"""

from __future__ import annotations

from functools import partial

from torch import Tensor, nn

from contrastlab.models._image import check_positive_int
from contrastlab.models.mlp import linear_stack

__all__ = ["ProjectionHead", "ContrastiveModel"]


class ProjectionHead(nn.Module):
    """An MLP head ``in_dim → hidden_dim → … → out_dim`` with ReLU between layers.

    ``num_layers = 2`` is SimCLR's head; ``num_layers = 1`` is a linear head. The last layer has no
    activation and no normalisation.

    Args:
        in_dim: input (representation) dimension.
        out_dim: projection dimension (SimCLR CIFAR: 128; the WEINCE scripts: 64).
        hidden_dim: hidden width; default ``in_dim``.
        num_layers: number of linear layers (≥ 1).
        batch_norm: BatchNorm1d after each hidden linear layer.
        bias: whether the linear layers have a bias (the Spijkervet SimCLR code the WEINCE runs build on
            uses none).

    Shape:
        input ``(N, in_dim)``, output ``(N, out_dim)`` (pre-normalisation).

    Examples:
        >>> import torch
        >>> ProjectionHead(512, 64)(torch.randn(4, 512)).shape
        torch.Size([4, 64])
    """

    def __init__(
        self,
        in_dim: int,
        out_dim: int = 128,
        hidden_dim: int | None = None,
        *,
        num_layers: int = 2,
        batch_norm: bool = False,
        bias: bool = True,
    ) -> None:
        super().__init__()
        self.in_dim = check_positive_int("in_dim", in_dim)
        self.out_dim = check_positive_int("out_dim", out_dim)
        self.hidden_dim = check_positive_int("hidden_dim", hidden_dim if hidden_dim is not None else in_dim)
        self.num_layers = check_positive_int("num_layers", num_layers)
        relu = partial(nn.ReLU, inplace=True)
        hidden = [self.hidden_dim] * (num_layers - 1)
        self.net = linear_stack(in_dim, hidden, out_dim, activation=relu, batch_norm=batch_norm, bias=bias)

    def forward(self, h: Tensor) -> Tensor:
        """Project ``(N, in_dim)`` representations to ``(N, out_dim)``."""
        if h.ndim != 2 or h.shape[1] != self.in_dim:
            raise ValueError(f"h must have shape (N, {self.in_dim}), got {tuple(h.shape)}")
        return self.net(h)


class ContrastiveModel(nn.Module):
    """An encoder followed by a projection head: ``forward(x) = head(encoder(x))``.

    Args:
        encoder: maps images to ``(N, D)`` representations (any of :data:`~contrastlab.models.ENCODERS`).
        head: maps ``(N, D)`` to the ``(N, P)`` projections the loss sees.

    Shape:
        ``forward``: ``(N, C, H, W)`` → ``(N, P)``; ``encode``: ``(N, C, H, W)`` → ``(N, D)``.
    """

    def __init__(self, encoder: nn.Module, head: nn.Module) -> None:
        super().__init__()
        self.encoder, self.head = encoder, head

    def encode(self, x: Tensor) -> Tensor:
        """The representation ``h = encoder(x)`` (what probes evaluate)."""
        return self.encoder(x)

    def forward(self, x: Tensor) -> Tensor:
        """The pre-normalisation projection ``z = head(encoder(x))``."""
        return self.head(self.encoder(x))
