"""Atomic, checksummed files: every write is all or nothing, and a changed file is refused on reading.

A result or checkpoint is either the old file or the complete new one, and a file that changed after
it was written is refused when read back.

Every write goes to a temporary file in the same directory, is flushed and fsync'ed, then renamed
over the target (``os.replace`` is atomic on POSIX), and the directory entry is fsync'ed. A crash or
Ctrl-C at any point leaves no truncated file behind.

Every file contrastlab reads back carries the SHA-256 of its content *inside the same file*, written
by the same rename, so the checksum and the content can never get out of step:

- JSON (:func:`write_json_atomic` / :func:`read_json_verified`): the object's last member is
  ``"contrastlab_sha256"``, the digest of the file's bytes without that member (see
  :func:`dumps_json_checked`); the file stays plain JSON that any reader parses. Each row of a
  ``.jsonl`` log carries its own (``dumps_json_checked(row, line=True)`` / :func:`loads_json_verified`).
- zip archives (:func:`seal_zip` / :func:`open_sealed_zip`, used for ``torch.save`` checkpoints): the
  archive comment, the file's last 48 bytes, is ``magic (8) | length (8) | SHA-256 (32)`` of the archive
  as it was written; the file stays a valid zip that ``torch.load`` reads as before.
- files written by other libraries (faiss indexes, ``.npy``) are listed with their size and
  SHA-256 in a checksummed JSON sidecar (:func:`sha256_file`).

Readers verify before parsing anything and raise :class:`CorruptFileError` naming the file.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import math
import os
import re
import struct
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = [
    "default_out_dir",
    "atomic_path",
    "fsync_dir",
    "write_bytes_atomic",
    "write_text_atomic",
    "write_json_atomic",
    "read_json_verified",
    "dumps_json_checked",
    "loads_json_verified",
    "to_jsonable",
    "sha256_file",
    "seal_zip",
    "open_sealed_zip",
    "CorruptFileError",
    "CHECKSUM_KEY",
    "SEAL_BYTES",
]

CHECKSUM_KEY = "contrastlab_sha256"
"""The last member of every JSON object contrastlab writes: the SHA-256 of the file without it."""

SEAL_BYTES = 48
"""Size of the checksum comment of a sealed zip: magic (8), archive length (8), SHA-256 (32)."""
_SEAL_LEN = struct.pack("<H", SEAL_BYTES)
_EOCD_BYTES = 22  # a zip's end-of-central-directory record without comment

# the checksum member as dumps_json_checked writes it, anchored at the end of the file
_JSON_TRAILER = re.compile(rb'(,|\{)\n  "' + CHECKSUM_KEY.encode() + rb'": "([0-9a-f]{64})"\n\}\n\Z')
_JSON_LINE_TRAILER = re.compile(rb'(, |\{)"' + CHECKSUM_KEY.encode() + rb'": "([0-9a-f]{64})"\}\Z')  # line=True


class CorruptFileError(ValueError):
    """A file does not match the checksum written with it, is truncated, or does not parse.

    The message starts with the file's path.
    """


def fsync_dir(directory: Path) -> None:
    """Make a rename in ``directory`` durable (a no-op where the filesystem refuses to open a folder)."""
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
        fsync_dir(target.parent)
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


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Hex SHA-256 of a file's bytes, read in 4 MiB chunks (memory bounded by the chunk)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def dumps_json_checked(obj: Any, *, line: bool = False) -> str:
    """JSON of the dict ``obj`` with its SHA-256 appended as the last member ``contrastlab_sha256``.

    The digest is that of ``json.dumps(obj, indent=2)`` (ASCII; with ``line=True``, of the one-line
    ``json.dumps(obj)``), which is exactly the text with the checksum member and its leading comma (or
    space) removed, so a reader checks the raw bytes it read, not a re-serialisation.

    Args:
        obj: a dict (converted by :func:`to_jsonable`).
        line: one line without a newline (a row of a ``.jsonl`` log) instead of an indented file.

    Raises:
        TypeError: ``obj`` is not a dict (after :func:`to_jsonable`).
        ValueError: ``obj`` already has a ``contrastlab_sha256`` key.
    """
    data = to_jsonable(obj)
    if not isinstance(data, dict):
        raise TypeError(f"obj must be a dict to be written as checksummed JSON, got {type(data).__name__}")
    if CHECKSUM_KEY in data:
        raise ValueError(f"obj must not have a {CHECKSUM_KEY!r} key (it is added on writing)")
    if line:
        body = json.dumps(data)  # ends in "}" (or is "{}")
        digest = hashlib.sha256(body.encode("ascii")).hexdigest()
        return f'{body[:-1] + ", " if data else "{"}"{CHECKSUM_KEY}": "{digest}"}}'
    body = json.dumps(data, indent=2, sort_keys=False)  # ends in "\n}" (or is "{}")
    digest = hashlib.sha256(body.encode("ascii")).hexdigest()
    head = body[:-2] + "," if data else "{"
    return f'{head}\n  "{CHECKSUM_KEY}": "{digest}"\n}}\n'


def loads_json_verified(raw: bytes, where: str, *, required: bool = True) -> dict[str, Any]:
    """Verify and parse what :func:`dumps_json_checked` wrote (a whole file, or one ``.jsonl`` line).

    Args:
        raw: the bytes read.
        where: the file (and line) for messages.
        required: refuse text without the checksum member (else parse it as plain JSON).

    Returns:
        The object, without the ``contrastlab_sha256`` member.

    Raises:
        CorruptFileError: the checksum does not match, is missing (``required``), or the content is
            not a JSON object; the message starts with ``where``.
    """
    cut = max(0, len(raw) - 160)  # the checksum member and its neighbours are the last ~100 bytes
    m = _JSON_TRAILER.search(raw, cut) or _JSON_LINE_TRAILER.search(raw, cut)
    if m is None:
        if required or CHECKSUM_KEY.encode() in raw:
            raise CorruptFileError(
                f"{where} is corrupted or was not written by contrastlab: its {CHECKSUM_KEY} checksum is "
                "missing or damaged"
            )
        body = raw
    else:
        empty = m.group(1) == b"{"
        closing = b"\n}" if m.re is _JSON_TRAILER else b"}"
        body = raw[: m.start()] + (b"{}" if empty else closing)
        if hashlib.sha256(body).hexdigest() != m.group(2).decode("ascii"):
            raise CorruptFileError(f"{where} is corrupted: its content does not match its {CHECKSUM_KEY} checksum")
    try:
        data = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise CorruptFileError(f"{where} is not valid JSON ({type(e).__name__}: {e})") from None
    if not isinstance(data, dict):
        raise CorruptFileError(f"{where} must hold a JSON object, got {type(data).__name__}")
    return data


def write_json_atomic(path: str | os.PathLike[str], obj: Any) -> None:
    """Write the dict ``obj`` as indented, checksummed JSON to ``path`` atomically.

    See :func:`dumps_json_checked` (layout) and :func:`to_jsonable` (conversions);
    :func:`read_json_verified` reads it back.
    """
    write_text_atomic(path, dumps_json_checked(obj))


def read_json_verified(path: str | os.PathLike[str], *, required: bool = True) -> dict[str, Any]:
    """Read a JSON object written by :func:`write_json_atomic`, verifying its checksum first.

    Args:
        path: the file.
        required: a file without the checksum member is refused (the default, for files that
            contrastlab wrote); with ``False`` it is parsed as plain JSON (for files a user wrote).

    Returns:
        The object, without the ``contrastlab_sha256`` member.

    Raises:
        FileNotFoundError: ``path`` is not a file.
        CorruptFileError: the checksum does not match, is missing (``required``), or the content is
            not a JSON object; the message names the file.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{p} does not exist")
    return loads_json_verified(p.read_bytes(), str(p), required=required)


