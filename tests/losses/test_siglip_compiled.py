"""SigLIP's compiled element-wise pass against the eager one (the reference): loss and every gradient,
ragged last blocks, a forward without gradient, unequal row weights, and logits past the eager path's
overflow fallback. Each dtype's first call compiles (one function for a gradient, one without), so one
float64 comparison, compiling one function, stays in the fast suite and the rest are marked slow."""

import sys

import pytest
import torch

from contrastlab.losses import siglip
from contrastlab.losses.siglip import SigLIPLoss


def _run(a, p, t, b, **kw):
    a, p = a.clone().requires_grad_(), p.clone().requires_grad_()
    t, b = t.clone().requires_grad_(), b.clone().requires_grad_()
    loss = siglip(a, p, temperature=t, bias=b, chunk_size=5, **kw)
    w = torch.linspace(0.5, 1.5, loss.numel(), dtype=loss.dtype).reshape(loss.shape)
    return (loss.detach(), *torch.autograd.grad((loss * w).sum(), [a, p, t, b]))


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_compiled_pass_equals_the_eager_pass(dtype, reduction):
    """Blocks of 5 of 13 rows (a ragged last block), a learnable τ and bias: the compiled pass gives the
    eager loss and gradients to rounding (float64 1e-12; float32 within the eager pass's own error, 3·16
    units in the last place of its softplus sums, with margin)."""
    g = torch.Generator().manual_seed(0)
    a = torch.randn(13, 6, generator=g, dtype=dtype)
    p = a + 0.5 * torch.randn(13, 6, generator=g, dtype=dtype)
    t, b = torch.tensor(0.1, dtype=dtype), torch.tensor(-10.0, dtype=dtype)
    tol = {"rtol": 1e-12, "atol": 1e-12} if dtype == torch.float64 else {"rtol": 2e-5, "atol": 1e-6}
    for x, y in zip(
        _run(a, p, t, b, reduction=reduction, compiled=True), _run(a, p, t, b, reduction=reduction), strict=True
    ):
        torch.testing.assert_close(x, y, **tol)
    with torch.no_grad():
        torch.testing.assert_close(
            siglip(a, p, chunk_size=5, reduction=reduction, compiled=True),
            siglip(a, p, chunk_size=5, reduction=reduction),
            **tol,
        )


def test_compiled_pass_equals_the_eager_pass_fast(monkeypatch):
    """Float64, blocks of 5 of 13 rows, a mean with learnable τ and bias: the compiled function runs
    (counted) and gives the eager loss and gradients to 1e-12 (the forward alone: the slow tests)."""
    siglip_module = sys.modules["contrastlab.losses.siglip"]
    calls = []
    real = siglip_module.compiled_blocks

    def counted():
        loss_block, loss_grad_block = real()
        return (
            lambda neg: calls.append("loss") or loss_block(neg),
            lambda neg: calls.append("grad") or loss_grad_block(neg),
        )

    monkeypatch.setattr(siglip_module, "compiled_blocks", counted)
    g = torch.Generator().manual_seed(2)
    a = torch.randn(13, 6, generator=g, dtype=torch.float64)
    p = a + 0.5 * torch.randn(13, 6, generator=g, dtype=torch.float64)
    t, b = torch.tensor(0.1, dtype=torch.float64), torch.tensor(-10.0, dtype=torch.float64)
    for x, y in zip(_run(a, p, t, b, compiled=True), _run(a, p, t, b), strict=True):
        torch.testing.assert_close(x, y, rtol=1e-12, atol=1e-12)
    assert calls == ["grad"] * 3  # three blocks, the gradient made ahead


@pytest.mark.slow
def test_compiled_pass_needs_no_overflow_fallback():
    """Logits up to 10⁴ (τ = 1e-4) overflow the eager pass's products, which then recomputes the block; the
    compiled pass's stable softplus gives the same loss and gradients directly."""
    g = torch.Generator().manual_seed(1)
    a = torch.randn(9, 4, generator=g, dtype=torch.float64)
    p = a + 0.3 * torch.randn(9, 4, generator=g, dtype=torch.float64)
    t, b = torch.tensor(1e-4, dtype=torch.float64), torch.tensor(0.0, dtype=torch.float64)
    for x, y in zip(_run(a, p, t, b, compiled=True), _run(a, p, t, b), strict=True):
        torch.testing.assert_close(x, y, rtol=1e-12, atol=1e-12)


def test_module_passes_compiled_and_validates_it():
    assert SigLIPLoss(compiled=True).compiled
    with pytest.raises(TypeError, match="compiled"):
        SigLIPLoss(compiled=1)
    with pytest.raises(ValueError, match="^compiled"):
        siglip(torch.randn(3, 2), torch.randn(3, 2), compiled="yes")  # a string other than "auto"
