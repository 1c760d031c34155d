"""A strict reader for the numeric arrays of a MATLAB v5 ``.mat`` file (as SVHN distributes its data).

``scipy.io.loadmat`` crashes the interpreter (a segmentation fault) on some malformed files and reads
data elements by the byte counts they declare. This reader handles only what a dataset file needs and
checks every count against the bytes present before it reads:

* the 128-byte header (``IM``/``MI`` byte order, version ``0x0100``);
* top-level ``miMATRIX`` elements and ``miCOMPRESSED`` (zlib) elements wrapping one, inflated to at most
  :data:`MAX_DEFLATE_RATIO` times their compressed size;
* inside a matrix: array flags, dimensions, name, real part; numeric classes only (double, single,
  (u)int8-64), not complex, sparse, char, cell, struct or object arrays.

Layout: *MAT-File Format*, The MathWorks (2023), chapter 1 ("Level 5 MAT-File Format"). Arrays are
returned in MATLAB's column-major order with the class's dtype (MATLAB may store a double array's
values as a smaller integer type; they are widened).
"""

from __future__ import annotations

import math
import mmap
import struct
import zlib
from pathlib import Path

import numpy as np

from contrastlab.data.base import DatasetFormatError

__all__ = ["read_mat5", "MAX_DEFLATE_RATIO"]

MAX_DEFLATE_RATIO = 1032
"""Largest expansion of deflate (RFC 1951): about 1032 output bytes per compressed byte."""

_MI_INT8, _MI_INT32, _MI_UINT32, _MI_MATRIX, _MI_COMPRESSED = 1, 5, 6, 14, 15
_DATA_TYPES = {1: "i1", 2: "u1", 3: "i2", 4: "u2", 5: "i4", 6: "u4", 7: "f4", 9: "f8", 12: "i8", 13: "u8"}
"""miTYPE codes of numeric data elements → numpy type codes (byte order added per file)."""
_CLASSES = {6: "f8", 7: "f4", 8: "i1", 9: "u1", 10: "i2", 11: "u2", 12: "i4", 13: "u4", 14: "i8", 15: "u8"}
"""mxCLASS codes of numeric arrays → the dtype the array is returned in."""
_COMPLEX_FLAG = 0x0800


