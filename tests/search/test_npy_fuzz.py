"""``.npy``/``.safetensors`` embedding files as the search CLI and ``NpyBlocks`` read them, under mutation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given

from contrastlab.cli._options import load_matrix
from contrastlab.cli.search import main
from contrastlab.search.softmax import NpyBlocks
from tests._fuzzing import FUZZ_SETTINGS, assert_contract, mutated_inputs


@FUZZ_SETTINGS
@given(mutated_inputs("npy"))
def test_npy_contract(data: bytes) -> None:
    assert_contract("npy", data)


def test_empty_file_names_the_file(tmp_path: Path) -> None:
    # found by atheris: an empty .npy raised EOFError from numpy
    p = tmp_path / "e.npy"
    p.write_bytes(b"")
    with pytest.raises(ValueError, match=rf"^embeddings: {p} is not a valid .npy file"):
        load_matrix(str(p), None, "embeddings")
    with pytest.raises(ValueError, match=str(p)):
        NpyBlocks(p)


def test_fortran_order_refusal_names_the_file(tmp_path: Path) -> None:
    # found by atheris: the message said "path must hold ..." without the path
    p = tmp_path / "f.npy"
    np.save(p, np.asfortranarray(np.ones((3, 2))))
    with pytest.raises(ValueError, match=rf"path {p} must hold a C-ordered"):
        NpyBlocks(p)
    assert load_matrix(str(p), None, "embeddings").flags.f_contiguous  # the CLI reads it as it is


def test_cli_exits_2_with_one_line_on_a_huge_header(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "x.npy"
    np.save(p, np.ones((2, 3), np.float32))
    p.write_bytes(p.read_bytes().replace(b"(2, 3)", b"(1000000000000, 3)"))
    assert main(["build", "--embeddings", str(p), "--out", str(tmp_path / "idx")]) == 2  # bad input
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "declares shape (1000000000000, 3)" in err
    assert not (tmp_path / "idx").exists()
