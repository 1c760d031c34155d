"""Reading ``.npy`` and ``.npz`` files without trusting their headers.

``numpy.load`` believes a file's header: 128 bytes that claim a shape of ``(10**12,)`` make it allocate
the array before it finds the data missing, and an object dtype needs pickle. The readers here read the
header first (numpy's own parser, header at most 10,000 bytes), refuse object dtypes, and check that the
bytes the header promises are the bytes present (the file size for ``.npy``, the member's uncompressed
size for ``.npz``) before allocating anything. Every malformed file raises :class:`NpyFormatError` (a
``ValueError``) whose message names the file.

Memory: a ``.npy`` read allocates exactly the file's data bytes. An ``.npz`` member is accepted only if
stored or deflated and its declared size is at most :data:`MAX_DEFLATE_RATIO` times its compressed size
(deflate cannot expand further), so an ``.npz`` read allocates at most about 1,032 times the archive's size.
"""

from __future__ import annotations

import io
import math
import tokenize
import zipfile
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any, Literal

import numpy as np

__all__ = ["NpyFormatError", "load_npy", "load_npy_bytes", "load_npz", "read_npy_header", "MAX_DEFLATE_RATIO"]

MAX_DEFLATE_RATIO = 1032
"""Largest expansion of deflate (RFC 1951): 258 bytes from a 2-bit code, so about 1032 bytes per input byte."""

_HEADER_LIMIT = 10_000  # numpy's default max_header_size
# numpy's header parser raises these on malformed headers (tokenize for its Python 2 header fix-up)
_PARSE_ERRORS = (
    ValueError,
    TypeError,
    SyntaxError,
    RecursionError,
    OverflowError,
    EOFError,
    KeyError,
    tokenize.TokenError,
)
#: What reading a damaged zip archive can raise. ``zipfile`` signals an unsupported zip version (a header
#: field an attacker or a bit flip sets) with ``NotImplementedError``; checkpoints share this list.
ZIP_READ_ERRORS = (
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    OSError,
    EOFError,
    ValueError,
    NotImplementedError,
    zlib.error,
)


class NpyFormatError(ValueError):
    """A ``.npy``/``.npz`` file is malformed, holds an object dtype, or its header disagrees with its size."""


def _header(f: IO[bytes], where: str) -> tuple[tuple[int, ...], bool, np.dtype]:
    """Parse the magic string and header of an open ``.npy`` stream; leave it at the first data byte.

    The header's length field is checked before the header is read: numpy reads a version-2 header of
    any declared length (up to 4 GiB) before comparing it with its limit.
    """
    fmt = np.lib.format
    head = f.read(8)
    if len(head) < 8 or head[:6] != b"\x93NUMPY":
        raise NpyFormatError(f"{where} is not a valid .npy file (no NUMPY magic string)")
    if head[6:8] not in (b"\x01\x00", b"\x02\x00"):
        raise NpyFormatError(f"{where} has .npy format version {tuple(head[6:8])}; 1.0 and 2.0 are read")
    size_field = f.read(2 if head[6] == 1 else 4)
    length = int.from_bytes(size_field, "little")
    if len(size_field) < (2 if head[6] == 1 else 4) or length > _HEADER_LIMIT:
        raise NpyFormatError(f"{where} is not a valid .npy file (header length {length}, at most {_HEADER_LIMIT})")
    text = f.read(length)
    if len(text) < length:
        raise NpyFormatError(f"{where} is truncated inside its header")
    buffer = io.BytesIO(head + size_field + text)
    try:
        version = fmt.read_magic(buffer)
        read = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
        shape, fortran, dtype = read(buffer, max_header_size=_HEADER_LIMIT)
    except _PARSE_ERRORS as e:
        raise NpyFormatError(f"{where} is not a valid .npy file ({type(e).__name__}: {_first_line(e)})") from None
    if dtype.hasobject:
        raise NpyFormatError(f"{where} holds an object array ({dtype}); only plain numeric arrays are read")
    return tuple(int(s) for s in shape), bool(fortran), dtype


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:200] if text else type(e).__name__


def _nbytes(shape: tuple[int, ...], dtype: np.dtype) -> int:
    return math.prod(shape) * dtype.itemsize


def read_npy_header(path: str | Path) -> tuple[tuple[int, ...], bool, np.dtype, int]:
    """The ``(shape, fortran_order, dtype, data_offset)`` of an ``.npy`` file, checked against its size.

    Raises:
        NpyFormatError: a bad header, an object dtype, or a data size other than ``prod(shape) * itemsize``.
        FileNotFoundError: no such file.
    """
    p = Path(path)
    size = p.stat().st_size
    with open(p, "rb") as f:
        shape, fortran, dtype = _header(f, str(p))
        offset = f.tell()
    want = _nbytes(shape, dtype)
    if want != size - offset:
        raise NpyFormatError(
            f"{p} is corrupted: its header declares shape {shape} of {dtype} ({want} bytes) "
            f"but the file holds {size - offset} data bytes"
        )
    return shape, fortran, dtype, offset


