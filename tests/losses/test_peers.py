"""Cross-checks against the peers that compute the same quantities (tests only)."""

import pytest
import torch

from contrastlab.losses import info_nce, nt_xent, supcon

info_nce_pkg = pytest.importorskip("info_nce")
pml_losses = pytest.importorskip("pytorch_metric_learning.losses")


def _grads(fn, *xs):
    xs = [x.detach().clone().requires_grad_() for x in xs]
    out = fn(*xs)
    out.backward()
    return out.detach(), [x.grad for x in xs]


def _assert_same_loss_and_grads(ours, theirs, *xs):
    """``ours(*xs)`` and ``theirs(*xs)`` agree to 1e-5 relative, and so do their gradients in every input."""
    (value, grads), (peer_value, peer_grads) = _grads(ours, *xs), _grads(theirs, *xs)
    torch.testing.assert_close(value, peer_value, rtol=1e-5, atol=1e-7)
    for a, b in zip(grads, peer_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("mode", ["inbatch", "unpaired", "paired"])
@pytest.mark.parametrize("tau", [0.1, 0.5])
def test_info_nce_pytorch(mode, tau):
    g = torch.Generator().manual_seed(0)
    q, pk = torch.randn(16, 32, generator=g), torch.randn(16, 32, generator=g)
    negs = {
        "inbatch": None,
        "unpaired": torch.randn(40, 32, generator=g),
        "paired": torch.randn(16, 7, 32, generator=g),
    }[mode]
    extra = () if negs is None else (negs,)
    negative_mode = "unpaired" if mode == "inbatch" else mode
    _assert_same_loss_and_grads(
        lambda *x: info_nce(*x, temperature=tau),
        lambda *x: info_nce_pkg.info_nce(
            x[0], x[1], x[2] if len(x) > 2 else None, temperature=tau, negative_mode=negative_mode
        ),
        q,
        pk,
        *extra,
    )


@pytest.mark.parametrize("tau", [0.07, 0.5])
def test_pml_ntxent_on_concatenated_views(tau):
    g = torch.Generator().manual_seed(1)
    za, zb = torch.randn(12, 16, generator=g), torch.randn(12, 16, generator=g)
    labels = torch.cat([torch.arange(12), torch.arange(12)])
    pml = pml_losses.NTXentLoss(temperature=tau)
    _assert_same_loss_and_grads(
        lambda a, b: nt_xent(a, b, temperature=tau), lambda a, b: pml(torch.cat([a, b]), labels), za, zb
    )


@pytest.mark.parametrize("tau", [0.1, 0.5])
def test_pml_supcon(tau):
    g = torch.Generator().manual_seed(2)
    z = torch.randn(20, 8, generator=g)
    labels = torch.randint(0, 5, (20,), generator=g)
    pml = pml_losses.SupConLoss(temperature=tau)
    _assert_same_loss_and_grads(lambda x: supcon(x, labels, temperature=tau), lambda x: pml(x, labels), z)
