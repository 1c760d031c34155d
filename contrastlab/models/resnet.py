"""ResNet-18, CIFAR variant (He et al. 2016; SimCLR's CIFAR setting, Chen et al. 2020, appendix B.9).

A 3×3 stride-1 stem and no max-pool, so 32×32 inputs keep a 4×4 map before pooling.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from contrastlab.models._image import ImageEncoder

__all__ = ["BasicBlock", "ResNet18"]


class BasicBlock(nn.Module):
    """Two 3×3 conv–BN layers with an identity (or 1×1 conv–BN projection) shortcut, then ReLU.

    Shape:
        ``(B, c_in, H, W)`` → ``(B, c_out, H/stride, W/stride)``.
    """

    def __init__(self, c_in: int, c_out: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x: Tensor) -> Tensor:
        """Apply the block."""
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + self.shortcut(x))


class ResNet18(ImageEncoder):
    """CIFAR ResNet-18: 3×3 stem, four stages of two :class:`BasicBlock`, global average pooling.

    Stage widths are ``(w, 2w, 4w, 8w)`` and strides ``(1, 2, 2, 2)``.
    At ``width = 64`` the backbone has 11.17 M parameters and its feature is 512-D; ``embed_dim = 8·width``
    returns that feature as is, another ``embed_dim`` adds a linear map. ``width = 8`` (≈ 0.18 M
    parameters) makes CPU runs quick.

    Args:
        in_channels: image channels C.
        image_size: image side H = W (any side ≥ 1; 32 is the design point).
        embed_dim: output dimension.
        width: channels of the first stage ``w``.

    Shape:
        input ``(B, C, H, W)`` float, output ``(B, embed_dim)`` (pre-normalisation).

    Examples:
        >>> ResNet18(3, 32, 64, width=8)(torch.rand(2, 3, 32, 32)).shape
        torch.Size([2, 64])
    """

    def __init__(self, in_channels: int = 3, image_size: int = 32, embed_dim: int = 512, width: int = 64) -> None:
        super().__init__(in_channels, image_size, embed_dim, width)
        self.stem = nn.Sequential(
            nn.Conv2d(in_channels, width, 3, stride=1, padding=1, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
        )
        blocks: list[nn.Module] = []
        c_in = width
        for mult, stride in ((1, 1), (2, 2), (4, 2), (8, 2)):
            c_out = mult * width
            blocks += [BasicBlock(c_in, c_out, stride), BasicBlock(c_out, c_out, 1)]
            c_in = c_out
        self.layers = nn.Sequential(*blocks)
        self.pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.fc: nn.Module = nn.Identity() if embed_dim == 8 * width else nn.Linear(8 * width, embed_dim)

    def forward(self, x: Tensor) -> Tensor:
        """Encode ``(B, C, H, W)`` images to ``(B, embed_dim)``."""
        self.check_input(x)
        return self.fc(self.pool(self.layers(self.stem(x))))