def load_npy(path: str | Path, *, mmap: bool = False) -> np.ndarray:
    """Load an ``.npy`` file (never unpickling); with ``mmap=True`` as a read-only memory map.

    Raises:
        NpyFormatError: see :func:`read_npy_header`.
        FileNotFoundError: no such file.
    """
    p = Path(path)
    shape, fortran, dtype, offset = read_npy_header(p)
    order: Literal["C", "F"] = "F" if fortran else "C"
    if _nbytes(shape, dtype) == 0:
        return np.empty(shape, dtype=dtype, order=order)
    try:
        if mmap:
            return np.memmap(p, dtype=dtype, mode="r", offset=offset, shape=shape, order=order)
        with open(p, "rb") as f:
            f.seek(offset)
            flat = np.fromfile(f, dtype=dtype, count=math.prod(shape))
    except (ValueError, OSError) as e:  # e.g. the file shrank between the check and the read
        raise NpyFormatError(f"{p} could not be read ({_first_line(e)})") from None
    if flat.size != math.prod(shape):
        raise NpyFormatError(f"{p} is truncated: expected {math.prod(shape)} items, read {flat.size}")
    return flat.reshape(shape, order=order)


def load_npy_bytes(data: bytes, where: str) -> np.ndarray:
    """The array of an ``.npy`` file already read into memory: a read-only view of ``data``, never unpickled.

    For callers that verify a file's checksum on the bytes they read and then parse those same bytes.

    Raises:
        NpyFormatError: a bad header, an object dtype, or a data size other than ``prod(shape) * itemsize``;
            the message names ``where``.
    """
    stream = io.BytesIO(data)
    shape, fortran, dtype = _header(stream, where)
    offset = stream.tell()
    want = _nbytes(shape, dtype)
    if want != len(data) - offset:
        raise NpyFormatError(
            f"{where} is corrupted: its header declares shape {shape} of {dtype} ({want} bytes) "
            f"but the file holds {len(data) - offset} data bytes"
        )
    order: Literal["C", "F"] = "F" if fortran else "C"
    return np.frombuffer(data, dtype=dtype, count=math.prod(shape), offset=offset).reshape(shape, order=order)


def _member(zf: zipfile.ZipFile, key: str, where: str) -> np.ndarray:
    name = key + ".npy"
    try:
        info = zf.getinfo(name)
    except KeyError:
        have = sorted(n.removesuffix(".npy") for n in zf.namelist())
        raise NpyFormatError(f"{where} has no array {key!r} (it has {have})") from None
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise NpyFormatError(f"{where}: member {name} uses compression method {info.compress_type}; stored or deflate")
    if info.file_size > MAX_DEFLATE_RATIO * info.compress_size + _HEADER_LIMIT:
        raise NpyFormatError(
            f"{where}: member {name} claims {info.file_size} bytes from {info.compress_size} compressed ones"
        )
    with zf.open(info) as m:
        shape, fortran, dtype = _header(m, f"{where} (member {name})")
        want = _nbytes(shape, dtype)
        if want != info.file_size - m.tell():
            raise NpyFormatError(
                f"{where} is corrupted: member {name} declares shape {shape} of {dtype} ({want} bytes) "
                f"but holds {info.file_size - m.tell()} data bytes"
            )
        data = m.read(want)
        m.read(1)  # reach the end of the member, where zipfile checks its CRC-32
    if len(data) != want:
        raise NpyFormatError(f"{where}: member {name} is truncated")
    order: Literal["C", "F"] = "F" if fortran else "C"
    return np.frombuffer(data, dtype=dtype).reshape(shape, order=order).copy()


def load_npz(path: str | Path, keys: Sequence[str], *, optional: Sequence[str] = ()) -> dict[str, np.ndarray]:
    """Load the arrays ``keys`` (and those of ``optional`` that are present) of an ``.npz`` archive.

    Never unpickles; each member is checked as :func:`load_npy` checks a file.

    Raises:
        NpyFormatError: not a zip archive, a member missing or malformed, a bad CRC, or an implausible size.
        FileNotFoundError: no such file.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{p} does not exist")
    out: dict[str, Any] = {}
    try:
        with zipfile.ZipFile(p) as zf:
            for key in keys:
                out[key] = _member(zf, key, str(p))
            for key in optional:
                if key + ".npy" in zf.namelist():
                    out[key] = _member(zf, key, str(p))
    except NpyFormatError:
        raise
    except (*ZIP_READ_ERRORS, RuntimeError) as e:  # RuntimeError: an encrypted member
        raise NpyFormatError(f"{p} is not a readable .npz archive ({type(e).__name__}: {_first_line(e)})") from None
    return out
