"""The image-dataset container every loader returns, and the error for a dataset that is not on disk.

Images are kept as they are distributed: ``uint8`` for the real datasets (CIFAR, STL-10, SVHN,
ImageNet-32, Tiny-ImageNet), float in ``[0, 1]`` for scikit-learn's digits. :meth:`ImageDataset.float_images`
gives the float ``[0, 1]`` view that the augmentations (:mod:`contrastlab.data.augment`) and encoders expect.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["ImageDataset", "DatasetNotFoundError", "DatasetFormatError", "to_float_images"]


class DatasetNotFoundError(FileNotFoundError):
    """A dataset's files are not under the given root. The message says which files go where."""


class DatasetFormatError(ValueError):
    """A dataset file is present but malformed (corrupt, truncated, wrong shape or values); the message names it."""


def to_float_images(images: Tensor) -> Tensor:
    """Convert ``uint8`` images in ``[0, 255]`` to float32 in ``[0, 1]``; float images pass through.

    Shape:
        ``(..., C, H, W)`` in, the same shape out.

    Raises:
        TypeError: ``images`` is not a tensor, or has a dtype other than uint8 or floating point.
    """
    if not isinstance(images, Tensor):
        raise TypeError(f"images must be a torch.Tensor, got {type(images).__name__}")
    if images.dtype == torch.uint8:
        return images.to(torch.float32) / 255.0
    if images.is_floating_point():
        return images
    raise TypeError(f"images must be uint8 or floating point, got dtype {images.dtype}")


@dataclass(frozen=True, eq=False)
class ImageDataset:
    """A labelled image dataset held in memory.

    Attributes:
        images: ``(N, C, H, W)`` tensor, ``uint8`` in ``[0, 255]`` or floating point in ``[0, 1]``.
        labels: ``(N,)`` int64 class indices in ``[0, len(classes))``; ``-1`` marks an unlabelled image
            (STL-10's ``unlabeled`` split).
        classes: the class names, index ``i`` naming label ``i``.
        name: a short name such as ``"cifar10/train"``, used in logs and reports.

    Raises:
        TypeError: wrong tensor types.
        ValueError: wrong shapes, or labels outside ``[-1, len(classes))``.

    Examples:
        >>> ds = ImageDataset(torch.zeros(4, 1, 8, 8), torch.tensor([0, 1, 0, 1]), ("a", "b"), "toy")
        >>> len(ds), ds.image_shape, ds.num_classes
        (4, (1, 8, 8), 2)
    """

    images: Tensor
    labels: Tensor
    classes: tuple[str, ...]
    name: str

    def __post_init__(self) -> None:
        if not isinstance(self.images, Tensor):
            raise TypeError(f"images must be a torch.Tensor, got {type(self.images).__name__}")
        if self.images.dtype != torch.uint8 and not self.images.is_floating_point():
            raise TypeError(f"images must be uint8 or floating point, got dtype {self.images.dtype}")
        if self.images.ndim != 4:
            raise ValueError(f"images must have shape (N, C, H, W), got {tuple(self.images.shape)}")
        if not isinstance(self.labels, Tensor) or self.labels.dtype != torch.int64:
            got = self.labels.dtype if isinstance(self.labels, Tensor) else type(self.labels).__name__
            raise TypeError(f"labels must be an int64 torch.Tensor, got {got}")
        if self.labels.shape != (self.images.shape[0],):
            raise ValueError(
                f"labels must have shape ({self.images.shape[0]},) to match images, got {tuple(self.labels.shape)}"
            )
        object.__setattr__(self, "classes", tuple(str(c) for c in self.classes))
        if len(self.labels) and (int(self.labels.min()) < -1 or int(self.labels.max()) >= len(self.classes)):
            raise ValueError(
                f"labels must lie in [-1, {len(self.classes)}) for {len(self.classes)} classes, "
                f"got range [{int(self.labels.min())}, {int(self.labels.max())}]"
            )

    def __len__(self) -> int:
        return int(self.images.shape[0])

    def __repr__(self) -> str:
        return (
            f"ImageDataset(name={self.name!r}, n={len(self)}, image_shape={self.image_shape}, "
            f"dtype={self.images.dtype}, num_classes={self.num_classes})"
        )

    @property
    def num_classes(self) -> int:
        """The number of classes, ``len(classes)``."""
        return len(self.classes)

    @property
    def image_shape(self) -> tuple[int, int, int]:
        """``(C, H, W)`` of one image."""
        c, h, w = self.images.shape[1:]
        return int(c), int(h), int(w)

    @property
    def channels(self) -> int:
        """The number of channels C."""
        return int(self.images.shape[1])

    @property
    def image_size(self) -> int:
        """The side H of square images.

        Raises:
            ValueError: the images are not square.
        """
        _, h, w = self.image_shape
        if h != w:
            raise ValueError(f"images are {h}x{w}, not square; use image_shape")
        return h

    def float_images(self) -> Tensor:
        """The images as float32 in ``[0, 1]``, shape ``(N, C, H, W)``."""
        return to_float_images(self.images)

    def subset(self, index: Tensor | Sequence[int], name: str | None = None) -> ImageDataset:
        """The rows ``index`` (a 1-D int tensor, a list of ints, or a bool mask of length N)."""
        idx = torch.as_tensor(index)
        if idx.dtype == torch.bool:
            if idx.shape != (len(self),):
                raise ValueError(f"index as a mask must have shape ({len(self)},), got {tuple(idx.shape)}")
        elif idx.is_floating_point() or idx.ndim != 1:
            raise ValueError(f"index must be a 1-D integer tensor or a bool mask, got {idx.dtype} {tuple(idx.shape)}")
        return ImageDataset(self.images[idx], self.labels[idx], self.classes, name or self.name)

    def resized(self, size: int) -> ImageDataset:
        """A copy with images resized to ``size × size``: bilinear, antialiased when shrinking.

        The dtype is kept (``uint8`` results are rounded), so STL-10's 96×96 or Tiny-ImageNet's 64×64
        images can be brought to the 32×32 of the CIFAR encoders.

        Raises:
            ValueError: ``size`` is not a positive int.
        """
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"size must be a positive int, got {size!r}")
        if self.image_shape[1:] == (size, size):
            return self
        x = F.interpolate(self.float_images(), size=(size, size), mode="bilinear", align_corners=False, antialias=True)
        x = x.clamp_(0.0, 1.0)
        images = (x * 255.0).round_().to(torch.uint8) if self.images.dtype == torch.uint8 else x.to(self.images.dtype)
        return ImageDataset(images, self.labels, self.classes, self.name)


def missing_files_error(dataset: str, root: Path, expected: Sequence[str], source: str) -> DatasetNotFoundError:
    """Build the error for a dataset whose files are absent: where they go and where they come from."""
    lines = "\n".join(f"  {root / e}" for e in expected)
    return DatasetNotFoundError(
        f"root: {dataset} files not found under {root}. Expected:\n{lines}\n"
        f"contrastlab never downloads data on its own: `contrastlab data get NAME` fetches cifar10, cifar100, stl10 "
        f"and svhn; or get the files from {source} and unpack them so these paths exist."
    )
