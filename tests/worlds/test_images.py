import pytest
import torch

from contrastlab.worlds.images import ImageWorld, sample_image_pairs
from contrastlab.worlds.sphere import sample_uniform_sphere


def _z(n: int, d: int, seed: int = 0) -> torch.Tensor:
    return sample_uniform_sphere(n, d, generator=torch.Generator().manual_seed(seed))


def test_shapes_range_and_flat() -> None:
    w = ImageWorld(5, size=16)
    z = _z(10, 5)
    x = w(z)
    assert x.shape == (10, 3, 16, 16) and w.out_dim == 768
    assert x.min() >= 0 and x.max() <= 1
    assert torch.equal(w.flat(z), x.reshape(10, -1))


def test_each_attribute_moves_the_image_as_documented() -> None:
    w = ImageWorld(5, size=32, sharpness=30.0)

    def centroid_x(z: torch.Tensor) -> float:
        img = w(z)[0, 0] - 0.2  # red channel above background
        wts = img.clamp_min(0)
        return float((wts * w.grid_x).sum() / wts.sum())

    base = torch.tensor([[0.0, 0.0, 1.0, 0.0, 0.0]])
    right = torch.nn.functional.normalize(torch.tensor([[0.6, 0.0, 0.8, 0.0, 0.0]]), dim=1)
    assert centroid_x(right) - centroid_x(base) == pytest.approx(0.45 * 0.6, abs=0.03)
    # red channel at the centre = 0.5 + 0.45 z₃ (alpha ≈ 1 inside the sprite)
    assert float(w(base)[0, 0, 15:17, 15:17].mean()) == pytest.approx(0.95, abs=0.01)
    # the sprite grows with z₄
    big = torch.nn.functional.normalize(torch.tensor([[0.0, 0.0, 0.8, 0.6, 0.0]]), dim=1)
    small = torch.nn.functional.normalize(torch.tensor([[0.0, 0.0, 0.8, -0.6, 0.0]]), dim=1)
    area = lambda z: float(((w(z)[0, 0] - 0.2) > 0.2).sum())  # noqa: E731
    assert area(big) > 2 * area(small)


def test_smooth_and_injective_on_samples() -> None:
    w = ImageWorld(5, size=16)
    z = _z(200, 5, seed=1).double()
    x = w.flat(z)
    d_img = torch.cdist(x, x)
    d_lat = torch.cdist(z, z)
    off = ~torch.eye(200, dtype=torch.bool)
    assert d_img[off].min() > 1e-3  # distinct latents, distinct images
    eps = 1e-4 * torch.randn(200, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    assert (w.flat(z + eps) - x).norm(dim=1).max() < 0.05  # small latent moves, small image moves
    # image distance grows with latent distance (it saturates once two sprites stop overlapping)
    assert torch.corrcoef(torch.stack([d_img[off], d_lat[off]]))[0, 1] > 0.3


def test_pairs_respect_restriction() -> None:
    w = ImageWorld(4, size=8)
    z, zp, x, xp = sample_image_pairs(w, 64, 10.0, 2, generator=torch.Generator().manual_seed(3))
    assert torch.equal(z[:, :2], zp[:, :2])
    assert torch.allclose(w(zp), xp)
    at, atp = w.attributes(z), w.attributes(zp)
    assert torch.equal(at["x"], atp["x"]) and torch.equal(at["y"], atp["y"])
    assert (at["red"] - atp["red"]).abs().max() > 1e-3


def test_gradient_flows_to_latent() -> None:
    w = ImageWorld(3, size=8)
    z = _z(4, 3).requires_grad_(True)
    w(z).sum().backward()
    assert z.grad is not None and torch.isfinite(z.grad).all() and z.grad.abs().sum() > 0


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="^latent_dim"):
        ImageWorld(8)
    with pytest.raises(ValueError, match="^size"):
        ImageWorld(3, size=2)
    with pytest.raises(ValueError, match="^sharpness"):
        ImageWorld(3, sharpness=0.0)
    with pytest.raises(ValueError, match="^z"):
        ImageWorld(3)(torch.zeros(2, 4))
