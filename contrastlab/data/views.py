"""SimCLR's two-view batches as a *batch source*: a pure function of the training step.

``TwoViewBatches(dataset, augment, batch_size, seed).batch_at(step)`` returns two independently
augmented views of the same images (SimCLR, Chen et al. 2020, Algorithm 1) and their labels. Which
images: :class:`contrastlab.train.EpochSampler`, a permutation of the dataset per epoch seeded by
``(seed, epoch)``; which augmentation parameters: :func:`contrastlab.train.step_generator` ``(seed, step)``.
Nothing depends on earlier calls, so a run resumed at step ``t`` sees exactly the batches it would have seen.
"""

from __future__ import annotations

import torch
from torch import Tensor

from contrastlab.data.augment import Augmentation
from contrastlab.data.base import ImageDataset
from contrastlab.data.sampler import EpochSampler, step_generator

__all__ = ["TwoViewBatches"]


class TwoViewBatches:
    """Two augmented views per image, batch by batch, as a pure function of the step.

    Steps run through epochs: ``steps_per_epoch = len(dataset) // batch_size`` (the last partial batch
    is dropped so every batch has ``batch_size`` rows; SimCLR's loss wants a fixed 2N). Step ``t`` takes
    rows ``[(t mod S)·B, (t mod S + 1)·B)`` of epoch ``t // S``'s permutation.

    Args:
        dataset: the images (``uint8`` or float in [0, 1]).
        augment: the augmentation applied independently to make each view; ``None`` gives two copies
            of the un-augmented images.
        batch_size: images per batch ``B`` (each yields two views).
        seed: the seed of the permutations and of the augmentation draws.
        device: where the returned tensors live; augmentation runs there (parameters are drawn on the CPU,
            so the views are the same numbers on every device up to floating-point differences).

    Shape:
        ``batch_at(step)`` → ``(view_a (B, C, H', W'), view_b (B, C, H', W'), labels (B,))``, views float32.

    Raises:
        ValueError: ``batch_size`` is not in ``[1, len(dataset)]`` or ``seed`` is negative.

    Examples:
        >>> from contrastlab.data import load_digits, augmentation_regime
        >>> aug = augmentation_regime("simclr_all", 8)
        >>> batches = TwoViewBatches(load_digits(), aug, batch_size=64, seed=0)
        >>> a, b, y = batches.batch_at(0)
        >>> a.shape, b.shape, y.shape
        (torch.Size([64, 1, 8, 8]), torch.Size([64, 1, 8, 8]), torch.Size([64]))
    """

    def __init__(
        self,
        dataset: ImageDataset,
        augment: Augmentation | None,
        batch_size: int,
        seed: int = 0,
        *,
        device: str | torch.device = "cpu",
    ) -> None:
        if not isinstance(dataset, ImageDataset):
            raise TypeError(f"dataset must be an ImageDataset, got {type(dataset).__name__}")
        if augment is not None and not isinstance(augment, Augmentation):
            raise TypeError(f"augment must be an Augmentation or None, got {type(augment).__name__}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or not 1 <= batch_size <= len(dataset):
            raise ValueError(f"batch_size must be an int in [1, {len(dataset)}] (the dataset size), got {batch_size!r}")
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ValueError(f"seed must be a non-negative int, got {seed!r}")
        self.dataset, self.augment, self.batch_size, self.seed = dataset, augment, batch_size, seed
        self.device = torch.device(device)
        self.sampler = EpochSampler(len(dataset), batch_size, seed=seed, drop_last=True)
        self.steps_per_epoch = self.sampler.steps_per_epoch

    def __repr__(self) -> str:
        return (
            f"TwoViewBatches(dataset={self.dataset.name!r}, batch_size={self.batch_size}, seed={self.seed}, "
            f"steps_per_epoch={self.steps_per_epoch}, augment={self.augment!r})"
        )

    def indices_at(self, step: int) -> Tensor:
        """The dataset rows of step ``step``, shape ``(B,)`` int64."""
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ValueError(f"step must be a non-negative int, got {step!r}")
        return self.sampler.indices_at(step)

    def batch_at(self, step: int) -> tuple[Tensor, Tensor, Tensor]:
        """The two views and labels of step ``step`` (see the class docstring for shapes)."""
        idx = self.indices_at(step)
        x = self.dataset.images[idx].to(self.device)
        x = x.to(torch.float32) / 255.0 if x.dtype == torch.uint8 else x.to(torch.float32)
        labels = self.dataset.labels[idx].to(self.device)
        if self.augment is None:
            return x, x.clone(), labels
        g = step_generator(self.seed, step)
        return self.augment(x, g), self.augment(x, g), labels

    __call__ = batch_at
