"""CIFAR-10H: the distribution of human labels over the 10,000 CIFAR-10 test images (Peterson et al., ICCV 2019).

About 50 annotators labelled each CIFAR-10 test image; the data set is distributed
(https://github.com/jcpeterson/cifar-10h, folder ``data/``) as NumPy arrays in the order of the CIFAR-10
``test_batch``:

* ``cifar10h-counts.npy``: ``(10000, 10)`` annotator counts per image and class;
* ``cifar10h-probs.npy``: ``(10000, 10)`` the counts divided by their row sums.

:func:`load_cifar10h` reads either (counts first), checks it and returns a :class:`HumanLabels` with the
per-image label distribution and its entropy, the "human uncertainty" that Su, Ren & Veitch compare with
embedding norms (arXiv 2606.30625) and that Kirchhof, Kasneci & Oh (ICML 2023, arXiv 2302.02865) use for
MCInfoNCE. Files are
read with ``allow_pickle=False``: an ``.npy`` of numbers can run no code. Nothing is ever downloaded.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from contrastlab.data.base import DatasetFormatError, DatasetNotFoundError, ImageDataset
from contrastlab.npyfile import NpyFormatError, load_npy

__all__ = [
    "CIFAR10H_COUNTS",
    "CIFAR10H_PROBS",
    "CIFAR10H_SOURCE",
    "HumanLabels",
    "label_entropy",
    "load_cifar10h",
    "load_cifar10h_images",
]

CIFAR10H_COUNTS = "cifar10h-counts.npy"
CIFAR10H_PROBS = "cifar10h-probs.npy"
CIFAR10H_SOURCE = (
    f"https://github.com/jcpeterson/cifar-10h (data/{CIFAR10H_COUNTS}, or data/{CIFAR10H_PROBS}); "
    "the images are CIFAR-10's test_batch"
)
CIFAR10H_SHAPE = (10000, 10)
"""``(images, classes)`` of the published arrays."""


def label_entropy(probs: Tensor | np.ndarray) -> Tensor:
    """Shannon entropy ``H(p) = −Σ_k p_k log p_k`` in nats of each row (``0 log 0 = 0``).

    Shape:
        ``(N, K)`` probabilities (rows summing to 1) → ``(N,)`` float64 in ``[0, log K]``.

    Raises:
        ValueError: not 2-D, negative or non-finite entries.

    Examples:
        >>> label_entropy(torch.tensor([[0.5, 0.5], [1.0, 0.0]])).tolist()
        [0.6931471805599453, 0.0]
    """
    p = torch.as_tensor(probs, dtype=torch.float64)
    if p.ndim != 2:
        raise ValueError(f"probs must have shape (N, K), got {tuple(p.shape)}")
    if not bool(torch.isfinite(p).all()) or bool((p < 0).any()):
        raise ValueError("probs must be finite and non-negative")
    return -torch.special.xlogy(p, p).sum(1)


@dataclass(frozen=True)
class HumanLabels:
    """Per-image distributions of human labels.

    Attributes:
        probs: ``(N, K)`` float64, rows sum to 1: the share of annotators choosing each class.
        counts: ``(N, K)`` int64 annotator counts, or ``None`` when loaded from the probabilities file.
        source: the file read.
    """

    probs: Tensor
    counts: Tensor | None
    source: str

    def __len__(self) -> int:
        return int(self.probs.shape[0])

    @property
    def entropy(self) -> Tensor:
        """``(N,)`` entropy of each image's label distribution in nats, in ``[0, log K]``."""
        return label_entropy(self.probs)

    @property
    def majority(self) -> Tensor:
        """``(N,)`` int64 most chosen class (ties go to the smallest index)."""
        return self.probs.argmax(1)

    @property
    def max_prob(self) -> Tensor:
        """``(N,)`` share of the most chosen class (1 = unanimous)."""
        return self.probs.max(1).values

    @property
    def annotators(self) -> Tensor | None:
        """``(N,)`` annotators per image (row sums of ``counts``), or ``None`` without counts."""
        return None if self.counts is None else self.counts.sum(1)


