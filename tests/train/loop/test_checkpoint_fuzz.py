"""Checkpoint files under structured mutation: a valid checkpoint or a ``CheckpointError`` naming the file."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from contrastlab.train.loop.checkpoint import CheckpointError, load_checkpoint
from fuzz.targets import FAMILIES, memory_cap, seal_checkpoint, unseal_checkpoint
from tests._fuzz_contract import contract_tests
from tests._fuzzing import MEMORY_BUDGET

test_seeds_read, test_checkpoint_contract = contract_tests("checkpoint")


def _seed_payload(tmp_path: Path) -> tuple[Path, bytearray]:
    """A valid checkpoint's path and the zip archive ``torch.save`` wrote (the file without its seal)."""
    FAMILIES["checkpoint"].seeds(tmp_path, 0)
    p = tmp_path / "checkpoint.pt"
    return p, bytearray(unseal_checkpoint(p.read_bytes()))


def _write_framed(p: Path, payload: bytearray) -> None:
    """Seal a mutated archive with a valid SHA-256 (a tamperer who recomputes the checksum)."""
    p.write_bytes(bytes(payload))
    seal_checkpoint(p.parent, p)


def test_record_declaring_more_bytes_than_the_file_is_refused_before_torch_reads_it(tmp_path: Path) -> None:
    # torch.load allocated a record at the size the zip directory declares (4 GiB here)
    p, raw = _seed_payload(tmp_path)
    for sig, off in ((b"PK\x03\x04", 18), (b"PK\x01\x02", 20)):  # compressed and uncompressed sizes
        pos = raw.index(sig)
        while pos >= 0:
            raw[pos + off : pos + off + 8] = struct.pack("<II", 2**32 - 1, 2**32 - 1)
            pos = raw.find(sig, pos + 4)
    _write_framed(p, raw)
    with memory_cap(MEMORY_BUDGET), pytest.raises(CheckpointError, match="declares 4294967295 bytes"):
        load_checkpoint(p)


def test_unsupported_zip_version_is_a_checkpoint_error(tmp_path: Path) -> None:
    # found by atheris: zipfile raised NotImplementedError("zip file version 25.5")
    p, raw = _seed_payload(tmp_path)
    pos = raw.index(b"PK\x01\x02")
    raw[pos + 6] = 255  # version needed to extract
    _write_framed(p, raw)
    with pytest.raises(CheckpointError, match=rf"checkpoint {p} is corrupt \(not a readable zip archive"):
        load_checkpoint(p)
