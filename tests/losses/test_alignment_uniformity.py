import math

import pytest
import torch

from contrastlab.losses import alignment, uniformity


def test_alignment_closed_form():
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    y = torch.tensor([[0.0, 1.0], [0.0, 1.0]], dtype=torch.float64)
    # ‖e1 − e2‖² = 2, ‖e2 − e2‖² = 0 ⇒ mean 1; α = 1 ⇒ (√2 + 0)/2
    assert float(alignment(x, y)) == pytest.approx(1.0)
    assert float(alignment(x, y, alpha=1.0)) == pytest.approx(math.sqrt(2) / 2)


def test_uniformity_loop_and_bounds():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(7, 3, generator=g, dtype=torch.float64)
    u = x / x.norm(dim=1, keepdim=True)
    terms = [math.exp(-2 * float((u[i] - u[j]).pow(2).sum())) for i in range(7) for j in range(i + 1, 7)]
    assert float(uniformity(x)) == pytest.approx(math.log(sum(terms) / len(terms)), rel=1e-10)
    # antipodal pair: ‖u − v‖² = 4 ⇒ −8 at t = 2; identical points ⇒ 0
    assert float(uniformity(torch.tensor([[1.0, 0.0], [-1.0, 0.0]]))) == pytest.approx(-8.0)
    assert float(uniformity(torch.ones(3, 2))) == pytest.approx(0.0, abs=1e-6)


def test_gradients_finite_for_coincident_points():
    x = torch.ones(4, 3, dtype=torch.float64, requires_grad=True)
    uniformity(x).backward()
    assert torch.isfinite(x.grad).all()
    x2 = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a: uniformity(a), (x2,))
    y2 = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: alignment(a, b), (x2, y2))


def test_errors():
    with pytest.raises(ValueError, match="x must have at least 2 rows"):
        uniformity(torch.randn(1, 3))
    with pytest.raises(ValueError, match="y must have the same shape"):
        alignment(torch.randn(2, 3), torch.randn(3, 3))
