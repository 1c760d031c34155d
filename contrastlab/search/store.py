"""An embedding store: the embeddings of a corpus in row-id shards, with a checksummed manifest.

Layout of a store folder::

    manifest.json              checksummed JSON (contrastlab.io), written last
    shard-00000.npy            rows [0, R) of the corpus
    shard-00001.npy            rows [R, 2R)
    ...

Shard ``i`` holds the rows with ids ``i·R … min((i+1)·R, N) − 1`` (``R`` = ``shard_rows``, ``N`` = ``count``),
in ascending id order; ids are the documents' positions in the corpus, so a shard's name and content are
determined by the corpus and ``R`` alone, whatever order the rows were computed in. A shard file is a plain
``.npy`` of one structured array of shape ``(rows,)`` with the fields ``id`` (``<i8``) and ``emb`` (the
store's float dtype, shape ``(D,)``): no pickle, readable by ``numpy.load`` as well.

The manifest records the format and version, ``count``, ``dim``, ``dtype``, ``shard_rows``, the model's
identity (a dict: ``name``, ``dim``, ``fingerprint`` and whatever else the writer adds), free ``meta``
(the corpus's identity for an encoded store) and one record per shard: ``name``, ``rows``, ``id_min``,
``id_max``, ``sha256`` and ``bytes`` of the file.

Verification: :meth:`EmbeddingStore.open` verifies the manifest's checksum and consistency and that every
shard file exists with its recorded size (a missing or truncated shard is refused there, naming the file);
:meth:`EmbeddingStore.read_shard` verifies the shard's SHA-256, header, shape and ids on every read (an
altered shard is refused there; ``open(..., verify=True)`` reads every shard up front).

Writing (:class:`StoreWriter`): each shard is written atomically and its record appended to the journal
``manifest.partial.jsonl`` (one checksummed JSON line per shard, after a first line with the plan: count,
dim, dtype, shard_rows, model, meta). ``manifest.json`` is written only when every shard exists, and then
the journal is removed, so a folder without ``manifest.json`` is never taken for a store. A writer opened on
an unfinished store of the same plan keeps every shard whose journal record verifies against its file and
writes only the others; a store or journal of another plan is refused. One writer at a time per folder.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from contrastlab.io import (
    CorruptFileError,
    atomic_path,
    dumps_json_checked,
    loads_json_verified,
    read_json_verified,
    sha256_file,
    to_jsonable,
    write_json_atomic,
    write_text_atomic,
)
from contrastlab.npyfile import NpyFormatError, load_npy_bytes

__all__ = [
    "FORMAT",
    "VERSION",
    "MANIFEST",
    "JOURNAL",
    "DTYPES",
    "ShardRecord",
    "StoreError",
    "EmbeddingStore",
    "StoreWriter",
    "shard_name",
    "shard_bounds",
    "write_store",
]

FORMAT = "contrastlab-embedding-store"
"""The manifest's ``format`` value."""

VERSION = 1
"""The manifest's ``version``: the layout described in this module."""

MANIFEST = "manifest.json"
"""The manifest's file name; its presence marks a complete store."""

JOURNAL = "manifest.partial.jsonl"
"""The journal of an unfinished store: the plan, then one record per finished shard."""

DTYPES = ("float16", "float32", "float64")
"""Embedding dtypes a store holds (little-endian)."""


class StoreError(ValueError):
    """A store that cannot be used as asked; the message starts with the file or folder concerned.

    Not a store, an unfinished one, one of another model or dimension, or one inconsistent with its manifest.

    A shard or manifest whose bytes do not match their checksum raises
    :class:`~contrastlab.io.CorruptFileError` instead (also a ``ValueError``).
    """


@dataclass(frozen=True)
class ShardRecord:
    """One shard as the manifest records it.

    Attributes:
        name: file name inside the store (``shard-00000.npy``).
        rows: number of rows.
        id_min: first id (``index · shard_rows``).
        id_max: last id (``id_min + rows − 1``).
        sha256: hex SHA-256 of the file.
        bytes: the file's size.
    """

    name: str
    rows: int
    id_min: int
    id_max: int
    sha256: str
    bytes: int


def shard_name(index: int) -> str:
    """The file name of shard ``index``: ``shard-00000.npy`` (five digits, more past 99,999)."""
    return f"shard-{index:05d}.npy"


