"""Whiteley's eq. (13) example, computed exactly: φ(Z) uniform on n orthogonal unit vectors.

Whiteley (2026, arXiv 2607.09405) contrasts two gaps of the DCL risk R̃(φ; k, τ) (the InfoNCE risk
without the "1 +" of the positive, Yeh et al. 2022):

* the population gap  G_pop = ∫CrossEnt[M‖Q_τ^φ] dπ − R̃, in [0, (e^{2/τ} − 1)²/(8k)] (eq. 11);
* the search gap      G_search = ∫E CrossEnt[M̂_k‖Q̂_{τ,k}^φ] dπ − R̃, with |G_search| ≤ 4E[(dM/dπ)²]/(τk)
  (eq. 12),

and eq. (13) exhibits, for e^{1/τ} > 2, an embedding for which the ratio of the eq. 12 bound to the
population gap is at most 65 E[(dM/dπ)²] / (τ(e^{1/τ} − 2)): at small τ, R̃ is much closer to the
similarity-search cross-entropy than to the population one. The embedding takes n = ⌈e^{1/τ} − 1⌉
values with equal probability on (nearly) orthogonal unit vectors.

Here the n values are exactly orthogonal (the standard basis of R^n), π is uniform on n atoms and
the positive kernel is M(z_i, ·) = ρ δ_{z_i} + (1 − ρ) π ("stickiness" ρ ∈ [0, 1)), which satisfies
Assumption (B) with dM(z_i,·)/dπ(z_j) = nρ 1[i = j] + 1 − ρ. Every similarity is 0 or 1/τ, so each
quantity depends on the tuple only through c, the number of the k negatives (or corpus points) that
equal the anchor, c ~ Binomial(k, 1/n); every expectation below is an exact finite sum over c
(float64), no Monte Carlo. With A = e^{1/τ} − 1:

* R̃ = −(ρ + (1 − ρ)/n)/τ + E log(1 + cA/k);
* ∫CrossEnt[M‖Q] dπ = −(ρ + (1 − ρ)/n)/τ + log(1 + A/n), so G_pop = log(1 + A/n) − E log(1 + cA/k)
  (a Jensen gap; it does not depend on M: the positive's term is the same in both);
* the search CE at c is −(1/τ) c(nρ + 1 − ρ)/(k(1 − ρ) + cnρ) + log(1 + cA/k), so
  G_search = (ρ + (1 − ρ)/n)/τ − (1/τ) E[c(nρ + 1 − ρ)/(k(1 − ρ) + cnρ)];
* E[(dM/dπ)²] = (nρ + 1 − ρ)²/n + (1 − 1/n)(1 − ρ)².

References:
    N. Whiteley, "Similarity search generalisation in contrastive learning with InfoNCE loss",
    arXiv 2607.09405 (2026), eqs. (11)–(13) and Lemma 4.
    C.-H. Yeh et al., "Decoupled Contrastive Learning", ECCV 2022 (the DCL variant).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from contrastlab._checks import check_positive_float
from contrastlab.theory.bounds import dcl_population_bounds, dcl_search_bound

__all__ = ["AtomsExample", "orthogonal_atoms_example"]


@dataclass(frozen=True)
class AtomsExample:
    """The exact quantities of the orthogonal-atoms example at one (τ, k, ρ)."""

    temperature: float
    """τ"""
    k: int
    """negatives = corpus size m"""
    n_atoms: int
    """n, the number of orthogonal embedding values"""
    stickiness: float
    """ρ in M(z, ·) = ρ δ_z + (1 − ρ) π"""
    ratio_second_moment: float
    """E[(dM(Z,·)/dπ(Z'))²], Z, Z' i.i.d. π"""
    dcl_risk: float
    """R̃(φ; k, τ)"""
    population_ce: float
    """∫CrossEnt[M‖Q_τ^φ] dπ"""
    search_ce: float
    """∫E CrossEnt[M̂_k‖Q̂_{τ,k}^φ] dπ"""
    population_gap: float
    """population_ce − dcl_risk (eq. 11: in [0, (e^{2/τ} − 1)²/(8k)])"""
    search_gap: float
    """search_ce − dcl_risk (eq. 12: |·| ≤ 4E[(dM/dπ)²]/(τk))"""
    eq11_bound: float
    """min((e^{2/τ} − 1)²/(8k), 2/τ)"""
    eq12_bound: float
    """4E[(dM/dπ)²]/(τk)"""
    eq13_bound: float
    """65 E[(dM/dπ)²]/(τ(e^{1/τ} − 2))"""

    @property
    def bound_ratio(self) -> float:
        """eq12_bound / population_gap: the ratio eq. (13) bounds."""
        return self.eq12_bound / self.population_gap

    @property
    def gap_ratio(self) -> float:
        """|search_gap| / population_gap: the ratio of the gaps themselves."""
        return abs(self.search_gap) / self.population_gap


def orthogonal_atoms_example(
    temperature: float, k: int, *, stickiness: float = 0.0, n_atoms: int | None = None
) -> AtomsExample:
    """Compute the eq. (13) example exactly (see the module docstring for the formulas).

    Args:
        temperature: τ > 0 with e^{1/τ} > 2 (τ < 1/log 2 ≈ 1.443), the example's condition.
        k: negatives = corpus size (>= 1).
        stickiness: ρ ∈ [0, 1): the positive equals the anchor with probability ρ and is an independent
            draw from π otherwise (ρ = 1 leaves M̂_k undefined when no corpus point equals the anchor).
        n_atoms: n; default ⌈e^{1/τ} − 1⌉, the example's choice (1/ε with ε = 1/⌈e^{1/τ} − 1⌉).

    Returns:
        An :class:`AtomsExample`.
    """
    tau = check_positive_float("temperature", temperature)
    if not math.exp(1.0 / tau) > 2.0:
        raise ValueError(f"temperature must satisfy e^(1/τ) > 2 (τ < 1/log 2), got {temperature!r}")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive int, got {k!r}")
    if isinstance(stickiness, bool) or not isinstance(stickiness, (int, float)) or not 0.0 <= stickiness < 1.0:
        raise ValueError(f"stickiness must be a real number in [0, 1), got {stickiness!r}")
    a = math.expm1(1.0 / tau)
    n = math.ceil(a) if n_atoms is None else n_atoms
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n_atoms must be a positive int, got {n_atoms!r}")
    rho = float(stickiness)
    from scipy.stats import binom

    c = np.arange(k + 1, dtype=np.float64)
    pmf = binom.pmf(c, k, 1.0 / n)  # c = negatives (corpus points) equal to the anchor
    e_log = float(pmf @ np.log1p(c * a / k))
    p_same = rho + (1.0 - rho) / n  # P(positive = anchor) = E⟨φ(a), φ(p)⟩
    dcl_risk = -p_same / tau + e_log
    population_ce = -p_same / tau + math.log1p(a / n)
    w_same = n * rho + 1.0 - rho  # dM(z,·)/dπ at the anchor's own atom; 1 − ρ at the others
    search_first = -(pmf @ (c * w_same / (k * (1.0 - rho) + c * n * rho))) / tau
    search_ce = float(search_first) + e_log
    m2 = w_same**2 / n + (1.0 - 1.0 / n) * (1.0 - rho) ** 2
    return AtomsExample(
        temperature=tau,
        k=k,
        n_atoms=n,
        stickiness=rho,
        ratio_second_moment=m2,
        dcl_risk=dcl_risk,
        population_ce=population_ce,
        search_ce=search_ce,
        population_gap=math.log1p(a / n) - e_log,
        search_gap=search_ce - dcl_risk,
        eq11_bound=dcl_population_bounds(k, tau)[1],
        eq12_bound=dcl_search_bound(k, tau, m2),
        eq13_bound=65.0 * m2 / (tau * (math.exp(1.0 / tau) - 2.0)),
    )
