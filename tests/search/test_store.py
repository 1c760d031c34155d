"""The embedding store: round trip, refusal of every damaged or foreign store, resume of an unfinished one."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from contrastlab.io import CorruptFileError, read_json_verified, write_json_atomic
from contrastlab.npyfile import load_npy
from contrastlab.search.store import (
    JOURNAL,
    MANIFEST,
    EmbeddingStore,
    StoreError,
    StoreWriter,
    shard_bounds,
    shard_name,
    write_store,
)

MODEL = {"name": "toy", "fingerprint": "sha256:" + "ab" * 32}


def _emb(n: int = 23, d: int = 5, dtype=np.float32, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, d)).astype(dtype)


def test_shard_bounds_cover_the_ids_once():
    assert shard_bounds(23, 10) == [(0, 10), (10, 20), (20, 23)]
    assert shard_bounds(20, 10) == [(0, 10), (10, 20)]
    assert shard_bounds(3, 10) == [(0, 3)]
    with pytest.raises(ValueError, match="count"):
        shard_bounds(0, 10)
    with pytest.raises(ValueError, match="shard_rows"):
        shard_bounds(5, 0)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_round_trip(tmp_path: Path, dtype):
    emb = _emb(dtype=dtype)
    store = write_store(tmp_path / "s", emb, model=MODEL, shard_rows=10, meta={"corpus": "x"})
    again = EmbeddingStore.open(tmp_path / "s", model={"fingerprint": MODEL["fingerprint"]}, dim=5, verify=True)
    for s in (store, again):
        assert (s.count, s.dim, s.dtype, s.shard_rows) == (23, 5, np.dtype(dtype), 10)
        assert s.model == {**MODEL, "dim": 5} and s.meta == {"corpus": "x"}
        assert [(r.name, r.rows, r.id_min, r.id_max) for r in s.shards] == [
            ("shard-00000.npy", 10, 0, 9),
            ("shard-00001.npy", 10, 10, 19),
            ("shard-00002.npy", 3, 20, 22),
        ]
    ids, got = again.read_all()
    assert ids.dtype == np.int64 and np.array_equal(ids, np.arange(23))
    assert got.dtype == dtype and np.array_equal(got, emb)  # stored as given: bitwise
    ids1, emb1 = again.read_shard(1)
    assert np.array_equal(ids1, np.arange(10, 20)) and np.array_equal(emb1, emb[10:20])
    assert emb1.flags.c_contiguous and emb1.flags.writeable
    # a shard is a plain structured .npy any numpy reads
    raw = load_npy(tmp_path / "s" / "shard-00002.npy")
    assert np.array_equal(raw["id"], [20, 21, 22]) and np.array_equal(raw["emb"], emb[20:])
    assert not (tmp_path / "s" / JOURNAL).exists()
    with pytest.raises(IndexError):
        again.read_shard(3)


def test_rows_in_any_order_give_the_same_shard(tmp_path: Path):
    emb = _emb(12, 3)
    a = StoreWriter(tmp_path / "a", count=12, dim=3, shard_rows=12, model=MODEL)
    perm = np.random.default_rng(1).permutation(12)
    a.write_shard(0, perm, emb[perm])
    b = write_store(tmp_path / "b", emb, model=MODEL, shard_rows=12)
    assert a.finish().shards == b.shards  # same bytes, same checksum


def _corrupt(store: Path, name: str, how: str) -> None:
    f = store / name
    data = bytearray(f.read_bytes())
    if how == "flip":
        data[-1] ^= 1
        f.write_bytes(bytes(data))
    elif how == "truncate":
        f.write_bytes(bytes(data[:-4]))
    else:
        f.unlink()


def test_missing_or_truncated_shard_refused_on_open(tmp_path: Path):
    for how, match in (("missing", "shard missing"), ("truncate", "truncated or replaced")):
        write_store(tmp_path / how, _emb(), model=MODEL, shard_rows=10)
        _corrupt(tmp_path / how, "shard-00001.npy", how)
        with pytest.raises(StoreError, match=rf"shard-00001\.npy.*{match}"):
            EmbeddingStore.open(tmp_path / how)


def test_altered_shard_refused_on_read_and_verified_open(tmp_path: Path):
    write_store(tmp_path / "s", _emb(), model=MODEL, shard_rows=10)
    _corrupt(tmp_path / "s", "shard-00002.npy", "flip")
    store = EmbeddingStore.open(tmp_path / "s")  # size unchanged: only reading tells
    store.read_shard(0)
    with pytest.raises(CorruptFileError, match=r"shard-00002\.npy is corrupted"):
        store.read_shard(2)
    with pytest.raises(CorruptFileError, match=r"shard-00002\.npy"):
        store.read_all()
    with pytest.raises(CorruptFileError, match=r"shard-00002\.npy"):
        EmbeddingStore.open(tmp_path / "s", verify=True)


def test_swapped_shards_refused(tmp_path: Path):
    # two shards of equal size swapped: sizes match, the checksums do not
    write_store(tmp_path / "s", _emb(20), model=MODEL, shard_rows=10)
    a, b = tmp_path / "s" / shard_name(0), tmp_path / "s" / shard_name(1)
    da, db = a.read_bytes(), b.read_bytes()
    a.write_bytes(db)
    b.write_bytes(da)
    with pytest.raises(CorruptFileError, match=r"shard-00000\.npy is corrupted"):
        EmbeddingStore.open(tmp_path / "s").read_shard(0)


def test_altered_manifest_refused(tmp_path: Path):
    write_store(tmp_path / "s", _emb(), model=MODEL, shard_rows=10)
    m = tmp_path / "s" / MANIFEST
    m.write_text(m.read_text().replace('"count": 23', '"count": 24'))
    with pytest.raises(CorruptFileError, match=r"manifest\.json is corrupted"):
        EmbeddingStore.open(tmp_path / "s")


def test_inconsistent_manifest_refused_even_with_a_valid_checksum(tmp_path: Path):
    write_store(tmp_path / "s", _emb(), model=MODEL, shard_rows=10)
    m = tmp_path / "s" / MANIFEST
    data = read_json_verified(m)
    data["shards"][1]["id_min"] = 11
    write_json_atomic(m, data)
    with pytest.raises(StoreError, match=r"manifest\.json: shard 1 is recorded as"):
        EmbeddingStore.open(tmp_path / "s")


def test_another_model_or_dimension_refused(tmp_path: Path):
    write_store(tmp_path / "s", _emb(), model=MODEL, shard_rows=10)
    with pytest.raises(StoreError, match=r"manifest\.json: the store was written by model 'toy' \(fingerprint"):
        EmbeddingStore.open(tmp_path / "s", model={"fingerprint": "sha256:" + "cd" * 32})
    with pytest.raises(StoreError, match=r"manifest\.json: the store holds 5-dimensional embeddings, expected 7"):
        EmbeddingStore.open(tmp_path / "s", dim=7)


def test_not_a_store_and_unfinished_store_refused(tmp_path: Path):
    with pytest.raises(StoreError, match="does not exist"):
        EmbeddingStore.open(tmp_path / "none")
    (tmp_path / "empty").mkdir()
    with pytest.raises(StoreError, match="is not an embedding store"):
        EmbeddingStore.open(tmp_path / "empty")
    w = StoreWriter(tmp_path / "part", count=23, dim=5, shard_rows=10, model=MODEL)
    w.write_shard(0, np.arange(10), _emb()[:10])
    with pytest.raises(StoreError, match="unfinished store"):
        EmbeddingStore.open(tmp_path / "part")
    with pytest.raises(StoreError, match="2 shards not written yet"):
        w.finish()
    assert not (tmp_path / "part" / MANIFEST).exists()


def test_resume_keeps_verified_shards_and_redoes_the_rest(tmp_path: Path):
    emb = _emb(35)
    path = tmp_path / "s"
    w = StoreWriter(path, count=35, dim=5, shard_rows=10, model=MODEL)
    for i in (0, 2, 3):
        s, e = w.bounds[i]
        w.write_shard(i, np.arange(s, e), emb[s:e])
    _corrupt(path, shard_name(2), "flip")  # a damaged finished shard is written again
    (path / ".shard-00001.npy.x.tmp").write_bytes(b"half")  # a write killed mid-way
    with open(path / JOURNAL, "a") as f:
        f.write('{"shard": 1, "name": "shard-000')  # a torn journal line
    again = StoreWriter(path, count=35, dim=5, shard_rows=10, model=MODEL)
    assert again.done == {0, 3} and again.pending() == [1, 2]
    assert not (path / ".shard-00001.npy.x.tmp").exists()
    for i in again.pending():
        s, e = again.bounds[i]
        again.write_shard(i, np.arange(s, e), emb[s:e])
    store = again.finish()
    assert store.shards == write_store(tmp_path / "ref", emb, model=MODEL, shard_rows=10).shards
    assert np.array_equal(store.read_all()[1], emb)
    # a complete store of the same plan: nothing to do, manifest kept
    done = StoreWriter(path, count=35, dim=5, shard_rows=10, model=MODEL)
    assert done.pending() == [] and done.finish().shards == store.shards


def test_resume_of_another_plan_refused(tmp_path: Path):
    path = tmp_path / "s"
    w = StoreWriter(path, count=23, dim=5, shard_rows=10, model=MODEL, meta={"corpus": "a"})
    w.write_shard(0, np.arange(10), _emb()[:10])
    for kwargs, what in (
        ({"meta": {"corpus": "b"}}, "meta.corpus 'a' instead of 'b'"),
        ({"model": {"name": "other"}}, "model.name 'toy' instead of 'other', model.fingerprint"),
        ({"shard_rows": 5}, "shard_rows 10 instead of 5"),
    ):
        args = {"count": 23, "dim": 5, "shard_rows": 10, "model": MODEL, "meta": {"corpus": "a"}, **kwargs}
        with pytest.raises(StoreError, match=f"unfinished store of another plan \\({re.escape(what)}"):
            StoreWriter(path, **args)
    write_store(tmp_path / "full", _emb(), model=MODEL, shard_rows=10)
    with pytest.raises(StoreError, match=r"holds a store of another plan \(dtype 'float32' instead of 'float64'"):
        StoreWriter(tmp_path / "full", count=23, dim=5, dtype="float64", shard_rows=10, model=MODEL)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(StoreError, match="not empty and holds no embedding store"):
        StoreWriter(tmp_path / "other", count=23, dim=5, shard_rows=10, model=MODEL)


def test_writer_refuses_bad_rows(tmp_path: Path):
    w = StoreWriter(tmp_path / "s", count=23, dim=5, shard_rows=10, model=MODEL)
    emb = _emb()
    with pytest.raises(ValueError, match="ids: shard 0 must hold exactly the ids 0 … 9"):
        w.write_shard(0, np.arange(1, 11), emb[:10])
    with pytest.raises(ValueError, match="ids: shard 2 needs 3 integer ids"):
        w.write_shard(2, np.arange(20, 22), emb[20:22])
    with pytest.raises(ValueError, match=r"emb: shard 0 needs shape \(10, 5\)"):
        w.write_shard(0, np.arange(10), emb[:10, :4])
    bad = emb[:10].copy()
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="emb: shard 0 must hold finite"):
        w.write_shard(0, np.arange(10), bad)
    with pytest.raises(ValueError, match="shard index 3 out of range"):
        w.write_shard(3, np.arange(3), emb[:3])
    with pytest.raises(ValueError, match="model must be a dict"):
        StoreWriter(tmp_path / "t", count=3, dim=5, shard_rows=10, model={"fingerprint": "x"})
    with pytest.raises(ValueError, match="dtype must be one of"):
        StoreWriter(tmp_path / "t", count=3, dim=5, dtype="int8", shard_rows=10, model=MODEL)
    assert json.loads((tmp_path / "s" / JOURNAL).read_text().splitlines()[0])["plan"]["count"] == 23
