import math

import pytest
import torch

from contrastlab.losses import InfoNCELoss, LearnableTemperature, info_nce
from tests.losses._inputs import anchors_positives_negatives
from tests.losses.reference import info_nce_loop

MODES = ["inbatch", "shared", "per_anchor"]


def _inputs(mode: str, n: int, d: int, k: int, seed: int = 0, dtype=torch.float64):
    return anchors_positives_negatives(mode, n, d, k, noise=0.5, seed=seed, dtype=dtype)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("variant", ["infonce", "dcl"])
@pytest.mark.parametrize("n,d,k", [(1, 3, 1), (2, 2, 3), (5, 7, 4), (9, 16, 11)])
@pytest.mark.parametrize("tau", [0.05, 0.5, 2.0])
@pytest.mark.parametrize("normalize", [True, False])
def test_matches_naive_loop(mode, variant, n, d, k, tau, normalize):
    a, p, negs = _inputs(mode, n, d, k)
    if mode == "inbatch" and variant == "dcl" and n == 1:
        with pytest.raises(ValueError, match="N >= 2"):  # DCL has no in-batch negative at N = 1
            info_nce(a, p, variant="dcl")
        return
    if not normalize:
        a, p = a / 3, p / 3
        negs = None if negs is None else negs / 3
    got = info_nce(a, p, negs, temperature=tau, variant=variant, normalize=normalize, reduction="none")
    want = torch.tensor(info_nce_loop(a, p, negs, tau, variant, False, normalize), dtype=torch.float64)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(
        info_nce(a, p, negs, temperature=tau, variant=variant, normalize=normalize), want.mean(), rtol=1e-10, atol=1e-10
    )
    torch.testing.assert_close(
        info_nce(a, p, negs, temperature=tau, variant=variant, normalize=normalize, reduction="sum"),
        want.sum(),
        rtol=1e-10,
        atol=1e-10,
    )


@pytest.mark.parametrize("variant", ["infonce", "dcl"])
@pytest.mark.parametrize("n", [2, 3, 8])
def test_symmetric_matches_naive_loop(variant, n):
    a, p, _ = _inputs("inbatch", n, 5, 0, seed=3)
    got = info_nce(a, p, temperature=0.3, variant=variant, symmetric=True, reduction="none")
    want = torch.tensor(info_nce_loop(a, p, None, 0.3, variant, True, True), dtype=torch.float64)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("mode,count", [("inbatch", 6), ("shared", 4 + 1), ("per_anchor", 3 + 1)])
def test_identical_embeddings_give_log_candidate_count(mode, count):
    # Every similarity equal ⇒ softmax uniform over the candidates (positive included) ⇒ log(count).
    n, d = 6, 4
    v = torch.randn(1, d, dtype=torch.float64)
    a = v.expand(n, d)
    negs = {"inbatch": None, "shared": v.expand(4, d), "per_anchor": v.expand(n, 3, d).clone()}[mode]
    torch.testing.assert_close(
        info_nce(a, a.clone(), negs, temperature=0.1), torch.tensor(math.log(count), dtype=torch.float64)
    )
    dcl = info_nce(a, a.clone(), negs, temperature=0.1, variant="dcl")
    torch.testing.assert_close(dcl, torch.tensor(math.log(count - 1), dtype=torch.float64))


def test_invariances():
    a, p, negs = _inputs("per_anchor", 7, 5, 6, seed=1)
    base = info_nce(a, p, negs, temperature=0.2, reduction="none")
    # permuting each anchor's negatives
    perm = torch.randperm(6)
    torch.testing.assert_close(info_nce(a, p, negs[:, perm], temperature=0.2, reduction="none"), base)
    # rotating every embedding by one orthogonal map
    q, _ = torch.linalg.qr(torch.randn(5, 5, dtype=torch.float64))
    torch.testing.assert_close(info_nce(a @ q, p @ q, negs @ q, temperature=0.2, reduction="none"), base)
    # scaling inputs when normalised (per-row positive scales)
    s = torch.rand(7, 1, dtype=torch.float64) * 10 + 0.1
    torch.testing.assert_close(info_nce(a * s, p * 3.0, negs * 0.5, temperature=0.2, reduction="none"), base)
    # permuting the batch (anchors together with their positives) permutes the in-batch losses
    a2, p2, _ = _inputs("inbatch", 7, 5, 0, seed=2)
    pb = torch.randperm(7)
    torch.testing.assert_close(info_nce(a2[pb], p2[pb], reduction="none"), info_nce(a2, p2, reduction="none")[pb])
    # swapping the views leaves the symmetric loss unchanged
    torch.testing.assert_close(info_nce(a2, p2, symmetric=True), info_nce(p2, a2, symmetric=True))


