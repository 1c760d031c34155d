"""Tiny-ImageNet (Stanford CS231n, http://cs231n.stanford.edu/tiny-imagenet-200.zip) from its JPEG folders.

Layout of ``tiny-imagenet-200/``: ``wnids.txt`` (the 200 WordNet ids, one per line; their order is the
label order), optional ``words.txt`` (``wnid<TAB>name``), ``train/<wnid>/images/*.JPEG`` (500 per class),
``val/images/*.JPEG`` with ``val/val_annotations.txt`` (``file<TAB>wnid<TAB>x0<TAB>y0<TAB>x1<TAB>y1``).
The official test images carry no labels, so the labelled validation set serves as the test set.
Images are 64×64; the few grayscale ones are converted to RGB.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import torch

from contrastlab.data.base import DatasetFormatError, ImageDataset, missing_files_error

__all__ = ["load_tiny_imagenet", "TINY_IMAGENET_FILES", "TINY_IMAGENET_SOURCE"]

TINY_IMAGENET_SOURCE = "http://cs231n.stanford.edu/tiny-imagenet-200.zip"
TINY_DIR = "tiny-imagenet-200"
# what Pillow raises on a malformed JPEG (DecompressionBombError is an Exception subclass)
_IMAGE_ERRORS: tuple[type[Exception], ...] = (
    OSError,
    ValueError,
    SyntaxError,
    EOFError,
    struct.error,
    TypeError,
    IndexError,
    KeyError,
    ZeroDivisionError,
)

TINY_IMAGENET_FILES: dict[str, tuple[str, ...]] = {
    "train": (f"{TINY_DIR}/wnids.txt", f"{TINY_DIR}/train/<wnid>/images/*.JPEG"),
    "val": (f"{TINY_DIR}/wnids.txt", f"{TINY_DIR}/val/val_annotations.txt", f"{TINY_DIR}/val/images/*.JPEG"),
}


MAX_SIDE = 1024
"""Largest image side read (Tiny-ImageNet's are 64): a JPEG header may claim any size, checked before decoding."""


def _read_rgb(path: Path, size: tuple[int, int] | None) -> np.ndarray:
    """Decode one JPEG as ``(H, W, 3)`` uint8, after checking its declared size (``size``: the first image's)."""
    from PIL import Image

    errors: tuple[type[Exception], ...] = (*_IMAGE_ERRORS, Image.DecompressionBombError)
    try:
        with Image.open(path, formats=["JPEG"]) as im:
            if max(im.size) > MAX_SIDE or (size is not None and im.size != size):
                want = f"{size[0]}x{size[1]} like the first image" if size is not None else f"at most {MAX_SIDE} a side"
                raise DatasetFormatError(f"root: {path} is {im.size[0]}x{im.size[1]}; images must be {want}")
            return np.asarray(im.convert("RGB"), dtype=np.uint8)
    except DatasetFormatError:
        raise
    except errors as e:
        text = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
        raise DatasetFormatError(f"root: {path} is not a readable JPEG ({type(e).__name__}: {text})") from None


def _read_lines(path: Path) -> list[str]:
    try:
        return path.read_bytes().decode("utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise DatasetFormatError(f"root: {path} is not UTF-8 text ({e})") from None


def load_tiny_imagenet(root: str | Path, split: str = "train") -> ImageDataset:
    """Load Tiny-ImageNet as uint8 images ``(N, 3, 64, 64)``, 200 classes (100000 train / 10000 val).

    Args:
        root: the folder holding ``tiny-imagenet-200/`` (or that folder itself).
        split: ``"train"`` or ``"val"`` (``"test"`` is accepted as a synonym for the labelled ``"val"``).

    Returns:
        The dataset, images in sorted file order per class (train) or annotation-file order (val); class
        names from ``words.txt`` when present, else the wnids.

    Raises:
        ValueError: a bad ``split``.
        DatasetFormatError: a malformed file, named: text that is not UTF-8, an annotation line without a
            tab, an unknown wnid or a path instead of a file name in the annotations, an image that is not a
            readable JPEG, larger than ``MAX_SIDE`` a side, or of another size than the first.
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
    wnids = [w.strip() for w in _read_lines(wnids_file) if w.strip()]
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
        for number, line in enumerate(_read_lines(ann_file), 1):
            if not line.strip():
                continue
            parts = line.split("\t")
            if len(parts) < 2:
                raise DatasetFormatError(f"root: {ann_file} line {number} is not 'file<TAB>wnid<TAB>...'")
            fname, wnid = parts[:2]
            if wnid not in index:
                raise DatasetFormatError(f"root: {ann_file} names wnid {wnid[:40]!r}, which is not in wnids.txt")
            if not fname or Path(fname).name != fname or fname in (".", ".."):
                raise DatasetFormatError(f"root: {ann_file} line {number} names {fname[:80]!r}, not a file name")
            path = base / "val" / "images" / fname
            if not path.is_file():
                raise missing_files_error(
                    "Tiny-ImageNet", root, (f"{TINY_DIR}/val/images/{fname}",), TINY_IMAGENET_SOURCE
                )
            files.append(path)
            labels.append(index[wnid])
    arrays: list[np.ndarray] = []
    for p in files:
        arrays.append(_read_rgb(p, None if not arrays else (arrays[0].shape[1], arrays[0].shape[0])))
    images = np.stack(arrays).transpose(0, 3, 1, 2) if arrays else np.zeros((0, 3, 64, 64), np.uint8)
    names = {w: w for w in wnids}
    words = base / "words.txt"
    if words.is_file():
        for line in _read_lines(words):
            parts = line.split("\t")
            if len(parts) >= 2 and parts[0] in names:
                names[parts[0]] = parts[1].split(",")[0].strip()
    return ImageDataset(
        torch.from_numpy(np.ascontiguousarray(images)),
        torch.tensor(labels, dtype=torch.int64),
        tuple(names[w] for w in wnids),
        f"tiny-imagenet/{split}",
    )
