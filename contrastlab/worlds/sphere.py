"""The unit sphere S^{d-1}: uniform latents and von Mises–Fisher positives.

All samplers take an explicit ``torch.Generator`` so that a world is a pure function of its seed, and
compute in float64 internally (κ up to 1e4 and beyond without overflow or loss of the 1 − w tail).

References:
    A. T. A. Wood, "Simulation of the von Mises Fisher distribution", Commun. Stat. Simul. Comput.
    23(1), 1994 (the rejection sampler used by :func:`sample_vmf`).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy import special
from torch import Tensor

__all__ = [
    "log_sphere_area",
    "log_vmf_normalizer",
    "log_vmf_density_ratio",
    "log_vmf_ratio_second_moment",
    "sample_uniform_sphere",
    "sample_vmf",
    "vmf_mean_resultant_length",
]


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


def _check_kappa(kappa: float | np.ndarray) -> np.ndarray:
    k = np.asarray(kappa, dtype=np.float64)
    if not np.all(np.isfinite(k)) or np.any(k < 0):
        raise ValueError(f"kappa must be finite and >= 0, got {kappa!r}")
    return k


def _log_bessel_iv(nu: float, kappa: np.ndarray) -> np.ndarray:
    """Log I_ν(κ) for κ > 0, ν >= 0, without overflow (κ up to 1e4 and beyond) or underflow.

    Uses the exponentially scaled ``ive`` (I_ν(κ) = ive(ν, κ) e^κ). Where ``ive`` underflows (κ tiny
    relative to ν) it falls back to the power series I_ν(κ) = Σ_m (κ/2)^{2m+ν} / (m! Γ(m+ν+1)) summed in
    log space; the series converges for every κ and is used only where it needs few terms.
    """
    out = np.empty_like(kappa)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        ive = special.ive(nu, kappa)
        ok = np.isfinite(ive) & (ive > 1e-280) & (kappa > 1e-3)
        out[ok] = np.log(ive[ok]) + kappa[ok]
    bad = ~ok
    if np.any(bad):
        kb = kappa[bad]
        m = np.arange(0, 400, dtype=np.float64)[:, None]  # (terms, points)
        half = np.log(kb / 2.0)
        terms = (2.0 * m + nu) * half[None, :] - special.gammaln(m + 1.0) - special.gammaln(m + nu + 1.0)
        out[bad] = special.logsumexp(terms, axis=0)
    return out


def log_vmf_normalizer(d: int, kappa: float | np.ndarray) -> float | np.ndarray:
    """Log C_d(κ), the log normaliser of the von Mises–Fisher density on S^{d-1}.

    C_d(κ) = κ^{d/2-1} / ((2π)^{d/2} I_{d/2-1}(κ)) so that C_d(κ) e^{κ⟨μ, x⟩} integrates to 1 against
    the surface measure (Whiteley 2026, §1.4 of our reference notes). At κ = 0 it is the uniform
    density 1/|S^{d-1}|; for κ -> 0 the power series of I_ν is used, for large κ the scaled Bessel
    function ``scipy.special.ive``, so κ from 0 to 1e4 (and beyond) is exact to float64 precision.

    Args:
        d: ambient dimension (>= 2).
        kappa: concentration κ >= 0, a float or an array.

    Returns:
        log C_d(κ), a float for a scalar ``kappa``, else an array of ``kappa``'s shape.

    Raises:
        ValueError: ``d`` < 2, or ``kappa`` negative or non-finite.
    """
    _check_dim(d)
    k = _check_kappa(kappa)
    flat = np.atleast_1d(k).ravel()
    nu = 0.5 * d - 1.0
    out = np.full_like(flat, -log_sphere_area(d))  # κ = 0: the uniform density
    pos = flat > 0
    if np.any(pos):
        kp = flat[pos]
        out[pos] = nu * np.log(kp) - 0.5 * d * math.log(2.0 * math.pi) - _log_bessel_iv(nu, kp)
    return float(out[0]) if k.ndim == 0 else out.reshape(k.shape)


def vmf_mean_resultant_length(d: int, kappa: float | np.ndarray) -> float | np.ndarray:
    """A_d(κ) = E⟨μ, X⟩ = I_{d/2}(κ) / I_{d/2-1}(κ) for X ~ vMF(μ, κ) on S^{d-1} (0 at κ = 0).

    For d = 3 it is coth κ − 1/κ.

    Args:
        d: ambient dimension (>= 2).
        kappa: concentration κ >= 0.

    Returns:
        A_d(κ) in [0, 1), a float for a scalar ``kappa``, else an array.
    """
    _check_dim(d)
    k = _check_kappa(kappa)
    flat = np.atleast_1d(k).ravel()
    out = np.zeros_like(flat)
    pos = flat > 0
    if np.any(pos):
        kp = flat[pos]
        out[pos] = np.exp(_log_bessel_iv(0.5 * d, kp) - _log_bessel_iv(0.5 * d - 1.0, kp))
    return float(out[0]) if k.ndim == 0 else out.reshape(k.shape)


def log_vmf_density_ratio(zeta: Tensor, zeta_prime: Tensor, kappa: float, *, pairwise: bool = True) -> Tensor:
    """Log dM(ζ, ·)/dπ_data(ζ') = log|S^{d-1}| + log C_d(κ) + κ⟨ζ, ζ'⟩, M(ζ, ·) = vMF(ζ, κ), π uniform.

    This is the importance weight of Whiteley's idealised search M̂_m (Assumption (B)). When both
    measures are pushed forward through the same injective map g the Jacobians cancel, so the same
    formula holds for x = g(ζ), x' = g(ζ').

    Shape:
        ``zeta`` (Q, d); ``zeta_prime`` (M, d). Result (Q, M) if ``pairwise`` else (Q,) with M = Q
        (row i against row i).

    Args:
        zeta: anchor latents (unit rows).
        zeta_prime: candidate latents (unit rows).
        kappa: the positive generator's concentration κ >= 0.
        pairwise: all pairs (default) or matching rows.

    Returns:
        Log density ratio in float64.
    """
    if not isinstance(zeta, Tensor) or zeta.ndim != 2:
        raise ValueError(f"zeta must be a tensor of shape (Q, d), got {getattr(zeta, 'shape', type(zeta))}")
    if not isinstance(zeta_prime, Tensor) or zeta_prime.ndim != 2 or zeta_prime.shape[1] != zeta.shape[1]:
        raise ValueError(f"zeta_prime must have shape (M, {zeta.shape[1]}), got {getattr(zeta_prime, 'shape', None)}")
    d = zeta.shape[1]
    k = float(_check_kappa(kappa))
    const = log_sphere_area(d) + float(log_vmf_normalizer(d, k))
    a, b = zeta.to(torch.float64), zeta_prime.to(torch.float64)
    if pairwise:
        return const + k * (a @ b.T)
    if a.shape[0] != b.shape[0]:
        raise ValueError(f"zeta_prime must have as many rows as zeta when pairwise=False, got {b.shape[0]}")
    return const + k * (a * b).sum(dim=1)


def log_vmf_ratio_second_moment(d: int, kappa: float) -> float:
    """Log E[(dM(Z, ·)/dπ_data(Z'))²] for Z, Z' i.i.d. uniform on S^{d-1} and M(z, ·) = vMF(z, κ).

    E[(dM/dπ)²] = |S^{d-1}| C_d(κ)² / C_d(2κ) (= κ coth κ for d = 3, 1 at κ = 0). It is the constant of
    Whiteley's Proposition 2, eq. (12) and the finite-k term of Theorem 1.

    Args:
        d: ambient dimension (>= 2).
        kappa: concentration κ >= 0.

    Returns:
        The log of the second moment (a float; exponentiate for the moment itself).
    """
    k = float(_check_kappa(kappa))
    return log_sphere_area(d) + 2.0 * float(log_vmf_normalizer(d, k)) - float(log_vmf_normalizer(d, 2.0 * k))


def log_sphere_area(d: int) -> float:
    """Log |S^{d-1}| = log(2 π^{d/2} / Γ(d/2))."""
    _check_dim(d)
    return math.log(2.0) + 0.5 * d * math.log(math.pi) - math.lgamma(0.5 * d)