class _Reader:
    def __init__(self, path: Path, order: str) -> None:
        self.path = path
        self.order = order

    def fail(self, what: str) -> DatasetFormatError:
        return DatasetFormatError(f"root: {self.path} is not a readable MATLAB v5 file: {what}")

    def tag(self, buf: bytes | mmap.mmap, pos: int, end: int) -> tuple[int, int, int, int]:
        """``(type, nbytes, data start, next element)`` of the element at ``pos``; checked against ``end``."""
        if pos + 8 > end:
            raise self.fail(f"an element tag at byte {pos} is cut off")
        (first,) = struct.unpack_from(self.order + "I", buf, pos)
        if first >> 16:  # small data element: type and size in one word, data in the next 4 bytes
            typ, nbytes = first & 0xFFFF, first >> 16
            if nbytes > 4:
                raise self.fail(f"a small element at byte {pos} claims {nbytes} bytes")
            return typ, nbytes, pos + 4, pos + 8
        (nbytes,) = struct.unpack_from(self.order + "I", buf, pos + 4)
        start = pos + 8
        if start + nbytes > end:
            raise self.fail(f"an element at byte {pos} claims {nbytes} bytes, {end - start} remain")
        padded = nbytes if typ_is_compressed(first) else -(-nbytes // 8) * 8
        return first, nbytes, start, min(start + padded, end)

    def matrix(self, buf: bytes | mmap.mmap, pos: int, end: int) -> tuple[str, np.ndarray]:
        typ, nbytes, start, _ = self.tag(buf, pos, end)
        if typ != _MI_MATRIX:
            raise self.fail(f"expected a matrix element at byte {pos}, got type {typ}")
        stop = start + nbytes
        flags_t, flags_n, p, nxt = self.tag(buf, start, stop)
        if flags_t != _MI_UINT32 or flags_n != 8:
            raise self.fail("a matrix without its array flags")
        (flags,) = struct.unpack_from(self.order + "I", buf, p)
        cls = flags & 0xFF
        if cls not in _CLASSES or flags & _COMPLEX_FLAG:
            raise self.fail(f"array class {cls} (complex: {bool(flags & _COMPLEX_FLAG)}); only real numeric arrays")
        dims_t, dims_n, p, nxt = self.tag(buf, nxt, stop)
        if dims_t != _MI_INT32 or dims_n < 8 or dims_n % 4:
            raise self.fail("a matrix without its dimensions")
        dims = struct.unpack_from(f"{self.order}{dims_n // 4}i", buf, p)
        if min(dims) < 0:
            raise self.fail(f"negative dimensions {dims}")
        name_t, name_n, p, nxt = self.tag(buf, nxt, stop)
        if name_t != _MI_INT8:
            raise self.fail("a matrix without its name")
        try:
            name = bytes(buf[p : p + name_n]).decode("ascii")
        except UnicodeDecodeError:
            raise self.fail("a variable name that is not ASCII") from None
        real_t, real_n, p, nxt = self.tag(buf, nxt, stop)
        if real_t not in _DATA_TYPES:
            raise self.fail(f"variable {name!r} has data of type {real_t}")
        stored = np.dtype(self.order + _DATA_TYPES[real_t])
        count = math.prod(dims)
        if count * stored.itemsize != real_n:
            raise self.fail(f"variable {name!r} of shape {dims} holds {real_n} bytes of {stored}")
        values = np.frombuffer(buf, dtype=stored, count=count, offset=p)
        return name, values.astype(_CLASSES[cls]).reshape(dims, order="F")


def typ_is_compressed(first_word: int) -> bool:
    """Whether a (long-form) tag's type is ``miCOMPRESSED``, whose data is not padded to 8 bytes."""
    return first_word == _MI_COMPRESSED


def read_mat5(path: str | Path) -> dict[str, np.ndarray]:
    """The numeric arrays of a MATLAB v5 file, by variable name.

    Raises:
        DatasetFormatError: naming the file, for anything but a well-formed v5 file of real numeric arrays.
    """
    p = Path(path)
    with open(p, "rb") as f:
        if p.stat().st_size < 128:
            raise DatasetFormatError(f"root: {p} is not a MATLAB v5 file (shorter than its 128-byte header)")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            order = {b"IM": "<", b"MI": ">"}.get(bytes(m[126:128]))
            if order is None or struct.unpack_from(order + "H", m, 124)[0] != 0x0100:
                raise DatasetFormatError(f"root: {p} is not a MATLAB v5 file (header {bytes(m[116:128])!r})")
            reader = _Reader(p, order)
            out: dict[str, np.ndarray] = {}
            pos, end = 128, len(m)
            while pos < end:
                typ, nbytes, start, nxt = reader.tag(m, pos, end)
                if typ == _MI_COMPRESSED:
                    inflater = zlib.decompressobj()
                    try:
                        inner = inflater.decompress(m[start : start + nbytes], MAX_DEFLATE_RATIO * nbytes + 64)
                    except zlib.error as e:
                        raise reader.fail(f"a compressed element at byte {pos} does not inflate ({e})") from None
                    if inflater.unconsumed_tail:
                        raise reader.fail(f"a compressed element at byte {pos} inflates beyond its size bound")
                    name, arr = reader.matrix(inner, 0, len(inner))
                elif typ == _MI_MATRIX:
                    name, arr = reader.matrix(m, pos, end)
                else:
                    raise reader.fail(f"top-level element of type {typ} at byte {pos}")
                out[name] = arr
                pos = nxt
    return out
