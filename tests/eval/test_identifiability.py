import math

import numpy as np
import pytest
import torch

from contrastlab.eval.identifiability import ape, identifiability_metrics, linear_r2, mcc, orthogonality_error
from contrastlab.worlds.mixing import random_orthogonal
from contrastlab.worlds.sphere import sample_uniform_sphere


def _circle(n: int) -> np.ndarray:
    phi = 2 * np.pi * np.arange(n) / n
    return np.stack([np.cos(phi), np.sin(phi)], axis=1)


def test_orthogonal_map_is_perfect() -> None:
    g = torch.Generator().manual_seed(0)
    z = sample_uniform_sphere(2000, 5, generator=g, dtype=torch.float64)
    q = random_orthogonal(5, generator=g)
    zh = z @ q.T
    assert linear_r2(z, zh) == pytest.approx(1.0, abs=1e-12)
    assert ape(z, zh) == pytest.approx(0.0, abs=1e-12)
    assert orthogonality_error(z, zh) == pytest.approx(0.0, abs=1e-10)
    m = identifiability_metrics(z, zh)
    assert m["r2"] == pytest.approx(1.0, abs=1e-12) and m["orthogonality_error"] < 1e-10


def test_permutation_with_signs_gives_mcc_one() -> None:
    z = sample_uniform_sphere(1000, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    zh = -z[:, [2, 0, 3, 1]] * torch.tensor([1.0, -1.0, 1.0, -1.0], dtype=torch.float64)
    assert mcc(z, zh) == pytest.approx(1.0, abs=1e-12)
    assert orthogonality_error(z, zh) == pytest.approx(0.0, abs=1e-10)
    # a wider embedding with an extra noise coordinate still matches
    extra = torch.cat([zh, torch.randn(1000, 1, dtype=torch.float64)], dim=1)
    assert mcc(z, extra) == pytest.approx(1.0, abs=1e-12)


def test_rotation_mcc_is_cosine() -> None:
    # Uniform grid on S¹: Pearson(z_1, (R_θ z)_1) = cos θ exactly, Pearson(z_1, (R_θ z)_2) = sin θ.
    z = _circle(360)
    th = 0.3
    r = np.array([[np.cos(th), -np.sin(th)], [np.sin(th), np.cos(th)]])
    assert mcc(z, z @ r.T) == pytest.approx(math.cos(th), abs=1e-12)
    assert mcc(z, z @ r.T @ np.array([[0, 1], [1, 0]])) == pytest.approx(math.cos(th), abs=1e-12)


def test_anisotropic_map_analytic_values() -> None:
    n = 400
    z = _circle(n)
    a, b = 1.5, 0.5
    zh = z * np.array([a, b])
    # least-squares map is diag(a, b) exactly: distance to O(2) is √((a−1)² + (b−1)²)
    assert orthogonality_error(z, zh) == pytest.approx(math.hypot(a - 1, b - 1), abs=1e-12)
    assert mcc(z, zh) == pytest.approx(1.0, abs=1e-12)
    assert linear_r2(z, zh) == pytest.approx(1.0, abs=1e-12)
    # APE without normalisation: |z_iᵀ(I − A²)z_j| = |(1−a²) c_i c_j + (1−b²) s_i s_j|, loop reference
    c, s = z[:, 0], z[:, 1]
    tot = sum(abs((1 - a * a) * c[i] * c[j] + (1 - b * b) * s[i] * s[j]) for i in range(n) for j in range(n) if i != j)
    assert ape(z, zh, normalize=False) == pytest.approx(tot / (n * (n - 1)), rel=1e-12)
    # isotropic scaling by √s: APE = |1 − s| · mean_{k≠0} |cos(2πk/n)| (closed form on the grid)
    k = np.arange(1, n)
    expected = 0.75 * np.abs(np.cos(2 * np.pi * k / n)).mean()
    assert ape(z, z * 0.5, normalize=False) == pytest.approx(expected, rel=1e-12)
    assert ape(z, z * 0.5) == pytest.approx(0.0, abs=1e-12)  # normalised: scaling is invisible


def test_projection_loses_half_the_variance() -> None:
    # ẑ = (z_1, 0): z_1 is recovered (R² = 1), z_2 = sin φ is uncorrelated with cos φ (R² ≈ 0).
    z = _circle(2000)
    zh = np.stack([z[:, 0], np.zeros(2000)], axis=1)
    assert linear_r2(z, zh) == pytest.approx(0.5, abs=0.01)
    assert orthogonality_error(z, zh) == pytest.approx(1.0, abs=1e-12)


def test_random_embedding_scores_low() -> None:
    g = torch.Generator().manual_seed(3)
    z = sample_uniform_sphere(3000, 3, generator=g, dtype=torch.float64)
    zh = torch.randn(3000, 3, generator=g, dtype=torch.float64)
    assert linear_r2(z, zh) < 0.01
    assert mcc(z, zh) < 0.1


def test_bad_arguments_name_themselves() -> None:
    z = np.zeros((10, 3))
    with pytest.raises(ValueError, match="^z_hat"):
        mcc(z, np.zeros((9, 3)))
    with pytest.raises(ValueError, match="^test_fraction"):
        linear_r2(z, z, test_fraction=1.0)
    with pytest.raises(TypeError, match="^z"):
        ape([[1.0]], z)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="^max_rows"):
        ape(z, z, max_rows=1)
