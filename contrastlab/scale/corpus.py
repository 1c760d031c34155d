r"""A text corpus on disk, as ``contrastlab encode`` reads it: documents with ids, read shard by shard.

Two forms:

- a FILE: UTF-8 text, one document per line. Lines end in ``\n`` (a ``\r`` before it is dropped); a
  final newline does not start another document; an empty line is an empty document (it keeps the ids of
  the lines after it equal to their line numbers − 1).
- a DIR: its ``*.txt`` files (not those of sub-folders), in sorted order of their names, one document per
  file (the file's whole UTF-8 content).

A document's id is its position in that order, from 0. Bytes that are not UTF-8 and NUL bytes are
refused, naming the file and line, and so is a corpus without documents.

:meth:`TextCorpus.scan` reads the corpus once (memory: one line or file at a time) to check it, count its
documents and hash it (SHA-256 of the bytes; for a DIR, of each file's name, size and bytes), and records
the byte offset of every ``stride``-th line, so that :meth:`TextCorpus.read` reads the documents
``start … stop − 1`` without reading what comes before: it seeks to the last recorded offset at or before
``start`` and skips at most ``stride − 1`` lines. A Ray task reads its texts from the corpus itself, which
must therefore be at the same path on every node.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

__all__ = ["TextCorpus"]


def _decode(raw: bytes, where: str) -> str:
    nul = raw.find(b"\0")
    if nul >= 0:
        raise ValueError(f"{where}: holds a NUL byte at column {nul + 1}; the corpus must be text")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{where}: bytes that are not UTF-8 at column {e.start + 1}") from None


def _line(raw: bytes) -> bytes:
    raw = raw[:-1] if raw.endswith(b"\n") else raw
    return raw[:-1] if raw.endswith(b"\r") else raw


@dataclass(frozen=True)
class TextCorpus:
    """A checked corpus: where it is, how many documents, its hash, and where each stride of lines starts.

    Attributes:
        path: the FILE or DIR.
        kind: ``"file"`` or ``"dir"``.
        count: number of documents.
        sha256: hex SHA-256 of the corpus (see the module docstring).
        bytes: total size of the text read.
        stride: documents per offset (the shard size of the encode that scanned it).
        offsets: for a FILE, the byte offset of documents ``0, stride, 2·stride, …``; empty for a DIR.
        files: for a DIR, the document files' names in id order; empty for a FILE.
    """

    path: Path
    kind: Literal["file", "dir"]
    count: int
    sha256: str
    bytes: int
    stride: int
    offsets: tuple[int, ...] = ()
    files: tuple[str, ...] = ()

    @classmethod
    def scan(cls, path: str | os.PathLike[str], *, stride: int) -> TextCorpus:
        """Check, count and hash the corpus at ``path``, recording offsets every ``stride`` documents.

        Raises:
            ValueError: no such file or folder, no documents, a NUL byte or bytes that are not UTF-8; the
                message starts with the file (and line).
        """
        if not isinstance(stride, int) or stride < 1:
            raise ValueError(f"stride must be a positive integer, got {stride!r}")
        p = Path(path)
        if p.is_dir():
            return cls._scan_dir(p, stride)
        if not p.is_file():
            raise ValueError(f"{p}: no such file or folder")
        h = hashlib.sha256()
        offsets: list[int] = []
        count = size = 0
        with open(p, "rb") as f:
            for raw in f:
                if count % stride == 0:
                    offsets.append(size)
                _decode(raw, f"{p}, line {count + 1}")
                h.update(raw)
                size += len(raw)
                count += 1
        if count == 0:
            raise ValueError(f"{p}: the file is empty; the corpus needs at least one document (one per line)")
        return cls(p, "file", count, h.hexdigest(), size, stride, offsets=tuple(offsets))

    @classmethod
    def _scan_dir(cls, p: Path, stride: int) -> TextCorpus:
        names = sorted(f.name for f in p.iterdir() if f.suffix == ".txt" and f.is_file())
        if not names:
            raise ValueError(f"{p}: the folder holds no *.txt files; the corpus needs at least one document")
        h = hashlib.sha256()
        size = 0
        for name in names:
            raw = (p / name).read_bytes()
            _decode(raw, str(p / name))
            h.update(f"{name}\0{len(raw)}\0".encode())
            h.update(raw)
            size += len(raw)
        return cls(p, "dir", len(names), h.hexdigest(), size, stride, files=tuple(names))

    def read(self, start: int, stop: int) -> list[str]:
        """The documents ``start … stop − 1`` (a FILE: reads from the recorded offset at or before ``start``).

        Raises:
            ValueError: an empty range or one outside the corpus, or a corpus that changed since the scan
                (fewer lines, or bytes no longer text).
        """
        if not (0 <= start < stop <= self.count):
            raise ValueError(f"documents {start} … {stop - 1}: not a non-empty range of 0 … {self.count - 1}")
        if self.kind == "dir":
            return [_decode((self.path / n).read_bytes(), str(self.path / n)) for n in self.files[start:stop]]
        out: list[str] = []
        with open(self.path, "rb") as f:
            first = start - start % self.stride
            f.seek(self.offsets[first // self.stride])
            for n in range(first, start):
                if not f.readline():
                    raise ValueError(f"{self.path}: ends before line {n + 1}; the corpus changed since it was read")
            for n in range(start, stop):
                raw = f.readline()
                if not raw:
                    raise ValueError(f"{self.path}: ends before line {n + 1}; the corpus changed since it was read")
                out.append(_decode(_line(raw), f"{self.path}, line {n + 1}"))
        return out

    def identity(self) -> dict[str, Any]:
        """What identifies the content: ``kind``, ``documents``, ``bytes``, ``sha256`` (not the path)."""
        return {"kind": self.kind, "documents": self.count, "bytes": self.bytes, "sha256": self.sha256}