def seal_zip(archive: bytes | memoryview, magic: bytes) -> bytes:
    """Return the zip ``archive`` with its SHA-256 in the archive comment: a self-verifying zip file.

    The comment (the file's last 48 bytes) is ``magic (8) | len(archive) (8, little-endian) |
    SHA-256(archive) (32)``, and the end-of-central-directory record's comment length (the 2 bytes before
    it) becomes 48, so the result is still a valid zip that ``torch.load``, ``numpy.load`` or ``zipfile``
    read as before; :func:`open_sealed_zip` verifies it.

    Args:
        archive: a zip archive without a comment (as ``torch.save`` and ``numpy.savez`` write them).
        magic: 8 bytes naming the format.

    Raises:
        ValueError: ``magic`` is not 8 bytes, or ``archive`` does not end in a comment-less
            end-of-central-directory record.
    """
    if len(magic) != 8:
        raise ValueError(f"magic must be 8 bytes, got {len(magic)}")
    view = memoryview(archive)
    if view.nbytes < _EOCD_BYTES or bytes(view[-_EOCD_BYTES:-18]) != b"PK\x05\x06" or bytes(view[-2:]) != b"\0\0":
        raise ValueError("archive must be a zip file ending in an end-of-central-directory record without a comment")
    trailer = magic + struct.pack("<Q", view.nbytes) + hashlib.sha256(view).digest()
    return b"".join((view[:-2], struct.pack("<H", SEAL_BYTES), trailer))


def open_sealed_zip(data: bytes, magic: bytes, path: str | os.PathLike[str]) -> bytes:
    """Check the seal written by :func:`seal_zip` and return ``data`` (still a valid zip) unchanged.

    Args:
        data: the whole file's bytes.
        magic: the expected 8-byte magic.
        path: the file, for messages.

    Raises:
        CorruptFileError: no seal at the end (truncated, bytes appended, or not this kind of file), a
            recorded length that is not the file's, or a SHA-256 mismatch (a byte changed after writing);
            the message names the file.
    """
    view = memoryview(data)
    n = view.nbytes - SEAL_BYTES - 2  # the archive's length without its comment (comment length then 0)
    if n < _EOCD_BYTES - 2 or bytes(view[-SEAL_BYTES:-40]) != magic or bytes(view[n : n + 2]) != _SEAL_LEN:
        raise CorruptFileError(
            f"{path} has no contrastlab checksum at its end: truncated, extended, or not a file of this kind"
        )
    (length,) = struct.unpack("<Q", view[-40:-32])
    if length != n + 2:
        raise CorruptFileError(f"{path} is truncated or extended: it records {length} bytes, it holds {n + 2}")
    digest = hashlib.sha256(view[:n])
    digest.update(b"\0\0")  # the comment length as the archive was written
    if digest.digest() != bytes(view[-32:]):
        raise CorruptFileError(f"{path} is corrupted: its content does not match the SHA-256 at its end")
    return data


def default_out_dir(name: str, root: str | Path = "runs") -> Path:
    """``runs/NAME-YYYYmmdd-HHMMSS`` (local time)."""
    return Path(root) / f"{name}-{_dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"
