"""Numerical check of Theorem 4.5 (Zaliaduonis et al. 2026): without diversity, a distorting map wins.

Setting (A1)–(A5) with restricted positives: z ~ U(S^{d−1}), z = (u, v) with u the first ``d_fixed``
coordinates, z̃ ~ P^K(·|z) on the slice K(z) = {ũ = u}, negatives uniform on the whole sphere. As
M → ∞ the InfoNCE loss minus log M tends to (Wang & Isola 2020, Thm. 1; the paper's Thm. 3.3)

    L(h) = −(1/τ) E[h(z)ᵀh(z̃)]  +  E_z log E_{z⁻ ~ U(S^{d−1})} e^{h(z)ᵀh(z⁻)/τ}
         =        alignment A(h)  +  uniformity U(h).

For h_λ(u, v) = (u, λv)/√(‖u‖² + λ²‖v‖²) the theorem shows L(h_λ) − L(I) = −(c/τ)(1 − λ) + o(1 − λ)
with c > 0: since ũ = u and ‖ṽ‖ = ‖v‖ on K(z), h_λ(z)ᵀh_λ(z̃) = f(λ²) with
f(t) = (‖u‖² + t vᵀṽ)/(‖u‖² + t‖v‖²), f'(1) = ‖u‖²(vᵀṽ − ‖v‖²) ≤ 0, so shrinking v improves alignment
to first order while U'(1) = 0 (the identity is a stationary point of the uniformity term). Hence

    d/dλ L(h_λ)|_{λ=1} = (2/τ) E[‖u‖²(‖v‖² − vᵀṽ)] =: c/τ,   c = 2 E[‖u‖²(‖v‖² − vᵀṽ)].

:func:`check_theorem_4_5` estimates L(h_λ) − L(I) by Monte Carlo with common random numbers (the same
z, z̃ and negatives for both maps), in independent chunks that each draw their own M negatives, so the
standard error (over chunks) accounts for every source of randomness. With ``negatives="slice"`` the
negatives are uniform on K(z) instead (the support-corrected loss, eqs. 7–8), under which the identity
is optimal again (Thm. 4.6) and the difference turns positive.

References:
    J. Zaliaduonis et al., "The Loss Is Not Enough", ICML 2026, arXiv 2606.04280, Thm. 4.5, Thm. 4.6.
    T. Wang, P. Isola, "Understanding Contrastive Representation Learning through Alignment and
    Uniformity on the Hypersphere", ICML 2020.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from contrastlab._checks import check_choice, check_positive_float
from contrastlab.worlds.restricted import Concentration, sample_pairs, sample_uniform_slice
from contrastlab.worlds.sphere import sample_uniform_sphere

__all__ = ["DiversityCheck", "check_theorem_4_5", "first_order_constant", "h_lambda"]


def h_lambda(z: Tensor, lam: float, d_fixed: int) -> Tensor:
    """h_λ(u, v) = (u, λ v)/‖(u, λ v)‖, the distortion of Thm. 4.5 (λ = 1 is the identity).

    Args:
        z: latents, shape ``(N, d)`` (or ``(N, M, d)``); u = the first ``d_fixed`` coordinates.
        lam: λ > 0.
        d_fixed: m.

    Returns:
        Tensor of ``z``'s shape with unit rows.
    """
    lam_f = check_positive_float("lam", lam)
    scale = torch.ones(z.shape[-1], dtype=z.dtype, device=z.device)
    scale[d_fixed:] = lam_f
    y = z * scale
    return y / y.norm(dim=-1, keepdim=True)


def first_order_constant(z: Tensor, z_pos: Tensor, d_fixed: int) -> Tensor:
    """Per-pair terms of c = 2 E[‖u‖²(‖v‖² − vᵀṽ)] (so that L(h_λ) − L(I) ≈ −(c/τ)(1 − λ)).

    Args:
        z: anchors ``(N, d)``.
        z_pos: restricted positives ``(N, d)`` (ũ = u).
        d_fixed: m.

    Returns:
        Tensor ``(N,)`` whose mean estimates c.
    """
    u2 = z[:, :d_fixed].square().sum(1)
    v, vt = z[:, d_fixed:], z_pos[:, d_fixed:]
    return 2.0 * u2 * (v.square().sum(1) - (v * vt).sum(1))


def _asymptotic_terms(hz: Tensor, hzp: Tensor, hneg: Tensor, inv_tau: float) -> Tensor:
    """Per-anchor −s⁺/τ + log mean_j e^{s_j/τ}; ``hneg`` is ``(M, d)`` shared or ``(N, M, d)``."""
    align = -(hz * hzp).sum(1) * inv_tau
    if hneg.ndim == 2:
        logits = (hz @ hneg.T) * inv_tau
    else:
        logits = torch.einsum("nd,nmd->nm", hz, hneg) * inv_tau
    return align + torch.logsumexp(logits, dim=1) - math.log(logits.shape[1])


@dataclass(frozen=True)
class DiversityCheck:
    """Result of :func:`check_theorem_4_5` (all losses are the asymptotic L − log M, in nats).

    Attributes:
        lams: the λ values.
        loss_identity: L(I) (mean over all anchors).
        loss: L(h_λ) per λ.
        diff: L(h_λ) − L(I) per λ (common random numbers).
        diff_se: standard error of ``diff`` (over independent chunks).
        predicted: first-order prediction −(c/τ)(1 − λ) per λ (the uniformity term's derivative
            vanishes at λ = 1); NaN for slice negatives, where it does not apply.
        c: the estimated constant c = 2 E[‖u‖²(‖v‖² − vᵀṽ)] and ``c_se`` its standard error.
    """

    lams: tuple[float, ...]
    loss_identity: float
    loss: tuple[float, ...]
    diff: tuple[float, ...]
    diff_se: tuple[float, ...]
    predicted: tuple[float, ...]
    c: float
    c_se: float


def check_theorem_4_5(
    lams: Sequence[float] = (0.9, 0.95, 0.98),
    *,
    d: int = 3,
    d_fixed: int = 1,
    tau: float = 0.3,
    kappa: float | None = None,
    negatives: Literal["sphere", "slice"] = "sphere",
    concentration: Concentration = "code",
    n_anchors: int = 4096,
    n_negatives: int = 4096,
    n_chunks: int = 16,
    seed: int = 0,
) -> DiversityCheck:
    """Monte Carlo estimate of L(h_λ) − L(I) for the asymptotic InfoNCE loss under restricted positives.

    Args:
        lams: λ values to test (Thm. 4.5: the difference is negative for λ < 1 near 1).
        d: latent dimension.
        d_fixed: m >= 0 (0: diversity holds and the identity is optimal).
        tau: temperature τ.
        kappa: κ of the positives (default 1/τ, the matched case of Thm. 4.4).
        negatives: "sphere" (standard InfoNCE, uniform on S^{d−1}; shared within a chunk) or "slice"
            (support-corrected, uniform on K(z), per anchor).
        concentration: the law of the positive on the slice, "code", "eq6" or "kappa" (see
            :func:`contrastlab.worlds.restricted.sample_restricted_positive`).
        n_anchors: anchors per chunk.
        n_negatives: M per chunk (large: the log-mean-exp bias is O(1/M) and nearly cancels in the
            difference).
        n_chunks: independent chunks (>= 2) for the standard error.
        seed: seed of the chunks' generators.

    Returns:
        A :class:`DiversityCheck`.
    """
    inv_tau = 1.0 / check_positive_float("tau", tau)
    k = inv_tau if kappa is None else check_positive_float("kappa", kappa, allow_zero=True)
    check_choice("negatives", negatives, ("sphere", "slice"))
    if isinstance(n_chunks, bool) or not isinstance(n_chunks, int) or n_chunks < 2:
        raise ValueError(f"n_chunks must be an int >= 2, got {n_chunks!r}")
    lam_t = tuple(check_positive_float("lams", float(x)) for x in lams)
    ident: list[Tensor] = []
    c_chunks: list[Tensor] = []
    per_lam: list[list[Tensor]] = [[] for _ in lam_t]
    for chunk in range(n_chunks):
        g = torch.Generator().manual_seed(seed * 1_000_003 + chunk)
        z, zp = sample_pairs(n_anchors, d, k, d_fixed, concentration=concentration, generator=g, dtype=torch.float64)
        if negatives == "sphere":
            neg = sample_uniform_sphere(n_negatives, d, generator=g, dtype=torch.float64)
        else:
            neg = sample_uniform_slice(z, n_negatives, d_fixed, generator=g)
        base = _asymptotic_terms(z, zp, neg, inv_tau)
        ident.append(base.mean())
        c_chunks.append(first_order_constant(z, zp, d_fixed).mean())
        for i, lam in enumerate(lam_t):
            terms = _asymptotic_terms(
                h_lambda(z, lam, d_fixed), h_lambda(zp, lam, d_fixed), h_lambda(neg, lam, d_fixed), inv_tau
            )
            per_lam[i].append((terms - base).mean())
    diffs = [torch.stack(x) for x in per_lam]
    cs = torch.stack(c_chunks)
    c = float(cs.mean())
    li = float(torch.stack(ident).mean())
    sq = math.sqrt(n_chunks)
    return DiversityCheck(
        lams=lam_t,
        loss_identity=li,
        loss=tuple(li + float(x.mean()) for x in diffs),
        diff=tuple(float(x.mean()) for x in diffs),
        diff_se=tuple(float(x.std()) / sq for x in diffs),
        predicted=tuple(-c * inv_tau * (1.0 - lam) if negatives == "sphere" else math.nan for lam in lam_t),
        c=c,
        c_se=float(cs.std()) / sq,
    )
