"""An MLP on flattened images: the architecture without spatial inductive bias of paper 4's comparison."""

from __future__ import annotations

from torch import Tensor

from contrastlab.models._image import ImageEncoder, check_positive_int
from contrastlab.models.mlp import MLP

__all__ = ["ImageMLP"]


class ImageMLP(ImageEncoder):
    """Flatten ``(B, C, H, W)`` and apply an MLP of ``depth`` hidden layers of ``width`` units.

    Hidden layers are Linear → BatchNorm → ReLU (:class:`~contrastlab.models.MLP`).
    At 32×32×3 inputs, ``width = 2048, depth = 2`` and ``embed_dim = 512`` give 11.5 M parameters,
    comparable to the CIFAR ResNet-18 (paper 4, §5).

    Args:
        in_channels: image channels C.
        image_size: image side H = W.
        embed_dim: output dimension.
        width: hidden units per layer.
        depth: number of hidden layers.

    Shape:
        input ``(B, C, H, W)`` float, output ``(B, embed_dim)`` (pre-normalisation).

    Examples:
        >>> import torch
        >>> ImageMLP(1, 8, 32, width=64)(torch.rand(3, 1, 8, 8)).shape
        torch.Size([3, 32])
    """

    def __init__(
        self,
        in_channels: int = 3,
        image_size: int = 32,
        embed_dim: int = 512,
        width: int = 2048,
        *,
        depth: int = 2,
    ) -> None:
        super().__init__(in_channels, image_size, embed_dim, width)
        self.depth = check_positive_int("depth", depth)
        in_dim = in_channels * image_size * image_size
        self.mlp = MLP(in_dim, [width] * depth, embed_dim, batch_norm=True, activation="relu")

    def forward(self, x: Tensor) -> Tensor:
        """Encode ``(B, C, H, W)`` images to ``(B, embed_dim)``."""
        self.check_input(x)
        return self.mlp(x.flatten(1))
