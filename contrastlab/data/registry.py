"""The dataset registry: ``load_dataset(name, root, split)`` over a plain dict ``DATASETS``.

Every entry says which files it expects (relative to ``root``) and where they come from, so a missing
dataset fails with a message that says exactly where to put what. Nothing is downloaded here; the command
``contrastlab data get NAME`` (:mod:`contrastlab.data.download`) fetches the public ones.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from contrastlab.data.base import DatasetNotFoundError, ImageDataset
from contrastlab.data.cifar import CIFAR10_FILES, CIFAR100_FILES, CIFAR_SOURCE, load_cifar10, load_cifar100
from contrastlab.data.cifar10h import CIFAR10H_COUNTS, CIFAR10H_SOURCE, load_cifar10h_images
from contrastlab.data.digits import load_digits
from contrastlab.data.imagenet32 import IMAGENET32_FILES, IMAGENET32_SOURCE, load_imagenet32
from contrastlab.data.stl10 import STL10_FILES, STL10_SOURCE, load_stl10
from contrastlab.data.svhn import SVHN_FILES, SVHN_SOURCE, load_svhn
from contrastlab.data.tiny_imagenet import TINY_IMAGENET_FILES, TINY_IMAGENET_SOURCE, load_tiny_imagenet

__all__ = ["DatasetSpec", "DATASETS", "load_dataset", "dataset_available", "default_data_root"]


@dataclass(frozen=True)
class DatasetSpec:
    """What the registry knows about one dataset.

    Attributes:
        name: the registry key.
        loader: ``loader(root, split) -> ImageDataset``.
        splits: the split names ``loader`` accepts; every dataset accepts ``"train"`` and ``"test"``.
        files: expected files per split, relative to ``root`` (``<wnid>``/``*`` mark patterns).
        source: where to obtain the files.
        num_classes: number of classes.
        image_shape: ``(C, H, W)`` of one image as loaded.
    """

    name: str
    loader: Callable[[Path, str], ImageDataset]
    splits: tuple[str, ...]
    files: dict[str, tuple[str, ...]]
    source: str
    num_classes: int
    image_shape: tuple[int, int, int]


def _digits(root: Path, split: str) -> ImageDataset:
    return load_digits(split)


def _with_meta(files: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
    return {s: files[s] + files["meta"] for s in files if s != "meta"}


DATASETS: dict[str, DatasetSpec] = {
    spec.name: spec
    for spec in (
        DatasetSpec("digits", _digits, ("train", "test", "all"), {}, "scikit-learn (bundled)", 10, (1, 8, 8)),
        DatasetSpec(
            "cifar10",
            load_cifar10,
            ("train", "test"),
            _with_meta(CIFAR10_FILES),
            CIFAR_SOURCE,
            10,
            (3, 32, 32),
        ),
        DatasetSpec(
            "cifar100",
            load_cifar100,
            ("train", "test"),
            _with_meta(CIFAR100_FILES),
            CIFAR_SOURCE,
            100,
            (3, 32, 32),
        ),
        DatasetSpec(
            "cifar10h",
            load_cifar10h_images,
            ("train", "test"),
            {
                "train": (*CIFAR10_FILES["train"], *CIFAR10_FILES["meta"]),
                "test": (CIFAR10H_COUNTS, *CIFAR10_FILES["test"], *CIFAR10_FILES["meta"]),
            },
            CIFAR10H_SOURCE,
            10,
            (3, 32, 32),
        ),
        DatasetSpec("stl10", load_stl10, ("train", "test", "unlabeled"), STL10_FILES, STL10_SOURCE, 10, (3, 96, 96)),
        DatasetSpec("svhn", load_svhn, ("train", "test", "extra"), SVHN_FILES, SVHN_SOURCE, 10, (3, 32, 32)),
        DatasetSpec(
            "imagenet32",
            load_imagenet32,
            ("train", "val", "test"),
            IMAGENET32_FILES,
            IMAGENET32_SOURCE,
            1000,
            (3, 32, 32),
        ),
        DatasetSpec(
            "tiny-imagenet",
            load_tiny_imagenet,
            ("train", "val", "test"),
            TINY_IMAGENET_FILES,
            TINY_IMAGENET_SOURCE,
            200,
            (3, 64, 64),
        ),
    )
}
"""Registry name → :class:`DatasetSpec`. Digits ignore ``root``; the others read it."""


def _spec(name: str, split: str) -> DatasetSpec:
    if name not in DATASETS:
        raise ValueError(f"name must be one of {tuple(DATASETS)}, got {name!r}")
    spec = DATASETS[name]
    if split not in spec.splits:
        raise ValueError(f"split must be one of {spec.splits} for {name}, got {split!r}")
    return spec


def default_data_root() -> Path:
    """``$CONTRASTLAB_DATA`` if set, else ``./data``: where datasets are looked for when no root is given."""
    return Path(os.environ.get("CONTRASTLAB_DATA", "data")).expanduser()


def load_dataset(name: str, root: str | Path | None = None, split: str = "train") -> ImageDataset:
    """Load the registered dataset ``name`` from local files.

    Args:
        name: a key of :data:`DATASETS` (``"digits"``, ``"cifar10"``, ``"cifar100"``, ``"stl10"``, ``"svhn"``,
            ``"imagenet32"``, ``"tiny-imagenet"``).
        root: the folder holding the dataset's files (see ``DATASETS[name].files``); default
            :func:`default_data_root`. Ignored for ``"digits"``, which ships with scikit-learn.
        split: one of ``DATASETS[name].splits``.

    Returns:
        The :class:`ImageDataset`.

    Raises:
        ValueError: an unknown ``name`` or ``split``.
        DatasetNotFoundError: the files are not under ``root``; the message lists where they go.

    Examples:
        >>> load_dataset("digits", split="test").images.shape
        torch.Size([360, 1, 8, 8])
    """
    spec = _spec(name, split)
    path = default_data_root() if root is None else Path(root).expanduser()
    if name != "digits" and not path.is_dir():
        raise DatasetNotFoundError(
            f"root: {path} is not a folder. Put the {name} files there "
            f"({', '.join(spec.files.get(split, ()))}); get them from {spec.source}. "
            "contrastlab never downloads data on its own (`contrastlab data get NAME` does)."
        )
    return spec.loader(path, split)


def dataset_available(name: str, root: str | Path | None = None, split: str | None = None) -> bool:
    """Whether ``load_dataset(name, root, split)`` would find its files (checks existence, reads nothing).

    ``split=None`` checks the dataset's first split ("train", or "test" for CIFAR-10H).

    Raises:
        ValueError: an unknown ``name`` or ``split``.
    """
    if split is None and name in DATASETS:
        split = DATASETS[name].splits[0]
    split = split if split is not None else "train"
    spec = _spec(name, split)
    if name == "digits":
        return True
    base = default_data_root() if root is None else Path(root).expanduser()
    key = "val" if split == "test" and "val" in spec.files else split
    for rel in spec.files[key]:
        if "*" in rel or "<" in rel:
            continue
        # loaders also accept root = the dataset's own folder, or (ImageNet-32) files directly under root
        top = Path(rel).parts[0]
        candidates = (
            base / rel,
            base.parent / rel if base.name == top else None,
            base / Path(rel).name if name == "imagenet32" else None,
        )
        if not any(c is not None and c.is_file() for c in candidates):
            return False
    return True
