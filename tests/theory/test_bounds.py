import math

import pytest
import torch

from contrastlab.models import MLP
from contrastlab.theory.bounds import (
    b_tau,
    concentration_term,
    continuity_bound,
    continuity_check,
    dcl_population_bounds,
    lemma1_lipschitz,
    prop1_bounds,
    prop2_bound,
    rademacher_bound,
    theorem1_terms,
)
from contrastlab.worlds.vmf_world import SphereWorld


def test_reference_numbers() -> None:
    # Values quoted in the reference notes (§1.4).
    assert prop1_bounds(256, 0.3)[1] == pytest.approx(300.7, abs=0.1)
    assert prop1_bounds(256, 1.0)[1] == pytest.approx(0.0199, abs=1e-4)
    m2 = 2.0 / math.tanh(2.0)  # d = 3, κ = 1/τ = 2
    assert prop2_bound(256, 0.5, m2) == pytest.approx(0.258, abs=5e-4)


def test_prop1_formulas_and_extreme_tau() -> None:
    lo, hi = prop1_bounds(10, 0.7)
    assert lo == pytest.approx(-math.log(1 + math.exp(2 / 0.7) / 10), rel=1e-14)
    assert hi == pytest.approx((math.exp(2 / 0.7) - 1) ** 2 / 80, rel=1e-12)
    lo, hi = prop1_bounds(1000, 0.001)  # e^{2000} overflows a float: bounds stay finite / inf, never NaN
    assert lo == pytest.approx(-(2000 - math.log(1000)), rel=1e-12) and hi == math.inf
    assert dcl_population_bounds(4, 0.1) == (0.0, 20.0)  # Lemma 4 caps eq. (11)


def _random_pair(seed: int, eps: float) -> tuple:
    torch.manual_seed(seed)
    f = MLP(3, [32], 6).double()
    f2 = MLP(3, [32], 6).double()
    f2.load_state_dict(f.state_dict())
    with torch.no_grad():
        for p in f2.parameters():
            p.add_(eps * torch.randn_like(p))
    return f, f2


@pytest.mark.parametrize("tau", [0.1, 0.5, 2.0])
@pytest.mark.parametrize("beta", [1.0, 2.0, "2/tau", math.inf])
def test_prop4_holds_on_random_pairs(tau: float, beta: float | str) -> None:
    b = max(1.0, 2 / tau) if beta == "2/tau" else beta
    world = SphereWorld(d=3, kappa=3.0)
    t = world.sample_tuples(64, 12, generator=world.generator(0))
    worst = 0.0
    for seed, eps in enumerate([1e-3, 1e-2, 0.1, 1.0, 10.0]):
        f, f2 = _random_pair(seed, eps)
        n = lambda m, x: torch.nn.functional.normalize(m(x.double()), dim=-1)  # noqa: E731
        phi = (n(f, t.anchor), n(f, t.positive), n(f, t.negatives.reshape(-1, 3)).reshape(64, 12, -1))
        phi2 = (n(f2, t.anchor), n(f2, t.positive), n(f2, t.negatives.reshape(-1, 3)).reshape(64, 12, -1))
        with torch.no_grad():
            lhs, bound = continuity_check(phi, phi2, temperature=tau, beta=b)
        assert bool((lhs <= bound * (1 + 1e-12)).all())
        worst = max(worst, float((lhs / bound).max()))
    if math.exp(2 / (b * tau)) < 10:  # where e^{2/(βτ)} is moderate the comparison is not trivially loose
        assert worst > 1e-2


def test_continuity_bound_power_mean() -> None:
    da, dp = torch.zeros(1, 2), torch.zeros(1, 2)
    dn = torch.tensor([[[1.0, 0.0], [0.0, 0.0], [3.0, 4.0]]])  # norms 1, 0, 5
    tau = 0.5
    got = continuity_bound(da, dp, dn, temperature=tau, beta=2.0)
    expected = 3 / tau * math.exp(2 / (2 * tau)) * math.sqrt((1 + 0 + 25) / 3)
    assert float(got) == pytest.approx(expected, rel=1e-6)
    assert float(continuity_bound(da, dp, dn, temperature=tau, beta=math.inf)) == pytest.approx(3 / tau * 5)
    assert float(continuity_bound(da, dp, torch.zeros(1, 3, 2), temperature=tau, beta=3.0)) == 0.0
    with pytest.raises(ValueError, match="beta"):
        continuity_bound(da, dp, dn, temperature=tau, beta=0.5)


def test_b_tau_and_generalisation_terms() -> None:
    a = torch.tensor([[3.0, 4.0]])  # norm 5
    p = torch.tensor([[0.0, 2.0]])  # norm 2
    n = torch.tensor([[[1.0, 0.0], [0.0, 2.0]]])  # norms 1, 2
    tau = 0.5  # exponent 2/(1∧τ) = 4
    assert b_tau(a, p, n, temperature=tau) == pytest.approx(5 + 2 + ((1 + 16) / 2) ** 0.25)
    assert b_tau(a, p, n, temperature=2.0) == pytest.approx(5 + 2 + ((1 + 4) / 2) ** 0.5)
    assert lemma1_lipschitz(0.5, 2.0, 3.0) == pytest.approx(4 * math.e / 0.5 * 6)
    aa = math.e * 1.5 * 2.0 * 0.1
    expected = (
        96 / 0.5 * math.sqrt(100 / 1000) * min(aa * math.sqrt(math.log(3) + 1), math.sqrt(math.log(1 + 2 * aa) + 1))
    )
    assert rademacher_bound(0.5, 100, 1000, 1.5, 2.0, 0.1) == pytest.approx(expected)
    assert concentration_term(0.5, 1000, 0.05) == pytest.approx(24 * math.sqrt(math.log(40) / 2000))
    t = theorem1_terms(
        temperature=0.5,
        k=64,
        n=1000,
        d_theta=100,
        radius=1.5,
        b_tau_value=2.0,
        c_phi=0.1,
        ratio_second_moment=2.0,
    )
    assert t["total_excess"] == pytest.approx(t["complexity"] + t["concentration"] + t["finite_k"])
    assert t["finite_k"] == pytest.approx(prop2_bound(64, 0.5, 2.0))
    with pytest.raises(ValueError, match="delta"):
        concentration_term(0.5, 10, 1.5)
    with pytest.raises(ValueError, match="d_theta"):
        rademacher_bound(0.5, 0, 10, 1.0, 1.0, 1.0)
