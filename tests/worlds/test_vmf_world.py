import math

import numpy as np
import pytest
import torch
from scipy import stats

from contrastlab.theory.search_ce import idealised_search
from contrastlab.worlds.vmf_world import SphereWorld


def _linear_world(seed: int = 0) -> tuple[SphereWorld, torch.Tensor]:
    # A random injective linear map R^3 -> R^7 and its left inverse.
    w = torch.randn(7, 3, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    pinv = torch.linalg.pinv(w)
    world = SphereWorld(d=3, kappa=2.5, mixing=lambda z: z @ w.T, inverse=lambda x: x @ pinv.T, seed=seed)
    return world, w


def test_tuples_shapes_and_determinism() -> None:
    world, _ = _linear_world()
    t1 = world.sample_tuples(5, 4, generator=world.generator(2))
    t2 = world.sample_tuples(5, 4, generator=world.generator(2))
    assert t1.anchor.shape == (5, 7) and t1.positive.shape == (5, 7) and t1.negatives.shape == (5, 4, 7)
    assert t1.negatives_latent.shape == (5, 4, 3) and t1.n == 5 and t1.k == 4
    assert torch.equal(t1.negatives, t2.negatives) and torch.equal(t1.positive_latent, t2.positive_latent)
    t3 = world.sample_tuples(5, 4, generator=world.generator(3))
    assert not torch.equal(t1.anchor, t3.anchor)
    assert world.input_dim == 7


def test_positives_follow_vmf_around_anchor() -> None:
    world = SphereWorld(d=4, kappa=6.0)
    _, _, za, zp = world.sample_pairs(20_000, generator=world.generator(0))
    cos = (za * zp).sum(1)
    assert float(cos.mean()) == pytest.approx(
        world.mean_resultant_length(), abs=4 * float(cos.std()) / math.sqrt(20_000)
    )


def test_ground_truth_encoder_recovers_latents() -> None:
    world, _ = _linear_world()
    x, z = world.sample(100, generator=world.generator(0))
    phi = world.ground_truth_encoder()
    torch.testing.assert_close(phi(x.to(torch.float64)), z, atol=1e-6, rtol=0)
    q, _ = torch.linalg.qr(torch.randn(5, 3, dtype=torch.float64))
    phi_a = world.ground_truth_encoder(rotation=q)
    torch.testing.assert_close(phi_a(x.to(torch.float64)), z @ q.T, atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match="rotation"):
        world.ground_truth_encoder(rotation=2 * q)


def test_idealised_search_is_softmax_of_kappa_cosines_via_jacobians() -> None:
    """M̂_m from an explicit x-space density ratio with Jacobians equals softmax(κ⟨ζ_q, ζ_i⟩).

    In x-space both M(x, ·) and π_data are densities on the surface g(S²) ⊂ R^7 with respect to its area
    measure: p(x') = p_sphere(ζ') / J(ζ'), J(ζ) = sqrt(det(Tᵀ Wᵀ W T)) for an orthonormal tangent basis T
    at ζ. The vMF density comes from scipy, not from our normaliser.
    """
    world, w = _linear_world(1)
    g = world.generator(5)
    xq, zq = world.sample(4, generator=g)
    xi, zi = world.sample(50, generator=g)

    def jac(z: np.ndarray) -> float:
        t = np.linalg.svd(np.eye(3) - np.outer(z, z))[0][:, :2]  # tangent basis at z
        return math.sqrt(np.linalg.det(t.T @ w.numpy().T @ w.numpy() @ t))

    area = 4 * math.pi
    for q in range(4):
        vmf = stats.vonmises_fisher(zq[q].numpy(), world.kappa)
        ratios = []
        for i in range(50):
            zz = zi[i].numpy()
            p_m = vmf.pdf(zz) / jac(zz)  # density of M(x_q, ·) at x_i on g(S²)
            p_pi = (1.0 / area) / jac(zz)  # density of π_data at x_i on g(S²)
            ratios.append(p_m / p_pi)
        ratios = np.array(ratios)
        direct = ratios / ratios.sum()
        softmax = torch.softmax(world.kappa * (zq[q] @ zi.T), dim=0).numpy()
        np.testing.assert_allclose(direct, softmax, rtol=1e-9)
        # The world's own ratio (through g⁻¹) is the same, normaliser included.
        log_r = world.log_density_ratio_x(xq[q : q + 1].to(torch.float64), xi.to(torch.float64))[0]
        np.testing.assert_allclose(np.exp(log_r.numpy()), ratios, rtol=1e-5)
        np.testing.assert_allclose(idealised_search(log_r[None])[0].numpy(), softmax, rtol=1e-5)


def test_second_moment_d3() -> None:
    assert SphereWorld(d=3, kappa=1 / 0.3).ratio_second_moment() == pytest.approx(3.342, abs=5e-4)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [({"d": 1}, "d"), ({"kappa": -1.0}, "kappa"), ({"mixing": 3}, "mixing"), ({"seed": 1.5}, "seed")],
)
def test_world_validates(kwargs: dict, name: str) -> None:
    with pytest.raises((ValueError, TypeError), match=name):
        SphereWorld(**kwargs)


def test_unmix_needs_inverse() -> None:
    world = SphereWorld(d=3, mixing=lambda z: 2 * z)
    x, _ = world.sample(3, generator=world.generator(0))
    with pytest.raises(ValueError, match="inverse"):
        world.unmix(x)
