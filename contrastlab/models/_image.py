"""Argument checks shared by the image encoders."""

from __future__ import annotations

from torch import Tensor


def check_positive_int(name: str, value: object) -> int:
    """Return ``value`` if it is an int ≥ 1, else raise ``ValueError`` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


def check_image_batch(x: object, channels: int, size: int) -> Tensor:
    """Check that ``x`` is a float ``(B, channels, size, size)`` batch and return it."""
    if not isinstance(x, Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(
            f"x must be floating point (convert uint8 images with to_float_images), got {x.dtype}"
        )
    if x.ndim != 4 or tuple(x.shape[1:]) != (channels, size, size):
        raise ValueError(f"x must have shape (B, {channels}, {size}, {size}), got {tuple(x.shape)}")
    return x
