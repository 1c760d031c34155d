"""SVHN, cropped digits (Netzer et al. 2011; http://ufldl.stanford.edu/housenumbers/), from its .mat files.

``{train,test,extra}_32x32.mat`` (MATLAB v5, read with ``scipy.io.loadmat``) hold ``X`` uint8 of shape
``(32, 32, 3, N)`` and ``y`` of shape ``(N, 1)`` with labels 1–10, where 10 stands for the digit 0.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from contrastlab.data.base import ImageDataset, missing_files_error

__all__ = ["load_svhn", "SVHN_FILES", "SVHN_SOURCE"]

SVHN_SOURCE = "http://ufldl.stanford.edu/housenumbers/ (format 2: cropped digits, *_32x32.mat)"
SVHN_FILES: dict[str, tuple[str, ...]] = {split: (f"{split}_32x32.mat",) for split in ("train", "test", "extra")}


def load_svhn(root: str | Path, split: str = "train") -> ImageDataset:
    """Load SVHN as uint8 images ``(N, 3, 32, 32)`` with labels 0–9 (73257 train / 26032 test / 531131 extra).

    Args:
        root: the folder holding ``train_32x32.mat`` etc.
        split: ``"train"``, ``"test"`` or ``"extra"``.

    Raises:
        ValueError: a bad ``split`` or malformed file.
        DatasetNotFoundError: the file is missing; the message gives the expected path.
    """
    from scipy.io import loadmat

    if split not in SVHN_FILES:
        raise ValueError(f"split must be one of {tuple(SVHN_FILES)}, got {split!r}")
    root = Path(root).expanduser()
    path = root / SVHN_FILES[split][0]
    if not path.is_file():
        raise missing_files_error("SVHN", root, SVHN_FILES[split], SVHN_SOURCE)
    mat = loadmat(path)
    if "X" not in mat or "y" not in mat:
        raise ValueError(f"root: {path} must hold variables 'X' and 'y', got {sorted(k for k in mat if k[0] != '_')}")
    x, y = np.asarray(mat["X"]), np.asarray(mat["y"]).reshape(-1).astype(np.int64)
    if x.dtype != np.uint8 or x.ndim != 4 or x.shape[:3] != (32, 32, 3) or x.shape[3] != y.shape[0]:
        raise ValueError(f"root: {path} X must be uint8 (32, 32, 3, N) with N = len(y), got {x.dtype} {x.shape}")
    if y.size and (y.min() < 1 or y.max() > 10):
        raise ValueError(f"root: {path} labels must lie in 1..10, got [{y.min()}, {y.max()}]")
    images = np.ascontiguousarray(x.transpose(3, 2, 0, 1))  # (H, W, C, N) -> (N, C, H, W)
    labels = y % 10  # the label 10 is the digit 0
    return ImageDataset(
        torch.from_numpy(images), torch.from_numpy(labels), tuple(str(i) for i in range(10)), f"svhn/{split}"
    )
