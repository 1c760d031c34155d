import math

import numpy as np
import pytest
import torch
from scipy import stats

from contrastlab.worlds.sphere import (
    log_sphere_area,
    log_vmf_density_ratio,
    log_vmf_normalizer,
    log_vmf_ratio_second_moment,
    sample_uniform_sphere,
    sample_vmf,
    vmf_mean_resultant_length,
)

N = 3000


def _scipy_draws(mu: np.ndarray, kappa: float, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if kappa == 0:
        return stats.uniform_direction(len(mu)).rvs(n, random_state=rng)
    return stats.vonmises_fisher(mu, kappa).rvs(n, random_state=rng)


@pytest.mark.parametrize("d", [2, 3, 10])
@pytest.mark.parametrize("kappa", [0.0, 1.0, 10.0, 1e4])
def test_vmf_sampler_matches_scipy(d: int, kappa: float) -> None:
    g = torch.Generator().manual_seed(1000 * d + int(kappa))
    mu = sample_uniform_sphere(1, d, generator=g, dtype=torch.float64)
    ours = sample_vmf(mu.expand(N, d).contiguous(), kappa, generator=g).numpy()
    ref = _scipy_draws(mu[0].numpy(), kappa, N, seed=d + int(kappa))
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-12)
    # Mean resultant length E<mu, X> = A_d(kappa), to 5 standard errors (for both samplers).
    w_ours, w_ref = ours @ mu[0].numpy(), ref @ mu[0].numpy()
    a = vmf_mean_resultant_length(d, kappa)
    se = max(w_ours.std(), 1e-12) / math.sqrt(N)
    assert abs(w_ours.mean() - a) < 5 * se
    assert abs(w_ref.mean() - a) < 5 * max(w_ref.std(), 1e-12) / math.sqrt(N)
    # Two-sample KS on 1 - w (the radial law, resolved even at kappa = 1e4) and on a random projection
    # of the full vector (checks the tangential direction is uniform).
    assert stats.ks_2samp(1.0 - w_ours, 1.0 - w_ref).pvalue > 1e-3
    u = np.random.default_rng(7).standard_normal(d)
    u /= np.linalg.norm(u)
    assert stats.ks_2samp(ours @ u, ref @ u).pvalue > 1e-3


def test_vmf_sampler_is_seeded() -> None:
    mu = torch.eye(3, dtype=torch.float64)
    a = sample_vmf(mu, 5.0, generator=torch.Generator().manual_seed(3))
    b = sample_vmf(mu, 5.0, generator=torch.Generator().manual_seed(3))
    assert torch.equal(a, b)


@pytest.mark.parametrize("kappa", [1e-9, 1e-3, 0.5, 1.0, 10 / 3, 30.0, 700.0, 1e4])
def test_log_normalizer_d3_closed_form(kappa: float) -> None:
    # C_3(kappa) = kappa / (4 pi sinh kappa); log sinh kappa = kappa + log1p(-e^{-2 kappa}) - log 2.
    log_sinh = kappa + math.log(-math.expm1(-2 * kappa)) - math.log(2)
    expected = math.log(kappa) - math.log(4 * math.pi) - log_sinh
    assert log_vmf_normalizer(3, kappa) == pytest.approx(expected, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("d", [2, 3, 5, 10, 64])
def test_log_normalizer_kappa_zero_is_uniform_and_continuous(d: int) -> None:
    assert log_vmf_normalizer(d, 0.0) == pytest.approx(-log_sphere_area(d), abs=1e-14)
    assert log_vmf_normalizer(d, 1e-10) == pytest.approx(-log_sphere_area(d), abs=1e-12)
    assert np.isfinite(log_vmf_normalizer(d, 1e4))


@pytest.mark.parametrize("d", [2, 3, 10])
@pytest.mark.parametrize("kappa", [0.3, 4.0, 50.0])
def test_log_normalizer_integrates_density_to_one(d: int, kappa: float) -> None:
    # int_S C e^{kappa t} dsigma = C |S^{d-2}| int_{-1}^{1} e^{kappa t} (1 - t^2)^{(d-3)/2} dt = 1.
    from scipy import integrate

    log_c = log_vmf_normalizer(d, kappa)
    area_lower = 2.0 if d == 2 else math.exp(log_sphere_area(d - 1))
    f = lambda t: math.exp(kappa * (t - 1) + log_c + kappa) * (1 - t * t) ** ((d - 3) / 2)  # noqa: E731
    val, _ = integrate.quad(f, -1, 1, limit=200)
    assert area_lower * val == pytest.approx(1.0, rel=1e-7)


def test_log_normalizer_matches_scipy_logpdf() -> None:
    mu = np.array([0.0, 0.6, 0.8, 0.0, 0.0])
    x = np.array([0.0, 0.8, -0.6, 0.0, 0.0])
    for kappa in (0.7, 12.0, 1e4):
        expected = stats.vonmises_fisher(mu, kappa).logpdf(x)
        assert log_vmf_normalizer(5, kappa) + kappa * float(mu @ x) == pytest.approx(expected, rel=1e-9)


def test_log_normalizer_rejects_bad_kappa() -> None:
    with pytest.raises(ValueError, match="kappa"):
        log_vmf_normalizer(3, -1.0)
    with pytest.raises(ValueError, match="kappa"):
        log_vmf_normalizer(3, float("nan"))
    with pytest.raises(ValueError, match="d"):
        log_vmf_normalizer(1, 1.0)


@pytest.mark.parametrize("kappa", [0.0, 1e-6, 1.0, 10 / 3, 10.0, 1e4])
def test_second_moment_d3_is_kappa_coth_kappa(kappa: float) -> None:
    expected = 1.0 if kappa == 0 else kappa / math.tanh(kappa) if kappa > 1e-4 else 1 + kappa**2 / 3
    assert math.exp(log_vmf_ratio_second_moment(3, kappa)) == pytest.approx(expected, rel=1e-10)


def test_second_moment_by_monte_carlo_d5() -> None:
    g = torch.Generator().manual_seed(0)
    z = sample_uniform_sphere(200_000, 5, generator=g, dtype=torch.float64)
    zp = sample_uniform_sphere(200_000, 5, generator=g, dtype=torch.float64)
    r2 = torch.exp(2 * log_vmf_density_ratio(z, zp, 2.0, pairwise=False))
    expected = math.exp(log_vmf_ratio_second_moment(5, 2.0))
    assert float(r2.mean()) == pytest.approx(expected, abs=4 * float(r2.std()) / math.sqrt(r2.numel()))


def test_density_ratio_integrates_to_one_under_uniform() -> None:
    g = torch.Generator().manual_seed(1)
    z = sample_uniform_sphere(1, 4, generator=g, dtype=torch.float64)
    zp = sample_uniform_sphere(400_000, 4, generator=g, dtype=torch.float64)
    r = torch.exp(log_vmf_density_ratio(z, zp, 3.0))[0]
    assert float(r.mean()) == pytest.approx(1.0, abs=4 * float(r.std()) / math.sqrt(r.numel()))


def test_mean_resultant_length_d3() -> None:
    for kappa in (0.01, 1.0, 10 / 3, 100.0):
        assert vmf_mean_resultant_length(3, kappa) == pytest.approx(1 / math.tanh(kappa) - 1 / kappa, rel=1e-8)
    assert vmf_mean_resultant_length(3, 0.0) == 0.0
