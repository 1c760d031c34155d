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
import struct
from pathlib import Path
from typing import Any

import numpy as np
import torch

from contrastlab.data.base import DatasetFormatError, ImageDataset, missing_files_error

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


def _numpy_reconstruct() -> Any:
    try:  # numpy >= 2 moved the implementation to numpy._core; the CIFAR files name numpy.core
        from numpy._core.multiarray import _reconstruct as fn
    except ImportError:  # pragma: no cover - numpy 1.x
        from numpy.core.multiarray import _reconstruct as fn  # type: ignore[no-redef]
    return fn


class _NdarrayToken:
    """Stands for ``numpy.ndarray`` in a pickle: usable only as ``_reconstruct``'s first argument.

    Resolving the global to the class itself would let a ``REDUCE`` call ``numpy.ndarray((10**10,))``
    and allocate uninitialised memory that no byte of the file pays for.
    """


_NDARRAY = _NdarrayToken()


def _reconstruct(subtype: Any, shape: Any, dtype: Any) -> np.ndarray:
    """``numpy``'s ``_reconstruct`` as pickles call it: an empty ``(0,)`` array that ``BUILD`` then fills."""
    if subtype is not _NDARRAY or shape != (0,) or not isinstance(dtype, (bytes, str)):
        raise pickle.UnpicklingError(f"refusing _reconstruct({type(subtype).__name__}, {type(shape).__name__}, ...)")
    return _numpy_reconstruct()(np.ndarray, (0,), dtype)


def _plain_dtype(*args: Any) -> np.dtype:
    """``numpy.dtype`` for the unpickler, refusing object dtypes (whose items would be arbitrary objects)."""
    if not args or not isinstance(args[0], (str, bytes)) or any(not isinstance(a, (bool, int)) for a in args[1:]):
        raise pickle.UnpicklingError("refusing numpy.dtype with arguments other than a type code and flags")
    dt = np.dtype(*args)
    if dt.hasobject:
        raise pickle.UnpicklingError(f"refusing to unpickle an object dtype {dt!r}")
    return dt


