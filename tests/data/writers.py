"""Tiny datasets written in each dataset's standard on-disk format, for tests that read them back.

``WRITERS[name](root, n)`` writes ``n`` random images per split (train and test) of the registered image
dataset ``name`` under ``root``, laid out as the real archives unpack, so ``load_dataset(name, root, split)``
reads them; for the train job's ``pairs`` dataset it writes ``16 n`` feature pairs. The values come from a
fixed-seed generator.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path

import numpy as np

from contrastlab.data.cifar10h import CIFAR10H_COUNTS

RNG = np.random.default_rng(0)


def py2_style_pickle(obj: object) -> bytes:
    """Protocol 2 with numpy's pre-2.0 module path, as in the real CIFAR archives.

    (Python 3 writes bytes at protocol 2 through ``_codecs.encode(str, "latin1")``; Python 2 wrote them as
    plain strings. The unpickler accepts both.)
    """
    data = pickle.dumps(obj, protocol=2)
    return data.replace(b"numpy._core.multiarray", b"numpy.core.multiarray")


def cifar_batch(n: int, label_keys: dict[str, list[int]]) -> tuple[bytes, np.ndarray]:
    """One pickled CIFAR batch of ``n`` random images with the given label lists; returns (bytes, images)."""
    images = RNG.integers(0, 256, size=(n, 3, 32, 32), dtype=np.uint8)
    d: dict[bytes, object] = {b"batch_label": b"training batch", b"data": images.reshape(n, 3072)}
    d[b"filenames"] = [f"img_{i}.png".encode() for i in range(n)]
    for k, v in label_keys.items():
        d[k.encode()] = v
    data = py2_style_pickle(d)
    assert b"cnumpy.core.multiarray\n_reconstruct\n" in data  # the path numpy 1.x wrote
    return data, images


CIFAR10_CLASSES = [b"airplane", b"automobile", b"bird", b"cat", b"deer", b"dog", b"frog", b"horse", b"ship", b"truck"]


def write_cifar10(root: Path, n: int = 3) -> dict[str, tuple[np.ndarray, list[int]]]:
    """``cifar-10-batches-py/``: five training batches and the test batch of ``n`` images each."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    written = {}
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        labels = RNG.integers(0, 10, size=n).tolist()
        data, images = cifar_batch(n, {"labels": labels})
        (folder / name).write_bytes(data)
        written[name] = (images, labels)
    meta = {b"label_names": CIFAR10_CLASSES, b"num_cases_per_batch": n, b"num_vis": 3072}
    (folder / "batches.meta").write_bytes(py2_style_pickle(meta))
    return written


def write_cifar10h(root: Path, n: int = 3) -> None:
    """CIFAR-10 plus ``cifar10h-counts.npy``: 50 annotators per test image, all for one class."""
    write_cifar10(root, n)
    counts = np.zeros((n, 10))
    counts[np.arange(n), RNG.integers(0, 10, size=n)] = 50.0
    np.save(root / CIFAR10H_COUNTS, counts)


def write_cifar100(root: Path, n: int = 3) -> None:
    """``cifar-100-python/``: train, test and meta with fine (100) and coarse (20) labels."""
    folder = root / "cifar-100-python"
    folder.mkdir(parents=True)
    for split in ("train", "test"):
        fine, coarse = RNG.integers(0, 100, size=n).tolist(), RNG.integers(0, 20, size=n).tolist()
        (folder / split).write_bytes(cifar_batch(n, {"fine_labels": fine, "coarse_labels": coarse})[0])
    meta = {b"fine_label_names": [f"f{i}".encode() for i in range(100)],
            b"coarse_label_names": [f"c{i}".encode() for i in range(20)]}  # fmt: skip
    (folder / "meta").write_bytes(py2_style_pickle(meta))


def write_stl10(root: Path, n: int = 3) -> None:
    """``stl10_binary/``: ``{split}_X.bin`` (column-major 96×96 images) and ``{split}_y.bin`` (labels 1–10)."""
    folder = root / "stl10_binary"
    folder.mkdir(parents=True)
    for split in ("train", "test"):
        images = RNG.integers(0, 256, size=(n, 3, 96, 96), dtype=np.uint8)
        (folder / f"{split}_X.bin").write_bytes(images.transpose(0, 1, 3, 2).tobytes())
        (folder / f"{split}_y.bin").write_bytes(RNG.integers(1, 11, size=n).astype(np.uint8).tobytes())


