"""Blended digits: the mixture, its label distribution and its ground-truth uncertainty."""

from __future__ import annotations

import math

import pytest
import torch

from contrastlab.data import ImageDataset, binary_entropy, blend_images, label_entropy, load_digits


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_blend_is_the_stated_mixture_of_two_classes() -> None:
    ds = load_digits("test")
    b = blend_images(ds, 500, generator=_gen(0))
    x = ds.float_images()
    w = b.weight.float().view(-1, 1, 1, 1)
    assert torch.allclose(b.images, w * x[b.index_a] + (1 - w) * x[b.index_b], atol=1e-6)
    assert torch.equal(b.label_a, ds.labels[b.index_a]) and torch.equal(b.label_b, ds.labels[b.index_b])
    assert bool((b.label_a != b.label_b).all())
    assert float(b.weight.min()) >= 0.5 and float(b.weight.max()) <= 1.0
    assert b.images.shape == (500, 1, 8, 8) and float(b.images.min()) >= 0 and float(b.images.max()) <= 1


def test_ground_truth_uncertainty_is_the_entropy_of_w() -> None:
    b = blend_images(load_digits("test"), 300, generator=_gen(1))
    # the distribution puts w on the dominant class and 1 - w on the other
    assert torch.allclose(b.probs.sum(1), torch.ones(300, dtype=torch.float64))
    assert torch.allclose(b.probs[torch.arange(300), b.label_a], b.weight)
    assert torch.allclose(b.probs[torch.arange(300), b.label_b], 1 - b.weight)
    expected = torch.tensor([-(w * math.log(w) + (1 - w) * math.log(1 - w)) if w < 1 else 0.0 for w in b.weight])
    assert torch.allclose(b.entropy, expected.double(), atol=1e-12)
    assert torch.allclose(label_entropy(b.probs), b.entropy, atol=1e-12)
    # H is decreasing in w on [1/2, 1]: from log 2 to 0
    assert binary_entropy(torch.tensor([0.5, 0.75, 1.0])).tolist() == pytest.approx(
        [math.log(2), -(0.75 * math.log(0.75) + 0.25 * math.log(0.25)), 0.0]
    )


def test_fixed_weight_and_clean_images() -> None:
    ds = load_digits("test")
    clean = blend_images(ds, 50, generator=_gen(2), weight_range=(1.0, 1.0))
    assert torch.equal(clean.images, ds.float_images()[clean.index_a]) and bool((clean.entropy == 0).all())
    half = blend_images(ds, 50, generator=_gen(2), weight_range=(0.5, 0.5))
    assert torch.allclose(half.entropy, torch.full((50,), math.log(2), dtype=torch.float64))


def test_partner_is_uniform_over_the_other_classes() -> None:
    # three classes of sizes 1, 2, 5: given class a, x_b is uniform over the rows of the other classes
    labels = torch.tensor([0, 1, 1, 2, 2, 2, 2, 2])
    ds = ImageDataset(torch.rand(8, 1, 2, 2), labels, ("a", "b", "c"), "toy")
    b = blend_images(ds, 60000, generator=_gen(3))
    for a in range(3):
        rows = b.index_b[b.label_a == a]
        others = (labels != a).nonzero().squeeze(1)
        freq = torch.bincount(rows, minlength=8)[others].double() / len(rows)
        assert torch.allclose(freq, torch.full_like(freq, 1 / len(others)), atol=0.02)
        assert bool((labels[rows] != a).all())


def test_seeded_and_arguments_named() -> None:
    ds = load_digits("test")
    assert torch.equal(blend_images(ds, 10, generator=_gen(4)).images, blend_images(ds, 10, generator=_gen(4)).images)
    with pytest.raises(ValueError, match="^n "):
        blend_images(ds, 0, generator=_gen(0))
    with pytest.raises(ValueError, match="^weight_range"):
        blend_images(ds, 5, generator=_gen(0), weight_range=(0.2, 1.0))
    one_class = ImageDataset(torch.rand(3, 1, 2, 2), torch.zeros(3, dtype=torch.int64), ("a",), "one")
    with pytest.raises(ValueError, match="^dataset"):
        blend_images(one_class, 5, generator=_gen(0))
    with pytest.raises(ValueError, match="^w "):
        binary_entropy(torch.tensor([1.5]))