def test_dcl_never_above_infonce():
    a, p, negs = _inputs("shared", 8, 4, 5)
    assert bool((info_nce(a, p, negs, variant="dcl", reduction="none") <= info_nce(a, p, negs, reduction="none")).all())


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("variant", ["infonce", "dcl"])
def test_gradcheck(mode, variant):
    a, p, negs = _inputs(mode, 4, 3, 3, seed=5)
    ins = [a.requires_grad_(), p.requires_grad_()] + ([] if negs is None else [negs.requires_grad_()])

    def f(*xs):
        return (
            info_nce(*xs, temperature=0.3, variant=variant)
            if len(xs) == 3
            else info_nce(*xs, temperature=0.3, variant=variant)
        )

    assert torch.autograd.gradcheck(f, tuple(ins))
    if mode == "inbatch":
        assert torch.autograd.gradcheck(lambda x, y: info_nce(x, y, symmetric=True, variant=variant), (a, p))


def test_gradcheck_learnable_temperature_and_raw_dot():
    a, p, negs = _inputs("shared", 4, 3, 3, seed=6)
    temp = LearnableTemperature(0.5).double()
    a.requires_grad_()
    assert torch.autograd.gradcheck(
        lambda x, s: info_nce(x, p, negs, temperature=torch.exp(-s), normalize=False), (a, temp.log_scale)
    )
    loss = info_nce(a, p, negs, temperature=temp)
    loss.backward()
    assert temp.log_scale.grad is not None and torch.isfinite(temp.log_scale.grad)


def test_learnable_temperature_clamp_and_module_registration():
    t = LearnableTemperature(0.07, max_inverse=100.0)
    assert abs(t().item() - 0.07) < 1e-6
    with torch.no_grad():
        t.log_scale.fill_(10.0)
    assert abs(t().item() - 0.01) < 1e-7  # clamped at 1/100
    mod = InfoNCELoss(temperature=LearnableTemperature(0.1))
    assert len(list(mod.parameters())) == 1


def test_zero_vectors_are_finite():
    a = torch.zeros(4, 3, requires_grad=True)
    p = torch.randn(4, 3)
    loss = info_nce(a, p, torch.zeros(5, 3))
    loss.backward()
    # zero vectors have cosine 0 with everything: all logits 0 ⇒ log(1 + 5)
    torch.testing.assert_close(loss, torch.tensor(math.log(6.0)))
    assert torch.isfinite(a.grad).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_computed_in_fp32(dtype):
    a, p, negs = _inputs("shared", 6, 8, 5, dtype=torch.float32)
    ah, ph, nh = a.to(dtype).requires_grad_(), p.to(dtype), negs.to(dtype)
    out = info_nce(ah, ph, nh, temperature=0.05)
    assert out.dtype == torch.float32
    ref = info_nce(ah.detach().float(), ph.float(), nh.float(), temperature=0.05)
    torch.testing.assert_close(out, ref)
    out.backward()
    assert ah.grad.dtype == dtype and torch.isfinite(ah.grad.float()).all()


def test_extreme_temperature_no_overflow():
    a = torch.randn(8, 4)
    out = info_nce(a, a.clone(), temperature=1e-4)
    assert torch.isfinite(out)
    assert float(out) >= 0


def test_raw_dot_overflow_is_an_error_not_nan():
    a = torch.full((3, 4), 1e20)
    with pytest.raises(ValueError, match="not finite"):
        info_nce(a, a.clone(), normalize=False)


def test_module_validates_at_construction():
    with pytest.raises(ValueError, match="temperature"):
        InfoNCELoss(temperature=0.0)
    with pytest.raises(ValueError, match="variant"):
        InfoNCELoss(variant="nce")
    with pytest.raises(ValueError, match="reduction"):
        InfoNCELoss(reduction="avg")
    assert "temperature=0.2" in repr(InfoNCELoss(temperature=0.2))
