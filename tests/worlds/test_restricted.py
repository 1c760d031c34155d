import math

import pytest
import torch
from scipy.special import ive

from contrastlab.worlds.restricted import (
    n_constrained,
    sample_pairs,
    sample_restricted_negatives,
    sample_restricted_positive,
    sample_uniform_slice,
    slice_radius,
)
from contrastlab.worlds.sphere import sample_uniform_sphere


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _mean_resultant(kappa: float, ell: int) -> float:
    """E[wᵀμ] for w ~ vMF(μ, κ) on S^{ℓ−1}: A_ℓ(κ) = I_{ℓ/2}(κ) / I_{ℓ/2−1}(κ)."""
    return float(ive(ell / 2, kappa) / ive(ell / 2 - 1, kappa))


@pytest.mark.parametrize("d,d_fixed", [(3, 0), (3, 1), (3, 2), (3, 3), (10, 5), (10, 9)])
@pytest.mark.parametrize("concentration", ["code", "eq6", "kappa"])
def test_positive_keeps_u_exactly_and_stays_on_sphere(d: int, d_fixed: int, concentration: str) -> None:
    z = sample_uniform_sphere(500, d, generator=_gen(1), dtype=torch.float32)
    zp = sample_restricted_positive(z, 3.3, d_fixed, concentration=concentration, generator=_gen(2))
    assert zp.shape == z.shape and zp.dtype == z.dtype
    assert torch.equal(zp[:, :d_fixed], z[:, :d_fixed])  # bit-identical ũ = u
    assert torch.allclose(zp.norm(dim=1), torch.ones(500), atol=1e-6)
    assert torch.allclose(slice_radius(zp, d_fixed), slice_radius(z, d_fixed), atol=1e-6)
    if d_fixed == d:
        assert torch.equal(zp, z)
    elif d - d_fixed >= 2:
        assert (zp - z).abs().max() > 1e-3  # actually moves


def test_pairs_keep_u_after_cast() -> None:
    z, zp = sample_pairs(300, 3, 3.3, 1, generator=_gen(0), dtype=torch.float32)
    assert torch.equal(z[:, :1], zp[:, :1])


@pytest.mark.parametrize("concentration", ["code", "eq6"])
def test_vmf_concentration_matches_theory(concentration: str) -> None:
    # d = 3, d_fixed = 1: w lives on S¹ and E[wᵀv̂] = I_1(κ_eff)/I_0(κ_eff), κ_eff = κ or κ r².
    kappa, n = 4.0, 40000
    z = sample_uniform_sphere(n, 3, generator=_gen(3), dtype=torch.float64)
    zp = sample_restricted_positive(z, kappa, 1, concentration=concentration, generator=_gen(4))
    r = slice_radius(z, 1)
    cos = ((zp[:, 1:] * z[:, 1:]).sum(1) / r**2).numpy()
    keff = (kappa * r**2).numpy() if concentration == "eq6" else [kappa] * n
    expected = sum(_mean_resultant(float(k), 2) for k in keff) / n
    se = cos.std() / math.sqrt(n)
    assert abs(cos.mean() - expected) < 5 * se


def test_eq6_is_the_tilted_density() -> None:
    # eq6: the log-density of zᵀz̃ on the slice is κ zᵀz̃ + const, so E[zᵀz̃] under eq6 matches
    # the same for a full vMF restricted to the circle: ‖u‖² + r² A_2(κ r²).
    kappa = 2.0
    z = torch.tensor([[0.6, 0.8, 0.0]], dtype=torch.float64).expand(40000, 3).contiguous()
    zp = sample_restricted_positive(z, kappa, 1, concentration="eq6", generator=_gen(5))
    dots = (zp * z).sum(1)
    expected = 0.36 + 0.64 * _mean_resultant(kappa * 0.64, 2)
    assert abs(dots.mean().item() - expected) < 5 * dots.std().item() / 200