def write_svhn(root: Path, n: int = 3) -> None:
    """``{split}_32x32.mat``: ``X`` of shape (32, 32, 3, N) and ``y`` in 1–10 (10 is the digit 0)."""
    from scipy.io import savemat

    root.mkdir(parents=True, exist_ok=True)
    for split in ("train", "test"):
        images = RNG.integers(0, 256, size=(n, 3, 32, 32), dtype=np.uint8)
        savemat(root / f"{split}_32x32.mat", {"X": images.transpose(2, 3, 1, 0), "y": RNG.integers(1, 11, (n, 1))})


def write_imagenet32(root: Path, n: int = 3) -> None:
    """``Imagenet32_train_npz/train_data_batch_{1..10}.npz`` and ``Imagenet32_val_npz/val_data.npz``."""
    train_dir, val_dir = root / "Imagenet32_train_npz", root / "Imagenet32_val_npz"
    train_dir.mkdir(parents=True)
    val_dir.mkdir(parents=True)
    paths = [train_dir / f"train_data_batch_{i}.npz" for i in range(1, 11)] + [val_dir / "val_data.npz"]
    for path in paths:
        images = RNG.integers(0, 256, size=(n, 3 * 32 * 32), dtype=np.uint8)
        np.savez(path, data=images, labels=RNG.integers(1, 1001, size=n), mean=np.zeros(3072))


def write_tiny_imagenet(root: Path, n: int = 3) -> None:
    """``tiny-imagenet-200/``: two classes, ``n`` train JPEGs each, ``n`` validation JPEGs and their labels."""
    from PIL import Image

    base = root / "tiny-imagenet-200"
    wnids = ["n01443537", "n01629819"]
    (base / "val" / "images").mkdir(parents=True)
    base.joinpath("wnids.txt").write_text("\n".join(wnids) + "\n")
    base.joinpath("words.txt").write_text("n01443537\tgoldfish\nn01629819\tEuropean fire salamander\n")

    def image() -> Image.Image:
        return Image.fromarray(RNG.integers(0, 256, size=(64, 64, 3), dtype=np.uint8), "RGB")

    for w in wnids:
        d = base / "train" / w / "images"
        d.mkdir(parents=True)
        for i in range(n):
            image().save(d / f"{w}_{i}.JPEG", quality=95)
    lines = []
    for i in range(n):
        image().save(base / "val" / "images" / f"val_{i}.JPEG", quality=95)
        lines.append(f"val_{i}.JPEG\t{wnids[i % 2]}\t0\t0\t63\t63\n")
    (base / "val" / "val_annotations.txt").write_text("".join(lines))


def write_pairs(root: Path, n: int = 3) -> None:
    """``anchors.npy`` and ``positives.npy``: ``16 n`` rows of 8 float32 features, positive = anchor + noise."""
    root.mkdir(parents=True, exist_ok=True)
    anchors = RNG.standard_normal((16 * n, 8)).astype(np.float32)
    np.save(root / "anchors.npy", anchors)
    np.save(root / "positives.npy", anchors + 0.1 * RNG.standard_normal(anchors.shape).astype(np.float32))


def write_task_source(root: Path, n: int = 3) -> None:
    """``scifact/``: a BEIR folder (train split) of ``20 n`` made-up queries, one relevant document each,
    under the name the example config reads (no SciFact text)."""
    import json

    folder = root / "scifact"
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    m = 20 * n
    docs = "".join(
        json.dumps({"_id": f"d{i}", "title": f"t{i}", "text": f"finding number {i}"}) + "\n" for i in range(m)
    )
    queries = "".join(json.dumps({"_id": f"q{i}", "text": f"claim number {i}"}) + "\n" for i in range(m))
    (folder / "corpus.jsonl").write_text(docs)
    (folder / "queries.jsonl").write_text(queries)
    (folder / "qrels" / "train.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n" for i in range(m))
    )


WRITERS: dict[str, Callable[[Path, int], object]] = {
    "cifar10": write_cifar10,
    "cifar10h": write_cifar10h,
    "cifar100": write_cifar100,
    "stl10": write_stl10,
    "svhn": write_svhn,
    "imagenet32": write_imagenet32,
    "tiny-imagenet": write_tiny_imagenet,
    "pairs": write_pairs,
    "sources": write_task_source,
}
"""File-backed dataset name → writer ``(root, n)``: ``n`` images per split, or ``16 n`` pairs."""
