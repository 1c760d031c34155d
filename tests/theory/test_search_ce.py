import math

import pytest
import torch

from contrastlab.models import MLP
from contrastlab.search import log_partition
from contrastlab.theory.bounds import dcl_search_bound, prop1_bounds, prop2_bound
from contrastlab.theory.risk import embed, infonce_risk
from contrastlab.theory.search_ce import (
    empirical_model_kernel,
    empirical_search_ce,
    ground_truth_population_ce,
    k_gap_estimates,
    model_kernel_log_density,
    population_ce,
    search_cross_entropy,
)
from contrastlab.worlds.vmf_world import SphereWorld


def _unit(*shape: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.nn.functional.normalize(torch.randn(*shape, generator=g, dtype=torch.float64), dim=-1)


@pytest.mark.parametrize(("tau", "value"), [(0.3, -0.907), (0.5, -0.479), (1.0, -0.152)])
def test_ground_truth_ce_closed_form(tau: float, value: float) -> None:
    kappa = 1 / tau
    formula = -(1 / math.tanh(kappa) - 1 / kappa) / tau + math.log(tau * math.sinh(1 / tau))
    assert ground_truth_population_ce(3, kappa, tau) == pytest.approx(formula, rel=1e-12)
    assert round(formula, 3) == value


def test_population_ce_of_ground_truth_matches_closed_form() -> None:
    tau = 0.3
    world = SphereWorld(d=3, kappa=1 / tau, seed=1)
    est = population_ce(
        world.ground_truth_encoder(),
        world,
        temperature=tau,
        n_queries=2048,
        m_ref=16384,
        generator=world.generator(0),
    )
    assert abs(est.mean - (-0.907)) < 4 * est.se + 5e-4


def test_log_partition_streams_exactly() -> None:
    q, r = _unit(7, 4, seed=1), _unit(1000, 4, seed=2)
    expected = torch.logsumexp(q @ r.T / 0.2, dim=1) - math.log(1000)
    got = log_partition(q, r, temperature=0.2, block_size=97, average=True)
    torch.testing.assert_close(got, expected, rtol=1e-13, atol=1e-13)
    # The model kernel's density integrates to 1 against the reference's empirical measure.
    dens = model_kernel_log_density(q, r, got, temperature=0.2).exp().mean(1)
    torch.testing.assert_close(dens, torch.ones(7, dtype=torch.float64))
    torch.testing.assert_close(empirical_model_kernel(q, r, temperature=0.2).sum(1), torch.ones(7, dtype=torch.float64))


def test_search_cross_entropy_matches_eq9_loop() -> None:
    q, c = _unit(3, 5, seed=3), _unit(3, 11, 5, seed=4)
    log_w = torch.randn(3, 11, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    tau = 0.4
    got = search_cross_entropy(q, c, log_w, temperature=tau)
    for i in range(3):
        w = [math.exp(float(x)) for x in log_w[i]]
        s = [float(q[i] @ c[i, j]) for j in range(11)]
        first = -sum(wj * sj for wj, sj in zip(w, s, strict=True)) / (tau * sum(w))
        second = math.log(sum(math.exp(sj / tau) for sj in s) / 11)
        assert float(got[i]) == pytest.approx(first + second, rel=1e-12)
    # Per-query constants in log_w do not matter; a shared corpus equals its expansion.
    torch.testing.assert_close(search_cross_entropy(q, c, log_w + torch.arange(3.0)[:, None], temperature=tau), got)
    torch.testing.assert_close(
        search_cross_entropy(q, c[0], log_w, temperature=tau),
        search_cross_entropy(q, c[0].expand(3, 11, 5), log_w, temperature=tau),
    )


@pytest.fixture(scope="module")
def gap_tau1() -> dict:
    tau = 1.0
    world = SphereWorld(d=3, kappa=1 / tau, seed=2)
    return k_gap_estimates(
        world.ground_truth_encoder(),
        world,
        [1, 4, 32, 256],
        temperature=tau,
        n_groups=48,
        group_size=32,
        m_ref=4096,
        generator=world.generator(1),
    )


def test_k_gap_ground_truth_pop_ce_and_prop1(gap_tau1: dict) -> None:
    tau = 1.0
    truth = ground_truth_population_ce(3, 1.0, tau)
    m2 = SphereWorld(d=3, kappa=1.0).ratio_second_moment()
    for k, est in gap_tau1.items():
        assert abs(est["pop_ce"].mean - truth) < 4 * est["pop_ce"].se + 1e-4
        lo, hi = prop1_bounds(k, tau)
        g = est["pop_minus_risk"]
        assert lo - 4 * g.se <= g.mean <= hi + 4 * g.se
        s = est["search_minus_risk"]
        assert abs(s.mean) <= prop2_bound(k, tau, m2) + 4 * s.se
        s = est["search_minus_risk_dcl"]
        assert abs(s.mean) <= dcl_search_bound(k, tau, m2) + 4 * s.se
        # DCL gap is >= 0 (Jensen), eq. (11).
        assert est["pop_minus_risk_dcl"].mean >= -3 * est["pop_minus_risk_dcl"].se
    # The gap is clearly resolved and positive at small k, and shrinks with k.
    assert gap_tau1[4]["pop_minus_risk_dcl"].mean > 5 * gap_tau1[4]["pop_minus_risk_dcl"].se
    assert abs(gap_tau1[256]["pop_minus_risk"].mean) < abs(gap_tau1[32]["pop_minus_risk"].mean)
    # m = 1: the search CE is exactly 0 (one candidate, weight 1, log-mean-exp of one score minus it).
    assert gap_tau1[1]["search_ce"].mean == pytest.approx(0.0, abs=1e-12)


def test_k_gap_paired_estimates_agree_with_separate_estimators() -> None:
    tau = 0.5
    world = SphereWorld(d=3, kappa=1.5, seed=3)
    torch.manual_seed(0)
    enc = MLP(3, [16], 4).double().eval()
    est = k_gap_estimates(
        enc, world, [8], temperature=tau, n_groups=32, group_size=32, m_ref=2048, generator=world.generator(0)
    )[8]
    r = infonce_risk(enc, world, 8, temperature=tau, n=8000, generator=world.generator(1))
    assert abs(est["risk"].mean - r.mean) < 4 * math.hypot(est["risk"].se, r.se)
    s = empirical_search_ce(enc, world, 8, temperature=tau, n_groups=64, group_size=16, generator=world.generator(2))
    assert abs(est["search_ce"].mean - s.mean) < 4 * math.hypot(est["search_ce"].se, s.se)
    p = population_ce(enc, world, temperature=tau, n_queries=2048, m_ref=8192, generator=world.generator(3))
    assert abs(est["pop_ce"].mean - p.mean) < 4 * math.hypot(est["pop_ce"].se, p.se) + 1e-3
    # The paired gap equals the difference of its parts, group by group.
    assert est["search_minus_pop"].mean == pytest.approx(est["search_ce"].mean - est["pop_ce"].mean, abs=1e-12)


def test_embed_normalises_and_checks() -> None:
    out = embed(lambda x: 3 * x, torch.tensor([[3.0, 4.0]]))
    torch.testing.assert_close(out, torch.tensor([[0.6, 0.8]], dtype=torch.float64))
    with pytest.raises(ValueError, match="encoder"):
        embed(lambda x: torch.zeros_like(x), torch.ones(2, 2))
    with pytest.raises(ValueError, match="ks"):
        k_gap_estimates(lambda x: x, SphereWorld(), [0], temperature=1.0, generator=torch.Generator())


def test_k_gap_pop_ce_concentrated_positives() -> None:
    # κ = 20, τ = 0.05, d = 5: E[(dM/dπ)²] = 72, where the vMF positives carry most of the weight.
    world = SphereWorld(d=5, kappa=20.0, seed=5)
    est = k_gap_estimates(
        world.ground_truth_encoder(),
        world,
        [8],
        temperature=0.05,
        n_groups=24,
        group_size=32,
        m_ref=2048,
        generator=world.generator(0),
    )[8]["pop_ce"]
    assert abs(est.mean - ground_truth_population_ce(5, 20.0, 0.05)) < 4 * est.se + 1e-3
    assert est.se < 0.03
