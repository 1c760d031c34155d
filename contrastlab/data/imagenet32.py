"""ImageNet-32, the downsampled ImageNet of Chrabaszcz, Loshchilov, Hutter (2017), from its npz batches.

The distribution (https://image-net.org/download-images.php, "Downsampled ImageNet 32x32", npz format)
unpacks to ``Imagenet32_train_npz/train_data_batch_{1..10}.npz`` and ``Imagenet32_val_npz/val_data.npz``.
Each npz holds ``data`` (uint8, ``(n, 3072)``, CIFAR's layout: red, green, blue planes of 32×32) and
``labels`` (1–1000); train batches also hold the per-pixel ``mean``, which is not used here. Files are read
with ``numpy.load(allow_pickle=False)``, so an npz cannot smuggle in pickled objects.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from contrastlab.data.base import DatasetFormatError, ImageDataset, missing_files_error
from contrastlab.npyfile import NpyFormatError, load_npz

__all__ = ["load_imagenet32", "IMAGENET32_FILES", "IMAGENET32_SOURCE"]

IMAGENET32_SOURCE = "https://image-net.org/download-images.php (Downsampled ImageNet 32x32, npz format)"
IMAGENET32_FILES: dict[str, tuple[str, ...]] = {
    "train": tuple(f"Imagenet32_train_npz/train_data_batch_{i}.npz" for i in range(1, 11)),
    "val": ("Imagenet32_val_npz/val_data.npz",),
}
NUM_CLASSES = 1000


def _find(root: Path, rel: str) -> Path | None:
    """``root/rel``, or ``root/<file name>`` when the batches were unpacked without their folder."""
    for p in (root / rel, root / Path(rel).name):
        if p.is_file():
            return p
    return None


def load_imagenet32(root: str | Path, split: str = "train") -> ImageDataset:
    """Load ImageNet-32 as uint8 images ``(N, 3, 32, 32)`` with labels 0–999 (1281167 train / 50000 val).

    Args:
        root: the folder holding ``Imagenet32_train_npz/`` and ``Imagenet32_val_npz/`` (the npz files may
            also sit directly in ``root``).
        split: ``"train"`` (all ten batches) or ``"val"`` (``"test"`` is accepted as a synonym, since the
            validation set is the benchmark's test set).

    Raises:
        ValueError: a bad ``split``.
        DatasetFormatError: a malformed batch (not an npz, a member missing, bad CRC, wrong shapes or labels).
        DatasetNotFoundError: a batch is missing; the message lists the expected paths.
    """
    if split == "test":
        split = "val"
    if split not in IMAGENET32_FILES:
        raise ValueError(f"split must be one of ('train', 'val', 'test'), got {split!r}")
    root = Path(root).expanduser()
    paths = [_find(root, rel) for rel in IMAGENET32_FILES[split]]
    if any(p is None for p in paths):
        raise missing_files_error("ImageNet-32", root, IMAGENET32_FILES[split], IMAGENET32_SOURCE)
    images, labels = [], []
    for p in paths:
        assert p is not None
        try:
            arrays = load_npz(p, ("data", "labels"))
        except NpyFormatError as e:
            raise DatasetFormatError(f"root: {e}") from None
        data, lab = arrays["data"], arrays["labels"]
        if lab.dtype.kind not in "iu" or lab.ndim > 2:
            raise DatasetFormatError(f"root: {p} labels must be integers of shape (n,), got {lab.dtype} {lab.shape}")
        lab = lab.reshape(-1).astype(np.int64)
        if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072 or data.shape[0] != lab.shape[0]:
            raise DatasetFormatError(
                f"root: {p} data must be uint8 (n, 3072) with n = len(labels), got {data.dtype} {data.shape}"
            )
        if lab.size and (lab.min() < 1 or lab.max() > NUM_CLASSES):
            raise DatasetFormatError(f"root: {p} labels must lie in 1..{NUM_CLASSES}, got [{lab.min()}, {lab.max()}]")
        images.append(data.reshape(-1, 3, 32, 32))
        labels.append(lab - 1)
    return ImageDataset(
        torch.from_numpy(np.concatenate(images)),
        torch.from_numpy(np.concatenate(labels)),
        tuple(str(i) for i in range(NUM_CLASSES)),
        f"imagenet32/{split}",
    )
