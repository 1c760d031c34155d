import math

import pytest
import torch

from contrastlab.worlds.mixing import (
    INVERSE_ENCODERS,
    MIXINGS,
    LeakyMLPMixing,
    LinearMixing,
    MonomialMixing,
    PatchesMixing,
    make_inverse_encoder,
    make_mixing,
    random_orthogonal,
)
from contrastlab.worlds.sphere import sample_uniform_sphere


def _z(n: int, d: int, seed: int = 0, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return sample_uniform_sphere(n, d, generator=torch.Generator().manual_seed(seed), dtype=dtype)


@pytest.mark.parametrize("name", list(MIXINGS))
@pytest.mark.parametrize("d", [3, 5])
def test_inverse_is_exact(name: str, d: int) -> None:
    g = make_mixing(name, d, seed=1)
    z = _z(4000, d)
    x = g(z)
    assert x.shape == (4000, g.out_dim) and g.in_dim == d
    assert torch.isfinite(x).all()
    assert (g.inverse(x) - z).abs().max() < 1e-5
    # float32 in, float32 out, still inverted to 1e-5.
    z32 = z.float()
    x32 = g(z32)
    assert x32.dtype == torch.float32
    assert (g.inverse(x32) - z32).abs().max() < 1e-5


@pytest.mark.parametrize("name", list(MIXINGS))
def test_deterministic_and_seeded(name: str) -> None:
    z = _z(50, 3)
    a, b = make_mixing(name, 3, seed=7)(z), make_mixing(name, 3, seed=7)(z)
    assert torch.equal(a, b)
    if name in ("linear", "mlp"):
        assert not torch.allclose(a, make_mixing(name, 3, seed=8)(z))


def test_linear_conditioning_and_shape() -> None:
    g = make_mixing("linear", 3, seed=3)
    assert isinstance(g, LinearMixing)
    assert g.matrix.shape == (7, 3)
    s = torch.linalg.svdvals(g.matrix)
    assert s.min() >= 0.5 - 1e-12 and s.max() <= 1.5 + 1e-12
    assert torch.allclose(g.pinv @ g.matrix, torch.eye(3, dtype=torch.float64), atol=1e-12)
    with pytest.raises(ValueError, match="^out_dim"):
        make_mixing("linear", 3, out_dim=2)


def test_mlp_conditioning_bounds() -> None:
    g = make_mixing("mlp", 4, seed=2)
    assert isinstance(g, LeakyMLPMixing)
    for w in g.layer_weights():
        s = torch.linalg.svdvals(w)
        assert s.min() >= 0.5 - 1e-12 and s.max() <= 1.5 + 1e-12
    # Jacobian singular values within [0.5^3 * 0.2^2, 1.5^3] at random points.
    for z in _z(20, 4, seed=5):
        jac = torch.autograd.functional.jacobian(lambda v: g(v[None])[0], z)
        s = torch.linalg.svdvals(jac)
        assert s.min() >= 0.5**3 * 0.2**2 - 1e-12 and s.max() <= 1.5**3 + 1e-12
    # The map is genuinely non-linear (some points hit both sides of the kink).
    z = _z(200, 4)
    lin = z @ torch.linalg.multi_dot(list(reversed(g.layer_weights()))).T
    assert (g(z) - lin).abs().max() > 1e-2


def test_spiral_is_rotation_by_z3() -> None:
    g = make_mixing("spiral", 3, n_periods=2.0)
    z = torch.tensor([[1.0, 0.0, 0.25]], dtype=torch.float64)  # θ = 2π/4 = π/2: (1, 0) -> (0, 1)
    assert torch.allclose(g(z), torch.tensor([[0.0, 1.0, 0.25]], dtype=torch.float64), atol=1e-15)
    # Norm-preserving: stays on the sphere.
    z = _z(100, 3)
    assert torch.allclose(g(z).norm(dim=1), torch.ones(100, dtype=torch.float64))


def test_patches_slices_and_quarter_turn() -> None:
    g = make_mixing("patches", 3, n_slices=4)
    assert isinstance(g, PatchesMixing)
    t = torch.tensor([0.0, 0.1, 0.3, 0.55, 0.8, 1.0, -0.8])
    expected = torch.tensor([math.pi / 4, math.pi / 4, math.pi / 3, math.pi / 2, math.pi, math.pi, math.pi])
    assert torch.allclose(g.slice_angle(t), expected)
    z = _z(300, 3)
    assert torch.allclose(g(z).norm(dim=1), torch.ones(300, dtype=torch.float64))


def test_bad_arguments_name_themselves() -> None:
    with pytest.raises(ValueError, match="^name"):
        make_mixing("nope", 3)
    with pytest.raises(ValueError, match="^latent_dim"):
        make_mixing("spiral", 2)
    with pytest.raises(ValueError, match="^z"):
        make_mixing("identity", 3)(torch.zeros(2, 4))
    with pytest.raises(ValueError, match="^slope"):
        make_mixing("mlp", 3, slope=0.0)


def test_random_orthogonal() -> None:
    q = random_orthogonal(6, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(q.T @ q, torch.eye(6, dtype=torch.float64), atol=1e-12)


@pytest.mark.parametrize("name", list(INVERSE_ENCODERS))
def test_inverse_encoders_shapes_grads_and_seed(name: str) -> None:
    g = make_mixing(name, 3, seed=0)
    f = make_inverse_encoder(g, seed=4)
    x = g(_z(16, 3, dtype=torch.float32))
    out = f(x)
    assert out.shape == (16, 3)
    out.square().sum().backward()
    assert all(p.grad is not None for p in f.parameters())
    f2 = make_inverse_encoder(g, seed=4)
    pairs = zip(f.state_dict().values(), f2.state_dict().values(), strict=True)
    assert all(torch.equal(a, b) for a, b in pairs)


def test_inverse_spiral_contains_exact_inverse() -> None:
    g = make_mixing("spiral", 3)
    f = make_inverse_encoder(g)
    with torch.no_grad():
        f.control.weight.copy_(torch.tensor([[0.0, 0.0, 1.0]]))
        f.control.bias.zero_()
        f.out.weight.copy_(torch.eye(3))
        f.out.bias.zero_()
    z = _z(100, 3, dtype=torch.float32)
    assert (f(g(z)) - z).abs().max() < 1e-5


def test_inverse_mlp_contains_exact_inverse() -> None:
    g = make_mixing("mlp", 3, seed=1)
    f = make_inverse_encoder(g)
    with torch.no_grad():
        for i, layer in enumerate(f.layers):
            layer.weight.copy_(getattr(g, f"weight_inv_{g.n_layers - 1 - i}").float())
            layer.bias.zero_()
    z = _z(100, 3, dtype=torch.float32)
    assert (f(g(z)) - z).abs().max() < 1e-4


def test_make_inverse_encoder_rejects_foreign_module() -> None:
    with pytest.raises(TypeError, match="^mixing"):
        make_inverse_encoder(torch.nn.Identity())  # type: ignore[arg-type]


def test_monomial_is_the_papers_10d_to_70d_embedding() -> None:
    g = make_mixing("monomial", 10)
    assert isinstance(g, MonomialMixing)
    assert (g.in_dim, g.out_dim, g.degree) == (10, 70, 7)
    z = _z(64, 10)
    x = g(z)
    assert x.shape == (64, 70)
    # entry i·D + (p − 1) is z_i^p (float64 pow of the same base: exact for p = 1, 2 and to rounding above)
    for i in range(10):
        for p in range(1, 8):
            torch.testing.assert_close(x[:, i * 7 + p - 1], z[:, i] ** p, rtol=1e-14, atol=0.0)
    assert torch.equal(x[:, ::7], z)  # the degree-1 block is z itself, so g is injective
    assert torch.equal(g.inverse(x), z)
    assert x.abs().max() <= 1.0  # |z_i| <= 1 on the sphere, so every power is in [−1, 1]


@pytest.mark.parametrize("degree", [1, 3])
def test_monomial_degree_and_input_checks(degree: int) -> None:
    g = make_mixing("monomial", 3, degree=degree)
    assert g.out_dim == 3 * degree
    z = _z(5, 3, dtype=torch.float32)
    assert torch.equal(g.inverse(g(z)), z)
    assert not any(True for _ in g.parameters())  # no learnable or random parameters
    with pytest.raises(ValueError, match="^degree"):
        make_mixing("monomial", 3, degree=0)
    with pytest.raises(ValueError, match="^z"):
        g(torch.zeros(2, 4))
