"""Tiny-ImageNet (Stanford CS231n, http://cs231n.stanford.edu/tiny-imagenet-200.zip) from its JPEG folders.

Layout of ``tiny-imagenet-200/``: ``wnids.txt`` (the 200 WordNet ids, one per line; their order is the
label order), optional ``words.txt`` (``wnid<TAB>name``), ``train/<wnid>/images/*.JPEG`` (500 per class),
``val/images/*.JPEG`` with ``val/val_annotations.txt`` (``file<TAB>wnid<TAB>x0<TAB>y0<TAB>x1<TAB>y1``).
The official test images carry no labels, so the labelled validation set serves as the test set.
Images are 64×64; the few grayscale ones are converted to RGB.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from contrastlab.data.base import ImageDataset, missing_files_error

__all__ = ["load_tiny_imagenet", "TINY_IMAGENET_FILES", "TINY_IMAGENET_SOURCE"]

TINY_IMAGENET_SOURCE = "http://cs231n.stanford.edu/tiny-imagenet-200.zip"
TINY_DIR = "tiny-imagenet-200"
TINY_IMAGENET_FILES: dict[str, tuple[str, ...]] = {
    "train": (f"{TINY_DIR}/wnids.txt", f"{TINY_DIR}/train/<wnid>/images/*.JPEG"),
    "val": (f"{TINY_DIR}/wnids.txt", f"{TINY_DIR}/val/val_annotations.txt", f"{TINY_DIR}/val/images/*.JPEG"),
}


def _read_rgb(path: Path) -> np.ndarray:
    from PIL import Image

    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"), dtype=np.uint8)  # (H, W, 3)


def load_tiny_imagenet(root: str | Path, split: str = "train") -> ImageDataset:
    """Load Tiny-ImageNet as uint8 images ``(N, 3, 64, 64)``, 200 classes (100000 train / 10000 val).

    Args:
        root: the folder holding ``tiny-imagenet-200/`` (or that folder itself).
        split: ``"train"`` or ``"val"`` (``"test"`` is accepted as a synonym for the labelled ``"val"``).

    Returns:
        The dataset, images in sorted file order per class (train) or annotation-file order (val); class
        names from ``words.txt`` when present, else the wnids.

    Raises:
        ValueError: a bad ``split``, an unknown wnid in the annotations, or images of mixed sizes.
        DatasetNotFoundError: a file or folder is missing; the message lists the expected layout.
    """
    if split == "test":
        split = "val"
    if split not in TINY_IMAGENET_FILES:
        raise ValueError(f"split must be one of ('train', 'val', 'test'), got {split!r}")
    root = Path(root).expanduser()
    if not (root / TINY_DIR).is_dir() and root.name == TINY_DIR:
        root = root.parent
    base = root / TINY_DIR
    wnids_file = base / "wnids.txt"
    ann_file = base / "val" / "val_annotations.txt"
    if not wnids_file.is_file() or (split == "val" and not ann_file.is_file()):
        raise missing_files_error("Tiny-ImageNet", root, TINY_IMAGENET_FILES[split], TINY_IMAGENET_SOURCE)
    wnids = [w.strip() for w in wnids_file.read_text().splitlines() if w.strip()]
    index = {w: i for i, w in enumerate(wnids)}
    files: list[Path] = []
    labels: list[int] = []
    if split == "train":
        for w in wnids:
            class_files = sorted((base / "train" / w / "images").glob("*.JPEG"))
            if not class_files:
                raise missing_files_error(
                    "Tiny-ImageNet", root, (f"{TINY_DIR}/train/{w}/images/*.JPEG",), TINY_IMAGENET_SOURCE
                )
            files += class_files
            labels += [index[w]] * len(class_files)
    else:
        for line in ann_file.read_text().splitlines():
            if not line.strip():
                continue
            fname, wnid = line.split("\t")[:2]
            if wnid not in index:
                raise ValueError(f"root: {ann_file} names wnid {wnid!r}, which is not in wnids.txt")
            path = base / "val" / "images" / fname
            if not path.is_file():
                raise missing_files_error(
                    "Tiny-ImageNet", root, (f"{TINY_DIR}/val/images/{fname}",), TINY_IMAGENET_SOURCE
                )
            files.append(path)
            labels.append(index[wnid])
    arrays = [_read_rgb(p) for p in files]
    shapes = {a.shape for a in arrays}
    if len(shapes) > 1:
        raise ValueError(f"root: Tiny-ImageNet images under {base} have mixed sizes {sorted(shapes)}")
    images = np.stack(arrays).transpose(0, 3, 1, 2) if arrays else np.zeros((0, 3, 64, 64), np.uint8)
    names = {w: w for w in wnids}
    words = base / "words.txt"
    if words.is_file():
        for line in words.read_text().splitlines():
            parts = line.split("\t")
            if len(parts) >= 2 and parts[0] in names:
                names[parts[0]] = parts[1].split(",")[0].strip()
    return ImageDataset(
        torch.from_numpy(np.ascontiguousarray(images)),
        torch.tensor(labels, dtype=torch.int64),
        tuple(names[w] for w in wnids),
        f"tiny-imagenet/{split}",
    )
