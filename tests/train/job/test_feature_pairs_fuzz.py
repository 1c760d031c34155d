"""Pair files (``anchors.npy``, ``positives.npy``, ``corpus.npy``, ``negatives.npz``) under structured mutation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given

from contrastlab.config import ConfigError
from fuzz.targets import FAMILIES, memory_cap
from tests._fuzzing import FUZZ_SETTINGS, MEMORY_BUDGET, assert_contract, mutated_inputs, seeds


def test_seeds_read() -> None:
    assert {assert_contract("pairs", s) for s in seeds("pairs")} == {"ok"}


@FUZZ_SETTINGS
@given(mutated_inputs("pairs"))
def test_pairs_contract(data: bytes) -> None:
    assert_contract("pairs", data)


def test_header_claiming_1e12_rows_is_refused_before_mapping(tmp_path: Path) -> None:
    FAMILIES["pairs"].seeds(tmp_path, 0)
    p = tmp_path / "anchors.npy"
    np.save(p, np.ones((10, 3), np.float32))
    p.write_bytes(p.read_bytes().replace(b"(10, 3)", b"(1000000000000, 3)"))
    with memory_cap(MEMORY_BUDGET), pytest.raises(ConfigError, match=rf"^data.root: {p} is corrupted"):
        FAMILIES["pairs"].read(tmp_path)
