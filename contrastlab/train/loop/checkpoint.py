"""Checkpoints that survive crashes and bit rot: atomic writes, a checksum, a kept previous copy, safe loading.

A checkpoint is a dict of tensors and plain Python containers (model, optimiser, schedule and
grad-scaler state, the step, the torch/numpy/python RNG states as tensors and ints, and any extra
state dicts a caller adds), serialised with ``torch.save`` (a zip archive) and sealed with its SHA-256:
the archive's comment, the file's last 48 bytes, is

    magic 0x89 "CLCKPT" 0x0A (8 bytes) | archive length (8, little-endian) | SHA-256 of the archive (32)

(:func:`contrastlab.io.seal_zip`), and the file is written to a temporary name, fsync'ed, then renamed
into place. The checksum lives in the same file as what it covers, so one rename
installs both and they cannot get out of step (a separate ``.sha256`` file could be left behind by a
crash between two renames, or lost when the checkpoint alone is copied), and the file stays a valid zip
that a plain ``torch.load`` reads. Loading reads the file once into memory, checks the seal *before*
anything is deserialised (no window in which the file could change between check and use), then
``torch.load(weights_only=True)`` on those bytes, which refuses any pickled object that is not a tensor
or a primitive container.

``checkpoint.pt`` is the newest and ``checkpoint.prev.pt`` the one before, so a corrupt newest file
falls back to the previous good one. A save never leaves ``checkpoint.pt`` missing, whenever the
process is killed:

1. the new checkpoint is written to a temporary file in the same folder and fsync'ed;
2. the old ``checkpoint.pt`` is hard-linked to a second temporary name (copied where the filesystem
   has no hard links), which is renamed over ``checkpoint.prev.pt``: ``checkpoint.pt`` is untouched;
3. the new file is renamed over ``checkpoint.pt`` (one atomic rename from the old file to the new).

A kill before step 3 leaves the old ``checkpoint.pt`` in place, with at most two temporary files,
which the next save removes.
"""

from __future__ import annotations

import io
import os
import random
import shutil
import tempfile
import warnings
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from contrastlab.io import CorruptFileError, fsync_dir, open_sealed_zip, seal_zip
from contrastlab.npyfile import ZIP_READ_ERRORS

__all__ = [
    "CheckpointError",
    "CheckpointWarning",
    "save_checkpoint",
    "load_checkpoint",
    "latest_checkpoint",
    "discard_checkpoints",
    "capture_rng",
    "restore_rng",
    "CHECKPOINT_NAME",
    "PREVIOUS_NAME",
    "CHECKPOINT_MAGIC",
]

CHECKPOINT_NAME = "checkpoint.pt"
PREVIOUS_NAME = "checkpoint.prev.pt"
CHECKPOINT_MAGIC = b"\x89CLCKPT\n"
"""Opens a checkpoint's 48-byte checksum comment (a high-bit byte and a newline, as in PNG's signature)."""

_PLAIN = (torch.Tensor, bool, int, float, complex, str, bytes, type(None), torch.dtype, torch.device, torch.Size)


class CheckpointError(RuntimeError):
    """A checkpoint file is missing, truncated, corrupt or holds objects that are not tensors/primitives."""


class CheckpointWarning(RuntimeWarning):
    """The newest checkpoint is corrupt and was set aside; the previous one is used instead."""


