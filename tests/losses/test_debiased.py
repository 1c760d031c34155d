"""Debiased InfoNCE (Chuang et al. 2020) against a loop written from the paper, its reductions and contract.

The loop (``tests/losses/reference.py: debiased_loop``) evaluates eq. 6 directly with ``math.exp`` one
row at a time; the function evaluates it in log space on the dense and tiled kernels. In float64 they
differ only in rounding (about 1e-15 per operation), so 1e-10 relative is far above it and far below any
real change of the loss. τ = 0.5 keeps every e^{S} of the loop within float64's range.
"""

import math

import pytest
import torch

from contrastlab.losses import DebiasedInfoNCELoss, LearnableTemperature, debiased_info_nce, info_nce, nt_xent
from tests.losses._debiased_checks import TAU, assert_dense_equals_tiled, assert_gradcheck, assert_matches_loop
from tests.losses._debiased_inputs import LAYOUTS, layout_inputs, mixed_noise
from tests.losses.reference import debiased_loop


def _loss(a, p, negs, layout, **kw):
    return debiased_info_nce(a, p, negs, simclr=layout == "simclr", **kw)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("tau_plus", [0.0, 0.1, 0.4])
@pytest.mark.parametrize("chunk_size", [None, 3])
def test_matches_the_paper_loop(layout, tau_plus, chunk_size):
    a, p, negs = layout_inputs(layout, 9, seed=1)
    assert_matches_loop(_loss, a, p, negs, layout, tau_plus=tau_plus, chunk_size=chunk_size)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_matches_the_loop_with_raw_dot_products(layout):
    a, p, negs = layout_inputs(layout, 7, seed=2)
    a, p = a / 3, p / 3  # raw similarities of a few units: the loop's exponentials stay moderate
    negs = None if negs is None else negs / 3
    assert_matches_loop(_loss, a, p, negs, layout, tau_plus=0.2, normalize=False)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("chunk_size", [None, 2])
def test_clamp_branch_for_some_rows_and_not_others(layout, chunk_size):
    # Close views and a large τ⁺: the estimate of some rows falls below N e^{−1/τ}, the clamp binds there.
    a, p, negs = layout_inputs(layout, 10, seed=3, noise=mixed_noise(10))
    clamped = assert_matches_loop(_loss, a, p, negs, layout, tau_plus=0.4, chunk_size=chunk_size)
    assert any(clamped) and not all(clamped), clamped  # both branches are exercised by these inputs


