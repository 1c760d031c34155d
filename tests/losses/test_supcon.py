import pytest
import torch

from contrastlab.losses import SupConLoss, nt_xent, supcon
from tests.losses.reference import supcon_loop


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("tau", [0.1, 0.7])
def test_matches_khosla_l_out(seed, tau):
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(9, 5, generator=g, dtype=torch.float64)
    labels = torch.tensor([0, 0, 1, 1, 1, 2, 3, 3, 4])  # 2 and 4 are singletons
    ref = supcon_loop(z, labels, tau)
    got = supcon(z, labels, temperature=tau, reduction="none")
    for i, r in enumerate(ref):
        if r is None:
            assert got[i] == 0
        else:
            assert abs(float(got[i]) - r) < 1e-10
    valid = [r for r in ref if r is not None]
    assert abs(float(supcon(z, labels, temperature=tau)) - sum(valid) / len(valid)) < 1e-10


def test_two_views_one_label_each_equals_nt_xent():
    n = 6
    za, zb = torch.randn(n, 4, dtype=torch.float64), torch.randn(n, 4, dtype=torch.float64)
    labels = torch.cat([torch.arange(n), torch.arange(n)])
    torch.testing.assert_close(supcon(torch.cat([za, zb]), labels, temperature=0.5), nt_xent(za, zb, temperature=0.5))


def test_all_singletons_is_a_clear_error():
    with pytest.raises(ValueError, match="labels: every anchor is a singleton"):
        supcon(torch.randn(4, 3), torch.arange(4))


def test_label_errors():
    with pytest.raises(ValueError, match="labels has length 3"):
        supcon(torch.randn(4, 3), torch.tensor([0, 0, 1]))
    with pytest.raises(TypeError, match="labels must be an integer tensor"):
        supcon(torch.randn(4, 3), torch.tensor([0.0, 0.0, 1.0, 1.0]))


def test_gradcheck():
    z = torch.randn(6, 3, dtype=torch.float64, requires_grad=True)
    labels = torch.tensor([0, 0, 1, 1, 2, 3])
    assert torch.autograd.gradcheck(lambda x: supcon(x, labels, temperature=0.3), (z,))


def test_module():
    with pytest.raises(ValueError, match="reduction"):
        SupConLoss(reduction="max")
