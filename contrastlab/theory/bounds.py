"""The bounds of Whiteley (2026) as functions: finite-k bias, continuity, Rademacher complexity.

Every function returns plain floats (or per-tuple tensors for the continuity bound) so that a study
can put the measured gap and the bound on one plot.

* Prop. 1: −log(1 + e^{2/τ}/k) ≤ ∫CrossEnt[M‖Q_τ^φ]dπ − R(φ; k, τ) ≤ (e^{2/τ} − 1)²/(8k).
* Prop. 2: |∫E CrossEnt[M̂_k‖Q̂_{τ,k}^φ]dπ − R(φ; k, τ)| ≤ (4/(τk)) E[(dM/dπ)²] + log(1 + e^{2/τ}/k).
* Eq. (11): 0 ≤ ∫CrossEnt[M‖Q_τ^φ]dπ − R̃(φ; k, τ) ≤ (e^{2/τ} − 1)²/(8k);  Lemma 4: that gap ≤ 2/τ.
* Eq. (12): |∫E CrossEnt[M̂_k‖Q̂_{τ,k}^φ]dπ − R̃(φ; k, τ)| ≤ (4/(τk)) E[(dM/dπ)²].
* Prop. 4: |ℓ(φ, z) − ℓ(φ', z)| ≤ (4/τ)‖Δ^a‖ + (1/τ)‖Δ^+‖ + (3/τ) e^{2/(βτ)} ((1/k) Σ_j ‖Δ_j^-‖^β)^{1/β}.
* Lemma 1, Prop. 3, Prop. 5, Theorem 1: the generalisation bound for parameterised encoders.

References:
    N. Whiteley, "Similarity search generalisation in contrastive learning with InfoNCE loss",
    arXiv 2607.09405 (2026).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from contrastlab._checks import check_embeddings, check_positive_float
from contrastlab.theory.risk import tuple_loss

__all__ = [
    "b_tau",
    "concentration_term",
    "continuity_bound",
    "continuity_check",
    "dcl_population_bounds",
    "dcl_search_bound",
    "lemma1_lipschitz",
    "lemma4_bound",
    "prop1_bounds",
    "prop2_bound",
    "rademacher_bound",
    "theorem1_terms",
]


def _k(k: object) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or int(k) < 1:
        raise ValueError(f"k must be a positive int, got {k!r}")
    return int(k)


def _log1p_exp2tau_over_k(k: int, tau: float) -> float:
    """log(1 + e^{2/τ}/k) without overflow at small τ."""
    return float(np.logaddexp(0.0, 2.0 / tau - math.log(k)))


def _expm1_sq_over_8k(k: int, tau: float) -> float:
    """(e^{2/τ} − 1)²/(8k); ``inf`` when it exceeds float range (the bound is then vacuous anyway)."""
    log_val = 2.0 * (2.0 / tau + math.log(-math.expm1(-2.0 / tau))) - math.log(8 * k)
    return math.exp(log_val) if log_val < 700 else math.inf


def prop1_bounds(k: int, temperature: float) -> tuple[float, float]:
    """Proposition 1: (lower, upper) for ∫CrossEnt[M‖Q_τ^φ] dπ − R(φ; k, τ), valid for every φ.

    Returns:
        ``(−log(1 + e^{2/τ}/k), (e^{2/τ} − 1)²/(8k))``.
    """
    k, tau = _k(k), check_positive_float("temperature", temperature)
    return -_log1p_exp2tau_over_k(k, tau), _expm1_sq_over_8k(k, tau)


def prop2_bound(k: int, temperature: float, ratio_second_moment: float) -> float:
    """Proposition 2: bound on |∫E CrossEnt[M̂_k‖Q̂_{τ,k}^φ] dπ − R(φ; k, τ)| (m = k, Assumption (B)).

    Args:
        k: negatives = corpus size.
        temperature: τ > 0.
        ratio_second_moment: E[(dM(Z,·)/dπ(Z'))²], Z, Z' i.i.d. π (``SphereWorld.ratio_second_moment``).

    Returns:
        (4/(τk)) E[(dM/dπ)²] + log(1 + e^{2/τ}/k). It is also Theorem 1's finite-k bias term.
    """
    k, tau = _k(k), check_positive_float("temperature", temperature)
    m2 = check_positive_float("ratio_second_moment", ratio_second_moment)
    return 4.0 / (tau * k) * m2 + _log1p_exp2tau_over_k(k, tau)


def lemma4_bound(temperature: float) -> float:
    """Lemma 4: ∫CrossEnt[M‖Q_τ^φ] dπ − R̃(φ; k, τ) ≤ 2/τ for every k (DCL)."""
    return 2.0 / check_positive_float("temperature", temperature)


def dcl_population_bounds(k: int, temperature: float) -> tuple[float, float]:
    """Eq. (11) with Lemma 4: (0, min((e^{2/τ} − 1)²/(8k), 2/τ)) for ∫CrossEnt[M‖Q_τ^φ] dπ − R̃."""
    k, tau = _k(k), check_positive_float("temperature", temperature)
    return 0.0, min(_expm1_sq_over_8k(k, tau), 2.0 / tau)


def dcl_search_bound(k: int, temperature: float, ratio_second_moment: float) -> float:
    """Eq. (12): bound (4/(τk)) E[(dM/dπ)²] on |∫E CrossEnt[M̂_k‖Q̂_{τ,k}^φ] dπ − R̃(φ; k, τ)|."""
    k, tau = _k(k), check_positive_float("temperature", temperature)
    m2 = check_positive_float("ratio_second_moment", ratio_second_moment)
    return 4.0 / (tau * k) * m2


def continuity_bound(
    delta_anchor: Tensor, delta_positive: Tensor, delta_negatives: Tensor, *, temperature: float, beta: float
) -> Tensor:
    """Proposition 4's bound on |ℓ(φ, z, k, τ) − ℓ(φ', z, k, τ)| per tuple, for any β >= 1 (∞ allowed).

    (4/τ)‖Δ^a‖ + (1/τ)‖Δ^+‖ + (3/τ) e^{2/(βτ)} ((1/k) Σ_j ‖Δ_j^-‖^β)^{1/β}, Δ = φ(·) − φ'(·), with φ,
    φ' mapping into the unit sphere. β → ∞ gives (3/τ) max_j ‖Δ_j^-‖ (eqs. 17–18); β = 2/τ (Lemma 1)
    makes the factor e.

    Shape:
        ``delta_anchor``, ``delta_positive``: (N, D); ``delta_negatives``: (N, k, D) → (N,).

    Args:
        delta_anchor: φ(z^a) − φ'(z^a).
        delta_positive: φ(z^+) − φ'(z^+).
        delta_negatives: φ(z_j^-) − φ'(z_j^-).
        temperature: τ > 0.
        beta: the inverse-temperature exponent β >= 1 (``math.inf`` for the max).

    Returns:
        The bound per tuple, in the inputs' dtype.
    """
    check_embeddings("delta_anchor", delta_anchor, ndim=2)
    check_embeddings("delta_positive", delta_positive, ndim=2)
    check_embeddings("delta_negatives", delta_negatives, ndim=3)
    tau = check_positive_float("temperature", temperature)
    if isinstance(beta, bool) or not isinstance(beta, (int, float)) or math.isnan(beta) or beta < 1:
        raise ValueError(f"beta must be a real number >= 1 (math.inf allowed), got {beta!r}")
    na = delta_anchor.norm(dim=-1)
    npos = delta_positive.norm(dim=-1)
    nn = delta_negatives.norm(dim=-1)  # (N, k)
    if math.isinf(beta):
        neg = nn.amax(dim=-1)
    else:
        # ((1/k) Σ x^β)^{1/β} computed as max · ((1/k) Σ (x/max)^β)^{1/β} to avoid under/overflow.
        mx = nn.amax(dim=-1, keepdim=True)
        scaled = torch.where(mx > 0, nn / mx.clamp_min(torch.finfo(nn.dtype).tiny), torch.zeros_like(nn))
        neg = mx.squeeze(-1) * scaled.pow(beta).mean(dim=-1).pow(1.0 / beta)
        neg = neg * math.exp(2.0 / (beta * tau))
    return 4.0 / tau * na + 1.0 / tau * npos + 3.0 / tau * neg


def continuity_check(
    phi: tuple[Tensor, Tensor, Tensor],
    phi_prime: tuple[Tensor, Tensor, Tensor],
    *,
    temperature: float,
    beta: float,
) -> tuple[Tensor, Tensor]:
    """|ℓ(φ) − ℓ(φ')| and Proposition 4's bound for the same tuples, given unit embeddings.

    Args:
        phi: (anchor (N, D), positive (N, D), negatives (N, k, D)) under φ, unit rows.
        phi_prime: the same under φ'.
        temperature: τ > 0.
        beta: β >= 1.

    Returns:
        ``(lhs, bound)``, each of shape (N,); Prop. 4 says lhs <= bound.
    """
    la = tuple_loss(*phi, temperature=temperature, normalize=False)
    lb = tuple_loss(*phi_prime, temperature=temperature, normalize=False)
    bound = continuity_bound(
        phi[0] - phi_prime[0],
        phi[1] - phi_prime[1],
        phi[2] - phi_prime[2],
        temperature=temperature,
        beta=beta,
    )
    return (la - lb).abs(), bound


def b_tau(anchor: Tensor, positive: Tensor, negatives: Tensor, *, temperature: float) -> float:
    """B_τ of Lemma 1 from the raw inputs (Z = R^{d_in}, Assumption (C)).

    B_τ = (mean ‖z^a‖²)^{1/2} + (mean ‖z^+‖²)^{1/2} + ((1/(nk)) Σ_ij ‖z_ij^-‖^{2/(1∧τ)})^{(1∧τ)/2}.

    Shape:
        ``anchor``, ``positive``: (n, d_in); ``negatives``: (n, k, d_in).
    """
    tau = check_positive_float("temperature", temperature)
    p = 2.0 / min(1.0, tau)
    a = anchor.to(torch.float64).norm(dim=-1).pow(2).mean().sqrt()
    b = positive.to(torch.float64).norm(dim=-1).pow(2).mean().sqrt()
    c = negatives.to(torch.float64).norm(dim=-1).pow(p).mean().pow(1.0 / p)
    return float(a + b + c)


def lemma1_lipschitz(temperature: float, b_tau_value: float, c_phi: float) -> float:
    """Lemma 1: ρ_n^info(φ_θ, φ_θ') <= (4e/τ) B_τ C_Φ ‖θ − θ'‖; returns the constant (4e/τ) B_τ C_Φ."""
    tau = check_positive_float("temperature", temperature)
    return 4.0 * math.e / tau * check_positive_float("b_tau_value", b_tau_value) * check_positive_float("c_phi", c_phi)


def rademacher_bound(
    temperature: float, d_theta: int, n: int, radius: float, b_tau_value: float, c_phi: float
) -> float:
    """Proposition 5: the bound on the empirical Rademacher complexity of the InfoNCE loss class.

    (96/τ) √(d_Θ/n) · min{a√(log 3 + 1), √(log(1+2a) + 1)}, a = e R B_τ C_Φ.
    k enters only through B_τ, so the bound stabilises as k grows.

    Args:
        temperature: τ > 0.
        d_theta: number of parameters d_Θ.
        n: number of training tuples.
        radius: R, the radius of the parameter ball ‖θ − θ_0‖ <= R.
        b_tau_value: B_τ from :func:`b_tau`.
        c_phi: C_Φ with ‖φ_θ(z) − φ_θ'(z)‖ <= C_Φ ‖z‖ ‖θ − θ'‖ (user-supplied).
    """
    tau = check_positive_float("temperature", temperature)
    for name, v in (("d_theta", d_theta), ("n", n)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    r = check_positive_float("radius", radius, allow_zero=True)
    a = math.e * r * check_positive_float("b_tau_value", b_tau_value) * check_positive_float("c_phi", c_phi)
    return (
        96.0 / tau * math.sqrt(d_theta / n) * min(a * math.sqrt(math.log(3.0) + 1.0), math.sqrt(math.log1p(2 * a) + 1))
    )


def concentration_term(temperature: float, n: int, delta: float) -> float:
    """Proposition 3's deviation term (12/τ) √(log(2/δ)/(2n)) (the loss range is 4/τ, Lemma 5)."""
    tau = check_positive_float("temperature", temperature)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    dl = check_positive_float("delta", delta)
    if dl >= 1:
        raise ValueError(f"delta must be in (0, 1), got {dl}")
    return 12.0 / tau * math.sqrt(math.log(2.0 / dl) / (2.0 * n))


def theorem1_terms(
    *,
    temperature: float,
    k: int,
    n: int,
    d_theta: int,
    radius: float,
    b_tau_value: float,
    c_phi: float,
    ratio_second_moment: float,
    delta: float = 0.05,
) -> dict[str, float]:
    """The terms of Theorem 1 with the explicit constants of Propositions 2, 3 and 5.

    With probability >= 1 − δ, for every θ in the ball, the similarity-search expected cross-entropy is
    at most R̂_n(φ_θ) + ``complexity`` + ``concentration`` + ``finite_k``, where ``complexity`` is
    2 × Prop. 5's Rademacher bound, ``concentration`` is Prop. 3's term and ``finite_k`` is Prop. 2's
    bias. ``generalisation`` = complexity + concentration bounds R − R̂_n (Prop. 3).

    Returns:
        ``{"complexity", "concentration", "finite_k", "generalisation", "total_excess"}``.
    """
    complexity = 2.0 * rademacher_bound(temperature, d_theta, n, radius, b_tau_value, c_phi)
    conc = concentration_term(temperature, n, delta)
    fk = prop2_bound(k, temperature, ratio_second_moment)
    return {
        "complexity": complexity,
        "concentration": conc,
        "finite_k": fk,
        "generalisation": complexity + conc,
        "total_excess": complexity + conc + fk,
    }
