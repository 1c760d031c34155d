import math

import pytest
import torch

from contrastlab.losses import NTXentLoss, info_nce, nt_xent
from tests.losses.reference import nt_xent_loop


@pytest.mark.parametrize("n,d", [(1, 2), (2, 3), (4, 8), (7, 5)])
@pytest.mark.parametrize("tau", [0.1, 0.5, 1.0])
def test_matches_simclr_algorithm_1(n, d, tau):
    g = torch.Generator().manual_seed(n * 100 + d)
    za, zb = torch.randn(n, d, generator=g, dtype=torch.float64), torch.randn(n, d, generator=g, dtype=torch.float64)
    want = torch.tensor(nt_xent_loop(za, zb, tau), dtype=torch.float64)
    torch.testing.assert_close(nt_xent(za, zb, temperature=tau, reduction="none"), want, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(nt_xent(za, zb, temperature=tau), want.mean(), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("n", [1, 2, 5])
def test_identical_views_give_log_2n_minus_1(n):
    v = torch.randn(1, 6).expand(n, 6)
    torch.testing.assert_close(nt_xent(v, v.clone(), temperature=0.5), torch.tensor(math.log(2 * n - 1)))


def test_symmetric_in_views_and_batch_permutation():
    za, zb = torch.randn(6, 4, dtype=torch.float64), torch.randn(6, 4, dtype=torch.float64)
    torch.testing.assert_close(nt_xent(za, zb), nt_xent(zb, za))
    perm = torch.randperm(6)
    torch.testing.assert_close(nt_xent(za[perm], zb[perm]), nt_xent(za, zb))


def test_gradcheck():
    za = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    zb = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, y: nt_xent(x, y, temperature=0.3), (za, zb))


def test_module():
    with pytest.raises(ValueError, match="temperature"):
        NTXentLoss(temperature=-1.0)
    za, zb = torch.randn(4, 3), torch.randn(4, 3)
    torch.testing.assert_close(NTXentLoss(0.2)(za, zb), nt_xent(za, zb, temperature=0.2))


def test_relation_to_info_nce():
    # NT-Xent's view-a rows are InfoNCE with negatives {other b's} ∪ {other a's}: per-anchor negatives.
    n, d = 5, 3
    za, zb = torch.randn(n, d, dtype=torch.float64), torch.randn(n, d, dtype=torch.float64)
    negs = torch.stack([torch.cat([zb[torch.arange(n) != i], za[torch.arange(n) != i]]) for i in range(n)])
    want = info_nce(za, zb, negs, temperature=0.5, reduction="none")
    torch.testing.assert_close(nt_xent(za, zb, temperature=0.5, reduction="none")[:n], want)
