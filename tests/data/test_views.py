"""TwoViewBatches is a pure function of the step: same step, same batch, whatever was called before."""

from __future__ import annotations

import pytest
import torch

from contrastlab.data import ImageDataset, TwoViewBatches, augmentation_regime
from contrastlab.train import EpochSampler


def toy(n: int = 50, c: int = 3, size: int = 8) -> ImageDataset:
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (n, c, size, size), generator=g, dtype=torch.uint8)
    return ImageDataset(images, torch.arange(n) % 5, tuple("abcde"), "toy")


def test_batches_are_a_pure_function_of_the_step() -> None:
    ds = toy()
    aug = augmentation_regime("simclr_all", 8)
    first = TwoViewBatches(ds, aug, 16, seed=3)
    forward = [first.batch_at(s) for s in range(8)]  # crosses epoch boundaries (3 steps per epoch)
    second = TwoViewBatches(ds, aug, 16, seed=3)
    for s in [7, 2, 5, 0, 6, 1, 4, 3]:  # any order, fresh instance
        for got, want in zip(second(s), forward[s], strict=True):
            assert torch.equal(got, want)


def test_views_labels_and_epochs() -> None:
    ds = toy()
    batches = TwoViewBatches(ds, augmentation_regime("simclr_all", 8), 16, seed=0)
    assert batches.steps_per_epoch == 3
    a, b, y = batches.batch_at(1)
    assert a.shape == b.shape == (16, 3, 8, 8) and a.dtype == torch.float32
    assert not torch.allclose(a, b)  # two independent augmentations
    idx = batches.indices_at(1)
    assert torch.equal(y, ds.labels[idx])
    # within an epoch the batches are disjoint; the next epoch is a fresh permutation
    epoch0 = torch.cat([batches.indices_at(s) for s in range(3)])
    assert len(set(epoch0.tolist())) == 48
    assert not torch.equal(epoch0, torch.cat([batches.indices_at(s) for s in range(3, 6)]))
    # the indices are contrastlab.train.EpochSampler's
    assert torch.equal(idx, EpochSampler(50, 16, seed=0).indices_at(1))
    # another seed, other batches
    assert not torch.equal(TwoViewBatches(ds, None, 16, seed=1).indices_at(1), idx)


def test_without_augmentation_views_are_the_images() -> None:
    ds = toy()
    a, b, y = TwoViewBatches(ds, None, 10, seed=0).batch_at(4)
    idx = TwoViewBatches(ds, None, 10, seed=0).indices_at(4)
    assert torch.equal(a, ds.float_images()[idx]) and torch.equal(a, b)


def test_bad_arguments_are_named() -> None:
    ds = toy()
    with pytest.raises(ValueError, match="^batch_size"):
        TwoViewBatches(ds, None, 51)
    with pytest.raises(ValueError, match="^seed"):
        TwoViewBatches(ds, None, 5, seed=-1)
    with pytest.raises(TypeError, match="^augment"):
        TwoViewBatches(ds, lambda x, g: x, 5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="^step"):
        TwoViewBatches(ds, None, 5).batch_at(-1)