def capture_rng() -> dict[str, Any]:
    """The torch (CPU and CUDA), numpy and python RNG states as tensors and ints."""
    np_state: Any = np.random.get_state()
    py_version, py_state, py_gauss = random.getstate()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": {
            "keys": torch.from_numpy(np.asarray(np_state[1], dtype=np.int64)),
            "pos": int(np_state[2]),
            "has_gauss": int(np_state[3]),
            "cached_gaussian": float(np_state[4]),
        },
        "python": {
            "version": int(py_version),
            "state": torch.tensor(py_state, dtype=torch.int64),
            "gauss": py_gauss,
        },
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    """Restore RNG states saved by :func:`capture_rng`."""
    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    np.random.set_state(
        ("MT19937", n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached_gaussian"])
    )
    p = state["python"]
    random.setstate((p["version"], tuple(int(x) for x in p["state"].tolist()), p["gauss"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _check_plain(obj: Any, where: str) -> None:
    """Refuse, before writing, anything ``torch.load(weights_only=True)`` would refuse when reading."""
    if isinstance(obj, Mapping):
        for k, v in obj.items():
            if not isinstance(k, (str, int)):
                raise TypeError(f"{where} has a key of type {type(k).__name__}; checkpoint keys are str or int")
            _check_plain(v, f"{where}[{k!r}]")
    elif isinstance(obj, (list, tuple)) and not isinstance(obj, torch.Size):
        for i, v in enumerate(obj):
            _check_plain(v, f"{where}[{i}]")
    elif not isinstance(obj, _PLAIN):
        raise TypeError(
            f"{where} is a {type(obj).__name__}; a checkpoint holds only tensors, numbers, strings and "
            "dicts/lists/tuples of them (save an object through its state_dict())"
        )


def save_checkpoint(state: dict[str, Any], directory: str | Path) -> Path:
    """Atomically write ``state`` to ``directory/checkpoint.pt``; the old one becomes ``checkpoint.prev.pt``.

    ``checkpoint.pt`` exists and is complete at every instant: the new file is fully written and
    fsync'ed under a temporary name, the old one is kept as ``checkpoint.prev.pt`` by a hard link, and
    only then is the new one renamed over it (see the module docstring). The file carries the SHA-256 of its payload (see the module docstring).

    Args:
        state: a dict of tensors, numbers, strings, ``None`` and dicts/lists/tuples of them; any
            extra entries (e.g. ``state["extra"]["queue"] = queue.state_dict()``) are saved as they are.
        directory: the run folder.

    Returns:
        The path written.

    Raises:
        TypeError: ``state`` holds another kind of object (named by its key path), which
            ``weights_only`` loading would refuse.
    """
    _check_plain(state, "state")
    buffer = io.BytesIO()
    torch.save(state, buffer)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    target, previous = directory / CHECKPOINT_NAME, directory / PREVIOUS_NAME
    for stray in _stray_temporaries(directory):  # left by a save that was killed
        stray.unlink(missing_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{CHECKPOINT_NAME}.", suffix=".tmp", dir=directory)
    new = Path(name)
    try:
        os.fchmod(fd, 0o644)  # mkstemp creates 0600; a checkpoint is meant to be read by others
        with os.fdopen(fd, "wb") as f:
            f.write(seal_zip(buffer.getbuffer(), CHECKPOINT_MAGIC))
            f.flush()
            os.fsync(f.fileno())
        if target.exists():
            _keep_as_previous(target, previous)
        os.replace(new, target)
        fsync_dir(directory)
    except BaseException:
        new.unlink(missing_ok=True)
        raise
    return target


def _stray_temporaries(directory: Path) -> list[Path]:
    """Temporary files that :func:`save_checkpoint` writes and renames, left behind by a killed save."""
    return [p for name in (CHECKPOINT_NAME, PREVIOUS_NAME) for p in directory.glob(f".{name}.*.tmp")]


def _keep_as_previous(target: Path, previous: Path) -> None:
    """Make ``previous`` a copy of ``target`` without ever removing ``target``: a hard link renamed into place."""
    if previous.exists() and os.path.samefile(target, previous):
        # a save killed just before installing its new file left both names on one file; rename() of
        # one name of a file onto another does nothing (POSIX), so the link would stay behind
        return
    fd, name = tempfile.mkstemp(prefix=f".{PREVIOUS_NAME}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    link = Path(name)
    try:
        link.unlink()
        try:
            os.link(target, link)
        except OSError:  # a filesystem without hard links: a full copy, fsync'ed
            shutil.copyfile(target, link)
            with open(link, "rb+") as f:
                os.fsync(f.fileno())
        os.replace(link, previous)
    except BaseException:
        link.unlink(missing_ok=True)
        raise


def _check_record_sizes(payload: io.BytesIO, p: Path) -> None:
    """Refuse a payload whose zip directory declares records larger than itself, before torch reads it.

    ``torch.load`` allocates each record at the size the zip directory declares, so a few changed bytes
    (with a recomputed checksum) can make it allocate gigabytes; ``torch.save`` stores records
    uncompressed, so none can be larger than the payload that holds it.
    """
    size = payload.getbuffer().nbytes
    try:
        with zipfile.ZipFile(payload) as zf:
            for info in zf.infolist():
                if info.compress_type != zipfile.ZIP_STORED or info.file_size > size:
                    raise CheckpointError(
                        f"checkpoint {p} is corrupt: record {info.filename[-60:]!r} declares {info.file_size} "
                        f"bytes (compression {info.compress_type}) in a file of {size}"
                    )
    except ZIP_READ_ERRORS as e:
        raise CheckpointError(f"checkpoint {p} is corrupt (not a readable zip archive: {e})") from None


def load_checkpoint(path: str | Path, *, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Verify one checkpoint file's seal (length and SHA-256), then ``torch.load(weights_only=True)`` it.

    Raises:
        CheckpointError: naming the file, when it is missing, truncated, fails its checksum (a changed
            byte anywhere), does not deserialise, or contains pickled objects other than tensors and
            primitive containers.
    """
    p = Path(path)
    if not p.is_file():
        raise CheckpointError(f"checkpoint {p} does not exist")
    try:
        payload = open_sealed_zip(p.read_bytes(), CHECKPOINT_MAGIC, p)
    except CorruptFileError as e:
        raise CheckpointError(f"checkpoint {e}") from None
    except OSError as e:
        raise CheckpointError(f"checkpoint {p} cannot be read ({e})") from None
    buffer = io.BytesIO(payload)
    _check_record_sizes(buffer, p)
    buffer.seek(0)
    try:
        state = torch.load(buffer, map_location=map_location, weights_only=True)
    except Exception as e:  # torch raises RuntimeError, UnpicklingError, EOFError, ... on bad payloads
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CheckpointError(f"checkpoint {p} is corrupt or unsafe to load ({type(e).__name__}: {first})") from e
    if not isinstance(state, dict) or "step" not in state or "model" not in state:
        raise CheckpointError(f"checkpoint {p} is not a contrastlab training checkpoint (no 'step'/'model')")
    return state


def latest_checkpoint(directory: str | Path, *, map_location: str | torch.device = "cpu") -> dict[str, Any] | None:
    """Load the newest good checkpoint in ``directory``, or ``None`` if there is none.

    If ``checkpoint.pt`` is corrupt (truncated, a checksum mismatch, or unloadable), a
    ``RuntimeWarning`` names it, it is renamed to ``checkpoint.pt.corrupt`` (so the next save does not
    push it over the good previous copy) and ``checkpoint.prev.pt`` is loaded instead.

    Raises:
        CheckpointError: checkpoint files exist but none of them loads.
    """
    directory = Path(directory)
    latest, previous = directory / CHECKPOINT_NAME, directory / PREVIOUS_NAME
    errors: list[str] = []
    for p in (latest, previous):
        if not p.exists():
            continue
        try:
            state = load_checkpoint(p, map_location=map_location)
        except CheckpointError as e:
            errors.append(str(e))
            if p == latest:
                os.replace(latest, directory / (CHECKPOINT_NAME + ".corrupt"))
                then = f"falling back to {previous}" if previous.exists() else "no previous checkpoint to fall back to"
                warnings.warn(f"{e}; set aside as {CHECKPOINT_NAME}.corrupt, {then}", CheckpointWarning, stacklevel=2)
            continue
        return state
    if errors:
        raise CheckpointError("no loadable checkpoint: " + "; ".join(errors))
    return None


def discard_checkpoints(directory: str | Path) -> None:
    """Remove the checkpoint files of ``directory``: the newest, the previous and a set-aside corrupt one.

    A fresh run started in a used folder calls it first, so that it can never resume, or fall back, into an
    older run's state. Temporaries of a killed save go as well.
    """
    directory = Path(directory)
    for name in (CHECKPOINT_NAME, PREVIOUS_NAME, CHECKPOINT_NAME + ".corrupt"):
        (directory / name).unlink(missing_ok=True)
    for stray in _stray_temporaries(directory):
        stray.unlink(missing_ok=True)
