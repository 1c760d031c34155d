"""MarginMSE and listwise KL distillation: naive loops, sentence-transformers' losses as oracles, gradcheck.

The loops (tests/losses/reference.py) are the papers' formulas one anchor at a time in Python floats; in
float64 the vectorised losses differ from them only by the order of the sums (~1e-15 relative), so 1e-10 is
far above rounding and far below any real difference. sentence-transformers' ``MarginMSELoss`` and
``DistillKLDivLoss`` compute the same quantity with other kernels (``MSELoss``, ``KLDivLoss``): 1e-12.
"""

import pytest
import torch

from contrastlab.losses import DistillKLLoss, LearnableTemperature, MarginMSELoss, distill_kl, margin_mse
from tests.losses.reference import distill_kl_loop, margin_mse_loop
from tests.peers import distill_kl_div_loss, margin_mse_loss


def _inputs(n: int, k: int, d: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(n, d, generator=g, dtype=torch.float64)
    p = a + 0.5 * torch.randn(n, d, generator=g, dtype=torch.float64)
    neg = torch.randn(n, k, d, generator=g, dtype=torch.float64)
    teacher = 3.0 * torch.randn(n, 1 + k, generator=g, dtype=torch.float64)
    return a, p, neg, teacher


@pytest.mark.parametrize("n", [1, 2, 5])
@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("normalize", [False, True])
@pytest.mark.parametrize("tau", [1.0, 0.05])
def test_margin_mse_equals_the_loop(n, k, normalize, tau):
    a, p, neg, t = _inputs(n, k, 4, seed=n * 10 + k)
    got = margin_mse(a, p, neg, t, temperature=tau, normalize=normalize, reduction="none")
    want = torch.tensor(margin_mse_loop(a, p, neg, t, tau, normalize), dtype=torch.float64)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("n", [1, 2, 5])
@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("normalize", [False, True])
@pytest.mark.parametrize(("tau", "tau_teacher"), [(1.0, None), (0.05, None), (2.0, 0.5)])
def test_distill_kl_equals_the_loop(n, k, normalize, tau, tau_teacher):
    a, p, neg, t = _inputs(n, k, 4, seed=n * 10 + k)
    got = distill_kl(
        a, p, neg, t, temperature=tau, teacher_temperature=tau_teacher, normalize=normalize, reduction="none"
    )
    want = distill_kl_loop(a, p, neg, t, tau, tau if tau_teacher is None else tau_teacher, normalize)
    torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("k", [1, 4])
def test_margin_mse_equals_sentence_transformers(k):
    a, p, neg, t = _inputs(6, k, 5, seed=k)
    torch.testing.assert_close(margin_mse(a, p, neg, t), margin_mse_loss(a, p, neg, t), rtol=1e-12, atol=0)


@pytest.mark.parametrize("k", [1, 4])
@pytest.mark.parametrize(("ours", "theirs"), [({}, {}), ({"temperature": 2.0}, {"temperature": 2.0}),
                                              ({"temperature": 0.5, "teacher_temperature": 3.0},
                                               {"student_temperature": 0.5, "teacher_temperature": 3.0})])  # fmt: skip
def test_distill_kl_equals_sentence_transformers(k, ours, theirs):
    a, p, neg, t = _inputs(6, k, 5, seed=k + 7)
    torch.testing.assert_close(
        distill_kl(a, p, neg, t, **ours), distill_kl_div_loss(a, p, neg, t, **theirs), rtol=1e-12, atol=0
    )


def test_one_negative_may_be_given_as_a_matrix():
    a, p, neg, t = _inputs(4, 1, 3, seed=0)
    for fn in (margin_mse, distill_kl):
        torch.testing.assert_close(fn(a, p, neg[:, 0], t), fn(a, p, neg, t), rtol=0, atol=0)


def test_closed_forms():
    """A student that reproduces the teacher's scores has MarginMSE 0 and KL 0 (up to the last bits of the softmax);
    an offset of the teacher changes neither; a student with equal scores has KL(p ‖ uniform) = log(1 + K) − H(p)."""
    a = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    p = torch.tensor([[2.0, 0.0]], dtype=torch.float64)
    neg = torch.tensor([[[0.5, 0.0], [-1.0, 0.0]]], dtype=torch.float64)
    t = torch.tensor([[2.0, 0.5, -1.0]], dtype=torch.float64)  # the student's own dot products
    assert float(margin_mse(a, p, neg, t)) == 0.0
    torch.testing.assert_close(distill_kl(a, p, neg, t), torch.zeros((), dtype=torch.float64), rtol=0, atol=1e-15)
    shifted = t + 5.0  # margins and softmax ignore a common offset of the teacher's scores
    torch.testing.assert_close(margin_mse(a, p, neg, shifted), margin_mse(a, p, neg, t), rtol=0, atol=1e-15)
    torch.testing.assert_close(distill_kl(a, p, neg, shifted), distill_kl(a, p, neg, t), rtol=0, atol=1e-15)
    # the student's scores all equal: KL(p ‖ uniform) = log(1 + K) − H(p)
    flat = torch.zeros(1, 2, 2, dtype=torch.float64)
    probs = torch.softmax(t[0], 0)
    want = torch.log(torch.tensor(3.0, dtype=torch.float64)) + (probs * probs.log()).sum()
    torch.testing.assert_close(distill_kl(torch.ones(1, 2, dtype=torch.float64), flat[:, 0], flat, t), want)


@pytest.mark.parametrize("fn", [margin_mse, distill_kl])
@pytest.mark.parametrize("normalize", [False, True])
def test_gradcheck(fn, normalize):
    a, p, neg, t = _inputs(3, 2, 4, seed=11)
    leaves = [x.clone().requires_grad_() for x in (a, p, neg)]
    assert torch.autograd.gradcheck(lambda x, y, z: fn(x, y, z, t, temperature=0.7, normalize=normalize), leaves)


@pytest.mark.parametrize("fn", [margin_mse, distill_kl])
def test_teacher_scores_get_no_gradient_and_a_learnable_temperature_does(fn):
    a, p, neg, t = _inputs(4, 2, 3, seed=12)
    t = t.clone().requires_grad_()
    tau = LearnableTemperature(0.5).double()
    fn(a, p, neg, t, temperature=tau, normalize=True).backward()
    assert t.grad is None
    g = tau.log_scale.grad
    assert g is not None and bool(torch.isfinite(g)) and float(g) != 0.0


def test_modules_equal_the_functions_and_check_at_construction():
    a, p, neg, t = _inputs(5, 3, 4, seed=13)
    torch.testing.assert_close(
        MarginMSELoss(temperature=0.2, normalize=True)(a, p, neg, t),
        margin_mse(a, p, neg, t, temperature=0.2, normalize=True),
        rtol=0, atol=0,
    )  # fmt: skip
    torch.testing.assert_close(
        DistillKLLoss(temperature=2.0, teacher_temperature=0.5)(a, p, neg, t),
        distill_kl(a, p, neg, t, temperature=2.0, teacher_temperature=0.5),
        rtol=0, atol=0,
    )  # fmt: skip
    with pytest.raises(ValueError, match="^temperature must be > 0"):
        MarginMSELoss(temperature=0.0)
    with pytest.raises(ValueError, match="^teacher_temperature must be > 0"):
        DistillKLLoss(teacher_temperature=-1.0)
    with pytest.raises(ValueError, match="^reduction"):
        DistillKLLoss(reduction="avg")


@pytest.mark.parametrize("fn", [margin_mse, distill_kl])
def test_teacher_scores_that_do_not_fit_are_named(fn):
    a, p, neg, t = _inputs(4, 2, 3, seed=14)
    with pytest.raises(ValueError, match=r"^teacher_scores must have shape \(N, 1 \+ K\) = \(4, 3\)"):
        fn(a, p, neg, t[:, :2])
    with pytest.raises(ValueError, match=r"^teacher_scores must have shape"):
        fn(a, p, neg, t[:3])
    bad = t.clone()
    bad[0, 0] = float("inf")
    with pytest.raises(ValueError, match="^teacher_scores contains NaN or Inf"):
        fn(a, p, neg, bad)
    with pytest.raises(TypeError, match="^teacher_scores must be a floating-point tensor"):
        fn(a, p, neg, t.long())
    with pytest.raises(ValueError, match=r"^negatives must have shape \(N, K, D\) with N = 4"):
        fn(a, p, neg[:3], t)