def shard_bounds(count: int, shard_rows: int) -> list[tuple[int, int]]:
    """``[(start, stop), ...]`` id ranges of the shards of ``count`` rows, ``shard_rows`` per shard.

    Raises:
        ValueError: ``count`` < 1 or ``shard_rows`` < 1.
    """
    if count < 1:
        raise ValueError(f"count must be at least 1, got {count}")
    if shard_rows < 1:
        raise ValueError(f"shard_rows must be at least 1, got {shard_rows}")
    return [(s, min(s + shard_rows, count)) for s in range(0, count, shard_rows)]


def _row_dtype(dim: int, dtype: str) -> np.dtype:
    return np.dtype([("id", "<i8"), ("emb", np.dtype(dtype).newbyteorder("<"), (dim,))])


def _plan(
    count: int, dim: int, dtype: str, shard_rows: int, model: Mapping[str, Any], meta: Mapping[str, Any] | None
) -> dict[str, Any]:
    if not isinstance(count, int) or count < 1:
        raise ValueError(f"count must be a positive integer, got {count!r}")
    if not isinstance(dim, int) or dim < 1:
        raise ValueError(f"dim must be a positive integer, got {dim!r}")
    if not isinstance(shard_rows, int) or shard_rows < 1:
        raise ValueError(f"shard_rows must be a positive integer, got {shard_rows!r}")
    if str(dtype) not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    if not isinstance(model, Mapping) or not isinstance(model.get("name"), str):
        raise ValueError("model must be a dict with at least a 'name' (str): the identity of the model")
    if "dim" in model and model["dim"] != dim:
        raise ValueError(f"model: its dim {model['dim']} is not the store's dim {dim}")
    return to_jsonable(
        {
            "format": FORMAT,
            "version": VERSION,
            "count": count,
            "dim": dim,
            "dtype": str(dtype),
            "shard_rows": shard_rows,
            "model": {**model, "dim": dim},
            "meta": dict(meta or {}),
        }
    )


def _differences(have: Mapping[str, Any], want: Mapping[str, Any]) -> str:
    """``key value instead of wanted, ...`` for the plan entries that differ (one level into dicts)."""
    out = []
    for k in ("count", "dim", "dtype", "shard_rows", "model", "meta"):
        a, b = have.get(k), want.get(k)
        if isinstance(a, dict) and isinstance(b, dict):
            out += [f"{k}.{s} {a.get(s)!r} instead of {b.get(s)!r}" for s in {**a, **b} if a.get(s) != b.get(s)]
        elif a != b:
            out.append(f"{k} {a!r} instead of {b!r}")
    return ", ".join(out)


