"""Encoders: MLP (synthetic worlds), and image encoders (CNN, CIFAR ResNet-18, tiny ViT)."""

from contrastlab.models.mlp import MLP

__all__ = ["MLP"]
