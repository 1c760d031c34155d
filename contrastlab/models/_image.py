"""Argument checks shared by the image encoders."""

from __future__ import annotations

from torch import Tensor, nn


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
        raise TypeError(f"x must be floating point (convert uint8 images with to_float_images), got {x.dtype}")
    if x.ndim != 4 or tuple(x.shape[1:]) != (channels, size, size):
        raise ValueError(f"x must have shape (B, {channels}, {size}, {size}), got {tuple(x.shape)}")
    return x


class ImageEncoder(nn.Module):
    """Base of the image encoders: validated sizes, and the input check every ``forward`` runs.

    Attributes:
        in_channels: image channels C.
        image_size: image side H = W.
        embed_dim: output dimension.
        width: the architecture's width knob.
    """

    def __init__(self, in_channels: int, image_size: int, embed_dim: int, width: int) -> None:
        super().__init__()
        self.in_channels = check_positive_int("in_channels", in_channels)
        self.image_size = check_positive_int("image_size", image_size)
        self.embed_dim = check_positive_int("embed_dim", embed_dim)
        self.width = check_positive_int("width", width)

    def check_input(self, x: object) -> Tensor:
        """Raise unless ``x`` is a float ``(B, in_channels, image_size, image_size)`` batch."""
        return check_image_batch(x, self.in_channels, self.image_size)
