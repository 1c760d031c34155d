import math

import pytest
import torch

from contrastlab.theory.diversity import check_theorem_4_5, first_order_constant, h_lambda
from contrastlab.worlds.restricted import sample_pairs


def test_h_lambda_identity_and_alignment_formula() -> None:
    z, zp = sample_pairs(200, 4, 3.0, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    assert torch.allclose(h_lambda(z, 1.0, 2), z, atol=1e-15)
    lam = 0.7
    hz, hzp = h_lambda(z, lam, 2), h_lambda(zp, lam, 2)
    assert torch.allclose(hz.norm(dim=1), torch.ones(200, dtype=torch.float64))
    # On K(z): h_λ(z)ᵀh_λ(z̃) = f(λ²) = (‖u‖² + λ² vᵀṽ)/(‖u‖² + λ²‖v‖²).
    u2 = z[:, :2].square().sum(1)
    f = (u2 + lam**2 * (z[:, 2:] * zp[:, 2:]).sum(1)) / (u2 + lam**2 * z[:, 2:].square().sum(1))
    assert torch.allclose((hz * hzp).sum(1), f, atol=1e-12)
    assert (first_order_constant(z, zp, 2) >= -1e-12).all()  # ‖v‖² >= vᵀṽ since ‖ṽ‖ = ‖v‖


def test_theorem_4_5_distortion_beats_identity() -> None:
    r = check_theorem_4_5((0.9, 0.95), d=3, d_fixed=1, n_anchors=1024, n_negatives=1024, n_chunks=6, seed=0)
    for diff, se, pred in zip(r.diff, r.diff_se, r.predicted, strict=True):
        assert diff < -5 * se  # L(h_λ) < L(I): Thm 4.5
        assert pred < 0 and abs(diff - pred) < 0.3 * abs(pred)  # first-order slope −c/τ
    assert r.c > 5 * r.c_se
    # the reported L(h_λ) is L(I) plus the difference checked above (the same float sum, so exactly equal)
    assert all(loss == r.loss_identity + diff for loss, diff in zip(r.loss, r.diff, strict=True))


def test_theorem_4_5_in_higher_dimension() -> None:
    r = check_theorem_4_5((0.95,), d=6, d_fixed=3, n_anchors=512, n_negatives=1024, n_chunks=4, seed=1)
    assert r.diff[0] < -5 * r.diff_se[0]


def test_support_corrected_negatives_restore_identity() -> None:
    # Thm 4.6: with negatives uniform on K(z) every orthogonal map is optimal, so h_λ loses.
    r = check_theorem_4_5((0.9, 0.95), negatives="slice", n_anchors=512, n_negatives=512, n_chunks=4)
    for diff, se in zip(r.diff, r.diff_se, strict=True):
        assert diff > 5 * se
    assert all(math.isnan(p) for p in r.predicted)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="^negatives"):
        check_theorem_4_5(negatives="queue")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="^n_chunks"):
        check_theorem_4_5(n_chunks=1)
    with pytest.raises(ValueError, match="^lam"):
        h_lambda(torch.ones(2, 3), 0.0, 1)
