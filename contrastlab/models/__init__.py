"""Encoders: MLP (synthetic worlds), and image encoders (CNN, CIFAR ResNet-18, tiny ViT)."""

from contrastlab.models.cnn import SmallCNN
from contrastlab.models.heads import ContrastiveModel, ProjectionHead
from contrastlab.models.image_mlp import ImageMLP
from contrastlab.models.mlp import MLP
from contrastlab.models.registry import DEFAULT_WIDTHS, ENCODERS, build_encoder, count_parameters
from contrastlab.models.resnet import ResNet18
from contrastlab.models.vit import TinyViT

__all__ = [
    "MLP",
    "SmallCNN",
    "ResNet18",
    "TinyViT",
    "ImageMLP",
    "ProjectionHead",
    "ContrastiveModel",
    "ENCODERS",
    "DEFAULT_WIDTHS",
    "build_encoder",
    "count_parameters",
]
