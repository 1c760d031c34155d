"""STL-10 from its binary distribution (Coates, Lee, Ng 2011; https://cs.stanford.edu/~acoates/stl10/).

``stl10_binary/{train,test,unlabeled}_X.bin`` hold uint8 images of 3×96×96, each stored channel by
channel in column-major order (so a plane reads as the transpose of the image);
``{train,test}_y.bin`` hold one uint8 label 1–10 per image; ``class_names.txt`` one name per line.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from contrastlab.data.base import DatasetFormatError, ImageDataset, missing_files_error

__all__ = ["load_stl10", "STL10_FILES", "STL10_SOURCE"]

STL10_SOURCE = "https://cs.stanford.edu/~acoates/stl10/ (stl10_binary.tar.gz)"
STL10_DIR = "stl10_binary"
STL10_FILES: dict[str, tuple[str, ...]] = {
    "train": (f"{STL10_DIR}/train_X.bin", f"{STL10_DIR}/train_y.bin"),
    "test": (f"{STL10_DIR}/test_X.bin", f"{STL10_DIR}/test_y.bin"),
    "unlabeled": (f"{STL10_DIR}/unlabeled_X.bin",),
}
_SIDE = 96
_DEFAULT_CLASSES = ("airplane", "bird", "car", "cat", "deer", "dog", "horse", "monkey", "ship", "truck")


def load_stl10(root: str | Path, split: str = "train") -> ImageDataset:
    """Load STL-10 as uint8 images ``(N, 3, 96, 96)`` (5000 train / 8000 test / 100000 unlabeled).

    Args:
        root: the folder holding ``stl10_binary/`` (or that folder itself).
        split: ``"train"``, ``"test"`` or ``"unlabeled"`` (labels all ``-1``; 2.8 GB in memory).

    Raises:
        ValueError: a bad ``split``.
        DatasetFormatError: a file whose size is not a whole number of images, labels outside 1..(number of
            class names), or a ``class_names.txt`` that is not UTF-8 (the file is named).
        DatasetNotFoundError: a file is missing; the message lists the expected paths.
    """
    if split not in STL10_FILES:
        raise ValueError(f"split must be one of {tuple(STL10_FILES)}, got {split!r}")
    root = Path(root).expanduser()
    if not (root / STL10_DIR).is_dir() and root.name == STL10_DIR:
        root = root.parent
    files = STL10_FILES[split]
    if not all((root / f).is_file() for f in files):
        raise missing_files_error("STL-10", root, files, STL10_SOURCE)
    raw = np.fromfile(root / files[0], dtype=np.uint8)
    per_image = 3 * _SIDE * _SIDE
    if raw.size % per_image:
        raise DatasetFormatError(f"root: {root / files[0]} has {raw.size} bytes, not a multiple of {per_image}")
    # column-major planes: reshape to (N, C, W, H) and swap the last two axes to get (N, C, H, W)
    images = np.ascontiguousarray(raw.reshape(-1, 3, _SIDE, _SIDE).transpose(0, 1, 3, 2))
    names_file = root / STL10_DIR / "class_names.txt"
    classes = _read_class_names(names_file) if names_file.is_file() else _DEFAULT_CLASSES
    if split == "unlabeled":
        labels = np.full(images.shape[0], -1, dtype=np.int64)
    else:
        labels = np.fromfile(root / files[1], dtype=np.uint8).astype(np.int64) - 1  # 1..10 -> 0..9
        if labels.shape[0] != images.shape[0]:
            raise DatasetFormatError(
                f"root: {root / files[1]} has {labels.shape[0]} labels for {images.shape[0]} images"
            )
        if labels.size and (labels.min() < 0 or labels.max() >= len(classes)):
            raise DatasetFormatError(
                f"root: {root / files[1]} labels must lie in 1..{len(classes)} (one per class name), "
                f"got [{labels.min() + 1}, {labels.max() + 1}]"
            )
    return ImageDataset(torch.from_numpy(images), torch.from_numpy(labels), classes, f"stl10/{split}")


def _read_class_names(path: Path) -> tuple[str, ...]:
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise DatasetFormatError(f"root: {path} is not UTF-8 text ({e})") from None
    return tuple(line.strip() for line in text.splitlines() if line.strip())
