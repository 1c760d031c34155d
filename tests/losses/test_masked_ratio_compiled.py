"""The masked InfoNCE sweep's compiled row-softmax pass against the eager passes (the reference).

Loss and gradients through ``info_nce`` (a mean: the gradient made in the forward) and through
``masked_log_ratio`` with unequal upstream row gradients (the backward's second sweep), over several
ragged blocks, with duplicates as a list of entries and without extra positives; the cases the compiled
pass does not cover (DCL, weights, a dense mask) run the eager passes unchanged. Each dtype's first call
compiles one small function (seconds), so the float64 and float32 comparisons stay in the fast suite.
"""

import pytest
import torch

from contrastlab.losses import info_nce, masked_ratio
from contrastlab.losses.masked_ratio import masked_log_ratio

TAU = 0.3
N = 37


def _data(dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(N, 8, generator=g, dtype=dtype)
    p = a + 0.7 * torch.randn(N, 8, generator=g, dtype=dtype)
    label = torch.arange(N) // 2  # rows 2i and 2i + 1 are duplicates: extra positives as a list of entries
    mask = label[:, None] == label[None, :]
    return a, p, mask


def _loss_and_grads(a, p, **kw):
    a, p = a.clone().requires_grad_(), p.clone().requires_grad_()
    loss = info_nce(a, p, temperature=TAU, **kw)
    return (loss.detach(), *torch.autograd.grad(loss, [a, p]))


# float32: both passes sum M = 37 terms per row in another order and round the softmax differently, a
# few units of 2⁻²⁴ each; 1e-5 relative leaves a margin of about ten.
TOL = {torch.float64: {"rtol": 1e-12, "atol": 1e-14}, torch.float32: {"rtol": 1e-5, "atol": 1e-7}}


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("extra", [True, False])
def test_compiled_pass_equals_the_eager_pass(monkeypatch, dtype, extra):
    """Blocks of 5 rows of 37 (the last ragged): a mean's loss and gradients as the eager sweep's."""
    monkeypatch.setattr(masked_ratio, "_BLOCK_BYTES", 5 * N * torch.finfo(dtype).bits // 8 // 2)
    blocks = []
    real = masked_ratio.compiled_softmax_rows()
    monkeypatch.setattr(masked_ratio, "compiled_softmax_rows", lambda: lambda t: blocks.append(len(t)) or real(t))
    a, p, mask = _data(dtype)
    mask = mask if extra else torch.eye(N, dtype=torch.bool)  # the own positives only: no entries
    for reduction in ("mean", "sum"):
        got = _loss_and_grads(a, p, positive_mask=mask, reduction=reduction, compiled=True)
        ref = _loss_and_grads(a, p, positive_mask=mask, reduction=reduction)
        for x, y in zip(got, ref, strict=True):
            torch.testing.assert_close(x, y, **TOL[dtype])
    assert blocks == [5, 5, 5, 5, 5, 5, 5, 2] * 2  # the compiled pass ran on every block, the last ragged
    with torch.no_grad():  # the forward alone
        torch.testing.assert_close(
            info_nce(a, p, temperature=TAU, positive_mask=mask, compiled=True),
            info_nce(a, p, temperature=TAU, positive_mask=mask),
            **TOL[dtype],
        )


def test_unequal_row_gradients_equal_the_eager_pass(monkeypatch):
    """The backward's second sweep (rows weighted unequally) through the compiled pass, in float64."""
    monkeypatch.setattr(masked_ratio, "_BLOCK_BYTES", 4 * N * 8)
    a, p, mask = _data(torch.float64, seed=1)
    w = torch.linspace(0.2, 2.0, N, dtype=torch.float64)
    out = []
    for compiled in (True, False):
        q, k = (a / 0.5).requires_grad_(), p.clone().requires_grad_()
        pos = (q * k).sum(dim=1).detach()
        loss = masked_log_ratio(q, k, positive_mask=mask, weights=None, dcl=False, diagonal=pos, compiled=compiled)
        assert loss is not None
        out.append((loss.detach(), *torch.autograd.grad((loss * w).sum(), [q, k])))
    for x, y in zip(*out, strict=True):
        torch.testing.assert_close(x, y, **TOL[torch.float64])


@pytest.mark.parametrize("kw", [{"variant": "dcl"}, {"weights": "w"}, {"dense": True}])
def test_cases_without_a_compiled_pass_run_the_eager_passes(kw):
    """DCL, weights and a dense mask keep the eager passes: the result is bit for bit the eager one."""
    a, p, mask = _data(torch.float64, seed=2)
    extra = dict(kw)
    if extra.pop("dense", False):
        mask = torch.rand(N, N, generator=torch.Generator().manual_seed(3)) < 0.5
    if extra.get("weights") == "w":
        extra["weights"] = torch.rand(N, N, generator=torch.Generator().manual_seed(4), dtype=torch.float64) + 0.1
    got = _loss_and_grads(a, p, positive_mask=mask, compiled=True, **extra)
    ref = _loss_and_grads(a, p, positive_mask=mask, **extra)
    for x, y in zip(got, ref, strict=True):
        assert torch.equal(x, y)


def test_compiled_is_validated():
    a, p, mask = _data(torch.float32)
    with pytest.raises(TypeError, match="^compiled"):
        info_nce(a, p, positive_mask=mask, compiled=1)