def _check_array(a: np.ndarray, path: Path, *, counts: bool, shape: tuple[int, int] | None) -> np.ndarray:
    if a.dtype.kind not in "iuf":
        raise ValueError(f"path: {path} must hold numbers, got dtype {a.dtype}")
    if a.ndim != 2 or (shape is not None and a.shape != shape):
        want = shape if shape is not None else "(N, K)"
        raise ValueError(f"path: {path} must have shape {want}, got {a.shape}")
    x = a.astype(np.float64)
    if not np.all(np.isfinite(x)):
        raise ValueError(f"path: {path} contains NaN or Inf")
    if np.any(x < 0):
        raise ValueError(f"path: {path} contains negative entries (min {x.min()})")
    if counts:
        if not np.array_equal(x, np.round(x)):
            raise ValueError(f"path: {path} must hold integer annotator counts")
        if np.any(x.sum(1) == 0):
            raise ValueError(f"path: {path} has {int((x.sum(1) == 0).sum())} images without any annotation")
    elif not np.allclose(x.sum(1), 1.0, atol=1e-6):
        worst = float(np.abs(x.sum(1) - 1.0).max())
        raise ValueError(f"path: {path} rows must sum to 1 (probabilities), off by up to {worst:.3g}")
    return x


def _find(path: Path) -> Path:
    if path.is_file():
        return path
    if path.is_dir():
        for name in (CIFAR10H_COUNTS, CIFAR10H_PROBS):
            for cand in (path / name, path / "cifar-10h" / name, path / "cifar-10h" / "data" / name):
                if cand.is_file():
                    return cand
    raise DatasetNotFoundError(
        f"path: CIFAR-10H not found at {path}. Expected {path / CIFAR10H_COUNTS} (or {path / CIFAR10H_PROBS}); "
        f"get it from {CIFAR10H_SOURCE}. contrastlab never downloads data."
    )


def load_cifar10h(path: str | Path, *, expected_shape: tuple[int, int] | None = CIFAR10H_SHAPE) -> HumanLabels:
    """Load CIFAR-10H from a ``.npy`` file, or from a folder holding ``cifar10h-counts.npy``/``-probs.npy``.

    A file whose name contains ``"probs"`` is read as probabilities (rows sum to 1); any other as counts
    (non-negative integers, every image annotated at least once), whose rows are normalised. In a folder
    the counts file is preferred; ``<folder>/cifar-10h/`` and ``<folder>/cifar-10h/data/`` (the repository's
    layout) are searched too.

    Args:
        path: the file, or the folder holding it.
        expected_shape: the required ``(images, classes)``; the published ``(10000, 10)`` by default,
            ``None`` to accept any 2-D array (e.g. a subset).

    Returns:
        :class:`HumanLabels` in CIFAR-10 test order.

    Raises:
        DatasetNotFoundError: no such file; the message names the path and where to get it.
        ValueError: wrong shape or dtype, negative, non-integer (counts) or unnormalised (probs) entries.

    Examples:
        >>> import tempfile, pathlib
        >>> f = pathlib.Path(tempfile.mkdtemp()) / "cifar10h-counts.npy"
        >>> np.save(f, np.array([[3, 1], [0, 4]]))
        >>> load_cifar10h(f, expected_shape=None).probs.tolist()
        [[0.75, 0.25], [0.0, 1.0]]
    """
    file = _find(Path(path).expanduser())
    try:
        a = load_npy(file)
    except NpyFormatError as err:  # an object array (would need pickle), a corrupt or truncated file
        raise DatasetFormatError(f"path: {err}") from None
    counts = "probs" not in file.name
    x = _check_array(np.asarray(a), file, counts=counts, shape=expected_shape)
    probs = torch.from_numpy(x / x.sum(1, keepdims=True))
    return HumanLabels(probs=probs, counts=torch.from_numpy(x.astype(np.int64)) if counts else None, source=str(file))


def load_cifar10h_images(root: str | Path, split: str = "test") -> ImageDataset:
    """CIFAR-10 as the registry's ``cifar10h``: the test images with CIFAR-10H's majority human label.

    ``"test"`` needs ``cifar-10-batches-py/`` and the CIFAR-10H file under ``root``; its labels are the
    human majority (which differs from CIFAR-10's label for a few dozen images), and the full
    distributions come from :func:`load_cifar10h`. ``"train"`` is CIFAR-10's training set unchanged (no
    human labels exist for it): the images an encoder is trained on before it is evaluated on ``"test"``.

    Raises:
        ValueError: ``split`` is neither ``"train"`` nor ``"test"``, or the CIFAR-10H file has the wrong shape.
        DatasetNotFoundError: files missing.
    """
    from contrastlab.data.cifar import load_cifar10

    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    images = load_cifar10(root, split)
    if split == "train":
        return ImageDataset(images.images, images.labels, images.classes, "cifar10h/train")
    human = load_cifar10h(root, expected_shape=(len(images), 10))
    return ImageDataset(images.images, human.majority, images.classes, "cifar10h/test")
