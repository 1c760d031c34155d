"""The image-encoder registry: a plain dict from name to constructor, all with one signature."""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from contrastlab.models.cnn import SmallCNN
from contrastlab.models.image_mlp import ImageMLP
from contrastlab.models.resnet import ResNet18
from contrastlab.models.vit import TinyViT

__all__ = ["ENCODERS", "DEFAULT_WIDTHS", "build_encoder", "count_parameters"]

ENCODERS: dict[str, Callable[..., nn.Module]] = {
    "cnn": SmallCNN,
    "resnet18": ResNet18,
    "vit": TinyViT,
    "mlp": ImageMLP,
}
"""Name → constructor ``(in_channels, image_size, embed_dim, width)``; each maps ``(B, C, H, W)`` to
``(B, embed_dim)``. At the default widths and 32×32×3 inputs with ``embed_dim = 512``, ``resnet18``,
``vit`` and ``mlp`` have comparable parameter counts (11.2 M, 10.9 M, 11.5 M), as in paper 4."""

DEFAULT_WIDTHS = {"cnn": 32, "resnet18": 64, "vit": 384, "mlp": 2048}
"""The ``width`` each constructor uses when none is given."""


def build_encoder(
    name: str, in_channels: int, image_size: int, embed_dim: int = 512, width: int | None = None
) -> nn.Module:
    """Construct the encoder ``name`` of :data:`ENCODERS`.

    Args:
        name: ``"cnn"``, ``"resnet18"``, ``"vit"`` or ``"mlp"``.
        in_channels: image channels C.
        image_size: image side H = W.
        embed_dim: output dimension.
        width: the architecture's width knob (see :data:`DEFAULT_WIDTHS`); ``None`` for the default.

    Raises:
        ValueError: an unknown ``name`` or a bad size.

    Examples:
        >>> build_encoder("resnet18", 3, 32, 128, width=8).embed_dim
        128
    """
    if name not in ENCODERS:
        raise ValueError(f"name must be one of {tuple(ENCODERS)}, got {name!r}")
    return ENCODERS[name](in_channels, image_size, embed_dim, DEFAULT_WIDTHS[name] if width is None else width)


def count_parameters(module: nn.Module, *, trainable_only: bool = True) -> int:
    """The number of (trainable) scalar parameters of ``module``."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad or not trainable_only)
