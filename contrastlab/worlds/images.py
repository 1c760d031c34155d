"""A procedural image world with known latents: soft elliptical sprites rendered from z ∈ S^{d−1}.

Each latent coordinate drives one visual attribute through a fixed affine map (the coordinates of a
point on S^{d−1} lie in [−1, 1]):

====  ===========================  =====================================
z_k   attribute                    value
====  ===========================  =====================================
z₁    horizontal position          c_x = 0.45 z₁ (image spans [−1, 1])
z₂    vertical position            c_y = 0.45 z₂
z₃    red channel                  0.5 + 0.45 z₃
z₄    size (major semi-axis)       a = 0.38 + 0.14 z₄ (minor: a/2)
z₅    orientation                  θ = 0.7 z₅ rad (ellipse: π-periodic)
z₆    green channel                0.5 + 0.45 z₆
z₇    blue channel                 0.5 + 0.45 z₇
====  ===========================  =====================================

Unused attributes take their central value (z = 0). The sprite is an ellipse with a logistic edge
(``sharpness`` sets its width), composited over a grey background, so the image is a smooth,
injective function of z for d <= 7 (every coordinate moves a distinct attribute monotonically). Ground
truth is exact, so positives drawn as vMF perturbations of the latent (full or restricted to K(z), see
:mod:`contrastlab.worlds.restricted`) control the diversity condition exactly.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from contrastlab.worlds.restricted import sample_pairs

__all__ = ["ATTRIBUTES", "ImageWorld", "sample_image_pairs"]

ATTRIBUTES = ("x", "y", "red", "size", "angle", "green", "blue")
_BACKGROUND = 0.2


class ImageWorld(nn.Module):
    """Render latents on S^{d−1} as ``(3, size, size)`` sprite images (a frozen generator g).

    Args:
        latent_dim: d, 2 <= d <= 7.
        size: image side in pixels (>= 4).
        sharpness: logistic edge steepness (larger = crisper; the image stays smooth in z).

    Attributes:
        in_dim: d.
        out_dim: 3 · size² (the flattened image).

    Shape:
        ``forward``: ``(N, d) -> (N, 3, size, size)``; ``flat``: ``(N, d) -> (N, 3 · size²)``.

    Examples:
        >>> world = ImageWorld(5, size=16)
        >>> world(torch.nn.functional.normalize(torch.randn(2, 5), dim=1)).shape
        torch.Size([2, 3, 16, 16])
    """

    grid_x: Tensor
    grid_y: Tensor

    def __init__(self, latent_dim: int, *, size: int = 16, sharpness: float = 12.0) -> None:
        super().__init__()
        for name, v, lo in (("latent_dim", latent_dim, 2), ("size", size, 4)):
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise ValueError(f"{name} must be an int >= {lo}, got {v!r}")
        if latent_dim > len(ATTRIBUTES):
            raise ValueError(f"latent_dim must be <= {len(ATTRIBUTES)} (one attribute each), got {latent_dim}")
        if not (isinstance(sharpness, (int, float)) and math.isfinite(sharpness) and sharpness > 0):
            raise ValueError(f"sharpness must be a finite float > 0, got {sharpness!r}")
        self.in_dim = latent_dim
        self.size = size
        self.out_dim = 3 * size * size
        self.sharpness = float(sharpness)
        axis = (torch.arange(size, dtype=torch.float32) + 0.5) / size * 2 - 1  # pixel centres in [−1, 1]
        self.register_buffer("grid_y", axis[:, None].expand(size, size).clone())
        self.register_buffer("grid_x", axis[None, :].expand(size, size).clone())

    def attributes(self, z: Tensor) -> dict[str, Tensor]:
        """The sprite's attributes, each of shape ``(N,)`` (see the module table)."""
        if not isinstance(z, Tensor) or z.ndim != 2 or z.shape[1] != self.in_dim:
            raise ValueError(f"z must be a tensor of shape (N, {self.in_dim}), got {getattr(z, 'shape', z)!r}")
        full = torch.zeros(z.shape[0], len(ATTRIBUTES), dtype=z.dtype, device=z.device)
        full[:, : self.in_dim] = z
        c = dict(zip(ATTRIBUTES, full.unbind(1), strict=True))
        return {
            "x": 0.45 * c["x"],
            "y": 0.45 * c["y"],
            "red": 0.5 + 0.45 * c["red"],
            "size": 0.38 + 0.14 * c["size"],
            "angle": 0.7 * c["angle"],
            "green": 0.5 + 0.45 * c["green"],
            "blue": 0.5 + 0.45 * c["blue"],
        }

    def forward(self, z: Tensor) -> Tensor:
        """Render ``z`` of shape ``(N, d)`` to images ``(N, 3, size, size)`` in [0, 1]."""
        at = self.attributes(z)
        dt = z.dtype if z.is_floating_point() else torch.float32
        gx, gy = self.grid_x.to(dt), self.grid_y.to(dt)
        dx = gx[None] - at["x"][:, None, None]  # (N, S, S)
        dy = gy[None] - at["y"][:, None, None]
        cos, sin = torch.cos(at["angle"])[:, None, None], torch.sin(at["angle"])[:, None, None]
        # Coordinates in the sprite's frame (rotate the offset by −θ).
        u = cos * dx + sin * dy
        v = -sin * dx + cos * dy
        a = at["size"][:, None, None]
        q = (u / a) ** 2 + (v / (0.5 * a)) ** 2  # < 1 inside the ellipse
        alpha = torch.sigmoid(self.sharpness * (1.0 - q))
        colour = torch.stack([at["red"], at["green"], at["blue"]], dim=1)[:, :, None, None]  # (N, 3, 1, 1)
        return _BACKGROUND + alpha[:, None] * (colour - _BACKGROUND)

    def flat(self, z: Tensor) -> Tensor:
        """Rendered images flattened to ``(N, 3 · size²)`` (for MLP encoders)."""
        return self.forward(z).reshape(z.shape[0], -1)


def sample_image_pairs(
    world: ImageWorld,
    n: int,
    kappa: float,
    d_fixed: int,
    *,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Latent pairs (z, z̃) with z̃ ~ vMF on S^{d−1} (``d_fixed = 0``) or on K(z), and their images.

    Args:
        world: the renderer.
        n: number of pairs.
        kappa: concentration κ of the latent perturbation.
        d_fixed: number of leading latent coordinates (attributes) positives never change.
        generator: source of randomness.

    Returns:
        ``(z, z_pos, x, x_pos)``: latents ``(n, d)`` and images ``(n, 3, size, size)``, float32.
    """
    z, zp = sample_pairs(n, world.in_dim, kappa, d_fixed, generator=generator, dtype=torch.float32)
    with torch.no_grad():
        return z, zp, world(z), world(zp)
