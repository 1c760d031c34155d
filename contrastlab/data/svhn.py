"""SVHN, cropped digits (Netzer et al. 2011; http://ufldl.stanford.edu/housenumbers/), from its .mat files.

``{train,test,extra}_32x32.mat`` (MATLAB v5, read with :func:`contrastlab.data.mat5.read_mat5`, which
checks every size before reading; ``scipy.io.loadmat`` crashes on some malformed files) hold ``X`` uint8 of shape
``(32, 32, 3, N)`` and ``y`` of shape ``(N, 1)`` with labels 1–10, where 10 stands for the digit 0.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from contrastlab.data.base import DatasetFormatError, ImageDataset, missing_files_error
from contrastlab.data.mat5 import read_mat5

__all__ = ["load_svhn", "SVHN_FILES", "SVHN_SOURCE"]

SVHN_SOURCE = "http://ufldl.stanford.edu/housenumbers/ (format 2: cropped digits, *_32x32.mat)"
SVHN_FILES: dict[str, tuple[str, ...]] = {split: (f"{split}_32x32.mat",) for split in ("train", "test", "extra")}


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
    mat = read_mat5(path)
    if "X" not in mat or "y" not in mat:
        raise DatasetFormatError(
            f"root: {path} must hold variables 'X' and 'y', got {sorted(k for k in mat if not k.startswith('_'))[:20]}"
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
