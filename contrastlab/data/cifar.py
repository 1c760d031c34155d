"""CIFAR-10 and CIFAR-100 from their "python version" pickle batches, read with a restricted unpickler.

A pickle can run arbitrary code when loaded (a ``__reduce__`` that names ``os.system``), so the batches
are read by :class:`RestrictedUnpickler`, which resolves only the globals needed to rebuild a numpy
array of a plain (non-object) dtype. Dicts, lists, bytes, str and ints need no global and load as usual;
any other global is refused with ``pickle.UnpicklingError`` before anything is called.

Layout (Krizhevsky 2009, https://www.cs.toronto.edu/~kriz/cifar.html): each batch is a dict with
``b"data"`` (uint8, ``(n, 3072)``, 1024 red then 1024 green then 1024 blue values, rows of 32 pixels) and
``b"labels"`` (CIFAR-10) or ``b"fine_labels"``/``b"coarse_labels"`` (CIFAR-100).
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import torch

from contrastlab.data.base import ImageDataset, missing_files_error

__all__ = [
    "RestrictedUnpickler",
    "restricted_load",
    "load_cifar10",
    "load_cifar100",
    "CIFAR10_FILES",
    "CIFAR100_FILES",
    "CIFAR_SOURCE",
]

CIFAR_SOURCE = "https://www.cs.toronto.edu/~kriz/cifar.html (the 'python version' archives)"
CIFAR10_DIR = "cifar-10-batches-py"
CIFAR100_DIR = "cifar-100-python"
CIFAR10_FILES: dict[str, tuple[str, ...]] = {
    "train": tuple(f"{CIFAR10_DIR}/data_batch_{i}" for i in range(1, 6)),
    "test": (f"{CIFAR10_DIR}/test_batch",),
    "meta": (f"{CIFAR10_DIR}/batches.meta",),
}
CIFAR100_FILES: dict[str, tuple[str, ...]] = {
    "train": (f"{CIFAR100_DIR}/train",),
    "test": (f"{CIFAR100_DIR}/test",),
    "meta": (f"{CIFAR100_DIR}/meta",),
}


def _reconstruct() -> Any:
    try:  # numpy >= 2 moved the implementation to numpy._core; the CIFAR files name numpy.core
        from numpy._core.multiarray import _reconstruct as fn
    except ImportError:  # pragma: no cover - numpy 1.x
        from numpy.core.multiarray import _reconstruct as fn  # type: ignore[no-redef]
    return fn


def _plain_dtype(*args: Any) -> np.dtype:
    """``numpy.dtype`` for the unpickler, refusing object dtypes (whose items would be arbitrary objects)."""
    dt = np.dtype(*args)
    if dt.hasobject:
        raise pickle.UnpicklingError(f"refusing to unpickle an object dtype {dt!r}")
    return dt


def _latin1_encode(text: Any, encoding: Any = "utf-8", errors: Any = "strict") -> bytes:
    """``_codecs.encode`` as Python 3 protocol-2 pickles use it for ``bytes``: only str → latin-1 bytes."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1") or errors != "strict":
        raise pickle.UnpicklingError(f"refusing _codecs.encode({type(text).__name__}, {encoding!r}, {errors!r})")
    return text.encode("latin-1")


class RestrictedUnpickler(pickle.Unpickler):
    """An unpickler that rebuilds only builtin containers and plain numpy arrays.

    Allowed globals: ``numpy.core.multiarray._reconstruct`` (and its numpy ≥ 2 home
    ``numpy._core.multiarray``), ``numpy.ndarray``, ``numpy.dtype`` (object dtypes refused) and
    ``_codecs.encode`` restricted to latin-1 (how Python 3 writes ``bytes`` at protocol 2, as in re-pickled
    copies of the batches). Everything else raises ``pickle.UnpicklingError`` naming the global.
    """

    _ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("_codecs", "encode"),
    }

    def find_class(self, module: str, name: str) -> Any:
        """Resolve an allowed global, refuse the rest."""
        if (module, name) not in self._ALLOWED:
            raise pickle.UnpicklingError(
                f"refusing to unpickle global {module}.{name}: only numpy arrays, dicts, lists, bytes, str "
                "and ints are allowed in a dataset file"
            )
        if name == "_reconstruct":
            return _reconstruct()
        if name == "encode":
            return _latin1_encode
        return np.ndarray if name == "ndarray" else _plain_dtype


