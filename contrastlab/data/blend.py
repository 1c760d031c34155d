"""Blended images with a known label distribution: ground-truth uncertainty where no human labels exist.

Each blended image is ``x = w · x_a + (1 − w) · x_b`` for two images of *different* classes ``a ≠ b``
and a mixing weight ``w ∈ [½, 1]`` (``w = 1`` is the clean image ``x_a``). Its label distribution puts
``w`` on class ``a`` and ``1 − w`` on class ``b``, and its ground-truth uncertainty is the entropy of that
distribution, ``H(w) = −w log w − (1 − w) log(1 − w)`` (nats, ``0`` at ``w = 1`` up to ``log 2`` at
``w = ½``). This is the image counterpart of the concept world's ambiguity construction
(``contrastlab.worlds.concepts``: a positive drawn from a partner concept with probability ``α``), and
the stand-in for CIFAR-10H (:mod:`contrastlab.data.cifar10h`) in the ``norms-vs-uncertainty`` experiment.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from contrastlab.data.base import ImageDataset

__all__ = ["BlendedImages", "binary_entropy", "blend_images"]


def binary_entropy(w: Tensor) -> Tensor:
    """``H(w) = −w log w − (1 − w) log(1 − w)`` in nats, elementwise (``0 log 0 = 0``).

    Raises:
        ValueError: an entry outside ``[0, 1]``.

    Examples:
        >>> binary_entropy(torch.tensor([1.0, 0.5])).tolist()
        [0.0, 0.6931471805599453]
    """
    w = torch.as_tensor(w, dtype=torch.float64)
    if not bool(((w >= 0) & (w <= 1)).all()):
        raise ValueError("w must lie in [0, 1]")
    return -(torch.special.xlogy(w, w) + torch.special.xlogy(1 - w, 1 - w))


@dataclass(frozen=True)
class BlendedImages:
    """The output of :func:`blend_images`.

    Attributes:
        images: ``(N, C, H, W)`` float32 blends ``w · x_a + (1 − w) · x_b`` in ``[0, 1]``.
        weight: ``(N,)`` float64 mixing weight ``w`` of the dominant image, in ``[½, 1]``.
        label_a: ``(N,)`` int64 class of the dominant image (the retrieval label).
        label_b: ``(N,)`` int64 class of the other image (``≠ label_a``).
        index_a: ``(N,)`` int64 row of the dominant image in the source dataset.
        index_b: ``(N,)`` int64 row of the other image.
        probs: ``(N, K)`` float64 label distribution: ``w`` at ``label_a``, ``1 − w`` at ``label_b``.
    """

    images: Tensor
    weight: Tensor
    label_a: Tensor
    label_b: Tensor
    index_a: Tensor
    index_b: Tensor
    probs: Tensor

    def __len__(self) -> int:
        return int(self.images.shape[0])

    @property
    def entropy(self) -> Tensor:
        """``(N,)`` ground-truth uncertainty ``H(w)`` in nats (equals the entropy of ``probs``)."""
        return binary_entropy(self.weight)

    def as_dataset(self, name: str = "blended") -> ImageDataset:
        """An :class:`ImageDataset` of the blends labelled with the dominant class."""
        return ImageDataset(self.images, self.label_a, tuple(str(k) for k in range(self.probs.shape[1])), name)


def blend_images(
    dataset: ImageDataset,
    n: int,
    *,
    generator: torch.Generator,
    weight_range: tuple[float, float] = (0.5, 1.0),
) -> BlendedImages:
    """Blend ``n`` random pairs of images of different classes with ``w ~ U(weight_range)``.

    The dominant image ``x_a`` is drawn uniformly from ``dataset``; ``x_b`` uniformly from the images of
    the other classes. All draws come from ``generator``.

    Args:
        dataset: labelled images (every label ``≥ 0``, at least two classes present).
        n: number of blends.
        generator: CPU generator of every draw.
        weight_range: ``(lo, hi)`` with ``½ ≤ lo ≤ hi ≤ 1`` (the dominant image keeps the larger share).

    Returns:
        :class:`BlendedImages`.

    Raises:
        ValueError: ``n < 1``, a bad ``weight_range``, unlabelled rows or a single class.

    Examples:
        >>> from contrastlab.data import load_digits
        >>> b = blend_images(load_digits("test"), 4, generator=torch.Generator().manual_seed(0))
        >>> b.images.shape, bool((b.label_a != b.label_b).all())
        (torch.Size([4, 1, 8, 8]), True)
    """
    if not isinstance(dataset, ImageDataset):
        raise TypeError(f"dataset must be an ImageDataset, got {type(dataset).__name__}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    if (
        not isinstance(weight_range, (tuple, list))
        or len(weight_range) != 2
        or not 0.5 <= float(weight_range[0]) <= float(weight_range[1]) <= 1.0
    ):
        raise ValueError(f"weight_range must be (lo, hi) with 0.5 <= lo <= hi <= 1, got {weight_range!r}")
    labels = dataset.labels
    if len(labels) == 0 or int(labels.min()) < 0:
        raise ValueError("dataset must be labelled (no -1 labels)")
    if int(labels.unique().numel()) < 2:
        raise ValueError("dataset must hold at least two classes to blend across classes")
    lo, hi = float(weight_range[0]), float(weight_range[1])
    index_a = torch.randint(len(dataset), (n,), generator=generator)
    label_a = labels[index_a]
    # x_b: uniform over the rows of another class. Draw a rank among the N − n_{label_a} other rows and map
    # it through the rows sorted by label, skipping the block of label_a.
    order = torch.argsort(labels, stable=True)
    counts = torch.bincount(labels, minlength=dataset.num_classes)
    starts = torch.cumsum(counts, 0) - counts  # first sorted position of each class
    n_other = len(dataset) - counts[label_a]
    rank = (torch.rand(n, generator=generator, dtype=torch.float64) * n_other).floor().long()
    rank = torch.minimum(rank, n_other - 1)
    pos = torch.where(rank < starts[label_a], rank, rank + counts[label_a])
    index_b = order[pos]
    label_b = labels[index_b]
    w = lo + (hi - lo) * torch.rand(n, generator=generator, dtype=torch.float64)
    x = dataset.float_images()
    wf = w.to(torch.float32).view(-1, 1, 1, 1)
    images = (wf * x[index_a] + (1 - wf) * x[index_b]).clamp_(0.0, 1.0)
    probs = torch.zeros(n, dataset.num_classes, dtype=torch.float64)
    probs[torch.arange(n), label_a] = w
    probs[torch.arange(n), label_b] += 1 - w
    return BlendedImages(images, w, label_a, label_b, index_a, index_b, probs)
