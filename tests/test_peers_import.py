"""The peers of the test extra import beside torch 2.13 (CPU) without torchvision and without replacing torch."""

import math
import sys

import pytest
import torch

from tests import peers


def test_peer_losses_load_without_torchvision():
    assert peers.open_clip_loss().SigLipLoss is not None
    assert peers.lightly_dcl_loss().DCLWLoss is not None
    st = peers.sentence_transformers_losses()
    assert st.MultipleNegativesRankingLoss is not None and st.GISTEmbedLoss is not None
    assert torch.__version__.startswith("2.13.0")
    assert "torchvision" not in sys.modules


def test_multiple_negatives_ranking_loss_is_in_batch_info_nce_at_tau_one_over_scale():
    """MNRL (scale s, cosine, in-batch) is InfoNCE with τ = 1/s, written here as a loop: −cos_ii·s + log Σ_j e^{cos_ij·s}."""
    g = torch.Generator().manual_seed(0)
    a, p = torch.randn(6, 5, generator=g, dtype=torch.float64), torch.randn(6, 5, generator=g, dtype=torch.float64)
    cos = torch.nn.functional.normalize(a, dim=1) @ torch.nn.functional.normalize(p, dim=1).T
    ref = sum(
        -20.0 * float(cos[i, i]) + math.log(sum(math.exp(20.0 * float(cos[i, j])) for j in range(6))) for i in range(6)
    )
    got = peers.multiple_negatives_ranking_loss(a, p, scale=20.0)
    assert float(got) == pytest.approx(ref / 6, rel=1e-12)


@pytest.mark.parametrize("margin", [0.0, 0.1])
def test_gist_embed_loss_masks_what_its_guide_ranks_above_the_positive(margin):
    """GISTEmbedLoss against a loop over its documented rule ("absolute" margin strategy): candidate c of anchor i
    (a positive p_j, an anchor a_j or, for the positive p_i, another p_j) is dropped when the guide's
    similarity exceeds the guide's (a_i, p_i) similarity minus the margin; the true positive is always kept."""
    g = torch.Generator().manual_seed(3)
    n, d, tau = 6, 4, 0.05
    a, p = torch.randn(n, d, generator=g, dtype=torch.float64), torch.randn(n, d, generator=g, dtype=torch.float64)
    ga, gp = a + 0.3 * torch.randn(n, d, generator=g, dtype=torch.float64), p.clone()

    def cos(u, v):
        return float(torch.nn.functional.cosine_similarity(u, v, dim=0))

    total = 0.0
    for i in range(n):
        thr = cos(ga[i], gp[i]) - margin
        logits = []
        for j in range(n):
            if j == i or not cos(ga[i], gp[j]) > thr:
                logits.append(cos(a[i], p[j]) / tau)
        for j in range(n):
            if not cos(ga[i], ga[j]) > thr:
                logits.append(cos(a[i], a[j]) / tau)
        for j in range(n):
            if not cos(gp[i], gp[j]) > thr:
                logits.append(cos(p[i], p[j]) / tau)
        m = max(logits)
        total += -cos(a[i], p[i]) / tau + m + math.log(sum(math.exp(x - m) for x in logits))
    got = peers.gist_embed_loss(a, p, ga, gp, temperature=tau, margin=margin)
    assert float(got) == pytest.approx(total / n, rel=1e-10)
