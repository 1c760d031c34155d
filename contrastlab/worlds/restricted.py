"""Restricted positive conditionals K(z) that violate the diversity condition, and the ρ negative sampler.

Write a latent on S^{d−1} as z = (u, v) with u ∈ R^m the first ``d_fixed`` = m coordinates and
v ∈ R^ℓ, ℓ = d − m, the rest. The restricted slice is

    K(z) = {z̃ ∈ S^{d−1} : ũ = u} ≅ S^{ℓ−1}_r,   r = √(1 − ‖u‖²) = ‖v‖,

and the restricted positive law (Zaliaduonis et al. 2026, eq. 6) has density ∝ exp(κ zᵀz̃) with respect
to the surface measure of K(z). Writing ṽ = r w with w on the unit sphere S^{ℓ−1} and v = r v̂,
zᵀz̃ = ‖u‖² + r² v̂ᵀw, so w ~ vMF(v̂, κ r²): eq. (6) concentrates with κ r² on the unit sub-sphere. The
paper's code draws w ~ vMF(v̂, κ) instead (and rescales by r) when ℓ >= 2, and on S⁰ (ℓ = 1, one free
coordinate) it draws the sign of ṽ by a fair coin, whatever κ and v. Three laws are offered
(``concentration``): "code" (default; the paper's code, coin on S⁰ included), "eq6" (κ r² on every
sub-sphere, eq. 6 exactly) and "kappa" (vMF(v̂, κ) on every sub-sphere, S⁰ too, where it keeps the sign
with probability sigmoid(2κ)). "code" and "kappa" differ only when ℓ = 1.

Diversity (Def. 3.1, P_Z ≪ P_{Z̃|z}) holds for ``d_fixed = 0`` and fails for every ``d_fixed >= 1``:
K(z) has surface measure zero on S^{d−1}.

References:
    J. Zaliaduonis et al., "The Loss Is Not Enough", ICML 2026, arXiv 2606.04280, §4.2 (eq. 6) and
    §4.3 (eqs. 7–8, the constraint ratio ρ).
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from contrastlab._checks import check_choice, check_positive_float
from contrastlab.worlds.sphere import sample_uniform_sphere, sample_vmf

__all__ = [
    "CONCENTRATIONS",
    "Concentration",
    "n_constrained",
    "sample_pairs",
    "sample_restricted_negatives",
    "sample_restricted_positive",
    "sample_uniform_slice",
    "slice_radius",
]

#: The laws of the positive on the slice: see the module docstring.
Concentration = Literal["code", "eq6", "kappa"]
CONCENTRATIONS: tuple[Concentration, ...] = ("code", "eq6", "kappa")


def _check_latent(z: object, d_fixed: object) -> tuple[Tensor, int]:
    if not isinstance(z, Tensor):
        raise TypeError(f"z must be a torch.Tensor, got {type(z).__name__}")
    if z.ndim != 2 or z.shape[1] < 2 or not z.is_floating_point():
        raise ValueError(f"z must be a floating tensor of shape (N, d) with d >= 2, got {tuple(z.shape)}")
    d = z.shape[1]
    if isinstance(d_fixed, bool) or not isinstance(d_fixed, int) or not 0 <= d_fixed <= d:
        raise ValueError(f"d_fixed must be an int in [0, d] = [0, {d}], got {d_fixed!r}")
    return z, d_fixed


def slice_radius(z: Tensor, d_fixed: int) -> Tensor:
    """r(z) = ‖v‖ = √(1 − ‖u‖²), the radius of the slice K(z).

    Args:
        z: latents on the sphere, shape ``(N, d)``.
        d_fixed: m, the number of fixed leading coordinates.

    Returns:
        Tensor of shape ``(N,)`` (computed as ‖v‖, which equals √(1 − ‖u‖²) for unit z and is exact).
    """
    z, m = _check_latent(z, d_fixed)
    return z[:, m:].norm(dim=1)


def _sample_unit_subsphere(mean: Tensor, kappa: Tensor, generator: torch.Generator | None) -> Tensor:
    """vMF(mean, κ) on the unit sphere S^{ℓ−1} for every ℓ >= 1 (mean ``(N, ℓ)`` unit rows, κ ``(N,)``).

    ℓ >= 2 delegates to :func:`sample_vmf`; on S⁰ = {±1} the vMF law is P(+mean) = e^κ / (e^κ + e^−κ) =
    sigmoid(2κ).
    """
    n, ell = mean.shape
    if ell >= 2:
        return sample_vmf(mean, kappa, generator=generator)
    u = torch.rand(n, generator=generator, dtype=torch.float64)
    keep = u < torch.sigmoid(2.0 * kappa.to(torch.float64))
    return torch.where(keep[:, None], mean, -mean)


def sample_restricted_positive(
    z: Tensor,
    kappa: float,
    d_fixed: int,
    *,
    concentration: Concentration = "code",
    generator: torch.Generator | None = None,
) -> Tensor:
    """One positive z̃ ~ P^K(·|z) per anchor: ũ = u exactly, ṽ = r w with w ~ vMF(v̂, κ_eff) on S^{ℓ−1}.

    ``d_fixed = 0`` is the unrestricted vMF(z, κ) positive (diversity holds); ``d_fixed = d`` returns the
    anchor itself (K(z) = {z}).

    Args:
        z: anchors on S^{d−1}, shape ``(N, d)``.
        kappa: κ >= 0 (the paper uses κ = 1/τ).
        d_fixed: m, the number of leading coordinates held fixed.
        concentration: "code" (the paper's code: κ_eff = κ when ℓ >= 2, κ_eff = 0, a fair coin for the
            sign of ṽ, when ℓ = 1), "eq6" (κ_eff = κ r², eq. 6 exactly) or "kappa" (κ_eff = κ for every ℓ).
        generator: source of randomness.

    Returns:
        Tensor ``(N, d)`` in ``z``'s dtype; ``out[:, :d_fixed]`` is bit-identical to ``z[:, :d_fixed]``.

    Raises:
        ValueError: bad ``z``, ``d_fixed``, ``kappa`` or ``concentration``.
    """
    z, m = _check_latent(z, d_fixed)
    k = check_positive_float("kappa", kappa, allow_zero=True)
    check_choice("concentration", concentration, CONCENTRATIONS)
    n, d = z.shape
    if m == d or n == 0:
        return z.clone()
    v = z[:, m:].detach().to(torch.float64).cpu()
    r = v.norm(dim=1)
    safe = r > 0
    vhat = torch.where(safe[:, None], v / r.clamp_min(1e-300)[:, None], torch.zeros_like(v))
    vhat[~safe, 0] = 1.0  # r = 0 (probability 0): K(z) = {z}; any direction, scaled by r = 0 below
    kap = torch.full((n,), k, dtype=torch.float64)
    if concentration == "eq6":
        kap = kap * r**2
    elif concentration == "code" and d - m == 1:
        kap = torch.zeros_like(kap)
    w = _sample_unit_subsphere(vhat, kap, generator)
    vt = (w * r[:, None]).to(device=z.device, dtype=z.dtype)
    return torch.cat([z[:, :m], vt], dim=1)


def sample_uniform_slice(
    z: Tensor, n_per_anchor: int, d_fixed: int, *, generator: torch.Generator | None = None
) -> Tensor:
    """``n_per_anchor`` points uniform on K(z) for each anchor: (u, r · uniform(S^{ℓ−1})).

    Args:
        z: anchors, shape ``(N, d)``.
        n_per_anchor: K >= 0.
        d_fixed: m.
        generator: source of randomness.

    Returns:
        Tensor ``(N, K, d)`` in ``z``'s dtype whose ``[:, :, :m]`` equals ``z[:, None, :m]`` exactly.
    """
    z, m = _check_latent(z, d_fixed)
    if isinstance(n_per_anchor, bool) or not isinstance(n_per_anchor, int) or n_per_anchor < 0:
        raise ValueError(f"n_per_anchor must be a non-negative int, got {n_per_anchor!r}")
    n, d = z.shape
    ell = d - m
    u = z[:, None, :m].expand(n, n_per_anchor, m)
    if ell == 0:
        return u.clone()
    r = z[:, m:].detach().to(torch.float64).cpu().norm(dim=1)
    if ell == 1:
        w = torch.randint(0, 2, (n, n_per_anchor, 1), generator=generator).to(torch.float64) * 2 - 1
    else:
        w = sample_uniform_sphere(n * n_per_anchor, ell, generator=generator, dtype=torch.float64)
        w = w.reshape(n, n_per_anchor, ell)
    vt = (w * r[:, None, None]).to(device=z.device, dtype=z.dtype)
    return torch.cat([u, vt], dim=2)


def n_constrained(n_negatives: int, rho: float) -> int:
    """Number of the ``n_negatives`` negatives drawn from K(z) at constraint ratio ρ: round(ρ M).

    Python's round (half to even) is used, so the split is exact whenever ρ M is an integer.
    """
    if isinstance(n_negatives, bool) or not isinstance(n_negatives, int) or n_negatives < 0:
        raise ValueError(f"n_negatives must be a non-negative int, got {n_negatives!r}")
    r = check_positive_float("rho", rho, allow_zero=True)
    if r > 1:
        raise ValueError(f"rho must be in [0, 1], got {rho}")
    return int(round(r * n_negatives))


def sample_restricted_negatives(
    z: Tensor,
    n_negatives: int,
    d_fixed: int,
    rho: float,
    *,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Per-anchor negatives at constraint ratio ρ (Zaliaduonis et al. 2026, §5 "constraint ratio").

    The first ``round(ρ M)`` negatives of each anchor are uniform on K(z) (same u as the anchor); the rest
    are uniform on the whole sphere S^{d−1}. ρ = 0 is standard InfoNCE with uniform negatives, ρ = 1 the
    support-corrected loss (eqs. 7–8).

    Args:
        z: anchors, shape ``(N, d)``.
        n_negatives: M.
        d_fixed: m.
        rho: constraint ratio in [0, 1].
        generator: source of randomness.

    Returns:
        Tensor ``(N, M, d)`` in ``z``'s dtype.
    """
    z, m = _check_latent(z, d_fixed)
    k = n_constrained(n_negatives, rho)
    n, d = z.shape
    inside = sample_uniform_slice(z, k, m, generator=generator)
    outside = sample_uniform_sphere(n * (n_negatives - k), d, generator=generator, dtype=torch.float64)
    outside = outside.reshape(n, n_negatives - k, d).to(device=z.device, dtype=z.dtype)
    return torch.cat([inside, outside], dim=1)


def sample_pairs(
    n: int,
    d: int,
    kappa: float,
    d_fixed: int,
    *,
    concentration: Concentration = "code",
    generator: torch.Generator | None = None,
    dtype: torch.dtype = torch.float32,
) -> tuple[Tensor, Tensor]:
    """Anchors z ~ U(S^{d−1}) and their restricted positives z̃ ~ P^K(·|z).

    Args:
        n: number of pairs.
        d: latent dimension.
        kappa: κ.
        d_fixed: m (0: diversity holds).
        concentration: see :func:`sample_restricted_positive`.
        generator: source of randomness.
        dtype: dtype of both outputs.

    Returns:
        ``(z, z_pos)``, each ``(n, d)``.
    """
    z = sample_uniform_sphere(n, d, generator=generator, dtype=torch.float64)
    zp = sample_restricted_positive(z, kappa, d_fixed, concentration=concentration, generator=generator)
    return z.to(dtype), zp.to(dtype)
