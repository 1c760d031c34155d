"""scikit-learn's bundled handwritten digits (UCI optdigits test set, 1797 images of 8×8).

The dataset that always ships, so every vision experiment runs without downloading anything.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from contrastlab.data.base import ImageDataset

__all__ = ["load_digits", "DIGITS_SIZES"]

DIGITS_SIZES = (8, 16, 32)
"""Image sizes :func:`load_digits` produces: native 8×8, or bilinear upsampling to 16×16 / 32×32."""


def load_digits(
    split: str = "train",
    *,
    image_size: int = 8,
    test_fraction: float = 0.2,
    split_seed: int = 0,
) -> ImageDataset:
    """Load the digits as ``(N, 1, H, W)`` float32 images in ``[0, 1]`` with labels 0–9.

    The pixel intensities 0–16 are divided by 16. The train/test split is stratified by class and
    fixed by ``split_seed`` (``sklearn.model_selection.train_test_split``), so ``"train"`` and ``"test"``
    are disjoint and together make ``"all"``.

    Args:
        split: ``"train"``, ``"test"`` or ``"all"``.
        image_size: 8 (native), 16 or 32 (bilinear upsampling, ``align_corners=False``, clamped to [0, 1]).
        test_fraction: fraction of each class held out for ``"test"``, in (0, 1).
        split_seed: seed of the stratified split.

    Returns:
        An :class:`ImageDataset` named ``"digits/<split>"``: 1437 train / 360 test / 1797 all images
        at the defaults.

    Raises:
        ValueError: a bad ``split``, ``image_size`` or ``test_fraction``.

    Examples:
        >>> ds = load_digits("test", image_size=16)
        >>> ds.images.shape
        torch.Size([360, 1, 16, 16])
    """
    from sklearn.datasets import load_digits as _sk_load_digits
    from sklearn.model_selection import train_test_split

    if split not in ("train", "test", "all"):
        raise ValueError(f"split must be one of ('train', 'test', 'all'), got {split!r}")
    if image_size not in DIGITS_SIZES:
        raise ValueError(f"image_size must be one of {DIGITS_SIZES}, got {image_size!r}")
    if isinstance(test_fraction, bool) or not isinstance(test_fraction, (int, float)) or not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must be a number in (0, 1), got {test_fraction!r}")
    bunch = _sk_load_digits()
    images = np.asarray(bunch.images, dtype=np.float32) / 16.0  # (1797, 8, 8), intensities 0..16
    labels = np.asarray(bunch.target, dtype=np.int64)
    if split != "all":
        index = np.arange(len(labels))
        train_idx, test_idx = train_test_split(
            index, test_size=test_fraction, random_state=split_seed, stratify=labels, shuffle=True
        )
        keep = np.sort(train_idx if split == "train" else test_idx)
        images, labels = images[keep], labels[keep]
    x = torch.from_numpy(images).unsqueeze(1)  # (N, 1, 8, 8)
    if image_size != 8:
        x = F.interpolate(x, size=(image_size, image_size), mode="bilinear", align_corners=False).clamp_(0.0, 1.0)
    return ImageDataset(x.contiguous(), torch.from_numpy(labels), tuple(str(i) for i in range(10)), f"digits/{split}")
