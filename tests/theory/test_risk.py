import math

import pytest
import torch

from contrastlab.models import MLP
from contrastlab.theory.bounds import dcl_population_bounds, prop1_bounds
from contrastlab.theory.risk import embed, empirical_risk, infonce_risk, tuple_loss
from contrastlab.theory.search_ce import ground_truth_population_ce
from contrastlab.worlds.vmf_world import SphereWorld


def _naive_loss(a, p, negs, tau, variant):
    # Eq. (14) transcribed with Python loops.
    out = []
    for i in range(a.shape[0]):
        terms = [math.exp(float(a[i] @ (negs[i, j] - p[i])) / tau) for j in range(negs.shape[1])]
        k = len(terms)
        inner = sum(terms) / k + (1.0 / k if variant == "infonce" else 0.0)
        out.append(math.log(inner))
    return torch.tensor(out, dtype=torch.float64)


@pytest.mark.parametrize("variant", ["infonce", "dcl"])
@pytest.mark.parametrize("k", [1, 3, 17])
def test_tuple_loss_matches_naive_loop(variant: str, k: int) -> None:
    g = torch.Generator().manual_seed(k)
    n = lambda *s: torch.nn.functional.normalize(torch.randn(*s, generator=g, dtype=torch.float64), dim=-1)  # noqa: E731
    a, p, negs = n(6, 5), n(6, 5), n(6, k, 5)
    got = tuple_loss(a, p, negs, temperature=0.37, variant=variant)
    torch.testing.assert_close(got, _naive_loss(a, p, negs, 0.37, variant), rtol=1e-12, atol=1e-12)
    shared = negs[0]
    torch.testing.assert_close(
        tuple_loss(a, p, shared, temperature=0.37, variant=variant),
        tuple_loss(a, p, shared.expand(6, k, 5), temperature=0.37, variant=variant),
    )


def test_tuple_loss_closed_form_identical_embeddings() -> None:
    # All embeddings equal: every exponent is 0, so ℓ = log(1/k + 1) for InfoNCE and 0 for DCL.
    e = torch.ones(3, 4, dtype=torch.float64)
    negs = torch.ones(3, 8, 4, dtype=torch.float64)
    torch.testing.assert_close(
        tuple_loss(e, e, negs, temperature=0.2), torch.full((3,), math.log(1 + 1 / 8), dtype=torch.float64)
    )
    torch.testing.assert_close(
        tuple_loss(e, e, negs, temperature=0.2, variant="dcl"), torch.zeros(3, dtype=torch.float64)
    )


def test_tuple_loss_gradcheck() -> None:
    g = torch.Generator().manual_seed(0)
    a = torch.randn(3, 4, generator=g, dtype=torch.float64, requires_grad=True)
    p = torch.randn(3, 4, generator=g, dtype=torch.float64, requires_grad=True)
    negs = torch.randn(3, 5, 4, generator=g, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, y, z: tuple_loss(x, y, z, temperature=0.5), (a, p, negs))


def test_tuple_loss_errors_name_argument() -> None:
    e = torch.randn(3, 4)
    with pytest.raises(ValueError, match="temperature"):
        tuple_loss(e, e, torch.randn(3, 2, 4), temperature=0.0)
    with pytest.raises(ValueError, match="variant"):
        tuple_loss(e, e, torch.randn(3, 2, 4), temperature=1.0, variant="nce")
    with pytest.raises(ValueError, match="negatives"):
        tuple_loss(e, e, torch.randn(2, 2, 4), temperature=1.0)
    with pytest.raises(ValueError, match="positive"):
        tuple_loss(e, torch.randn(3, 5), torch.randn(3, 2, 4), temperature=1.0)
    with pytest.raises(TypeError, match="encoder"):
        embed(3, e)  # type: ignore[arg-type]


@pytest.mark.parametrize("k", [4, 64])
def test_mc_risk_of_ground_truth_within_prop1(k: int) -> None:
    tau = 1.0
    world = SphereWorld(d=3, kappa=1 / tau, seed=0)
    phi = world.ground_truth_encoder()
    pop = ground_truth_population_ce(3, 1 / tau, tau)
    r = infonce_risk(phi, world, k, temperature=tau, n=20_000, generator=world.generator(k))
    lo, hi = prop1_bounds(k, tau)
    assert lo - 4 * r.se <= pop - r.mean <= hi + 4 * r.se
    r_dcl = infonce_risk(phi, world, k, temperature=tau, variant="dcl", n=20_000, generator=world.generator(k))
    lo, hi = dcl_population_bounds(k, tau)
    assert lo - 4 * r_dcl.se <= pop - r_dcl.mean <= hi + 4 * r_dcl.se


def test_empirical_risk_on_fixed_tuples_equals_mean_tuple_loss() -> None:
    world = SphereWorld(d=3, kappa=2.0)
    t = world.sample_tuples(50, 6, generator=world.generator(0))
    phi = world.ground_truth_encoder()
    est = empirical_risk(phi, t.anchor, t.positive, t.negatives, temperature=0.5)
    direct = tuple_loss(t.anchor_latent, t.positive_latent, t.negatives_latent, temperature=0.5).mean()
    assert est.mean == pytest.approx(float(direct), abs=1e-6)
    assert est.n == 50


def test_grouped_risk_estimate_agrees_with_iid() -> None:
    # Groups sharing one negative set are still unbiased for R; compare with i.i.d. tuples.
    world = SphereWorld.from_mixing("linear", d=3, kappa=2.0, seed=4)
    torch.manual_seed(0)
    enc = MLP(world.input_dim, [16], 4).eval()
    iid = infonce_risk(enc, world, 16, temperature=0.5, n=8000, generator=world.generator(1))
    grouped = infonce_risk(enc, world, 16, temperature=0.5, n=8192, group_size=32, generator=world.generator(2))
    assert grouped.n == 256 and iid.n == 8000
    assert abs(iid.mean - grouped.mean) < 4 * math.hypot(iid.se, grouped.se)
    with pytest.raises(ValueError, match="group_size"):
        infonce_risk(enc, world, 16, temperature=0.5, group_size=0, generator=world.generator(2))
