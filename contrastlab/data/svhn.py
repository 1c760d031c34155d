"""SVHN, cropped digits (Netzer et al. 2011; http://ufldl.stanford.edu/housenumbers/), from its .mat files.

``{train,test,extra}_32x32.mat`` (MATLAB v5, read with ``scipy.io.loadmat``) hold ``X`` uint8 of shape
``(32, 32, 3, N)`` and ``y`` of shape ``(N, 1)`` with labels 1–10, where 10 stands for the digit 0.
"""

from __future__ import annotations

import mmap
import os
import zlib
from pathlib import Path

import numpy as np
import torch

from contrastlab.data.base import DatasetFormatError, ImageDataset, missing_files_error

__all__ = ["load_svhn", "SVHN_FILES", "SVHN_SOURCE"]

# what scipy's MATLAB reader raises on a malformed file (MatReadError is an Exception subclass)
_MAT_ERRORS: tuple[type[Exception], ...] = (
    ValueError,
    TypeError,
    OSError,
    EOFError,
    KeyError,
    IndexError,
    AttributeError,
    OverflowError,
    NotImplementedError,
    zlib.error,
)

SVHN_SOURCE = "http://ufldl.stanford.edu/housenumbers/ (format 2: cropped digits, *_32x32.mat)"
SVHN_FILES: dict[str, tuple[str, ...]] = {split: (f"{split}_32x32.mat",) for split in ("train", "test", "extra")}


def _loadmat(path: Path) -> dict[str, object]:
    """``scipy.io.loadmat`` over a read-only memory map of ``path``.

    Reading through the map bounds every read by the file's size: scipy reads a data element by the
    byte count its tag declares, and a buffered file would allocate that count before finding the bytes
    missing.
    """
    from scipy.io import loadmat
    from scipy.io.matlab import MatReadError

    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            raise DatasetFormatError(f"root: {path} is empty")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            try:
                return loadmat(m)  # type: ignore[arg-type]
            except (*_MAT_ERRORS, MatReadError) as e:
                text = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
                raise DatasetFormatError(
                    f"root: {path} is not a readable MATLAB file ({type(e).__name__}: {text})"
                ) from None


def load_svhn(root: str | Path, split: str = "train") -> ImageDataset:
    """Load SVHN as uint8 images ``(N, 3, 32, 32)`` with labels 0–9 (73257 train / 26032 test / 531131 extra).

    Args:
        root: the folder holding ``train_32x32.mat`` etc.
        split: ``"train"``, ``"test"`` or ``"extra"``.

    Raises:
        ValueError: a bad ``split``.
        DatasetFormatError: a malformed file (not MATLAB v4/v5, wrong variables, shapes or labels), named.
        DatasetNotFoundError: the file is missing; the message gives the expected path.
    """
    if split not in SVHN_FILES:
        raise ValueError(f"split must be one of {tuple(SVHN_FILES)}, got {split!r}")
    root = Path(root).expanduser()
    path = root / SVHN_FILES[split][0]
    if not path.is_file():
        raise missing_files_error("SVHN", root, SVHN_FILES[split], SVHN_SOURCE)
    mat = _loadmat(path)
    if "X" not in mat or "y" not in mat:
        raise DatasetFormatError(
            f"root: {path} must hold variables 'X' and 'y', got {sorted(k for k in mat if k[0] != '_')}"
        )
    x, y = mat["X"], mat["y"]
    if not isinstance(y, np.ndarray) or y.dtype.kind not in "iuf" or y.ndim != 2 or y.shape[1:] != (1,):
        got = f"{y.dtype} {y.shape}" if isinstance(y, np.ndarray) else type(y).__name__
        raise DatasetFormatError(f"root: {path} y must be a numeric (N, 1) array, got {got}")
    if not np.all(np.isfinite(y)) or not np.all(y == np.round(y)):
        raise DatasetFormatError(f"root: {path} y must hold integer labels")
    y = y.reshape(-1).astype(np.int64)
    if (
        not isinstance(x, np.ndarray)
        or x.dtype != np.uint8
        or x.ndim != 4
        or x.shape[:3] != (32, 32, 3)
        or x.shape[3] != y.shape[0]
    ):
        got = f"{x.dtype} {x.shape}" if isinstance(x, np.ndarray) else type(x).__name__
        raise DatasetFormatError(f"root: {path} X must be uint8 (32, 32, 3, N) with N = len(y), got {got}")
    if y.size and (y.min() < 1 or y.max() > 10):
        raise DatasetFormatError(f"root: {path} labels must lie in 1..10, got [{y.min()}, {y.max()}]")
    images = np.ascontiguousarray(x.transpose(3, 2, 0, 1))  # (H, W, C, N) -> (N, C, H, W)
    labels = y % 10  # the label 10 is the digit 0
    return ImageDataset(
        torch.from_numpy(images), torch.from_numpy(labels), tuple(str(i) for i in range(10)), f"svhn/{split}"
    )