class EmbeddingStore:
    """A complete embedding store, opened read-only (see the module docstring for the layout).

    Attributes:
        path: the store folder.
        count: rows in the store (ids ``0 … count − 1``).
        dim: embedding dimension ``D``.
        dtype: the embeddings' numpy dtype.
        shard_rows: rows per shard (the last one may hold fewer).
        model: the model's identity (``name``, ``dim``, ``fingerprint``, ...).
        meta: what the writer recorded besides (an encoded store: the corpus's identity).
        shards: one :class:`ShardRecord` per shard, in id order.
    """

    def __init__(self, path: Path, manifest: Mapping[str, Any]) -> None:
        self.path = path
        self.count: int = int(manifest["count"])
        self.dim: int = int(manifest["dim"])
        self.dtype = np.dtype(manifest["dtype"])
        self.shard_rows: int = int(manifest["shard_rows"])
        self.model: dict[str, Any] = dict(manifest["model"])
        self.meta: dict[str, Any] = dict(manifest["meta"])
        self.shards: list[ShardRecord] = [ShardRecord(**r) for r in manifest["shards"]]

    def __repr__(self) -> str:
        return (
            f"EmbeddingStore({str(self.path)!r}, count={self.count}, dim={self.dim}, dtype={self.dtype}, "
            f"shards={len(self.shards)}, model={self.model.get('name')!r})"
        )

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        model: Mapping[str, Any] | None = None,
        dim: int | None = None,
        verify: bool = False,
    ) -> EmbeddingStore:
        """Open the store in ``path``, verifying its manifest and that every shard file is there, whole.

        Args:
            path: the store folder.
            model: the expected model identity: every key given must equal the manifest's (e.g.
                ``{"fingerprint": ...}``); ``None`` accepts any model.
            dim: the expected dimension; ``None`` accepts any.
            verify: also read every shard and verify its checksum (else each read verifies its shard).

        Raises:
            StoreError: not a store, an unfinished store, an inconsistent manifest, a missing or truncated
                shard, or a model or dimension other than expected; the message names the file.
            CorruptFileError: the manifest (or, with ``verify``, a shard) does not match its checksum.
        """
        root = Path(path)
        file = root / MANIFEST
        if not file.is_file():
            if (root / JOURNAL).is_file():
                raise StoreError(f"{root} is an unfinished store (an interrupted encode): re-run it to finish")
            what = "does not exist" if not root.exists() else f"is not an embedding store (no {MANIFEST})"
            raise StoreError(f"{root} {what}")
        manifest = read_json_verified(file)
        store = cls(root, _check_manifest(manifest, file))
        if dim is not None and store.dim != dim:
            raise StoreError(f"{file}: the store holds {store.dim}-dimensional embeddings, expected {dim}")
        for key, want in (model or {}).items():
            if store.model.get(key) != want:
                raise StoreError(
                    f"{file}: the store was written by model {store.model.get('name')!r} "
                    f"({key} {store.model.get(key)!r}), expected {key} {want!r}"
                )
        for rec in store.shards:
            shard = root / rec.name
            if not shard.is_file():
                raise StoreError(f"{shard}: shard missing (the manifest lists it with {rec.rows} rows)")
            size = shard.stat().st_size
            if size != rec.bytes:
                raise StoreError(f"{shard}: {size} bytes, the manifest records {rec.bytes} (truncated or replaced)")
        if verify:
            for i in range(len(store.shards)):
                store.read_shard(i)
        return store

    def read_shard(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """Shard ``i``'s ids ``(n,)`` int64 (ascending) and embeddings ``(n, D)``, verified.

        Memory: the file's bytes plus a contiguous copy of the embeddings, about twice the shard's size.

        Raises:
            IndexError: no shard ``i``.
            CorruptFileError: the file does not match its SHA-256, size, header or ids.
        """
        if not 0 <= i < len(self.shards):
            raise IndexError(f"shard index {i} out of range: the store has {len(self.shards)} shards")
        rec = self.shards[i]
        file = self.path / rec.name
        try:
            data = file.read_bytes()
        except FileNotFoundError:
            raise CorruptFileError(f"{file}: shard missing") from None
        _verify_shard_bytes(data, rec, file)
        try:
            arr = load_npy_bytes(data, str(file))
        except NpyFormatError as e:
            raise CorruptFileError(str(e)) from None
        want = _row_dtype(self.dim, self.dtype.name)
        if arr.dtype != want or arr.shape != (rec.rows,):
            raise CorruptFileError(
                f"{file} holds {arr.shape} rows of {arr.dtype}, expected ({rec.rows},) of {want} (another store's?)"
            )
        ids = np.array(arr["id"], dtype=np.int64)
        if not np.array_equal(ids, np.arange(rec.id_min, rec.id_max + 1, dtype=np.int64)):
            raise CorruptFileError(f"{file}: its ids are not {rec.id_min} … {rec.id_max} in order")
        return ids, np.ascontiguousarray(arr["emb"])

    def iter_shards(self) -> Iterator[tuple[ShardRecord, np.ndarray, np.ndarray]]:
        """``(record, ids, emb)`` of every shard in id order, each verified; one shard in memory at a time."""
        for i, rec in enumerate(self.shards):
            ids, emb = self.read_shard(i)
            yield rec, ids, emb

    def read_all(self) -> tuple[np.ndarray, np.ndarray]:
        """All ids ``(count,)`` (ascending: ``0 … count − 1``) and embeddings ``(count, D)``, verified.

        Memory: the whole store plus one shard.
        """
        ids = np.empty(self.count, dtype=np.int64)
        emb = np.empty((self.count, self.dim), dtype=self.dtype)
        for rec, i_, e_ in self.iter_shards():
            ids[rec.id_min : rec.id_max + 1] = i_
            emb[rec.id_min : rec.id_max + 1] = e_
        return ids, emb


def _verify_shard_bytes(data: bytes, rec: ShardRecord, file: Path) -> None:
    if len(data) != rec.bytes:
        raise CorruptFileError(f"{file}: {len(data)} bytes, the manifest records {rec.bytes} (truncated or replaced)")
    if hashlib.sha256(data).hexdigest() != rec.sha256:
        raise CorruptFileError(f"{file} is corrupted: its content does not match the SHA-256 in the manifest")


def _check_manifest(m: Mapping[str, Any], file: Path) -> Mapping[str, Any]:
    """Refuse a manifest whose fields are missing, mistyped or inconsistent (it passed its checksum)."""
    if m.get("format") != FORMAT or m.get("version") != VERSION:
        raise StoreError(
            f"{file}: not a contrastlab embedding store manifest of version {VERSION} "
            f"(format {m.get('format')!r}, version {m.get('version')!r})"
        )
    try:
        _plan(m["count"], m["dim"], m["dtype"], m["shard_rows"], m["model"], m["meta"])
        records = [ShardRecord(**r) for r in m["shards"]]
    except (KeyError, TypeError, ValueError) as e:
        raise StoreError(f"{file}: malformed manifest ({type(e).__name__}: {e})") from None
    bounds = shard_bounds(m["count"], m["shard_rows"])
    if len(records) != len(bounds):
        raise StoreError(f"{file}: {len(records)} shards listed, {len(bounds)} expected for {m['count']} rows")
    for i, (rec, (start, stop)) in enumerate(zip(records, bounds, strict=True)):
        if (rec.name, rec.rows, rec.id_min, rec.id_max) != (shard_name(i), stop - start, start, stop - 1):
            raise StoreError(f"{file}: shard {i} is recorded as {rec}, expected rows {start} … {stop - 1}")
    return m


# ------------------------------------------------------------------------------------------------ writing


class StoreWriter:
    """Writes a store shard by shard; resumes an unfinished store of the same plan.

    Args:
        path: the store folder (created if missing).
        count: rows of the store (ids ``0 … count − 1``).
        dim: embedding dimension.
        dtype: one of :data:`DTYPES`; embeddings are cast to it.
        shard_rows: rows per shard.
        model: the model's identity, a dict with at least ``name`` (add ``fingerprint``).
        meta: what else identifies the content (an encoded store: the corpus); compared on resuming.

    Attributes:
        done: indices of the shards already written and verified (kept from an earlier run).

    Raises:
        StoreError: ``path`` holds a store or unfinished store of another plan, or other files.
        ValueError: a bad argument, named.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        count: int,
        dim: int,
        dtype: str = "float32",
        shard_rows: int,
        model: Mapping[str, Any],
        meta: Mapping[str, Any] | None = None,
    ) -> None:
        self.path = Path(path)
        self.plan = _plan(count, dim, str(dtype), shard_rows, model, meta)
        self.bounds = shard_bounds(count, shard_rows)
        self._row_dtype = _row_dtype(dim, str(dtype))
        self.records: dict[int, ShardRecord] = {}
        self.path.mkdir(parents=True, exist_ok=True)
        for stray in self.path.glob(".*.tmp"):  # a temporary file of a write that was killed
            stray.unlink(missing_ok=True)
        previous = self._previous_records()
        for i, rec in previous.items():
            if _file_matches(self.path / rec.name, rec):
                self.records[i] = rec
        self.done = frozenset(self.records)
        if len(self.records) == len(self.bounds) and (self.path / MANIFEST).is_file():
            return  # complete and verified: nothing to write, the manifest stays
        (self.path / MANIFEST).unlink(missing_ok=True)
        lines = [dumps_json_checked({"plan": self.plan}, line=True)]
        lines += [dumps_json_checked({"shard": i, **asdict(r)}, line=True) for i, r in sorted(self.records.items())]
        write_text_atomic(self.path / JOURNAL, "".join(line + "\n" for line in lines))

    def _previous_records(self) -> dict[int, ShardRecord]:
        """The shard records of a complete store or an unfinished one in ``path`` (empty for an empty folder)."""
        manifest, journal = self.path / MANIFEST, self.path / JOURNAL
        if manifest.is_file():
            m = read_json_verified(manifest)
            have = {k: m.get(k) for k in self.plan}
            if have != self.plan:
                raise StoreError(f"{self.path} holds a store of another plan ({_differences(have, self.plan)})")
            return {i: ShardRecord(**r) for i, r in enumerate(_check_manifest(m, manifest)["shards"])}
        if journal.is_file():
            rows = journal.read_bytes().split(b"\n")
            try:
                plan = loads_json_verified(rows[0], f"{journal}, line 1").get("plan")
            except CorruptFileError:
                plan = None
            if plan != self.plan:
                detail = _differences(plan, self.plan) if isinstance(plan, dict) else "its plan is unreadable"
                raise StoreError(f"{self.path} holds an unfinished store of another plan ({detail})")
            out: dict[int, ShardRecord] = {}
            for n, raw in enumerate(rows[1:], start=2):
                with contextlib.suppress(CorruptFileError, TypeError, ValueError):  # a torn line: redo that shard
                    row = loads_json_verified(raw, f"{journal}, line {n}")
                    i = int(row.pop("shard"))
                    rec = ShardRecord(**row)
                    if 0 <= i < len(self.bounds) and rec == self._expected(i, rec.sha256, rec.bytes):
                        out[i] = rec
            return out
        if any(p.name != JOURNAL for p in self.path.iterdir()):
            raise StoreError(f"{self.path} is not empty and holds no embedding store; choose an empty or new folder")
        return {}

    def _expected(self, i: int, sha256: str, size: int) -> ShardRecord:
        start, stop = self.bounds[i]
        return ShardRecord(shard_name(i), stop - start, start, stop - 1, sha256, size)

    def pending(self) -> list[int]:
        """Indices of the shards still to write, ascending."""
        return [i for i in range(len(self.bounds)) if i not in self.records]

    def write_shard(self, i: int, ids: np.ndarray, emb: np.ndarray) -> ShardRecord:
        """Write shard ``i`` from its rows in any order: ``ids`` ``(n,)`` must be exactly its id range.

        The file is written atomically, then its record is appended to the journal.

        Raises:
            ValueError: ``i`` out of range, ``ids`` not the shard's id range, ``emb`` not ``(n, dim)`` or
                not finite.
        """
        if not 0 <= i < len(self.bounds):
            raise ValueError(f"shard index {i} out of range: the store has {len(self.bounds)} shards")
        start, stop = self.bounds[i]
        ids = np.asarray(ids)
        emb = np.asarray(emb)
        if ids.shape != (stop - start,) or ids.dtype.kind not in "iu":
            raise ValueError(f"ids: shard {i} needs {stop - start} integer ids, got shape {ids.shape} of {ids.dtype}")
        order = np.argsort(ids, kind="stable")
        if not np.array_equal(ids[order], np.arange(start, stop)):
            raise ValueError(f"ids: shard {i} must hold exactly the ids {start} … {stop - 1}")
        if emb.shape != (stop - start, self.plan["dim"]):
            raise ValueError(f"emb: shard {i} needs shape {(stop - start, self.plan['dim'])}, got {emb.shape}")
        if emb.dtype.kind != "f" or not bool(np.isfinite(emb).all()):
            raise ValueError(f"emb: shard {i} must hold finite floating point values")
        rows = np.empty(stop - start, dtype=self._row_dtype)
        rows["id"] = np.arange(start, stop)
        rows["emb"] = emb[order]
        target = self.path / shard_name(i)
        with atomic_path(target) as tmp:
            with open(tmp, "wb") as f:  # a file object: np.save would append ".npy" to a path
                np.save(f, rows, allow_pickle=False)
            rec = self._expected(i, sha256_file(tmp), tmp.stat().st_size)
        with open(self.path / JOURNAL, "a", encoding="ascii") as f:
            f.write(dumps_json_checked({"shard": i, **asdict(rec)}, line=True) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.records[i] = rec
        return rec

    def finish(self) -> EmbeddingStore:
        """Write the manifest (every shard must be written), remove the journal, and open the store.

        Raises:
            StoreError: shards are still missing.
        """
        missing = self.pending()
        if missing:
            raise StoreError(f"{self.path}: {len(missing)} shards not written yet (first: {shard_name(missing[0])})")
        manifest = {**self.plan, "shards": [asdict(self.records[i]) for i in range(len(self.bounds))]}
        if not (self.path / MANIFEST).is_file():
            write_json_atomic(self.path / MANIFEST, manifest)
        (self.path / JOURNAL).unlink(missing_ok=True)
        return EmbeddingStore.open(self.path)


def _file_matches(file: Path, rec: ShardRecord) -> bool:
    try:
        return file.stat().st_size == rec.bytes and sha256_file(file) == rec.sha256
    except OSError:
        return False


def write_store(
    path: str | os.PathLike[str],
    emb: np.ndarray,
    *,
    model: Mapping[str, Any],
    shard_rows: int,
    dtype: str | None = None,
    meta: Mapping[str, Any] | None = None,
) -> EmbeddingStore:
    """Write the rows of ``emb`` ``(N, D)`` (ids ``0 … N − 1``) as a store in ``path`` and open it.

    Args:
        path: an empty or new folder (or an unfinished store of the same content, which is completed).
        emb: the embeddings.
        model: the model's identity (``name`` required; add ``fingerprint``).
        shard_rows: rows per shard.
        dtype: one of :data:`DTYPES` (default: ``emb``'s own dtype).
        meta: anything else to record.
    """
    emb = np.asarray(emb)
    if emb.ndim != 2:
        raise ValueError(f"emb must be 2-D (N, D), got shape {emb.shape}")
    writer = StoreWriter(
        path,
        count=emb.shape[0],
        dim=emb.shape[1],
        dtype=dtype or emb.dtype.name,
        shard_rows=shard_rows,
        model=model,
        meta=meta,
    )
    for i in writer.pending():
        start, stop = writer.bounds[i]
        writer.write_shard(i, np.arange(start, stop), emb[start:stop])
    return writer.finish()