def _latin1_encode(text: Any, encoding: Any = "utf-8", errors: Any = "strict") -> bytes:
    """``_codecs.encode`` as Python 3 protocol-2 pickles use it for ``bytes``: only str → latin-1 bytes."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1") or errors != "strict":
        raise pickle.UnpicklingError(f"refusing _codecs.encode({type(text).__name__}, {encoding!r}, {errors!r})")
    return text.encode("latin-1")


class RestrictedUnpickler(pickle._Unpickler):  # type: ignore[name-defined,misc]
    """An unpickler that rebuilds only builtin containers and plain numpy arrays.

    Allowed globals: ``numpy.core.multiarray._reconstruct`` (and its numpy ≥ 2 home
    ``numpy._core.multiarray``) with ``numpy.ndarray`` only as its subtype argument, ``numpy.dtype``
    (object dtypes refused) and ``_codecs.encode`` restricted to latin-1 (how Python 3 writes ``bytes``
    at protocol 2, as in re-pickled copies of the batches). Everything else raises
    ``pickle.UnpicklingError`` naming the global.

    It extends Python's pure-Python unpickler, whose memo is a dict: the C unpickler sizes its memo
    array by the largest index a ``LONG_BINPUT`` names, so nine bytes can make it allocate gigabytes.
    """

    _ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("_codecs", "encode"),
    }

    dispatch = dict(pickle._Unpickler.dispatch)  # type: ignore[attr-defined]

    def _refuse_bytearray8(self: Any) -> None:
        # the pure-Python unpickler allocates BYTEARRAY8's declared length before reading it; protocol 5
        # opcodes never occur in the dataset pickles
        raise pickle.UnpicklingError("refusing BYTEARRAY8 (protocol 5); dataset pickles use protocols 2 to 4")

    dispatch[pickle.BYTEARRAY8[0]] = _refuse_bytearray8

    def find_class(self, module: str, name: str) -> Any:
        """Resolve an allowed global, refuse the rest."""
        if (module, name) not in self._ALLOWED:
            raise pickle.UnpicklingError(
                f"refusing to unpickle global {module}.{name}: only numpy arrays, dicts, lists, bytes, str "
                "and ints are allowed in a dataset file"
            )
        if name == "_reconstruct":
            return _reconstruct
        if name == "encode":
            return _latin1_encode
        return _NDARRAY if name == "ndarray" else _plain_dtype


# what a malformed pickle raises inside the pure-Python unpickler and the calls it is allowed to make
_UNPICKLE_ERRORS = (
    pickle.UnpicklingError,
    EOFError,
    ValueError,
    TypeError,
    KeyError,
    IndexError,
    AttributeError,
    OverflowError,
    struct.error,
)


def restricted_load(path: str | Path) -> Any:
    """Unpickle ``path`` with :class:`RestrictedUnpickler` (``encoding="bytes"``, as the CIFAR files need).

    Raises:
        pickle.UnpicklingError: naming the file, when it names a global that is not allowed or is not a
            well-formed pickle.
    """
    data = Path(path).read_bytes()
    try:
        return RestrictedUnpickler(io.BytesIO(data), encoding="bytes").load()
    except _UNPICKLE_ERRORS as e:
        text = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
        raise pickle.UnpicklingError(f"{path}: not a loadable dataset pickle ({type(e).__name__}: {text})") from None


def _get(d: Any, key: str, path: Path) -> Any:
    if not isinstance(d, dict):
        raise DatasetFormatError(f"root: {path} does not hold a dict, got {type(d).__name__}")
    for k in (key.encode(), key):
        if k in d:
            return d[k]
    shown = sorted(repr(k)[:40] for k in d if isinstance(k, (str, bytes)))[:20]
    raise DatasetFormatError(f"root: {path} has no key {key!r} (keys: {shown})")


def _decode(names: Any, path: Path) -> tuple[str, ...]:
    if not isinstance(names, (list, tuple)) or not all(isinstance(n, (bytes, str)) for n in names):
        raise DatasetFormatError(f"root: {path} class names must be a list of strings")
    try:
        return tuple(n.decode() if isinstance(n, bytes) else n for n in names)
    except UnicodeDecodeError as e:
        raise DatasetFormatError(f"root: {path} has a class name that is not UTF-8 ({e})") from None


def _labels(raw: Any, n: int, path: Path) -> np.ndarray:
    """Labels as a list of ints or an integer array of ``n`` entries (a nested list is never expanded)."""
    if isinstance(raw, list) and all(type(x) is int for x in raw):
        lab = np.array(raw, dtype=np.int64) if all(-(2**63) <= x < 2**63 for x in raw) else None
    elif isinstance(raw, np.ndarray) and raw.dtype.kind in "iu" and raw.ndim == 1:
        lab = raw.astype(np.int64)
    else:
        lab = None
    if lab is None or lab.shape != (n,):
        what = f"{type(raw).__name__} of {len(raw)}" if isinstance(raw, (list, np.ndarray)) else type(raw).__name__
        raise DatasetFormatError(f"root: {path} has {n} images but its labels are not {n} integers (got {what})")
    return lab


def _read_batches(paths: list[Path], label_key: str) -> tuple[torch.Tensor, torch.Tensor]:
    images, labels = [], []
    for p in paths:
        d = restricted_load(p)
        data = _get(d, "data", p)
        if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
            got = f"{data.dtype} {data.shape}" if isinstance(data, np.ndarray) else type(data).__name__
            raise DatasetFormatError(f"root: {p} data must be a uint8 array of shape (n, 3072), got {got}")
        lab = _labels(_get(d, label_key, p), data.shape[0], p)
        images.append(data.reshape(-1, 3, 32, 32))  # channel-major rows: R plane, G plane, B plane
        labels.append(lab)
    return torch.from_numpy(np.concatenate(images)), torch.from_numpy(np.concatenate(labels))


def _dataset(
    images: torch.Tensor, labels: torch.Tensor, classes: tuple[str, ...], name: str, path: Path
) -> ImageDataset:
    """The :class:`ImageDataset`, with labels out of range reported against the file that holds them."""
    if len(labels) and (int(labels.min()) < 0 or int(labels.max()) >= len(classes)):
        raise DatasetFormatError(
            f"root: {path} labels must lie in [0, {len(classes)}) for its {len(classes)} class names, "
            f"got [{int(labels.min())}, {int(labels.max())}]"
        )
    return ImageDataset(images, labels, classes, name)


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
        ValueError: a bad ``split``.
        DatasetFormatError: a malformed batch or meta file (named).
        DatasetNotFoundError: a file is missing; the message lists the expected paths.
        pickle.UnpicklingError: a file is not a pickle, or holds something other than arrays, dicts, lists
            and strings (named).
    """
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    *batches, meta = _resolve(root, CIFAR10_DIR, CIFAR10_FILES, split, "CIFAR-10")
    images, labels = _read_batches(batches, "labels")
    classes = _decode(_get(restricted_load(meta), "label_names", meta), meta)
    return _dataset(images, labels, classes, f"cifar10/{split}", meta.parent)


def load_cifar100(root: str | Path, split: str = "train", *, label_type: str = "fine") -> ImageDataset:
    """Load CIFAR-100 (50000 train / 10000 test uint8 images ``(N, 3, 32, 32)``).

    Args:
        root: the folder holding ``cifar-100-python/`` (or that folder itself).
        split: ``"train"`` or ``"test"``.
        label_type: ``"fine"`` (100 classes, the usual benchmark) or ``"coarse"`` (20 superclasses).

    Raises:
        ValueError: a bad ``split``/``label_type``.
        DatasetFormatError: a malformed batch or meta file (named).
        DatasetNotFoundError: a file is missing; the message lists the expected paths.
        pickle.UnpicklingError: a file is not a pickle, or holds something other than arrays, dicts, lists
            and strings (named).
    """
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    if label_type not in ("fine", "coarse"):
        raise ValueError(f"label_type must be 'fine' or 'coarse', got {label_type!r}")
    batch, meta = _resolve(root, CIFAR100_DIR, CIFAR100_FILES, split, "CIFAR-100")
    images, labels = _read_batches([batch], f"{label_type}_labels")
    classes = _decode(_get(restricted_load(meta), f"{label_type}_label_names", meta), meta)
    return _dataset(images, labels, classes, f"cifar100/{split}", meta.parent)
