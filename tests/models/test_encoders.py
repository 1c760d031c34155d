"""Image encoders: shapes, gradients to every parameter, parameter counts, registry and heads."""

from __future__ import annotations

import pytest
import torch

from contrastlab.models import (
    ENCODERS,
    ContrastiveModel,
    ProjectionHead,
    ResNet18,
    SmallCNN,
    TinyViT,
    build_encoder,
    count_parameters,
)

SMALL_WIDTH = {"cnn": 8, "resnet18": 4, "vit": 32, "mlp": 32}


@pytest.mark.parametrize("name", list(ENCODERS))
@pytest.mark.parametrize("channels,size", [(1, 8), (1, 16), (3, 32)])
def test_output_shape_and_every_parameter_gets_a_grad(name: str, channels: int, size: int) -> None:
    torch.manual_seed(0)
    enc = build_encoder(name, channels, size, embed_dim=24, width=SMALL_WIDTH[name])
    x = torch.rand(4, channels, size, size)
    out = enc(x)
    assert out.shape == (4, 24) and torch.isfinite(out).all()
    out.square().mean().backward()
    for pname, p in enc.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), pname
        assert float(p.grad.abs().sum()) > 0, pname
    enc.eval()
    with torch.no_grad():
        assert torch.allclose(enc(x[:1]), enc(x)[:1], atol=1e-5)  # eval mode: rows are independent


def test_default_parameter_counts_are_comparable() -> None:
    # paper 4 compares ResNet-18, a ViT with 4x4 patches and an MLP at ~11M parameters each (32x32x3, 512-D)
    counts = {n: count_parameters(build_encoder(n, 3, 32, 512)) for n in ("resnet18", "vit", "mlp")}
    assert counts["resnet18"] == 11_168_832  # the standard CIFAR ResNet-18 backbone without its classifier
    for n, c in counts.items():
        assert abs(c - counts["resnet18"]) / counts["resnet18"] < 0.05, (n, c)
    assert TinyViT(3, 32).patch_size == 4


def test_vit_parameter_count_formula() -> None:
    w, d, t, c, p, e = 32, 3, 16, 3, 4, 10  # width, depth, tokens, channels, patch, embed
    vit = TinyViT(c, 16, e, w, depth=d, patch_size=p)
    block = 2 * (2 * w) + (3 * w * w + 3 * w) + (w * w + w) + (4 * w * w + 4 * w) + (4 * w * w + w)
    expected = (c * p * p * w + w) + w + (t + 1) * w + d * block + 2 * w + (w * e + e)
    assert count_parameters(vit) == expected


def test_resnet_feature_and_small_cnn_pooling() -> None:
    r = ResNet18(3, 32, 8 * 16, width=16)
    assert isinstance(r.fc, torch.nn.Identity)  # embed_dim = 8·width returns the pooled feature itself
    assert not isinstance(ResNet18(3, 32, 100, width=16).fc, torch.nn.Identity)
    pools = [m for m in SmallCNN(1, 8).modules() if isinstance(m, torch.nn.MaxPool2d)]
    assert len(pools) == 1  # 8 -> 4, then no more pooling
    assert len([m for m in SmallCNN(3, 32).modules() if isinstance(m, torch.nn.MaxPool2d)]) == 2


def test_heads_return_pre_normalisation_projection() -> None:
    torch.manual_seed(0)
    head = ProjectionHead(24, 8)
    enc = build_encoder("cnn", 1, 8, 24, width=8)
    model = ContrastiveModel(enc, head)
    x = torch.rand(5, 1, 8, 8)
    z = model(x)
    assert z.shape == (5, 8) and not torch.allclose(z.norm(dim=1), torch.ones(5))
    assert torch.equal(model.encode(x), enc(x))
    assert (
        len([m for m in ProjectionHead(24, 8, num_layers=3, batch_norm=True).net if isinstance(m, torch.nn.Linear)])
        == 3
    )
    assert isinstance(ProjectionHead(24, 8, num_layers=1).net[0], torch.nn.Linear)


def test_bad_arguments_are_named() -> None:
    with pytest.raises(ValueError, match="^name"):
        build_encoder("resnet50", 3, 32)
    with pytest.raises(ValueError, match="^patch_size"):
        TinyViT(3, 30, patch_size=4)
    with pytest.raises(ValueError, match="^heads"):
        TinyViT(3, 32, width=48, heads=5)
    with pytest.raises(ValueError, match="^width"):
        ResNet18(width=0)
    with pytest.raises(ValueError, match="^x"):
        SmallCNN(1, 8)(torch.rand(2, 3, 8, 8))
    with pytest.raises(TypeError, match="^x"):
        SmallCNN(1, 8)(torch.zeros(2, 1, 8, 8, dtype=torch.uint8))
    with pytest.raises(ValueError, match="^h"):
        ProjectionHead(4, 2)(torch.rand(3, 5))
