import math

import numpy as np
import pytest
import torch
from scipy.special import ive

from contrastlab.losses import info_nce
from contrastlab.losses.support_corrected import (
    SupportCorrectedInfoNCELoss,
    augmentation_negatives,
    encode_per_anchor,
    latent_support_negatives,
    support_corrected_info_nce,
)
from contrastlab.worlds.restricted import sample_pairs, sample_restricted_positive


def _gen(s: int) -> torch.Generator:
    return torch.Generator().manual_seed(s)


def test_is_info_nce_with_per_anchor_negatives() -> None:
    a, p, n = torch.randn(6, 4), torch.randn(6, 4), torch.randn(6, 5, 4)
    ref = info_nce(a, p, n, temperature=0.3)
    assert torch.equal(support_corrected_info_nce(a, p, n, temperature=0.3), ref)
    assert torch.equal(SupportCorrectedInfoNCELoss(temperature=0.3)(a, p, n), ref)
    with pytest.raises(ValueError, match="^negatives"):
        support_corrected_info_nce(a, p, torch.randn(5, 4))
    with pytest.raises(ValueError, match="^temperature"):
        SupportCorrectedInfoNCELoss(temperature=0.0)


def test_theorem_a4_limit_for_the_identity() -> None:
    # h = I, κ = 1/τ, eq. 6 positives, negatives uniform on K(z) (d = 3, d_fixed = 1). Per anchor,
    # lim_M (ℓ − log M) = H(P^K, Q^K) − log|K(z)| = log I_0(k) − k A(k) with k = κ r² and A = I_1/I_0.
    tau, n, m = 0.3, 1000, 2000
    z, zp = sample_pairs(n, 3, 1 / tau, 1, concentration="eq6", generator=_gen(0), dtype=torch.float64)
    neg = latent_support_negatives(z, m, 1, generator=_gen(1))
    loss = support_corrected_info_nce(z, zp, neg, temperature=tau, reduction="none") - math.log(m)
    k = ((1 / tau) * z[:, 1:].square().sum(1)).numpy()
    log_i0 = np.log(ive(0, k)) + k  # ive(ν, k) = I_ν(k) e^{−k}
    expected = float(np.mean(log_i0 - k * ive(1, k) / ive(0, k)))
    se = loss.std() / math.sqrt(n)
    assert abs(loss.mean() - expected) < 4 * se + 0.01


def test_latent_support_negatives_stay_on_slice() -> None:
    z, _ = sample_pairs(20, 4, 3.0, 2, generator=_gen(2), dtype=torch.float32)
    for mode in ("uniform", "augment"):
        neg = latent_support_negatives(z, 7, 2, mode=mode, kappa=3.0, generator=_gen(3))
        assert neg.shape == (20, 7, 4)
        assert torch.equal(neg[:, :, :2], z[:, None, :2].expand(20, 7, 2))
        assert torch.allclose(neg.norm(dim=2), torch.ones(20, 7), atol=1e-6)
    with pytest.raises(ValueError, match="^mode"):
        latent_support_negatives(z, 3, 2, mode="hard")  # type: ignore[arg-type]


def test_augmentation_proxy_and_encoding() -> None:
    z, _ = sample_pairs(5, 3, 3.0, 1, generator=_gen(4), dtype=torch.float32)
    g = _gen(5)
    views = augmentation_negatives(lambda x: sample_restricted_positive(x, 3.0, 1, generator=g), z, 4)
    assert views.shape == (5, 4, 3)
    assert torch.equal(views[:, :, 0], z[:, None, 0].expand(5, 4))
    assert (views[:, 0] - views[:, 1]).abs().max() > 1e-4  # independent draws
    lin = torch.nn.Linear(3, 2)
    emb = encode_per_anchor(lin, views)
    assert emb.shape == (5, 4, 2)
    assert torch.allclose(emb[2, 3], lin(views[2, 3]))
    with pytest.raises(ValueError, match="^n_negatives"):
        augmentation_negatives(lambda x: x, z, 0)