def restricted_load(path: str | Path) -> Any:
    """Unpickle ``path`` with :class:`RestrictedUnpickler` (``encoding="bytes"``, as the CIFAR files need).

    Raises:
        pickle.UnpicklingError: the file names a global that is not allowed.
    """
    data = Path(path).read_bytes()
    return RestrictedUnpickler(io.BytesIO(data), encoding="bytes").load()


def _get(d: Any, key: str, path: Path) -> Any:
    if not isinstance(d, dict):
        raise ValueError(f"root: {path} does not hold a dict, got {type(d).__name__}")
    for k in (key.encode(), key):
        if k in d:
            return d[k]
    raise ValueError(f"root: {path} has no key {key!r} (keys: {sorted(map(str, d))})")


def _decode(names: Any) -> tuple[str, ...]:
    return tuple(n.decode() if isinstance(n, bytes) else str(n) for n in names)


def _read_batches(paths: list[Path], label_key: str) -> tuple[torch.Tensor, torch.Tensor]:
    images, labels = [], []
    for p in paths:
        d = restricted_load(p)
        data = np.asarray(_get(d, "data", p))
        if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
            raise ValueError(f"root: {p} data must be uint8 of shape (n, 3072), got {data.dtype} {data.shape}")
        lab = np.asarray(_get(d, label_key, p), dtype=np.int64)
        if lab.shape != (data.shape[0],):
            raise ValueError(f"root: {p} has {data.shape[0]} images but {lab.shape} labels")
        images.append(data.reshape(-1, 3, 32, 32))  # channel-major rows: R plane, G plane, B plane
        labels.append(lab)
    return torch.from_numpy(np.concatenate(images)), torch.from_numpy(np.concatenate(labels))


def _resolve(root: str | Path, subdir: str, files: dict[str, tuple[str, ...]], split: str, name: str) -> list[Path]:
    root = Path(root).expanduser()
    if not (root / subdir).is_dir() and root.name == subdir:  # the user passed the extracted folder itself
        root = root.parent
    wanted = files[split] + files["meta"]
    if not all((root / f).is_file() for f in wanted):
        raise missing_files_error(name, root, wanted, CIFAR_SOURCE)
    return [root / f for f in files[split]] + [root / files["meta"][0]]


def load_cifar10(root: str | Path, split: str = "train") -> ImageDataset:
    """Load CIFAR-10 (50000 train / 10000 test uint8 images ``(N, 3, 32, 32)``, 10 classes).

    Args:
        root: the folder holding ``cifar-10-batches-py/`` (or that folder itself).
        split: ``"train"`` (``data_batch_1`` … ``data_batch_5``) or ``"test"`` (``test_batch``).

    Raises:
        ValueError: a bad ``split`` or malformed batch.
        DatasetNotFoundError: a file is missing; the message lists the expected paths.
        pickle.UnpicklingError: a batch holds something other than arrays, dicts, lists and strings.
    """
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    *batches, meta = _resolve(root, CIFAR10_DIR, CIFAR10_FILES, split, "CIFAR-10")
    images, labels = _read_batches(batches, "labels")
    classes = _decode(_get(restricted_load(meta), "label_names", meta))
    return ImageDataset(images, labels, classes, f"cifar10/{split}")


def load_cifar100(root: str | Path, split: str = "train", *, label_type: str = "fine") -> ImageDataset:
    """Load CIFAR-100 (50000 train / 10000 test uint8 images ``(N, 3, 32, 32)``).

    Args:
        root: the folder holding ``cifar-100-python/`` (or that folder itself).
        split: ``"train"`` or ``"test"``.
        label_type: ``"fine"`` (100 classes, the usual benchmark) or ``"coarse"`` (20 superclasses).

    Raises:
        ValueError: a bad ``split``/``label_type`` or malformed batch.
        DatasetNotFoundError: a file is missing; the message lists the expected paths.
        pickle.UnpicklingError: a batch holds something other than arrays, dicts, lists and strings.
    """
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    if label_type not in ("fine", "coarse"):
        raise ValueError(f"label_type must be 'fine' or 'coarse', got {label_type!r}")
    batch, meta = _resolve(root, CIFAR100_DIR, CIFAR100_FILES, split, "CIFAR-100")
    images, labels = _read_batches([batch], f"{label_type}_labels")
    classes = _decode(_get(restricted_load(meta), f"{label_type}_label_names", meta))
    return ImageDataset(images, labels, classes, f"cifar100/{split}")
