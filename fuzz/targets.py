"""The reader families under fuzzing, their seed files and the contract every reader must keep.

A *family* is one reader of contrastlab (configs, checkpoints, index folders, ``.npy`` embeddings and the
dataset readers). A fuzz input is one byte string: its first byte chooses which file of the family's
folder it replaces (``data[0] % len(files)``; for index folders bit 2 also asks for the sidecar's
checksums to be recomputed so that the mutated file reaches faiss), and the rest is that file's content.
The other files of the folder keep their valid seed content, so every mutation of every file is
reachable one file at a time.

The contract (:func:`check`): reading the folder either returns an object or raises one of the family's
documented exception types with a message that names the folder it was read from. Anything else, an
exception whose chain holds a ``MemoryError`` or a native allocation failure (even wrapped), or a read slower than the time limit,
is a :class:`ContractViolation`. :func:`memory_cap` turns an allocation beyond a budget into a
``MemoryError`` so that "a header claiming 10^12 elements" shows up as a violation instead of a swap storm.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import json
import pickle
import resource
import shutil
import signal
import struct
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["Family", "FAMILIES", "ContractViolation", "check", "memory_cap", "time_limit", "seed_inputs"]


class ContractViolation(Exception):
    """A reader broke the contract: the message says how, ``__cause__`` is the original exception."""


class _Timeout(BaseException):
    """Raised inside a reader that ran past :func:`time_limit` (a BaseException so readers cannot swallow it)."""


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise :class:`_Timeout` in the main thread after ``seconds`` (no-op in other threads)."""
    if threading.current_thread() is not threading.main_thread() or seconds <= 0:
        yield
        return

    def _ring(signum: int, frame: Any) -> None:
        raise _Timeout(f"read took longer than {seconds} s")

    old = signal.signal(signal.SIGALRM, _ring)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _vm_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize in /proc/self/status")


@contextlib.contextmanager
def memory_cap(extra_bytes: int) -> Iterator[None]:
    """Limit the address space to its current size plus ``extra_bytes`` (RLIMIT_AS), then restore it.

    An allocation beyond the budget fails with ``MemoryError`` instead of being granted lazily and
    touched later, which is how a reader that trusts a size field in a header shows itself.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = _vm_bytes() + extra_bytes
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


@dataclass(frozen=True)
class Family:
    """One reader under fuzzing.

    Attributes:
        name: the family's name (``fuzz/run.py NAME``).
        files: the folder's files, relative to the folder; ``data[0] % len(files)`` picks the fuzzed one.
        seeds: writes a valid folder for seed number ``i`` into the given directory (``i`` in ``range(n_seeds)``).
        n_seeds: how many distinct valid folders ``seeds`` can write.
        read: reads a folder as contrastlab does; returns what the reader returns.
        errors: the documented exception types the reader may raise on a bad file.
        resign: when bit 2 of the selector byte is set, make the mutated file's checksums consistent
            again (``resign(root, target)``), so that the mutation reaches the parser behind them: a
            tamperer who updates the checksum, or a bug that writes garbage with a valid one.
    """

    name: str
    files: tuple[str, ...]
    seeds: Callable[[Path, int], None]
    n_seeds: int
    read: Callable[[Path], Any]
    errors: tuple[type[BaseException], ...]
    resign: Callable[[Path, Path], None] | None = None


def resign_index(root: Path, target: Path | None = None) -> None:
    """Rewrite ``meta.json`` with the files' true sizes and SHA-256s and its own checksum.

    If ``meta.json`` is the mutated file, its content is kept (whatever JSON object it holds) and only
    re-checksummed; if it is not a JSON object it is left as it is.
    """
    from contrastlab.io import CHECKSUM_KEY

    meta_path = root / "meta.json"
    try:
        meta = json.loads(meta_path.read_bytes())
    except (ValueError, RecursionError):
        return
    if not isinstance(meta, dict):
        return
    meta.pop(CHECKSUM_KEY, None)
    files = meta.get("files")
    if isinstance(files, dict):
        for name in list(files):
            f = root / str(name)
            if str(name) in _INDEX_FILES and f.is_file():
                data = f.read_bytes()
                files[name] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    meta_path.write_bytes(checksummed_json(meta))


def checksummed_json(obj: dict[str, Any]) -> bytes:
    """``obj`` laid out as :func:`contrastlab.io.dumps_json_checked` does, but keeping NaN and Infinity.

    (The writer turns non-finite floats into null; a tamperer need not.)
    """
    from contrastlab.io import CHECKSUM_KEY

    body = json.dumps(obj, indent=2)
    digest = hashlib.sha256(body.encode("ascii")).hexdigest()
    head = body[:-2] + "," if obj else "{"
    return f'{head}\n  "{CHECKSUM_KEY}": "{digest}"\n}}\n'.encode("ascii")


def seal_checkpoint(root: Path, target: Path) -> None:
    """Treat the mutated file's bytes as the zip archive ``torch.save`` wrote and seal it as a checkpoint.

    As :func:`contrastlab.io.seal_zip` does, but for any bytes: the last two (the archive comment's
    length) become 48 and the seal (magic, length, SHA-256 of the archive) is appended.
    """
    from contrastlab.train.loop.checkpoint import CHECKPOINT_MAGIC

    archive = target.read_bytes()
    body = archive[:-2] if len(archive) >= 2 else archive
    digest = hashlib.sha256(body + b"\0\0").digest()
    target.write_bytes(body + struct.pack("<H", 48) + CHECKPOINT_MAGIC + struct.pack("<Q", len(body) + 2) + digest)


def unseal_checkpoint(sealed: bytes) -> bytes:
    """The archive inside a sealed checkpoint (the inverse of :func:`seal_checkpoint` on valid files)."""
    return sealed[:-50] + b"\0\0"


@functools.lru_cache(maxsize=64)
def _seed_files(name: str, i: int) -> dict[str, bytes]:
    """Every file of seed folder ``i`` of family ``name`` (relative path -> bytes), written once and cached."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        FAMILIES[name].seeds(root, i)
        return {str(f.relative_to(root)): f.read_bytes() for f in sorted(root.rglob("*")) if f.is_file()}


