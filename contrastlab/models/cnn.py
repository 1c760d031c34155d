"""A small convolutional encoder: trains on 8×8 digits in seconds on a CPU, and works at 32×32 and beyond."""

from __future__ import annotations

from torch import Tensor, nn

from contrastlab.models._image import ImageEncoder

__all__ = ["SmallCNN"]


def _conv_bn_relu(c_in: int, c_out: int) -> list[nn.Module]:
    return [nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU(inplace=True)]


class SmallCNN(ImageEncoder):
    """Three conv stages of widths ``(w, 2w, 4w)``, global average pooling, a linear map to ``embed_dim``.

    A 2×2 max-pool follows stages 1 and 2 while the side is ≥ 8.
    Stage 1 and 2 have two 3×3 conv–BN–ReLU layers, stage 3 one. At ``width = 32`` and 8×8 inputs the
    encoder has about 0.16 M parameters.

    Args:
        in_channels: image channels C.
        image_size: image side H = W.
        embed_dim: output dimension.
        width: channels of the first stage ``w``.

    Shape:
        input ``(B, C, H, W)`` float, output ``(B, embed_dim)`` (pre-normalisation).

    Examples:
        >>> import torch
        >>> SmallCNN(1, 8, 64)(torch.rand(5, 1, 8, 8)).shape
        torch.Size([5, 64])
    """

    def __init__(self, in_channels: int = 1, image_size: int = 8, embed_dim: int = 128, width: int = 32) -> None:
        super().__init__(in_channels, image_size, embed_dim, width)
        layers: list[nn.Module] = []
        side = image_size
        widths = [(in_channels, width, 2), (width, 2 * width, 2), (2 * width, 4 * width, 1)]
        for stage, (c_in, c_out, n_conv) in enumerate(widths):
            layers += _conv_bn_relu(c_in, c_out)
            layers += [m for _ in range(n_conv - 1) for m in _conv_bn_relu(c_out, c_out)]
            if stage < 2 and side >= 8:
                layers.append(nn.MaxPool2d(2))
                side //= 2
        self.features = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.fc = nn.Linear(4 * width, embed_dim)

    def forward(self, x: Tensor) -> Tensor:
        """Encode ``(B, C, H, W)`` images to ``(B, embed_dim)``."""
        self.check_input(x)
        return self.fc(self.features(x))