@pytest.mark.parametrize("concentration", ["code", "eq6", "kappa"])
def test_one_dimensional_slice_is_two_point_law(concentration: str) -> None:
    # d = 10, d_fixed = 9: ℓ = 1, K(z) = {(u, v), (u, −v)}. P(flip) = sigmoid(−2κ_eff): κ_eff = κ ("kappa"),
    # κ r² ("eq6"), 0 ("code": the paper's code draws the sign by a fair coin).
    kappa, n = 0.5, 40000
    z = sample_uniform_sphere(n, 10, generator=_gen(6), dtype=torch.float64)
    zp = sample_restricted_positive(z, kappa, 9, concentration=concentration, generator=_gen(7))
    flipped = (zp[:, 9] != z[:, 9]).double()
    assert torch.equal(zp[:, 9].abs(), z[:, 9].abs())
    assert torch.equal(zp[:, :9], z[:, :9])
    r2 = (z[:, 9] ** 2).numpy()
    keff = {"code": [0.0] * n, "eq6": list(kappa * r2), "kappa": [kappa] * n}[concentration]
    p = sum(1 / (1 + math.exp(2 * k)) for k in keff) / n
    assert abs(flipped.mean().item() - p) < 5 * math.sqrt(p * (1 - p) / n)


@pytest.mark.parametrize("d,d_fixed", [(3, 0), (3, 1), (10, 8)])
def test_code_and_kappa_agree_when_two_or_more_coordinates_are_free(d: int, d_fixed: int) -> None:
    z = sample_uniform_sphere(200, d, generator=_gen(14), dtype=torch.float64)
    a = sample_restricted_positive(z, 3.3, d_fixed, concentration="code", generator=_gen(15))
    b = sample_restricted_positive(z, 3.3, d_fixed, concentration="kappa", generator=_gen(15))
    assert torch.equal(a, b)


def test_kappa_zero_is_uniform_on_slice() -> None:
    z = torch.tensor([[0.0, 1.0, 0.0, 0.0]], dtype=torch.float64).expand(20000, 4).contiguous()
    zp = sample_restricted_positive(z, 0.0, 1, generator=_gen(8))
    assert zp[:, 1:].mean(0).abs().max() < 0.03


@pytest.mark.parametrize("rho,expected", [(0.0, 0), (0.25, 2), (0.5, 4), (0.75, 6), (1.0, 8)])
def test_rho_splits_negatives(rho: float, expected: int) -> None:
    assert n_constrained(8, rho) == expected
    z = sample_uniform_sphere(64, 3, generator=_gen(9), dtype=torch.float32)
    neg = sample_restricted_negatives(z, 8, 1, rho, generator=_gen(10))
    assert neg.shape == (64, 8, 3)
    assert torch.allclose(neg.norm(dim=2), torch.ones(64, 8), atol=1e-6)
    same_u = neg[:, :, 0] == z[:, None, 0]
    assert same_u[:, :expected].all()
    assert not same_u[:, expected:].any()  # uniform ones hit u exactly with probability 0


def test_uniform_slice_is_uniform_and_exact() -> None:
    z = sample_uniform_sphere(4, 5, generator=_gen(11), dtype=torch.float64)
    pts = sample_uniform_slice(z, 20000, 2, generator=_gen(12))
    assert torch.equal(pts[:, :, :2], z[:, None, :2].expand(4, 20000, 2))
    r = slice_radius(z, 2)
    assert torch.allclose(pts[:, :, 2:].norm(dim=2), r[:, None].expand(4, 20000))
    assert (pts[:, :, 2:].mean(1) / r[:, None]).abs().max() < 0.03
    ell1 = sample_uniform_slice(z, 1000, 4, generator=_gen(13))
    assert torch.equal(ell1[:, :, 4].abs(), z[:, None, 4].abs().expand(4, 1000))


def test_deterministic_given_generator() -> None:
    z = sample_uniform_sphere(30, 3, generator=_gen(0))
    a = sample_restricted_negatives(z, 5, 1, 0.4, generator=_gen(1))
    b = sample_restricted_negatives(z, 5, 1, 0.4, generator=_gen(1))
    assert torch.equal(a, b)


def test_bad_arguments_name_themselves() -> None:
    z = sample_uniform_sphere(3, 3, generator=_gen(0))
    with pytest.raises(ValueError, match="^d_fixed"):
        sample_restricted_positive(z, 1.0, 4)
    with pytest.raises(ValueError, match="^kappa"):
        sample_restricted_positive(z, -1.0, 1)
    with pytest.raises(ValueError, match="^concentration"):
        sample_restricted_positive(z, 1.0, 1, concentration="paper")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="^rho"):
        sample_restricted_negatives(z, 4, 1, 1.5)
    with pytest.raises(ValueError, match="^n_negatives"):
        n_constrained(-1, 0.5)
    with pytest.raises(TypeError, match="^z"):
        slice_radius([1.0], 1)  # type: ignore[arg-type]