def materialise(family: Family, data: bytes, root: Path) -> Path:
    """Write a valid seed folder into ``root`` and replace one of its files by ``data[1:]``.

    ``data[0] % len(files)`` picks the file, ``data[0] // 8 % n_seeds`` the seed folder, bit 2 of
    ``data[0]`` asks for the sidecar's checksums to be recomputed (families with ``resign``).
    """
    if not data:
        data = b"\x00"
    selector = data[0]
    for rel, content in _seed_files(family.name, (selector // 8) % family.n_seeds).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(content)
    target = root / family.files[selector % len(family.files)]
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data[1:])
    if family.resign is not None and selector & 4:
        family.resign(root, target)
    return target


# how native code reports a refused allocation (torch's CPU allocator, C++ std::bad_alloc through faiss)
_ALLOCATION_MESSAGES = ("can't allocate memory", "DefaultCPUAllocator", "bad_alloc", "Cannot allocate memory")


def _is_allocation_failure(e: BaseException) -> bool:
    return isinstance(e, MemoryError) or any(m in str(e) for m in _ALLOCATION_MESSAGES)


def _chain(e: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        yield cur
        cur = cur.__cause__ or cur.__context__


def check(family: Family, data: bytes, workdir: Path, *, seconds: float = 10.0) -> str:
    """Read ``data`` as the family's folder under a fresh subfolder of ``workdir``; enforce the contract.

    Returns:
        ``"ok"`` when the reader returned an object, ``"error"`` when it raised a documented error naming
        the folder.

    Raises:
        ContractViolation: any other outcome (undocumented type, message without the path, a
            ``MemoryError`` in the chain, or a read longer than ``seconds``).
    """
    root = Path(tempfile.mkdtemp(prefix=f"{family.name}-", dir=workdir))
    try:
        materialise(family, data, root)
        try:
            with time_limit(seconds):
                family.read(root)
        except _Timeout as e:
            raise ContractViolation(f"{family.name}: hang ({e})") from e
        except family.errors as e:
            if any(_is_allocation_failure(x) for x in _chain(e)):  # an allocation the file did not pay for
                raise ContractViolation(f"{family.name}: {type(e).__name__} wraps a MemoryError: {e}") from e
            if str(root) not in str(e):
                raise ContractViolation(f"{family.name}: {type(e).__name__} does not name the file: {e}") from e
            return "error"
        except Exception as e:
            raise ContractViolation(f"{family.name}: undocumented {type(e).__name__}: {e}") from e
        return "ok"
    finally:
        shutil.rmtree(root, ignore_errors=True)


def seed_inputs(family: Family) -> list[bytes]:
    """Every valid file of every seed folder, as fuzz inputs (selector byte + content)."""
    out: list[bytes] = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(family.n_seeds):
            root = Path(tmp) / str(i)
            family.seeds(root, i)
            for sel, name in enumerate(family.files):
                f = root / name
                if not f.is_file():
                    continue
                byte = next(b for b in range(256) if b % len(family.files) == sel and b // 8 % family.n_seeds == i)
                out.append(bytes([byte]) + f.read_bytes())
                if family.resign is seal_checkpoint:  # the bare archive, to be sealed again
                    out.append(bytes([byte | 4]) + unseal_checkpoint(f.read_bytes()))
    return out


# ----------------------------------------------------------------------------------------------- configs
_CONFIG_FILES = ("config.yaml", "config.toml", "config.json")


def _config_seeds(root: Path, i: int) -> None:
    from contrastlab.config import dump_config
    from contrastlab.train.job.config import JobConfig

    cfg = JobConfig()
    if i == 1:
        from contrastlab.config import apply_overrides

        cfg = apply_overrides(cfg, {"loss.temperature": "0.2", "train.steps": "7", "out": "runs/x"})
    root.mkdir(parents=True, exist_ok=True)
    for name in _CONFIG_FILES:
        dump_config(cfg, root / name)


def _config_read(root: Path) -> Any:
    from contrastlab.config import read_config
    from contrastlab.train.job.config import JobConfig

    found = [root / n for n in _CONFIG_FILES if (root / n).is_file()]
    return [read_config(JobConfig, p) for p in found]


def _config_errors() -> tuple[type[BaseException], ...]:
    from contrastlab.config import ConfigError

    return (ConfigError,)


# ------------------------------------------------------------------------------------------- checkpoints
def _checkpoint_seeds(root: Path, i: int) -> None:
    import torch

    from contrastlab.train.loop.checkpoint import capture_rng, save_checkpoint

    torch.manual_seed(i)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    state = {"step": 3 + i, "model": model.state_dict(), "optimizer": opt.state_dict(), "rng": capture_rng()}
    save_checkpoint(state, root)


def _checkpoint_read(root: Path) -> Any:
    from contrastlab.train.loop.checkpoint import load_checkpoint

    return load_checkpoint(root / "checkpoint.pt")


def _checkpoint_errors() -> tuple[type[BaseException], ...]:
    from contrastlab.train.loop.checkpoint import CheckpointError

    return (CheckpointError,)


# ---------------------------------------------------------------------------------------- index folders
_INDEX_FILES = ("meta.json", "index.faiss", "ids.npy", "labels.npy")


def _index_seeds(root: Path, i: int) -> None:
    from contrastlab.search.index import EmbeddingIndex

    rng = np.random.default_rng(i)
    kind, metric = [("flat", "cosine"), ("ivf", "ip"), ("hnsw", "cosine")][i % 3]
    index = EmbeddingIndex(4, metric=metric, kind=kind, nlist=2 if kind == "ivf" else None, hnsw_m=4)
    x = rng.standard_normal((6, 4)).astype(np.float32)
    index.add(x, ids=np.arange(10, 16), labels=np.arange(6) % 2)
    index.save(root)


def _index_read(root: Path) -> Any:
    from contrastlab.search.index import EmbeddingIndex

    index = EmbeddingIndex.load(root)
    if index.ntotal:
        index.search(index.vectors(0, 1) if index.metric == "ip" else np.ones((1, index.dim), np.float32), k=1)
    return index


def _index_errors() -> tuple[type[BaseException], ...]:
    from contrastlab.search.index import IndexFormatError

    return (IndexFormatError,)


# ---------------------------------------------------------------------------------- .npy and safetensors
_NPY_FILES = ("embeddings.npy", "embeddings.safetensors")


def _npy_seeds(root: Path, i: int) -> None:
    from safetensors.numpy import save_file

    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(i)
    dtype = [np.float32, np.float64, np.float16][i % 3]
    x = rng.standard_normal((5, 3)).astype(dtype)
    with open(root / _NPY_FILES[0], "wb") as f:
        np.save(f, np.asfortranarray(x) if i == 1 else x, allow_pickle=False)
    save_file({"embeddings": x}, str(root / _NPY_FILES[1]))


def _npy_read(root: Path) -> Any:
    from contrastlab.cli._options import load_matrix
    from contrastlab.search.softmax import NpyBlocks

    out = [np.array(load_matrix(str(root / name), None, "embeddings")) for name in _NPY_FILES]
    blocks = NpyBlocks(root / _NPY_FILES[0], block_size=2)
    out.extend(list(blocks))
    return out


def _value_error() -> tuple[type[BaseException], ...]:
    return (ValueError,)


def _data_errors() -> tuple[type[BaseException], ...]:
    from contrastlab.data.base import DatasetNotFoundError

    return (ValueError, DatasetNotFoundError)


# ------------------------------------------------------------------------------------------- data: CIFAR
_CIFAR_FILES = ("cifar-10-batches-py/test_batch", "cifar-10-batches-py/batches.meta")


def _cifar_seeds(root: Path, i: int) -> None:
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(i)
    n = 2
    batch = {
        b"batch_label": b"testing batch 1 of 1",
        b"data": rng.integers(0, 256, size=(n, 3072), dtype=np.uint8),
        b"labels": rng.integers(0, 10, size=n).tolist(),
        b"filenames": [f"img_{j}.png".encode() for j in range(n)],
    }
    names = [b"airplane", b"automobile", b"bird", b"cat", b"deer", b"dog", b"frog", b"horse", b"ship", b"truck"]
    meta = {b"label_names": names, b"num_cases_per_batch": n, b"num_vis": 3072}
    protocol = [2, 3, 4][i % 3]
    for name, obj in (("test_batch", batch), ("batches.meta", meta)):
        data = pickle.dumps(obj, protocol=protocol)
        if protocol == 2:  # the module path numpy 1.x wrote, as in the distributed archives
            data = data.replace(b"numpy._core.multiarray", b"numpy.core.multiarray")
        (folder / name).write_bytes(data)


def _cifar_read(root: Path) -> Any:
    from contrastlab.data.cifar import load_cifar10

    return load_cifar10(root, "test")


def _cifar_errors() -> tuple[type[BaseException], ...]:
    return (*_data_errors(), pickle.UnpicklingError)


# ------------------------------------------------------------------------------------------ data: STL-10
_STL10_FILES = ("stl10_binary/test_X.bin", "stl10_binary/test_y.bin", "stl10_binary/class_names.txt")


def _stl10_seeds(root: Path, i: int) -> None:
    folder = root / "stl10_binary"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(i)
    n = 1 + i
    (folder / "test_X.bin").write_bytes(rng.integers(0, 256, size=n * 3 * 96 * 96, dtype=np.uint8).tobytes())
    (folder / "test_y.bin").write_bytes(rng.integers(1, 11, size=n, dtype=np.uint8).tobytes())
    names = ["airplane", "bird", "car", "cat", "deer", "dog", "horse", "monkey", "ship", "truck"]
    (folder / "class_names.txt").write_text("\n".join(names) + "\n")


def _stl10_read(root: Path) -> Any:
    from contrastlab.data.stl10 import load_stl10

    return load_stl10(root, "test")


# -------------------------------------------------------------------------------------------- data: SVHN
def _svhn_seeds(root: Path, i: int) -> None:
    from scipy.io import savemat

    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(i)
    n = 2
    x = rng.integers(0, 256, size=(32, 32, 3, n), dtype=np.uint8)
    y = rng.integers(1, 11, size=(n, 1)).astype(np.uint8)
    savemat(str(root / "test_32x32.mat"), {"X": x, "y": y}, do_compression=bool(i % 2))


def _svhn_read(root: Path) -> Any:
    from contrastlab.data.svhn import load_svhn

    return load_svhn(root, "test")


# -------------------------------------------------------------------------------------- data: ImageNet-32
def _imagenet32_seeds(root: Path, i: int) -> None:
    folder = root / "Imagenet32_val_npz"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(i)
    n = 2
    data = rng.integers(0, 256, size=(n, 3072), dtype=np.uint8)
    labels = rng.integers(1, 1001, size=n)
    save = np.savez_compressed if i % 2 else np.savez
    save(folder / "val_data.npz", data=data, labels=labels)


def _imagenet32_read(root: Path) -> Any:
    from contrastlab.data.imagenet32 import load_imagenet32

    return load_imagenet32(root, "val")


# ----------------------------------------------------------------------------------- data: Tiny-ImageNet
_TINY_FILES = (
    "tiny-imagenet-200/wnids.txt",
    "tiny-imagenet-200/words.txt",
    "tiny-imagenet-200/val/val_annotations.txt",
    "tiny-imagenet-200/val/images/val_0.JPEG",
)


def _tiny_seeds(root: Path, i: int) -> None:
    from PIL import Image

    base = root / "tiny-imagenet-200"
    (base / "val" / "images").mkdir(parents=True, exist_ok=True)
    wnids = ["n01443537", "n01629819"]
    (base / "wnids.txt").write_text("\n".join(wnids) + "\n")
    (base / "words.txt").write_text("n01443537\tgoldfish, Carassius auratus\nn01629819\tEuropean fire salamander\n")
    (base / "val" / "val_annotations.txt").write_text(f"val_0.JPEG\t{wnids[i % 2]}\t0\t0\t63\t63\n")
    buf = io.BytesIO()
    Image.new("RGB" if i % 2 == 0 else "L", (64, 64), (200, 30, 30) if i % 2 == 0 else 128).save(
        buf, format="JPEG", quality=90
    )
    (base / "val" / "images" / "val_0.JPEG").write_bytes(buf.getvalue())


def _tiny_read(root: Path) -> Any:
    from contrastlab.data.tiny_imagenet import load_tiny_imagenet

    return load_tiny_imagenet(root, "val")


# ---------------------------------------------------------------------------------------- data: CIFAR-10H
_C10H_FILES = ("cifar10h-counts.npy", "cifar10h-probs.npy")


def _cifar10h_seeds(root: Path, i: int) -> None:
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(i)
    counts = rng.integers(0, 5, size=(3, 10)) + np.eye(3, 10, dtype=np.int64)
    np.save(root / _C10H_FILES[0], counts.astype([np.int64, np.int32, np.float64][i % 3]), allow_pickle=False)
    np.save(root / _C10H_FILES[1], counts / counts.sum(1, keepdims=True), allow_pickle=False)


def _cifar10h_read(root: Path) -> Any:
    from contrastlab.data.cifar10h import load_cifar10h

    return [load_cifar10h(root / name, expected_shape=None) for name in _C10H_FILES]


# ------------------------------------------------------------------------------------- pair files (train)
_PAIRS_FILES = ("anchors.npy", "positives.npy", "corpus.npy", "negatives.npz")


def _pairs_seeds(root: Path, i: int) -> None:
    from contrastlab.search.mining import MinedNegatives

    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(i)
    n, m, f, k = 10, 8, 3, 2
    np.save(root / "anchors.npy", rng.standard_normal((n, f)).astype(np.float32))
    np.save(root / "positives.npy", rng.standard_normal((n, f)).astype(np.float32))
    np.save(root / "corpus.npy", rng.standard_normal((m, f)).astype(np.float32))
    ids = rng.integers(0, m, size=(n, k)).astype(np.int64)
    ids[0, 1] = -1  # an anchor short of mined negatives
    scores = rng.standard_normal((n, k)).astype(np.float32)
    log_prob = np.log(np.full((n, k), 0.5)) if i % 2 else None
    MinedNegatives(ids, scores, rng.standard_normal(n).astype(np.float32), log_prob).save(root / "negatives.npz")


def _pairs_read(root: Path) -> Any:
    from contrastlab.config import apply_overrides
    from contrastlab.train.job.config import JobConfig
    from contrastlab.train.job.feature_pairs import build_pairs

    config = apply_overrides(
        JobConfig(), {"data.name": "pairs", "data.root": str(root), "data.batch_size": "2", "eval.n": "2"}
    )
    source = build_pairs(config)
    return source.batch_at(0), source.batch_at(1), source.eval_batch


def _pairs_errors() -> tuple[type[BaseException], ...]:
    from contrastlab.config import ConfigError

    return (ConfigError,)


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family("config", _CONFIG_FILES, _config_seeds, 2, _config_read, _config_errors()),
        Family(
            "checkpoint",
            ("checkpoint.pt",),
            _checkpoint_seeds,
            2,
            _checkpoint_read,
            _checkpoint_errors(),
            resign=seal_checkpoint,
        ),
        Family("index", _INDEX_FILES, _index_seeds, 3, _index_read, _index_errors(), resign=resign_index),
        Family("npy", _NPY_FILES, _npy_seeds, 3, _npy_read, _value_error()),
        Family("cifar", _CIFAR_FILES, _cifar_seeds, 3, _cifar_read, _cifar_errors()),
        Family("stl10", _STL10_FILES, _stl10_seeds, 2, _stl10_read, _data_errors()),
        Family("svhn", ("test_32x32.mat",), _svhn_seeds, 2, _svhn_read, _data_errors()),
        Family(
            "imagenet32", ("Imagenet32_val_npz/val_data.npz",), _imagenet32_seeds, 2, _imagenet32_read, _data_errors()
        ),
        Family("tiny_imagenet", _TINY_FILES, _tiny_seeds, 2, _tiny_read, _data_errors()),
        Family("cifar10h", _C10H_FILES, _cifar10h_seeds, 3, _cifar10h_read, _data_errors()),
        Family("pairs", _PAIRS_FILES, _pairs_seeds, 2, _pairs_read, _pairs_errors()),
    )
}
"""Every reader family, by name."""
