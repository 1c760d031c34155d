"""Checkpoints that survive crashes: atomic writes, a kept previous copy, and safe loading.

A checkpoint is a dict of tensors and plain Python containers (model, optimiser, schedule and
grad-scaler state, the step, and the torch/numpy/python RNG states as tensors and ints), written
with ``torch.save`` through :func:`contrastlab.io.atomic_path` (temp file, fsync, rename) and read
back with ``torch.load(weights_only=True)``, which refuses any pickled object that is not a tensor
or a primitive container. ``checkpoint.pt`` is the newest; before it is replaced the old one
becomes ``checkpoint.prev.pt``, so a corrupt newest file falls back to the previous good one.
"""

from __future__ import annotations

import os
import random
import warnings
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from contrastlab.io import atomic_path

__all__ = [
    "CheckpointError",
    "save_checkpoint",
    "load_checkpoint",
    "latest_checkpoint",
    "capture_rng",
    "restore_rng",
    "CHECKPOINT_NAME",
    "PREVIOUS_NAME",
]

CHECKPOINT_NAME = "checkpoint.pt"
PREVIOUS_NAME = "checkpoint.prev.pt"


class CheckpointError(RuntimeError):
    """A checkpoint file is missing, truncated, corrupt or holds objects that are not tensors/primitives."""


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


def save_checkpoint(state: dict[str, Any], directory: str | Path) -> Path:
    """Atomically write ``state`` to ``directory/checkpoint.pt``; the old one becomes ``checkpoint.prev.pt``.

    At every instant at least one complete checkpoint exists: the new file is fully written and
    fsync'ed under a temporary name before the old one is renamed away and the new one into place.

    Returns:
        The path written.
    """
    directory = Path(directory)
    target = directory / CHECKPOINT_NAME
    with atomic_path(target) as tmp:
        torch.save(state, tmp)
        if target.exists():
            os.replace(target, directory / PREVIOUS_NAME)
    return target


def _check_record_sizes(p: Path) -> None:
    """Refuse an archive whose directory declares records larger than the file, before torch reads it.

    ``torch.load`` allocates each record at the size the zip directory declares, so a few changed bytes
    can make it allocate gigabytes; ``torch.save`` stores records uncompressed, so none can be larger
    than the file that holds it.
    """
    size = p.stat().st_size
    try:
        with zipfile.ZipFile(p) as zf:
            for info in zf.infolist():
                if info.compress_type != zipfile.ZIP_STORED or info.file_size > size:
                    raise CheckpointError(
                        f"checkpoint {p} is corrupt: record {info.filename[-60:]!r} declares {info.file_size} "
                        f"bytes (compression {info.compress_type}) in a file of {size}"
                    )
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, OSError, EOFError, NotImplementedError) as e:
        raise CheckpointError(f"checkpoint {p} is corrupt (not a readable zip archive: {e})") from None


def load_checkpoint(path: str | Path, *, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load one checkpoint file with ``torch.load(weights_only=True)``.

    Raises:
        CheckpointError: naming the file, when it is missing, truncated, corrupt, or contains pickled
            objects other than tensors and primitive containers.
    """
    p = Path(path)
    if not p.is_file():
        raise CheckpointError(f"checkpoint {p} does not exist")
    _check_record_sizes(p)
    try:
        state = torch.load(p, map_location=map_location, weights_only=True)
    except Exception as e:  # torch raises RuntimeError, UnpicklingError, EOFError, ... on bad files
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CheckpointError(f"checkpoint {p} is corrupt or unsafe to load ({type(e).__name__}: {first})") from e
    if not isinstance(state, dict) or "step" not in state or "model" not in state:
        raise CheckpointError(f"checkpoint {p} is not a contrastlab training checkpoint (no 'step'/'model')")
    return state


def latest_checkpoint(directory: str | Path, *, map_location: str | torch.device = "cpu") -> dict[str, Any] | None:
    """Load the newest good checkpoint in ``directory``, or ``None`` if there is none.

    If ``checkpoint.pt`` is corrupt, a warning names it, it is renamed to ``checkpoint.pt.corrupt``
    (so the next save does not push it over the good previous copy) and ``checkpoint.prev.pt`` is
    loaded instead.

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
            warnings.warn(f"{e}; trying the previous checkpoint", RuntimeWarning, stacklevel=2)
            if p == latest:
                os.replace(latest, directory / (CHECKPOINT_NAME + ".corrupt"))
            continue
        return state
    if errors:
        raise CheckpointError("no loadable checkpoint: " + "; ".join(errors))
    return None
