"""The unit sphere S^{d-1}: uniform latents and von Mises–Fisher positives.

All samplers take an explicit ``torch.Generator`` so that a world is a pure function of its seed, and
compute in float64 internally (κ up to 1e4 and beyond without overflow or loss of the 1 − w tail).

References:
    A. T. A. Wood, "Simulation of the von Mises Fisher distribution", Commun. Stat. Simul. Comput.
    23(1), 1994 (the rejection sampler used by :func:`sample_vmf`).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["log_sphere_area", "sample_uniform_sphere", "sample_vmf"]


def _check_dim(d: int) -> int:
    if isinstance(d, bool) or not isinstance(d, int):
        raise TypeError(f"d must be an int, got {type(d).__name__}")
    if d < 2:
        raise ValueError(f"d must be >= 2 (the sphere S^(d-1) lives in R^d), got {d}")
    return d


def sample_uniform_sphere(
    n: int, d: int, *, generator: torch.Generator | None = None, dtype: torch.dtype = torch.float32
) -> Tensor:
    """Draw ``n`` points uniformly on the unit sphere S^{d-1} ⊂ R^d.

    Args:
        n: number of points (>= 0).
        d: ambient dimension (>= 2).
        generator: source of randomness (CPU generator); ``None`` uses torch's global RNG.
        dtype: dtype of the result.

    Returns:
        Tensor of shape ``(n, d)`` with unit rows.
    """
    _check_dim(d)
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be a non-negative int, got {n!r}")
    g = torch.randn(n, d, generator=generator, dtype=torch.float64)
    # A standard Gaussian is rotation invariant, so its direction is uniform. A zero draw has
    # probability 0; the clamp only guards the division.
    g = g / g.norm(dim=1, keepdim=True).clamp_min(1e-300)
    return g.to(dtype)


def _sample_vmf_w(kappa: Tensor, d: int, generator: torch.Generator | None) -> tuple[Tensor, Tensor]:
    """Wood's rejection sampler for the cosine w = ⟨x, μ⟩ of a vMF(μ, κ) draw on S^{d-1}.

    Returns ``(w, one_minus_w)``; the latter is computed directly so that it keeps full relative
    precision when κ is large and w is within 1e-8 of 1.
    """
    n = kappa.shape[0]
    dm1 = float(d - 1)
    # b = (-2κ + sqrt(4κ² + (d-1)²)) / (d-1), written without the cancellation at large κ.
    b = dm1 / (2.0 * kappa + torch.sqrt(4.0 * kappa**2 + dm1**2))
    x0 = (1.0 - b) / (1.0 + b)
    c = kappa * x0 + dm1 * torch.log1p(-(x0**2))

    w = torch.empty(n, dtype=torch.float64)
    omw = torch.empty(n, dtype=torch.float64)
    todo = torch.arange(n)
    while todo.numel() > 0:
        m = todo.numel()
        # Z ~ Beta((d-1)/2, (d-1)/2): (1 + t)/2 with t the first coordinate of a uniform point on S^{d-1}.
        t = sample_uniform_sphere(m, d, generator=generator, dtype=torch.float64)[:, 0]
        z = 0.5 * (1.0 + t)
        bb, xx, cc, kk = b[todo], x0[todo], c[todo], kappa[todo]
        denom = 1.0 - (1.0 - bb) * z
        wt = (1.0 - (1.0 + bb) * z) / denom
        omwt = (2.0 * bb * z) / denom  # 1 - w, exactly rearranged
        u = torch.rand(m, generator=generator, dtype=torch.float64)
        # log(1 - x0 w) = log((1 - x0) + x0 (1 - w)), stable when both are near 1.
        accept = kk * wt + dm1 * torch.log((1.0 - xx) + xx * omwt) - cc >= torch.log(u)
        idx = todo[accept]
        w[idx] = wt[accept]
        omw[idx] = omwt[accept]
        todo = todo[~accept]
    return w, omw


def sample_vmf(
    mu: Tensor,
    kappa: float | Tensor,
    *,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Draw one von Mises–Fisher sample around each row of ``mu``.

    The density on S^{d-1} is C_d(κ) exp(κ⟨μ, x⟩) with respect to the surface measure; κ = 0 is the
    uniform distribution and κ → ∞ concentrates on μ.

    Args:
        mu: mean directions, shape ``(N, D)``; rows are normalised before use.
        kappa: concentration κ >= 0, a float or a tensor of shape ``(N,)``.
        generator: source of randomness.

    Returns:
        Tensor of shape ``(N, D)`` with unit rows, in ``mu``'s dtype.

    Raises:
        ValueError: ``mu`` has a zero or non-finite row, or ``kappa`` is negative or non-finite.
    """
    if not isinstance(mu, Tensor) or mu.ndim != 2:
        raise ValueError(f"mu must be a tensor of shape (N, D), got {getattr(mu, 'shape', type(mu))}")
    n, d = mu.shape
    _check_dim(d)
    mu64 = mu.detach().to(torch.float64).cpu()
    norms = mu64.norm(dim=1, keepdim=True)
    if not bool(torch.isfinite(mu64).all()) or bool((norms == 0).any()):
        raise ValueError("mu must have finite, non-zero rows")
    mu64 = mu64 / norms
    k = torch.as_tensor(kappa, dtype=torch.float64).detach().cpu()
    if k.ndim == 0:
        k = k.expand(n)
    if k.shape != (n,):
        raise ValueError(f"kappa must be a float or a tensor of shape (N,) = ({n},), got {tuple(k.shape)}")
    if not bool(torch.isfinite(k).all()) or bool((k < 0).any()):
        raise ValueError("kappa must be finite and >= 0")
    if n == 0:
        return mu.new_empty(0, d)

    w, omw = _sample_vmf_w(k.contiguous(), d, generator)
    # A direction uniform on the great sphere orthogonal to μ: project a uniform draw, renormalise.
    v = sample_uniform_sphere(n, d, generator=generator, dtype=torch.float64)
    v = v - (v * mu64).sum(dim=1, keepdim=True) * mu64
    vn = v.norm(dim=1, keepdim=True)
    # The projection is degenerate only with probability 0; fall back to any orthogonal direction.
    bad = vn.squeeze(1) < 1e-12
    if bool(bad.any()):
        e = torch.zeros_like(v[bad])
        e[:, int(torch.argmin(mu64[bad].abs().sum(0)))] = 1.0
        e = e - (e * mu64[bad]).sum(dim=1, keepdim=True) * mu64[bad]
        v[bad] = e
        vn = v.norm(dim=1, keepdim=True)
    v = v / vn
    # sqrt(1 - w²) = sqrt((1 - w)(1 + w)), accurate when w → 1.
    s = torch.sqrt(omw * (2.0 - omw)).unsqueeze(1)
    x = w.unsqueeze(1) * mu64 + s * v
    x = x / x.norm(dim=1, keepdim=True)
    return x.to(device=mu.device, dtype=mu.dtype if mu.is_floating_point() else torch.float32)


def log_sphere_area(d: int) -> float:
    """Log |S^{d-1}| = log(2 π^{d/2} / Γ(d/2))."""
    _check_dim(d)
    return math.log(2.0) + 0.5 * d * math.log(math.pi) - math.lgamma(0.5 * d)
