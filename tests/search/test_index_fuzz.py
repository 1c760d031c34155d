"""Saved index folders under structured mutation of any one file, and one test per finding.

Mutations of ``index.faiss``/``ids.npy``/``labels.npy`` are also tried with ``meta.json``'s sizes and
SHA-256s recomputed (a tamperer who updates the sidecar), so that they reach faiss's and numpy's readers.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given

from contrastlab.io import CHECKSUM_KEY
from contrastlab.search.index import EmbeddingIndex, IndexFormatError
from fuzz.targets import FAMILIES, checksummed_json, memory_cap, resign_index
from tests._fuzz_contract import contract_tests
from tests._fuzzing import FUZZ_SETTINGS, MEMORY_BUDGET, assert_contract, mutated_inputs

test_seeds_read, test_index_contract = contract_tests("index")


@FUZZ_SETTINGS
@given(mutated_inputs("index"))
def test_index_contract_with_resigned_sidecar(data: bytes) -> None:
    assert_contract("index", bytes([data[0] | 4]) + data[1:])


def _edit_meta(root: Path, **fields: object) -> None:
    meta = json.loads((root / "meta.json").read_text())
    meta.pop(CHECKSUM_KEY)
    meta.update(fields)
    (root / "meta.json").write_bytes(checksummed_json(meta))  # a tamperer who recomputes the checksum


def test_sidecar_cannot_list_other_files(tmp_path: Path) -> None:
    # "/dev/zero" of size 0 matched its listed size, then hashing it never ended
    FAMILIES["index"].seeds(tmp_path, 0)
    meta = json.loads((tmp_path / "meta.json").read_text())
    for name in ("/dev/zero", "../outside.npy"):
        _edit_meta(tmp_path, files={**meta["files"], name: {"bytes": 0, "sha256": ""}})
        with pytest.raises(IndexFormatError, match="lists files that are not part of an index"):
            EmbeddingIndex.load(tmp_path)


@pytest.mark.parametrize("value", [1e400, -1e400, float("nan")])
def test_non_finite_ntotal_is_a_format_error(tmp_path: Path, value: float) -> None:
    FAMILIES["index"].seeds(tmp_path, 0)
    _edit_meta(tmp_path, ntotal=value)  # json writes Infinity/NaN, which json.loads reads back
    with pytest.raises(IndexFormatError, match="meta.json is corrupted"):
        EmbeddingIndex.load(tmp_path)


def test_deeply_nested_sidecar_is_a_format_error(tmp_path: Path) -> None:
    FAMILIES["index"].seeds(tmp_path, 0)
    (tmp_path / "meta.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(IndexFormatError, match="meta.json"):
        EmbeddingIndex.load(tmp_path)


def test_ids_header_claiming_1e12_rows_is_refused_before_allocating(tmp_path: Path) -> None:
    FAMILIES["index"].seeds(tmp_path, 0)
    ids = tmp_path / "ids.npy"
    ids.write_bytes(ids.read_bytes().replace(b"'shape': (6,)", b"'shape': (1000000000000,)"))
    resign_index(tmp_path)
    with memory_cap(MEMORY_BUDGET), pytest.raises(IndexFormatError, match="declares shape"):
        EmbeddingIndex.load(tmp_path)


def test_resigned_truncated_faiss_file_is_a_format_error(tmp_path: Path) -> None:
    FAMILIES["index"].seeds(tmp_path, 0)
    f = tmp_path / "index.faiss"
    f.write_bytes(f.read_bytes()[:40])
    resign_index(tmp_path)
    with pytest.raises(IndexFormatError, match="cannot read the index files"):
        EmbeddingIndex.load(tmp_path)
    assert np.load(tmp_path / "ids.npy").shape == (6,)  # the other files were left valid
