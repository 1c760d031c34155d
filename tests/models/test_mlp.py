"""MLP: the layer sequence of each BatchNorm order, and argument checks."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from contrastlab.models import MLP


def _kinds(m: MLP) -> list[tuple[type, int | None]]:
    """(layer type, output width or None) for every layer of ``m``, in order."""
    out: list[tuple[type, int | None]] = []
    for layer in m.net:
        if isinstance(layer, nn.Linear):
            out.append((nn.Linear, layer.out_features))
        elif isinstance(layer, nn.BatchNorm1d):
            out.append((nn.BatchNorm1d, layer.num_features))
        else:
            out.append((type(layer), None))
    return out


def test_post_act_is_the_identifiability_papers_encoder() -> None:
    # Zaliaduonis et al. (2026), §5: widths 128-256-256-256-128, each hidden layer Linear → ReLU →
    # BatchNorm1d, then a linear projection to the latent dimension (the loss L2-normalises it).
    m = MLP(7, [128, 256, 256, 256, 128], 3, batch_norm=True, activation="relu", norm_order="post_act")
    expected: list[tuple[type, int | None]] = []
    for w in (128, 256, 256, 256, 128):
        expected += [(nn.Linear, w), (nn.ReLU, None), (nn.BatchNorm1d, w)]
    expected.append((nn.Linear, 3))
    assert _kinds(m) == expected
    assert m.net[0].in_features == 7


def test_pre_act_puts_batchnorm_before_the_activation() -> None:
    m = MLP(3, [16, 8], 2, batch_norm=True, activation="relu", norm_order="pre_act")
    assert _kinds(m) == [
        (nn.Linear, 16),
        (nn.BatchNorm1d, 16),
        (nn.ReLU, None),
        (nn.Linear, 8),
        (nn.BatchNorm1d, 8),
        (nn.ReLU, None),
        (nn.Linear, 2),
    ]


@pytest.mark.parametrize("order", ["pre_act", "post_act"])
def test_norm_order_is_irrelevant_without_batchnorm(order: str) -> None:
    m = MLP(3, [16], 2, activation="relu", norm_order=order)  # type: ignore[arg-type]
    assert _kinds(m) == [(nn.Linear, 16), (nn.ReLU, None), (nn.Linear, 2)]


def test_hidden_features_of_each_order() -> None:
    # ReLU(BN(x)) is never negative; BN(ReLU(x)) is centred (train-mode BatchNorm of a non-constant
    # column has batch mean 0, so some of its entries are negative).
    torch.manual_seed(0)
    pre = MLP(3, [16], 2, batch_norm=True, activation="relu", norm_order="pre_act")
    post = MLP(3, [16], 2, batch_norm=True, activation="relu", norm_order="post_act")
    x = torch.randn(64, 3)
    h_pre, h_post = pre.net[:3](x), post.net[:3](x)
    assert (h_pre >= 0).all()
    assert (h_post < 0).any()


def test_bad_norm_order() -> None:
    with pytest.raises(ValueError, match="^norm_order"):
        MLP(3, [4], 2, norm_order="middle")  # type: ignore[arg-type]
