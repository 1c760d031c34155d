"""Atomic file writes: a result or checkpoint is either the old file or the complete new one.

Every write goes to a temporary file in the same directory, is flushed and fsync'ed, then renamed
over the target (``os.replace`` is atomic on POSIX), and the directory entry is fsync'ed. A crash or
Ctrl-C at any point leaves no truncated file behind.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["atomic_path", "write_bytes_atomic", "write_text_atomic", "write_json_atomic", "to_jsonable"]


def _fsync_dir(directory: Path) -> None:
    with contextlib.suppress(OSError):  # some filesystems refuse O_RDONLY on directories
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; on success it is fsync'ed and renamed onto ``path``.

    Use for writers that need a file name (``torch.save``, ``faiss.write_index``, ``savefig``). If the
    body raises, the temporary file is removed and ``path`` is untouched.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    # mkstemp creates the file 0600; results and reports are meant to be read by others (0644)
    os.fchmod(fd, 0o644)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        with open(tmp_path, "rb+") as f:
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp_path, target)
        _fsync_dir(target.parent)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp_path.unlink()
        raise


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write UTF-8 ``text`` to ``path`` atomically."""
    write_bytes_atomic(path, text.encode("utf-8"))


def to_jsonable(obj: Any) -> Any:
    """Convert numpy/torch scalars and arrays, tuples, paths and dataclass-like objects to JSON types.

    Non-finite floats become ``None`` (JSON has no NaN); callers that care record them explicitly.
    """
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if hasattr(obj, "tolist"):  # numpy arrays/scalars, torch tensors
        return to_jsonable(obj.tolist())
    if hasattr(obj, "__dataclass_fields__"):
        import dataclasses

        return to_jsonable(dataclasses.asdict(obj))
    raise TypeError(f"cannot convert {type(obj).__name__} to JSON")


def write_json_atomic(path: str | os.PathLike[str], obj: Any) -> None:
    """Write ``obj`` as indented JSON to ``path`` atomically (see :func:`to_jsonable`)."""
    write_text_atomic(path, json.dumps(to_jsonable(obj), indent=2, sort_keys=False) + "\n")