def test_identical_views_are_all_clamped_to_the_closed_form():
    # a = p: S⁺ = 1/τ for every row and, with τ⁺ = 0.5, every estimate is below the floor, so
    # ℓ = log(1 + N e^{−1/τ} e^{−1/τ}) with N = n − 1 in-batch negatives; the loss's gradient is then only
    # that of the positive, which is 0 for identical views (S⁺ is at its maximum).
    n = 6
    a = torch.randn(n, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(4)).requires_grad_()
    loss = debiased_info_nce(a, a, temperature=TAU, tau_plus=0.5, reduction="none")
    expected = math.log1p((n - 1) * math.exp(-2.0 / TAU))
    torch.testing.assert_close(loss.detach(), torch.full((n,), expected, dtype=torch.float64), rtol=1e-12, atol=0)
    (g,) = torch.autograd.grad(loss.sum(), a)
    assert float(g.abs().max()) < 1e-12


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("chunk_size", [None, 3])
def test_tau_plus_zero_is_info_nce_with_the_same_negatives(layout, chunk_size):
    # τ⁺ = 0: g = max(Σ_j e^{S_ij}, N e^{−1/τ}) = Σ_j e^{S_ij} for unit vectors (each term ≥ e^{−1/τ}),
    # InfoNCE with the same negatives (SimCLR's arrangement: NT-Xent). Loss and gradients, float64.
    a, p, negs = layout_inputs(layout, 8, seed=5)
    grads = []
    for fn in ("debiased", "reference"):
        x, y = a.clone().requires_grad_(), p.clone().requires_grad_()
        if fn == "debiased":
            loss = _loss(x, y, negs, layout, temperature=TAU, tau_plus=0.0, chunk_size=chunk_size)
        elif layout == "simclr":
            loss = nt_xent(x, y, temperature=TAU)
        else:
            loss = info_nce(x, y, negs, temperature=TAU)
        loss.backward()
        grads.append((loss.detach(), x.grad, y.grad))
    for got, want in zip(grads[0], grads[1], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_dense_equals_tiled_with_gradients(layout):
    a, p, negs = layout_inputs(layout, 13, seed=6, noise=0.5)
    assert_dense_equals_tiled(_loss, a, p, negs, layout, temperature=0.3, tau_plus=0.2, reduction="sum")


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("chunk_size", [None, 2])
def test_gradcheck_float64(layout, chunk_size):
    a, p, negs = layout_inputs(layout, 5, seed=7, noise=0.5)
    assert_gradcheck(_loss, a, p, negs, layout, tau_plus=0.2, chunk_size=chunk_size)


def test_gradcheck_where_the_clamp_binds():
    # Clamped rows depend on the inputs only through S⁺ (and on τ through the floor N e^{−1/τ}).
    a, p, _ = layout_inputs("in-batch", 6, seed=3, noise=mixed_noise(6))
    _, clamped = debiased_loop(a, p, None, 0.4, 0.4, 0.0, False, True)
    assert any(clamped) and not all(clamped)
    t = torch.tensor(0.4, dtype=torch.float64, requires_grad=True)
    fn = lambda x, y, tt: debiased_info_nce(x, y, temperature=tt, tau_plus=0.4, reduction="none")  # noqa: E731
    assert torch.autograd.gradcheck(fn, [a.requires_grad_(), p.requires_grad_(), t], eps=1e-6, atol=1e-7)


def test_float32_small_temperature_stays_finite_and_accurate():
    # τ = 0.01: e^{S/τ} reaches e^{100}, beyond float32 (the papers' code computes exp directly and
    # overflows); the log-space estimator does not. float32 against float64: rounding of the inputs'
    # logits (1e-7 relative, times 1/τ = 100) bounds the difference near 1e-4 relative.
    a, p, _ = layout_inputs("in-batch", 32, seed=8, noise=0.2, d=16)
    l64 = debiased_info_nce(a, p, temperature=0.01, tau_plus=0.1, reduction="none")
    l32 = debiased_info_nce(a.float(), p.float(), temperature=0.01, tau_plus=0.1, reduction="none")
    assert l32.dtype == torch.float32 and bool(torch.isfinite(l32).all())
    torch.testing.assert_close(l32.double(), l64, rtol=1e-3, atol=1e-5)


def test_learnable_temperature_receives_a_gradient():
    a, p, _ = layout_inputs("in-batch", 8, seed=9)
    temp = LearnableTemperature(0.5)
    loss_fn = DebiasedInfoNCELoss(temperature=temp, tau_plus=0.1)
    loss_fn(a.float(), p.float()).backward()
    assert all(q.grad is not None and bool(torch.isfinite(q.grad).all()) for q in temp.parameters())


def test_module_equals_function_and_shows_its_hyperparameters():
    a, p, _ = layout_inputs("in-batch", 6, seed=10)
    m = DebiasedInfoNCELoss(temperature=0.3, tau_plus=0.05, simclr=True, reduction="none")
    torch.testing.assert_close(
        m(a, p), debiased_info_nce(a, p, temperature=0.3, tau_plus=0.05, simclr=True, reduction="none")
    )
    assert m(a, p).shape == (12,)
    assert "tau_plus=0.05" in repr(m) and "simclr=True" in repr(m)


@pytest.mark.parametrize(
    ("kw", "error", "message"),
    [
        ({"tau_plus": 1.0}, ValueError, r"^tau_plus must be in \[0, 1\), got 1.0"),
        ({"tau_plus": -0.1}, ValueError, r"^tau_plus must be in \[0, 1\)"),
        ({"tau_plus": float("nan")}, ValueError, "^tau_plus must be finite"),
        ({"tau_plus": "0.1"}, TypeError, "^tau_plus must be a real number"),
        ({"tau_plus": True}, TypeError, "^tau_plus must be a real number"),
        ({"simclr": 1}, TypeError, "^simclr must be a bool"),
        ({"chunk_size": 0}, ValueError, "^chunk_size must be >= 1"),
    ],
)
def test_bad_hyperparameters_raise_named_errors(kw, error, message):
    a, p, _ = layout_inputs("in-batch", 4, seed=11)
    with pytest.raises(error, match=message):
        debiased_info_nce(a, p, **kw)
    with pytest.raises(error, match=message):
        debiased_info_nce(a, p, gather=True, **kw)  # the same check through the agree-before-collective path
    if "chunk_size" not in kw:
        with pytest.raises(error, match=message):
            DebiasedInfoNCELoss(**kw)


def test_bad_layouts_raise_named_errors():
    a, p, negs = layout_inputs("shared", 4, seed=12)
    with pytest.raises(ValueError, match="^simclr=True contrasts the 2N views"):
        debiased_info_nce(a, p, negs, simclr=True)
    with pytest.raises(ValueError, match="^anchor: in-batch negatives need N >= 2"):
        debiased_info_nce(a[:1], p[:1])
    with pytest.raises(ValueError, match="^anchor: in-batch negatives need N >= 2"):
        debiased_info_nce(a[:1], p[:1], simclr=True)
    with pytest.raises(ValueError, match="^positive must have the same shape"):
        debiased_info_nce(a, p[:3])
    with pytest.raises(ValueError, match="^negatives must have embedding dimension"):
        debiased_info_nce(a, p, negs[:, :3])
    # one shared negative is enough: N = 1
    assert bool(torch.isfinite(debiased_info_nce(a[:1], p[:1], negs[:1])))
