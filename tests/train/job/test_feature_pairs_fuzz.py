"""Pair files (``anchors.npy``, ``positives.npy``, ``corpus.npy``, ``negatives.npz``) under structured mutation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from contrastlab.config import ConfigError
from fuzz.targets import FAMILIES, memory_cap
from tests._fuzz_contract import contract_tests
from tests._fuzzing import MEMORY_BUDGET

test_seeds_read, test_pairs_contract = contract_tests("pairs")


def test_header_claiming_1e12_rows_is_refused_before_mapping(tmp_path: Path) -> None:
    FAMILIES["pairs"].seeds(tmp_path, 0)
    p = tmp_path / "anchors.npy"
    np.save(p, np.ones((10, 3), np.float32))
    p.write_bytes(p.read_bytes().replace(b"(10, 3)", b"(1000000000000, 3)"))
    with memory_cap(MEMORY_BUDGET), pytest.raises(ConfigError, match=rf"^data.root: {p} is corrupted"):
        FAMILIES["pairs"].read(tmp_path)
