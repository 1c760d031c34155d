"""Whiteley's eq. (13) example: exact sums against Monte Carlo through the library, eqs. (11)–(13)."""

from __future__ import annotations

import math

import pytest
import torch

from contrastlab.theory import orthogonal_atoms_example, search_cross_entropy, tuple_loss
from contrastlab.theory.risk import mc_estimate


def _monte_carlo(tau: float, k: int, rho: float, n: int, tuples: int, seed: int) -> tuple:
    """R̃ and the search CE by sampling atoms; φ(z_i) = e_i (orthogonal), M(z,·) = ρ δ_z + (1 − ρ) π."""
    g = torch.Generator().manual_seed(seed)
    eye = torch.eye(n, dtype=torch.float64)
    a = torch.randint(n, (tuples,), generator=g)
    stick = torch.rand(tuples, generator=g) < rho
    p = torch.where(stick, a, torch.randint(n, (tuples,), generator=g))
    neg = torch.randint(n, (tuples, k), generator=g)
    risk = mc_estimate(tuple_loss(eye[a], eye[p], eye[neg], temperature=tau, variant="dcl", normalize=False))
    # search CE with the corpus ξ = the negatives, log w_i = log dM(z,·)/dπ(ξ_i) = log(nρ 1[ξ_i = z] + 1 − ρ)
    log_w = torch.log(n * rho * (neg == a[:, None]).double() + (1.0 - rho))
    ce = mc_estimate(search_cross_entropy(eye[a], eye[neg], log_w, temperature=tau))
    return risk, ce


@pytest.mark.parametrize("tau,k,rho", [(0.5, 8, 0.5), (0.3, 4, 0.0), (1.0, 16, 0.3)])
def test_exact_sums_match_the_librarys_monte_carlo(tau: float, k: int, rho: float) -> None:
    ex = orthogonal_atoms_example(tau, k, stickiness=rho)
    risk, ce = _monte_carlo(tau, k, rho, ex.n_atoms, tuples=200_000, seed=0)
    # fixed seed; 5 standard errors of the Monte Carlo mean
    assert abs(risk.mean - ex.dcl_risk) < 5 * risk.se
    assert abs(ce.mean - ex.search_ce) < 5 * ce.se


def test_population_ce_closed_form() -> None:
    # π uniform on n orthogonal atoms: ∫ log ∫ e^{⟨φ(z),φ(z')⟩/τ} π(dz') π(dz) = log((e^{1/τ} + n − 1)/n)
    ex = orthogonal_atoms_example(0.3, 16, stickiness=0.25)
    n, tau = ex.n_atoms, 0.3
    p_same = 0.25 + 0.75 / n
    assert ex.population_ce == pytest.approx(-p_same / tau + math.log((math.exp(1 / tau) + n - 1) / n), rel=1e-13)
    assert n == math.ceil(math.exp(1 / tau) - 1) == 28


@pytest.mark.parametrize("tau", [0.1, 0.2, 0.3, 0.5, 1.0])
@pytest.mark.parametrize("k", [1, 3, 16, 256, 4096])
@pytest.mark.parametrize("rho", [0.0, 0.5, 0.9])
def test_eqs_11_and_12_hold(tau: float, k: int, rho: float) -> None:
    ex = orthogonal_atoms_example(tau, k, stickiness=rho)
    slack = 1e-12 * (1 + abs(ex.dcl_risk))  # rounding of the float64 sums
    assert -slack <= ex.population_gap <= ex.eq11_bound
    assert abs(ex.search_gap) <= ex.eq12_bound
    if rho == 0.0:  # M = π: the idealised search is the empirical measure, so the search CE equals R̃
        assert abs(ex.search_gap) <= slack


# Smallest k (among powers of 2, up to 2^15) from which eq. (13)'s inequality holds for every larger k,
# computed by these exact sums; n = ⌈e^{1/τ} − 1⌉ atoms.
EQ13_K_MIN = {0.1: 4096, 0.15: 128, 0.2: 32, 0.3: 8, 0.5: 1, 1.0: 1}


@pytest.mark.parametrize("tau", sorted(EQ13_K_MIN))
@pytest.mark.parametrize("rho", [0.0, 0.5])
def test_eq13_holds_from_k_min_on(tau: float, rho: float) -> None:
    k_min = EQ13_K_MIN[tau]
    for k in (2**i for i in range(16)):
        ex = orthogonal_atoms_example(tau, k, stickiness=rho)
        if k >= k_min:
            assert ex.bound_ratio <= ex.eq13_bound
    if k_min > 1:
        ex = orthogonal_atoms_example(tau, k_min // 2, stickiness=rho)
        assert ex.bound_ratio > ex.eq13_bound


def test_eq13_only_says_closer_to_search_when_its_bound_is_below_one() -> None:
    # τ = 0.1, M = π (E[(dM/dπ)²] = 1): the bound is 65/(0.1(e^10 − 2)) ≈ 0.0295 and the search CE equals R̃.
    ex = orthogonal_atoms_example(0.1, 2**15)
    assert ex.eq13_bound < 0.03 and ex.bound_ratio < ex.eq13_bound and ex.gap_ratio < 1e-6
    # A sticky kernel has E[(dM/dπ)²] ~ nρ²: the bound exceeds 1 and the search gap is the larger one.
    sticky = orthogonal_atoms_example(0.1, 2**15, stickiness=0.5)
    assert sticky.eq13_bound > 1 and sticky.gap_ratio > 1


def test_argument_checks() -> None:
    with pytest.raises(ValueError, match="^temperature"):
        orthogonal_atoms_example(2.0, 4)  # e^{1/2} < 2
    with pytest.raises(ValueError, match="^k"):
        orthogonal_atoms_example(0.5, 0)
    with pytest.raises(ValueError, match="^stickiness"):
        orthogonal_atoms_example(0.5, 4, stickiness=1.0)
    with pytest.raises(ValueError, match="^n_atoms"):
        orthogonal_atoms_example(0.5, 4, n_atoms=0)
